"""fp8 casts against PyTorch's (recorded by tests/support/make_fp8_torch_references.py, torch 2.13.0).

Where the libraries agree, tinyamp gives torch's codes: torch saturates E4M3
(inf becomes 448), which is tinyamp's default rule, on every input including
NaN; torch does not saturate E5M2, which is tinyamp's ``saturate=False`` on
every input but NaN, whose payload differs (both give an E5M2 NaN). With
saturation, E5M2 agrees wherever torch's result is finite and gives +-57344
where torch's overflows to inf.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.kernels import fp8
from tests.support import SUPPORT
from tests.support.make_fp8_torch_references import inputs

REFS = np.load(SUPPORT / "fp8_torch_references.npz")
INPUTS = inputs()
SOURCES = list(INPUTS)


def test_the_references_are_torch_2_13s() -> None:
    assert str(REFS["torch_version"]).startswith("2.13.0")
    assert REFS["float32/e4m3"].size == INPUTS["float32"].size == 1_049_345


@pytest.mark.parametrize("source", SOURCES)
def test_e4m3_saturating_is_torchs_cast_everywhere(source: str) -> None:
    x = INPUTS[source]
    want = REFS[f"{source}/e4m3"]
    np.testing.assert_array_equal(fp8.encode(x, ta.float8_e4m3fn), want)
    np.testing.assert_array_equal(ta.from_numpy(x).to(ta.float8_e4m3fn).numpy().view(np.uint8), want)


@pytest.mark.parametrize("source", SOURCES)
def test_e5m2_is_torchs_cast_without_saturation_and_clipped_with_it(source: str) -> None:
    x = INPUTS[source]
    want = REFS[f"{source}/e5m2"]
    with np.errstate(invalid="ignore"):
        nan = np.isnan(x.astype(np.float32))
    loose, tight = fp8.encode(x, ta.float8_e5m2, saturate=False), fp8.encode(x, ta.float8_e5m2)
    np.testing.assert_array_equal(loose[~nan], want[~nan])
    for codes in (loose[nan], want[nan]):
        assert np.isnan(fp8.decode(codes, ta.float8_e5m2)).all()
    torch_values = fp8.decode(want, ta.float8_e5m2)
    finite = np.isfinite(torch_values)
    np.testing.assert_array_equal(tight[finite], want[finite])
    overflow = np.isinf(torch_values)
    assert overflow.any()
    np.testing.assert_array_equal(fp8.decode(tight[overflow], ta.float8_e5m2),
                                  np.copysign(np.float32(57344), torch_values[overflow]))
