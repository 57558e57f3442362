"""``torch.jit``'s names that training code calls: there is no compiler, so the answers are the eager ones.

``is_scripting()`` and ``is_tracing()`` are False (code guarded by them takes its
eager branch, as under PyTorch without TorchScript); ``script``, ``ignore``,
``unused`` and ``export`` return what they are given, so a decorated function
or module runs eagerly.
"""

from __future__ import annotations

from typing import Any


def is_scripting() -> bool:
    """False: nothing runs under TorchScript here."""
    return False


def is_tracing() -> bool:
    """False: nothing is traced here."""
    return False


def script(obj: Any = None, *args: Any, **kwargs: Any) -> Any:
    """``obj`` itself, run eagerly (``@torch.jit.script`` on a function or module)."""
    return obj


def ignore(drop: Any = False, **kwargs: Any) -> Any:
    """``@torch.jit.ignore`` (with or without arguments): the function itself."""
    return drop if callable(drop) else (lambda fn: fn)


def unused(fn: Any) -> Any:
    """``@torch.jit.unused``: the function itself."""
    return fn


def export(fn: Any) -> Any:
    """``@torch.jit.export``: the function itself."""
    return fn
