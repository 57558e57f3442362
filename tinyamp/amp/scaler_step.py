"""What the last ``GradScaler.update()`` saw (``last_step``) and how a scaler value reaches the host.

``ScalerStep`` keeps the last update's values on the device until a property
is read; :func:`read_host` is the one place a value crosses to the host and is
counted (``ta.cuda.sync_count()``), on the CPU too.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..tensor import Tensor


def read_host(array: Any) -> float:
    """Read a device value on the host: one host synchronisation, counted on the CPU too."""
    if not backend.is_cupy_array(array):
        backend.note_sync()
    return backend.to_host(array).reshape(()).item()  # to_host counts the GPU case


class ScalerStep:
    """What the last ``update()`` saw. Values stay on the device until a property is read.

    ``skipped`` is true when some optimizer stepped since the previous update
    found inf/nan and skipped its step; ``scale_before``/``scale_after`` are the
    scale used for this iteration and the one for the next, kept as one
    two-element float32 device array ``scales`` (what the scale rule's kernel
    writes), or on the CPU the pair of Python floats the rule returns. Each
    property read is a host synchronisation (counted on the CPU too).
    """

    __slots__ = ("_found_inf", "_scales")

    def __init__(self, found_inf: Any, scales: Any) -> None:
        self._found_inf, self._scales = found_inf, scales

    @property
    def found_inf(self) -> "Tensor | None":
        return None if self._found_inf is None else Tensor._wrap(self._found_inf)

    @property
    def skipped(self) -> bool:
        return self._found_inf is not None and read_host(self._found_inf) > 0

    @property
    def applied(self) -> bool:
        return not self.skipped

    @property
    def scale_before(self) -> float:
        return self._scale_at(0)

    @property
    def scale_after(self) -> float:
        return self._scale_at(1)

    def _scale_at(self, index: int) -> float:
        scales = self._scales
        if scales is None:
            return 1.0
        if type(scales) is tuple:  # the CPU rule's floats: a host read like any other, counted as one
            backend.note_sync()
            return scales[index]
        return read_host(scales[index:index + 1])

    def __repr__(self) -> str:
        return (f"ScalerStep(skipped={self.skipped}, scale_before={self.scale_before}, "
                f"scale_after={self.scale_after})")
