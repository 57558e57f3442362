"""Parameter: the Tensor subclass a Module registers as a trainable weight.

A Parameter is an ordinary leaf tensor that requires grad by default; assigning
one to a Module attribute registers it (``Module.__setattr__``), which is how
``model.parameters()`` finds the weights an optimizer updates.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor


class Parameter(Tensor):
    """``Parameter(data, requires_grad=True)``: a leaf tensor that is a module's weight.

    The array of a Tensor passed in is shared, not copied (as PyTorch shares
    storage), so ``Parameter(t)`` and ``t`` see each other's in-place writes.
    """

    __slots__ = ()

    def __init__(self, data: Any = None, requires_grad: bool = True) -> None:
        if data is None:
            data = np.empty((0,), dtype=np.float32)
        super().__init__(data, requires_grad=requires_grad)
        self._is_param = True

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()
