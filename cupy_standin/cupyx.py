"""``cupyx`` of the stand-in: ``scatter_add`` (NumPy's ``add.at``, one launch)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._array import ndarray, operand, quiet_call, read_bytes, run


def scatter_add(a: ndarray, slices: Any, value: Any) -> None:
    """``a[slices] += value`` with repeated indices accumulating (unbuffered)."""
    if type(a) is not ndarray:
        raise TypeError(f"cupyx.scatter_add: expected a cupy.ndarray, got {type(a)}")
    index = tuple(operand(s) if not isinstance(s, slice) else s for s in slices) if type(slices) is tuple \
        else (slices if isinstance(slices, slice) else operand(slices))
    view, source = a._a, operand(value)
    parts = slices if type(slices) is tuple else (slices,)
    sources = tuple(x for x in parts + (value,) if type(x) is ndarray)
    touched = min(max((x.size for x in sources), default=a.size), a.size) * a.itemsize  # one element per index
    run("scatter_add", lambda: quiet_call(np.add.at, view, index, source), a, *sources,
        moved=(read_bytes(sources) + touched, touched))
