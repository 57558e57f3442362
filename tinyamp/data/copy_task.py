"""A synthetic sequence task generated from a seed: copy a random prefix after a separator.

Each sequence is ``a SEP a``: ``length`` tokens drawn uniformly from
``0 .. vocab - 2``, the separator ``vocab - 1``, then the same tokens again.
For next-token prediction the inputs are the sequence without its last token
and the targets the sequence without its first. The tokens of the first ``a``
cannot be predicted (they are random), so their targets are ``-100``, the index
``cross_entropy`` ignores; the separator and the copy can: a model that
attends ``length + 1`` positions back reaches zero loss. A decoder-only
transformer learns it in a few hundred steps, which makes it a small, honest
test bed for attention (examples/tiny_transformer.py).
"""

from __future__ import annotations

import numpy as np

IGNORE_INDEX = -100  # cross_entropy's default ignore_index


def copy_task(n: int, length: int = 8, vocab: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` sequences ``a SEP a`` as ``(inputs, targets)``, two int64 arrays of shape ``(n, 2 * length)``."""
    for name, value, least in (("n", n, 1), ("length", length, 1), ("vocab", vocab, 3)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise ValueError(f"copy_task: {name} must be an integer >= {least}, got {value!r}")
    rng = np.random.default_rng(seed)
    prefix = rng.integers(0, vocab - 1, size=(n, length), dtype=np.int64)
    separator = np.full((n, 1), vocab - 1, dtype=np.int64)
    sequence = np.concatenate([prefix, separator, prefix], axis=1)
    inputs, targets = sequence[:, :-1].copy(), sequence[:, 1:].copy()
    targets[:, :length - 1] = IGNORE_INDEX  # the rest of the random prefix: unpredictable
    return inputs, targets
