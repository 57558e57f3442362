"""Fast, bit-exact conversions between float32, float16 and bfloat16: ``convert(a, dtype)`` is ``a.astype(dtype)``.

:func:`convert` returns exactly what ``array.astype(dtype)`` returns (same
bits, shape and dtype), faster: on the CPU NumPy converts float16 <-> float32
with a scalar loop, and in a CPU AMP step these conversions, not the float32
GEMMs, took most of the time (figures: benchmarks/RESULTS.md, "bench_casts.py").
Which CPU path a call takes (numba loops in ``cpu_numba.py``, or ``astype``)
is decided in ``cpu_path.py``; on a GPU ``cuda_vector.convert`` converts in one
vectorised launch.

Exactness
---------
``convert(a, dt)`` is bit-identical to ``a.astype(dt)`` for every input of
the supported pairs, including +-0, +-inf, subnormals on both sides,
overflow to inf, halfway ties (round to nearest even) and NaN payloads:

* float32 -> float16 (NumPy): NaN keeps its sign and the top 10 payload
  bits; a payload that would become 0 becomes 1 (so it stays a NaN);
  signalling NaNs are not quieted. |x| >= 65520 gives inf.
* float16 -> float32 (NumPy): exact; NaN payload shifted up, not quieted.
* float32 -> bfloat16 (ml_dtypes): round to nearest even; every NaN becomes
  the canonical quiet NaN with the input's sign (0x7fc0 / 0xffc0).
* bfloat16 -> float32: exact (a 16-bit shift).
* float16 -> bfloat16 (ml_dtypes): via float32; NaN -> sign | 0x7fc0.
* bfloat16 -> float16 (ml_dtypes): float16 rounding of the value; NaN ->
  sign | 0x7e00 (ml_dtypes' rule, not NumPy's float32 -> float16 rule).

The tests check all 65536 16-bit inputs and the float32 rounding boundaries,
ties and a million random float32 patterns; the float32 -> float16 and
float32 -> bfloat16 kernels were also checked against ``astype`` on all 2**32
float32 bit patterns (0 mismatches). The results do not depend on DAZ/FTZ
(no kernel feeds a subnormal into float arithmetic); like NumPy's own float
ufuncs they assume the default round-to-nearest mode.

Differences from ``astype`` that are not about values: ``astype`` raises
NumPy's ``RuntimeWarning`` for overflow ("overflow encountered in cast") and
for signalling NaNs ("invalid value"); :func:`convert` never warns (AMP finds
overflow with ``isfinite``). C- or F-contiguous inputs keep their layout
(like ``astype``'s ``order='K'``); other inputs are copied to C order first.
Non-NumPy arrays (CuPy), ndarray subclasses and other dtypes go to
``astype``.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .cpu import cpu_numba, cpu_path
from .cuda import cuda_launch, cuda_vector
from .cpu.cpu_numba import U16, U32, flat

_GPU_PAIRS = frozenset(cuda_vector.CONVERT_PAIRS)  # CUDA arrays converted by cuda_vector.convert

__all__ = ["convert"]

# Below this many elements the fixed cost of a fast path is larger than what it
# saves, so ``convert`` uses ``astype`` for a widening; forcing a backend with
# ``backend=`` ignores the threshold. The break-even size is measured by the
# "small" groups of benchmarks/bench_casts.py (figures in benchmarks/RESULTS.md).
SMALL = 1024


# name of the numba kernel and the (input, output) integer views it takes
_NB_PAIRS = {
    (dt.float16, dt.float32): ("f16_to_f32", U16, U32),
    (dt.float32, dt.float16): ("f32_to_f16", U32, U16),
    (dt.float32, dt.bfloat16): ("f32_to_bf16", U32, U16),
    (dt.bfloat16, dt.float32): ("bf16_to_f32", U16, U32),
    (dt.float16, dt.bfloat16): ("f16_to_bf16", U16, U16),
    (dt.bfloat16, dt.float16): ("bf16_to_f16", U16, U16),
}


# Conversions that are exact (every value of the source is one of the target).
_EXACT = {(dt.float16, dt.float32), (dt.bfloat16, dt.float32)}
# (source dtype, target as the caller passed it) -> (kernel name, views, target dtype, exact), with numba.
_PLANS: dict[tuple, tuple] = {}


def _astype_into(array, dtype, out):
    if out is None:
        return array.astype(dtype)
    out[...] = array
    return out


def convert(array, dtype, out=None, backend=None):
    """Return ``array.astype(dtype)``, bit for bit, computed faster.

    Fast paths cover NumPy arrays among float32, float16 and
    ml_dtypes.bfloat16 (all six directions), and C-contiguous CUDA arrays among
    them (``cuda_vector.convert``, one vectorised launch); everything else (same dtype,
    other dtypes, CuPy or other array types, subclasses, arrays smaller than
    ``SMALL`` elements unless ``backend`` is given) uses ``astype``.

    ``out``: optional destination of ``dtype`` and ``array.shape``; it is
    filled and returned (avoids allocating, and the page faults of a fresh
    large buffer). Overlapping ``array`` is allowed.

    ``backend``: ``None`` (``cpu_path.BACKEND``), ``"numba"`` or ``"astype"``.
    """
    if (backend is None and type(array) is np.ndarray and cpu_path.LOADED and cpu_path.BACKEND == "numba"
            and array.flags.c_contiguous):
        plan = _PLANS.get((array.dtype, dtype))
        if plan is not None:  # the common call, on every op under autocast: no checks left to make
            name, vin, vout, target, exact = plan
            if out is None:
                if exact and array.size < SMALL:
                    return array.astype(target)  # a small widening: astype's own loop, nothing to silence
                res = np.empty(array.shape, target)
            elif (type(out) is np.ndarray and out.dtype == target and out.shape == array.shape
                  and out.flags.c_contiguous and not np.may_share_memory(array, out)):
                res = out  # a plain destination (a weight's cached copy, reconverted in place)
            else:
                res = None  # an odd destination: the checks below
            if res is not None:
                cpu_numba.KERNELS[name](array.reshape(-1).view(vin), res.reshape(-1).view(vout))
                return res
    target = np.dtype(dtype)
    if type(array) is not np.ndarray:
        if (out is None and array.dtype != target and (array.dtype, target) in _GPU_PAIRS
                and cuda_launch.on_gpu(array) and array.flags.c_contiguous):
            return cuda_vector.convert(array, target)  # astype's bits, vectorised loads and stores
        return _astype_into(array, target, out)
    key = (array.dtype, target)
    pair = _NB_PAIRS.get(key)
    if pair is None:
        return _astype_into(array, target, out)
    if backend is None and out is None and cpu_path.resolve(None) == "numba":
        # Remember the plan for this pair (keyed by the dtype as the caller spells it); a narrowing
        # of a small array takes numba too: astype would need an errstate, which costs more.
        _PLANS[(array.dtype, dtype)] = (*pair, target, key in _EXACT)
        if array.size and array.flags.c_contiguous:
            return convert(array, dtype)
    path = "astype" if backend is None and array.size < SMALL else cpu_path.resolve(backend)
    if path == "astype" or array.size == 0:
        if key in _EXACT:  # a widening never overflows: no warning to silence
            return _astype_into(array, target, out)
        with np.errstate(all="ignore"):  # never warn, whichever path runs
            return _astype_into(array, target, out)

    if out is not None:
        if type(out) is not np.ndarray or out.dtype != target or out.shape != array.shape:
            raise ValueError(
                f"out must be a numpy array of dtype {target} and shape {array.shape}, "
                f"got {type(out).__name__} {getattr(out, 'dtype', None)} "
                f"{getattr(out, 'shape', None)}"
            )
        same_order = (array.flags.c_contiguous and out.flags.c_contiguous) or (
            array.flags.f_contiguous and out.flags.f_contiguous
        )
        if not same_order or np.may_share_memory(array, out):
            np.copyto(out, convert(array, target, backend=path if backend else None))
            return out
        res = out
    else:
        if not (array.flags.c_contiguous or array.flags.f_contiguous):
            array = np.ascontiguousarray(array)
        res = np.empty_like(array, dtype=target)

    name, vin, vout = pair
    cpu_numba.KERNELS[name](flat(array).view(vin), flat(res).view(vout))
    return res
