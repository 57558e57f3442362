"""The precision report (tinyamp/study/report.py): ops, casts and their rules, cache
hits, bytes saved for backward, the printed table and ``to_dict``.
"""

from __future__ import annotations

import json
import threading

import numpy as np

import tinyamp as ta
from tinyamp import precision


def _leaf(*shape: int, seed: int = 0) -> ta.Tensor:
    rng = np.random.default_rng(seed)
    return ta.tensor(rng.standard_normal(shape) * 0.5, dtype=ta.float32, requires_grad=True)


def _input(*shape: int, seed: int = 7) -> ta.Tensor:
    return ta.tensor(np.random.default_rng(seed).standard_normal(shape), dtype=ta.float32)


def test_forward_and_backward_ops_with_dtypes_and_rules() -> None:
    x, w = _input(4, 3), _leaf(5, 3)
    with ta.amp.trace() as t:
        with ta.amp.autocast():
            y = ta.linear(x, w)               # LOWER: x and w go to float16
            z = ta.exp(y)                     # FP32: y comes back to float32
            loss = z.mean()
        loss.backward()

    forward = [(r.name, r.tag, r.arrived, r.inputs, r.outputs) for r in t.ops if r.phase == "forward"]
    # x's cast and w's cast are Cast ops (w's recorded: it requires grad), before linear.
    assert forward == [
        ("cast", "NEUTRAL", ["float32"], ["float32"], ["float16"]),
        ("cast", "NEUTRAL", ["float32"], ["float32"], ["float16"]),
        ("linear", "LOWER", ["float32", "float32"], ["float16", "float16"], ["float16"]),
        ("cast", "NEUTRAL", ["float16"], ["float16"], ["float32"]),
        ("exp", "FP32", ["float16"], ["float32"], ["float32"]),
        ("mean", "FP32", ["float32"], ["float32"], ["float32"]),
    ]
    rules = [c.rule for c in t.casts if c.phase == "forward"]
    assert rules == ["LOWER: float32 -> float16 for linear",
                     "LOWER: float32 -> float16 for linear; cache miss",
                     "FP32: float16 -> float32 for exp"]
    backward_casts = [c for c in t.casts if c.phase == "backward"]
    # exp's input cast returns its gradient to float16; w's cast returns it to float32.
    # (x needs no gradient, so its cast has no backward.)
    assert [(c.source, c.target, c.op) for c in backward_casts] == [
        ("float32", "float16", "exp"), ("float16", "float32", "linear")]
    assert backward_casts[1].rule.startswith("gradient back to float32 (backward of LOWER")
    backward_ops = [r for r in t.ops if r.phase == "backward"]
    assert backward_ops and all(r.during for r in backward_ops)
    assert {r.during for r in backward_ops} >= {"mean", "exp", "cast", "linear"}
    assert t.cache_misses == 1 and t.cache_hits == 0


def test_cache_hits_are_casts_that_did_not_run() -> None:
    x, w = _input(4, 3), _leaf(5, 3)
    with ta.amp.trace() as t:
        with ta.amp.autocast():
            ta.linear(x, w)
            ta.linear(x * 2.0, w)
    hits = [c for c in t.casts if c.kind == "cache hit"]
    assert len(hits) == 1 and not hits[0].converted
    assert hits[0].rule == "LOWER: float32 -> float16 for linear; cache hit"
    assert t.ops[hits[0].op_index].name == "linear"
    assert t.cache_hits == 1 and t.cache_misses == 1
    assert t.totals()["casts"] == 3   # x twice (no grad: never cached), w once


def test_explicit_casts_are_labelled() -> None:
    x = _leaf(3)
    with ta.amp.trace() as t:
        x.half().float().sum().backward()
    kinds = [(c.phase, c.kind) for c in t.casts]
    assert kinds == [("forward", "explicit"), ("forward", "explicit"),
                     ("backward", "backward"), ("backward", "backward")]


def test_promote_and_overrides_name_their_rule() -> None:
    a, b = _leaf(3), ta.tensor([1.0, 2.0, 3.0], dtype=ta.float16)
    with ta.amp.trace() as t:
        a * b                                         # outside autocast: PROMOTE still applies
        with ta.amp.autocast(lower_ops={"exp"}):
            ta.exp(a)
    assert [c.rule for c in t.casts] == [
        "PROMOTE: float16 -> float32 for mul (widest input)",
        "LOWER: float32 -> float16 for exp (region override of FP32); cache miss"]


def test_saved_bytes_per_dtype_count_each_array_once() -> None:
    # x is an activation that needs a gradient (so linear keeps w16 for dx) and is
    # not a leaf (so autocast casts it afresh for each use, unlike the weight).
    x, w = _leaf(8, 6) * 1.0, _leaf(5, 6)
    with ta.amp.trace() as t:
        with ta.amp.autocast():
            y1 = ta.linear(x, w)         # saves x16 and w16
            y2 = ta.linear(x, w)         # saves a new x16 and the same w16
    half = 2
    assert t.saved_bytes["forward"] == {"float16": (8 * 6 + 5 * 6 + 8 * 6) * half}
    assert [r.saved_bytes for r in t.ops if r.name == "linear"] == [(8 * 6 + 5 * 6) * half, 8 * 6 * half]
    del y1, y2

    with ta.amp.trace() as t32:
        ta.linear(x, w)
    assert t32.saved_bytes["forward"] == {"float32": (8 * 6 + 5 * 6) * 4}


