"""The CPU unscale pass of kernels/loss_scale.py: the in-place host path against the kernels' reference.

``unscale_group`` sorts in-place and master pairs and hands the in-place
ones (O1's NumPy gradients) to ``unscale_in_place_on_host``. Both must give the reference's values bit for
bit and the same inf/nan flag, for any shape, layout and dtype, with numba and
with the NumPy ufuncs.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tinyamp.kernels.cpu import cpu_path as kernel_path
from tinyamp.kernels import loss_scale

from tests.support import cuda_kernels_reference
from tests.support import fused_drivers as fd

HAVE_NUMBA = kernel_path._numba_installed() and kernel_path.numba_available()


@pytest.fixture(params=["numba", "astype"])
def cpu_path(request, monkeypatch):
    if request.param == "numba" and not HAVE_NUMBA:  # numba is a dependency: its absence is a failure
        pytest.fail("numba is not installed (or not usable): tinyamp depends on it; pip install numba")
    monkeypatch.setattr(kernel_path, "BACKEND", request.param)
    return request.param


def gradients(bad: float | None) -> list:
    """In-place gradients of every kind the pass meets: 2-D, 1-D and 0-d float32, a strided view, 16-bit."""
    rng = np.random.default_rng(3)

    def draw(shape, dtype):
        n = int(np.prod(shape))
        return (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 14, n)).reshape(shape).astype(dtype)

    parent = draw((6, 10), np.float32)
    grads = [draw((16, 78), np.float32), draw((37,), np.float32), draw((), np.float32),
             parent[:, ::2],  # not contiguous: the kernel cannot take it, the ufuncs do
             draw((5, 3), ml_dtypes.bfloat16), draw((9,), np.float16)]
    if bad is not None:
        grads[0][3, 17] = bad
    return grads


@pytest.mark.parametrize("bad", [None, np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("scale", [2.0 ** 16, 3.0, 2.0 ** -120])  # 1/scale exact, rounded; results overflow
def test_in_place_host_unscale_matches_the_reference(cpu_path, bad, scale) -> None:
    got, want = gradients(bad), gradients(bad)
    found_got, found_want = np.zeros((), np.float32), np.zeros((), np.float32)
    scale_array = np.full((), scale, np.float32)
    with np.errstate(all="ignore"):
        loss_scale.unscale_in_place_on_host(got, scale_array, found_got)
        cuda_kernels_reference.unscale_reference(want, want, scale_array, found_want)
    fd.assert_same_bits(got, want, "unscale in place")
    assert float(found_got) == float(found_want) == (1.0 if bad is not None or scale < 1e-30 else 0.0)


@pytest.mark.parametrize("bad_at", [None, 0, 3, 4, 5])
def test_every_gradient_is_unscaled_and_checked_whichever_holds_the_inf(cpu_path, bad_at) -> None:
    # Six float32 gradients of several shapes, one numba pass each; an inf
    # in any of them must raise the flag and leave the others unscaled all the same.
    rng = np.random.default_rng(5)
    shapes = [(4, 7), (7,), (3, 4), (3,), (2, 2, 2), ()]
    got = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    if bad_at is not None:
        got[bad_at].reshape(-1)[0] = np.inf
    want = [g.copy() for g in got]
    found_got, found_want = np.zeros((), np.float32), np.zeros((), np.float32)
    scale = np.full((), 3.0, np.float32)
    with np.errstate(all="ignore"):
        loss_scale.unscale_in_place_on_host(got, scale, found_got)
        cuda_kernels_reference.unscale_reference(want, want, scale, found_want)
    fd.assert_same_bits(got, want, "unscale in place")
    assert float(found_got) == float(found_want) == (0.0 if bad_at is None else 1.0)


def test_the_strided_view_is_written_through_to_its_parent(cpu_path) -> None:
    parent = np.arange(12, dtype=np.float32).reshape(3, 4) * 4
    found = np.zeros((), np.float32)
    loss_scale.unscale_in_place_on_host([parent[:, ::2]], np.full((), 4.0, np.float32), found)
    np.testing.assert_array_equal(parent[:, ::2], np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2])
    np.testing.assert_array_equal(parent[:, 1::2], np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1::2] * 4)
    assert float(found) == 0.0


def test_float64_gradients_are_multiplied_in_float64(cpu_path) -> None:
    g = np.array([1e300, 3.0, -7.5e-200])
    found = np.zeros((), np.float32)
    loss_scale.unscale_in_place_on_host([g], np.full((), 3.0, np.float32), found)
    np.testing.assert_array_equal(g, np.array([1e300, 3.0, -7.5e-200]) * np.float64(np.float32(1 / 3.0)))
    assert float(found) == 0.0


@pytest.mark.parametrize("bad", [None, np.nan])
def test_unscale_group_sends_in_place_pairs_to_the_host_path_and_keeps_master_pairs(cpu_path, bad) -> None:
    # O2's mix: float32 parameters unscaled in place, float16 ones into float32 master gradients.
    def pairs():
        rng = np.random.default_rng(5)
        in_place = [rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal(7).astype(np.float32)]
        low = [rng.standard_normal((3, 5)).astype(np.float16), rng.standard_normal(2).astype(ml_dtypes.bfloat16)]
        if bad is not None:
            low[0][1, 2] = bad
        masters = [np.empty(g.shape, np.float32) for g in low]
        return [in_place[0], low[0], in_place[1], low[1]], [in_place[0], masters[0], in_place[1], masters[1]]

    (grads, outs), (want_grads, want_outs) = pairs(), pairs()
    found, found_want = np.zeros((), np.float32), np.zeros((), np.float32)
    scale = np.full((), 1024.0, np.float32)
    loss_scale.unscale_group(np, grads, outs, scale, found)
    cuda_kernels_reference.unscale_reference(want_grads, want_outs, scale, found_want)
    fd.assert_same_bits(outs, want_outs, "unscale_group")
    fd.assert_same_bits(grads, want_grads, "gradients (the float16 ones untouched)")
    assert float(found) == float(found_want) == (0.0 if bad is None else 1.0)


@pytest.mark.parametrize("scale", [2.0 ** 16, 3.0, 2.0 ** -120, 3.4e38, float(loss_scale.DEFAULT_MIN_SCALE)])
def test_the_host_multiplies_by_inverse_scale(cpu_path, scale) -> None:
    """The CPU pass multiplies by ``inverse_scale`` (float64 division, one rounding), numba and ufuncs alike."""
    s = np.full((), scale, np.float32)
    inv = loss_scale.inverse_scale(np, s)
    ones32, ones16 = np.ones(5, np.float32), np.ones(3, np.float16)
    masters = [np.empty(5, np.float32), np.empty(3, np.float32)]
    found = np.zeros((), np.float32)
    with np.errstate(all="ignore"):
        loss_scale.unscale_in_place_on_host([ones32], s, found)
        loss_scale.unscale_group(np, [np.ones(5, np.float32), ones16], masters, s, found)
    for got in (ones32, masters[0], masters[1]):
        np.testing.assert_array_equal(got, np.full(got.shape, inv, np.float32))


@pytest.mark.parametrize("bad", [None, np.inf, np.nan])
def test_float32_gradients_unscaled_into_other_float32_arrays(cpu_path, bad) -> None:
    # The out-of-place float32 pass (numba's unscale_f32): every element written, the last one too, and an
    # inf/nan in the last element found (issue 30's audit: no test reached this path).
    rng = np.random.default_rng(2)
    grads = [rng.standard_normal(n).astype(np.float32) for n in (1, 7, 64, 301)]
    if bad is not None:
        grads[-1][-1] = bad
    outs = [np.full(g.shape, -7.0, np.float32) for g in grads]
    want = [g * np.float32(1 / 8.0) for g in grads]
    found = np.zeros((), np.float32)
    with np.errstate(all="ignore"):
        loss_scale.unscale_group(np, grads, outs, np.full((), 8.0, np.float32), found)
    fd.assert_same_bits(outs, want, "unscale out of place")
    assert float(found) == (0.0 if bad is None else 1.0)
