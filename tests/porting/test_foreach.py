"""``ta._foreach_*`` against ``torch._foreach_*`` (values from torch 2.13.0 on the CPU, stored in
``tests/support/foreach_torch_2_13_0.json``: the same inputs, each op once, results as float).

The inputs hold a float32, a float16 and a bfloat16 tensor, so the 16-bit results
(computed in float32 and rounded once, as PyTorch's foreach kernels do) are compared
bit for bit and float32 ones to float32 rounding.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tinyamp as ta
from tests.support import SUPPORT

REF = json.loads((SUPPORT / "foreach_torch_2_13_0.json").read_text())


def inputs(device: str = "cpu") -> list:
    return [ta.linspace(-1, 1, 5, device=device), ta.tensor([[0.3, -0.7], [1.5, 2.0]], dtype=ta.float16, device=device),
            ta.tensor([0.1, 0.2, 0.7], dtype=ta.bfloat16, device=device)]


def others(device: str = "cpu") -> list:
    return [ta.linspace(0.5, 2, 5, device=device),
            ta.tensor([[1.1, 0.9], [-0.25, 3.0]], dtype=ta.float16, device=device),
            ta.tensor([0.3, -1.5, 2.5], dtype=ta.bfloat16, device=device)]


# PyTorch's CPU kernels round a Python scalar, and ``alpha * y``, to a 16-bit tensor's dtype before the
# arithmetic; its CUDA foreach kernels (and tinyamp, on every device) keep them in float32 and round the
# result once. The CPU's first rounding errs by half an ulp of the rounded term (at most the operands'
# magnitude), the second by half an ulp of the result: these cases allow two ulps of the largest of them.
CPU_SCALAR_ROUNDING = {"mul_scalar", "add_list_alpha"}


def check(name: str, tensors: list, dtypes: "list | None" = None) -> None:
    expected = REF[name]
    assert len(tensors) == len(expected)
    magnitudes = [np.maximum(np.abs(a.float().numpy()), np.abs(b.float().numpy())) for a, b in zip(inputs(), others())]
    for t, want, dtype, size in zip(tensors, expected, dtypes or [ta.float32, ta.float16, ta.bfloat16], magnitudes):
        assert t.dtype == dtype, name
        got = t.float().cpu().numpy()
        want = np.asarray(want, np.float32)
        if dtype == ta.float32:
            np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-7, err_msg=name)
        elif name in CPU_SCALAR_ROUNDING:
            ulp = np.abs(np.spacing(np.maximum(np.abs(want), size).astype(dtype))).astype(np.float32)
            assert np.all(np.abs(got - want) <= 2 * ulp), (name, got, want)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


def test_a_16_bit_result_is_rounded_once_from_float32() -> None:
    """What PyTorch's CUDA foreach kernels compute (opmath float32, one rounding), for the cases above."""
    x = inputs()
    ta._foreach_mul_(x, 0.9)
    np.testing.assert_array_equal(x[1].numpy(), (inputs()[1].numpy().astype(np.float32) * np.float32(0.9))
                                  .astype(np.float16))
    x = inputs()
    ta._foreach_add_(x, others(), alpha=0.1)
    a, b = (t[2].float().numpy() for t in (inputs(), others()))
    np.testing.assert_array_equal(x[2].float().numpy(),
                                  (a + b * np.float32(0.1)).astype(ta.bfloat16).astype(np.float32))


IN_PLACE = {
    "mul_scalar": lambda d: ta._foreach_mul_(x := inputs(d), 0.9) or x,
    "mul_scalarlist": lambda d: ta._foreach_mul_(x := inputs(d), [0.5, 3.0, -1.0]) or x,
    "mul_list": lambda d: ta._foreach_mul_(x := inputs(d), others(d)) or x,
    "mul_tensor": lambda d: ta._foreach_mul_(x := inputs(d), ta.tensor(0.7, device=d)) or x,
    "add_list_alpha": lambda d: ta._foreach_add_(x := inputs(d), others(d), alpha=0.1) or x,
    "add_scalar": lambda d: ta._foreach_add_(x := inputs(d), 0.3) or x,
    "div_list": lambda d: ta._foreach_div_(x := inputs(d), others(d)) or x,
    "div_scalar": lambda d: ta._foreach_div_(x := inputs(d), 3.0) or x,
    "lerp_scalar": lambda d: ta._foreach_lerp_(x := inputs(d), others(d), 0.3) or x,
    "lerp_scalar_hi": lambda d: ta._foreach_lerp_(x := inputs(d), others(d), 0.8) or x,
    "addcmul_value": lambda d: ta._foreach_addcmul_(x := inputs(d), others(d), others(d), value=0.5) or x,
    "addcmul": lambda d: ta._foreach_addcmul_(x := inputs(d), others(d), inputs(d)) or x,
    "sqrt_": lambda d: ta._foreach_sqrt_(x := [t.abs() for t in inputs(d)]) or x,
}


