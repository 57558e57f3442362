"""Softmax, losses, normalisation, dropout and embedding beyond the op table.

Error messages (shapes, dtypes, ranges, reduction names), the float16-autocast
refusal of binary_cross_entropy, batch_norm's running-statistics update against
PyTorch's formula computed by hand, dropout's statistics and reproducibility,
embedding's accumulating and padding gradients, and what autocast does to each
op's dtype.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta


def _t(values: object, dtype: object = ta.float64, device: str = "cpu", grad: bool = False) -> ta.Tensor:
    return ta.tensor(np.asarray(values), dtype=dtype, device=device, requires_grad=grad)


def _np(t: ta.Tensor) -> np.ndarray:
    return np.asarray(t.detach().numpy(), dtype=np.float64)


# ------------------------------------------------------------------- errors
def test_cross_entropy_target_shape_error_names_both_shapes(device: str) -> None:
    x = _t(np.zeros((4, 3)), device=device)
    target = ta.tensor(np.zeros((4, 1), dtype=np.int64), device=device)
    with pytest.raises(ValueError, match=r"cross_entropy: target shape \[4, 1\] .* input shape \[4, 3\]"):
        ta.cross_entropy(x, target)


def test_cross_entropy_float_target_is_refused(device: str) -> None:
    x = _t(np.zeros((4, 3)), device=device)
    with pytest.raises(TypeError, match=r"cross_entropy: target must hold int64 class indices.*float32"):
        ta.cross_entropy(x, _t(np.zeros(4), ta.float32, device))


@pytest.mark.parametrize("bad", [3, -1, 7])
def test_cross_entropy_target_out_of_range_names_the_value(bad: int, device: str) -> None:
    x = _t(np.zeros((3, 3)), device=device)
    target = ta.tensor(np.array([0, bad, 1]), device=device)
    if device == "cuda":  # no host check on a GPU (a sync per step): the loss is nan instead
        assert np.isnan(ta.cross_entropy(x, target).item())
        return
    with pytest.raises(IndexError, match=rf"cross_entropy: target value {bad} is out of range for 3 classes"):
        ta.cross_entropy(x, target)


def test_ignore_index_may_lie_outside_the_classes(device: str) -> None:
    x = _t(np.random.default_rng(0).standard_normal((3, 4)), device=device, grad=True)
    target = ta.tensor(np.array([1, -100, 3]), device=device)
    loss = ta.cross_entropy(x, target)  # no error: -100 is the default ignore_index
    loss.backward()
    assert np.all(_np(x.grad)[1] == 0.0)  # an ignored sample gets no gradient


def test_cross_entropy_all_ignored_mean_is_nan_like_pytorch(device: str) -> None:
    x = _t(np.ones((2, 3)), device=device, grad=True)
    loss = ta.cross_entropy(x, ta.tensor(np.array([-100, -100]), device=device), label_smoothing=0.1)
    assert np.isnan(loss.item())
    loss.backward()  # no sample contributes, so no gradient (zeros, not 0 * inf = nan)
    np.testing.assert_array_equal(_np(x.grad), 0.0)


def test_nll_loss_target_out_of_range(device: str) -> None:
    if device == "cuda":  # no host check on a GPU: the loss is nan instead
        assert np.isnan(ta.nll_loss(_t(np.zeros((2, 5)), device=device), ta.tensor(np.array([5, 0]), device=device),
                                    reduction="sum").item())
        return
    with pytest.raises(IndexError, match=r"nll_loss: target value 5 is out of range for 5 classes"):
        ta.nll_loss(_t(np.zeros((2, 5)), device=device), ta.tensor(np.array([5, 0]), device=device))


@pytest.mark.parametrize("loss", [ta.mse_loss, ta.l1_loss])
def test_regression_loss_refuses_to_broadcast(loss: object, device: str) -> None:
    x, t = _t(np.zeros((4, 1)), device=device), _t(np.zeros((4,)), device=device)
    with pytest.raises(ValueError, match=r"_loss: input shape \[4, 1\] and target shape \[4\] differ"):
        loss(x, t)


def test_regression_loss_refuses_integer_operands(device: str) -> None:
    # Mixed float dtypes promote (tests/core/test_mixed_dtypes.py); integers have no loss.
    with pytest.raises(TypeError, match=r"mse_loss: input and target must be floating tensors, got "
                                        r"\[3\] \(int64\) and \[3\] \(int64\)"):
        ta.mse_loss(_t(np.zeros(3), ta.int64, device), _t(np.zeros(3), ta.int64, device))


@pytest.mark.parametrize("call", [
    lambda x, t, p: ta.cross_entropy(x, t, reduction="avg"),
    lambda x, t, p: ta.nll_loss(x, t, reduction="avg"),
    lambda x, t, p: ta.mse_loss(x, x, reduction="avg"),
    lambda x, t, p: ta.l1_loss(x, x, reduction="avg"),
    lambda x, t, p: ta.binary_cross_entropy(p, p, reduction="avg"),
    lambda x, t, p: ta.binary_cross_entropy_with_logits(x, p, reduction="avg"),
], ids=["cross_entropy", "nll_loss", "mse_loss", "l1_loss", "bce", "bce_logits"])
def test_bad_reduction_name(call: object) -> None:
    x, p = _t(np.zeros((2, 3))), _t(np.full((2, 3), 0.5))
    with pytest.raises(ValueError, match=r"'avg' is not a valid value for reduction"):
        call(x, ta.tensor(np.array([0, 1])), p)


def test_class_weight_must_be_constant() -> None:
    weight = _t(np.ones(3), grad=True)
    with pytest.raises(RuntimeError, match=r"cross_entropy: the derivative for 'weight' is not implemented"):
        ta.cross_entropy(_t(np.zeros((2, 3))), ta.tensor(np.array([0, 1])), weight=weight)


def test_label_smoothing_range() -> None:
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\], got 1.5"):
        ta.cross_entropy(_t(np.zeros((2, 3))), ta.tensor(np.array([0, 1])), label_smoothing=1.5)


def test_binary_cross_entropy_needs_probabilities(device: str) -> None:
    with pytest.raises(ValueError, match=r"between 0 and 1.*found 1.5"):
        ta.binary_cross_entropy(_t([0.5, 1.5], device=device), _t([0.0, 1.0], device=device))


def test_binary_cross_entropy_clamps_like_pytorch(device: str) -> None:
    # log(0) is clamped to -100, and x (1 - x) to 1e-12 in the gradient's denominator.
    x = _t([0.0, 1.0, 0.0], device=device, grad=True)
    t = _t([1.0, 0.0, 0.0], device=device)
    loss = ta.binary_cross_entropy(x, t, reduction="none")
    np.testing.assert_array_equal(_np(loss), [100.0, 100.0, 0.0])
    loss.sum().backward()
    np.testing.assert_allclose(_np(x.grad), [-1e12, 1e12, 0.0], rtol=1e-12)


def test_binary_cross_entropy_target_gradient_uses_the_forward_clamps(device: str) -> None:
    # Decision: dt = max(log(1 - x), -100) - max(log x, -100), the derivative of the clamped
    # forward (PyTorch's -logit(x) is +-inf at x = 0 or 1).
    x = _t([0.0, 1.0, 0.5], device=device)
    t = _t([0.3, 0.3, 0.3], device=device, grad=True)
    with np.errstate(divide="ignore"):  # log(0) = -inf before the clamp
        ta.binary_cross_entropy(x, t, reduction="sum").backward()
    np.testing.assert_allclose(_np(t.grad), [100.0, -100.0, 0.0], atol=1e-12)


def test_norm_shape_errors() -> None:
    with pytest.raises(ValueError, match=r"layer_norm: input \[2, 3\] .* normalized_shape \[4\]"):
        ta.layer_norm(_t(np.zeros((2, 3))), (4,))
    with pytest.raises(ValueError, match=r"batch_norm: expected more than 1 value per channel"):
        ta.batch_norm(_t(np.zeros((1, 3))), None, None, training=True)
    with pytest.raises(ValueError, match=r"running_mean and running_var are required"):
        ta.batch_norm(_t(np.zeros((2, 3))), None, None, training=False)
    with pytest.raises(ValueError, match=r"batch_norm: weight must have shape \[3\]"):
        ta.batch_norm(_t(np.zeros((2, 3))), None, None, weight=_t(np.ones(4)), training=True)
    with pytest.raises(ValueError, match=r"batch_norm: running_var must be a floating tensor of shape \[3\]"):
        ta.batch_norm(_t(np.zeros((2, 3))), _t(np.zeros(3)), _t(np.ones(2)), training=True)


def test_batch_norm_float16_running_stats_under_autocast(device: str) -> None:
    # A half model under autocast: x arrives float32 (FP32 tag), the buffers stay float16.
    x = _t(np.arange(8.0).reshape(4, 2), ta.float16, device)
    mean, var = ta.zeros(2, dtype=ta.float16, device=device), ta.ones(2, dtype=ta.float16, device=device)
    with ta.amp.autocast():
        y = ta.batch_norm(x, mean, var, training=True)
    assert y.dtype == ta.float32 and mean.dtype == ta.float16
    np.testing.assert_allclose(_np(mean), [0.3, 0.4], rtol=1e-3)


def test_an_out_of_range_embedding_index_on_a_gpu_reaches_no_row_of_the_gradient(cuda_backend: str) -> None:
    # On a GPU the index is checked on the device: the next host read raises (PyTorch: a device-side assert),
    # and its gradient goes nowhere; it used to be scattered, as NaN, into row 0, a row no index named.
    weight = ta.tensor(np.arange(10.0, dtype=np.float32).reshape(5, 2), device="cuda", requires_grad=True)
    rows = ta.embedding(ta.tensor(np.array([0, 5, -1, 4]), device="cuda"), weight)
    rows.sum().backward()
    with pytest.raises(IndexError, match=r"embedding: index 5 is out of range for a weight of shape \[5, 2\] "
                                         r"\(valid indices 0\.\.4\); indices shape \[4\]"):
        weight.grad.cpu()
    np.testing.assert_array_equal(weight.grad.cpu().numpy(), [[1, 1], [0, 0], [0, 0], [0, 0], [1, 1]])
    out = rows.detach().cpu().numpy()
    assert np.isnan(out[[1, 2]]).all() and (out[[0, 3]] == [[0, 1], [8, 9]]).all()


def test_embedding_errors(device: str) -> None:
    weight = _t(np.zeros((5, 2)), device=device)
    if device == "cuda":  # no host check on a GPU: the rows read out of range are nan, the next host read raises
        rows = ta.embedding(ta.tensor(np.array([[0, 5, -1]]), device=device), weight)
        with pytest.raises(IndexError, match=r"embedding: index 5 is out of range for a weight of shape \[5, 2\]"):
            _np(rows)
        rows = _np(rows)  # the flag was read: this read raises nothing
        assert not np.isnan(rows[0, 0]).any() and np.isnan(rows[0, 1:]).all()
    else:
        with pytest.raises(IndexError, match=r"embedding: index 5 is out of range for a weight of shape \[5, 2\]"):
            ta.embedding(ta.tensor(np.array([[0, 5]]), device=device), weight)
        with pytest.raises(IndexError, match=r"embedding: index -1 is out of range"):
            ta.embedding(ta.tensor(np.array([-1]), device=device), weight)
    with pytest.raises(TypeError, match=r"embedding: indices must be an integer tensor"):
        ta.embedding(_t([0.0, 1.0], device=device), weight)


def test_dropout_probability_range() -> None:
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match=rf"dropout probability has to be between 0 and 1, but got {p}"):
            ta.dropout(_t(np.ones(3)), p)


def test_softmax_dim_is_required() -> None:
    with pytest.raises(TypeError):
        ta.softmax(_t(np.ones((2, 2))))  # type: ignore[call-arg]


@pytest.mark.parametrize("call, message", [
    (lambda x: ta.softmax(x, 0), r"softmax: expected a floating input, got int64"),
    (lambda x: ta.log_softmax(x, 0), r"log_softmax: expected a floating input, got int64"),
    (lambda x: ta.dropout(x, 0.5), r"dropout: expected a floating input, got int64"),
])
def test_integer_inputs_that_would_be_truncated_are_refused(call: object, message: str, device: str) -> None:
    # Each used to return int64 (softmax all zeros, dropout x * 2); PyTorch refuses too.
    with pytest.raises(TypeError, match=message):
        call(ta.tensor([1, 2, 3], device=device))


def test_softmax_family_over_an_empty_dim(device: str) -> None:
    x = _t(np.zeros((2, 0)), device=device)
    assert ta.softmax(x, 1).shape == (2, 0)
    assert ta.log_softmax(x, -1).shape == (2, 0)
    np.testing.assert_array_equal(_np(ta.logsumexp(x, 1)), [-np.inf, -np.inf])  # log of an empty sum


def test_a_positive_infinite_logit_gives_nan_as_in_pytorch(device: str) -> None:
    x = _t([[np.inf, 0.0, 1.0], [0.0, 1.0, 2.0]], device=device)
    assert np.isnan(_np(ta.softmax(x, 1))[0]).all()  # inf - inf: the whole row, not just one cell
    assert np.isnan(_np(ta.log_softmax(x, 1))[0]).all()
    assert np.isfinite(_np(ta.softmax(x, 1))[1]).all()
    assert _np(ta.logsumexp(x, 1))[0] == np.inf  # logsumexp keeps +inf, as PyTorch
    assert np.isnan(ta.cross_entropy(x, ta.tensor([1, 2], device=device)).item())


# --------------------------------------------------------------- autocast
def test_binary_cross_entropy_refused_under_float16_autocast(device: str) -> None:
    p, t = _t([0.2, 0.9], ta.float32, device), _t([0.0, 1.0], ta.float32, device)
    with ta.amp.autocast():
        with pytest.raises(RuntimeError, match=r"unsafe.*binary_cross_entropy_with_logits") as info:
            ta.binary_cross_entropy(p, t)
    assert "float16" in str(info.value) and "backward" in str(info.value)
    with ta.amp.autocast():  # the safe form runs, in float32 (FP32-tagged)
        assert ta.binary_cross_entropy_with_logits(p, t).dtype == ta.float32


def test_binary_cross_entropy_allowed_under_bfloat16_autocast(device: str) -> None:
    p = _t([0.2, 0.9], ta.bfloat16, device, grad=True)
    t = _t([0.0, 1.0], ta.bfloat16, device)
    with ta.amp.autocast(dtype=ta.bfloat16):
        loss = ta.binary_cross_entropy(p, t)
    assert loss.dtype == ta.float32  # FP32-tagged: bfloat16 inputs were upcast
    loss.backward()
    assert p.grad.dtype == ta.bfloat16
    expected = -(np.log(0.2001953125) * 0 + np.log(1 - 0.2001953125) + np.log(0.8984375)) / 2
    assert abs(loss.item() - expected) < 1e-5


def test_autocast_dtypes_of_each_family(device: str) -> None:
    x16 = _t(np.random.default_rng(1).standard_normal((4, 3)), ta.float16, device)
    target = ta.tensor(np.array([0, 2, 1, 2]), device=device)
    weight32 = _t(np.ones((5, 3)), ta.float32, device)
    with ta.amp.autocast():
        assert ta.softmax(x16, 1).dtype == ta.float32  # FP32 ops upcast float16
        assert ta.log_softmax(x16, 1).dtype == ta.float32
        assert ta.cross_entropy(x16, target).dtype == ta.float32
        assert ta.layer_norm(x16, (3,)).dtype == ta.float32
        assert ta.dropout(x16, 0.5).dtype == ta.float16  # NEUTRAL: runs in what arrives
        assert ta.embedding(target, weight32).dtype == ta.float32  # NEUTRAL: the weight's dtype


# ------------------------------------------------------- numerics and math
def test_softmax_is_stable_for_huge_logits(device: str) -> None:
    x = _t([[1000.0, 1000.0, -1000.0], [-1e4, 0.0, 1e4]], ta.float32, device)
    np.testing.assert_allclose(_np(ta.softmax(x, 1)), [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]], atol=1e-7)
    np.testing.assert_allclose(_np(ta.log_softmax(x, 1))[0, :2], np.log([0.5, 0.5]), rtol=1e-6)
    np.testing.assert_allclose(_np(ta.logsumexp(x, 1)), [1000 + np.log(2), 1e4], rtol=1e-6)
    loss = ta.cross_entropy(x, ta.tensor(np.array([0, 2]), device=device))
    np.testing.assert_allclose(loss.item(), np.log(2) / 2, rtol=1e-6)


def test_softmax_float16_outside_autocast_accumulates_in_float32(device: str) -> None:
    # 4096 equal logits: each probability is 1/4096, exactly representable in float16.
    x = _t(np.zeros((1, 4096)), ta.float16, device)
    y = ta.softmax(x, 1)
    assert y.dtype == ta.float16
    np.testing.assert_array_equal(_np(y), np.full((1, 4096), 1 / 4096))


def test_cross_entropy_gradient_is_softmax_minus_onehot_over_n(device: str) -> None:
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((5, 4))
    labels = np.array([3, 0, 0, 2, 1])
    x = _t(logits, device=device, grad=True)
    ta.cross_entropy(x, ta.tensor(labels, device=device)).backward()
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(_np(x.grad), (p - np.eye(4)[labels]) / 5, rtol=1e-12, atol=1e-15)


def test_cross_entropy_double_backward_gives_the_softmax_hessian(device: str) -> None:
    logits = np.array([0.3, -1.2, 0.5])
    x = _t(logits, device=device, grad=True)
    (g,) = ta.autograd.grad(ta.cross_entropy(x, ta.tensor(np.array(1), device=device)), [x], create_graph=True)
    first = _t([1.0, 0.0, 0.0], device=device)
    (h0,) = ta.autograd.grad((g * first).sum(), [x])  # first row of the Hessian: diag(p) - p p^T
    p = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(_np(h0), (np.diag(p) - np.outer(p, p))[0], rtol=1e-12)


def test_batch_norm_running_stats_follow_pytorchs_formula(device: str) -> None:
    # Channel 0 sees 1, 3, 5, 7 (mean 4, biased var 5, unbiased var 20/3);
    # channel 1 sees 2, 2, 4, 4 (mean 3, biased var 1, unbiased var 4/3).
    x = _t([[[1.0, 3.0], [2.0, 2.0]], [[5.0, 7.0], [4.0, 4.0]]], ta.float32, device)
    mean = _t([1.0, -1.0], ta.float32, device)
    var = _t([2.0, 0.5], ta.float32, device)
    versions = mean._version[0], var._version[0]
    y = ta.batch_norm(x, mean, var, training=True, momentum=0.25)
    np.testing.assert_allclose(_np(mean), [0.75 * 1 + 0.25 * 4, 0.75 * -1 + 0.25 * 3], rtol=1e-6)
    np.testing.assert_allclose(_np(var), [0.75 * 2 + 0.25 * 20 / 3, 0.75 * 0.5 + 0.25 * 4 / 3], rtol=1e-6)
    assert (mean._version[0], var._version[0]) == (versions[0] + 1, versions[1] + 1)
    # The batch was normalised with the batch statistics and the biased variance.
    np.testing.assert_allclose(_np(y)[:, 0].ravel(), (np.array([1, 3, 5, 7]) - 4) / np.sqrt(5 + 1e-5), rtol=1e-6)
    # Eval normalises with the running statistics and leaves them alone.
    z = ta.batch_norm(x, mean, var, training=False)
    np.testing.assert_allclose(_np(z)[0, 0], (np.array([1, 3]) - 1.75) / np.sqrt(19 / 6 + 1e-5), rtol=1e-6)
    assert mean._version[0] == versions[0] + 1


def test_batch_norm_float16_input_with_float32_stats_and_params(device: str) -> None:
    rng = np.random.default_rng(3)
    x = _t(rng.standard_normal((8, 2)) * 3 + 100, ta.float16, device, grad=True)
    weight = _t([1.0, 2.0], ta.float32, device, grad=True)
    bias = _t([0.0, 1.0], ta.float32, device, grad=True)
    mean, var = ta.zeros(2, device=device), ta.ones(2, device=device)
    y = ta.batch_norm(x, mean, var, weight, bias, training=True)
    assert y.dtype == ta.float16 and mean.dtype == ta.float32
    xs = _np(x)
    np.testing.assert_allclose(_np(mean), 0.1 * xs.mean(0), rtol=1e-5)  # statistics in float32
    np.testing.assert_allclose(_np(y)[:, 0], (xs[:, 0] - xs[:, 0].mean()) / xs[:, 0].std(), atol=4e-3)
    (y * y).sum().backward()
    assert (x.grad.dtype, weight.grad.dtype, bias.grad.dtype) == (ta.float16, ta.float32, ta.float32)


def test_layer_norm_first_and_higher_order_backward_agree(device: str) -> None:
    # First-order backward reuses the forward's statistics; create_graph recomputes them.
    rng = np.random.default_rng(4)
    x = _t(rng.standard_normal((3, 5)), device=device, grad=True)
    w = _t(rng.uniform(0.5, 1.5, 5), device=device, grad=True)
    cot = _t(rng.standard_normal((3, 5)), device=device)
    fast = ta.autograd.grad(ta.layer_norm(x, 5, w), [x, w], [cot])
    slow = ta.autograd.grad(ta.layer_norm(x, 5, w), [x, w], [cot], create_graph=True)
    for a, b in zip(fast, slow):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-12, atol=1e-14)


def test_layer_norm_gradient_sums_to_zero_per_row(device: str) -> None:
    # Shifting a row by a constant leaves layer_norm unchanged: dx sums to 0 along it.
    x = _t(np.random.default_rng(5).standard_normal((4, 6)), device=device, grad=True)
    (ta.layer_norm(x, 6) * _t(np.arange(24.0).reshape(4, 6), device=device)).sum().backward()
    np.testing.assert_allclose(_np(x.grad).sum(1), 0.0, atol=1e-12)


# ------------------------------------------------------------------ dropout
def test_dropout_preserves_the_mean_and_drops_p(device: str) -> None:
    ta.manual_seed(0)
    y = ta.dropout(ta.ones(200_000, device=device), p=0.3)
    values = _np(y)
    assert set(np.unique(values)) == {0.0, np.float32(1 / 0.7)}
    # 200k Bernoulli draws: the standard error of the kept fraction is ~0.001.
    assert abs((values == 0).mean() - 0.3) < 0.005
    assert abs(values.mean() - 1.0) < 0.01


def test_dropout_gradient_is_the_scaled_mask(device: str) -> None:
    ta.manual_seed(1)
    x = _t(np.random.default_rng(6).uniform(1, 2, (50, 40)), device=device, grad=True)
    y = ta.dropout(x, p=0.5)
    y.sum().backward()
    kept = _np(y) != 0
    assert 0 < kept.sum() < kept.size
    np.testing.assert_array_equal(_np(x.grad), np.where(kept, 2.0, 0.0))


def test_dropout_edge_probabilities_and_eval(device: str) -> None:
    x = _t(np.random.default_rng(7).standard_normal((5, 5)), device=device, grad=True)
    np.testing.assert_array_equal(_np(ta.dropout(x, p=0.0)), _np(x))
    assert ta.dropout(x, p=0.9, training=False) is x  # eval: identity, nothing drawn
    y = ta.dropout(x, p=1.0)
    np.testing.assert_array_equal(_np(y), 0.0)
    y.sum().backward()
    np.testing.assert_array_equal(_np(x.grad), 0.0)


def test_dropout_reproducible_under_manual_seed(device: str) -> None:
    x = ta.ones(1000, dtype=ta.float16, device=device)
    ta.manual_seed(42)
    a, b = _np(ta.dropout(x, 0.5)), _np(ta.dropout(x, 0.5))
    ta.manual_seed(42)
    c = _np(ta.dropout(x, 0.5))
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b)  # successive calls draw fresh masks
    assert ta.dropout(x, 0.5).dtype == ta.float16


def test_dropout_low_precision_scale_is_not_rounded_first(device: str) -> None:
    # x = 0.9 is 0.8984375 in bfloat16; times 1 / 0.9 in float32 that is 0.99826,
    # which rounds to bfloat16 1.0. With the scale rounded to bfloat16 first
    # (1.109375) the product would be 0.99670 and round to 0.99609375.
    ta.manual_seed(5)
    x = _t(np.full(64, 0.9), ta.bfloat16, device, grad=True)
    y = ta.dropout(x, 0.1)
    kept = _np(y) != 0
    assert kept.any()
    np.testing.assert_array_equal(_np(y)[kept], 1.0)
    y.backward(_t(np.full(64, 0.9), ta.bfloat16, device))
    assert x.grad.dtype == ta.bfloat16
    np.testing.assert_array_equal(_np(x.grad), np.where(kept, 1.0, 0.0))


def test_dropout_inplace(device: str) -> None:
    x = ta.ones(100, device=device)
    ta.manual_seed(3)
    y = ta.dropout(x, 0.5, inplace=True)
    assert y is x and x._version[0] == 1
    assert set(np.unique(_np(x))) == {0.0, 2.0}
    leaf = ta.ones(100, device=device, requires_grad=True)
    h = leaf * 3.0
    ta.dropout(h, 0.5, inplace=True).sum().backward()  # recorded: the gradient is the mask
    np.testing.assert_array_equal(_np(leaf.grad), np.where(_np(h) != 0, 6.0, 0.0))


# ---------------------------------------------------------------- embedding
def test_embedding_repeated_indices_accumulate(device: str) -> None:
    weight = _t(np.arange(12.0).reshape(4, 3), device=device, grad=True)
    idx = ta.tensor(np.array([[1, 3, 1], [1, 0, 3]]), device=device)
    y = ta.embedding(idx, weight)
    assert y.shape == (2, 3, 3)
    y.sum().backward()
    np.testing.assert_array_equal(_np(weight.grad), np.array([1, 3, 0, 2])[:, None] * np.ones((4, 3)))


def test_embedding_padding_row_gets_no_gradient(device: str) -> None:
    weight = _t(np.ones((4, 2)), device=device, grad=True)
    idx = ta.tensor(np.array([0, 2, 2, 3, 0]), device=device)
    y = ta.embedding(idx, weight, padding_idx=-2)  # -2 is row 2, as PyTorch
    np.testing.assert_array_equal(_np(y)[1], [1.0, 1.0])  # the padding row is still read
    y.sum().backward()
    np.testing.assert_array_equal(_np(weight.grad)[:, 0], [2, 0, 0, 1])


def test_embedding_float16_gradient_accumulates_in_float32(device: str) -> None:
    # 3000 lookups of one row: a float16 running sum stalls at 2048 (its spacing
    # reaches 2 there); accumulated in float32 and rounded once it is exactly 3000.
    weight = _t(np.zeros((2, 1)), ta.float16, device, grad=True)
    ta.embedding(ta.tensor(np.zeros(3000, dtype=np.int64), device=device), weight).sum().backward()
    assert weight.grad.dtype == ta.float16
    np.testing.assert_array_equal(_np(weight.grad), [[3000.0], [0.0]])


@pytest.mark.parametrize("dtype", [ta.float16, ta.bfloat16])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_16_bit_softmax_outside_autocast_is_the_float32_result_rounded_once(device: str, op: str, dtype) -> None:
    # Outside autocast a 16-bit input is computed in float32 and rounded once (the module's rule). The op
    # table's float16 tolerance (2e-2) would hide a 16-bit computation; bits do not (issue 30's audit).
    rng = np.random.default_rng(4)
    x = ta.tensor(rng.standard_normal((8, 1000)).astype(np.float32) * 3, device=device).to(dtype)
    fn = {"softmax": lambda t: ta.softmax(t, dim=-1), "log_softmax": lambda t: ta.log_softmax(t, dim=-1),
          "logsumexp": lambda t: ta.logsumexp(t, dim=-1)}[op]
    got = fn(x)
    want = fn(x.float()).to(dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.float().cpu().numpy(), want.float().cpu().numpy())
