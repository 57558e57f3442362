"""scaled_dot_product_attention's kernels (tinyamp/kernels/attention.py) against a float64 reference.

The CPU path walks blocks of heads and queries (cpu/attention_cpu.py); ``BLOCK_BYTES`` is shrunk
here so that small problems take several head blocks and several query blocks (and, with
``causal``, blocks that multiply only the keys they can see). Every mask kind, dropout, broadcast
batch dims, 16-bit inputs, rows with nothing to attend to, and the gradients of all inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tinyamp import dtypes as dt
from tinyamp.kernels import attention as katt
from tinyamp.kernels.cpu import attention_cpu, cpu_path

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _inputs_from_the_seed() -> None:
    """Every test draws from the seed, whatever ran before it in this process (order, selection, xdist)."""
    global RNG
    RNG = np.random.default_rng(0)


def _ref(q, k, v, mask, causal, scale, keep, drop):
    """(y, lse, p, drop factor) in float64, the module docstring's formulas."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if mask is not None and mask.dtype != np.bool_:
        s = s + mask
    allowed = None
    if causal:
        allowed = np.tril(np.ones(s.shape[-2:], bool))
    elif mask is not None and mask.dtype == np.bool_:
        allowed = mask
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m)
    total = e.sum(-1, keepdims=True)
    p = e / np.where(total == 0, 1, total)
    with np.errstate(divide="ignore"):
        lse = (m + np.log(total))[..., 0]
    d = np.ones_like(p) if keep is None else np.where(keep, drop, 0.0)
    return np.matmul(p * d, v), lse, p, d


def _ref_grads(q, k, v, gy, mask, causal, scale, keep, drop):
    _, _, p, d = _ref(q, k, v, mask, causal, scale, keep, drop)
    dv = np.matmul(np.swapaxes(p * d, -1, -2), gy)
    dp = np.matmul(gy, np.swapaxes(v, -1, -2)) * d
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return np.matmul(ds, k) * scale, np.matmul(np.swapaxes(ds, -1, -2), q) * scale, dv, ds


def _sum_to(g, shape):
    return katt._sum_to(g, shape)


CASES = {
    "causal": dict(shapes=((2, 3, 37, 8), (2, 3, 37, 8), (2, 3, 37, 5)), causal=True),
    "causal_more_queries": dict(shapes=((2, 40, 4), (2, 23, 4), (2, 23, 6)), causal=True),
    "plain_broadcast": dict(shapes=((3, 2, 20, 8), (1, 2, 33, 8), (33, 4)), causal=False),
    "bool_mask": dict(shapes=((2, 2, 30, 8), (2, 2, 26, 8), (2, 2, 26, 3)), mask="bool"),
    "float_mask": dict(shapes=((2, 30, 8), (2, 26, 8), (2, 26, 3)), mask="float"),
    "dropout": dict(shapes=((2, 2, 30, 8), (2, 2, 30, 8), (2, 2, 30, 4)), causal=True, dropout=0.3),
    "dead_rows": dict(shapes=((2, 12, 8), (2, 9, 8), (2, 9, 3)), mask="dead"),
}


def _inputs(case: dict, dtype: np.dtype) -> tuple:
    q, k, v = (RNG.standard_normal(s).astype(dtype) for s in case["shapes"])
    scores = np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (q.shape[-2], k.shape[-2])
    mask = None
    if case.get("mask") == "bool":
        mask = RNG.random(scores[-2:]) < 0.7
        mask[:, 0] = True
    elif case.get("mask") == "float":
        mask = RNG.uniform(-2, 2, (scores[0], 1, scores[-1])).astype(np.float32)
    elif case.get("mask") == "dead":
        mask = np.ones(scores[-2:], bool)
        mask[[1, 5]] = False  # queries 1 and 5 see nothing: zeros out, zero gradients
    keep = RNG.random(scores) >= case["dropout"] if case.get("dropout") else None
    drop = 1 / (1 - case["dropout"]) if case.get("dropout") else 1.0
    return q, k, v, mask, keep, drop


@pytest.fixture(params=[1 << 19, 2048], ids=["one_block", "many_blocks"])
def block_bytes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(attention_cpu, "BLOCK_BYTES", request.param)
    return request.param


