"""Linear and Identity: ``y = x W^T + b`` and ``y = x``."""

from __future__ import annotations

from typing import Any

from .. import dtypes as dt
from ..precision import current_fp8
from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter
from ..factories import empty
from ..ops.linalg import linear


class Identity(Module):
    """Returns its input unchanged (a placeholder that keeps a model's structure)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # accepts and ignores arguments, as PyTorch's
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


class WeightAndBias(Module):
    """A layer with a ``weight`` and an optional ``bias`` (Linear, Conv2d), PyTorch's default init."""

    def _make_parameters(self, weight_shape: tuple, bias: bool, device: Any, dtype: Any) -> None:
        self.weight = Parameter(empty(*weight_shape, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(weight_shape[0], dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.default_linear_init_(self.weight, self.bias)


class Linear(WeightAndBias):
    """``y = x @ weight.T + bias`` with weight of shape (out_features, in_features).

    Inside ``ta.amp.fp8_autocast`` its three GEMMs run in fp8 (the region
    quantises the input and weight with this layer's quantisers, kept on the
    layer and in its ``state_dict`` under ``_extra_state`` once it has run so).
    """

    fp8_capable = True  # what ta.amp.exclude_first_last counts

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self._make_parameters((self.out_features, self.in_features), bias, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"{self!r}: input of shape {list(x.shape)} ({dt.dtype_name(x.dtype)}) has "
                             f"{x.shape[-1] if x.ndim else 'no'} features in its last dimension, "
                             f"expected in_features={self.in_features}")
        fp8 = current_fp8()
        if fp8 is not None:
            y = fp8.linear(self, x)
            if y is not None:
                return y
        return linear(x, self.weight, self.bias)

    def _has_extra_state(self) -> bool:
        return "_fp8_meta" in self.__dict__ or "_fp8_loaded" in self.__dict__

    def get_extra_state(self) -> dict:
        """The fp8 quantisers' state: the recipe's class name and each role's arrays (delayed scaling)."""
        if "_fp8_meta" not in self.__dict__:
            return self.__dict__["_fp8_loaded"]  # loaded, not yet run under fp8
        recipe, quantizers = self.__dict__["_fp8_meta"]
        return {"fp8_recipe": type(recipe).__name__,
                **{role: {k: Tensor._wrap(v) for k, v in quantizer.state_dict().items()}  # shared, as parameters
                   for role, quantizer in quantizers.items()}}

    def set_extra_state(self, state: dict) -> None:
        """Load quantiser state: it is kept until an fp8 region with a recipe of that class makes the quantisers,
        or loaded into the current ones (a state for another recipe class is an error)."""
        if not isinstance(state, dict) or "fp8_recipe" not in state:
            raise RuntimeError(f"{self!r}: _extra_state must be a dict from Linear.get_extra_state, got "
                               f"{type(state).__name__}")
        meta = self.__dict__.get("_fp8_meta")
        if meta is None:
            object.__setattr__(self, "_fp8_loaded", state)
            return
        if type(meta[0]).__name__ != state["fp8_recipe"]:
            raise RuntimeError(f"{self!r}: the checkpoint's fp8 state is for {state['fp8_recipe']}, this layer "
                               f"runs {type(meta[0]).__name__}")
        for role, quantizer in meta[1].items():
            quantizer.load_state_dict(state.get(role, {}))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
