"""Properties of autocast over every op and over random expression graphs.

1. The op table: every row of tests/support/op_specs runs under autocast(float16) and
   autocast(bfloat16) with float32, float16 and mixed inputs, and outside
   autocast; the precision report shows what each op received, which must be
   what its tag says (the expected dtypes are computed by ``_expected`` below,
   written from the tag table in tinyamp/precision.py's docstring, not by its code).
2. Hypothesis: random graphs of matmul, linear, add, mul, exp, log, sum, mean,
   softmax, log_softmax, relu, reshape, getitem and cat on float32 leaves
   under autocast: leaf gradients have the leaf's dtype and shape and agree
   with the float32 run, no float64 appears, and the casts in the report are
   exactly those the tags imply, forward and backward.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyamp as ta
from tests.support.op_specs import OpSpec, all_specs, make_inputs
from tinyamp.autograd.function import REGISTRY
from tinyamp.autograd.custom_function import CustomFunction

F16, BF16, F32, F64 = "float16", "bfloat16", "float32", "float64"
FLOATS = {F16, BF16, F32, F64}
LOW = {F16, BF16}


def _tags() -> dict[str, str]:
    """Op name -> declared tag, for every op class (helpers included)."""
    return {cls.name: cls.precision.name for cls in REGISTRY
            if not issubclass(cls, CustomFunction)}


def _expected(tag: str, arrived: list[str], region: "str | None") -> list[str]:
    """The dtypes an op should compute in (the tag table, by hand)."""
    floats = [d for d in arrived if d in FLOATS]
    if tag == "NEUTRAL" or not floats:
        return list(arrived)
    if tag == "PROMOTE":
        for wide in (F64, F32, F16, BF16):
            if wide in floats:
                break
        if F16 in floats and BF16 in floats and wide in LOW:
            wide = F32  # neither 16-bit type holds the other
        return list(arrived) if all(d == wide for d in arrived) else [wide] * len(arrived)
    if region is None:
        return list(arrived)
    if tag == "LOWER":
        return list(arrived) if F64 in floats else [region if d in FLOATS else d for d in arrived]
    if tag == "FP32":
        return [F32 if d in LOW else d for d in arrived]
    raise AssertionError(f"unknown tag {tag}")


# ------------------------------------------------------------ the op table
SPECS = all_specs()
IDS = [s.id for s in SPECS]
VARIANTS = {"f32": (F32, F32), "f16": (F16, F16), "mixed": (F32, F16)}
REGIONS = {"fp16": ta.float16, "bf16": ta.bfloat16}


def _make(spec: OpSpec, variant: str, device: str = "cpu") -> list:
    """Tensors for ``spec``: float args alternate between the variant's two dtypes."""
    arrays = make_inputs(spec, ta.float64, np.random.default_rng(spec.seed))
    dtypes = VARIANTS[variant]
    tensors, k = [], 0
    for arg, array in zip(spec.args, arrays):
        if arg.kind == "float":
            t = ta.tensor(array, dtype=dtypes[k % 2], device=device)
            k += 1
            if arg.grad and spec.differentiable:
                t.requires_grad_()
        else:
            t = ta.tensor(array, device=device)
        tensors.append(t)
    return tensors


def _check_trace(trace: "ta.amp.Trace", region: "str | None", tags: dict) -> list[str]:
    """Every forward op computed in the dtypes its tag implies; returns the op names seen."""
    names = []
    for r in trace.ops:
        if r.phase != "forward" or r.name == "cast":
            continue
        names.append(r.name)
        assert r.inputs == _expected(tags[r.name], r.arrived, region), \
            f"{r.name} ({tags[r.name]}) received {r.arrived}, computed in {r.inputs}"
        if tags[r.name] in ("LOWER", "FP32") and r.inputs != r.arrived:
            compute = next(d for d in r.inputs if d in FLOATS)
            floating_out = [d for d in r.outputs if d in FLOATS]
            assert all(d == compute for d in floating_out), f"{r.name}: outputs {r.outputs} vs {compute}"
    return names


def _run(spec: OpSpec, tensors: list, region: Any) -> "ta.amp.Trace":
    with ta.amp.trace() as t:
        if region is None:
            spec.fn(*tensors)
        else:
            with ta.amp.autocast(dtype=region):
                spec.fn(*tensors)
    return t


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("region", list(REGIONS))
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_ops_compute_in_the_dtype_their_tag_says(spec: OpSpec, region: str, variant: str, device: str) -> None:
    tensors = _make(spec, variant, device)
    if spec.name == "binary_cross_entropy" and region == "fp16":
        # The one refused op: its backward would underflow once cast back to float16.
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            _run(spec, tensors, REGIONS[region])
        return
    trace = _run(spec, tensors, REGIONS[region])
    names = _check_trace(trace, str(REGIONS[region]), _tags())
    assert names, f"{spec.id}: no op recorded"


