"""The fused CUDA kernels of tinyamp/kernels/cuda/cuda_scaler.py and cuda_optim.py, transcribed to NumPy.

Same float32 arithmetic in the same order, same branches, on NumPy arrays:
what each kernel computes, readable without CUDA. The tests hold these and
the kernels (run on the CPU through the CUDA stand-in, and on a GPU)
against the scaler's and the optimizers' NumPy paths, bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_f32 = np.float32


def unscale_reference(grads: list, outs: list, scale: Any, found_inf: Any) -> None:
    """What ``unscale_group``'s kernel does, on NumPy arrays."""
    s = _f32(1.0 / np.float64(scale))
    for g, o in zip(grads, outs):
        v = g.astype(np.float32) * s
        if not np.isfinite(v).all():
            found_inf[...] = 1.0
        o[...] = v.astype(o.dtype)


def update_scale_reference(scale: Any, growth_tracker: Any, hysteresis_tracker: Any, found_inf: Any, *,
                           growth_factor: float, backoff_factor: float, growth_interval: int, hysteresis: int,
                           min_scale: "float | None", max_scale: "float | None", floor: float) -> None:
    """``UPDATE_SCALE``'s one thread, on 0-d NumPy arrays."""
    current = _f32(scale)
    hyst_left = max(int(hysteresis_tracker) - 1, 0)
    successful = int(growth_tracker) + 1
    if _f32(found_inf) > 0:
        growth_tracker[...], hysteresis_tracker[...] = 0, hyst_left
        if hyst_left <= 0:
            backed = _f32(np.float64(current) * backoff_factor)
            scale[...] = max(backed, _f32(floor if min_scale is None else min_scale))
    elif successful >= growth_interval:
        grown = np.float64(current) * growth_factor
        if max_scale is not None and max_scale < grown:
            grown = np.float64(max_scale)
        with np.errstate(over="ignore"):
            grown32 = _f32(grown)
        if np.isfinite(grown32):
            scale[...] = grown32
        growth_tracker[...], hysteresis_tracker[...] = 0, hysteresis
    else:
        growth_tracker[...] = successful


def sgd_reference(w: Any, g: Any, buf: Any, step: Any, keep: Any, *, low: Any = None, lr: float,
                  momentum: float, dampening: float, weight_decay: float, nesterov: bool, maximize: bool) -> None:
    """``SGD_GROUP``'s loop body for one tensor and ``ADVANCE_STEPS``, on NumPy arrays."""
    if not bool(keep):
        return
    w32, d = w.astype(np.float32), g.astype(np.float32)
    if maximize:
        d = -d
    if weight_decay != 0:
        d = d + _f32(weight_decay) * w32
    if momentum != 0:
        b = _f32(momentum) * buf.astype(np.float32) + _f32(1 - dampening) * d if step > 0 else d
        d = d + _f32(momentum) * b if nesterov else b
        buf[...] = b
    w_new = w32 - _f32(lr) * d
    w[...] = w_new
    if low is not None:
        low[...] = w_new
    if momentum != 0:
        step[...] = step + _f32(1)


def adam_reference(w: Any, g: Any, m: Any, v: Any, v_max: Any, step: Any, keep: Any, *, low: Any = None,
                   lr: float, beta1: float, beta2: float, eps: float, weight_decay: float,
                   decoupled: bool) -> None:
    """``ADAM_PREPARE_GROUP`` and ``ADAM_GROUP``'s loop body for one tensor, on NumPy arrays."""
    t = np.float64(step + _f32(1))
    step_size = _f32(lr / (1.0 - np.power(beta1, t)))
    bias2_sqrt = _f32(np.sqrt(1.0 - np.power(beta2, t)))
    if not bool(keep):
        return
    step[...] = step + _f32(1)
    w32, g32 = w.astype(np.float32), g.astype(np.float32)
    if weight_decay != 0:
        if decoupled:
            w32 = w32 * _f32(1 - lr * weight_decay)
        else:
            g32 = g32 + _f32(weight_decay) * w32
    m32 = m.astype(np.float32)
    m_new = m32 + _f32(1 - beta1) * (g32 - m32)
    v_new = _f32(beta2) * v.astype(np.float32) + _f32(1 - beta2) * (g32 * g32)
    second = v_new
    if v_max is not None:
        vm = v_max.astype(np.float32)
        second = np.where((vm >= v_new) | np.isnan(vm), vm, v_new)
        v_max[...] = second
    denom = np.sqrt(second) / bias2_sqrt + _f32(eps)
    w_new = w32 - step_size * (m_new / denom)
    w[...], m[...], v[...] = w_new, m_new, v_new
    if low is not None:
        low[...] = w_new


