"""tinyamp's dtypes and the small rules about them.

Inside tinyamp a dtype is a ``numpy.dtype`` (bfloat16 and the fp8 formats come from
``ml_dtypes``), so arrays, kernels and the precision rules all speak the same language.
What users see (``ta.float16``, ``tensor.dtype``) is a :class:`dtype`, PyTorch's
``torch.dtype``: one object per dtype, equal to (and hashing as) its NumPy dtype, with
PyTorch's ``is_floating_point``, ``is_signed``, ``is_complex`` and ``itemsize``; NumPy and
CuPy accept it wherever they take a dtype (they read its ``.dtype``), CuPy except the fp8
ones (CuPy 14 has no fp8 dtype): on a GPU fp8 values are uint8 codes (``kernels/fp8.py``).

The fp8 formats (PyTorch's names): ``float8_e4m3fn`` (E4M3, max 448, no inf,
one NaN code per sign), ``float8_e5m2`` (E5M2, max 57344, IEEE-like inf/NaN)
and ``float8_e8m0fnu`` (an unsigned power of two 2^-127..2^127, the MX block
scale). They are storage formats: no op computes in them, so they are not in
``FLOATING``; tensors may hold them on the CPU.
"""

from __future__ import annotations

import builtins
from typing import Any

import ml_dtypes
import numpy as np

float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)

# PyTorch-style aliases.
half = float16
float = float32  # noqa: A001 - deliberate, as torch.float
double = float64
long = int64

FLOATING = (float16, bfloat16, float32, float64)
LOW_PRECISION = (float16, bfloat16)
FP8 = (float8_e4m3fn, float8_e5m2, float8_e8m0fnu)

# Every dtype a tensor may hold: PyTorch's real dtypes that NumPy and CuPy share,
# plus bfloat16. Complex, extended precision (np.longdouble), strings, objects,
# dates and records are refused where a tensor or a dtype is made.
SUPPORTED = (float64, float32, float16, bfloat16, int64, int32, int16, int8,
             np.dtype(np.uint64), np.dtype(np.uint32), np.dtype(np.uint16), uint8, bool_, *FP8)

_BY_NAME = {
    "float16": float16, "half": float16, "bfloat16": bfloat16,
    "float32": float32, "float": float32, "float64": float64, "double": float64,
    "int8": int8, "uint8": uint8, "int16": int16, "int32": int32,
    "int64": int64, "long": int64, "bool": bool_,
    "float8_e4m3fn": float8_e4m3fn, "float8_e5m2": float8_e5m2, "float8_e8m0fnu": float8_e8m0fnu,
}


class dtype:  # noqa: N801 - torch.dtype
    """``torch.dtype``: a tensor's element type, standing for (and equal to) a NumPy dtype."""

    __slots__ = ("dtype", "is_floating_point", "is_signed", "is_complex", "itemsize", "_name")

    def __init__(self, numpy_dtype: np.dtype, name: str) -> None:
        self.dtype = numpy_dtype  # what NumPy and CuPy read when handed this object as a dtype
        self.is_floating_point = numpy_dtype.kind == "f" or numpy_dtype == bfloat16 or numpy_dtype in FP8
        self.is_signed = numpy_dtype.kind in "fi" or numpy_dtype in (bfloat16, float8_e4m3fn, float8_e5m2)
        self.is_complex = False
        self.itemsize = numpy_dtype.itemsize
        self._name = name

    def __eq__(self, other: Any) -> bool:
        return self.dtype == (other.dtype if isinstance(other, dtype) else other)

    def __hash__(self) -> int:
        return hash(self.dtype)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.dtype, name)  # kind, type, char, name, str: NumPy's answers

    def __repr__(self) -> str:
        return self._name

    __str__ = __repr__

    def __reduce__(self) -> tuple:
        return (as_public, (self.dtype,))

    def to_real(self) -> "dtype":
        return self


_PUBLIC: dict = {}  # NumPy dtype -> its dtype object, filled at the end of this module
_BY_ID: dict = {}   # id of the NumPy dtype -> its dtype object


def as_public(numpy_dtype: Any) -> Any:
    """The :class:`dtype` standing for ``numpy_dtype`` (what ``tensor.dtype`` returns); NumPy's own if none.

    NumPy's dtypes of the builtin types are singletons, so the usual lookup is by identity
    (``_BY_ID``, kept alive by ``_PUBLIC``'s keys): hashing a dtype costs more than the rest.
    """
    return _BY_ID.get(id(numpy_dtype)) or _PUBLIC.get(numpy_dtype, numpy_dtype)


def as_dtype(spec: Any) -> np.dtype:
    """Turn ``ta.float16``, ``"float16"``, ``np.float16`` or ``float`` into a dtype."""
    if isinstance(spec, np.dtype):
        return _supported(spec)
    if isinstance(spec, dtype):
        return spec.dtype
    if isinstance(getattr(spec, "dtype", None), dtype):  # a legacy tensor type: torch.LongTensor
        return spec.dtype.dtype
    if isinstance(spec, str):
        try:
            return _BY_NAME[spec]
        except KeyError:
            raise TypeError(f"unknown dtype {spec!r}; expected one of {sorted(_BY_NAME)}") from None
    if spec is bool:
        return bool_
    if spec is int:
        return int64
    if spec is builtins.float:
        return float32
    try:
        resolved = np.dtype(spec)
    except TypeError:
        raise TypeError(f"not a dtype: {spec!r}") from None
    return _supported(resolved)


