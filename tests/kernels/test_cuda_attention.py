"""The flash-attention kernels (tinyamp/kernels/cuda/cuda_attention.py) on the CUDA stand-in.

Two references. ``cuda_kernels_reference.attention_reference`` and
``attention_backward_reference`` transcribe the kernels' float32 order to
NumPy (the tiles of keys, the online softmax and its rescaling, each dot
product in order, the C library's ``expf``/``logf``): the kernels, run as C++
by the stand-in, must give their bits, per batch entry, for causal, masked
and strided operands. And float64 attention, which checks that the
transcriptions compute attention: every value is a sum of at most S + E
float32 terms (a dot product over E, a sum over the keys, exponentials within
an ulp of scores whose own error grows with their size), so the tolerance is
``(S + E + 16) eps32 (2 + max|s|)`` times the sum of the terms' magnitudes, plus
half an ulp of a 16-bit result. The backward's float64 reference uses the
rounded output in ``D = dO . O``, as the kernels (and flash attention) do.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.support import cuda_kernels_reference as ref
from tests.support import device_math
from tests.support import fused_drivers as fd
from tinyamp import backend
from tinyamp.kernels.cuda import cuda_attention
from cupy_standin import kernels as standin_kernels

pytestmark = pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")

EPS32 = float(np.finfo(np.float32).eps)
EXP, LOG = device_math.libm("expf"), device_math.libm("logf")


@pytest.fixture()
def cp():
    with backend.use_cuda_standin():
        yield backend.cupy()


def data(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def half_ulp(values, dtype):
    if np.dtype(dtype) == fd.F32:
        return np.zeros(np.shape(values))
    finfo = np.finfo(dtype)
    return 2.0 ** (np.floor(np.log2(np.maximum(np.abs(values), float(finfo.tiny)))) - finfo.nmant - 1)


def allowed(length, source, causal, mask):
    ok = np.ones((length, source), bool) if mask is None else mask
    return ok & np.tril(np.ones((length, source), bool)) if causal else ok


def attention64(q, k, v, ok, scale):
    """(output, p, scores) in float64; a row with nothing allowed gives zeros."""
    s = q.astype(np.float64) @ k.astype(np.float64).T * scale
    s = np.where(ok, s, -np.inf)
    top = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(top), top, 0))
    total = e.sum(-1, keepdims=True)
    p = e / np.where(total == 0, 1, total)
    return p @ v.astype(np.float64), p, np.where(ok, s, 0)


def check_close(got, exact, magnitude, n, dtype, smax, what):
    tol = (n + 16) * EPS32 * (2 + smax) * magnitude + half_ulp(exact, dtype)
    err = np.abs(got.astype(np.float64) - exact)
    assert (err <= tol).all(), (what, err.max(), float(np.max(err / np.maximum(tol, 1e-300))))


def entries(a):
    """The (L, E) matrices of a (..., L, E) array, one per batch entry."""
    return a.reshape((-1,) + a.shape[-2:])


# (batch, L, S, E, Ev, causal, mask). Few head dims: each (dtype, E, Ev) is three kernels for g++ to compile.
CASES = [
    ((2, 3), 5, 5, 8, 8, True, None),
    ((2, 3), 70, 70, 8, 8, True, None),  # two query blocks, three key tiles
    ((3,), 9, 40, 8, 12, False, None),  # S != L, Ev != E
    ((2, 2), 33, 17, 8, 8, True, None),  # causal with L > S
    ((2, 2), 6, 7, 8, 8, False, "full"),  # a bool mask over every dim, rows fully masked
    ((2, 3), 6, 6, 8, 8, False, "rows"),  # a (L, S) mask broadcast over the batch
    ((), 65, 3, 8, 12, False, None),  # no batch dim
]
DTYPE_CASES = ([(fd.F16, case) for case in CASES]
               + [(dtype, case) for dtype in (fd.BF16, fd.F32) for case in (CASES[1], CASES[4])])


def make_mask(kind, batch, length, source):
    rng = np.random.default_rng(7)
    if kind is None:
        return None
    if kind == "rows":
        return rng.random((length, source)) > 0.4
    mask = rng.random(batch + (length, source)) > 0.5
    mask.reshape(-1, length, source)[0, 1] = False  # a row that attends to nothing
    return mask


@pytest.mark.parametrize("dtype, case", DTYPE_CASES, ids=str)
def test_forward_and_backward_give_the_transcriptions_bits_and_float64_within_their_error(cp, dtype, case) -> None:
    batch, length, source, e, ev, causal, mask_kind = case
    q, k, v = data(batch + (length, e), dtype, 0), data(batch + (source, e), dtype, 1), data(batch + (source, ev),
                                                                                              dtype, 2)
    mask = make_mask(mask_kind, batch, length, source)
    scale = 1 / math.sqrt(e)
    dmask = None if mask is None else cp.asarray(mask)
    out, lse = cuda_attention.forward(cp.asarray(q), cp.asarray(k), cp.asarray(v), dmask, causal, scale)
    assert out.shape == batch + (length, ev) and out.dtype == dtype and lse.shape == batch + (length,)
    gy = data(out.shape, dtype, 3)
    dq, dk, dv = cuda_attention.backward(cp.asarray(q), cp.asarray(k), cp.asarray(v), dmask, causal, scale, out,
                                         cp.asarray(gy), lse)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    full_mask = None if mask is None else np.broadcast_to(mask, batch + (length, source)).reshape(-1, length, source)
    got = [entries(a.get()) for a in (out, dq, dk, dv)] + [lse.get().reshape(-1, length)]
    for n, (qi, ki, vi, gi) in enumerate(zip(entries(q), entries(k), entries(v), entries(gy))):
        mi = None if full_mask is None else full_mask[n]
        want_out, want_lse = ref.attention_reference(qi, ki, vi, mi, causal, scale, cuda_attention.BN, EXP, LOG)
        want = ref.attention_backward_reference(qi, ki, vi, mi, causal, scale, got[0][n], gi, got[4][n], EXP)
        fd.assert_same_bits([got[0][n], got[4][n]] + [g[n] for g in got[1:4]], [want_out, want_lse, *want],
                            f"attention entry {n}")
        ok = allowed(length, source, causal, mi)
        o64, p64, s64 = attention64(qi, ki, vi, ok, scale)
        smax = float(np.abs(s64).max())
        check_close(got[0][n], o64, p64 @ np.abs(vi.astype(np.float64)), source + e, dtype, smax, "output")
        g64, o_rounded = gi.astype(np.float64), got[0][n].astype(np.float64)
        dp = g64 @ vi.astype(np.float64).T
        dsum = (g64 * o_rounded).sum(-1, keepdims=True)
        ds = p64 * (dp - dsum)
        big = p64 * (np.abs(dp) + np.abs(dsum))
        ka, qa = np.abs(ki.astype(np.float64)), np.abs(qi.astype(np.float64))
        check_close(got[1][n], ds @ ki.astype(np.float64) * scale, big @ ka * scale, source + e + ev, dtype, smax, "dq")
        check_close(got[2][n], ds.T @ qi.astype(np.float64) * scale, big.T @ qa * scale, length + e + ev, dtype, smax,
                    "dk")
        check_close(got[3][n], p64.T @ g64, p64.T @ np.abs(g64), length + e, dtype, smax, "dv")


def test_strided_views_are_read_in_place_and_the_outputs_come_heads_last(cp) -> None:
    """q, k, v as a GPT block makes them (split of one (B, T, 3C) array, heads moved forward): no copy, and the
    outputs' memory is (B, T, H, E), so merging the heads is a view."""
    b, t, h, e = 2, 9, 3, 8
    qkv = cp.asarray(data((b, t, 3 * h * e), fd.F16, 0))
    q, k, v = (qkv[:, :, i * h * e:(i + 1) * h * e].reshape(b, t, h, e).transpose(0, 2, 1, 3) for i in range(3))
    assert not q.flags.c_contiguous
    cuda_attention.forward(q, k, v, None, True, 0.5)  # makes the persistent no-mask placeholder (a memset)
    cp.counters.reset()
    out, lse = cuda_attention.forward(q, k, v, None, True, 0.5)
    assert cp.counters.kernels() == {"tinyamp_attention_f16_8_8": 1}  # no copy of q, k or v
    assert out.transpose(0, 2, 1, 3).flags.c_contiguous
    dense = [cp.ascontiguousarray(a) for a in (q, k, v)]
    out2, lse2 = cuda_attention.forward(*dense, None, True, 0.5)
    fd.assert_same_bits([out.get(), lse.get()], [out2.get(), lse2.get()], "strided operands")
    gy = cp.asarray(data((b, h, t, e), fd.F16, 3))
    cp.counters.reset()
    grads = cuda_attention.backward(q, k, v, None, True, 0.5, out, gy, lse)
    assert cp.counters.kernels() == {"tinyamp_attention_dq_f16_f16_8_8": 1, "tinyamp_attention_dkv_f16_f16_8_8": 1}
    assert all(g.transpose(0, 2, 1, 3).flags.c_contiguous for g in grads)
    fd.assert_same_bits([g.get() for g in grads],
                        [g.get() for g in cuda_attention.backward(*dense, None, True, 0.5, out2, gy, lse2)],
                        "strided backward")


