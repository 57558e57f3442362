"""Stream capture on the stand-in: ``Stream.begin_capture``/``end_capture``, ``cupy.cuda.graph.Graph``, and
what a capture refuses.

**Recording.** While a stream captures, every device operation of the
stand-in (ufuncs, reductions, copies, ``astype``, fills and memsets,
indexed reads and writes, the g++-compiled kernels, cuBLAS) does two things:
it runs as usual, so shapes, dtypes and argument errors appear where they
would, and it appends a *node* to the capture: a closure that redoes the same
work on the same pool memory. What a node freezes is what a CUDA graph node
freezes:

- the addresses it reads and writes (the closure holds NumPy views of the
  pool blocks, never the arrays), and every launch argument: a Python or
  NumPy scalar, a kernel's scalar parameter, cuBLAS's ``alpha``/``beta`` in
  host pointer mode;
- what it reads at replay is device memory, and only device memory: array
  contents, a pointer table a kernel follows, ``alpha``/``beta`` in device
  pointer mode.

So a host number that changes after capture (a learning rate passed as a
kernel argument) is stale at replay, exactly as on a GPU, and a value kept
in device memory (a learning rate a kernel reads from a device array) is not.

**Nothing runs during a capture.** CUDA records captured work without running
it, so after ``end_capture`` the memory is what it was before
``begin_capture``: the stand-in copies every live pool block when a capture
begins and writes the copies back when it ends, and fills the blocks first
handed out during the capture with garbage (0xFF bytes, as a fresh block).
Random generators, whose state CuPy keeps on the device, get their state back
too. The graph's first launch does the work.

**Replay.** ``Graph.launch()`` runs the nodes in order (one counted launch, with the bytes its nodes move,
``cudaGraphLaunch``). Before it does, it checks that every array a node uses
that was allocated outside the capture's own pool is still allocated: a graph
that writes into memory its owner gave back would, on a GPU, write into
whatever the pool handed that memory to next.

**What a capture refuses** (``cudaErrorStreamCaptureUnsupported``, naming the
operation and the code that did it; the capture is then invalidated and
``end_capture`` raises ``cudaErrorStreamCaptureInvalidated``; a host transfer
is refused as CuPy refuses it, before CUDA sees it: CuPy's ``RuntimeError``
and text, and the capture goes on). Found through
the counters' ``watch`` hook, so every counted event is covered:

- a synchronisation or a device-to-host copy: ``get``, ``item``, ``bool``,
  ``float``, ``repr``, boolean-mask indexing, ``nonzero``,
  ``Stream/Event/Device.synchronize``, ``deviceSynchronize``;
- any host-to-device copy, pinned or pageable: CuPy itself refuses every
  transfer on a capturing stream (``MemoryPointer.copy_from_host_async``:
  "the current stream is capturing, so H2D transfers are disallowed"); a
  pageable one (``cupy.asarray(numpy_array)``) could not be a graph node at all;
- a query of a stream or event (``done``) and ``free_all_blocks`` (cudaFree
  synchronises the device);
- an allocation from any pool other than the one the capturing thread's
  allocator drew from when the capture began (``cupy.cuda.using_allocator``
  with a ``MemoryPool``'s ``malloc``, or with the ``malloc`` of an object
  that wraps one and names it as its ``pool``, as tinyamp's peak tracker).
  CUDA itself allows it, but memory a capture takes from a shared pool goes
  back to that pool when its arrays go, is handed to other code, and is
  overwritten at the next replay: the stand-in refuses what would corrupt
  silently. A capture begun on the default pool therefore may not allocate;
- in ``streamCaptureModeGlobal``/``ThreadLocal``: an allocation that grows
  the pool (a ``cudaMalloc``, an "unsafe" call in those modes);
  ``streamCaptureModeRelaxed`` (CuPy's default) allows it;
- device work on another stream while a stream captures (the legacy stream
  would be an implicit dependency; the stand-in, which rolls memory back at
  the end of a capture, models one capturing stream and nothing beside it).

One capture at a time per process: a second ``begin_capture`` while one is
open raises.
"""

from __future__ import annotations

import contextlib
import os
import traceback
import weakref
from typing import Any, Callable

import numpy as np

