"""Sampling indices from tensors of weights: ``multinomial``.

Each row of ``input`` holds non-negative weights (they need not sum to 1);
``multinomial`` draws ``num_samples`` category indices per row from tinyamp's
seedable generator (``tinyamp/random.py``), so ``ta.manual_seed`` reproduces
the draws (which differ from PyTorch's numbers).

- With replacement: inverse-CDF sampling. The cumulative weights are summed
  in float64 and every uniform draw finds its category by a binary search run
  on all draws at once (``log2(categories)`` vectorised steps, no host loop
  over rows).
- Without replacement: each category gets the key ``w / E`` with ``E`` an
  exponential draw, and the ``num_samples`` largest keys win, in order. This
  is sequential sampling without replacement in one sort (PyTorch uses the
  same trick); categories of weight 0 come after every positive one.

Sampling itself never reads a device value on the host. Checking the weights
(no inf, nan or negative entry, no row summing to 0) does: on a GPU that
check costs one host synchronisation per call (PyTorch's CUDA kernel checks
with a device-side assert instead, which tinyamp does not have).

NEUTRAL: the op casts nothing; its output is int64 and has no gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..precision import NEUTRAL
from ..autograd.function import Function
from ..random import Generator, default_generator
from ..tensor import Tensor

MAX_CATEGORIES = 2 ** 24  # PyTorch's limit


def _describe(x: Any) -> str:
    return f"{list(x.shape)} ({dt.dtype_name(x.dtype)})"


def _check_weights(xp: Any, weights: Any) -> None:
    """PyTorch's errors for weights that are not a distribution (one host read of two flags)."""
    bad_entry = xp.any(~xp.isfinite(weights) | (weights < 0))
    empty_row = xp.any(weights.sum(axis=-1) <= 0)
    bad_entry, empty_row = (bool(flag) for flag in backend.to_host(xp.stack([bad_entry, empty_row])))
    if bad_entry:
        raise RuntimeError(f"multinomial: probability tensor contains either `inf`, `nan` or element < 0 "
                           f"(input {_describe(weights)})")
    if empty_row:
        raise RuntimeError(f"multinomial: invalid multinomial distribution (sum of probabilities <= 0) "
                           f"(input {_describe(weights)})")


def _first_above(xp: Any, cdf: Any, targets: Any) -> Any:
    """Per row, the first index i with cdf[i] > target (the last index if none): a vectorised binary search."""
    rows, k = cdf.shape
    lo = xp.zeros(targets.shape, dtype=xp.int64)
    hi = xp.full(targets.shape, k - 1, dtype=xp.int64)
    for _ in range((k - 1).bit_length()):  # halves [lo, hi] until it is one index
        mid = (lo + hi) // 2
        beyond = xp.take_along_axis(cdf, mid, axis=-1) <= targets
        lo = xp.where(beyond, mid + 1, lo)
        hi = xp.where(beyond, hi, mid)
    return lo


class Multinomial(Function):
    """i ~ Categorical(w / sum(w)) per row, num_samples times (with or without replacement); int64, no gradient"""

    precision = NEUTRAL

    def __init__(self, num_samples: int, replacement: bool, generator: "Generator | None") -> None:
        self.num_samples, self.replacement, self.generator = num_samples, replacement, generator

    def forward(self, xp: Any, weights: Any) -> Any:
        self._check(weights)
        n = self.num_samples
        rows = weights.reshape(-1, weights.shape[-1]).astype(xp.float64)
        if rows.shape[0] == 0:
            return xp.zeros(weights.shape[:-1] + (n,), dtype=xp.int64)
        _check_weights(xp, rows)
        device = backend.device_of(weights)
        generator = self.generator or default_generator(device)
        if generator.device != device:
            raise RuntimeError(f"multinomial: the generator is on {generator.device} but the input "
                               f"{_describe(weights)} is on {device}")
        draws = generator.rng.random((rows.shape[0], n if self.replacement else rows.shape[1]), dtype=xp.float64)
        if self.replacement:
            cdf = xp.cumsum(rows, axis=-1)
            samples = _first_above(xp, cdf, draws * cdf[:, -1:])
        else:
            with np.errstate(divide="ignore"):  # a draw of exactly 0 gives E = 0: an infinite key, taken first
                keys = rows / -xp.log1p(-draws)
            keys = xp.where(rows > 0, keys, -1.0)  # weight 0 (0 / 0 included) after every positive weight
            samples = xp.argsort(-keys, axis=-1, kind="stable")[:, :n]
        return samples.astype(xp.int64, copy=False).reshape(weights.shape[:-1] + (n,))

    def _check(self, weights: Any) -> None:
        """PyTorch's shape, dtype and count errors (host metadata only)."""
        if weights.ndim not in (1, 2):
            raise RuntimeError(f"multinomial: prob_dist must be 1 or 2 dim, got input {_describe(weights)}")
        if weights.dtype not in dt.FLOATING:
            raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                               f"{dt.dtype_name(weights.dtype)} (input of shape {list(weights.shape)})")
        categories = weights.shape[-1]
        if not self.replacement and self.num_samples > categories:
            raise RuntimeError(f"multinomial: cannot sample n_sample > prob_dist.size(-1) samples without "
                               f"replacement ({self.num_samples} samples, input {_describe(weights)})")
        if categories > MAX_CATEGORIES:
            raise RuntimeError(f"multinomial: number of categories cannot exceed 2^24, got {categories}")


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *,  # noqa: A002 - torch name
                generator: "Generator | None" = None) -> Tensor:
    """``num_samples`` category indices per row of ``input`` (1-D or 2-D non-negative weights), int64."""
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)):
        raise TypeError(f"multinomial(): argument 'num_samples' must be int, not {type(num_samples).__name__}")
    if num_samples <= 0:
        raise RuntimeError(f"multinomial: cannot sample n_sample <= 0 samples (num_samples={num_samples})")
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(f"multinomial(): generator must be a ta.Generator, not {type(generator).__name__}")
    return Multinomial(int(num_samples), bool(replacement), generator)(input)


METHODS = {"multinomial": multinomial}
