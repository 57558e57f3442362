"""The op library: one file per family, each op one Function subclass plus a function.

``TENSOR_METHODS`` maps Tensor method names (``x.exp()``, ``x.sum(1)``) to these
functions; ``Tensor.__getattr__`` looks them up, so method and function forms
are one implementation.
"""

from __future__ import annotations

from . import broadcast, cast, conv, elementwise, indexing, linalg, reduce, shape
from .broadcast import broadcast_to, expand, sum_to
from .cast import cast as cast  # noqa: PLC0414 - the function, not the module
from .cast import clone, to_device
from .elementwise import add, div, exp, log, mul, neg, sub
from .reduce import mean, sum
from .conv import avg_pool2d, conv2d, max_pool2d
from .indexing import getitem, index_select
from .linalg import bmm, linear, matmul, mm
from .shape import (cat, chunk, concat, concatenate, contiguous, flatten, narrow, pad, permute, reshape,
                    split, squeeze, stack, transpose, unbind, unsqueeze, view)

_FAMILIES = [broadcast, elementwise, reduce, shape, indexing, linalg, conv]

TENSOR_METHODS: dict = {}
for _family in _FAMILIES:
    TENSOR_METHODS.update(_family.METHODS)