from . import _device, _memory, runtime
from ._counters import counters

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _package_root(filename: str) -> str:
    """The top folder of the package holding ``filename`` (the library that called the stand-in)."""
    folder = os.path.dirname(os.path.abspath(filename))
    while os.path.exists(os.path.join(os.path.dirname(folder), "__init__.py")):
        folder = os.path.dirname(folder)
    return folder if os.path.exists(os.path.join(folder, "__init__.py")) else os.path.abspath(filename)


class _Capture:
    """One capture in progress: its stream, mode, pool, nodes and the memory to put back."""

    def __init__(self, stream: Any, mode: int, pool: "_memory.MemoryPool | None") -> None:
        self.stream, self.mode, self.pool = stream, mode, pool
        self.nodes: list[tuple[str, Callable[[], None], tuple]] = []
        self.moved = [0, 0]  # bytes the nodes read and write (counters.last_bytes of each recorded launch)
        self.invalid: "str | None" = None
        self.pool_mallocs = pool.device_mallocs if pool is not None else 0
        # Every live block's bytes, to be written back at the end (nothing ran).
        with _memory._lock:
            live = list(_memory._live.items())
        self.saved = {ptr: (buffer, buffer.copy()) for ptr, (_, buffer) in live}
        self.rollbacks: dict[Any, Callable[[], None]] = {}
        self.watching = contextlib.ExitStack()


active: "_Capture | None" = None  # the capture in progress (read on every operation: keep it a module global)


# ------------------------------------------------------------------ recording
def record(kernel: str, replay: Callable[[], None], arrays: tuple = (), memories: tuple = ()) -> None:
    """Append a node to the capture in progress: ``replay`` redoes ``kernel``'s work on the same memory.

    ``arrays`` are the stand-in arrays the work uses (``memories``: the pool
    blocks of raw pointers it uses); the graph checks at each launch that
    those from outside the capture's pool are still allocated.
    """
    capture = active
    if capture is None:
        return
    if _device.get_current_stream() is not capture.stream:
        refuse(f"{kernel} (device work on {_device.get_current_stream()!r} while {capture.stream!r} "
               "captures)", capture)
    blocks = tuple(a._data.mem for a in arrays) + memories
    outside = tuple(weakref.ref(m) for m in blocks if m.pool is not None and m.pool is not capture.pool)
    capture.nodes.append((kernel, replay, outside))
    capture.moved[0] += counters.last_bytes[0]
    capture.moved[1] += counters.last_bytes[1]


def on_rollback(key: Any, restore: Callable[[], None]) -> None:
    """Call ``restore`` when the capture ends (once per ``key``): host state the device would not have changed."""
    if active is not None and key not in active.rollbacks:
        active.rollbacks[key] = restore


# ------------------------------------------------------------------ refusing
def _where() -> str:
    """The code that asked for the refused operation: the first frame outside the stand-in, and the
    first outside that frame's package (tinyamp) when that is a different one (the user's line)."""
    frames = [f for f in traceback.extract_stack()[:-1]
              if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR + os.sep)]
    if not frames:
        return "an unknown place"
    caller = frames[-1]
    library = _package_root(caller.filename) + os.sep
    user = next((f for f in reversed(frames) if not os.path.abspath(f.filename).startswith(library)), None)
    text = f"{caller.filename}:{caller.lineno} ({caller.name})"
    if user is not None and user is not caller:
        text += f", called from {user.filename}:{user.lineno} ({user.name})"
    return text


def refuse(what: str, capture: "_Capture | None" = None) -> None:
    """Raise CUDA's capture error for ``what`` and invalidate the capture."""
    capture = capture or active
    message = (f"{what} while {capture.stream!r} is capturing a CUDA graph, at {_where()} "
               "[tinyamp CUDA stand-in, capture-safety check]")
    if capture.invalid is None:
        capture.invalid = message
    raise runtime.CUDARuntimeError(runtime.cudaErrorStreamCaptureUnsupported, message)


_WHAT = {
    "d2h": "a device-to-host copy ({detail}) and the synchronisation it waits for",
    "syncs": "a synchronisation ({detail})",
    "h2d": "a host-to-device copy from {detail} host memory (CuPy refuses every transfer on a capturing stream"
           "{pageable})",
    "queries": "a query ({detail}), which CUDA refuses on a capturing stream",
    "frees": "releasing pool memory to the device ({detail}: cudaFree synchronises the device)",
}