def test_the_bytes_counted_are_each_operand_once(cp) -> None:
    q = cp.asarray(data((2, 5, 8), fd.F16, 0))
    cp.counters.reset()
    out, lse = cuda_attention.forward(q, q, q, None, False, 0.25)
    assert cp.counters.kernel_bytes()["tinyamp_attention_f16_8_8"] == {"read": 3 * q.nbytes,
                                                                         "written": out.nbytes + lse.nbytes}


def test_takes_what_the_kernels_cover(cp) -> None:
    q = cp.ones((2, 3, 4), np.float16)
    assert cuda_attention.takes(q, q, q, None)
    assert cuda_attention.takes(q, q, q, cp.ones((3, 3), np.bool_))
    assert not cuda_attention.takes(q, q, q, cp.ones((3, 3), np.float16))  # a float mask: the composed path
    assert not cuda_attention.takes(q, cp.ones((1, 3, 4), np.float16), q, None)  # broadcast batch dims
    assert not cuda_attention.takes(q.astype(np.float64), q.astype(np.float64), q.astype(np.float64), None)
    assert not cuda_attention.takes(cp.ones((2, 3, 200), np.float16), cp.ones((2, 3, 200), np.float16), q, None)
    assert not cuda_attention.takes(cp.ones((1, 1, 1, 1, 3, 4), np.float16), cp.ones((1, 1, 1, 1, 3, 4), np.float16),
                                    cp.ones((1, 1, 1, 1, 3, 4), np.float16), None)  # four batch dims
