"""Seedable random number generation: ``ta.manual_seed`` and ``ta.Generator``.

Each device has a default generator (NumPy's PCG64 on the CPU, Philox4x32-10 kernels on a
GPU, ``kernels/cuda/cuda_random.py``); ``manual_seed`` reseeds them all, so a run is reproducible from one integer.
A generator's state is a uint8 tensor (``ta.get_rng_state``, ``ta.cuda.get_rng_state``,
``Generator.get_state``), as PyTorch's ByteTensor: the bytes of NumPy's PCG64 state on
the CPU; on a GPU, as PyTorch's, a seed and an offset (16 bytes, kept on the host), so
saving or restoring it (``utils.checkpoint`` does at each call) copies nothing on the
device, and a draw inside a CUDA graph capture replays as new draws (see ``_Philox``).
The streams themselves differ from PyTorch's (Mersenne Twister, its Philox kernels' layout).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import backend
from . import dtypes as dt
from .kernels.convert import convert
from .kernels.cuda import cuda_random
from .tensor import Tensor

_PCG64_BYTES = 40  # state and increment (16 bytes each), has_uint32 and uinteger (4 bytes each)
_CUDA_STATE_BYTES = 16  # seed and offset, 8 bytes each, as PyTorch's CUDA generator state


def _pcg64_to_bytes(state: dict) -> np.ndarray:
    inner = state["state"]
    raw = (int(inner["state"]).to_bytes(16, "little") + int(inner["inc"]).to_bytes(16, "little")
           + int(state["has_uint32"]).to_bytes(4, "little") + int(state["uinteger"]).to_bytes(4, "little"))
    return np.frombuffer(raw, dtype=np.uint8).copy()


def _pcg64_from_bytes(raw: np.ndarray) -> dict:
    b = bytes(raw)
    return {"bit_generator": "PCG64",
            "state": {"state": int.from_bytes(b[:16], "little"), "inc": int.from_bytes(b[16:32], "little")},
            "has_uint32": int.from_bytes(b[32:36], "little"), "uinteger": int.from_bytes(b[36:40], "little")}


class _Philox:
    """A CUDA generator's draws: Philox4x32-10 kernels (``kernels/cuda/cuda_random.py``) at a seed and an offset
    kept on the host, PyTorch's design: eager, both are kernel arguments and the offset moves past each draw.
    During a CUDA graph capture a draw reads the seed and a base offset from a device array of the graph
    (``CUDAGraph.philox_state``), at an offset relative to the capture's first draw; each replay writes the
    generator's seed and offset there first and moves the offset past what the graph draws, so every replay
    draws new numbers, the ones the same eager steps would have drawn."""

    def __init__(self, xp: Any, seed: int) -> None:
        self._xp = xp
        self.seed, self.offset = seed, 0

    def _draw(self, kind: str, size: Any, dtype: Any) -> Any:
        dtype = np.dtype(dtype)
        if dtype not in cuda_random.DTYPES:
            raise TypeError(f"a random draw ({kind}) on a CUDA generator: dtype must be float32 or float64, "
                            f"got {dtype}")
        out = self._xp.empty(() if size is None else size, dtype)
        capture = backend.current_capture()
        if capture is None:
            cuda_random.draw(kind, out, self.seed, self.offset)
            self.offset = (self.offset + out.size) % 2**64
        else:
            state, offset = capture.philox_state(self, out.size)
            cuda_random.draw(kind, out, 0, offset, state)
        return out

    def random(self, size: Any = None, dtype: Any = np.float64) -> Any:
        return self._draw("uniform", size, dtype)

    def standard_normal(self, size: Any = None, dtype: Any = np.float64) -> Any:
        return self._draw("normal", size, dtype)

    def integers(self, low: int, high: "int | None" = None, size: Any = None, dtype: Any = np.int64) -> Any:
        """Integers in [low, high) from float64 uniforms (exact for ranges up to 2**53)."""
        if high is None:
            low, high = 0, low
        if high - low > 2**53:
            raise ValueError(f"randint: a range of {high - low} values is too wide for a CUDA generator "
                             f"(at most 2**53)")
        u = self.random(size, np.float64)
        return (self._xp.floor(u * float(high - low)) + float(low)).astype(dtype)


class Generator:
    """A random source for one device (``ta.Generator(device="cpu")``)."""

    def __init__(self, device: Any = "cpu") -> None:
        self.device = backend.Device(device)
        self.manual_seed(np.random.SeedSequence().entropy % (2**63))

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = _seed_value(seed)
        xp = self.device.xp
        if xp is np:
            self.rng = np.random.default_rng(self._seed)
        elif isinstance(getattr(self, "rng", None), _Philox) and self.rng._xp is xp:
            self.rng.seed, self.rng.offset = self._seed % 2**64, 0  # the same object: graphs hold it
        else:
            self.rng = _Philox(xp, self._seed % 2**64)
        return self

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> Any:
        """The generator's state as a uint8 CPU tensor (PyTorch's ByteTensor)."""
        if self.device.type == "cpu":
            raw = _pcg64_to_bytes(self.rng.bit_generator.state)
        else:
            raw = np.array([self.rng.seed, self.rng.offset], np.uint64).view(np.uint8)
        return Tensor(raw)

    def set_state(self, new_state: Any) -> "Generator":
        """Restore a state from ``get_state`` (a uint8 tensor of the same size)."""
        if not isinstance(new_state, Tensor):
            raise TypeError(f"expected a torch.ByteTensor, but got {type(new_state).__name__}")
        if new_state.dtype != np.uint8:
            raise TypeError("RNG state must be a torch.ByteTensor")
        raw = backend.to_host(new_state.array).reshape(-1)
        if self.device.type == "cpu":
            if raw.size != _PCG64_BYTES:
                raise RuntimeError(f"Expected a CPU generator state (PCG64) of size {_PCG64_BYTES} but found "
                                   f"the input RNG state size to be {raw.size}")
            state = _pcg64_from_bytes(raw)
            if state["state"]["inc"] % 2 == 0 or state["has_uint32"] not in (0, 1):
                # A PCG64 increment is always odd (an even one, as in zeros(40), makes a generator of zeros):
                # not a state get_state made. PyTorch refuses such a state too ("Invalid mt19937 state").
                raise RuntimeError("Invalid PCG64 state: its increment must be odd and has_uint32 0 or 1 (set_state "
                                   "takes a state get_state returned)")
            self.rng.bit_generator.state = state
            return self
        if raw.size != _CUDA_STATE_BYTES:
            raise RuntimeError(f"Expected a {self.device} generator state of size {_CUDA_STATE_BYTES} but found "
                               f"the input RNG state size to be {raw.size}")
        self.rng.seed, self.rng.offset = (int(v) for v in raw.copy().view(np.uint64))
        return self


_default: dict = {}
_seed = 0


def default_generator(device: Any = "cpu") -> Generator:
    device = backend.Device(device)
    gen = _default.get(device)
    if gen is None:
        gen = _default[device] = Generator(device).manual_seed(_seed)
    return gen


def _seed_value(seed: Any) -> int:
    """PyTorch's seed: any integer from -2**63 to 2**64 - 1 (a float is truncated), a negative one taken
    modulo 2**64 (``manual_seed(-1)``'s ``initial_seed()`` is 2**64 - 1, as PyTorch 2.13's)."""
    value = int(seed)
    if not -(2 ** 63) <= value < 2 ** 64:
        raise ValueError(f"manual_seed: seed {value} is outside [-2**63, 2**64 - 1] (PyTorch: Overflow when "
                         f"unpacking long long)")
    return value % 2 ** 64


def manual_seed(seed: int) -> Generator:
    """Seed every device's default generator; returns the CPU one."""
    global _seed
    _seed = _seed_value(seed)  # checked before anything changes
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


