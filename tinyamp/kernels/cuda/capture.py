"""``ta.cuda.CUDAGraph``, ``ta.cuda.graph`` and ``ta.cuda.graph_pool_handle``: PyTorch's graph API over CuPy's
stream capture.

A capture records the CUDA work issued on one stream (``Stream.begin_capture``
/ ``end_capture``, which give a ``cupy.cuda.graph.Graph``) instead of running
it; ``replay()`` launches the whole recording with one call. The same code
drives CuPy and the CUDA stand-in, which records what it runs and refuses
what CUDA refuses during a capture (``cupy_standin/_capture.py``).

**Memory.** Every capture allocates from a pool private to its graph (or
shared on purpose, ``graph_pool_handle()``): a ``cupy.cuda.MemoryPool`` made
for it and installed with ``cupy.cuda.using_allocator`` while the capture
runs. A graph writes the same addresses at every replay, so memory it uses
must never be handed to other arrays: blocks freed during or after the
capture go back to the private pool, which nothing but a capture draws from.
CuPy's ``MemoryAsyncPool`` (``cudaMallocAsync``) was the other candidate; a
capture turns its allocations into graph allocation nodes, and memory such a
node allocates must be freed before the graph is launched again (CUDA's rule
for graph memory nodes), which the step's outputs and new gradients, alive
between replays, are not. A private ``MemoryPool`` has no such rule and works
with every CuPy version tinyamp supports.

**Capture mode.** ``capture_error_mode`` takes PyTorch's values, but defaults
to ``"relaxed"`` where PyTorch defaults to ``"global"``: a private pool grows
with ``cudaMalloc`` during the first capture, which CUDA allows only in
relaxed mode. PyTorch's allocator switches its own thread to relaxed mode
around its ``cudaMalloc``; CuPy offers no ``cudaThreadExchangeStreamCaptureMode``
to do the same. With ``"global"`` or ``"thread_local"`` a capture whose pool
has to grow fails (a pool shared from an earlier capture of the same work has
already grown). Synchronisations and host copies are refused in every mode.

**cuBLAS.** CuPy's cuBLAS wrappers refuse every call while a stream
captures; tinyamp's GEMMs call cuBLAS directly (``kernels/cuda/cublas_direct.py``)
on a handle whose stream and workspace are set before it runs, so cuBLAS
allocates nothing while capturing. The handle is made when the capture begins
if no GEMM made it before.

**Random draws.** A CUDA generator is a seed and an offset on the host
(``random._Philox``). A draw inside a capture reads them from a small device
array of the graph (``philox_state``) plus its offset from the capture's first
draw; ``replay()`` first writes the generator's seed and offset there with a
kernel launch (no host copy, nothing waits) and advances the offset by what
the graph draws, so each replay draws the numbers the same eager steps would.

**Host reads.** While a tinyamp capture is open, every host read tinyamp
makes (``Tensor.item()``, ``numpy()``, ``float(t)``, ``ta.cuda.synchronize()``)
and every copy of a CPU array to the GPU raises a clear error naming it and
the line that asked (``backend.refuse_in_capture``), on a GPU as on the
stand-in.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ... import backend, cuda_memory
from . import cublas_direct, cublaslt_direct, cuda_launch

CAPTURE_ERROR_MODES = ("global", "thread_local", "relaxed")
_MODE_CONSTANTS = {"global": "streamCaptureModeGlobal", "thread_local": "streamCaptureModeThreadLocal",
                   "relaxed": "streamCaptureModeRelaxed"}


class GraphPool:
    """A memory pool private to the graphs captured with it (``ta.cuda.graph_pool_handle()``, ``g.pool()``).

    Opaque to users, as PyTorch's pool handle: pass it as ``pool=`` to share
    memory between graphs that are replayed in the order they were captured.
    """

    def __init__(self) -> None:
        self._memory_pool = backend.cupy().cuda.MemoryPool()
        # Its allocator, counted in ta.cuda.memory_allocated and its peak. Never free its cached blocks
        # (free_all_blocks) while a graph of it lives: they are where the graph's temporaries live at replay.
        self.malloc = cuda_memory.graph_pool_allocator(self, self._memory_pool)

    def used_bytes(self) -> int:
        """Bytes in blocks held by arrays the graphs' captures allocated and that are still alive."""
        return int(self._memory_pool.used_bytes())

    def total_bytes(self) -> int:
        """Bytes the pool holds from the device (live blocks and the cached ones the graphs reuse)."""
        return int(self._memory_pool.total_bytes())

    def __repr__(self) -> str:
        return f"<tinyamp graph pool: {self.used_bytes():,} bytes in use, {self.total_bytes():,} held>"


