"""What the stand-in did, counted: kernel launches, allocations, copies and synchronisations, per phase.

A real GPU step costs roughly a fixed host time per kernel launch and per
allocation, and a host<->device copy or a synchronisation makes the host wait.
On the stand-in these are deterministic counts, so a test can assert a budget
and a benchmark can print where a step spends them::

    counters = cupy.counters            # the stand-in's module attribute
    counters.reset()
    with counters.phase("forward"):
        loss = model(x)
    print(counters.report())            # forward: 9 launches (gemmEx 2, add 3, ...), 7 allocations, ...

Kinds counted (``KINDS``):

- ``launches``: one per kernel a real CuPy call would launch: a ufunc, a
  reduction, a fill, a copy or ``astype``, an indexed read or write, a cuBLAS
  call, an ``ElementwiseKernel``/``RawKernel`` call. A view costs none.
  Launches are also counted by kernel name.
- ``bytes_read`` / ``bytes_written`` (``BYTES``): the device memory each
  launch reads and writes, also per kernel name. An operation on arrays
  counts its array arguments (inputs read, outputs written; a view counts the
  elements it covers once, a broadcast axis once); a kernel that follows
  pointers, or reads or writes part of an array, or updates an array in place,
  says what it moves with :meth:`Counters.declare` just before it launches (the
  stand-in's cuBLAS counts its matrices itself). Host copies are not launches
  and count no bytes here (they are ``h2d``/``d2h``).
- ``allocations``: memory-pool blocks handed out to new arrays.
- ``h2d`` / ``d2h``: host-to-device and device-to-host copies.
- ``syncs``: every time the host waits for the device: a device-to-host read
  (``get``, ``item``, ``bool``, ``float``, ``repr``, boolean-mask indexing,
  ``nonzero``) and an explicit ``synchronize``.

Outside any ``phase`` the counts go to the phase named ``"other"``.

``watch(listener)`` calls ``listener(kind, detail)`` at every counted event,
so a stricter mode can refuse one (a CUDA-graph capture refuses syncs,
host copies and allocations outside its pool, see ``_capture.py``) by
raising: ``detail`` is the kernel name for a launch, the ``MemoryPool`` for
an allocation, ``"pinned"`` or ``"pageable"`` for a host-to-device copy, and
what waited (``"get"``, ``"mask"``, ``"nonzero"``, ``"Device.synchronize"``,
...) for a device-to-host copy or a sync. Two more kinds reach listeners
without being counted (``notify``): ``"queries"`` (``Stream.done``,
``Event.done``: a look, not a wait) and ``"frees"`` (``free_all_blocks``).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

KINDS = ("launches", "allocations", "h2d", "d2h", "syncs")
BYTES = ("bytes_read", "bytes_written")
DEFAULT_PHASE = "other"


def footprint(view: Any) -> int:
    """Bytes of the distinct elements a NumPy view covers (a broadcast, stride-0 axis counts once)."""
    if view.size == 0:
        return 0
    n = view.itemsize
    for length, stride in zip(view.shape, view.strides):
        if stride:
            n *= length
    return n


class Counters:
    """Counts per phase and kind, and launches and bytes per phase and kernel name."""

    def __init__(self) -> None:
        self.current = DEFAULT_PHASE
        self._counts: dict[str, dict[str, int]] = {}
        self._kernels: dict[str, dict[str, int]] = {}
        self._bytes: dict[str, dict[str, list[int]]] = {}  # phase -> kernel -> [read, written]
        self._open: "tuple[dict, dict, dict] | None" = None  # the current phase's three dicts
        self._listeners: list[Callable[[str, Any], None]] = []
        self._declared: "tuple[str, int, int] | None" = None
        self.last_bytes = (0, 0)  # (read, written) of the latest launch (a capture keeps it with its node)

    # ------------------------------------------------------------ recording
    def _buckets(self) -> tuple[dict, dict, dict]:
        if self._open is None:
            if self.current not in self._counts:
                self._counts[self.current] = dict.fromkeys(KINDS + BYTES, 0)
                self._kernels[self.current] = {}
                self._bytes[self.current] = {}
            self._open = (self._counts[self.current], self._kernels[self.current], self._bytes[self.current])
        return self._open

    def declare(self, name: str, read: int, written: int) -> None:
        """The next launch of kernel ``name`` reads ``read`` and writes ``written`` bytes (not its arguments')."""
        self._declared = (name, int(read), int(written))

    def launch(self, name: str, read: int = 0, written: int = 0) -> None:
        """One kernel launch named ``name``, reading ``read`` and writing ``written`` bytes (or as declared)."""
        declared = self._declared
        if declared is not None:
            self._declared = None
            if declared[0] == name:
                read, written = declared[1], declared[2]
        counts, kernels, moved = self._open or self._buckets()
        counts["launches"] += 1
        kernels[name] = kernels.get(name, 0) + 1
        counts["bytes_read"] += read
        counts["bytes_written"] += written
        pair = moved.get(name)
        if pair is None:
            moved[name] = [read, written]
        else:
            pair[0] += read
            pair[1] += written
        self.last_bytes = (read, written)
        if self._listeners:
            self._tell("launches", name)

    def add(self, kind: str, detail: Any = None) -> None:
        """One more of ``kind`` (one of ``KINDS`` other than launches) in the current phase."""
        (self._open or self._buckets())[0][kind] += 1
        if self._listeners:
            self._tell(kind, detail)

    def notify(self, kind: str, detail: Any = None) -> None:
        """Tell the listeners about an event that is not counted (``"queries"``, ``"frees"``)."""
        if self._listeners:
            self._tell(kind, detail)

    def _tell(self, kind: str, detail: Any) -> None:
        for listener in list(self._listeners):
            listener(kind, detail)

    @contextlib.contextmanager
    def watch(self, listener: Callable[[str, Any], None]) -> Iterator[None]:
        """Call ``listener(kind, detail)`` at every counted event inside (see the module docstring)."""
        self._listeners.append(listener)
        try:
            yield
        finally:
            self._listeners.remove(listener)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Charge what happens inside to phase ``name`` (phases nest: the innermost wins)."""
        previous, self.current, self._open = self.current, str(name), None
        try:
            yield
        finally:
            self.current, self._open = previous, None

    def reset(self) -> None:
        """Forget every count (the current phase stays)."""
        self._counts.clear()
        self._kernels.clear()
        self._bytes.clear()
        self._declared = None
        self._open = None

    # -------------------------------------------------------------- reading
    def total(self, kind: str, phase: "str | None" = None) -> int:
        """The count of ``kind`` in ``phase``, or over all phases when ``phase`` is None."""
        if kind not in KINDS + BYTES:
            raise ValueError(f"counters: unknown kind {kind!r}; expected one of {KINDS + BYTES}")
        if phase is not None:
            return self._counts.get(phase, {}).get(kind, 0)
        return sum(bucket[kind] for bucket in self._counts.values())

    def kernels(self, phase: "str | None" = None) -> dict[str, int]:
        """Launches by kernel name in ``phase`` (all phases when None), most frequent first."""
        merged: dict[str, int] = {}
        for name, kernels in self._kernels.items():
            if phase is None or name == phase:
                for kernel, n in kernels.items():
                    merged[kernel] = merged.get(kernel, 0) + n
        return dict(sorted(merged.items(), key=lambda item: (-item[1], item[0])))

    def kernel_bytes(self, phase: "str | None" = None) -> dict[str, dict[str, int]]:
        """``{kernel: {"read": n, "written": n}}`` in ``phase`` (all phases when None), most bytes first."""
        merged: dict[str, list[int]] = {}
        for name, moved in self._bytes.items():
            if phase is None or name == phase:
                for kernel, (read, written) in moved.items():
                    pair = merged.setdefault(kernel, [0, 0])
                    pair[0] += read
                    pair[1] += written
        ordered = sorted(merged.items(), key=lambda item: (-(item[1][0] + item[1][1]), item[0]))
        return {kernel: {"read": read, "written": written} for kernel, (read, written) in ordered}

    def phases(self) -> list[str]:
        """The phases that counted something, in the order they first did."""
        return list(self._counts)

    def snapshot(self) -> dict[str, dict]:
        """``{phase: {kind: n, ..., "kernels": {name: n}, "bytes": {name: {"read": n, "written": n}}}}``, a copy
        (JSON-ready)."""
        return {phase: dict(bucket, kernels=self.kernels(phase), bytes=self.kernel_bytes(phase))
                for phase, bucket in self._counts.items()}

    def report(self) -> str:
        """Two lines per phase: ``forward: 9 launches (gemmEx 2, add 3), 7 allocations, 0 h2d, 0 d2h, 0 syncs``,
        then ``  bytes: 1200 read, 800 written (gemmEx 900+400, add 300+400)``."""
        lines = []
        for phase, bucket in self._counts.items():
            kernels = ", ".join(f"{name} {n}" for name, n in self.kernels(phase).items())
            lines.append(f"{phase}: {bucket['launches']} launches" + (f" ({kernels})" if kernels else "")
                         + "".join(f", {bucket[kind]} {kind}" for kind in KINDS[1:]))
            moved = ", ".join(f"{name} {b['read']}+{b['written']}" for name, b in self.kernel_bytes(phase).items())
            lines.append(f"  bytes: {bucket['bytes_read']} read, {bucket['bytes_written']} written"
                         + (f" ({moved})" if moved else ""))
        return "\n".join(lines)


counters = Counters()  # the stand-in's one set of counters (``cupy.counters`` of the stand-in)
