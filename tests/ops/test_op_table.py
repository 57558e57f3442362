"""Runs every row of the op-spec table (tests/support/op_specs) through the same checks.

For each op and device: forward against the NumPy reference in float64, the
output dtype for float16/float32/float64 inputs, gradcheck and gradgradcheck in
float64 with a random cotangent, and float32 forward and gradients within
tolerance of float64.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tests.support.op_specs import OpSpec, all_specs, make_inputs

SPECS = all_specs()
IDS = [s.id for s in SPECS]


def _outputs(value: object) -> list:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _tensors(spec: OpSpec, arrays: list, dtype: object, device: str, grad: bool) -> list:
    tensors = []
    for arg, array in zip(spec.args, arrays):
        if arg.kind == "float":
            t = ta.tensor(array, dtype=dtype, device=device)
            if grad and arg.grad and spec.differentiable:
                t.requires_grad_()
        else:
            t = ta.tensor(array, device=device)
        tensors.append(t)
    return tensors


def _host(t: ta.Tensor) -> np.ndarray:
    return np.asarray(t.detach().numpy(), dtype=np.float64) if t.dtype != ta.bool else t.numpy()


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_forward_matches_numpy(spec: OpSpec, device: str) -> None:
    arrays = make_inputs(spec, ta.float64, np.random.default_rng(spec.seed))
    got = _outputs(spec.fn(*_tensors(spec, arrays, ta.float64, device, grad=False)))
    want = _outputs(spec.ref(*[a.copy() for a in arrays]))
    assert len(got) == len(want), f"{spec.id}: {len(got)} outputs, reference has {len(want)}"
    for g, w in zip(got, want):
        assert g.shape == np.shape(w), f"{spec.id}: shape {g.shape} vs reference {np.shape(w)}"
        np.testing.assert_allclose(_host(g), w, rtol=1e-7, atol=1e-9, err_msg=spec.id)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
@pytest.mark.parametrize("dtype", [ta.float16, ta.float32, ta.float64], ids=["f16", "f32", "f64"])
def test_output_dtype(spec: OpSpec, dtype: object, device: str) -> None:
    arrays = make_inputs(spec, dtype, np.random.default_rng(spec.seed))
    outs = _outputs(spec.fn(*_tensors(spec, arrays, dtype, device, grad=True)))
    expected = dtype if spec.out_dtype is None else spec.out_dtype(dtype)
    for out in outs:
        assert out.dtype == expected, f"{spec.id}: {dtype} inputs gave {out.dtype}, expected {expected}"


@pytest.mark.parametrize("spec", [s for s in SPECS if s.differentiable], ids=[s.id for s in SPECS if s.differentiable])
def test_gradcheck(spec: OpSpec, device: str) -> None:
    arrays = make_inputs(spec, ta.float64, np.random.default_rng(spec.seed))
    tensors = _tensors(spec, arrays, ta.float64, device, grad=True)
    assert ta.autograd.gradcheck(spec.fn, tensors)


@pytest.mark.parametrize("spec", [s for s in SPECS if s.differentiable and s.gradgrad],
                         ids=[s.id for s in SPECS if s.differentiable and s.gradgrad])
def test_gradgradcheck(spec: OpSpec, device: str) -> None:
    arrays = make_inputs(spec, ta.float64, np.random.default_rng(spec.seed))
    tensors = _tensors(spec, arrays, ta.float64, device, grad=True)
    assert ta.autograd.gradgradcheck(spec.fn, tensors)


def _forward_and_grads(spec: OpSpec, arrays: list, dtype: object, device: str) -> tuple[list, list]:
    tensors = _tensors(spec, arrays, dtype, device, grad=True)
    outs = _outputs(spec.fn(*tensors))
    leaves = [t for t in tensors if t.requires_grad]
    grads: list = []
    diff = [o for o in outs if o.requires_grad]
    if leaves and diff:
        rng = np.random.default_rng(spec.seed + 1)
        cotangents = [ta.tensor(rng.standard_normal(o.shape), dtype=o.dtype, device=device) for o in diff]
        grads = list(ta.autograd.grad(diff, leaves, cotangents, allow_unused=True))
    return [_host(o) for o in outs], [None if g is None else _host(g) for g in grads]


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_float32_close_to_float64(spec: OpSpec, device: str) -> None:
    arrays = make_inputs(spec, ta.float64, np.random.default_rng(spec.seed))
    out64, grads64 = _forward_and_grads(spec, arrays, ta.float64, device)
    out32, grads32 = _forward_and_grads(spec, arrays, ta.float32, device)
    rtol, atol = spec.float32_tol
    for a, b in zip(out32, out64):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"{spec.id} forward")
    for a, b in zip(grads32, grads64):
        if a is not None or b is not None:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"{spec.id} gradient")


@pytest.mark.parametrize("spec", [s for s in SPECS if s.float16], ids=[s.id for s in SPECS if s.float16])
def test_float16_forward_close(spec: OpSpec, device: str) -> None:
    arrays = make_inputs(spec, ta.float64, np.random.default_rng(spec.seed))
    out64, _ = _forward_and_grads(spec, arrays, ta.float64, device)
    tensors = _tensors(spec, arrays, ta.float16, device, grad=False)
    out16 = [_host(o) for o in _outputs(spec.fn(*tensors))]
    rtol, atol = spec.float16_tol
    for a, b in zip(out16, out64):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"{spec.id} float16 forward")
