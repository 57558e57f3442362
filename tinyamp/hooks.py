"""The handle every ``register_*_hook`` returns (PyTorch's ``torch.utils.hooks.RemovableHandle``),
shared by modules' forward/backward hooks and optimizers' step hooks."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any, Callable


class RemovableHandle:
    """``remove()`` unregisters the hook; as a context manager it unregisters it at the block's end."""

    _ids = itertools.count()

    def __init__(self, hooks: OrderedDict, hook: Callable, prepend: bool = False) -> None:
        self.hooks, self.id = hooks, next(RemovableHandle._ids)
        hooks[self.id] = hook
        if prepend:
            hooks.move_to_end(self.id, last=False)

    def remove(self) -> None:
        self.hooks.pop(self.id, None)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()
