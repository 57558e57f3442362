"""``cupy.random`` of the stand-in: ``default_rng(seed)``, CuPy's Generator over cuRAND states kept on the device
(tinyamp draws with its own Philox kernels, ``kernels/cuda/cuda_random.py``; this imitates what CuPy's own
generator costs and how it behaves in a capture).

Numbers come from NumPy's PCG64 seeded the same way, so a stand-in run is
reproducible (CuPy's own streams differ from NumPy's, and tinyamp promises
reproducibility per device, not across devices). Each draw is generated "on
the device": one launch and one allocation, no host-to-device copy. CuPy's
Generator has no ``permutation`` or ``normal``; neither has this one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _capture, runtime
from ._array import ndarray, produce
from ._routines import zeros

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _float_dtype(dtype: Any, method: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in _FLOATS:
        raise TypeError(f"cupy.random.Generator.{method}: dtype must be float32 or float64, got {dtype}")
    return dtype


class _BitGenerator:
    """CuPy's ``XORWOW`` bit generator as far as it shows: ``_state``, a device int8 array as large as
    CuPy's (one 48-byte ``curandState`` for each of 8 * 256 threads per multiprocessor: 12 MiB on an
    H200), read and written in place. Here its first 40 bytes hold the PCG64 state that draws."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._state = zeros((_CURAND_STATE_BYTES * 8 * 256 * _multiprocessors(),), np.int8)
        self.store()

    def store(self) -> None:
        """The host generator's state into the device array."""
        self._state._a[:_STATE_BYTES] = np.frombuffer(_pcg64_bytes(self._rng.bit_generator.state), np.int8)

    def load(self) -> None:
        """The device array (which ``_state[...] = ...`` may have rewritten) into the host generator."""
        b = self._state._a[:_STATE_BYTES].tobytes()
        self._rng.bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {"state": int.from_bytes(b[:16], "little"), "inc": int.from_bytes(b[16:32], "little")},
            "has_uint32": int.from_bytes(b[32:36], "little"), "uinteger": int.from_bytes(b[36:40], "little")}


_STATE_BYTES = 40
_CURAND_STATE_BYTES = 48  # sizeof(curandStateXORWOW): d, v[5], two flags, a float and a double


def _multiprocessors() -> int:
    return int(runtime.getDeviceProperties(runtime.getDevice())["multiProcessorCount"])


def _pcg64_bytes(state: dict) -> bytes:
    inner = state["state"]
    return (int(inner["state"]).to_bytes(16, "little") + int(inner["inc"]).to_bytes(16, "little")
            + int(state["has_uint32"]).to_bytes(4, "little") + int(state["uinteger"]).to_bytes(4, "little"))


class Generator:
    """``cupy.random.Generator``: ``random``, ``uniform``, ``standard_normal``, ``integers``, ``bit_generator``."""

    def __init__(self, seed: Any = None) -> None:
        self._rng = np.random.default_rng(seed)
        self.bit_generator = _BitGenerator(self._rng)

    def _draw(self, kernel: str, draw: Any) -> ndarray:
        """One drawing kernel, reading and advancing the state held on the device. CuPy keeps a generator's
        state on the device, so a capture does not advance it (its state comes back when the capture ends)
        and each replay draws the next numbers."""
        bits = self.bit_generator
        bits.load()
        if _capture.active is not None:
            state = self._rng.bit_generator.state
            _capture.on_rollback(self, lambda: (setattr(self._rng.bit_generator, "state", state), bits.store()))

        def drawn() -> Any:
            bits.load()
            values = draw()
            bits.store()
            return values
        return produce(kernel, drawn)

    def random(self, size: Any = None, dtype: Any = np.float64, out: "ndarray | None" = None) -> ndarray:
        dtype = _float_dtype(dtype, "random")
        return self._draw("random", lambda: self._rng.random(size, dtype=dtype))

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None, dtype: Any = np.float64) -> ndarray:
        dtype = _float_dtype(dtype, "uniform")
        return self._draw("uniform", lambda: self._rng.uniform(low, high, size).astype(dtype))

    def standard_normal(self, size: Any = None, dtype: Any = np.float64, out: "ndarray | None" = None) -> ndarray:
        dtype = _float_dtype(dtype, "standard_normal")
        return self._draw("standard_normal", lambda: self._rng.standard_normal(size, dtype=dtype))

    def integers(self, low: int, high: "int | None" = None, size: Any = None, dtype: Any = np.int64,
                 endpoint: bool = False) -> ndarray:
        return self._draw("integers", lambda: self._rng.integers(low, high, size, dtype=dtype, endpoint=endpoint))


def default_rng(seed: Any = None) -> Generator:
    return Generator(seed)
