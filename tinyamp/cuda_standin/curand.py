"""``cupy.cuda.curand`` of the stand-in: cuRAND's host API for the Philox4x32-10 generator, the one tinyamp draws
with (through ``cupy.random.RandomState``).

As in cuRAND, a Philox generator's whole state is a seed and an offset into its stream, set from the host
(``setPseudoRandomGeneratorSeed``, ``setGeneratorOffset``); it holds no device memory of CuPy's pool. The
numbers come from NumPy's Philox (4x64) keyed by the seed with the offset as its counter, so they differ from
cuRAND's, but the same seed and offset give the same numbers and draws at offsets further apart than the
values they take do not overlap. After a draw of ``n`` values the offset moves on by ``n`` 32-bit outputs
(two for a double). As CuPy's wrapper, each generating call refuses a stream that is capturing, and an odd
count of normal values.
"""

from __future__ import annotations

import itertools

import numpy as np

from . import _device, runtime
from ._array import run
from ._memory import resolve

CURAND_RNG_PSEUDO_DEFAULT, CURAND_RNG_PSEUDO_XORWOW = 100, 101
CURAND_RNG_PSEUDO_MRG32K3A, CURAND_RNG_PSEUDO_MTGP32, CURAND_RNG_PSEUDO_MT19937 = 121, 141, 142
CURAND_RNG_PSEUDO_PHILOX4_32_10 = 161

_CAPTURE_REFUSAL = "calling cuRAND API during stream capture is currently unsupported"  # CuPy's text
_handles = itertools.count(0x7E57_0000)
_generators: dict = {}


class _Philox:
    def __init__(self) -> None:
        self.seed, self.offset = 0, 0


def createGenerator(rng_type: int) -> int:  # noqa: N802 - CuPy's name
    if rng_type != CURAND_RNG_PSEUDO_PHILOX4_32_10:
        raise NotImplementedError(f"cupy.cuda.curand.createGenerator({rng_type}): the stand-in has only "
                                  f"Philox4x32-10 (CURAND_RNG_PSEUDO_PHILOX4_32_10 = 161), what tinyamp uses")
    handle = next(_handles)
    _generators[handle] = _Philox()
    return handle


def destroyGenerator(generator: int) -> None:  # noqa: N802
    _generators.pop(generator, None)


def setPseudoRandomGeneratorSeed(generator: int, seed: int) -> None:  # noqa: N802
    _generators[generator].seed = int(seed) % 2**64


def setGeneratorOffset(generator: int, offset: int) -> None:  # noqa: N802
    _generators[generator].offset = int(offset) % 2**64


def _generate(kernel: str, generator: int, ptr: int, num: int, dtype: type, draw: "callable") -> None:
    if runtime.streamIsCapturing(_device.get_current_stream().ptr):
        raise NotImplementedError(_CAPTURE_REFUSAL)
    state = _generators[generator]
    buffer, start = resolve(int(ptr), num * np.dtype(dtype).itemsize, f"cupy.cuda.curand.{kernel}")
    out = np.ndarray((num,), dtype, buffer=buffer, offset=start)
    source = np.random.Generator(np.random.Philox(key=state.seed, counter=state.offset))
    values = draw(source, num)
    run(kernel, lambda: out.__setitem__(Ellipsis, values), moved=(0, out.nbytes))
    state.offset = (state.offset + num * np.dtype(dtype).itemsize // 4) % 2**64


def generateUniform(generator: int, outputPtr: int, num: int) -> None:  # noqa: N802, N803
    """Floats in (0, 1], as cuRAND's."""
    _generate("curandGenerateUniform", generator, outputPtr, num, np.float32,
              lambda g, n: (1 - g.random(n, dtype=np.float32)))


def generateUniformDouble(generator: int, outputPtr: int, num: int) -> None:  # noqa: N802, N803
    _generate("curandGenerateUniformDouble", generator, outputPtr, num, np.float64, lambda g, n: 1 - g.random(n))


def _normal(name: str, n: int) -> None:
    if n % 2 == 1:
        raise ValueError(f"{name} can only generate even number of random variables simultaneously. "
                         "See issue #390 for detail.")


def generateNormal(generator: int, outputPtr: int, n: int, mean: float, stddev: float) -> None:  # noqa: N802, N803
    _normal("curandGenerateNormal", n)
    _generate("curandGenerateNormal", generator, outputPtr, n, np.float32,
              lambda g, k: (g.standard_normal(k, dtype=np.float32) * np.float32(stddev) + np.float32(mean)))


def generateNormalDouble(generator: int, outputPtr: int, n: int,  # noqa: N802
                         mean: float, stddev: float) -> None:  # noqa: N803
    _normal("curandGenerateNormalDouble", n)
    _generate("curandGenerateNormalDouble", generator, outputPtr, n, np.float64,
              lambda g, k: g.standard_normal(k) * stddev + mean)
