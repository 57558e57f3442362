"""Grad mode: whether ops record themselves on the tape.

The flag lives in a ``ContextVar`` so each thread (and each asyncio task)
has its own, and ``no_grad`` in one thread never disables recording in another.
The context managers double as decorators, as in PyTorch.
"""

from __future__ import annotations

import functools
from contextvars import ContextVar
from typing import Any, Callable

_grad_enabled: ContextVar[bool] = ContextVar("tinyamp_grad_enabled", default=True)


def is_grad_enabled() -> bool:
    """True when new ops are recorded for backward."""
    return _grad_enabled.get()


class _GradModeContext:
    """Base for context managers that set the grad mode; also decorators."""

    _mode: bool

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # ``@ta.no_grad`` without parentheses, as PyTorch allows: decorate at once.
        if len(args) == 1 and not kwargs and callable(args[0]) and cls._bare_decorator:
            return cls()(args[0])
        return super().__new__(cls)

    _bare_decorator = True

    def __enter__(self) -> None:
        self._token = _grad_enabled.set(self._mode)

    def __exit__(self, *exc: Any) -> None:
        _grad_enabled.reset(self._token)

    def __call__(self, func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self.__class__(*self._args()):
                return func(*args, **kwargs)
        return wrapper

    def _args(self) -> tuple:
        return ()


class no_grad(_GradModeContext):
    """Disable recording: ``with ta.no_grad(): ...`` or ``@ta.no_grad()``."""

    _mode = False


class enable_grad(_GradModeContext):
    """Re-enable recording inside a ``no_grad`` region."""

    _mode = True


class inference_mode(_GradModeContext):
    """``inference_mode(mode=True)``: in tinyamp the same as ``no_grad`` (``mode=False``: no change).

    PyTorch's inference tensors (which refuse later use in autograd) are not
    modelled; results are ordinary tensors that do not require grad.
    """

    def __init__(self, mode: bool = True) -> None:
        self._keep = not mode

    def __enter__(self) -> None:
        self._token = _grad_enabled.set(self._keep and is_grad_enabled())

    def _args(self) -> tuple:
        return (not self._keep,)


class set_grad_enabled(_GradModeContext):
    """``set_grad_enabled(mode)``: sets the mode now; as a context manager, restores it on exit."""

    _bare_decorator = False

    def __init__(self, mode: bool) -> None:
        self._mode = bool(mode)
        # Like PyTorch, calling it as a function takes effect immediately.
        self._prev_token = _grad_enabled.set(self._mode)

    def __enter__(self) -> None:
        self._token = self._prev_token

    def __call__(self, func: Callable) -> Callable:
        # Used as a decorator: undo the eager set done by __init__.
        _grad_enabled.reset(self._prev_token)
        return super().__call__(func)

    def _args(self) -> tuple:
        return (self._mode,)