@pytest.mark.parametrize("name", sorted(IN_PLACE))
def test_in_place_forms_match_pytorch(device: str, name: str) -> None:
    tensors = IN_PLACE[name](device)
    check(name, tensors)


def test_in_place_forms_write_into_the_tensors_and_return_none() -> None:
    x = inputs()
    view, versions = x[0][1:], [t._version[0] for t in x]
    assert ta._foreach_mul_(x, 2.0) is None
    assert [t._version[0] for t in x] == [v + 1 for v in versions]
    np.testing.assert_allclose(view.numpy(), np.linspace(-1, 1, 5)[1:] * 2, rtol=1e-6)  # a view sees it


def test_out_of_place_forms_match_pytorch() -> None:
    check("add", ta._foreach_add(inputs(), others(), alpha=2))
    check("mul", ta._foreach_mul(inputs(), 1.5))
    check("div", ta._foreach_div(inputs(), others()))
    check("sqrt", ta._foreach_sqrt([t.abs() for t in inputs()]))
    mixed = ta._foreach_add(inputs(), [ta.ones(5, dtype=ta.float16), ta.ones(2, 2), ta.ones(3)])
    assert [ta.dtypes.dtype_name(t.dtype) for t in mixed] == [d.replace("torch.", "") for d in REF["dtypes_add_mixed"]]


def test_norm_matches_pytorch() -> None:
    for key, ord in (("norm", 2), ("norm1", 1), ("norm3", 3)):
        norms = ta._foreach_norm(inputs(), ord=ord)
        assert all(n.ndim == 0 for n in norms)
        assert [ta.dtypes.dtype_name(n.dtype) for n in norms] == [d.replace("torch.", "") for d in REF["dtypes_norm"]]
        for n, want in zip(norms, REF[key]):
            np.testing.assert_allclose(n.float().numpy(), want, rtol=4e-3)  # 16-bit results: one rounding


def test_zero_and_copy() -> None:
    x = inputs()
    ta._foreach_copy_(x, others())
    for a, b in zip(x, others()):
        np.testing.assert_array_equal(a.float().numpy(), b.float().numpy())
    # fairseq's FP16Optimizer: float32 masters from float16 weights, a dtype-changing copy
    masters = [ta.zeros(2, 2)]
    ta._foreach_copy_(masters, [x[1]])
    assert masters[0].dtype == ta.float32
    np.testing.assert_array_equal(masters[0].numpy(), x[1].float().numpy())
    ta._foreach_zero_(x)
    assert all(not t.float().numpy().any() for t in x)


def test_timm_model_ema_v3_update_runs_unchanged() -> None:
    """timm's ModelEmaV3 ``apply_update_``: ``_foreach_lerp_`` (or ``mul_`` + ``add_``) over parameters."""
    model = ta.nn.Linear(4, 3)
    ema = ta.nn.Linear(4, 3)
    decay = 0.9
    ema_params = list(ema.parameters())
    model_params = list(model.parameters())
    expected = [e.detach().clone().numpy() * decay + m.detach().numpy() * (1 - decay)
                for e, m in zip(ema_params, model_params)]
    with ta.no_grad():
        ta._foreach_lerp_(ema_params, model_params, weight=1.0 - decay)
    for e, want in zip(ema_params, expected):
        np.testing.assert_allclose(e.detach().numpy(), want, rtol=1e-6, atol=1e-7)
    with ta.no_grad():
        ta._foreach_mul_(ema_params, decay)
        ta._foreach_add_(ema_params, model_params, alpha=1.0 - decay)


def test_errors_are_pytorchs() -> None:
    a = [ta.ones(2), ta.ones(3)]
    with pytest.raises(RuntimeError, match="Tensor lists must have the same number of tensors, got 2 and 1"):
        ta._foreach_add(a, [ta.ones(2)])
    with pytest.raises(RuntimeError, match="Tensor list must have at least one tensor."):
        ta._foreach_add_([], 1)
    with pytest.raises(RuntimeError, match="Tensor list must have same number of elements as scalar list."):
        ta._foreach_mul_(a, [1.0])
    with pytest.raises(RuntimeError, match="scalar tensor expected to be 0 dim but it has 1 dimensions and 2 elements."):
        ta._foreach_mul_(a, ta.ones(2))
    with pytest.raises(RuntimeError, match="_foreach_add_: result type float32 can't be cast to the desired output type int64"):
        ta._foreach_add_([ta.ones(2, dtype=ta.int64)], [ta.ones(2) * 0.5])
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        ta._foreach_mul_([ta.ones(2, requires_grad=True)], 2.0)


def test_a_recorded_write_goes_through_the_tape() -> None:
    w = ta.ones(3, requires_grad=True)
    y = [w * 2]
    ta._foreach_mul_(y, 3.0)
    ta._foreach_add_(y, [w], alpha=0.5)
    y[0].sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [6.5, 6.5, 6.5])  # d(6w + 0.5w)/dw
