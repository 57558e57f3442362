"""Mixed dtypes outside (and inside) autocast follow PyTorch's type promotion (issue 12, item 3).

What PyTorch 2.13 does, checked op by op on the CPU and written out here by hand:

- ``mse_loss``/``l1_loss`` promote input and target: (float16, float32) and
  (float32, float16) are float32, (float16, bfloat16) is float32, (float32,
  float64) is float64, for every reduction;
- ``binary_cross_entropy_with_logits`` promotes logits and target; its
  ``weight``/``pos_weight`` may have any floating dtype and do not change the
  result's dtype;
- ``binary_cross_entropy`` refuses input and target of different dtypes ("Found
  dtype Float but expected Half") but takes a weight of any floating dtype;
- ``cross_entropy``/``nll_loss`` refuse a class weight of another dtype than the
  input ("expected scalar type Half but found Float");
- elementwise float16 with bfloat16 is float32, inside autocast too;
- an in-place op computes in the promoted dtype and rounds into its tensor
  (``h.add_(f)`` stays float16); a float result never goes into an integer
  tensor ("result type Float can't be cast to the desired output type Long");
- ``x[i] = v`` stores ``v`` in ``x``'s dtype.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
import tinyamp.nn.functional as F

f16, bf16, f32, f64 = ta.float16, ta.bfloat16, ta.float32, ta.float64


def _t(values: np.ndarray, dtype: object, grad: bool = False, device: str = "cpu") -> ta.Tensor:
    return ta.tensor(values, dtype=dtype, device=device, requires_grad=grad)


def _rounded(values: np.ndarray, dtype: object) -> np.ndarray:
    """``values`` as stored in ``dtype``, read back in float64 (the reference's inputs)."""
    return _t(values, dtype).double().numpy()


PAIRS = [(f16, f32, f32), (f32, f16, f32), (f16, bf16, f32), (bf16, f32, f32), (f32, f64, f64)]
REFERENCE = {"mse_loss": lambda d: d * d, "l1_loss": np.abs}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("a,b,result", PAIRS, ids=[f"{a}-{b}" for a, b, _ in PAIRS])
@pytest.mark.parametrize("loss", ["mse_loss", "l1_loss"])
def test_regression_losses_promote_outside_autocast(loss: str, a: object, b: object, result: object,
                                                    reduction: str, device: str) -> None:
    rng = np.random.default_rng(0)
    x_np, t_np = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    x, t = _t(x_np, a, True, device), _t(t_np, b, True, device)
    out = getattr(F, loss)(x, t, reduction=reduction)
    assert out.dtype == result
    # The promoted inputs are exact in the result dtype, and the loss is computed
    # there (float32 and float64 both carry the 1e-6 the sum of 12 terms needs).
    per_element = REFERENCE[loss](_rounded(x_np, a) - _rounded(t_np, b))
    expected = {"mean": per_element.mean(), "sum": per_element.sum(), "none": per_element}[reduction]
    np.testing.assert_allclose(out.detach().double().numpy(), expected, rtol=1e-6)
    out.sum().backward()
    assert x.grad.dtype == a and t.grad.dtype == b  # each gradient in its own tensor's dtype
    np.testing.assert_allclose(x.grad.double().numpy(), -t.grad.double().numpy(), rtol=1e-2)


def test_regression_loss_under_autocast_is_float32_then_promoted() -> None:
    # Autocast's FP32 tag lifts the float16 input; float32 with float64 then promotes (PyTorch: float64).
    x, t = _t(np.ones(3), f16), _t(np.zeros(3), f64)
    with ta.autocast("cpu", dtype=ta.float16):
        assert F.mse_loss(x, t).dtype == f64
        assert F.mse_loss(x, t.float()).dtype == f32


@pytest.mark.parametrize("a,b,result", [(f16, f32, f32), (f32, f64, f64), (bf16, f16, f32)])
def test_bce_with_logits_promotes_logits_and_target(a: object, b: object, result: object) -> None:
    logits, target = np.array([-2.0, 0.5, 3.0]), np.array([0.0, 1.0, 0.25])
    x, t = _t(logits, a, True), _t(target, b)
    out = F.binary_cross_entropy_with_logits(x, t)
    assert out.dtype == result
    xr, tr = _rounded(logits, a), _rounded(target, b)
    expected = np.mean((1 - tr) * xr + np.log1p(np.exp(-xr)))
    np.testing.assert_allclose(float(out), expected, rtol=1e-6)
    out.backward()
    assert x.grad.dtype == a


@pytest.mark.parametrize("weight_dtype", [f16, f64])
def test_binary_losses_take_weights_of_any_float_dtype(weight_dtype: object) -> None:
    p, t, w = np.array([0.2, 0.7, 0.9]), np.array([0.0, 1.0, 1.0]), np.array([0.5, 2.0, 1.0])
    bce = F.binary_cross_entropy(_t(p, f32), _t(t, f32), weight=_t(w, weight_dtype))
    assert bce.dtype == f32  # the weight does not change the result's dtype (PyTorch multiplies it in place)
    expected = np.mean(-w * (t * np.log(p) + (1 - t) * np.log(1 - p)))
    np.testing.assert_allclose(float(bce), expected, rtol=1e-6)
    logits = F.binary_cross_entropy_with_logits(_t(p, f16), _t(t, f16), pos_weight=_t(w, weight_dtype))
    assert logits.dtype == f16


def test_binary_cross_entropy_refuses_mixed_input_and_target_as_pytorch_does() -> None:
    with pytest.raises(TypeError, match=r"binary_cross_entropy: input and target must share one floating "
                                        r"dtype \(PyTorch refuses a mix too\), got \[3\] \(float16\) and "
                                        r"\[3\] \(float32\)"):
        F.binary_cross_entropy(_t(np.full(3, 0.5), f16), _t(np.ones(3), f32))


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_class_weights_must_have_the_input_dtype_as_in_pytorch(loss: str) -> None:
    x, target = _t(np.zeros((2, 3)), f16), ta.tensor([0, 2])
    with pytest.raises(ValueError, match=rf"{loss}: weight must have shape \[3\] and the input's dtype "
                                         rf"float16, got \[3\] \(float32\)"):
        getattr(F, loss)(x, target, weight=_t(np.ones(3), f32))
    with ta.autocast("cpu", dtype=ta.float16):  # autocast lifts both to float32: allowed, as in PyTorch
        assert getattr(F, loss)(x, target, weight=_t(np.ones(3), f32)).dtype == f32


@pytest.mark.parametrize("region", [None, f16, bf16])
def test_float16_with_bfloat16_is_float32(region: object) -> None:
    a, b = _t(np.array([1.0, 2.0 ** -9]), f16, True), _t(np.array([3.0, 1.0]), bf16, True)
    if region is None:
        y = a * b + a
    else:
        with ta.autocast("cpu", dtype=region):
            y = a * b + a
    assert y.dtype == f32
    assert y.tolist() == [4.0, 2.0 ** -8]  # exact in float32: 2**-9 * 1 + 2**-9
    y.sum().backward()
    assert a.grad.dtype == f16 and b.grad.dtype == bf16
    assert a.grad.tolist() == [4.0, 2.0] and b.grad.tolist() == [1.0, 2.0 ** -9]


def test_inplace_op_computes_promoted_and_rounds_into_its_tensor() -> None:
    h = _t(np.array([1.0, 2048.0]), f16)
    h.add_(_t(np.array([2.0 ** -11 + 2.0 ** -20, 1.0]), f32))
    # float32 sum, rounded once: 1 + 2**-11 + 2**-20 rounds up to 1 + 2**-10; 2049 to 2048 (ties to even).
    assert h.dtype == f16 and h.tolist() == [1 + 2.0 ** -10, 2048.0]
    h *= _t(np.array([0.5, 0.5]), f64)
    assert h.dtype == f16 and h.tolist() == [0.5 + 2.0 ** -11, 1024.0]
    ints = ta.tensor([1, 2])
    with pytest.raises(RuntimeError, match=r"mul_: result type float32 can't be cast to the desired output "
                                           r"type int64"):
        ints.mul_(0.5)
    with pytest.raises(RuntimeError, match=r"add_: result type int64 can't be cast to the desired output "
                                           r"type bool"):
        ta.tensor([True, False]).add_(ta.tensor([1, 1]))
    assert ints.mul_(ta.tensor([3, 3], dtype=ta.int32)).dtype == ta.int64


def test_recorded_inplace_op_with_a_wider_operand() -> None:
    w = _t(np.array([1.0, 3.0]), f32, True)
    h = _t(np.array([2.0, 0.5]), f16, True).clone()
    h.mul_(w)
    assert h.dtype == f16
    h.sum().backward()
    assert w.grad.dtype == f32 and w.grad.tolist() == [2.0, 0.5]


def test_index_assignment_stores_in_the_tensor_dtype() -> None:
    h = ta.zeros(3, dtype=f16)
    h[1:] = _t(np.array([1 / 3, 70000.0]), f64)
    assert h.dtype == f16
    assert h.tolist() == [0.0, float(np.float16(1 / 3)), float("inf")]  # PyTorch rounds the same way
    ints = ta.zeros(2, dtype=ta.int64)
    ints[0] = ta.tensor(2.7)
    assert ints.tolist() == [2, 0]  # truncated, as PyTorch's copy
