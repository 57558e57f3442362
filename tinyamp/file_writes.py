"""How a file's bytes reach a path safely (the checkpoint format is ``serialization.py``'s).

A regular file (or a new path) is written to a temporary file in the same folder with the target's
permissions from its first byte, fsynced, and renamed over the target: a crash or kill leaves the old
file, and a leftover temporary is removed by the next write once its process is gone. A path that is
not a regular file (a pipe, ``/dev/null``, a device) is written into, as ``torch.save`` does.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import secrets
import stat
from typing import Any, BinaryIO, Callable


def write_to_path(path: str, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write(handle)`` so that ``path`` ends up holding what it wrote: atomically for a regular file."""
    if _is_special_file(path):
        _write_in_place(path, write)
    else:
        _write_atomically(path, write)


def _is_special_file(path: str) -> bool:
    """Whether ``path`` (through symlinks) exists and is not a regular file: a pipe, a device, a socket."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _write_in_place(path: str, write: Callable[[BinaryIO], None]) -> None:
    """Run ``write`` on ``path`` opened for writing, as torch.save does: the pipe or device stays itself."""
    try:
        handle = open(path, "wb")  # noqa: SIM115 - closed below, its own errors named
    except OSError as exc:
        raise OSError(exc.errno, f"ta.save: cannot write '{path}': {exc.strerror}") from exc
    with handle:
        write(_Unseekable(handle))


class _Unseekable(io.RawIOBase):
    """A write-only view of a pipe or device: zipfile then writes in one pass (a device's tell() means nothing)."""

    def __init__(self, handle: BinaryIO) -> None:
        super().__init__()
        self.handle = handle

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return self.handle.write(data)

    def flush(self) -> None:
        self.handle.flush()


def _write_atomically(path: str, write: Callable[[BinaryIO], None]) -> None:
    """Run ``write`` on a temporary file next to ``path``, fsync it, then rename it over ``path``."""
    target = os.path.realpath(path)  # through a symlink, as open() would write
    folder, base = os.path.split(target)
    try:
        fd, temp, new_mode = _create_temporary(folder, base, _mode_of(target))
    except OSError as exc:
        raise OSError(exc.errno, f"ta.save: cannot write '{path}': {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())  # the data is on disk before the rename makes it visible
            mode = _mode_of(target)  # a replaced file keeps its permissions, even if they changed meanwhile
            _set_mode(handle.fileno(), temp, new_mode if mode is None else mode)
        os.replace(temp, target)
        _remove_stale_temporaries(folder, base)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(exc, OSError) and exc.errno is not None:
            raise OSError(exc.errno, f"ta.save: writing '{path}' failed ({exc.strerror}); the file was left "
                                     f"as it was") from exc
        raise
    _fsync_folder(folder)  # the rename itself survives a power cut


def _mode_of(path: str) -> int | None:
    """The permission bits of ``path``, None when it does not exist."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None


def _set_mode(fd: int, path: str, mode: int) -> None:
    if hasattr(os, "fchmod"):
        os.fchmod(fd, mode)
    else:  # Windows: only the read-only bit exists
        os.chmod(path, mode)


def _create_temporary(folder: str, base: str, target_mode: int | None) -> tuple[int, str, int]:
    """A new empty file ``.<base>.<pid>.<random>.tmp`` in ``folder`` with the target's permissions.

    Returns (fd, path, the mode a new target gets). A new target gets what open()
    gives (0o666 less the umask, read from the new empty file without changing the
    process-wide umask); until then its temporary is the owner's alone (0o600).
    """
    while True:
        temp = os.path.join(folder, f".{base}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        except FileExistsError:
            continue
        try:
            new_mode = stat.S_IMODE(os.fstat(fd).st_mode)
            _set_mode(fd, temp, new_mode & 0o600 if target_mode is None else target_mode)  # before any byte
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        return fd, temp, new_mode


def _remove_stale_temporaries(folder: str, base: str) -> None:
    """Remove the temporaries of earlier saves to ``base`` whose process no longer runs (a killed save).

    Only names of ``_create_temporary``'s pattern for this file; a temporary of a
    running process (another save in progress, this process's other threads) stays.
    """
    pattern = re.compile(rf"\.{re.escape(base)}\.(\d+)\.[0-9a-f]{{8}}\.tmp")
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            match = pattern.fullmatch(name)
            if match and not _process_runs(int(match.group(1))):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))


def _process_runs(pid: int) -> bool:
    """Whether a process with this id runs on this machine (True when that cannot be told)."""
    if pid == os.getpid() or os.name == "nt":  # Windows' os.kill(pid, 0) would end the process
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True  # it exists under another user, or the check is not available
    return True


def _fsync_folder(folder: str) -> None:
    if not hasattr(os, "O_DIRECTORY"):  # Windows: a folder cannot be opened to fsync it
        return
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