def _listener(kind: str, detail: Any) -> None:
    capture = active
    if capture is None or kind == "launches":
        return
    if kind == "allocations":
        if detail is not capture.pool:
            where = ("the default memory pool, shared with code outside the graph"
                     if detail is _memory.get_default_memory_pool() else f"a pool that is not the capture's ({detail!r})")
            refuse(f"an allocation from {where}: the graph would keep writing this memory after its arrays "
                   "are freed and the pool hands it to someone else; capture inside "
                   "cupy.cuda.using_allocator(<a private MemoryPool>.malloc)", capture)
        if detail.device_mallocs != capture.pool_mallocs:
            capture.pool_mallocs = detail.device_mallocs
            if capture.mode != runtime.streamCaptureModeRelaxed:
                refuse("an allocation that grows the pool (cudaMalloc, an unsafe call in "
                       f"{_MODE_NAMES[capture.mode]} capture mode; streamCaptureModeRelaxed allows it)", capture)
        return
    template = _WHAT.get(kind, "{detail}")
    what = template.format(detail=detail, pageable="; and a pageable copy cannot be a graph node"
                           if detail == "pageable" else "")
    if kind in TRANSFER_REFUSALS:
        # CuPy refuses a transfer itself, before any CUDA call: its RuntimeError, and the capture goes on.
        raise RuntimeError(f"{TRANSFER_REFUSALS[kind]} ({what} while {capture.stream!r} is capturing a CUDA "
                           f"graph, at {_where()} [tinyamp CUDA stand-in])")
    refuse(what, capture)


# CuPy's own refusals of host transfers on a capturing stream (cupy/cuda/memory.pyx, MemoryPointer's
# copy_from_host_async / copy_to_host_async, which asarray, set, get and every host read go through).
TRANSFER_REFUSALS = {"h2d": "the current stream is capturing, so H2D transfers are disallowed",
                     "d2h": "the current stream is capturing, so D2H transfers are disallowed"}


_MODE_NAMES = {runtime.streamCaptureModeGlobal: "streamCaptureModeGlobal",
               runtime.streamCaptureModeThreadLocal: "streamCaptureModeThreadLocal",
               runtime.streamCaptureModeRelaxed: "streamCaptureModeRelaxed"}


# ------------------------------------------------------------------ the Stream methods
def begin_capture(self: _device.Stream, mode: "int | None" = None) -> None:
    """``Stream.begin_capture(mode=None)``: record this stream's work into a graph (CuPy's default: relaxed)."""
    global active
    if self.is_null:
        raise RuntimeError("cannot capture on the default (legacy) stream")
    mode = runtime.streamCaptureModeRelaxed if mode is None else int(mode)
    if mode not in _MODE_NAMES:
        raise runtime.CUDARuntimeError(runtime.cudaErrorInvalidValue, f"unknown stream capture mode {mode}")
    if active is not None:
        raise runtime.CUDARuntimeError(runtime.cudaErrorIllegalState,
                                       f"{active.stream!r} is already capturing (the stand-in captures one "
                                       "stream at a time)")
    owner = getattr(_memory.get_allocator(), "__self__", None)
    pool = owner if isinstance(owner, _memory.MemoryPool) else getattr(owner, "pool", None)
    private = isinstance(pool, _memory.MemoryPool) and pool is not _memory.get_default_memory_pool()
    capture = _Capture(self, mode, pool if private else None)
    capture.watching.enter_context(counters.watch(_listener))
    active = capture


def end_capture(self: _device.Stream) -> "Graph":
    """``Stream.end_capture()``: the graph of what was recorded; memory is as it was at ``begin_capture``."""
    global active
    capture = active
    if capture is None or capture.stream is not self:
        raise runtime.CUDARuntimeError(runtime.cudaErrorIllegalState, f"{self!r} is not capturing")
    active = None
    capture.watching.close()
    # Nothing ran: every block live at the start gets its bytes back; blocks first handed out
    # during the capture hold garbage, as fresh device memory does.
    with _memory._lock:
        live = list(_memory._live.items())
    for ptr, (_, buffer) in live:
        if ptr not in capture.saved:
            buffer.fill(_memory.FRESH_FILL)
    for buffer, saved in capture.saved.values():
        np.copyto(buffer, saved)
    for restore in capture.rollbacks.values():
        restore()
    if capture.invalid is not None:
        raise runtime.CUDARuntimeError(runtime.cudaErrorStreamCaptureInvalidated,
                                       f"the capture was invalidated by: {capture.invalid}")
    return Graph._from_capture(capture.nodes, capture.pool, tuple(capture.moved))


