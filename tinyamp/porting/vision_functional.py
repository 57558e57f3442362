"""Functional forms of vision layers composed of tinyamp ops: ``pixel_shuffle``, ``pixel_unshuffle``,
``local_response_norm`` (``torch.nn.functional``'s names).

Each is a rearrangement or a short chain of ops, so its gradient and its
autocast behaviour are those of the ops it is made of (as in PyTorch, where
these are composite too): the shuffles keep the input's dtype, and
``local_response_norm``'s ``pow`` makes it float32 under autocast.
"""

from __future__ import annotations

from ..ops.shape import pad, permute, reshape
from ..tensor import Tensor


def _shuffle_check(op: str, x: Tensor, factor: int, channels_divide: bool) -> None:
    if x.ndim < 3:
        raise RuntimeError(f"{op} expects input to have at least 3 dimensions, but got input with {x.ndim} "
                           f"dimension(s)")
    if not isinstance(factor, int) or factor <= 0:
        raise RuntimeError(f"{op} expects a positive {'upscale' if channels_divide else 'downscale'}_factor, "
                           f"but got {factor}")
    c, h, w = x.shape[-3:]
    if channels_divide and c % (factor * factor):
        raise RuntimeError(f"{op} expects its input's 'channel' dimension to be divisible by the square of "
                           f"upscale_factor, but input.size(-3)={c} is not divisible by {factor * factor}")
    if not channels_divide and (h % factor or w % factor):
        which, size = ("height", h) if h % factor else ("width", w)
        raise RuntimeError(f"{op} expects {which} to be divisible by downscale_factor, but input.size("
                           f"{-2 if which == 'height' else -1})={size} is not divisible by {factor}")


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:  # noqa: A002 - torch name
    """(*, C r^2, H, W) -> (*, C, H r, W r): y[c, h r + i, w r + j] = x[c r^2 + i r + j, h, w]."""
    _shuffle_check("pixel_shuffle", input, upscale_factor, True)
    r, lead = upscale_factor, input.shape[:-3]
    c, h, w = input.shape[-3:]
    n = len(lead)
    x = reshape(input, lead + (c // (r * r), r, r, h, w))
    x = permute(x, tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2))
    return reshape(x, lead + (c // (r * r), h * r, w * r))


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:  # noqa: A002 - torch name
    """(*, C, H r, W r) -> (*, C r^2, H, W): the inverse of ``pixel_shuffle``."""
    _shuffle_check("pixel_unshuffle", input, downscale_factor, False)
    r, lead = downscale_factor, input.shape[:-3]
    c, h, w = input.shape[-3:]
    n = len(lead)
    x = reshape(input, lead + (c, h // r, r, w // r, r))
    x = permute(x, tuple(range(n)) + (n, n + 2, n + 4, n + 1, n + 3))
    return reshape(x, lead + (c * r * r, h // r, w // r))


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,  # noqa: A002
                        k: float = 1.0) -> Tensor:
    """x / (k + alpha / size * sum of x^2 over ``size`` neighbouring channels) ** beta (zero-padded window)."""
    if input.ndim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {input.ndim} dimensions)")
    if input.numel() == 0:
        return input
    channels = input.shape[1]
    square = input * input
    widths = [0, 0] * (input.ndim - 2) + [size // 2, (size - 1) // 2]
    padded = pad(square, widths)  # channels zero-padded as PyTorch's avg_pool window (count_include_pad)
    window = padded[:, 0:channels]
    for j in range(1, size):
        window = window + padded[:, j:j + channels]
    div = (window * (alpha / size) + k) ** beta
    return input / div