# ------------------------------------------------------------------ row kernels (cuda_rows, cuda_layer_norm)
def block_sum_reference(values: np.ndarray, threads: int) -> np.ndarray:
    """``tinyamp_block_sum`` over the last axis of float32 ``values``: thread ``t`` adds elements ``t, t + T, ...``
    in order from 0, then the tree (``t`` takes ``t + s`` for ``s`` = T/2, T/4, ..., 1)."""
    cols = values.shape[-1]
    steps = -(-cols // threads)
    padded = np.zeros(values.shape[:-1] + (steps * threads,), _f32)
    padded[..., :cols] = values  # a +0.0 pad leaves a partial unchanged (a partial from 0.0f is never -0.0)
    acc = np.zeros(values.shape[:-1] + (threads,), _f32)
    for i in range(steps):
        acc = acc + padded[..., i * threads:(i + 1) * threads]
    s = threads // 2
    while s:
        acc[..., :s] = acc[..., :s] + acc[..., s:2 * s]
        s //= 2
    return acc[..., 0]


def layer_norm_reference(x: np.ndarray, weight: Any, bias: Any, eps: float, threads: int, out_dtype: Any) -> tuple:
    """``cuda_layer_norm``'s forward on (rows, cols) NumPy arrays: (y, mean, rstd)."""
    xf = x.astype(_f32)
    cols = x.shape[-1]
    mean = block_sum_reference(xf, threads) / _f32(cols)
    d = xf - mean[:, None]
    var = block_sum_reference(d * d, threads) / _f32(cols)
    rstd = _f32(1.0) / np.sqrt(var + _f32(eps))
    y = (xf - mean[:, None]) * rstd[:, None]
    if weight is not None:
        y = y * weight.astype(_f32)
    if bias is not None:
        y = y + bias.astype(_f32)
    return y.astype(out_dtype), mean, rstd


def layer_norm_backward_reference(gy: np.ndarray, x: np.ndarray, weight: Any, mean: np.ndarray, rstd: np.ndarray,
                                  threads: int, chunk_rows: int, w_dtype: Any) -> tuple:
    """``cuda_layer_norm``'s backward on (rows, cols) NumPy arrays: (dx, dweight, dbias)."""
    rows, cols = x.shape
    g32 = gy.astype(_f32)
    xhat = (x.astype(_f32) - mean[:, None]) * rstd[:, None]
    g = g32 * weight.astype(_f32) if weight is not None else g32
    inv_cols = _f32(1.0) / _f32(cols)
    mean_g = block_sum_reference(g, threads) * inv_cols
    mean_gx = block_sum_reference(g * xhat, threads) * inv_cols
    dx = (rstd[:, None] * ((g - mean_g[:, None]) - xhat * mean_gx[:, None])).astype(x.dtype)
    chunks = []
    for r0 in range(0, rows, chunk_rows):
        pw, pb = np.zeros(cols, _f32), np.zeros(cols, _f32)
        for r in range(r0, min(r0 + chunk_rows, rows)):
            pw, pb = pw + g32[r] * xhat[r], pb + g32[r]
        chunks.append((pw, pb))
    tw, tb = chunks[0]
    for pw, pb in chunks[1:]:
        tw, tb = tw + pw, tb + pb
    return dx, tw.astype(w_dtype), tb.astype(w_dtype)


def softmax_reference(x: np.ndarray, log: bool, threads: int, exp: Any, logf: Any) -> np.ndarray:
    """``cuda_softmax``'s forward over the last axis of a 2-D array (``exp``/``logf``: the device's functions)."""
    xf = x.astype(_f32)
    m = xf.max(axis=-1)  # NaN wins, as the kernel's comparisons
    m = np.where(m == -np.inf, _f32(0), m)
    z = xf - m[:, None]
    e = exp(z)
    s = block_sum_reference(e, threads)
    y = z - logf(s)[:, None] if log else e / s[:, None]
    return y.astype(x.dtype)


def softmax_backward_reference(gy: np.ndarray, y: np.ndarray, log: bool, threads: int, exp: Any) -> np.ndarray:
    """``cuda_softmax``'s backward over the last axis of 2-D arrays."""
    g, v = gy.astype(_f32), y.astype(_f32)
    if log:
        s = block_sum_reference(g, threads)
        return (g - exp(v) * s[:, None]).astype(gy.dtype)
    s = block_sum_reference(g * v, threads)
    return (v * (g - s[:, None])).astype(gy.dtype)


# ------------------------------------------------------------------ attention (cuda_attention)
def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sum_d a[..., d] * b[..., d] added in order over d from 0.0f (broadcasting a against b)."""
    acc = np.zeros(np.broadcast_shapes(a.shape[:-1], b.shape[:-1]), _f32)
    for d in range(a.shape[-1]):
        acc = acc + a[..., d] * b[..., d]
    return acc


def _allowed(rows: np.ndarray, keys: np.ndarray, causal: bool, mask: Any) -> np.ndarray:
    ok = np.ones((rows.size, keys.size), bool) if mask is None else mask[np.ix_(rows, keys)]
    return ok & (keys[None, :] <= rows[:, None]) if causal else ok


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Any, causal: bool, scale: float,
                        bn: int, exp: Any, log: Any) -> tuple:
    """``cuda_attention``'s forward for one batch entry: q (L, E), k (S, E), v (S, Ev), mask None or bool (L, S);
    (output in q's dtype, log-sum-exp float32). ``bn``: keys a tile; ``exp``/``log``: the device's."""
    qf, kf, vf = q.astype(_f32), k.astype(_f32), v.astype(_f32)
    length, source = q.shape[0], k.shape[0]
    rows = np.arange(length)
    m, l = np.full(length, -np.inf, _f32), np.zeros(length, _f32)
    o = np.zeros((length, v.shape[1]), _f32)
    scale = _f32(scale)
    for j0 in range(0, source, bn):
        keys = np.arange(j0, j0 + bn)
        inside = keys < source
        kt = np.where(inside[:, None], kf[np.minimum(keys, source - 1)], _f32(0))
        vt = np.where(inside[:, None], vf[np.minimum(keys, source - 1)], _f32(0))
        ok = _allowed(rows, np.minimum(keys, source - 1), causal, mask) & inside[None, :]
        s = np.where(ok, _dot(qf[:, None, :], kt[None, :, :]) * scale, _f32(-np.inf))
        top = s.max(axis=1)  # NaN wins
        active = top != -np.inf
        with np.errstate(invalid="ignore"):
            m_new = np.where(m > top, m, top)
            alpha = exp(m - m_new)
            l2, o2 = l * alpha, o * alpha[:, None]
            for jj in range(bn):
                p = exp(s[:, jj] - m_new)
                l2 = l2 + p
                o2 = o2 + p[:, None] * vt[jj][None, :]
        l, o, m = np.where(active, l2, l), np.where(active[:, None], o2, o), np.where(active, m_new, m)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(l[:, None] == 0, _f32(0), o / l[:, None])
        lse = np.where(l == 0, _f32(-np.inf), m + log(l))
    return out.astype(q.dtype), lse


def attention_backward_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Any, causal: bool,
                                 scale: float, out: np.ndarray, gy: np.ndarray, lse: np.ndarray, exp: Any) -> tuple:
    """``cuda_attention``'s dQ and dK/dV kernels for one batch entry: (dq, dk, dv) in q's dtype."""
    qf, kf, vf, of, gf = (a.astype(_f32) for a in (q, k, v, out, gy))
    length, source = q.shape[0], k.shape[0]
    scale = _f32(scale)
    dsum = _dot(gf, of)
    ok = _allowed(np.arange(length), np.arange(source), causal, mask) & (lse != -np.inf)[:, None]
    with np.errstate(invalid="ignore", over="ignore"):
        dq = np.zeros(qf.shape, _f32)
        for j in range(source):  # dQ: each row over the keys in order
            p = exp(_dot(qf, kf[j][None, :]) * scale - lse)
            ds = p * (_dot(gf, vf[j][None, :]) - dsum)
            dq = np.where(ok[:, j:j + 1], dq + ds[:, None] * kf[j][None, :], dq)
        dk, dv = np.zeros(kf.shape, _f32), np.zeros(vf.shape, _f32)
        for i in range(length):  # dK/dV: each key over the rows in order
            p = exp(_dot(qf[i][None, :], kf) * scale - lse[i])
            dv = np.where(ok[i][:, None], dv + p[:, None] * gf[i][None, :], dv)
            ds = p * (_dot(gf[i][None, :], vf) - dsum[i])
            dk = np.where(ok[i][:, None], dk + ds[:, None] * qf[i][None, :], dk)
    return (dq * scale).astype(q.dtype), (dk * scale).astype(k.dtype), dv.astype(v.dtype)