def graph_pool_handle() -> GraphPool:
    """A new private pool for graph captures (``torch.cuda.graph_pool_handle``)."""
    return GraphPool()


def _capture_mode(cupy: Any, capture_error_mode: str) -> int:
    if capture_error_mode not in CAPTURE_ERROR_MODES:
        raise ValueError(f"capture_error_mode must be one of {CAPTURE_ERROR_MODES}, got {capture_error_mode!r}")
    return getattr(cupy.cuda.runtime, _MODE_CONSTANTS[capture_error_mode])


class CUDAGraph:
    """A captured CUDA graph (``torch.cuda.CUDAGraph``): ``capture_begin``, ``capture_end``, ``replay``,
    ``reset``, ``pool``.

    Usually captured through :class:`graph` (``with ta.cuda.graph(g): ...``)
    or :func:`tinyamp.cuda.make_graphed_step`.
    """

    def __init__(self) -> None:
        self._graph: Any = None  # cupy.cuda.graph.Graph after a successful capture
        self._pool: "GraphPool | None" = None
        self._stream: Any = None
        self._open: "contextlib.ExitStack | None" = None  # the allocator and capture marks of a capture in progress
        self._kept: list = []  # device arrays the graph reads that their owners (caches) might drop
        self._uploads: list[tuple[Any, Any]] = []  # (device array, host values) to copy when the capture ends
        # id(generator) -> [generator, device (seed, offset), Philox blocks the graph draws from it]
        self._philox: dict[int, list] = {}

    def capture_begin(self, pool: "GraphPool | None" = None, capture_error_mode: str = "relaxed") -> None:
        """Begin capturing the work issued on the current stream (which must not be the default stream)."""
        cupy = backend.cupy()
        if self._graph is not None or self._open is not None:
            raise RuntimeError("This CUDAGraph instance already owns a captured graph. To capture a new graph, "
                               "create a new instance.")
        mode = _capture_mode(cupy, capture_error_mode)
        if pool is not None and not isinstance(pool, GraphPool):
            raise TypeError(f"CUDAGraph.capture_begin: pool must come from ta.cuda.graph_pool_handle() or "
                            f"another graph's pool(), got {type(pool).__name__}")
        stream = cupy.cuda.get_current_stream()
        if stream.ptr in (0, 1):  # the legacy default stream (CuPy refuses it too)
            raise RuntimeError("CUDA graphs must be captured on a non-default stream. (However, after capture, "
                               "it's ok to replay them on the default stream.)")
        pool = pool if pool is not None else GraphPool()
        cublas_direct.prepare()  # tinyamp's cuBLAS and cuBLASLt handles and the workspace, made before the
        cublaslt_direct.prepare()  # capture (making them allocates)
        opened = contextlib.ExitStack()
        opened.enter_context(cupy.cuda.using_allocator(pool.malloc))
        opened.enter_context(backend.capturing(self))
        try:
            stream.begin_capture(mode)
        except BaseException:
            opened.close()
            raise
        self._open, self._stream, self._pool = opened, stream, pool

    def capture_end(self) -> None:
        """End the capture begun by ``capture_begin``; the graph is then ready to ``replay``."""
        if self._open is None:
            raise RuntimeError("CUDAGraph.capture_end: no capture in progress (call capture_begin first)")
        opened, self._open = self._open, None
        try:
            self._graph = self._stream.end_capture()
        finally:
            opened.close()
            uploads, self._uploads = self._uploads, []
            for array, host in uploads:  # copies are allowed again (a failed capture is over too)
                array.set(host)

    def _abandon_capture(self) -> None:
        """End a capture that an exception interrupted, keeping no graph (its own error says less)."""
        if self._open is not None:
            with contextlib.suppress(Exception):
                self.capture_end()
        self._graph = None

    def replay(self) -> None:
        """Launch the captured work on the current stream (one launch; no host synchronisation)."""
        if self._graph is None:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")
        for generator, state, blocks in self._philox.values():  # the draws start at the generator's offset
            cuda_launch.fill_words(state, (generator.seed, generator.offset))  # a launch, not a host copy
            generator.offset = (generator.offset + blocks) % 2**64
        self._graph.launch()

    def reset(self) -> None:
        """Drop the graph and the memory it holds (a new instance captures again)."""
        if self._open is not None:
            raise RuntimeError("CUDAGraph.reset: a capture is in progress; call capture_end first")
        self._graph, self._pool, self._stream = None, None, None
        self._kept.clear()
        self._philox.clear()

    def pool(self) -> GraphPool:
        """This graph's memory pool, to share with another capture (``capture_begin(pool=g.pool())``)."""
        if self._pool is None:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self._pool

    def keep_alive(self, array: Any) -> None:
        """Hold ``array`` for as long as the graph exists: the graph reads it at every replay.

        For device arrays that tinyamp caches made before the capture (pointer
        tables, device constants) and might otherwise drop: a replay reading
        freed memory reads whatever the pool put there next.
        """
        self._kept.append(array)

    def philox_state(self, generator: Any, blocks: int) -> tuple[Any, int]:
        """For a draw of ``blocks`` Philox counters from a CUDA generator (``random._Philox``) during this capture:
        the graph's device array (seed, base offset) for that generator, which each replay first sets to the
        generator's seed and offset, and the draw's offset from that base. The replay then advances the
        generator's offset by all the graph draws from it (PyTorch's graph-safe Philox offsets)."""
        entry = self._philox.get(id(generator))
        if entry is None:
            state = backend.cupy().empty((2,), dtype="uint64")  # from the graph's pool, held by the graph
            entry = self._philox[id(generator)] = [generator, state, 0]
        start = entry[2]
        entry[2] += int(blocks)
        return entry[1], start

    def upload_after_capture(self, array: Any, host: Any) -> None:
        """Copy ``host`` into the device ``array`` right after the capture ends, before the graph first runs.

        For host values kept in device memory that the graph reads and the
        host rewrites between replays (``kernels.cuda.cuda_launch.DeviceValues``):
        a capture cannot copy from the host, and a copy recorded in the graph
        would write the capture's value back at every replay. The graph holds
        ``array``.
        """
        self._uploads.append((array, host))
        self._kept.append(array)