def get_rng_state() -> Any:
    """The CPU default generator's state (a uint8 tensor)."""
    return default_generator("cpu").get_state()


def set_rng_state(new_state: Any) -> None:
    """Restore the CPU default generator's state from ``get_rng_state()``."""
    default_generator("cpu").set_state(new_state)


def _cuda_device(device: Any) -> backend.Device:
    if isinstance(device, int):
        return backend.Device("cuda", device)
    device = backend.Device(device)
    if device.type != "cuda":
        raise ValueError(f"ta.cuda RNG state: expected a CUDA device, got {device}")
    return device


def cuda_get_rng_state(device: Any = "cuda") -> Any:
    """``ta.cuda.get_rng_state``: a CUDA device's default generator state (a uint8 CPU tensor)."""
    return default_generator(_cuda_device(device)).get_state()


def cuda_set_rng_state(new_state: Any, device: Any = "cuda") -> None:
    """``ta.cuda.set_rng_state``: restore a CUDA device's default generator state."""
    default_generator(_cuda_device(device)).set_state(new_state)


def cuda_get_rng_state_all() -> list:
    """Every CUDA device's generator state, in device order."""
    return [cuda_get_rng_state(i) for i in range(backend.cuda_device_count())]


def cuda_set_rng_state_all(new_states: Any) -> None:
    for i, state in enumerate(new_states):
        cuda_set_rng_state(state, i)


