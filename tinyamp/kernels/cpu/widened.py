"""A 16-bit array's float32 widening, kept from the pass that rounded it, for the CPU's next widening of it.

The CPU computes 16-bit GEMMs in float32 BLAS, so it widens every 16-bit
operand, and a Cast node to float32 widens its input. Twice in an AMP step the
array being widened was rounded from float32 just before: a Cast node's
forward under autocast (a weight or an input batch, then widened by the LOWER
op's GEMM) and a GEMM's 16-bit result in a backward replay (a weight's
gradient, then widened by its Cast node's backward). There one numba pass
writes the 16-bit result and its widening (:func:`narrow`,
:func:`round_in_place`), and the widening is kept here and handed once to the
first widening of that array (:func:`take`), which converts nothing. The bits
are the same: widening float16/bfloat16 to float32 is exact, so the kept array
equals a fresh widening while the 16-bit array is unchanged.

Entries are made only inside an autocast region (a Cast's output, which
autocast hands straight to its op) and inside a backward replay
(:func:`begin_replay`; gradients go from node to node). The outermost region's
exit and the replay's end empty the store, and so does every write into an
array through the Tensor API (``Tensor._store``) and every ``numpy()`` or
``numpy.asarray`` alias handed out, so a 16-bit array written in between is
widened afresh. Only matrices of at least ``convert.SMALL`` elements (a GEMM's
operands, a linear layer's weight gradient), at most two (both operands); an
older one is dropped. NumPy arrays with numba only; elsewhere :func:`narrow`
and :func:`round_in_place` return None and nothing is kept.
"""

from __future__ import annotations

import threading
import weakref
from contextvars import ContextVar, Token
from typing import Any

import numpy as np

from ... import dtypes as dt
from ..convert import SMALL
from .cpu_path import numba_default
from .cpu_numba import KERNELS
from .cpu_numpy import U16, U32

_NARROW = {dt.float16: "narrow_f16", dt.bfloat16: "narrow_bf16"}
_ROUND = {dt.float16: "round_f16_in_place", dt.bfloat16: "round_bf16_in_place"}
_KEPT: dict[int, tuple[Any, Any]] = {}  # id(16-bit array) -> (weak reference to it, its float32 widening)
_keep_lock = threading.Lock()  # the oldest entry is dropped by one thread at a time
_in_replay: ContextVar[bool] = ContextVar("tinyamp_widened_replay", default=False)


def _takes(array: Any, dtype: Any) -> bool:
    # Below SMALL elements a widening is astype's own loop, cheaper than keeping one.
    return (type(array) is np.ndarray and array.ndim == 2 and array.size >= SMALL and array.dtype == dt.float32
            and array.flags.c_contiguous and dtype in _NARROW and numba_default())


def narrow(source: Any, dtype: Any) -> Any:
    """``source.astype(dtype)`` for a Cast node under autocast, its widening kept; None where not taken."""
    if not _takes(source, dtype):
        return None
    low, wide = np.empty(source.shape, dtype), np.empty(source.shape, dt.float32)
    KERNELS[_NARROW[dtype]](source.reshape(-1).view(U32), low.reshape(-1).view(U16), wide.reshape(-1).view(U32))
    _keep(low, wide)
    return low


def round_in_place(acc: Any, dtype: Any) -> Any:
    """``acc.astype(dtype)`` for a GEMM's own float32 result in a backward replay; ``acc`` becomes its
    widening and is kept. None where not taken (outside a replay too)."""
    if not (_in_replay.get() and _takes(acc, dtype)):
        return None
    low = np.empty(acc.shape, dtype)
    KERNELS[_ROUND[dtype]](acc.reshape(-1).view(U32), low.reshape(-1).view(U16))
    _keep(low, acc)
    return low


def _keep(low: Any, wide: Any) -> None:
    with _keep_lock:
        if len(_KEPT) >= 2:
            _KEPT.pop(next(iter(_KEPT)), None)
        _KEPT[id(low)] = (weakref.ref(low), wide)


def take(low: Any) -> Any:
    """The kept float32 widening of ``low`` (handed out once), or None."""
    if not _KEPT:
        return None
    entry = _KEPT.pop(id(low), None)
    return entry[1] if entry is not None and entry[0]() is low else None


def forget() -> None:
    """Drop every entry (an array may have been written)."""
    if _KEPT:
        _KEPT.clear()


def begin_replay() -> Token:
    """A backward replay starts (the engine): its GEMMs keep their 16-bit results' widenings."""
    return _in_replay.set(True)


def end_replay(token: Token) -> None:
    """The replay ended: nothing is kept past it."""
    _in_replay.reset(token)
    forget()
