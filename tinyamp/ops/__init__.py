"""The op library: one file per family, each op one Function subclass plus a function.

``TENSOR_METHODS`` maps Tensor method names (``x.exp()``, ``x.sum(1)``) to these
functions; ``Tensor.__getattr__`` looks them up, so method and function forms
are one implementation.
"""

from __future__ import annotations

from . import broadcast, cast, elementwise, reduce, shape
from .broadcast import broadcast_to, expand, sum_to
from .cast import cast as cast  # noqa: PLC0414 - the function, not the module
from .cast import clone, to_device
from .elementwise import add, div, exp, log, mul, neg, sub
from .reduce import mean, sum
from .shape import permute, reshape, transpose, view

_FAMILIES = [broadcast, elementwise, reduce, shape]

TENSOR_METHODS: dict = {}
for _family in _FAMILIES:
    TENSOR_METHODS.update(_family.METHODS)
