"""Which path the 16-bit CPU kernels take: numba loops, NumPy bit recipes or ``astype``.

Every 16-bit CPU kernel of the package (``convert``, ReLU, the GEMM epilogue, the
loss-scale and optimizer loops) asks :func:`resolve` (or, on its fast path,
:func:`numba_default`) which implementation to run.

Paths (``BACKEND``)
-------------------
``"numba"``
    When numba is importable (a dependency of the package). Serial
    ``nogil`` loops whose scalar conversion is written in LLVM IR on 32-bit
    integers; with F16C (``F16C``) LLVM emits ``vcvtps2ph``/``vcvtph2ps``
    plus a NaN fix-up, otherwise an integer/float recipe. Kernels compile
    lazily on first use (``cache=True`` keeps them on disk), or all at once
    with :func:`tinyamp.kernels.warmup`.
``"numpy-bits"``
    Without numba. float16 -> float32 is 4 integer/float NumPy passes,
    float32 -> float16 a 13-pass recipe; ml_dtypes' bfloat16 casts are already
    vectorised and are kept. ReLU and its backward work on int16 views.
``"astype"``
    Plain ``astype`` everywhere (``TINYAMP_CAST_BACKEND=astype``).

``BACKEND`` is decided at import without importing numba (its import costs
about a second). If numba is installed but fails to import or compile, the
module warns once, falls back to ``"numpy-bits"`` and updates ``BACKEND``.
The environment variable ``TINYAMP_CAST_BACKEND`` (``numba``, ``numpy``,
``astype``) overrides the choice; every public function also takes
``backend=`` to force a path (the tests do).
"""

from __future__ import annotations

import importlib.util
import os
import threading
import warnings

import numpy as np

from . import cpu_numba

__all__ = ["BACKEND", "F16C", "numba_available", "numba_default", "numba_takes", "resolve"]


def _numba_installed():
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):  # e.g. sys.modules["numba"] = None
        return False


_ENV = os.environ.get("TINYAMP_CAST_BACKEND", "").strip().lower()
if _ENV in ("astype",):
    BACKEND = "astype"
elif _ENV in ("numpy", "numpy-bits"):
    BACKEND = "numpy-bits"
elif _numba_installed():
    BACKEND = "numba"
else:
    BACKEND = "numpy-bits"

#: Whether the numba float32 -> float16 kernels use the hardware conversion
#: (F16C on x86). ``None`` until numba has been loaded.
F16C = None

# The numba kernels, loaded lazily (cpu_numba.load).
_nb_lock = threading.Lock()
_nb_state = None  # None: not tried; True: loaded; False: failed


def numba_available():
    """Load the numba kernels if possible; return whether they are usable."""
    global _nb_state
    if _nb_state is None:
        with _nb_lock:
            if _nb_state is None:
                try:
                    _load_numba()
                    _nb_state = True
                except Exception as exc:  # ImportError, or numba/LLVM trouble
                    _nb_state = False
                    _numba_failed(exc)
    return _nb_state


def numba_takes(*arrays):
    """Whether the numba kernels of the transformer ops (``nn_numba``) run on these arrays.

    NumPy arrays (not CuPy's, not subclasses), with numba loaded (on first use); ``None`` entries
    (an absent weight) are allowed.
    """
    for a in arrays:
        if a is not None and type(a) is not np.ndarray:
            return False
    return numba_available()


def numba_default():
    """True when calls without ``backend=`` take the numba path and its kernels are loaded.

    The test at the head of the kernels' fast paths (the common call on every
    op under autocast); ``False`` before the first :func:`resolve` loads numba.
    """
    return _nb_state is True and BACKEND == "numba"


def _numba_failed(exc):
    global BACKEND
    if BACKEND == "numba":
        BACKEND = "numpy-bits"
        warnings.warn(
            f"tinyamp: numba cast kernels unavailable ({type(exc).__name__}: "
            f"{exc}); using the NumPy conversions",
            RuntimeWarning,
            stacklevel=3,
        )


def _load_numba():
    """Define the numba kernels (compiled on first call) into ``cpu_numba.KERNELS``; set ``F16C``.

    Raises when numba is unusable; the tests replace it to simulate that.
    """
    global F16C
    F16C = cpu_numba.load()


def resolve(backend):
    """The path a call takes: "numba", "numpy-bits" or "astype".

    ``backend=None`` follows ``BACKEND`` (loading numba on first use, and
    falling back to the NumPy recipes if it fails); a forced "numba" that
    cannot load raises.
    """
    b = BACKEND if backend is None else backend
    if b in ("numpy", "numpy-bits"):
        return "numpy-bits"
    if b == "astype":
        return "astype"
    if b == "numba":
        if numba_available():
            return "numba"
        if backend is not None:
            raise RuntimeError("backend='numba' requested but numba kernels are unavailable")
        return "numpy-bits"
    raise ValueError(f"unknown backend {backend!r}; expected 'numba', 'numpy' or 'astype'")
