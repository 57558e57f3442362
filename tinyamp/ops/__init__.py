"""The op library: one file per family, each op one Function subclass plus a function.

``TENSOR_METHODS`` maps Tensor method names (``x.exp()``, ``x.sum(1)``) to these
functions; ``Tensor.__getattr__`` looks them up, so method and function forms
are one implementation. ``methods.py`` holds the rest of the Tensor API and is
installed on ``Tensor`` here, once every family is loaded.
"""

from __future__ import annotations

from . import broadcast, cast, conv, elementwise, indexing, linalg, reduce, shape
from .broadcast import broadcast_to, expand, sum_to
from .cast import cast as cast  # noqa: PLC0414 - the function, not the module
from .cast import clone, to_device
from .elementwise import (abs, add, div, exp, log, log1p, mul, neg, pow, reciprocal, rsqrt, sign, sqrt,  # noqa: A004
                          square, sub)
from .reduce import amax, amin, argmax, argmin, max, mean, min, sum  # noqa: A004
from .statistics import std, var
from . import activation, clamp_where
from . import floor_division, logical, sorting, statistics, vector_norms
from .sorting import argsort, sort, topk
from .floor_division import floor_divide, remainder
from .logical import all, allclose, any, equal, isclose, isfinite, isinf, isnan, nonzero  # noqa: A004
from .vector_norms import norm, normalize, vector_norm
from .activation import elu, erf, gelu, leaky_relu, relu, sigmoid, silu, softplus, tanh
from .clamp_where import clamp, clamp_max, clamp_min, clip, masked_fill, maximum, minimum, where
from .conv import adaptive_avg_pool2d, avg_pool2d, conv2d, max_pool2d
from . import conv_transpose
from .conv_transpose import conv_transpose2d
from .indexing import getitem, index_select, one_hot
from .linalg import bmm, linear, matmul, mm
from .shape import (cat, chunk, concat, concatenate, contiguous, flatten, narrow, pad, permute, reshape,
                    repeat, split, squeeze, stack, t, transpose, unbind, unsqueeze, view)
# Families whose module shares its name with its op: keep the module under an alias.
from . import dropout as _dropout_family, embedding as _embedding_family, softmax as _softmax_family
from . import loss, loss_binary, normalization
from .dropout import dropout, dropout1d, dropout2d
from .embedding import embedding
from .loss import cross_entropy, huber_loss, l1_loss, mse_loss, nll_loss, smooth_l1_loss
from .loss_binary import binary_cross_entropy, binary_cross_entropy_with_logits
from .normalization import batch_norm, group_norm, instance_norm, layer_norm
from .softmax import log_softmax, logsumexp, softmax

from . import attention, sampling, triangular
from . import lerp as _lerp_family
from .attention import scaled_dot_product_attention
from .lerp import lerp
from .sampling import multinomial
from .triangular import tril, triu


_FAMILIES = [broadcast, elementwise, clamp_where, activation, reduce, shape, indexing, linalg, conv]
_FAMILIES += [conv_transpose]
_FAMILIES += [_softmax_family, loss, loss_binary, normalization, _dropout_family, _embedding_family]
_FAMILIES += [floor_division, logical, vector_norms, sorting, statistics]
_FAMILIES += [attention, _lerp_family, sampling, triangular]

# Added for porting (issue 31): resampling, reversal, the median, gathers and scatters, einsum, the product,
# the KL divergence.
from . import einsum as _einsum_family, flip as _flip_family, median as _median_family
from . import gather_scatter, loss_kl, product, upsample as _upsample_family
from .activation import relu_
from .einsum import einsum
from .flip import flip, fliplr, flipud
from .gather_scatter import gather, scatter, scatter_add
from .loss_kl import kl_div
from .median import median
from .product import prod
from .upsample import interpolate, upsample, upsample_bilinear, upsample_nearest

_FAMILIES += [_upsample_family, _einsum_family, _flip_family, _median_family, gather_scatter, loss_kl, product]

from .. import factories
from ..tensor import Tensor
from . import methods
from .methods import TENSOR_METHODS

for _family in _FAMILIES:
    TENSOR_METHODS.update(_family.METHODS)
TENSOR_METHODS.update(factories.METHODS)  # x.new_zeros(...), x.new_tensor(...)
methods.install(Tensor)
