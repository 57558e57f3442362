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
DEFAULT_PHASE = "other"


class Counters:
    """Counts per phase and kind, and launches per phase and kernel name."""

    def __init__(self) -> None:
        self.current = DEFAULT_PHASE
        self._counts: dict[str, dict[str, int]] = {}
        self._kernels: dict[str, dict[str, int]] = {}
        self._open: "tuple[dict[str, int], dict[str, int]] | None" = None  # the current phase's two dicts
        self._listeners: list[Callable[[str, Any], None]] = []

    # ------------------------------------------------------------ recording
    def _buckets(self) -> tuple[dict[str, int], dict[str, int]]:
        if self._open is None:
            if self.current not in self._counts:
                self._counts[self.current] = dict.fromkeys(KINDS, 0)
                self._kernels[self.current] = {}
            self._open = (self._counts[self.current], self._kernels[self.current])
        return self._open

    def launch(self, name: str) -> None:
        """One kernel launch named ``name``."""
        counts, kernels = self._open or self._buckets()
        counts["launches"] += 1
        kernels[name] = kernels.get(name, 0) + 1
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
        self._open = None

    # -------------------------------------------------------------- reading
    def total(self, kind: str, phase: "str | None" = None) -> int:
        """The count of ``kind`` in ``phase``, or over all phases when ``phase`` is None."""
        if kind not in KINDS:
            raise ValueError(f"counters: unknown kind {kind!r}; expected one of {KINDS}")
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

    def phases(self) -> list[str]:
        """The phases that counted something, in the order they first did."""
        return list(self._counts)

    def snapshot(self) -> dict[str, dict]:
        """``{phase: {kind: n, ..., "kernels": {name: n}}}``, a copy (JSON-ready)."""
        return {phase: dict(bucket, kernels=self.kernels(phase)) for phase, bucket in self._counts.items()}

    def report(self) -> str:
        """One line per phase: ``forward: 9 launches (gemmEx 2, add 3), 7 allocations, 0 h2d, 0 d2h, 0 syncs``."""
        lines = []
        for phase, bucket in self._counts.items():
            kernels = ", ".join(f"{name} {n}" for name, n in self.kernels(phase).items())
            lines.append(f"{phase}: {bucket['launches']} launches" + (f" ({kernels})" if kernels else "")
                         + "".join(f", {bucket[kind]} {kind}" for kind in KINDS[1:]))
        return "\n".join(lines)


counters = Counters()  # the stand-in's one set of counters (``cupy.counters`` of the stand-in)
