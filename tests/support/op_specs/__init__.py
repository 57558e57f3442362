"""The op-spec table: one row per op, gathered from one file per op family.

Each family module (``elementwise.py``, ``reduce.py``, ...) defines ``SPECS``, a
list of :class:`OpSpec`. ``tests/ops/test_op_table.py`` turns every row into
forward-vs-NumPy, output-dtype, gradcheck, gradgradcheck and float32/float16
checks on every device, so a new op gets all of them by adding one row.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np


@dataclass
class Arg:
    """How to make one input: a float tensor of ``shape`` drawn in [low, high).

    ``kind="int"`` makes an int64 tensor in [low, high) (labels, indices) that
    gets no gradient; ``kind="bool"`` a random mask. ``away_from`` keeps values
    at least ``margin`` from given points (kinks of abs/relu/clamp, so finite
    differences are valid).
    """

    shape: tuple
    low: float = -1.0
    high: float = 1.0
    kind: str = "float"
    away_from: Sequence[float] = ()
    margin: float = 0.05
    grad: bool = True


@dataclass
class OpSpec:
    """One row of the table.

    ``fn(*tensors)`` calls tinyamp; ``ref(*float64 arrays)`` is the NumPy
    reference written in the test. ``out_dtype`` maps the input float dtype to
    the expected output dtype (None: same as the input). Ops that are not
    differentiable (argmax) set ``differentiable=False``; ops whose second
    derivative is not defined by finite differences set ``gradgrad=False`` with a
    reason in ``note``. ``float32_tol`` / ``float16_tol`` are (rtol, atol) against
    the float64 reference.
    """

    name: str
    fn: Callable
    ref: Callable
    args: Sequence[Arg]
    out_dtype: Callable[[Any], Any] | None = None
    differentiable: bool = True
    gradgrad: bool = True
    float32_tol: tuple = (1e-5, 1e-5)
    float16_tol: tuple = (2e-2, 2e-2)
    float16: bool = True
    seed: int = 0
    note: str = ""
    id: str = ""

    def __post_init__(self) -> None:
        self.id = self.id or self.name


FAMILIES = ["elementwise", "reduce", "shape", "linalg", "activation", "loss", "normalization",
            "conv", "embedding", "triangular", "lerp", "sampling", "attention", "porting"]


def all_specs() -> list[OpSpec]:
    """Every row from every family module that exists."""
    specs: list[OpSpec] = []
    for family in FAMILIES:
        try:
            module = importlib.import_module(f"tests.support.op_specs.{family}")
        except ModuleNotFoundError as exc:
            if exc.name != f"tests.support.op_specs.{family}":
                raise
            continue
        specs.extend(module.SPECS)
    return specs


def make_inputs(spec: OpSpec, dtype: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """Float64 master values for ``spec.args`` (ints/bools unaffected by ``dtype``)."""
    arrays = []
    for arg in spec.args:
        if arg.kind == "int":
            arrays.append(rng.integers(int(arg.low), int(arg.high), size=arg.shape).astype(np.int64))
            continue
        if arg.kind == "bool":
            arrays.append(rng.random(arg.shape) < 0.5)
            continue
        values = rng.uniform(arg.low, arg.high, size=arg.shape)
        for point in arg.away_from:
            close = np.abs(values - point) < arg.margin
            values = np.where(close, point + np.where(values >= point, arg.margin, -arg.margin) * 2, values)
        arrays.append(values.astype(np.float64))
    return arrays