# Mixed float16/float32 inputs outside autocast are an error for most ops, as in
# PyTorch (PROMOTE ops and the losses' promoted_inputs promote them:
# tests/core/test_mixed_dtypes.py), so only uniform inputs are run here.
@pytest.mark.parametrize("variant", ["f32", "f16"])
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_outside_autocast_nothing_is_lowered(spec: OpSpec, variant: str, device: str) -> None:
    tensors = _make(spec, variant, device)
    trace = _run(spec, tensors, None)
    _check_trace(trace, None, _tags())
    assert all(c.kind != "cache hit" for c in trace.casts)
    assert [c for c in trace.casts if c.kind == "autocast"] == []
    if variant == "f32":
        assert not any(d in LOW for r in trace.ops for d in r.inputs + r.outputs)


# Ops the spec rows do not reach, exercised here (to_device needs a second device).
EXTRA = {
    "cast": lambda x: x.half(),
    "clone": lambda x: x.clone(),
    "broadcast_to": lambda x: ta.broadcast_to(x, (2, 3, 4)),
    "sum_to": lambda x: ta.sum_to(x, (1, 4)),
    "dropout": lambda x: ta.dropout(x, 0.5, training=True),
}


def test_every_op_in_the_table_is_covered() -> None:
    seen: set[str] = set()
    for spec in SPECS:
        if spec.name == "binary_cross_entropy":
            tensors = _make(spec, "f32")
            seen.update(r.name for r in _run(spec, tensors, ta.bfloat16).ops)
            continue
        seen.update(r.name for r in _run(spec, _make(spec, "f32"), ta.float16).ops)
    x = ta.tensor(np.linspace(-1, 1, 12).reshape(3, 4), dtype=ta.float32, requires_grad=True)
    for name, fn in EXTRA.items():
        with ta.amp.trace() as t:
            with ta.amp.autocast():
                fn(x)
        assert name in {r.name for r in t.ops}, name
        seen.add(name)
    required = set(ta.amp.op_table())
    if not ta.cuda.is_available():
        required.discard("to_device")  # a move between devices needs a second device
    assert required - seen == set(), f"ops in op_table() with no autocast test: {sorted(required - seen)}"


@pytest.mark.parametrize("region", list(REGIONS))
def test_extra_ops_follow_their_tags(region: str) -> None:
    x = ta.tensor(np.linspace(-1, 1, 12).reshape(3, 4), dtype=ta.float32, requires_grad=True)
    for fn in EXTRA.values():
        with ta.amp.trace() as t:
            with ta.amp.autocast(dtype=REGIONS[region]):
                fn(x)
        _check_trace(t, str(REGIONS[region]), _tags())


# ------------------------------------------------------ random expression graphs
GRAPH_OPS = ["matmul", "linear", "add", "mul", "exp", "log", "sum", "mean", "softmax", "log_softmax",
             "relu", "reshape", "getitem", "cat"]


def test_all_graph_ops_exist() -> None:
    assert [n for n in GRAPH_OPS if not hasattr(ta, n)] == []


AVAILABLE = [n for n in GRAPH_OPS if hasattr(ta, n)]


class Node:
    """A value in a drawn program: its shape, |value| bound and a lower bound (None: unknown sign)."""

    def __init__(self, shape: tuple, bound: float, low: "float | None" = None) -> None:
        self.shape, self.bound, self.low = shape, bound, low