def is_capturing(self: _device.Stream) -> bool:
    """``Stream.is_capturing()``."""
    return active is not None and active.stream is self


_device.Stream.begin_capture = begin_capture  # type: ignore[attr-defined]
_device.Stream.end_capture = end_capture  # type: ignore[attr-defined]
_device.Stream.is_capturing = is_capturing  # type: ignore[attr-defined]


def stream_is_capturing(stream_ptr: int) -> bool:
    """``runtime.streamIsCapturing(ptr)``."""
    return active is not None and active.stream.ptr == stream_ptr


runtime.streamIsCapturing = stream_is_capturing  # type: ignore[attr-defined]


# ------------------------------------------------------------------ device-to-device copies by pointer
def copy_from_device_async(self: _memory.MemoryPointer, src: _memory.MemoryPointer, size: int,
                           stream: Any = None) -> None:
    """``MemoryPointer.copy_from_device_async(src, size, stream=None)``: ``size`` bytes from ``src`` to here,
    one ``cudaMemcpyAsync`` on ``stream`` (the current one by default); a capture records it as a node.

    Stricter than CUDA, as every pointer the stand-in follows: both ranges must
    lie inside live allocations (a GPU would read or write other memory).
    """
    if not isinstance(src, _memory.MemoryPointer):
        raise TypeError(f"Argument 'src' has incorrect type (expected cupy.cuda.memory.MemoryPointer, "
                        f"got {type(src).__name__})")
    size = int(size)
    if size == 0:
        return
    what = "MemoryPointer.copy_from_device_async"
    dst_buffer, dst_offset = _memory.resolve(self.ptr, size, f"{what}: destination")
    src_buffer, src_offset = _memory.resolve(src.ptr, size, f"{what}: source")
    target, source = dst_buffer[dst_offset:dst_offset + size], src_buffer[src_offset:src_offset + size]

    def copy() -> None:
        np.copyto(target, source)

    with _device.get_current_stream() if stream is None else stream:
        copy()
        counters.launch("memcpyAsync", size, size)
        record("memcpyAsync", copy, memories=(self.mem, src.mem))


_memory.MemoryPointer.copy_from_device_async = copy_from_device_async  # type: ignore[attr-defined]


class Graph:
    """``cupy.cuda.graph.Graph``: made by ``Stream.end_capture()``; ``launch(stream=None)`` replays it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("currently this class cannot be initiated by the user and must be created "
                                  "via stream capture")

    @classmethod
    def _from_capture(cls, nodes: list, pool: Any, moved: tuple = (0, 0)) -> "Graph":
        graph = object.__new__(cls)
        graph._nodes, graph._pool, graph._moved = nodes, pool, moved
        return graph

    @property
    def nodes(self) -> list[str]:
        """The kernel names of the recorded nodes, in order (the stand-in's; CuPy has no such list)."""
        return [name for name, _, _ in self._nodes]

    def launch(self, stream: Any = None) -> None:
        """Run the recorded work on the memory it was recorded on (one ``cudaGraphLaunch``)."""
        if active is not None:  # a graph launched into a capture becomes one node of it
            counters.launch("cudaGraphLaunch", *self._moved)
            record("cudaGraphLaunch", self._run)
            return
        for index, (name, _, outside) in enumerate(self._nodes):
            for ref in outside:
                if ref() is None:
                    raise RuntimeError(
                        f"Graph.launch: node {index} ({name}) uses device memory allocated outside the graph's "
                        "pool that has been freed since the capture; on a GPU the replay would read and write "
                        "memory the pool may have handed to other arrays (keep every array a graph uses alive "
                        "while the graph is replayed) [tinyamp CUDA stand-in]")
        counters.launch("cudaGraphLaunch", *self._moved)  # the bytes of every node it replays
        self._run()

    def _run(self) -> None:
        with np.errstate(all="ignore"):  # a GPU never warns
            for _, replay, _ in self._nodes:
                replay()

    def upload(self, stream: Any = None) -> None:
        """Nothing to upload on the stand-in."""
        return None
