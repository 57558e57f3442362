"""tril/triu, lerp, multinomial, scaled_dot_product_attention, is_autocast_available and LayerNorm details.

The op-spec rows (tests/support/op_specs) check these ops' values and gradients; this
file checks what a row cannot: PyTorch's error messages, autocast tags,
in-place lerp_, the distribution and reproducibility of multinomial, and
attention's float32 internals, dropout and masks. Expected values come from
NumPy or from hand computation; torch is never imported.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.random import default_generator

F = ta.nn.functional


def _host(t: ta.Tensor) -> np.ndarray:
    return t.detach().numpy()


# ------------------------------------------------------------ tril / triu
def test_tril_triu_errors_and_dtypes(device: str) -> None:
    with pytest.raises(RuntimeError, match=r"tril: input tensor must have at least 2 dimensions, got shape \[3\]"):
        ta.tril(ta.ones(3, device=device))
    with pytest.raises(RuntimeError, match=r"triu: input tensor must have at least 2 dimensions"):
        ta.ones(3, device=device).triu()
    with pytest.raises(TypeError, match=r"tril\(\): argument 'diagonal' must be int, not float"):
        ta.tril(ta.ones(3, 3, device=device), 1.5)
    causal = ta.ones(3, 4, dtype=ta.bool, device=device).tril()
    assert causal.dtype == ta.bool
    np.testing.assert_array_equal(causal.numpy(), np.tril(np.ones((3, 4), bool)))
    ints = ta.tensor(np.arange(9).reshape(3, 3), device=device).triu(1)
    assert ints.dtype == ta.int64
    np.testing.assert_array_equal(ints.numpy(), np.triu(np.arange(9).reshape(3, 3), 1))


def test_tril_triu_are_neutral_under_autocast() -> None:
    assert ta.amp.op_table()["tril"].tag is ta.amp.NEUTRAL and ta.amp.op_table()["triu"].tag is ta.amp.NEUTRAL
    with ta.amp.autocast():
        assert ta.tril(ta.ones(2, 2)).dtype == ta.float32
        assert ta.triu(ta.ones(2, 2, dtype=ta.float16)).dtype == ta.float16


# ------------------------------------------------------------ lerp
def test_lerp_endpoints_are_exact_and_low_precision_rounds_once(device: str) -> None:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(64).astype(np.float16) for _ in range(2))
    ta_a, ta_b = ta.tensor(a, device=device), ta.tensor(b, device=device)
    np.testing.assert_array_equal(ta.lerp(ta_a, ta_b, 0.0).numpy(), a)
    np.testing.assert_array_equal(ta.lerp(ta_a, ta_b, 1.0).numpy(), b)  # the |w| >= 0.5 formula
    # float16 computed in float32 and rounded once (a float16 (b - a) would round twice).
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    expected = (b32 - (b32 - a32) * np.float32(1 - 0.7)).astype(np.float16)
    np.testing.assert_array_equal(ta.lerp(ta_a, ta_b, 0.7).numpy(), expected)


def test_lerp_promotes_mixed_dtypes_and_refuses_bad_inputs() -> None:
    assert ta.amp.op_table()["lerp"].tag is ta.amp.PROMOTE
    half, full = ta.ones(3, dtype=ta.float16), ta.zeros(3)
    assert ta.lerp(half, full, 0.5).dtype == ta.float32
    assert ta.lerp(full, full, ta.full((3,), 0.5, dtype=ta.float64)).dtype == ta.float64
    with pytest.raises(TypeError, match=r"lerp: expected floating point tensors, got \[3\] int64"):
        ta.lerp(ta.ones(3, dtype=ta.int64), ta.ones(3, dtype=ta.int64), 0.5)
    with pytest.raises(ValueError, match=r"lerp: operands with shapes \[3\] and \[4\] cannot be broadcast"):
        ta.lerp(ta.ones(3), ta.ones(4), 0.5)
    with pytest.raises(TypeError, match="lerp: weight must be a number or a Tensor, got str"):
        ta.lerp(ta.ones(3), ta.ones(3), "0.5")


def test_lerp_in_place_is_the_ema_idiom(device: str) -> None:
    ema = ta.zeros(4, device=device)
    buffer, version = ema.array, ema._version[0]
    for value in (1.0, 2.0, 3.0):
        ema.lerp_(ta.full((4,), value, device=device), 0.1)
    assert ema.array is buffer and ema._version[0] == version + 3
    expected = 0.0
    for value in (1.0, 2.0, 3.0):
        expected = expected + 0.1 * (value - expected)
    np.testing.assert_allclose(ema.numpy(), np.full(4, expected), rtol=1e-6)
    with pytest.raises(RuntimeError, match=r"lerp_: result of shape \[2, 4\] .* cannot be written in place into a "
                                           r"tensor of shape \[4\]"):
        ema.lerp_(ta.ones(2, 4, device=device), 0.5)


def test_lerp_in_place_is_recorded_when_end_or_weight_needs_grad() -> None:
    end = ta.tensor([1.0, 2.0], requires_grad=True)
    weight = ta.tensor([0.25, 0.75], requires_grad=True)
    x = ta.zeros(2)
    x.lerp_(end, weight)
    x.sum().backward()
    np.testing.assert_allclose(end.grad.numpy(), [0.25, 0.75])
    np.testing.assert_allclose(weight.grad.numpy(), [1.0, 2.0])  # d/dw of x + w (end - x) at x = 0
    y = ta.zeros(2)
    w_only = ta.tensor([0.5, 0.5], requires_grad=True)
    y.lerp_(ta.tensor([4.0, 6.0]), w_only)  # only the weight needs grad: still recorded
    y.sum().backward()
    np.testing.assert_allclose(w_only.grad.numpy(), [4.0, 6.0])


# ------------------------------------------------------------ multinomial
@pytest.mark.parametrize("call, error, message", [
    (lambda: ta.multinomial(ta.ones(2, 2, 2), 1), RuntimeError, r"prob_dist must be 1 or 2 dim, got input \[2, 2, 2\]"),
    (lambda: ta.multinomial(ta.tensor(0.5), 1), RuntimeError, "prob_dist must be 1 or 2 dim"),
    (lambda: ta.multinomial(ta.ones(3, dtype=ta.int64), 1), RuntimeError,
     "multinomial only supports floating-point dtypes for input, got: int64"),
    (lambda: ta.multinomial(ta.ones(3), 4), RuntimeError,
     r"cannot sample n_sample > prob_dist.size\(-1\) samples without replacement \(4 samples, input \[3\]"),
    (lambda: ta.multinomial(ta.ones(3), 0), RuntimeError, "cannot sample n_sample <= 0 samples"),
    (lambda: ta.multinomial(ta.ones(3), -2, True), RuntimeError, "cannot sample n_sample <= 0 samples"),
    (lambda: ta.multinomial(ta.ones(3), 1.0), TypeError, r"multinomial\(\): argument 'num_samples' must be int, "
                                                         "not float"),
    (lambda: ta.multinomial(ta.tensor([0.1, -0.2, 0.7]), 1), RuntimeError,
     "probability tensor contains either `inf`, `nan` or element < 0"),
    (lambda: ta.multinomial(ta.tensor([0.1, float("nan"), 0.7]), 1, True), RuntimeError,
     "probability tensor contains either `inf`, `nan` or element < 0"),
    (lambda: ta.multinomial(ta.tensor([0.1, float("inf")]), 1), RuntimeError,
     "probability tensor contains either `inf`, `nan` or element < 0"),
    (lambda: ta.multinomial(ta.tensor([[1.0, 1.0], [0.0, 0.0]]), 1, True), RuntimeError,
     r"invalid multinomial distribution \(sum of probabilities <= 0\)"),
    (lambda: ta.multinomial(ta.ones(3), 1, generator=np.random.default_rng()), TypeError,
     "generator must be a ta.Generator"),
])
def test_multinomial_errors_are_pytorchs(call, error, message: str) -> None:
    with pytest.raises(error, match=message):
        call()


def test_multinomial_with_replacement_follows_the_weights(device: str) -> None:
    weights = np.array([[1.0, 2.0, 0.0, 5.0, 2.0], [0.0, 0.0, 3.0, 0.0, 1.0]])
    draws = ta.multinomial(ta.tensor(weights, device=device), 20_000, replacement=True)
    assert draws.shape == (2, 20_000) and draws.dtype == ta.int64
    for row, w in zip(draws.numpy(), weights):
        p = w / w.sum()
        counts = np.bincount(row, minlength=5)
        assert counts[p == 0].sum() == 0  # zero weight: never drawn
        sigma = np.sqrt(20_000 * p * (1 - p))
        assert np.all(np.abs(counts - 20_000 * p) <= 5 * sigma + 1e-9), (counts, 20_000 * p)


def test_multinomial_without_replacement_is_sequential_sampling(device: str) -> None:
    # The first draw follows the weights; no index repeats; zero weights come last.
    weights = np.array([4.0, 0.0, 1.0, 3.0, 2.0])
    batch = ta.tensor(np.tile(weights, (8000, 1)), device=device)
    draws = ta.multinomial(batch, 5).numpy()
    assert all(len(set(row)) == 5 for row in draws[:200])
    assert np.all(draws[:, 4] == 1)  # the zero-weight category, after every positive one
    p = weights / weights.sum()
    counts = np.bincount(draws[:, 0], minlength=5)
    assert np.all(np.abs(counts - 8000 * p) <= 5 * np.sqrt(8000 * p * (1 - p)) + 1e-9), counts
    # Second draw given the first was 0 (weight 4): the rest renormalised, (0, 1/6, 3/6, 2/6).
    second = draws[draws[:, 0] == 0, 1]
    q = np.array([0, 0, 1, 3, 2]) / 6
    counts = np.bincount(second, minlength=5)
    assert np.all(np.abs(counts - len(second) * q) <= 5 * np.sqrt(len(second) * q * (1 - q)) + 1e-9), counts


def test_multinomial_is_reproducible_from_the_seed_and_takes_a_generator(device: str) -> None:
    weights = ta.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]], device=device)
    ta.manual_seed(7)
    first = ta.multinomial(weights, 6, True).numpy()
    ta.manual_seed(7)
    np.testing.assert_array_equal(ta.multinomial(weights, 6, True).numpy(), first)
    g1, g2 = ta.Generator(device).manual_seed(3), ta.Generator(device).manual_seed(3)
    state = default_generator(device).rng.bit_generator.state if device == "cpu" else None
    a = weights.multinomial(3, generator=g1).numpy()
    np.testing.assert_array_equal(ta.multinomial(weights, 3, generator=g2).numpy(), a)
    if state is not None:
        assert default_generator(device).rng.bit_generator.state == state  # the default one was not used


def test_multinomial_float16_and_its_one_host_read(device: str) -> None:
    weights = ta.tensor([0.0, 1.0, 0.0], dtype=ta.float16, device=device)
    ta.cuda.reset_sync_count()
    draws = ta.multinomial(weights, 4, replacement=True)
    # Checking the weights reads two flags on the host (a sync on a GPU); sampling reads nothing.
    assert ta.cuda.sync_count() == (1 if device == "cuda" else 0)
    np.testing.assert_array_equal(draws.numpy(), [1, 1, 1, 1])
    assert ta.multinomial(ta.ones(0, 3, device=device), 2).shape == (0, 2)


# ------------------------------------------------------------ scaled_dot_product_attention
def _qkv(shape_q=(2, 3, 4, 8), shape_k=(2, 3, 5, 8), shape_v=(2, 3, 5, 6), seed=0, scale=1.0, device="cpu"):
    rng = np.random.default_rng(seed)
    return [ta.tensor((rng.standard_normal(s) * scale).astype(np.float32), device=device)
            for s in (shape_q, shape_k, shape_v)]


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(attn_mask="bool", is_causal=True), RuntimeError, "Explicit attn_mask should not be set when is_causal=True"),
    (dict(key_dtype=ta.float16), RuntimeError,
     r"expected query, key and value to have the same floating dtype, got query \[2, 3, 4, 8\] \(float32\), "
     r"key \[2, 3, 5, 8\] \(float16\)"),
    (dict(attn_mask="int"), RuntimeError,
     r"expected attn_mask dtype to be bool or float or to match query dtype, got attn_mask \[4, 5\] \(int64\)"),
    (dict(attn_mask="float64"), RuntimeError, r"attn_mask dtype .* got attn_mask \[4, 5\] \(float64\)"),
    (dict(attn_mask="wide"), RuntimeError,
     r"attn_mask \[4, 6\] \(bool\) does not broadcast to the attention scores' shape \[2, 3, 4, 5\]"),
    (dict(dropout_p=1.5), RuntimeError, "dropout probability has to be between 0 and 1, but got 1.5"),
    (dict(dropout_p=-0.1), RuntimeError, "dropout probability has to be between 0 and 1, but got -0.1"),
])
def test_attention_errors(kwargs: dict, error: type, message: str) -> None:
    q, k, v = _qkv()
    if "key_dtype" in kwargs:
        k = k.to(kwargs.pop("key_dtype"))
    masks = {"bool": ta.ones(4, 5, dtype=ta.bool), "int": ta.ones(4, 5, dtype=ta.int64),
             "float64": ta.ones(4, 5, dtype=ta.float64), "wide": ta.ones(4, 6, dtype=ta.bool)}
    if "attn_mask" in kwargs:
        kwargs["attn_mask"] = masks[kwargs["attn_mask"]]
    with pytest.raises(error, match=message):
        F.scaled_dot_product_attention(q, k, v, **kwargs)


def test_attention_shape_errors_name_the_operands() -> None:
    q, k, v = _qkv()
    with pytest.raises(RuntimeError, match=r"query and key must have the same embedding size .* key \[2, 3, 5, 7\]"):
        F.scaled_dot_product_attention(q, ta.ones(2, 3, 5, 7), v)
    with pytest.raises(RuntimeError, match=r"key and value must have the same sequence length .* value \[2, 3, 6, 6\]"):
        F.scaled_dot_product_attention(q, k, ta.ones(2, 3, 6, 6))
    with pytest.raises(RuntimeError, match=r"at least 2 dimensional, got query \[8\]"):
        F.scaled_dot_product_attention(ta.ones(8), k[0, 0], v[0, 0])
    with pytest.raises(RuntimeError, match=r"batch dimensions of query, key and value do not broadcast"):
        F.scaled_dot_product_attention(q, ta.ones(2, 2, 5, 8), ta.ones(2, 2, 5, 6))
    with pytest.raises(RuntimeError, match=r"number of heads in key \(2\) and value \(2\) must divide the number of "
                                           r"heads in query \(3\)"):
        F.scaled_dot_product_attention(q, ta.ones(2, 2, 5, 8), ta.ones(2, 2, 5, 6), enable_gqa=True)
    with pytest.raises(RuntimeError, match=r"expected query, key and value to have the same floating dtype"):
        F.scaled_dot_product_attention(*(t.to(ta.int64) for t in (q, k, v)))
    with pytest.raises(TypeError, match="attn_mask must be a Tensor or None, got ndarray"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((4, 5), bool))


@pytest.mark.gpu
@pytest.mark.skipif(not ta.cuda.is_available(), reason="needs CuPy and a CUDA GPU")
def test_attention_operands_on_two_devices_are_refused() -> None:
    q, k, v = _qkv(device="cuda")
    with pytest.raises(RuntimeError, match=r"query is on cuda:0 but attn_mask \[4, 5\] is on cpu"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=ta.ones(4, 5, dtype=ta.bool))


def test_attention_is_lower_and_keeps_float32_scores_inside() -> None:
    assert ta.amp.op_table()["scaled_dot_product_attention"].tag is ta.amp.LOWER
    # Scores of about 8 * 8 * 4096 = 262144 overflow float16 (max 65504) if the
    # product or the softmax ran in float16; float32 scores keep the softmax exact.
    rng = np.random.default_rng(1)
    q = np.full((1, 2, 4096), 8.0, np.float32)
    k = np.full((1, 3, 4096), 8.0, np.float32)
    k[0, 1] *= 1.0 + 2.0 ** -10  # the second key scores higher by 256 before scaling
    v = rng.standard_normal((1, 3, 4)).astype(np.float32)
    with ta.amp.autocast():
        out = F.scaled_dot_product_attention(ta.tensor(q), ta.tensor(k), ta.tensor(v), scale=1.0)
    assert out.dtype == ta.float16
    assert np.all(np.isfinite(out.numpy()))
    # Every other weight is exp(-256) = 0 in float32: the output is the second value row, rounded once.
    np.testing.assert_array_equal(out.numpy()[0], np.tile(v[0, 1].astype(np.float16), (2, 1)))


def test_attention_output_is_rounded_once_from_float32(device: str) -> None:
    q, k, v = _qkv(device=device)
    q16, k16, v16 = (t.half() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q16, k16, v16, is_causal=True)
    assert out.dtype == ta.float16
    # The same math on the float16 values in float64, rounded once: equal up to the
    # float32 arithmetic inside (one float16 ulp at most, on a rounding tie).
    qd, kd, vd = (t.double() for t in (q16, k16, v16))
    exact = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True).numpy()
    got = out.numpy().astype(np.float64)
    ulp = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(got - exact) <= ulp)
    assert np.mean(got == exact.astype(np.float16)) > 0.97


def test_attention_float_mask_is_cast_with_the_inputs_under_autocast() -> None:
    q, k, v = _qkv()
    bias = ta.tensor(np.linspace(-1, 1, 20).reshape(4, 5), dtype=ta.float32, requires_grad=True)
    q.requires_grad_()
    with ta.amp.autocast():
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert out.dtype == ta.float16
    out.float().sum().backward()
    assert bias.grad.dtype == ta.float32 and q.grad.dtype == ta.float32  # back through the recorded casts
    assert np.all(np.isfinite(bias.grad.numpy())) and np.abs(bias.grad.numpy()).sum() > 0


def test_attention_dropout_uses_the_seeded_generator(device: str) -> None:
    q, k, v = _qkv(device=device)
    ta.manual_seed(11)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.4)
    # The same probabilities with the mask the op drew (replayed from the same seed).
    ta.manual_seed(11)
    keep = ta.backend.to_host(default_generator(device).rng.random((2, 3, 4, 5), dtype=np.float32) >= 0.4)
    qd, kd, vd = (t.numpy().astype(np.float64) for t in (q, k, v))
    s = qd @ np.swapaxes(kd, -1, -2) / math.sqrt(8)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    expected = np.where(keep, p / 0.6, 0) @ vd
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(out.numpy(), F.scaled_dot_product_attention(q, k, v).numpy())
    np.testing.assert_array_equal(F.scaled_dot_product_attention(q, k, v, dropout_p=1.0).numpy(),
                                  np.zeros((2, 3, 4, 6), np.float32))


def test_attention_dropout_gradient_uses_the_same_mask() -> None:
    q, k, v = (t.double().requires_grad_() for t in _qkv(shape_q=(1, 3, 4), shape_k=(1, 4, 4),
                                                         shape_v=(1, 4, 2)))

    def attend(q, k, v):
        ta.manual_seed(5)  # the same dropout mask on every call
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)

    assert ta.autograd.gradcheck(attend, [q, k, v])
    assert ta.autograd.gradgradcheck(attend, [q, k, v])


def test_attention_fully_masked_rows_give_zeros_and_zero_gradients() -> None:
    q, k, v = (t.requires_grad_() for t in _qkv())
    mask = np.ones((4, 5), bool)
    mask[2] = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=ta.tensor(mask))
    np.testing.assert_array_equal(out.detach().numpy()[:, :, 2], 0.0)
    out.sum().backward()
    np.testing.assert_array_equal(q.grad.numpy()[:, :, 2], 0.0)
    assert np.all(np.isfinite(k.grad.numpy())) and np.all(np.isfinite(v.grad.numpy()))


# ------------------------------------------------------------ autocast availability, layer norm
def test_is_autocast_available() -> None:
    assert ta.amp.is_autocast_available("cpu") and ta.amp.is_autocast_available("cuda")
    assert ta.amp.is_autocast_available("cuda:1")  # about the device type, not this machine (as PyTorch)
    assert not ta.amp.is_autocast_available("mps")  # a PyTorch device type tinyamp has no autocast for
    with pytest.raises(RuntimeError, match="device type at start of device string: gpu"):
        ta.amp.is_autocast_available("gpu")
    with pytest.raises(TypeError, match="argument 'device_type' must be str, not Device"):
        ta.amp.is_autocast_available(ta.device("cpu"))


def test_layer_norm_module_matches_pytorchs_surface() -> None:
    ln = ta.nn.LayerNorm(np.int64(5), eps=1e-3, bias=False)
    assert ln.normalized_shape == (5,) and ln.bias is None and list(ln.state_dict()) == ["weight"]
    assert repr(ln) == "LayerNorm((5,), eps=0.001, elementwise_affine=True, bias=False)"
    assert repr(ta.nn.LayerNorm([2, 3], elementwise_affine=False)) == \
        "LayerNorm((2, 3), eps=1e-05, elementwise_affine=False, bias=False)"
    with ta.no_grad():
        ln.weight.mul_(3.0)
    ln.reset_parameters()
    np.testing.assert_array_equal(_host(ln.weight), np.ones(5))
    assert F.layer_norm(ta.ones(2, 5), np.int64(5)).shape == (2, 5)


def test_layer_norm_is_fp32_under_autocast_and_gelu_is_neutral() -> None:
    assert ta.amp.op_table()["layer_norm"].tag is ta.amp.FP32
    assert ta.amp.op_table()["gelu"].tag is ta.amp.NEUTRAL  # on no PyTorch autocast list
    with ta.amp.autocast():
        assert F.layer_norm(ta.ones(2, 3, dtype=ta.float16), (3,)).dtype == ta.float32
        assert ta.nn.LayerNorm(3)(ta.ones(2, 3, dtype=ta.float16)).dtype == ta.float32
        assert ta.nn.GELU("tanh")(ta.ones(2, dtype=ta.float16)).dtype == ta.float16