@st.composite
def programs(draw: Any) -> tuple[list, list]:
    """A list of instructions ("leaf", shape) / (op, operand indices, params), and leaf shapes."""
    dim = st.integers(1, 4)
    nodes: list[Node] = []
    program: list = []

    def leaf(shape: tuple) -> int:
        program.append(("leaf", shape, None))
        nodes.append(Node(shape, 1.0))
        return len(nodes) - 1

    def pick(cond: Any = lambda n: True) -> "int | None":
        choices = [i for i, n in enumerate(nodes) if cond(n)]
        return draw(st.sampled_from(choices)) if choices else None

    leaf((draw(dim), draw(dim)))
    if draw(st.booleans()):
        leaf(nodes[0].shape)
    for _ in range(draw(st.integers(1, 7))):
        op = draw(st.sampled_from(AVAILABLE))
        a = pick(lambda n: len(n.shape) == 2 and n.bound < 50)
        if a is None:
            a = leaf((draw(dim), draw(dim)))
        n_a = nodes[a]
        rows, cols = n_a.shape
        if op == "matmul":
            b = pick(lambda n: len(n.shape) == 2 and n.shape[0] == cols and n.bound < 50)
            if b is None or draw(st.booleans()):
                b = leaf((cols, draw(dim)))
            program.append(("matmul", (a, b), None))
            nodes.append(Node((rows, nodes[b].shape[1]), n_a.bound * nodes[b].bound * cols))
        elif op == "linear":
            w = leaf((draw(dim), cols))
            bias = leaf((nodes[w].shape[0],)) if draw(st.booleans()) else None
            program.append(("linear", (a, w) if bias is None else (a, w, bias), None))
            nodes.append(Node((rows, nodes[w].shape[0]), n_a.bound * cols + 1))
        elif op in ("add", "mul"):
            b = pick(lambda n: n.shape in (n_a.shape, (1, cols)) and n.bound < 50)
            if b is None or draw(st.booleans()):
                b = leaf(draw(st.sampled_from([n_a.shape, (1, cols)])))
            program.append((op, (a, b), None))
            n_b = nodes[b]
            bound = n_a.bound + n_b.bound if op == "add" else n_a.bound * n_b.bound
            low = None
            if n_a.low is not None and n_b.low is not None:
                low = n_a.low + n_b.low if op == "add" else n_a.low * n_b.low
            nodes.append(Node(n_a.shape, bound, low))
        elif op == "exp":
            if n_a.bound > 3:
                continue  # keeps exp's output well inside float16's range
            program.append(("exp", (a,), None))
            nodes.append(Node(n_a.shape, math.exp(n_a.bound), math.exp(-n_a.bound)))
        elif op == "log":
            p = pick(lambda n: n.low is not None and n.low > 1e-3 and len(n.shape) == 2)
            if p is None:
                continue
            program.append(("log", (p,), None))
            n_p = nodes[p]
            nodes.append(Node(n_p.shape, max(abs(math.log(n_p.low)), abs(math.log(n_p.bound)))))
        elif op in ("sum", "mean"):
            d = draw(st.sampled_from([0, 1, -1]))
            keep = draw(st.booleans())  # a 1-D result only feeds the final loss
            shape = (1, cols) if d == 0 else (rows, 1)
            if not keep:
                shape = (cols,) if d == 0 else (rows,)
            count = rows if d == 0 else cols
            program.append((op, (a,), (d, keep)))
            bound = n_a.bound * (count if op == "sum" else 1)
            low = None if n_a.low is None else n_a.low * (count if op == "sum" else 1)
            nodes.append(Node(shape, bound, low))
        elif op in ("softmax", "log_softmax"):
            d = draw(st.sampled_from([0, 1]))
            program.append((op, (a,), d))
            count = n_a.shape[d]
            low_p = math.exp(-2 * n_a.bound) / count
            if op == "softmax":
                nodes.append(Node(n_a.shape, 1.0, low_p))
            else:
                nodes.append(Node(n_a.shape, abs(math.log(low_p))))
        elif op == "relu":
            program.append(("relu", (a,), None))
            nodes.append(Node(n_a.shape, n_a.bound))
        elif op == "reshape":
            shape = draw(st.sampled_from([(cols, rows), (1, rows * cols), (rows * cols, 1)]))
            program.append(("reshape", (a,), shape))
            nodes.append(Node(shape, n_a.bound, n_a.low))
        elif op == "getitem":
            start = draw(st.integers(0, rows - 1))
            key = draw(st.sampled_from(["rows", "col"]))
            if key == "rows":
                program.append(("getitem", (a,), (slice(start, None), slice(None))))
                nodes.append(Node((rows - start, cols), n_a.bound, n_a.low))
            else:
                j = draw(st.integers(0, cols - 1))
                program.append(("getitem", (a,), (slice(None), slice(j, j + 1))))
                nodes.append(Node((rows, 1), n_a.bound, n_a.low))
        elif op == "cat":
            b = pick(lambda n: len(n.shape) == 2 and (n.shape[1] == cols or n.shape[0] == rows) and n.bound < 50)
            n_b = nodes[b]
            d = 0 if n_b.shape[1] == cols else 1
            program.append(("cat", (a, b), d))
            shape = (rows + n_b.shape[0], cols) if d == 0 else (rows, cols + n_b.shape[1])
            low = None if n_a.low is None or n_b.low is None else min(n_a.low, n_b.low)
            nodes.append(Node(shape, max(n_a.bound, n_b.bound), low))
    return program, draw(st.integers(0, 2**32 - 1))


