"""Which path the 16-bit CPU kernels take: the numba loops, or ``astype`` (the exact fallback).

Every 16-bit CPU kernel of the package (``convert``, ReLU, linear's bias
epilogue, the loss-scale and optimizer loops) takes the numba path when
``LOADED and BACKEND == "numba"`` (two reads on the hot paths, no call), and
otherwise asks :func:`resolve`, which loads numba on first use.

Paths (``BACKEND``)
-------------------
``"numba"``
    numba is a dependency of the package: the default. Serial ``nogil`` loops
    whose scalar conversion is written in LLVM IR on 32-bit integers; with
    F16C (``F16C``) LLVM emits ``vcvtps2ph``/``vcvtph2ps`` plus a NaN fix-up,
    otherwise an integer/float recipe. Kernels compile lazily on first use
    (``cache=True`` keeps them on disk), or all at once with
    :func:`tinyamp.kernels.warmup`.
``"astype"``
    NumPy's own conversions and ufuncs (``TINYAMP_CAST_BACKEND=astype``, or
    numba missing or unusable): the same bits, slower.

``BACKEND`` is decided at import without importing numba (its import costs
about a second). If numba fails to import or compile, the module warns once
and falls back to ``"astype"``. Every public kernel function also takes
``backend=`` (``"numba"`` or ``"astype"``) to force a path (the tests do).
"""

from __future__ import annotations

import importlib.util
import os
import threading
import warnings

import numpy as np

from . import cpu_numba

__all__ = ["BACKEND", "F16C", "LOADED", "numba_available", "numba_default", "numba_takes", "resolve"]


def _numba_installed() -> bool:
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):  # e.g. sys.modules["numba"] = None
        return False


_ENV = os.environ.get("TINYAMP_CAST_BACKEND", "").strip().lower()
BACKEND = "astype" if _ENV == "astype" or not _numba_installed() else "numba"

#: Whether the numba float32 -> float16 kernels use the hardware conversion
#: (F16C on x86). ``None`` until numba has been loaded.
F16C = None

#: Whether the numba kernels are loaded (``cpu_numba.KERNELS`` filled).
LOADED = False

_nb_lock = threading.Lock()
_nb_state = None  # None: not tried; True: loaded; False: failed


def numba_available() -> bool:
    """Load the numba kernels if possible; return whether they are usable."""
    global _nb_state, LOADED
    if _nb_state is None:
        with _nb_lock:
            if _nb_state is None:
                try:
                    _load_numba()
                    _nb_state = LOADED = True
                except Exception as exc:  # ImportError, or numba/LLVM trouble
                    _nb_state = LOADED = False
                    _numba_failed(exc)
    return _nb_state


def numba_takes(*arrays: object) -> bool:
    """Whether the numba kernels of the transformer ops (``nn_numba``) run on these arrays.

    NumPy arrays (not CuPy's, not subclasses), with numba loaded (on first use); ``None`` entries
    (an absent weight) are allowed.
    """
    for a in arrays:
        if a is not None and type(a) is not np.ndarray:
            return False
    return numba_available()


def numba_default() -> bool:
    """True when calls without ``backend=`` take the numba path and its kernels are loaded."""
    return LOADED and BACKEND == "numba"


def _numba_failed(exc: Exception) -> None:
    global BACKEND
    if BACKEND == "numba":
        BACKEND = "astype"
        warnings.warn(
            f"tinyamp: numba cast kernels unavailable ({type(exc).__name__}: "
            f"{exc}); using NumPy's astype",
            RuntimeWarning,
            stacklevel=3,
        )


def _load_numba() -> None:
    """Define the numba kernels (compiled on first call) into ``cpu_numba.KERNELS``; set ``F16C``.

    Raises when numba is unusable; the tests replace it to simulate that.
    """
    global F16C
    F16C = cpu_numba.load()


def resolve(backend: "str | None") -> str:
    """The path a call takes: "numba" or "astype".

    ``backend=None`` follows ``BACKEND`` (loading numba on first use, and
    falling back to ``astype`` if it fails); a forced "numba" that cannot load
    raises.
    """
    b = BACKEND if backend is None else backend
    if b == "astype":
        return "astype"
    if b == "numba":
        if numba_available():
            return "numba"
        if backend is not None:
            raise RuntimeError("backend='numba' requested but numba kernels are unavailable")
        return "astype"
    raise ValueError(f"unknown backend {backend!r}; expected 'numba' or 'astype'")
