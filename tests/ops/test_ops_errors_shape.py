"""Shape, indexing, linear-algebra and convolution ops: errors and numerics beyond the op table.

Bad inputs must fail with an error naming the op and the shapes; repeated
indices must accumulate gradient; every contraction (forward and backward)
must go through ``gemm`` so float16 products are summed in float32.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinyamp as ta
from tinyamp.kernels.gemm import gemm

linalg_module = importlib.import_module("tinyamp.ops.linalg")
conv_module = importlib.import_module("tinyamp.ops.conv")


def _t(shape: tuple, dtype: object = ta.float32, device: str = "cpu", grad: bool = False, seed: int = 0) -> ta.Tensor:
    data = np.random.default_rng(seed).standard_normal(shape)
    return ta.tensor(data, dtype=dtype, device=device, requires_grad=grad)


def _raises(exc: type, call: object, *fragments: str) -> str:
    with pytest.raises(exc) as info:
        call()  # type: ignore[operator]
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from {message!r}"
    return message


# ---------------------------------------------------------------------------
# Errors name the op, the shapes and (where relevant) the dtypes
# ---------------------------------------------------------------------------

def test_matmul_inner_mismatch(device: str) -> None:
    a, b = _t((3, 4), device=device), _t((5, 6), device=device)
    _raises(ValueError, lambda: ta.matmul(a, b), "matmul", "[3, 4]", "[5, 6]", "float32")
    _raises(ValueError, lambda: a @ _t((3,), device=device), "matmul", "[3, 4]", "[3]")


def test_matmul_batch_dims_must_broadcast(device: str) -> None:
    a, b = _t((2, 3, 4), device=device), _t((3, 4, 5), device=device)
    _raises(ValueError, lambda: a @ b, "matmul", "[2, 3, 4]", "[3, 4, 5]", "broadcast")


def test_matmul_rejects_scalars_and_mixed_dtypes(device: str) -> None:
    _raises(ValueError, lambda: ta.matmul(_t((), device=device), _t((3,), device=device)), "matmul", "1-D")
    _raises(TypeError, lambda: _t((2, 3), device=device) @ _t((3, 2), ta.float64, device),
            "matmul", "[2, 3] float32", "[3, 2] float64")


def test_bmm_needs_3d_with_equal_batch(device: str) -> None:
    _raises(ValueError, lambda: ta.bmm(_t((3, 4), device=device), _t((2, 4, 5), device=device)),
            "bmm", "3-D", "[3, 4]", "[2, 4, 5]")
    _raises(ValueError, lambda: ta.bmm(_t((2, 3, 4), device=device), _t((3, 4, 5), device=device)),
            "bmm", "[2, 3, 4]", "[3, 4, 5]")


def test_linear_shape_errors(device: str) -> None:
    x = _t((2, 4), device=device)
    _raises(ValueError, lambda: ta.linear(x, _t((3, 5), device=device)), "linear", "[2, 4]", "[3, 5]")
    _raises(ValueError, lambda: ta.linear(x, _t((3, 4), device=device), _t((2,), device=device)),
            "linear", "bias", "[2]", "[3, 4]")


def test_cat_and_stack_mismatch(device: str) -> None:
    a, b = _t((2, 3), device=device), _t((3, 4), device=device)
    _raises(ValueError, lambda: ta.cat([a, b], dim=0), "cat", "dimension 0", "[2, 3]", "[3, 4]")
    _raises(ValueError, lambda: ta.cat([]), "cat")
    _raises(TypeError, lambda: ta.cat(a), "cat", "list")
    _raises(ValueError, lambda: ta.stack([a, b]), "stack", "[2, 3]", "[3, 4]")


def test_conv2d_channel_and_group_errors(device: str) -> None:
    x = _t((2, 4, 5, 5), device=device)
    _raises(ValueError, lambda: ta.conv2d(x, _t((6, 3, 3, 3), device=device)),
            "conv2d", "[2, 4, 5, 5]", "[6, 3, 3, 3]", "3 channels", "got 4")
    _raises(ValueError, lambda: ta.conv2d(x, _t((3, 2, 3, 3), device=device), groups=2),
            "conv2d", "groups=2", "[3, 2, 3, 3]")
    _raises(ValueError, lambda: ta.conv2d(x, _t((2, 4, 3, 3), device=device), _t((3,), device=device)),
            "conv2d", "bias", "[3]")
    _raises(ValueError, lambda: ta.conv2d(x, _t((2, 4, 7, 7), device=device)), "conv2d", "[7, 7]")
    _raises(ValueError, lambda: ta.conv2d(x, _t((2, 4, 3, 3), device=device), stride=2, padding="same"),
            "conv2d", "same")
    _raises(ValueError, lambda: ta.conv2d(_t((4, 5), device=device), _t((2, 4, 3, 3), device=device)),
            "conv2d", "[4, 5]")


def test_reshape_and_dim_errors(device: str) -> None:
    x = _t((2, 3), device=device)
    _raises(ValueError, lambda: x.reshape(4, 2), "reshape", "[4, 2]", "[2, 3]")
    _raises(IndexError, lambda: x.unsqueeze(3), "unsqueeze", "3", "[2, 3]")
    _raises(IndexError, lambda: ta.squeeze(x, 2), "squeeze", "[2, 3]")
    _raises(ValueError, lambda: ta.split(x, [1, 1], dim=1), "split", "[1, 1]", "[2, 3]")
    _raises(ValueError, lambda: ta.pad(x, (3, 0), mode="reflect"), "pad", "reflect", "[2, 3]")
    _raises(ValueError, lambda: ta.pad(x, (1, 2, 3)), "pad", "even")
    # -1 in a new leading dim would silently read another dim's size (PyTorch refuses too)
    _raises(ValueError, lambda: x.expand(-1, 2, 3), "expand", "-1", "[2, 3]")
    _raises(ValueError, lambda: ta.pad(x, (-2, -1), mode="circular"), "pad", "circular", "crops all 3")


def test_getitem_and_pool_errors(device: str) -> None:
    x = _t((2, 3), device=device)
    _raises(IndexError, lambda: x[5], "getitem", "[2, 3]")
    _raises(IndexError, lambda: x[:, ta.tensor([0.5])], "getitem", "float32")
    _raises(ValueError, lambda: ta.max_pool2d(_t((1, 1, 4, 4), device=device), 2, padding=2),
            "max_pool2d", "padding")


# ---------------------------------------------------------------------------
# Indexing gradients
# ---------------------------------------------------------------------------

def test_getitem_repeated_indices_accumulate(device: str) -> None:
    x = ta.tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    index = ta.tensor([0, 0, 2, 0], device=device)
    (x[index] * ta.tensor([1.0, 10.0, 100.0, 1000.0], device=device)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1011.0, 0.0, 100.0])


def test_getitem_repeats_accumulate_float16_in_float32(device: str) -> None:
    # 4096 float16 ones summed in float16 stop at 2048 (spacing 2 above 2048).
    x = ta.zeros(1, dtype=ta.float16, device=device, requires_grad=True)
    y = x[ta.zeros(4096, dtype=ta.int64, device=device)]
    y.backward(ta.ones(4096, dtype=ta.float16, device=device))
    assert x.grad.dtype == ta.float16
    assert x.grad.numpy()[0] == 4096


def test_getitem_gradient_is_differentiable(device: str) -> None:
    # d/dx of sum(x[idx]^2) is 2 x n_i; its derivative in x is 2 n_i (double backward).
    x = ta.tensor([1.0, 2.0, 3.0], dtype=ta.float64, device=device, requires_grad=True)
    picked = x[[1, 1, 2]]
    y = (picked * picked).sum()
    (g,) = ta.autograd.grad(y, [x], create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), [0.0, 8.0, 6.0])
    (h,) = ta.autograd.grad(g.sum(), [x])
    np.testing.assert_allclose(h.numpy(), [0.0, 4.0, 2.0])


def test_max_pool_indices_and_shared_maximum(device: str) -> None:
    x = ta.arange(16, dtype=ta.float32, device=device).reshape(1, 1, 4, 4)
    y, idx = ta.max_pool2d(x, 2, return_indices=True)
    np.testing.assert_array_equal(idx.numpy(), [[[[5, 7], [13, 15]]]])
    assert idx.dtype == ta.int64
    # The centre is the maximum of all four overlapping 2x2 windows: it gets all four gradients.
    x = ta.tensor(np.where(np.arange(9) == 4, 9.0, 1.0).reshape(1, 1, 3, 3), device=device, requires_grad=True)
    ta.max_pool2d(x, 2, stride=1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[0, 0, 0], [0, 4, 0], [0, 0, 0]])


# ---------------------------------------------------------------------------
# Contractions: float32 accumulation through gemm, forward and backward
# ---------------------------------------------------------------------------

def _emulated(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float16 inputs, float32 products and sums, one rounding."""
    return (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)