def _execute(program: list, seed: int, region: Any) -> tuple[list, list, "ta.amp.Trace"]:
    rng = np.random.default_rng(seed)
    values: list = []
    leaves: list = []
    consumed: set[int] = set()
    with ta.amp.trace() as trace:
        with ta.amp.autocast(dtype=region if region is not None else None, enabled=region is not None):
            for op, args, params in program:
                if op == "leaf":
                    t = ta.tensor(rng.uniform(-1, 1, size=args), dtype=ta.float32, requires_grad=True)
                    values.append(t)
                    leaves.append(t)
                    continue
                xs = [values[i] for i in args]
                consumed.update(args)
                if op == "matmul":
                    y = ta.matmul(*xs)
                elif op == "linear":
                    y = ta.linear(*xs)
                elif op == "add":
                    y = ta.add(*xs)
                elif op == "mul":
                    y = ta.mul(*xs)
                elif op in ("exp", "log", "relu"):
                    y = getattr(ta, op)(xs[0])
                elif op in ("sum", "mean"):
                    y = getattr(ta, op)(xs[0], params[0], keepdim=params[1])
                elif op in ("softmax", "log_softmax"):
                    y = getattr(ta, op)(xs[0], params)
                elif op == "reshape":
                    y = ta.reshape(xs[0], params)
                elif op == "getitem":
                    y = xs[0][params]
                elif op == "cat":
                    y = ta.cat(xs, dim=params)
                values.append(y)
            sinks = [v for i, v in enumerate(values) if i not in consumed]
            loss = sinks[0].mean()
            for v in sinks[1:]:
                loss = loss + v.mean()
        loss.backward()
    return leaves, [leaf.grad for leaf in leaves], trace


def _reversal(c: Any) -> tuple:
    return (c.target, c.source)


@settings(deadline=None)
@given(programs(), st.sampled_from(["fp16", "bf16"]))
def test_random_graphs_under_autocast(drawn: tuple, region_name: str) -> None:
    program, seed = drawn
    region = REGIONS[region_name]
    leaves32, grads32, _ = _execute(program, seed, None)
    leaves, grads, trace = _execute(program, seed, region)
    tags = _tags()

    # Every leaf gradient has its leaf's dtype and shape, and agrees with float32.
    scale = max([float(np.abs(g.numpy()).max()) for g in grads32 if g is not None] + [1.0])
    for leaf, g, g32 in zip(leaves, grads, grads32):
        assert (g is None) == (g32 is None)
        if g is None:
            continue
        assert g.dtype == leaf.dtype == ta.float32 and g.shape == leaf.shape
        # float16 keeps 11 bits (bfloat16 8) and every low-precision op on a path
        # (at most 7) rounds its inputs and output; errors are measured against the
        # largest gradient of the run. Worst seen over 1500 graphs: 7e-4 (float16)
        # and 4e-3 (bfloat16), so these bounds leave about 7x room.
        tol = 5e-3 if region_name == "fp16" else 3e-2
        np.testing.assert_allclose(g.numpy(), g32.numpy(), rtol=tol, atol=tol * scale)

    # No float64 anywhere.
    assert not any(F64 in r.inputs + r.outputs for r in trace.ops)

    # Forward: the casts attached to each op are exactly those its tag implies.
    region_str = str(region)
    for r in trace.ops:
        if r.phase != "forward" or r.name == "cast":
            continue
        expected = _expected(tags[r.name], r.arrived, region_str)
        assert r.inputs == expected
        implied = Counter((a, e) for a, e in zip(r.arrived, expected) if a != e)
        recorded = Counter((trace.casts[i].source, trace.casts[i].target) for i in r.casts)
        assert recorded == implied, f"{r.name}: casts {recorded} but the tag implies {implied}"
    forward = [c for c in trace.casts if c.phase == "forward"]
    assert all(c.op_index >= 0 and c.kind in ("autocast", "cache hit") for c in forward)

    # Backward: one cast per forward Cast node (a cache hit is a node too), returning
    # the gradient; nothing else.
    conversions = Counter(_reversal(c) for c in forward)
    backward = [c for c in trace.casts if c.phase == "backward"]
    assert all(c.kind == "backward" for c in backward)
    assert Counter((c.source, c.target) for c in backward) == conversions
