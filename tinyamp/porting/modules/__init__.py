"""``tinyamp.nn.modules``: PyTorch's module paths for code that names them (``nn.modules.batchnorm._BatchNorm``).

The layers live in ``tinyamp/nn/``; the submodules here re-export them under
the paths PyTorch's ``torch.nn.modules`` uses.
"""

from __future__ import annotations

from . import batchnorm

__all__ = ["batchnorm"]
