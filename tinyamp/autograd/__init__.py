"""Autograd: the tape (Function), the engine and the public entry points.

``backward`` accumulates into leaves' ``.grad``; ``grad`` returns gradients and
leaves ``.grad`` alone. Both follow PyTorch's signatures and defaults
(``retain_graph`` defaults to ``create_graph``) and live in ``engine.py``.
"""

from __future__ import annotations

from .custom_function import CustomFunction
from .engine import backward, grad
from .gradcheck import gradcheck, gradgradcheck
from ..grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled

# PyTorch's name for the base of user-defined Functions (built-in ops subclass
# autograd.function.Function, which has no apply).
Function = CustomFunction

__all__ = ["Function", "backward", "grad", "no_grad", "enable_grad", "set_grad_enabled", "inference_mode",
           "is_grad_enabled", "gradcheck", "gradgradcheck"]
