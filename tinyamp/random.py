"""Seedable random number generation: ``ta.manual_seed`` and ``ta.Generator``.

Each device has a default generator (NumPy's PCG64 on the CPU, CuPy's on a GPU);
``manual_seed`` reseeds them all, so a run is reproducible from one integer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import backend


class Generator:
    """A random source for one device (``ta.Generator(device="cpu")``)."""

    def __init__(self, device: Any = "cpu") -> None:
        self.device = backend.Device(device)
        self.manual_seed(np.random.SeedSequence().entropy % (2**63))

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = int(seed)
        xp = self.device.xp
        self.rng = np.random.default_rng(self._seed) if xp is np else xp.random.default_rng(self._seed)
        return self

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> Any:
        if self.device.type != "cpu":
            raise NotImplementedError("get_state is supported for CPU generators only")
        return self.rng.bit_generator.state

    def set_state(self, state: Any) -> None:
        if self.device.type != "cpu":
            raise NotImplementedError("set_state is supported for CPU generators only")
        self.rng.bit_generator.state = state


_default: dict = {}
_seed = 0


def default_generator(device: Any = "cpu") -> Generator:
    device = backend.Device(device)
    gen = _default.get(device)
    if gen is None:
        gen = _default[device] = Generator(device).manual_seed(_seed)
    return gen


def manual_seed(seed: int) -> Generator:
    """Seed every device's default generator; returns the CPU one."""
    global _seed
    _seed = int(seed)
    for gen in _default.values():
        gen.manual_seed(_seed)
    return default_generator("cpu")


def seed() -> int:
    """Seed from fresh entropy (as torch.seed); returns the seed."""
    value = int(np.random.SeedSequence().entropy % (2**63))
    manual_seed(value)
    return value


def initial_seed() -> int:
    return _seed


@backend.on_cuda_switch
def _forget_cuda_generators() -> None:
    """A CUDA generator draws with one backend's arrays (CuPy or the stand-in): a switch makes new ones."""
    for dev in [d for d in _default if d.type != "cpu"]:
        del _default[dev]
