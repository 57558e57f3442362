"""Errors, dtype rules, tie-splitting and memory behaviour of the elementwise,
select, activation and reduction ops (the op table checks values and gradients;
this file checks what a table row cannot express).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tinyamp as ta


def _leaf(values: object, dtype: object = ta.float64, device: str = "cpu") -> ta.Tensor:
    return ta.tensor(values, dtype=dtype, device=device, requires_grad=True)


def _grad_of(fn: object, x: ta.Tensor) -> np.ndarray:
    (g,) = ta.autograd.grad(fn(x).sum(), [x])
    return g.numpy()


# --------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("op", [ta.maximum, ta.minimum, ta.pow, ta.add, ta.mul])
def test_non_broadcastable_shapes_name_op_and_shapes(op: object, device: str) -> None:
    a = ta.ones(3, 4, device=device)
    b = ta.ones(5, device=device)
    name = getattr(op, "__name__")
    with pytest.raises(ValueError, match=rf"{name}: .*\[3, 4\] and \[5\].*float32"):
        op(a, b)


def test_where_non_broadcastable_names_all_three_shapes(device: str) -> None:
    cond = ta.ones(3, 4, device=device) > 0
    with pytest.raises(ValueError, match=r"where: .*\[3, 4\] and \[2\] and \[4\]"):
        ta.where(cond, ta.ones(2, device=device), ta.ones(4, device=device))


def test_where_rejects_a_non_bool_condition(device: str) -> None:
    x = ta.ones(3, device=device)
    with pytest.raises(TypeError, match=r"where: expected condition to be a boolean tensor.*float32.*\[3\]"):
        ta.where(x, x, x)
    with pytest.raises(TypeError, match=r"where: expected condition to be a boolean tensor.*int64"):
        ta.where(ta.tensor([1, 0, 1], device=device), x, x)
    with pytest.raises(TypeError, match="where: condition must be a bool Tensor or array, got list"):
        ta.where([True, False, True], x, x)


def test_where_accepts_an_array_condition_and_never_casts_it() -> None:
    mask = np.array([True, False, True])
    x = _leaf([1.0, 2.0, 3.0], ta.float16)
    with ta.amp.autocast():
        y = ta.where(mask, x, _leaf([10.0, 20.0, 30.0], ta.float32))
    assert y.dtype == ta.float32  # PROMOTE on a and b only
    assert len(y.grad_fn.input_shapes) == 2  # the condition is not an input of the node
    np.testing.assert_array_equal(y.detach().numpy(), [1.0, 20.0, 3.0])
    (gx,) = ta.autograd.grad(y.sum(), [x])
    assert gx.dtype == ta.float16
    np.testing.assert_array_equal(gx.numpy(), [1.0, 0.0, 1.0])


def test_clamp_needs_a_bound_and_number_bounds() -> None:
    x = ta.ones(2, 3)
    with pytest.raises(ValueError, match=r"clamp: at least one of 'min' or 'max'.*\[2, 3\]"):
        ta.clamp(x)
    with pytest.raises(TypeError, match="clamp: tensor bounds are not supported"):
        ta.clamp(x, min=ta.zeros(3))


def test_pow_integer_to_negative_integer_power_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"pow: integers to negative integer powers.*int64.*\[3\] \*\* -1"):
        ta.tensor([1, 2, 3]) ** -1


@pytest.mark.parametrize("call, error, message", [
    (lambda x: ta.max(x, (0, 1)), TypeError, r"max: dim must be an int"),
    (lambda x: ta.max(x, 2), IndexError, r"max: dimension 2 out of range for a tensor with 2"),
    (lambda x: ta.amax(x, -3), IndexError, r"amax: dimension -3 out of range"),
    (lambda x: ta.argmax(x, 5), IndexError, r"argmax: dimension 5 out of range"),
    (lambda x: ta.var(x.long()), TypeError, r"var: std and var only support floating point.*int64"),
    (lambda x: ta.std(x, 0, unbiased=True, correction=0), ValueError, r"std: pass either unbiased or correction"),
    (lambda x: ta.gelu(x, approximate="fast"), ValueError, r"gelu: approximate must be 'none' or 'tanh'"),
])
def test_reduction_and_activation_argument_errors(call: object, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        call(ta.ones(2, 3))


@pytest.mark.parametrize("op", [ta.max, ta.amin, ta.argmax])
def test_reducing_an_empty_tensor_is_an_error(op: object) -> None:
    with pytest.raises(IndexError, match=r"cannot reduce an empty tensor \(shape \[0, 3\]"):
        op(ta.ones(0, 3))


def test_max_along_a_dim_of_an_empty_tensor_with_nonempty_dim_works() -> None:
    out = ta.amax(ta.ones(0, 3), 1)  # reduces the size-3 dim of zero rows: nothing to reduce
    assert out.shape == (0,)


# ----------------------------------------------- var/std degrees of freedom
def test_var_with_no_degrees_of_freedom_warns_and_gives_nan_or_inf() -> None:
    """Decision: follow PyTorch (inf/nan and a warning), not an error, so that a
    batch statistic of one sample does not stop a training run."""
    with pytest.warns(RuntimeWarning, match=r"var\(\): degrees of freedom is <= 0"):
        single = ta.var(ta.tensor([2.0]))
    assert math.isnan(single.item())  # 0 / 0
    with pytest.warns(RuntimeWarning, match=r"std\(\): degrees of freedom is <= 0.*correction 5 for 3"):
        spread = ta.std(ta.tensor([1.0, 2.0, 4.0]), correction=5)
    assert math.isinf(spread.item())  # positive / 0 (dof clamped at 0, as PyTorch)


def test_var_with_enough_degrees_of_freedom_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ta.var(ta.tensor([1.0, 3.0])).item() == 2.0


def test_std_gradient_is_zero_not_nan_for_a_constant_input() -> None:
    x = _leaf([3.0, 3.0, 3.0, 3.0])
    np.testing.assert_array_equal(_grad_of(ta.std, x), [0.0, 0.0, 0.0, 0.0])


def test_var_accepts_pytorch_spellings() -> None:
    x = ta.tensor([[1.0, 2.0, 6.0], [0.0, 0.0, 3.0]])
    values = x.numpy()
    np.testing.assert_allclose(ta.var(x, False).numpy(), values.var())  # var(x, unbiased)
    np.testing.assert_allclose(ta.var(x, 1, True).numpy(), values.var(1, ddof=1))  # var(x, dim, unbiased)
    np.testing.assert_allclose(x.std(1, keepdim=True, correction=0).numpy(), values.std(1, keepdims=True))


# ------------------------------------------------------- tie-split gradients
def test_maximum_and_minimum_split_ties_half_each() -> None:
    a = _leaf([1.0, 2.0, 3.0])
    b = _leaf([1.0, 5.0, 0.0])
    for op, ga, gb in ((ta.maximum, [0.5, 0.0, 1.0], [0.5, 1.0, 0.0]),
                       (ta.minimum, [0.5, 1.0, 0.0], [0.5, 0.0, 1.0])):
        da, db = ta.autograd.grad(op(a, b).sum(), [a, b])
        np.testing.assert_array_equal(da.numpy(), ga, err_msg=op.__name__)
        np.testing.assert_array_equal(db.numpy(), gb, err_msg=op.__name__)


def test_maximum_tie_split_with_broadcasting_sums_back() -> None:
    a = _leaf([[1.0, 4.0], [2.0, 0.0]])
    b = _leaf([2.0])  # ties with a[1, 0] only
    da, db = ta.autograd.grad(ta.maximum(a, b).sum(), [a, b])
    np.testing.assert_array_equal(da.numpy(), [[0.0, 1.0], [0.5, 0.0]])
    np.testing.assert_array_equal(db.numpy(), [2.5])  # 1 (a=1) + 0.5 (tie) + 1 (a=0)


def test_amax_and_max_without_dim_split_ties_evenly() -> None:
    x = _leaf([[1.0, 3.0], [3.0, 3.0]])
    np.testing.assert_allclose(_grad_of(ta.amax, x), [[0.0, 1 / 3], [1 / 3, 1 / 3]])
    np.testing.assert_allclose(_grad_of(ta.max, x), [[0.0, 1 / 3], [1 / 3, 1 / 3]])
    np.testing.assert_allclose(_grad_of(lambda t: ta.amax(t, 1), x), [[0.0, 1.0], [0.5, 0.5]])
    np.testing.assert_allclose(_grad_of(lambda t: ta.amin(t, 0, keepdim=True), x), [[1.0, 0.5], [0.0, 0.5]])


def test_max_along_dim_sends_the_gradient_to_the_first_maximum_only() -> None:
    x = _leaf([[3.0, 1.0, 3.0], [0.0, 2.0, 2.0]])
    values, indices = ta.max(x, 1)
    np.testing.assert_array_equal(indices.numpy(), [0, 1])  # first occurrence, as PyTorch documents
    (g,) = ta.autograd.grad(values.sum(), [x])
    np.testing.assert_array_equal(g.numpy(), [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])


def test_writing_into_returned_indices_does_not_move_the_gradient() -> None:
    x = _leaf([[1.0, 5.0, 2.0]])
    result = x.max(dim=1)
    result.indices.array[...] = 0
    (g,) = ta.autograd.grad(result.values.sum(), [x])
    np.testing.assert_array_equal(g.numpy(), [[0.0, 1.0, 0.0]])


def test_clamp_gradient_passes_at_the_bounds() -> None:
    x = _leaf([-1.0, -0.5, 0.0, 0.5, 1.0])
    np.testing.assert_array_equal(_grad_of(lambda t: t.clamp(-0.5, 0.5), x), [0.0, 1.0, 1.0, 1.0, 0.0])


def test_kinks_follow_pytorch_at_zero() -> None:
    x = _leaf([-1.0, 0.0, 2.0])
    np.testing.assert_array_equal(_grad_of(ta.relu, x), [0.0, 0.0, 1.0])
    np.testing.assert_array_equal(_grad_of(ta.abs, x), [-1.0, 0.0, 1.0])
    np.testing.assert_array_equal(_grad_of(ta.sign, x), [0.0, 0.0, 0.0])


def test_pow_gradients_at_zero_are_finite_where_pytorch_defines_them() -> None:
    x = _leaf([0.0, 2.0])
    np.testing.assert_array_equal(_grad_of(lambda t: t ** 0, x), [0.0, 0.0])
    b = _leaf([2.0, 3.0])
    _, db = ta.autograd.grad((ta.tensor([0.0, 2.0], dtype=ta.float64) ** b).sum(), [x, b], allow_unused=True)
    np.testing.assert_allclose(db.numpy(), [0.0, 8.0 * math.log(2.0)])  # 0 ** b is flat in b for b >= 0


def test_pow_tensor_exponent_zero_gives_zero_base_gradient_at_zero() -> None:
    # x ** 0 is constant: PyTorch's da is 0 there, not 0 * 0 ** -1 = nan; also under double backward.
    a = _leaf([0.0, 0.0, 2.0])
    e = ta.tensor([0.0, 2.0, 0.0], dtype=ta.float64)
    (da,) = ta.autograd.grad((a ** e).sum(), [a], create_graph=True)
    np.testing.assert_array_equal(da.detach().numpy(), [0.0, 0.0, 0.0])  # 0, 2 * 0 ** 1, 0
    (dda,) = ta.autograd.grad(da.sum(), [a])
    np.testing.assert_array_equal(dda.numpy(), [0.0, 2.0, 0.0])  # d(2 a)/da = 2 where e = 2


def test_pow_of_integer_tensors_to_negative_powers_names_the_real_problem() -> None:
    # Not a broadcasting failure: the shapes fit, NumPy refuses the values.
    with pytest.raises(ValueError, match=r"pow: Integers to negative integer powers.*\[2\] and \[2\].*int64"):
        ta.tensor([1, 2]) ** ta.tensor([-1, 2])


@pytest.mark.parametrize("op, ref", [
    (lambda t: t / ta.tensor([2, 4, 8]), lambda a: a / np.array([2.0, 4.0, 8.0])),
    (lambda t: t / 4, lambda a: a / 4.0),
    (ta.exp, np.exp),
    (ta.log, np.log),
    (ta.tanh, np.tanh),
    (lambda t: ta.logsumexp(t, 0), lambda a: np.log(np.exp(a).sum())),
])
def test_integer_inputs_of_float_math_give_float32(op: object, ref: object) -> None:
    """PyTorch's result type for integer inputs of float-valued ops is float32 (NumPy's: float64)."""
    values = np.array([1, 2, 3])
    out = op(ta.tensor(values))
    assert out.dtype == ta.float32
    np.testing.assert_allclose(out.numpy(), ref(values.astype(np.float64)), rtol=1e-6)


@pytest.mark.parametrize("call", [lambda x: x.sum((0, 0)), lambda x: x.mean((1, -1)),
                                  lambda x: ta.amax(x, (0, -2)), lambda x: x.var((1, 1)),
                                  lambda x: ta.logsumexp(x, (0, 0))])
def test_a_dim_listed_twice_is_an_error(call: object) -> None:
    # PyTorch refuses too; reducing once would hide the mistake.
    with pytest.raises(ValueError, match=r"dim \d appears multiple times in the list of dims"):
        call(ta.ones(2, 3))


def test_activations_refuse_inputs_they_would_mangle() -> None:
    with pytest.raises(TypeError, match=r"relu: boolean inputs are not supported"):
        ta.relu(ta.tensor([True, False]))  # NumPy would return int64
    with pytest.raises(TypeError, match=r"leaky_relu: expected a floating input, got int64"):
        ta.leaky_relu(ta.tensor([-3, 2]))  # the slope would be truncated to 0


def test_vector_norm_ord_0_has_a_zero_gradient_like_pytorch() -> None:
    x = _leaf([0.0, -2.0, 3.0])
    y = ta.linalg.vector_norm(x, 0)  # counts non-zeros; backward() used to fail (no grad_fn)
    assert y.item() == 2.0
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])


def test_sign_keeps_nan_and_bool() -> None:
    # Decision: sign(nan) is nan (NumPy), not PyTorch's 0, so a NaN is never hidden.
    out = ta.sign(ta.tensor([-2.0, 0.0, math.nan, 3.0]))
    np.testing.assert_array_equal(out.numpy(), [-1.0, 0.0, math.nan, 1.0])
    flags = ta.sign(ta.tensor([True, False]))
    assert flags.dtype == ta.bool
    np.testing.assert_array_equal(flags.numpy(), [True, False])


# --------------------------------------------------------- the scalar dtype rule
@pytest.mark.parametrize("make, expected", [
    (lambda: ta.ones(3, dtype=ta.float16) * 2.0, ta.float16),
    (lambda: ta.ones(3, dtype=ta.float32) + 1, ta.float32),
    (lambda: ta.ones(3, dtype=ta.int64) * 0.5, ta.float32),
    (lambda: ta.ones(3, dtype=ta.float16) ** 2.0, ta.float16),
    (lambda: ta.ones(3, dtype=ta.bfloat16) ** 0.5, ta.bfloat16),
    (lambda: 2.0 ** ta.ones(3, dtype=ta.float16), ta.float16),
    (lambda: ta.ones(3, dtype=ta.int64) ** 0.5, ta.float32),
    (lambda: ta.ones(3, dtype=ta.int64) ** 2, ta.int64),
    (lambda: 2.0 ** ta.ones(3, dtype=ta.int64), ta.float32),
    (lambda: ta.ones(3, dtype=ta.int64) ** ta.ones(3, dtype=ta.float32), ta.float32),
    (lambda: ta.maximum(ta.ones(3, dtype=ta.float16), 0.5), ta.float16),
    (lambda: ta.where(ta.ones(3) > 0, ta.ones(3, dtype=ta.float16), 0.0), ta.float16),
    (lambda: ta.ones(3, dtype=ta.bfloat16).clamp(0.1, 0.9), ta.bfloat16),
    (lambda: ta.ones(3, dtype=ta.int64).clamp(min=0.5), ta.float32),
    (lambda: ta.leaky_relu(ta.ones(3, dtype=ta.bfloat16), 0.2), ta.bfloat16),
    (lambda: ta.sqrt(ta.ones(3, dtype=ta.int64)), ta.float32),
    (lambda: ta.sigmoid(ta.ones(3, dtype=ta.bfloat16)), ta.bfloat16),
])
def test_scalar_operands_follow_the_tensor_dtype(make: object, expected: object) -> None:
    assert make().dtype == expected


# --------------------------------------------------------- precision tags at work
def test_autocast_tags_of_the_new_ops() -> None:
    x = ta.ones(4, dtype=ta.float16)
    with ta.amp.autocast():
        for op in (ta.sqrt, ta.rsqrt, ta.log1p, ta.reciprocal, ta.softplus, ta.var, ta.std,
                   lambda t: t ** 2, lambda t: 2.0 ** t):
            assert op(x).dtype == ta.float32, op  # FP32
        for op in (ta.relu, ta.gelu, ta.tanh, ta.sigmoid, ta.abs, ta.amax, ta.erf,
                   lambda t: ta.clamp(t, 0, 1), lambda t: ta.max(t, 0).values):
            assert op(x).dtype == ta.float16, op  # NEUTRAL
        assert ta.maximum(x, ta.ones(4)).dtype == ta.float32  # PROMOTE


# ------------------------------------------------------------ what is saved
def test_relu_keeps_only_its_output() -> None:
    x = _leaf([-1.0, 2.0], ta.float32)
    y = ta.relu(x * 1.0)
    assert len(y.grad_fn._saved_in) == 0
    assert len(y.grad_fn._saved_out) == 1 and y.grad_fn._saved_out[0][0] is y.array


@pytest.mark.parametrize("op", [ta.sigmoid, ta.tanh, lambda t: ta.leaky_relu(t, 0.1)])
def test_bounded_activations_save_the_output_not_the_input(op: object) -> None:
    y = op(_leaf([-1.0, 2.0]))
    assert len(y.grad_fn._saved_in) == 0 and len(y.grad_fn._saved_out) == 1


def test_leaky_relu_with_nonpositive_slope_saves_the_input() -> None:
    x = _leaf([-1.0, 2.0])
    y = ta.leaky_relu(x, -0.5)
    assert len(y.grad_fn._saved_in) == 1 and len(y.grad_fn._saved_out) == 0
    np.testing.assert_array_equal(_grad_of(lambda t: ta.leaky_relu(t, -0.5), x), [-0.5, 1.0])


# ------------------------------------------------------------ erf accuracy
def test_erf_matches_math_erf_to_a_few_ulp() -> None:
    points = np.concatenate([np.linspace(-7.0, 7.0, 14001), [0.0, 1e-300, 2.5, -2.5, 30.0, np.inf, -np.inf]])
    got = ta.erf(ta.tensor(points, dtype=ta.float64)).numpy()
    want = np.array([math.erf(p) for p in points])
    np.testing.assert_allclose(got, want, rtol=4e-15, atol=0)
    assert np.isnan(ta.erf(ta.tensor([np.nan])).item())


def test_erf_of_float16_is_computed_in_float32_and_rounded_once() -> None:
    points = np.linspace(-3, 3, 601).astype(np.float16)
    got = ta.erf(ta.tensor(points)).numpy()
    want = np.array([math.erf(float(p)) for p in points]).astype(np.float16)
    np.testing.assert_array_equal(got, want)  # exactly the rounded true value


@pytest.mark.parametrize("op, ref", [
    (ta.nn.functional.silu, lambda v: v / (1 + np.exp(-v))),
    (ta.nn.functional.elu, np.expm1),  # the points are negative
])
def test_silu_and_elu_of_float16_are_rounded_once(op: object, ref: object) -> None:
    # Composed in float16 they rounded twice (silu 9 ulp) or cancelled (exp(x) - 1: 3072 ulp near 0).
    points = -np.geomspace(1e-4, 20, 400).astype(np.float16)  # silu(-17) is a float16 subnormal
    got = op(ta.tensor(points)).numpy().view(np.int16).astype(np.int64)
    want = ref(points.astype(np.float64)).astype(np.float16).view(np.int16).astype(np.int64)
    # At most 1 ulp (same-sign bit patterns count ulps): the float32 exp may land a
    # float32 ulp across a float16 rounding boundary; two roundings are further off.
    assert np.abs(got - want).max() <= 1


# ------------------------------------------------------------ integer division by zero
@pytest.mark.parametrize("call, op", [
    (lambda a: a // 0, "floor_divide"),
    (lambda a: a % 0, "remainder"),
    (lambda a: a // ta.tensor([1, 0, 2]), "floor_divide"),
    (lambda a: a % ta.tensor([[1], [0]]), "remainder"),
    (lambda a: 7 // ta.zeros(3, dtype=ta.int64), "floor_divide"),
    (lambda a: ta.remainder(a.to(ta.uint8), 0), "remainder"),
    (lambda a: ta.floor_divide(a.to(ta.int32), ta.tensor(0, dtype=ta.int32)), "floor_divide"),
    (lambda a: ta.tensor([True]) // ta.tensor([False]), "floor_divide"),
])
def test_integer_division_by_zero_raises_like_pytorch_cpu(call: object, op: str) -> None:
    # PyTorch's CPU: RuntimeError("ZeroDivisionError"); Python: ZeroDivisionError. It is both.
    a = ta.tensor([5, -3, 4])
    for error in (RuntimeError, ZeroDivisionError):
        with pytest.raises(error, match=rf"^ZeroDivisionError: {op}: integer division by zero"):
            call(a)


def test_integer_division_without_a_zero_and_float_division_by_zero_still_work() -> None:
    a = ta.tensor([5, -3, 4])
    np.testing.assert_array_equal((a // ta.tensor([2, 2, -3])).numpy(), [2, -2, -2])
    np.testing.assert_array_equal((a % ta.tensor([2, 2, -3])).numpy(), [1, 1, -2])
    with np.errstate(all="ignore"):
        x = ta.tensor([5.0, -3.0, 0.0])
        quotient, rest = (x // 0).numpy(), (x % 0).numpy()
    # IEEE 754 (and PyTorch): +-inf, and nan for 0 // 0; every remainder by 0 is nan.
    assert quotient[0] == np.inf and quotient[1] == -np.inf and np.isnan(quotient[2])
    assert np.isnan(rest).all()