def cuda_manual_seed(seed: int) -> None:
    """``ta.cuda.manual_seed``: reseed the current CUDA device's default generator."""
    if backend.cuda_available():
        default_generator("cuda").manual_seed(seed)


def cuda_manual_seed_all(seed: int) -> None:
    for i in range(backend.cuda_device_count() if backend.cuda_available() else 0):
        default_generator(backend.Device("cuda", i)).manual_seed(seed)


def snapshot(device: Any) -> Any:
    """The default generator's state of ``device``, on the host (a CUDA one is its seed and offset)."""
    gen = default_generator(device)
    if gen.device.type == "cpu":
        return gen.rng.bit_generator.state
    return gen.rng.seed, gen.rng.offset


def restore(device: Any, state: Any) -> None:
    """Put back a state from :func:`snapshot`."""
    gen = default_generator(device)
    if gen.device.type == "cpu":
        gen.rng.bit_generator.state = state
    else:
        gen.rng.seed, gen.rng.offset = state


@backend.on_cuda_switch
def _forget_cuda_generators() -> None:
    """A CUDA generator draws with one backend's arrays (CuPy or the stand-in): a switch makes new ones."""
    for dev in [d for d in _default if d.type != "cpu"]:
        del _default[dev]


# Draws that fill a tensor in place (nn.init and Tensor.normal_/uniform_).
def write_draw(tensor: Tensor, array: Any) -> Tensor:
    """Store ``array`` into ``tensor`` in place: one rounding, one version bump, no graph."""
    tensor.array[...] = convert(array, tensor.dtype) if array.dtype != tensor.dtype else array
    tensor._version[0] += 1
    return tensor


def draw_like(kind: str, tensor: Tensor, generator: "Generator | None") -> Any:
    """Standard uniform [0, 1) (``kind="uniform_"``) or standard normal samples shaped like ``tensor``."""
    if tensor.dtype not in dt.FLOATING:
        raise TypeError(f"init: {kind} needs a floating point tensor, got {dt.dtype_name(tensor.dtype)} "
                        f"with shape {list(tensor.shape)}")
    gen = generator or default_generator(tensor.device)
    if gen.device != tensor.device:
        raise ValueError(f"init: generator is on {gen.device} but the tensor is on {tensor.device}")
    dtype = dt.float64 if tensor.dtype == dt.float64 else dt.float32
    if kind == "uniform_":
        return gen.rng.random(size=tensor.shape, dtype=dtype)
    return gen.rng.standard_normal(size=tensor.shape, dtype=dtype)