def test_saved_bytes_of_a_small_mlp_under_autocast_are_about_half() -> None:
    rng = np.random.default_rng(0)
    x = ta.tensor(rng.standard_normal((64, 32)), dtype=ta.float32)
    labels = ta.tensor(rng.integers(0, 10, 64))
    w1, w2 = _leaf(48, 32, seed=1), _leaf(10, 48, seed=2)

    def saved(amp: bool) -> int:
        with ta.amp.trace() as t:
            with ta.amp.autocast(enabled=amp):
                loss = ta.cross_entropy(ta.linear(ta.relu(ta.linear(x, w1)), w2), labels)
        del loss
        return t.totals()["saved_bytes_total"]

    # Kept for backward: x (64x32, for dW1; W1 itself is not kept since x needs no
    # gradient), relu's output (64x48), W2 (10x48, for the relu output's gradient),
    # and cross_entropy's logits (64x10). Under autocast the first three are kept in
    # float16; cross_entropy (FP32) keeps the float32 logits its input's Cast made.
    kept = (64 * 32 + 64 * 48 + 10 * 48) * 4
    assert saved(False) == kept + 64 * 10 * 4
    assert saved(True) == kept // 2 + 64 * 10 * 4


def test_print_and_to_dict_agree() -> None:
    x, w = _input(4, 3), _leaf(5, 3)
    with ta.amp.trace() as t:
        with ta.amp.autocast():
            loss = ta.linear(x, w).float().sum()
        loss.backward()
    text = str(t)
    assert text.splitlines()[1].split()[:8] == ["#", "phase", "op", "tag", "inputs", "output", "saved", "note"]
    assert "LOWER: float32 -> float16 for linear" in text
    assert "saved for backward (forward): float16" in text
    assert "weight cache: 0 hits, 1 misses" in text
    data = json.loads(json.dumps(t.to_dict()))
    assert len(data["ops"]) == len(t.ops) and len(data["casts"]) == len(t.casts)
    assert data["totals"]["cache_misses"] == 1
    assert data["ops"][2]["name"] == "linear" and data["ops"][2]["inputs"] == ["float16", "float16"]
    assert [c["fused"] for c in data["casts"] if c["phase"] == "forward"] == [False, False, False]  # x, w, .float()


def test_nothing_is_recorded_once_closed() -> None:
    assert precision.current_trace() is None
    with ta.amp.trace() as t:
        assert precision.current_trace() is t
        ta.exp(_leaf(2))
    assert precision.current_trace() is None
    ta.exp(_leaf(2))
    assert len(t.ops) == 1


def test_traces_nest() -> None:
    with ta.amp.trace() as outer:
        ta.exp(_leaf(2))
        with ta.amp.trace() as inner:
            with ta.amp.autocast():
                ta.exp(_leaf(2).half())
    assert [r.name for r in inner.ops] == ["cast", "cast", "exp"]
    assert [r.name for r in outer.ops] == ["exp", "cast", "cast", "exp"]
    assert precision.current_trace() is None


def test_other_threads_are_not_recorded() -> None:
    with ta.amp.trace() as t:
        worker = threading.Thread(target=lambda: ta.exp(_leaf(2)))
        worker.start()
        worker.join()
        ta.log(_leaf(2).abs())
    assert [r.name for r in t.ops] == ["abs", "log"]


def test_user_functions_appear_as_custom() -> None:
    class Twice(ta.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, gy):
            return gy * 2.0

    with ta.amp.trace() as t:
        Twice.apply(_leaf(3)).sum().backward()
    twice = [r for r in t.ops if r.name == "twice"]
    assert len(twice) == 1 and twice[0].tag == "custom"


def test_the_information_lost_table_numbers_each_cast_by_the_op_row_that_made_it() -> None:
    x, w = _input(4, 3), _leaf(5, 3)
    with ta.amp.trace() as t:
        with ta.amp.autocast():
            loss = ta.linear(x * 2.0, w).float().sum()  # a first op without a cast: cast #0 is not row 0
        loss.backward()
    lines = str(t).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("information lost at casts"))
    assert "#: the row above that made the cast" in lines[start]
    op_rows = {int(line.split()[0]): line.split()[2] for line in lines[2:start] if line[:1].isdigit()}
    lost = [line.split() for line in lines[start + 2:] if line.strip()[:1].isdigit()]
    # x * 2's Cast op (row 1), then w's Cast op (row 2): none fused
    assert [(int(row[0]), op_rows[int(row[0])], "(fused)" in row) for row in lost if row[1] == "forward"] == [
        (1, "cast", False), (2, "cast", False)]
