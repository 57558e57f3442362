"""``ta.save`` and ``ta.load``: checkpoints without pickle, written atomically, read defensively.

A checkpoint is a zip archive of uncompressed (stored) members:

- ``tinyamp.json``: the manifest, the saved object's structure where every value
  is a tagged JSON entry (``{"t": "int", "v": 3}``, ``{"t": "dict", "items": [...]}``)
  and every tensor or NumPy array is a placeholder naming its file, dtype, shape,
  device and ``requires_grad``;
- ``arrays/<n>.npy``: one NumPy ``.npy`` file per array. bfloat16 has no ``.npy``
  type, so it is stored as its uint16 bit pattern and the manifest records the
  real dtype.

Saving to a path is atomic: the archive is written to a temporary file in the
same folder, flushed and fsynced, then renamed over the target with
``os.replace``. A crash, a kill or a full disk during the write leaves the
previous checkpoint as it was (a kill can leave the ``.<name>.<pid>.*.tmp``
file behind, which the next save to that path removes once no process with
that id runs on this machine; any other failure removes it at once). The
temporary file has the target's permissions before its first byte (0600 for a
new file until the write is complete, then what ``open()`` would give), so a
private checkpoint is never readable by others, not even half-written. A path
that exists and is not a regular file (a named pipe, ``/dev/null``, a device)
is written into, as ``torch.save`` does: a rename would replace it. Saving to an
open file object writes into it directly at its position, as ``torch.save`` does.

Loading from a file object reads the archive that starts at its position (two
checkpoints saved back to back into one stream load one after the other) and
leaves the position at that archive's end. Loading parses JSON and ``.npy`` headers only, so a checkpoint from an untrusted
source cannot run code (``weights_only`` is accepted for PyTorch compatibility
and is always effectively true). Sizes are checked against the archive before
anything is allocated: every member must be stored uncompressed and lie inside
the file, and every array's header must describe exactly the bytes its member
holds, so a crafted header cannot ask for more memory than the file's own size.
Containers nest at most ``MAX_NESTING`` deep (checked on save and on load).
Anything unexpected raises :class:`CheckpointError`, naming the file and the
problem; a missing or unreadable file raises the usual ``OSError``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import struct
import zipfile
import zlib
from collections import OrderedDict
from typing import Any, BinaryIO, Iterator, Union

import numpy as np

from . import backend
from . import dtypes as dt
from .tensor import Tensor
from .backend import cuda_available
from .file_writes import write_to_path
from .nn.parameter import Parameter
from .version import __version__

__all__ = ["save", "load", "CheckpointError", "MAX_NESTING"]

FORMAT = "tinyamp-checkpoint"
VERSION = 1
_MANIFEST = "tinyamp.json"
_ARRAY_NAME = re.compile(r"arrays/(\d+)\.npy")

# How deep dicts, lists and tuples may nest in a checkpoint. A model's or an
# optimizer's state_dict nests 3-4 deep; the bound keeps a crafted manifest from
# exhausting the stack (and catches a container that holds itself on save).
MAX_NESTING = 100

# The most dimensions and bytes an array may have: NumPy 2's limits (NPY_MAXDIMS, the largest intp).
MAX_DIMS = 64
_MAX_BYTES = np.iinfo(np.intp).max

# Arrays are read in pieces of this size into their final buffer (a whole-member
# read would hold the data twice).
_READ_CHUNK = 1 << 24

FileLike = Union[str, "os.PathLike[str]", BinaryIO]

# The dtypes a checkpoint may hold, by the name recorded in the manifest.
_DTYPES = {dt.dtype_name(d): d for d in dt.SUPPORTED}


class CheckpointError(RuntimeError):
    """A file that ``ta.load`` refuses: not a tinyamp checkpoint, or a damaged or crafted one.

    A RuntimeError because that is what ``torch.load`` raises for a damaged
    archive, so ``except RuntimeError`` in ported code still catches it.
    """


# ------------------------------------------------------------------- saving
def save(obj: Any, f: FileLike) -> None:
    """Write ``obj`` (nested dicts, lists, tuples of tensors, arrays, numbers, strings, None) to ``f``.

    To a path the write is atomic: either the new checkpoint is complete or the
    file is unchanged.
    """
    writer = _Writer()
    root = writer.encode(obj, "obj", 0)
    manifest = {"format": FORMAT, "version": VERSION, "tinyamp": __version__, "root": root}

    def write(handle: BinaryIO) -> None:
        with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
            archive.writestr(_MANIFEST, json.dumps(manifest, allow_nan=False))
            for index, array in enumerate(writer.arrays):
                with archive.open(f"arrays/{index}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, array, allow_pickle=False)

    if isinstance(f, (str, os.PathLike)):
        write_to_path(os.fspath(f), write)
    else:
        write(f)


class _Writer:
    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []
        self.seen: dict[int, int] = {}  # id(tensor) -> array index: shared tensors stay shared

    def encode(self, obj: Any, path: str, depth: int) -> Any:
        if obj is None:
            return {"t": "none"}
        if isinstance(obj, (bool, np.bool_)):
            return {"t": "bool", "v": bool(obj)}
        if isinstance(obj, (int, np.integer)):
            return {"t": "int", "v": int(obj)}
        if isinstance(obj, (float, np.floating)) and not isinstance(obj, np.ndarray):
            # repr keeps inf/nan and every bit of a double (JSON numbers cannot hold inf).
            return {"t": "float", "v": repr(float(obj))}
        if isinstance(obj, str):
            return {"t": "str", "v": obj}
        if isinstance(obj, Tensor):
            entry = self._array(obj, obj.array, path)
            entry.update(t="tensor", device=str(obj.device), requires_grad=obj.requires_grad,
                         parameter=bool(obj._is_param))
            return entry
        if isinstance(obj, np.ndarray):
            return dict(self._array(obj, obj, path), t="ndarray")
        if isinstance(obj, (np.dtype, dt.dtype)):  # ta.float16 (a dtype object) or a NumPy dtype
            return {"t": "dtype", "v": _dtype_name(dt.as_dtype(obj) if isinstance(obj, dt.dtype) else obj, path)}
        if isinstance(obj, backend.Device):
            return {"t": "device", "v": str(obj)}
        if isinstance(obj, (dict, list, tuple)) and depth >= MAX_NESTING:
            raise ValueError(f"ta.save: {path} is nested more than {MAX_NESTING} containers deep (does a "
                             f"container hold itself?); ta.load would refuse it")
        if isinstance(obj, dict):
            kind = "odict" if isinstance(obj, OrderedDict) else "dict"
            return {"t": kind, "items": [[self.encode(k, f"{path} key {k!r}", depth + 1),
                                          self.encode(v, f"{path}[{k!r}]", depth + 1)] for k, v in obj.items()]}
        if isinstance(obj, (list, tuple)):
            kind = "list" if isinstance(obj, list) else "tuple"
            return {"t": kind, "items": [self.encode(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(obj)]}
        raise TypeError(f"ta.save: cannot save {type(obj).__name__} at {path}; checkpoints hold tensors, NumPy "
                        f"arrays, numbers, strings, None, dtypes, devices and dicts/lists/tuples of them "
                        f"(save a model's state_dict(), not the model)")

    def _array(self, owner: Any, array: Any, path: str) -> dict:
        name = _dtype_name(array.dtype, path)
        if id(owner) not in self.seen:
            host = backend.to_host(array)
            if host.dtype == dt.bfloat16:
                host = host.view(np.uint16)
            self.seen[id(owner)] = len(self.arrays)
            self.arrays.append(host if host.flags.c_contiguous else host.copy(order="C"))
        return {"file": f"arrays/{self.seen[id(owner)]}.npy", "dtype": name, "shape": list(array.shape)}


def _dtype_name(dtype: np.dtype, path: str) -> str:
    name = dt.dtype_name(dtype)
    if name not in _DTYPES:
        raise TypeError(f"ta.save: dtype {name} at {path} is not supported in checkpoints")
    return name


# ------------------------------------------------------------------ loading
# What the zip and .npy readers raise on damaged bytes: a bad signature or CRC,
# a short read, a seek outside the file, an undecodable name, an unsupported
# method or flag, a struct too short to unpack, a failed decompression.
_ZIP_DAMAGE = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, NotImplementedError,
               RuntimeError, struct.error, zlib.error, OverflowError, KeyError, IndexError, TypeError)


def load(f: FileLike, map_location: Any = None, weights_only: bool = True) -> Any:
    """Read a checkpoint written by :func:`save`.

    ``map_location``: None (each tensor back on its recorded device), a device
    (``"cpu"``, ``"cuda:0"``, a ``ta.device``) for all tensors, or a dict
    ``{"cuda:0": "cpu"}`` mapping recorded devices to new ones.

    Raises :class:`CheckpointError` for a file that is not a tinyamp checkpoint
    or is damaged; ``FileNotFoundError`` (and other ``OSError``) when the file
    cannot be opened.
    """
    name = _describe(f)
    map_location = _check_map_location(map_location)  # a user error, reported before reading anything
    with _open_for_reading(f) as handle:
        try:
            archive, window = _archive_at_position(handle)
        except _ZIP_DAMAGE as exc:
            raise CheckpointError(f"ta.load: {name} is not a tinyamp checkpoint (not a zip archive: "
                                  f"{_reason(exc)}); it may be truncated, corrupt, or a file from another "
                                  f"program") from None
        with archive:
            reader = _Reader(archive, window.size, name, map_location)
            result = reader.decode(reader.manifest()["root"], "obj", 0)
        handle.seek(window.start + window.size)  # after this archive: the next load reads the next one
        return result


class _Window(io.RawIOBase):
    """Bytes ``[start, start + size)`` of a seekable binary file, read-only, as a file of its own."""

    def __init__(self, handle: BinaryIO, start: int, size: int) -> None:
        super().__init__()
        self.handle, self.start, self.size, self.position = handle, start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise OSError(22, "seek before the start of the archive")
        self.position = base + offset
        return self.position

    def read(self, n: int = -1) -> bytes:
        left = max(0, self.size - self.position)
        n = left if n is None or n < 0 else min(n, left)
        self.handle.seek(self.start + self.position)
        data = self.handle.read(n)
        self.position += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


_END_RECORD = b"PK\x05\x06"  # the zip's end-of-central-directory signature; 22 bytes + a comment


def _archive_at_position(handle: BinaryIO) -> tuple[zipfile.ZipFile, _Window]:
    """The zip archive that starts at ``handle``'s position, and its window of the file.

    zipfile reads the end record at the end of the file, which belongs to the last
    of several archives saved back to back. A tinyamp archive's first member (the
    manifest) starts at its offset 0, so the archive found is the one asked for
    when its first member lies at the window's start; otherwise the archive ends at
    an earlier end record, searched for forwards from the position.
    """
    start = handle.tell()
    size = handle.seek(0, io.SEEK_END) - start
    window = _Window(handle, start, size)
    archive = zipfile.ZipFile(window, "r")
    last_start = _first_member_offset(archive)
    if last_start == 0:
        return archive, window
    archive.close()
    scan_end = size if last_start is None else min(size, last_start)
    for record in _end_records(window, scan_end):
        window.seek(record + 20)
        comment = int.from_bytes(window.read(2), "little")
        candidate = _Window(handle, start, min(size, record + 22 + comment))
        try:
            archive = zipfile.ZipFile(candidate, "r")
        except _ZIP_DAMAGE:
            continue
        if _first_member_offset(archive) == 0:
            return archive, candidate
        archive.close()
    raise zipfile.BadZipFile(f"no zip archive starts at position {start}")


def _first_member_offset(archive: zipfile.ZipFile) -> int | None:
    return min((info.header_offset for info in archive.infolist()), default=None)


def _end_records(window: _Window, end: int) -> Iterator[int]:
    """Offsets of the end-record signature in ``window`` before ``end``, in order."""
    chunk, position, tail = 1 << 20, 0, b""
    while position < end:
        window.seek(position)
        data = tail + window.read(min(chunk, end - position))
        base = position - len(tail)
        found = data.find(_END_RECORD)
        while found >= 0:
            yield base + found
            found = data.find(_END_RECORD, found + 1)
        tail = data[-(len(_END_RECORD) - 1):]
        position += chunk


@contextlib.contextmanager
def _open_for_reading(f: FileLike) -> Iterator[BinaryIO]:
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as handle:  # a missing file is FileNotFoundError, as in PyTorch
            yield handle
    else:
        yield f


def _describe(f: Any) -> str:
    if isinstance(f, (str, os.PathLike)):
        return f"'{os.fspath(f)}'"
    return f"'{f.name}'" if isinstance(getattr(f, "name", None), str) else f"<{type(f).__name__}>"


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Reader:
    def __init__(self, archive: zipfile.ZipFile, size: int, name: str, map_location: Any) -> None:
        self.archive, self.size, self.name = archive, size, name
        self.map_location = map_location
        self.loaded: dict[str, tuple[str, str, tuple, Any]] = {}  # file -> (kind, dtype, shape, object)

    def fail(self, path: str, problem: str) -> CheckpointError:
        return CheckpointError(f"ta.load: {self.name}: {problem} (at {path})")

    # ------------------------------------------------------------ archive members
    def _member(self, file: str, path: str) -> zipfile.ZipInfo:
        """The member's directory entry, checked to be stored, unencrypted and inside the file."""
        try:
            info = self.archive.getinfo(file)
        except KeyError:
            raise self.fail(path, f"array file {file} is missing from the archive") from None
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            raise self.fail(path, f"{file} is compressed or encrypted (method {info.compress_type}, flags "
                                  f"{info.flag_bits:#x}); tinyamp checkpoints store members as they are")
        if info.file_size != info.compress_size:
            raise self.fail(path, f"the archive's directory is damaged: {file} is stored as "
                                  f"{info.compress_size} bytes but listed as {info.file_size}")
        if not 0 <= info.header_offset <= self.size - info.compress_size:
            raise self.fail(path, f"the archive's directory is damaged: {file} claims {info.compress_size} bytes "
                                  f"at offset {info.header_offset}, outside the file's {self.size} bytes")
        return info

    @contextlib.contextmanager
    def _open(self, info: zipfile.ZipInfo, path: str) -> Iterator[BinaryIO]:
        try:
            with self.archive.open(info) as handle:
                yield handle
        except CheckpointError:
            raise
        except _ZIP_DAMAGE as exc:
            raise self.fail(path, f"{info.filename} is damaged ({_reason(exc)})") from None

    def manifest(self) -> dict:
        if _MANIFEST not in self.archive.namelist():
            hint = ""
            if any(entry.endswith("data.pkl") for entry in self.archive.namelist()):
                # PyTorch's zip format: reading it would mean unpickling, which ta.load never does.
                hint = ("; it looks like a PyTorch torch.save file, which tinyamp cannot read: in PyTorch, "
                        "save the state_dict as NumPy arrays (np.savez) and load them with ta.tensor")
            raise CheckpointError(f"ta.load: {self.name} is a zip archive but not a tinyamp checkpoint "
                                  f"(no {_MANIFEST} manifest){hint}")
        info = self._member(_MANIFEST, "the manifest")
        with self._open(info, "the manifest") as handle:
            text = handle.read()
        try:
            manifest = json.loads(text.decode("utf-8"))
        except RecursionError:
            raise CheckpointError(f"ta.load: {self.name}: the manifest {_MANIFEST} nests too deeply to "
                                  f"parse") from None
        except ValueError as exc:  # also UnicodeDecodeError and ints past Python's digit limit
            raise CheckpointError(f"ta.load: {self.name}: the manifest {_MANIFEST} is unreadable "
                                  f"({exc})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or "root" not in manifest:
            raise CheckpointError(f"ta.load: {self.name}: {_MANIFEST} is not a tinyamp checkpoint manifest")
        if manifest.get("version") != VERSION:
            raise CheckpointError(f"ta.load: {self.name}: checkpoint format version {manifest.get('version')!r} is "
                                  f"not supported (this tinyamp reads version {VERSION})")
        return manifest

    # ------------------------------------------------------------ manifest entries
    def decode(self, node: Any, path: str, depth: int) -> Any:
        if not isinstance(node, dict) or not isinstance(node.get("t"), str):
            raise self.fail(path, "malformed manifest entry")
        kind = node["t"]
        if kind == "none":
            return None
        if kind in ("bool", "int", "str"):
            value = node.get("v")
            expected = {"bool": bool, "int": int, "str": str}[kind]
            if type(value) is not expected:
                raise self.fail(path, f"a {kind} entry holds {type(value).__name__}")
            return value
        if kind == "float":
            if not isinstance(node.get("v"), str):
                raise self.fail(path, "a float entry is not a number")
            try:
                return float(node["v"])
            except ValueError:
                raise self.fail(path, "a float entry is not a number") from None
        if kind in ("dict", "odict", "list", "tuple") and depth >= MAX_NESTING:
            raise self.fail(path, f"containers nest more than {MAX_NESTING} deep")
        if kind in ("dict", "odict"):
            result = OrderedDict() if kind == "odict" else {}
            for pair in self._items(node, path):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise self.fail(path, "a dict item is not a [key, value] pair")
                key = self.decode(pair[0], f"{path} key", depth + 1)
                if isinstance(key, (Tensor, np.ndarray)) or not _hashable(key):
                    raise self.fail(path, f"unhashable dict key of type {type(key).__name__}")
                result[key] = self.decode(pair[1], f"{path}[{key!r}]", depth + 1)
            return result
        if kind in ("list", "tuple"):
            items = [self.decode(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(self._items(node, path))]
            return items if kind == "list" else tuple(items)
        if kind == "dtype":
            if not isinstance(node.get("v"), str) or node["v"] not in _DTYPES:
                raise self.fail(path, f"unknown dtype {node.get('v')!r}")
            return dt.as_public(_DTYPES[node["v"]])  # ta.float16 comes back as itself
        if kind == "device":
            return backend.Device(self._device(node.get("v"), path))
        if kind in ("tensor", "ndarray"):
            return self._array_entry(node, kind, path)
        raise self.fail(path, f"unknown entry type {kind!r}")

    def _items(self, node: dict, path: str) -> list:
        items = node.get("items")
        if not isinstance(items, list):
            raise self.fail(path, f"a {node['t']} entry has no item list")
        return items

    def _array_entry(self, node: dict, kind: str, path: str) -> Any:
        file, dtype_name, shape = node.get("file"), node.get("dtype"), node.get("shape")
        if not isinstance(file, str) or not _ARRAY_NAME.fullmatch(file):
            raise self.fail(path, f"bad array file name {file!r}")
        if not isinstance(dtype_name, str) or dtype_name not in _DTYPES:
            raise self.fail(path, f"unknown dtype {dtype_name!r}")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            raise self.fail(path, f"bad shape {shape!r}")
        if len(shape) > MAX_DIMS:
            raise self.fail(path, f"a shape of {len(shape)} dimensions (arrays have at most {MAX_DIMS})")
        if math.prod(s for s in shape if s) * _DTYPES[dtype_name].itemsize > _MAX_BYTES:
            raise self.fail(path, f"shape {shape} is larger than any array can be")
        for flag in ("requires_grad", "parameter"):
            if kind == "tensor" and type(node.get(flag, False)) is not bool:
                raise self.fail(path, f"a tensor's {flag} is {node.get(flag)!r}, not true or false")
        if kind == "tensor" and node.get("requires_grad") and not dt.is_floating(_DTYPES[dtype_name]):
            raise self.fail(path, f"a {dtype_name} tensor marked requires_grad (only floating-point tensors "
                                  f"can require gradients)")
        shape = tuple(shape)
        if file in self.loaded:  # a tensor saved twice (shared): the same object, if the entries agree
            first_kind, first_dtype, first_shape, obj = self.loaded[file]
            if (first_kind, first_dtype, first_shape) != (kind, dtype_name, shape):
                raise self.fail(path, f"{file} is listed as {first_kind} {first_dtype} {list(first_shape)} and "
                                      f"as {kind} {dtype_name} {list(shape)}")
            return obj
        array = self._read_array(file, _DTYPES[dtype_name], shape, path)
        if kind == "ndarray":
            obj = array
        else:
            device = self._target_device(node.get("device"), path)
            requires_grad = node.get("requires_grad") is True
            data = backend.to_device(array, device)
            if node.get("parameter") is True:
                obj = Parameter(data, requires_grad=requires_grad)
            else:
                obj = Tensor(data, requires_grad=requires_grad)
        self.loaded[file] = (kind, dtype_name, shape, obj)
        return obj

    def _read_array(self, file: str, dtype: np.dtype, shape: tuple, path: str) -> np.ndarray:
        """The array in ``file``, its header checked against the manifest and the member's size first."""
        stored = np.dtype(np.uint16) if dtype == dt.bfloat16 else dtype
        info = self._member(file, path)
        with self._open(info, path) as handle:
            header = self._npy_header(handle, file, path)
            header_bytes, (npy_shape, fortran_order, npy_dtype) = header
            if npy_dtype.hasobject:
                raise self.fail(path, f"{file} is not a plain .npy array: it holds Python objects "
                                      f"({npy_dtype}), and pickled data is refused")
            if npy_dtype != stored or npy_shape != shape:
                raise self.fail(path, f"{file} holds {dt.dtype_name(npy_dtype)} {list(npy_shape)}, the manifest "
                                      f"says {dt.dtype_name(dtype)} {list(shape)}")
            data_bytes = math.prod(shape) * stored.itemsize
            if header_bytes + data_bytes != info.file_size:
                problem = "truncated" if header_bytes + data_bytes > info.file_size else "followed by extra bytes"
                raise self.fail(path, f"{file} is {problem}: its header describes {data_bytes} bytes of "
                                      f"{dt.dtype_name(dtype)} {list(shape)}, the member holds "
                                      f"{info.file_size - header_bytes}")
            # Only now, with the size known to be the member's own, is memory allocated.
            array = np.empty(math.prod(shape), dtype=stored)
            buffer = memoryview(array).cast("B")
            done = 0
            while done < data_bytes:
                chunk = handle.read(min(_READ_CHUNK, data_bytes - done))
                if not chunk:
                    raise self.fail(path, f"{file} ends after {done} of {data_bytes} data bytes")
                buffer[done:done + len(chunk)] = chunk
                done += len(chunk)
            handle.read(1)  # at the end: the zip reader checks the member's CRC
        array = array.reshape(shape, order="F" if fortran_order else "C")
        return array.view(dt.bfloat16) if dtype == dt.bfloat16 else array

    def _npy_header(self, handle: BinaryIO, file: str, path: str) -> tuple[int, tuple]:
        """(bytes the header takes, (shape, fortran_order, dtype)) of the ``.npy`` in ``handle``."""
        try:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                fields = np.lib.format.read_array_header_1_0(handle)
            elif version == (2, 0):
                fields = np.lib.format.read_array_header_2_0(handle)
            else:
                raise ValueError(f".npy format version {version} (tinyamp writes 1.0 or 2.0)")
        except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
            raise self.fail(path, f"{file} is damaged ({_reason(exc)})") from None
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError, OverflowError) as exc:
            # NumPy's own "EOF: reading array header" is a ValueError: a cut-off header, not pickled data.
            raise self.fail(path, f"{file} is not a plain .npy array ({_reason(exc)})") from None
        return handle.tell(), fields  # the readers leave the handle just after the header

    # ------------------------------------------------------------ devices
    def _device(self, spec: Any, path: str) -> str:
        if not isinstance(spec, str) or not re.fullmatch(r"cpu|cuda(:\d{1,4})?", spec):
            raise self.fail(path, f"bad device {spec!r}")
        return spec

    def _target_device(self, recorded: Any, path: str) -> backend.Device:
        recorded = self._device(recorded, path)
        target: Any = recorded
        if isinstance(self.map_location, dict):
            target = self.map_location.get(recorded, recorded)
        elif self.map_location is not None:
            target = self.map_location
        if (str(target).startswith("cuda") and self.map_location is None
                and not cuda_available()):
            raise RuntimeError(f"ta.load: {self.name} holds a tensor saved on {recorded} but CUDA is not "
                               f"available; pass map_location='cpu' to load it on the CPU")
        return backend.Device(target)


def _check_map_location(map_location: Any) -> Any:
    """``map_location`` with its devices checked: a bad one is the caller's error, not a damaged file."""
    if map_location is None:
        return None
    if isinstance(map_location, dict):
        for key, value in map_location.items():
            if not isinstance(key, str):
                raise TypeError(f"ta.load: map_location keys are device strings like 'cuda:0', got {key!r}")
            backend.Device(value)
        return map_location
    return backend.Device(map_location)


def _hashable(key: Any) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True
