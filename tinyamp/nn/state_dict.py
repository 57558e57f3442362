"""Module state dicts: ``state_dict()`` and ``load_state_dict()`` (PyTorch's format).

A state dict maps dotted names (``"0.weight"``, ``"bn.running_mean"``) to the
model's parameters and persistent buffers. Loading checks every entry first
(missing, unexpected and misshapen keys, with PyTorch's messages) and copies
nothing unless all fit; values are then written in place, converted to each
tensor's dtype and device.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from typing import Any, Iterator

import numpy as np

import tinyamp

from .. import backend
from ..kernels.convert import convert
from ..tensor import Tensor


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns: the keys it did not match."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()


class StateDictMixin:
    """The state-dict half of :class:`tinyamp.nn.Module` (uses its registries)."""

    def _state_items(self, prefix: str) -> Iterator[tuple[str, Tensor]]:
        """Every parameter and persistent buffer under its dotted key, as state_dict orders them."""
        for name, param in self._parameters.items():
            if param is not None:
                yield prefix + name, param
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers:
                yield prefix + name, buf
        for name, child in self._modules.items():
            if child is not None:
                yield from child._state_items(f"{prefix}{name}.")

    def state_dict(self, destination: dict | None = None, prefix: str = "",
                   keep_vars: bool = False) -> "OrderedDict[str, Tensor]":
        """Parameters and persistent buffers by dotted name, detached (they share memory with the model)."""
        result = OrderedDict() if destination is None else destination
        for key, tensor in self._state_items(prefix):
            result[key] = tensor if keep_vars else tensor.detach()
        return result

    def load_state_dict(self, state_dict: "dict[str, Any]", strict: bool = True) -> _IncompatibleKeys:
        """Copy values into this model's tensors in place (cast to each tensor's dtype and device).

        Nothing is copied unless every entry fits: a size mismatch is always an
        error, missing and unexpected keys are an error when ``strict``.
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict).__name__}.")
        own = OrderedDict(self._state_items(""))
        missing = [key for key in own if key not in state_dict]
        unexpected = [key for key in state_dict if key not in own]
        errors = []
        if strict and missing:
            errors.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ")
        if strict and unexpected:
            errors.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ". ")
        pairs = []
        for key, target in own.items():
            if key not in state_dict:
                continue
            source = state_dict[key]
            if not isinstance(source, (Tensor, np.ndarray)):
                errors.append(f'While copying the parameter named "{key}", expected a Tensor from checkpoint '
                              f'but received {type(source).__name__}')
                continue
            if tuple(source.shape) != tuple(target.shape):
                errors.append(f"size mismatch for {key}: copying a param with shape {list(source.shape)} from "
                              f"checkpoint, the shape in current model is {list(target.shape)}.")
                continue
            pairs.append((target, source))
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors))
        with tinyamp.no_grad():
            for target, source in pairs:
                array = source.data if isinstance(source, Tensor) else source
                target.data[...] = convert_to(backend.to_device(array, target.device), target.dtype)
                target._version[0] += 1
        return _IncompatibleKeys(missing, unexpected)


def convert_to(array: Any, dtype: np.dtype) -> Any:
    """``array`` in ``dtype``: the same object when it already is (so nothing is bumped)."""
    return array if array.dtype == dtype else convert(array, dtype)
