"""``torch.backends.cudnn``: ``benchmark``, ``deterministic``, ``enabled``, ``allow_tf32``, accepted and kept.

tinyamp has no cuDNN: convolutions are im2col and a GEMM, which follows
``ta.backends.cuda.matmul.allow_tf32``, not this module's ``allow_tf32``; no
algorithm is searched (``benchmark``), and every kernel is deterministic.
The defaults are PyTorch's, so code that reads them sees what it expects.
"""

from __future__ import annotations

enabled = True
benchmark = False
benchmark_limit = 10
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: tinyamp uses no cuDNN."""
    return False


def version() -> None:
    """None: tinyamp uses no cuDNN (PyTorch's answer on a build without it)."""
    return None