def _supported(dtype: np.dtype) -> np.dtype:
    if dtype not in SUPPORTED:
        raise TypeError(f"dtype {dtype} is not supported: tinyamp tensors are "
                        f"{', '.join(dtype_name(d) for d in SUPPORTED)}")
    return dtype


def is_floating(dtype: np.dtype) -> bool:
    """True for float16, bfloat16, float32 and float64."""
    return dtype in FLOATING


def is_fp8(dtype: np.dtype) -> bool:
    """True for the fp8 storage formats (float8_e4m3fn, float8_e5m2, float8_e8m0fnu)."""
    return dtype in FP8


def is_low_precision(dtype: np.dtype) -> bool:
    return dtype == float16 or dtype == bfloat16


def opmath_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype arithmetic on ``dtype`` runs in: float32 for float16/bfloat16, else ``dtype`` itself.

    Low-precision values are computed in float32 and rounded once when the
    result is stored (PyTorch's "opmath" type; tensor cores do the same).
    """
    return float32 if dtype == float16 or dtype == bfloat16 else dtype


def opmath(array: Any) -> Any:
    """``array`` in its :func:`opmath_dtype`: a float32 copy of a float16/bfloat16 array, else ``array``."""
    dtype = array.dtype
    return array.astype(float32) if dtype == float16 or dtype == bfloat16 else array


def dtype_name(dtype: np.dtype) -> str:
    return "bool" if dtype == bool_ else str(dtype)


def widest_float(dtypes: "list[np.dtype]") -> np.dtype:
    """The floating dtype that holds every floating dtype in ``dtypes`` (PyTorch's ``promote_types``).

    The widest one, except that float16 with bfloat16 is float32: they have the
    same width but neither holds the other (float16 has more mantissa, bfloat16
    more range), and float32 holds both exactly.
    """
    floats = [d for d in dtypes if d in FLOATING]
    widest = max(floats, key=lambda d: d.itemsize)
    if widest.itemsize == 2 and float16 in floats and bfloat16 in floats:
        return float32
    return widest


def can_cast_in_place(source: np.dtype, destination: np.dtype) -> bool:
    """Whether an in-place op may store a ``source`` result into a ``destination`` tensor.

    PyTorch's rule (``canCast``): ``h.add_(f)`` computes in float32 and rounds into
    float16, but a float result never goes into an integer tensor, and only a
    bool result goes into a bool tensor.
    """
    if source in FLOATING and destination not in FLOATING:
        return False
    return destination != bool_ or source == bool_


def finfo(dtype: Any = None) -> Any:
    """Limits of a floating dtype (``torch.finfo``): ``.max``, ``.min``, ``.eps``, ``.tiny``, ``.bits``.

    ``ml_dtypes.finfo`` answers for bfloat16 as well as NumPy's types; the
    default is float32, tinyamp's (fixed) default dtype.
    """
    resolved = float32 if dtype is None else as_dtype(dtype)
    if resolved not in FLOATING and resolved not in FP8:
        raise TypeError(f"finfo: {dtype_name(resolved)} is not a floating point dtype; use iinfo")
    return ml_dtypes.finfo(resolved)


def iinfo(dtype: Any) -> np.iinfo:
    """Limits of an integer dtype (``torch.iinfo``): ``.max``, ``.min``, ``.bits``."""
    return np.iinfo(as_dtype(dtype))


def get_default_dtype() -> np.dtype:
    """float32: the dtype of floating tensors made from Python floats (fixed in tinyamp)."""
    return float32


def checked_array_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a tensor made from an array of ``dtype`` gets; PyTorch's refusal for the rest."""
    if dtype.byteorder not in "=|" and dtype.newbyteorder("=") in SUPPORTED:
        return dtype.newbyteorder("=")  # a big-endian file's array: same values, native order
    if dtype not in SUPPORTED:
        names = [dtype_name(d) for d in SUPPORTED]
        raise TypeError(f"ta.tensor: can't convert np.ndarray of type numpy.{dtype.type.__name__}. The only supported "
                        f"types are: {', '.join(names[:-1])}, and {names[-1]}.")
    return dtype


def native_array(array: Any) -> Any:
    """``array`` itself when a tensor can hold its dtype (in native byte order if not); else PyTorch's TypeError."""
    dtype = checked_array_dtype(array.dtype)
    return array if dtype == array.dtype else array.astype(dtype)


_PUBLIC.update({d: dtype(d, dtype_name(d)) for d in SUPPORTED})
_BY_ID.update({id(d): public for d, public in _PUBLIC.items()})


class memory_format:  # noqa: N801 - torch.memory_format
    """``torch.memory_format``: accepted by ``.to()``, ``contiguous()`` and ``Module.to()``; tinyamp's layout
    stays row-major whatever is asked (its kernels read any strides; there is no cuDNN to prefer NHWC)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"tinyamp.{self._name}"

    def __reduce__(self) -> str:
        return self._name


contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")