def test_small_blocks_split_heads_and_queries() -> None:
    assert attention_cpu.block_count((2, 3), 37, 37) == 2
    old = attention_cpu.BLOCK_BYTES
    try:
        attention_cpu.BLOCK_BYTES = 2048
        assert attention_cpu.block_count((2, 3), 37, 37) == 2 * 3 * 3  # one head a block, 16 queries a block
    finally:
        attention_cpu.BLOCK_BYTES = old


def test_batch_dims_merge_into_blocks_of_heads() -> None:
    # 32 batch indices x 2 heads of 17 x 17 scores (the tiny transformer's shape): without a mask, one block of
    # all 64 (batch, head) pairs, 2 BLAS calls forward and 5 backward, not 32 blocks of 2 heads.
    q, k, v = (RNG.standard_normal((32, 17, 2, 16)).astype(np.float32).transpose(0, 2, 1, 3) for _ in range(3))
    calls = []

    def counted(a, b, **flags):
        calls.append(a.shape)
        return katt.gemm(a, b, **flags)

    assert cpu_path.numba_available()  # the kernels attention_cpu calls, loaded
    widen = katt._widener(np.dtype(np.float32))
    y, lse = attention_cpu.forward(q, k, v, None, True, 0.25, None, 1.0, counted, widen)
    assert len(calls) == 2 and calls[0] == (64, 17, 16)
    ry, rlse, _, _ = _ref(*(a.astype(np.float64) for a in (q, k, v)), None, True, 0.25, None, 1.0)
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-6)
    gy = RNG.standard_normal(y.shape).astype(np.float32)
    grads = attention_cpu.backward(q, k, v, gy, lse, None, True, 0.25, None, 1.0, (True, True, True, False), counted,
                                   widen)
    assert len(calls) == 7 and [g.shape for g in grads[:3]] == [q.shape] * 3
    want = _ref_grads(*(a.astype(np.float64) for a in (q, k, v, gy)), None, True, 0.25, None, 1.0)
    for got, ref in zip(grads[:3], want[:3]):
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", CASES)
def test_forward_and_backward_float32_against_float64(name: str, block_bytes: int) -> None:
    case = CASES[name]
    q, k, v, mask, keep, drop = _inputs(case, np.float32)
    causal, scale = case.get("causal", False), 0.3
    y, lse = katt.forward(q, k, v, mask, causal=causal, scale=scale, keep=keep, dropout_scale=drop)
    wide = [a.astype(np.float64) for a in (q, k, v)]
    m64 = None if mask is None else (mask if mask.dtype == np.bool_ else mask.astype(np.float64))
    ry, rlse, _, _ = _ref(*wide, m64, causal, scale, keep, drop)
    assert y.dtype == np.float32 and lse.dtype == np.float32 and y.shape == ry.shape
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lse, rlse, rtol=1e-6, atol=1e-6)
    gy = RNG.standard_normal(y.shape).astype(np.float32)
    dq, dk, dv, dmask = katt.backward(q, k, v, y, gy, lse, mask, causal=causal, scale=scale, keep=keep,
                                      dropout_scale=drop)
    rq, rk, rv, rs = _ref_grads(*wide, gy.astype(np.float64), m64, causal, scale, keep, drop)
    for got, want, a in ((dq, rq, q), (dk, rk, k), (dv, rv, v)):
        assert got.shape == a.shape and got.dtype == a.dtype
        np.testing.assert_allclose(got, _sum_to(want, a.shape), rtol=2e-5, atol=2e-5)
    if case.get("mask") == "float":
        np.testing.assert_allclose(dmask, _sum_to(rs, mask.shape), rtol=2e-5, atol=2e-5)
    else:
        assert dmask is None
    if case.get("mask") == "dead":
        assert np.all(y[:, [1, 5]] == 0) and np.all(np.isneginf(lse[:, [1, 5]])) and np.all(dq[:, [1, 5]] == 0)


