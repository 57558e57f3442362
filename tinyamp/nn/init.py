"""Weight initialisation: ``ta.nn.init.kaiming_uniform_(w, a=math.sqrt(5))`` and friends.

Every function fills its tensor in place, off the tape, from tinyamp's seedable
generator for the tensor's device (``ta.manual_seed`` makes a run repeatable).
Values are drawn in float32 (float64 for a float64 tensor) and rounded once to
the tensor's dtype, so a float16 weight gets the float16 nearest to a float32
draw rather than the result of arithmetic done in float16.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from .. import backend
from ..random import Generator, draw_like as _draw, write_draw as _write
from ..tensor import Tensor

_LINEAR_GAIN = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The factor that keeps activations' variance steady through ``nonlinearity``."""
    if nonlinearity in _LINEAR_GAIN:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight laid out as PyTorch's: (out, in, *kernel)."""
    if tensor.ndim < 2:
        raise ValueError(f"Fan in and fan out can not be computed for tensor with fewer than 2 dimensions "
                         f"(shape {list(tensor.shape)})")
    receptive_field = 1
    for size in tensor.shape[2:]:
        receptive_field *= size
    return tensor.shape[1] * receptive_field, tensor.shape[0] * receptive_field


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill with samples from U(a, b)."""
    u = _draw("uniform_", tensor, generator)
    return _write(tensor, u * (b - a) + a)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill with samples from N(mean, std^2)."""
    z = _draw("normal_", tensor, generator)
    return _write(tensor, z * std + mean)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator: Generator | None = None) -> Tensor:
    """Fill with N(mean, std^2) samples conditioned on [a, b] (absolute bounds, as PyTorch)."""
    if not a < b:
        raise ValueError(f"trunc_normal_: expected a < b, got a={a}, b={b}")
    z = _draw("normal_", tensor, generator) * std + mean
    # Rejection: redraw what fell outside. Each round keeps a fraction P(a <= x <= b)
    # of the rest, so bounds deep in one tail (P tiny) are refused rather than looped on.
    for _ in range(100):
        outside = (z < a) | (z > b)
        if not outside.any():
            return _write(tensor, z)
        z[outside] = _draw("normal_", tensor, generator)[outside] * std + mean
    raise ValueError(f"trunc_normal_: [a, b] = [{a}, {b}] holds almost none of N({mean}, {std}^2); "
                     f"choose bounds within a few std of the mean")


def constant_(tensor: Tensor, val: float) -> Tensor:
    tensor.array[...] = val
    tensor._version[0] += 1
    return tensor


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio, 2010)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def orthogonal_(tensor: Tensor, gain: float = 1, generator: Generator | None = None) -> Tensor:
    """Fill with a (semi-)orthogonal matrix: Q of the QR of a normal draw, columns' signs fixed by R's diagonal.

    A tensor of more than 2 dims is viewed as (size(0), rest), as PyTorch.
    """
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = _draw("normal_", tensor, generator).reshape(rows, cols)
    flat = backend.to_host(flat, "init.orthogonal_: the QR factorisation runs on the host")
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diagonal(r))
    if rows < cols:
        q = q.T
    return _write(tensor, backend.to_device((q * gain).reshape(tensor.shape), tensor.device))


def _empty_warning(tensor: Tensor, name: str) -> bool:
    if tensor.numel() == 0:
        warnings.warn(f"Initializing zero-element tensors is a no-op ({name})", stacklevel=3)
        return True
    return False


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator: Generator | None = None) -> Tensor:
    """U(-bound, bound) with bound = gain * sqrt(3 / fan) (He et al., 2015)."""
    if _empty_warning(tensor, "kaiming_uniform_"):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator: Generator | None = None) -> Tensor:
    """N(0, std^2) with std = gain / sqrt(fan)."""
    if _empty_warning(tensor, "kaiming_normal_"):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)


def default_linear_init_(weight: Tensor, bias: Tensor | None) -> None:
    """PyTorch's default for Linear and Conv: kaiming_uniform_(a=sqrt(5)), bias U(+-1/sqrt(fan_in)).

    With a = sqrt(5) the weight bound is also 1/sqrt(fan_in).
    """
    kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = _calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        uniform_(bias, -bound, bound)
