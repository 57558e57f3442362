"""The pure precision rule (tinyamp/precision.py): tag + input dtypes + autocast dtype -> compute dtype.

The expected values are written out by hand from the tag table in the module's
docstring, one table row per case, so a change to the rule shows up as a named row.
"""

from __future__ import annotations

import pytest

import tinyamp as ta
from tinyamp.precision import (FP32, LOWER, NEUTRAL, PROMOTE, Precision, as_precision, cast_plan, compute_dtype,
                               needs_cast)

f16, bf16, f32, f64, i64, b = ta.float16, ta.bfloat16, ta.float32, ta.float64, ta.int64, ta.bool

# (tag, input dtypes, autocast dtype or None, expected compute dtype or None = leave inputs alone)
CASES = [
    # LOWER: float inputs go to the region's dtype; float64 never lowered; ints pass through.
    (LOWER, [f32, f32], f16, f16),
    (LOWER, [f32, f16], f16, f16),
    (LOWER, [f16, f16], f16, None),
    (LOWER, [f32, f32], bf16, bf16),
    (LOWER, [f16, f32], bf16, bf16),
    (LOWER, [bf16, bf16], bf16, None),
    (LOWER, [f64, f64], f16, None),
    (LOWER, [f64, f32], f16, None),
    (LOWER, [f32, i64], f16, f16),
    (LOWER, [i64, i64], f16, None),
    (LOWER, [f32, f32], None, None),
    (LOWER, [f16, f32], None, None),
    # FP32: low precision goes up; float32 and float64 stay.
    (FP32, [f16], f16, f32),
    (FP32, [bf16], f16, f32),
    (FP32, [f16, f32], bf16, f32),
    (FP32, [f32], f16, None),
    (FP32, [f64], f16, None),
    (FP32, [f32, i64], f16, None),
    (FP32, [f16], None, None),
    # PROMOTE: widest float, inside and outside autocast.
    (PROMOTE, [f16, f32], f16, f32),
    (PROMOTE, [f16, f32], None, f32),
    (PROMOTE, [f16, f16], f16, None),
    (PROMOTE, [bf16, f32], None, f32),
    (PROMOTE, [f32, f64], None, f64),
    (PROMOTE, [f16, i64], None, f16),
    (PROMOTE, [f32, b], f16, f32),
    (PROMOTE, [i64, i64], f16, None),
    (PROMOTE, [bf16, f16, f32], None, f32),
    # NEUTRAL: nothing, ever.
    (NEUTRAL, [f32], f16, None),
    (NEUTRAL, [f16, f32], f16, None),
    (NEUTRAL, [f16], None, None),
]


@pytest.mark.parametrize("tag,dtypes,region,expected", CASES,
                         ids=[f"{c[0].name}-{'+'.join(map(str, c[1]))}-{c[2]}" for c in CASES])
def test_compute_dtype_table(tag: Precision, dtypes: list, region: object, expected: object) -> None:
    assert compute_dtype(tag, dtypes, region) == expected


@pytest.mark.parametrize("region", [None, f16, bf16])
def test_promote_float16_with_bfloat16_is_float32(region: object) -> None:
    # Neither holds the other; float32 holds both (PyTorch: promote_types(Half, BFloat16) = Float).
    for _ in range(2):  # the memoised answer too
        assert compute_dtype(PROMOTE, [f16, bf16], region) == f32
        assert compute_dtype(PROMOTE, [bf16, f16, i64], region) == f32


def test_memoised_answers_stay_correct() -> None:
    for _ in range(3):
        assert compute_dtype(LOWER, (f32, f32), f16) == f16
        assert compute_dtype(LOWER, [f32, f32], bf16) == bf16
        assert compute_dtype(LOWER, iter([f32, f32]), None) is None


@pytest.mark.parametrize("tag,dtypes,region,expected", CASES,
                         ids=[f"{c[0].name}-{'+'.join(map(str, c[1]))}-{c[2]}" for c in CASES])
def test_cast_plan_says_which_inputs_move(tag: Precision, dtypes: list, region: object, expected: object) -> None:
    for _ in range(2):  # the memoised answer too
        target, moves = cast_plan(tag, tuple(dtypes), region)
        assert target == expected
        if expected is None:
            assert moves == ()
        else:  # exactly the inputs that are not in the compute dtype yet and that this tag moves
            assert moves == tuple(d != expected and (tag is PROMOTE or (d in (f16, bf16, f32))) for d in dtypes)


def test_needs_cast_moves_only_floats_except_for_promote() -> None:
    assert needs_cast(LOWER, f32, f16)
    assert not needs_cast(LOWER, f16, f16)
    assert not needs_cast(LOWER, i64, f16)       # labels and indices pass through
    assert not needs_cast(LOWER, f64, f16)       # float64 never lowered
    assert needs_cast(FP32, bf16, f32)
    assert not needs_cast(FP32, b, f32)
    assert needs_cast(PROMOTE, i64, f32)         # int operands of arithmetic join the float
    assert needs_cast(PROMOTE, b, f16)


@pytest.mark.parametrize("spec,tag", [("lower", LOWER), ("FP32", FP32), ("promote", PROMOTE),
                                      ("Neutral", NEUTRAL), (LOWER, LOWER)])
def test_as_precision_accepts_names_and_tags(spec: object, tag: Precision) -> None:
    assert as_precision(spec) is tag


@pytest.mark.parametrize("spec", ["white", "fp16", 3, None])
def test_as_precision_rejects_unknown(spec: object) -> None:
    with pytest.raises(ValueError, match="unknown precision tag"):
        as_precision(spec)


def test_every_op_class_declares_a_known_tag() -> None:
    table = ta.amp.op_table()
    assert len(table) > 0
    for name, info in table.items():
        assert isinstance(info.tag, Precision), name
        assert "precision" in vars(info.cls) or any("precision" in vars(k) for k in info.cls.__mro__[1:-1]), name