class graph:  # noqa: N801 - PyTorch's name
    """``with ta.cuda.graph(g, pool=None, stream=None): ...`` captures the block's CUDA work into ``g``.

    The block runs on ``stream`` (by default one side stream per process,
    ``graph.default_capture_stream``), so its work is recorded, not run; the
    first ``g.replay()`` does it. An exception inside ends the capture and
    propagates (the graph stays empty).
    """

    default_capture_stream: Any = None

    def __init__(self, cuda_graph: CUDAGraph, pool: "GraphPool | None" = None, stream: Any = None,
                 capture_error_mode: str = "relaxed") -> None:
        if not isinstance(cuda_graph, CUDAGraph):
            raise TypeError(f"ta.cuda.graph: expected a ta.cuda.CUDAGraph, got {type(cuda_graph).__name__}")
        self.cuda_graph, self.pool, self.capture_error_mode = cuda_graph, pool, capture_error_mode
        self.capture_stream = stream
        self._stream_context: Any = None

    def __enter__(self) -> None:
        stream = self.capture_stream if self.capture_stream is not None else side_stream()
        stream.__enter__()
        try:
            self.cuda_graph.capture_begin(self.pool, self.capture_error_mode)
        except BaseException:
            stream.__exit__(None, None, None)
            raise
        self._stream_context = stream

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        stream, self._stream_context = self._stream_context, None
        try:
            if exc_type is None:
                self.cuda_graph.capture_end()
            else:
                self.cuda_graph._abandon_capture()
        finally:
            stream.__exit__(None, None, None)
        return False


def side_stream() -> Any:
    """The process's side stream for captures (``graph.default_capture_stream``), made on first use."""
    if graph.default_capture_stream is None:
        graph.default_capture_stream = backend.cupy().cuda.Stream(non_blocking=True)
    return graph.default_capture_stream


@backend.on_cuda_switch
def _forget_side_stream() -> None:
    """A stream belongs to one CUDA backend (CuPy or the stand-in)."""
    graph.default_capture_stream = None


def is_current_stream_capturing() -> bool:
    """True while the current CUDA stream is capturing a graph (False without CUDA)."""
    if not backend.cuda_available():
        return False
    return bool(backend.cupy().cuda.get_current_stream().is_capturing())
