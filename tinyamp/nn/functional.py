"""``import tinyamp.nn.functional as F``: PyTorch's functional names for tinyamp's ops.

Nothing is implemented here. Each name below is looked up in ``tinyamp.ops`` at
the moment it is used (module ``__getattr__``), so ``F.relu is ta.ops.relu``:
one implementation, whichever op families the package has.
"""

from __future__ import annotations

from typing import Any

from .. import ops

_FORWARDED = frozenset({
    # activations
    "relu", "relu_", "leaky_relu", "gelu", "sigmoid", "tanh", "softplus", "silu", "elu",
    "softmax", "log_softmax", "logsumexp",
    # losses
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "kl_div",
    # layers
    "linear", "conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "dropout", "dropout1d", "dropout2d",
    "layer_norm", "batch_norm", "group_norm", "instance_norm",
    "interpolate", "upsample", "upsample_nearest", "upsample_bilinear",
    "embedding", "pad", "flatten", "one_hot", "normalize",
    # attention
    "scaled_dot_product_attention",
})

# Functional forms composed in the porting wing (tinyamp/porting/vision_functional.py).
from ..porting.vision_functional import local_response_norm, pixel_shuffle, pixel_unshuffle  # noqa: E402

__all__ = sorted(_FORWARDED | {"local_response_norm", "pixel_shuffle", "pixel_unshuffle"})


def __getattr__(name: str) -> Any:
    if name not in _FORWARDED:
        raise AttributeError(f"module 'tinyamp.nn.functional' has no attribute '{name}'")
    try:
        return getattr(ops, name)
    except AttributeError:
        raise AttributeError(f"tinyamp.nn.functional.{name}: the op library (tinyamp.ops) does not "
                             f"provide '{name}' in this version") from None


def __dir__() -> list[str]:
    return __all__