def test_matmul_float16_accumulates_in_float32(device: str) -> None:
    a = _t((8, 64), ta.float16, device, grad=True, seed=1)
    b = _t((64, 6), ta.float16, device, grad=True, seed=2)
    y = a @ b
    assert y.dtype == ta.float16
    a16, b16 = a.detach().numpy(), b.detach().numpy()
    np.testing.assert_array_equal(y.detach().numpy(), _emulated(a16, b16))
    np.testing.assert_array_equal(y.detach().numpy(), gemm(a16, b16))
    gy = _t((8, 6), ta.float16, device, seed=3)
    y.backward(gy)
    g16 = gy.numpy()
    np.testing.assert_array_equal(a.grad.numpy(), _emulated(g16, b16.T))
    np.testing.assert_array_equal(b.grad.numpy(), _emulated(a16.T, g16))


def test_long_float16_dot_is_not_float16_accumulated(device: str) -> None:
    ones = ta.ones(4096, dtype=ta.float16, device=device)
    assert (ones @ ones).item() == 4096.0  # a float16 running sum would stop at 2048


def test_linear_float16_adds_bias_before_the_one_rounding(device: str) -> None:
    x, w, b = (_t(s, ta.float16, device, seed=i) for i, s in enumerate([(5, 16), (3, 16), (3,)]))
    y = ta.linear(x, w, b)
    x16, w16, b16 = x.numpy(), w.numpy(), b.numpy()
    expected = (x16.astype(np.float32) @ w16.astype(np.float32).T + b16.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(y.numpy(), expected)


def test_linear_saves_exactly_x_and_w(device: str) -> None:
    x, w, b = _t((4, 3), device=device, grad=True), _t((2, 3), device=device, grad=True), _t((2,), device=device, grad=True)
    y = ta.linear(x, w, b)
    node = y.grad_fn
    saved = [tensor for tensor, _version in node._saved_in]
    assert len(saved) == 2 and saved[0] is x and saved[1] is w
    assert len(node._saved_out) == 0


@pytest.mark.parametrize("case", ["matmul", "linear", "conv2d"])
def test_contractions_reach_gemm_forward_and_backward(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list = []

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(kwargs)
        return gemm(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(linalg_module, "gemm", spy)
    monkeypatch.setattr(conv_module, "gemm", spy)
    if case == "matmul":
        a, b = _t((2, 3, 4), grad=True), _t((4, 5), grad=True)
        out = a @ b
    elif case == "linear":
        a, b = _t((3, 4), grad=True), _t((5, 4), grad=True)
        out = ta.linear(a, b)
    else:
        a, b = _t((2, 3, 5, 5), grad=True), _t((4, 3, 3, 3), grad=True)
        out = ta.conv2d(a, b, padding=1)
    assert len(calls) == 1
    out.sum().backward()
    assert len(calls) == 3  # one GEMM per operand gradient
    if case == "linear":
        assert calls[0].get("trans_b") is True  # x @ W^T without materialising W^T


# ---------------------------------------------------------------------------
# Shape-op behaviour the table does not show
# ---------------------------------------------------------------------------

def test_cat_promotes_and_returns_each_gradient_in_its_dtype(device: str) -> None:
    a = _t((2, 2), ta.float16, device, grad=True)
    b = _t((1, 2), ta.float32, device, grad=True)
    y = ta.cat([a, b])
    assert y.dtype == ta.float32 and y.shape == (3, 2)
    y.sum().backward()
    assert a.grad.dtype == ta.float16 and b.grad.dtype == ta.float32


def test_split_and_chunk_sizes(device: str) -> None:
    x = _t((7, 2), device=device)
    assert [p.shape[0] for p in ta.split(x, 3)] == [3, 3, 1]
    assert [p.shape[0] for p in x.chunk(4)] == [2, 2, 2, 1]
    assert [p.shape[0] for p in ta.chunk(_t((5,), device=device), 4)] == [2, 2, 1]  # fewer, as in PyTorch
    assert isinstance(ta.split(x, [7]), tuple)


def test_contiguous_is_the_same_tensor() -> None:
    x = _t((2, 3))
    assert x.contiguous() is x


def test_ops_run_under_autocast_and_return_float32_gradients(device: str) -> None:
    x = _t((2, 3, 5, 5), device=device, grad=True)
    w = _t((4, 3, 3, 3), device=device, grad=True)
    lw = _t((2, 4 * 5 * 5), device=device, grad=True)
    with ta.amp.autocast():
        h = ta.conv2d(x, w, padding=1)
        pooled = ta.max_pool2d(h, 2)
        y = ta.linear(ta.flatten(h, 1), lw)
    assert h.dtype == ta.float16 and pooled.dtype == ta.float16 and y.dtype == ta.float16
    (y.float().sum() + pooled.float().sum()).backward()
    assert x.grad.dtype == w.grad.dtype == lw.grad.dtype == ta.float32


# ---------------------------------------------------------------------------
# Properties over random shapes and keys
# ---------------------------------------------------------------------------

@st.composite
def _matmul_shapes(draw: st.DrawFn) -> tuple:
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    # Each operand keeps a suffix of the batch, with some dims set to 1 (broadcast).
    def own(b: list) -> tuple:
        keep = b[len(b) - draw(st.integers(0, len(b))):]
        return tuple(1 if draw(st.booleans()) else d for d in keep)
    a = (k,) if draw(st.integers(0, 4)) == 0 else own(batch) + (m, k)
    b = (k,) if draw(st.integers(0, 4)) == 0 else own(batch) + (k, n)
    return a, b


def _np_sum_to(g: np.ndarray, shape: tuple) -> np.ndarray:
    g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    return g.sum(axis=tuple(i for i, d in enumerate(shape) if d == 1), keepdims=True)


@given(_matmul_shapes())
def test_matmul_matches_numpy_on_random_shapes(shapes: tuple) -> None:
    rng = np.random.default_rng(0)
    a_np, b_np = (rng.standard_normal(s) for s in shapes)
    a, b = (ta.tensor(v, dtype=ta.float64, requires_grad=True) for v in (a_np, b_np))
    y = a @ b
    want = np.matmul(a_np, b_np)
    assert y.shape == want.shape
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    v = rng.standard_normal(want.shape)
    ga, gb = ta.autograd.grad(y, [a, b], ta.tensor(v, dtype=ta.float64))
    # The same gradients from the matrix forms: vectors as 1-row / 1-column matrices.
    a2 = a_np[None, :] if a_np.ndim == 1 else a_np
    b2 = b_np[:, None] if b_np.ndim == 1 else b_np
    v2 = v.reshape(np.matmul(a2, b2).shape)
    want_a = _np_sum_to(v2 @ np.swapaxes(b2, -1, -2), a2.shape).reshape(a_np.shape)
    want_b = _np_sum_to(np.swapaxes(a2, -1, -2) @ v2, b2.shape).reshape(b_np.shape)
    np.testing.assert_allclose(ga.numpy(), want_a, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb.numpy(), want_b, rtol=1e-12, atol=1e-12)


_slices = st.builds(slice, st.none() | st.integers(-5, 5), st.none() | st.integers(-5, 5),
                    st.none() | st.integers(-3, 3).filter(lambda s: s != 0))


@given(st.lists(_slices | st.integers(-3, 2) | st.just(None) | st.lists(st.integers(-3, 2), min_size=1, max_size=4),
                min_size=1, max_size=3))
def test_getitem_gradient_counts_each_use(items: list) -> None:
    shape = (3, 4, 5)
    key = tuple(np.array(k) if isinstance(k, list) else k for k in items)
    if sum(1 for k in key if k is not None) > len(shape):
        return
    ids = np.arange(60).reshape(shape)
    try:
        picked = ids[key]
    except IndexError:
        with pytest.raises(IndexError, match="getitem"):
            ta.zeros(shape)[key]
        return
    x = ta.zeros(shape, dtype=ta.float64, requires_grad=True)
    y = x[key]
    assert y.shape == picked.shape
    y.sum().backward()
    counts = np.bincount(picked.ravel(), minlength=60).reshape(shape)
    np.testing.assert_array_equal(x.grad.numpy(), counts)