@pytest.mark.parametrize("dtype", [dt.float16, dt.bfloat16], ids=["f16", "bf16"])
def test_16_bit_inputs_computed_in_float32_and_rounded_once(dtype: np.dtype, block_bytes: int) -> None:
    q, k, v, _, _, _ = _inputs(CASES["causal"], dtype)
    y, lse = katt.forward(q, k, v, None, causal=True, scale=0.35)
    assert y.dtype == dtype and lse.dtype == np.float32
    wide = [a.astype(np.float32) for a in (q, k, v)]
    y32, lse32 = katt.forward(*wide, None, causal=True, scale=0.35)
    np.testing.assert_array_equal(y.view(np.uint16), y32.astype(dtype).view(np.uint16))  # exact widening, one rounding
    np.testing.assert_array_equal(lse, lse32)
    gy = RNG.standard_normal(y.shape).astype(dtype)
    grads = katt.backward(q, k, v, y, gy, lse, None, causal=True, scale=0.35)
    grads32 = katt.backward(*wide, y32, gy.astype(np.float32), lse32, None, causal=True, scale=0.35)
    for got, want in zip(grads[:3], grads32[:3]):
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.view(np.uint16), want.astype(dtype).view(np.uint16))


def test_only_the_gradients_asked_for() -> None:
    q, k, v, _, _, _ = _inputs(CASES["causal"], np.float32)
    y, lse = katt.forward(q, k, v, None, causal=True, scale=0.3)
    dq, dk, dv, dm = katt.backward(q, k, v, y, y, lse, None, causal=True, scale=0.3, needs=(False, True, False, False))
    assert dq is None and dv is None and dm is None and dk.shape == k.shape


@pytest.mark.parametrize("name", ["causal", "float_mask", "dead_rows"])
def test_the_xp_path_computes_the_same_function(name: str, standin_backend: str) -> None:
    q, k, v, mask, keep, drop = _inputs(CASES[name], np.float32)
    causal = CASES[name].get("causal", False)
    dev = [None if a is None else ta.tensor(a, device="cuda").array for a in (q, k, v, mask)]
    y, lse = katt.forward(*dev, causal=causal, scale=0.3)
    want_y, want_lse = katt.forward(q, k, v, mask, causal=causal, scale=0.3)

    def host(a):
        return ta.Tensor._wrap(a).cpu().numpy()

    np.testing.assert_allclose(host(y), want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(host(lse), want_lse, rtol=1e-6, atol=1e-6)
    gy = RNG.standard_normal(want_y.shape).astype(np.float32)
    got = katt.backward(*dev[:3], y, ta.tensor(gy, device="cuda").array, lse, dev[3], causal=causal, scale=0.3)
    want = katt.backward(q, k, v, want_y, gy, want_lse, mask, causal=causal, scale=0.3)
    for g, w in zip(got, want):
        if w is not None:
            np.testing.assert_allclose(host(g), w, rtol=2e-5, atol=2e-5)


def test_the_float32_exp_of_the_softmax_passes_within_about_an_ulp() -> None:
    # attention_probabilities with scale 1 and a zero log-sum-exp is exp(s): float32 scores take exp32
    # (float32 arithmetic, nn_numba), float64 scores exp64; against NumPy's float64 exp, over the whole
    # range where float32's exp is normal and finite, and where it goes subnormal, overflows or is nan.
    assert cpu_path.numba_available()
    from tinyamp.kernels.cpu.nn_numba import KERNELS  # noqa: PLC0415 - filled once numba is loaded

    s = np.concatenate([np.linspace(-87, 88, 200001), RNG.uniform(-1, 1, 20000),
                        [-103.0, -100.0, -95.0, 88.7, 89.0, 100.0, np.inf, -np.inf, np.nan]]).astype(np.float32)
    none = np.zeros((1, 1, 1), np.bool_)
    got = s.reshape(1, 1, -1).copy()
    KERNELS["attention_probabilities"](got, np.zeros((1, 1), np.float32), 0, 1.0, False, none, 0)
    with np.errstate(over="ignore"):
        want = np.exp(s.astype(np.float64))
    got = got.reshape(-1).astype(np.float64)
    normal = (want >= np.finfo(np.float32).tiny) & (want <= np.finfo(np.float32).max)
    ulp = np.spacing(want[normal].astype(np.float32)).astype(np.float64)
    # Cephes' expf polynomial in float32 arithmetic: measured 1.0022 ulp (not 0.5: its last steps round in
    # float32); the scores it exponentiates carry more than that from their float32 GEMM.
    assert np.max(np.abs(got[normal] - want[normal]) / ulp) <= 1.01
    tiny = (want < np.finfo(np.float32).tiny) & (want > 0)  # subnormal results: within a subnormal step
    assert np.all(np.abs(got[tiny] - want[tiny]) <= 2.0 ** -149)
    assert np.isinf(got[-4]) and got[-3] == np.inf and got[-2] == 0 and np.isnan(got[-1])
