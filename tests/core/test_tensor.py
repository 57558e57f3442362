"""Tensor basics: construction, dtypes, the scalar rule, conversion, indexing, in-place ops."""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta


def test_factories_and_default_dtypes() -> None:
    assert ta.tensor([1.0, 2.0]).dtype == ta.float32
    assert ta.tensor([1, 2]).dtype == ta.int64
    assert ta.tensor([True]).dtype == ta.bool
    assert ta.tensor(np.zeros(2)).dtype == ta.float64  # NumPy arrays keep their dtype
    assert ta.zeros(2, 3).shape == (2, 3) and ta.zeros((2, 3)).dtype == ta.float32
    assert ta.ones(4, dtype=ta.float16).dtype == ta.float16
    assert ta.full((2,), 7).dtype == ta.int64 and ta.full((2,), 7.0).tolist() == [7.0, 7.0]
    assert ta.arange(5).tolist() == [0, 1, 2, 3, 4] and ta.arange(0, 1, 0.5).dtype == ta.float32
    assert ta.empty(3).shape == (3,)
    x = ta.ones(2, 3, dtype=ta.bfloat16)
    assert ta.zeros_like(x).dtype == ta.bfloat16 and ta.ones_like(x).shape == (2, 3)
    assert ta.full_like(x, 2.0).tolist() == [[2.0] * 3] * 2
    assert ta.randn(3, 4).dtype == ta.float32 and ta.rand(2, dtype=ta.float16).dtype == ta.float16
    r = ta.randint(0, 10, (100,))
    assert r.dtype == ta.int64 and 0 <= r.numpy().min() and r.numpy().max() < 10
    r = ta.randint(10, (100,))  # randint(high, size) given positionally, as nanoGPT's get_batch calls it
    assert r.shape == (100,) and 0 <= r.numpy().min() and r.numpy().max() < 10


def test_manual_seed_makes_random_reproducible() -> None:
    ta.manual_seed(123)
    a = ta.randn(5).numpy()
    ta.manual_seed(123)
    b = ta.randn(5).numpy()
    np.testing.assert_array_equal(a, b)
    g = ta.Generator().manual_seed(7)
    c = ta.rand(3, generator=g).numpy()
    g.manual_seed(7)
    np.testing.assert_array_equal(c, ta.rand(3, generator=g).numpy())


@pytest.mark.parametrize("dtype", [ta.float16, ta.bfloat16, ta.float32])
def test_python_scalars_never_change_dtype(dtype) -> None:
    x = ta.ones(3, dtype=dtype)
    for y in (x * 2.0, 2.0 * x, x + 1, x - 0.5, x / 3.0, 1.0 / x, x ** 2.0, -x):
        assert y.dtype == dtype
    assert (ta.tensor([1, 2]) * 0.5).dtype == ta.float32  # int tensor with a float scalar: float32
    assert (ta.tensor([1, 2]) * 2).dtype == ta.int64


def test_mixed_float_operands_promote_on_the_tape() -> None:
    a = ta.ones(2, dtype=ta.float16, requires_grad=True)
    b = ta.ones(2, dtype=ta.float32, requires_grad=True)
    y = a + b
    assert y.dtype == ta.float32
    y.sum().backward()
    assert a.grad.dtype == ta.float16 and b.grad.dtype == ta.float32
    # Neither 16-bit type holds the other; float32 holds both (PyTorch's promote_types).
    assert (ta.ones(2, dtype=ta.float16) + ta.ones(2, dtype=ta.bfloat16)).dtype == ta.float32


def test_properties_and_conversion() -> None:
    x = ta.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    assert x.shape == (2, 2) and x.ndim == 2 and x.numel() == 4 and x.is_leaf
    assert x.device == ta.device("cpu") and str(x.device) == "cpu"
    assert x.grad_fn is None and x.requires_grad
    with pytest.raises(RuntimeError, match="detach"):
        x.numpy()
    assert x.detach().numpy().tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert x.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert x.sum().item() == 10.0
    with pytest.raises(RuntimeError, match="4 elements"):
        x.item()
    h = x.half()
    assert h.dtype == ta.float16 and h.grad_fn is not None
    assert x.to(ta.bfloat16).dtype == ta.bfloat16 and x.to("float64").dtype == ta.float64
    assert x.float() is x
    c = x.clone()
    assert c.grad_fn is not None and c.array is not x.array
    d = x.detach()
    assert d.array is x.array and not d.requires_grad


def test_cast_gradient_returns_in_source_dtype() -> None:
    w = ta.tensor([1.0, 2.0], requires_grad=True)
    (w.half() * 3.0).sum().backward()
    assert w.grad.dtype == ta.float32
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 3.0])


def test_comparisons_give_bool_without_grad() -> None:
    x = ta.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for m in (x > 1.5, x >= 2.0, x < 2.0, x <= 2.0, x == 2.0, x != 2.0):
        assert m.dtype == ta.bool and m.grad_fn is None and not m.requires_grad
    assert (x > 1.5).tolist() == [False, True, True]


def test_inplace_ops_bump_the_version() -> None:
    x = ta.zeros(3)
    v = x._version[0]
    x.add_(1.0)
    x.mul_(3.0)
    x.add_(ta.ones(3), alpha=2.0)
    assert x.tolist() == [5.0, 5.0, 5.0]
    x.copy_(ta.tensor([1.0, 2.0, 3.0], dtype=ta.float64))
    assert x.dtype == ta.float32 and x.tolist() == [1.0, 2.0, 3.0]
    x.zero_()
    assert x.tolist() == [0.0, 0.0, 0.0]
    assert x._version[0] == v + 5
    with pytest.raises(RuntimeError, match="shape"):
        x.copy_(ta.ones(4))
    # PyTorch computes h.add_(f) in float32 and rounds into h; an int tensor never takes a float.
    h = ta.zeros(3, dtype=ta.float16).add_(ta.full((3,), 1 + 2.0 ** -11 + 2.0 ** -20))
    assert h.dtype == ta.float16 and h.tolist() == [1 + 2.0 ** -10] * 3  # one rounding, upward
    with pytest.raises(RuntimeError, match=r"add_: result type float32 can't be cast to the desired "
                                           r"output type int64"):
        ta.zeros(3, dtype=ta.int64).add_(ta.ones(3))


# In-place writes on 0-d results (issue 12, item 5). NumPy returns a 0-d result
# (a sum, a norm, one element) as an immutable scalar; a Tensor always holds an
# array, so these work as in PyTorch on every backend.
ZERO_D_WRITES = {
    "norm().clamp_": (lambda x: x.norm().clamp_(max=1.0), lambda a: min(np.sqrt((a * a).sum()), 1.0)),
    "sum().mul_": (lambda x: x.sum().mul_(2), lambda a: 2 * a.sum()),
    "sum().zero_": (lambda x: x.sum().zero_(), lambda a: 0.0),
    "sum().fill_": (lambda x: x.sum().fill_(3.5), lambda a: 3.5),
    "mean().add_": (lambda x: x.mean().add_(1), lambda a: a.mean() + 1),
    "amax().div_": (lambda x: x.amax().div_(4), lambda a: a.max() / 4),
    "sum().copy_": (lambda x: x.sum().copy_(ta.tensor(-2.0)), lambda a: -2.0),
    "(a0 * b0).sub_": (lambda x: (x[0, 0] * x[1, 1]).sub_(1), lambda a: a[0, 0] * a[1, 1] - 1),
    "sum()[()] = v": (lambda x: _assign_empty_key(x.sum(), 7.0), lambda a: 7.0),
}


def _assign_empty_key(t: ta.Tensor, value: float) -> ta.Tensor:
    t[()] = value
    return t


@pytest.mark.parametrize("name", list(ZERO_D_WRITES))
@pytest.mark.parametrize("dtype", [ta.float32, ta.float16])
def test_inplace_ops_on_a_0d_result(name: str, dtype: object, device: str) -> None:
    write, expected = ZERO_D_WRITES[name]
    values = np.array([[1.5, -2.0, 0.25], [3.0, 0.5, -1.0]])
    x = ta.tensor(values, dtype=dtype, device=device)
    out = write(x)
    assert out.shape == () and out.dtype == dtype
    # float16 rounds the stored result (a sum of 6 values near 2 is exact to 2**-9).
    assert float(out) == pytest.approx(float(expected(values.astype(np.float64))), abs=2.0 ** -8)
    assert out._version[0] == 1


def test_a_0d_write_is_seen_through_aliases_and_views() -> None:
    x = ta.tensor([[1.0, 2.0], [3.0, 4.0]])
    total = x.sum()
    alias = total.detach()            # shares the buffer, as in PyTorch
    total.mul_(2)
    assert alias.item() == 20.0
    x[0, 0].mul_(5)                   # one element is a 0-d view of x (PyTorch's x[0, 0])
    x[1][1].add_(1)
    assert x.tolist() == [[5.0, 2.0], [3.0, 5.0]]


def test_a_write_into_an_expanded_view_is_refused_as_in_pytorch() -> None:
    x = ta.ones(1, 3).expand(2, 3)
    with pytest.raises(RuntimeError, match=r"add_: unsupported operation: more than one element of the "
                                           r"written-to tensor \(shape \[2, 3\], an expanded view\)"):
        x.add_(1)
    with pytest.raises(RuntimeError, match=r"fill_: unsupported operation"):
        x.fill_(0)


def test_device_strings() -> None:
    assert ta.device("cpu").type == "cpu"
    with pytest.raises(ValueError, match="unknown device type"):
        ta.device("tpu")


@pytest.mark.skipif(ta.cuda.is_available(), reason="checks the no-GPU error")
def test_cuda_device_without_gpu_constructs_and_using_it_is_one_clear_error() -> None:
    cuda = ta.device("cuda")  # as torch.device("cuda") on a CPU-only build
    assert (cuda.type, cuda.index, str(cuda)) == ("cuda", 0, "cuda:0") and cuda == ta.device("cuda:0")
    assert ta.device("cuda:3").index == 3  # the index is checked on use, as in PyTorch
    with pytest.raises(RuntimeError, match="device 'cuda:0' requested but CUDA is unavailable") as info:
        ta.zeros(2, device=cuda)
    message = str(info.value)
    assert "pip install" in message or "driver" in message
    for use in (lambda: ta.zeros(2).to("cuda"), lambda: ta.tensor([1.0], device="cuda"),
                lambda: ta.randn(3, device=cuda), lambda: ta.zeros(2).cuda()):
        with pytest.raises(RuntimeError, match="CUDA is unavailable"):
            use()
    assert ta.cuda.is_available() is False


def test_cuda_device_index_is_checked_on_use(cuda_backend) -> None:
    count = ta.cuda.device_count()
    assert ta.zeros(1, device=f"cuda:{count - 1}").is_cuda
    with pytest.raises(RuntimeError, match=rf"device 'cuda:{count}' requested but only {count} CUDA device"):
        ta.zeros(1, device=f"cuda:{count}")


def test_devices_are_cached_values() -> None:
    assert ta.device("cuda:1") is ta.device("cuda", 1) is ta.Device(ta.device("cuda:1"))
    assert ta.device("cpu") is ta.device("cpu") and ta.device("cuda") is ta.device("cuda:0")
    import pickle  # noqa: PLC0415
    assert pickle.loads(pickle.dumps(ta.device("cuda:2"))) is ta.device("cuda:2")
    # Equal devices are one object, so they hash alike and key one dict entry.
    by_device = {ta.device("cuda:0"): "first", ta.device("cpu"): "host"}
    assert by_device[ta.device("cuda")] == "first" and by_device[ta.device("cpu", 0)] == "host"
    assert len({ta.device("cuda", 0), ta.device("cuda:0"), ta.Device("cuda")}) == 1
    assert ta.device("cuda:1") != ta.device("cuda:0") and ta.device("cpu") == "cpu"


def test_repr_shows_dtype_and_grad() -> None:
    x = ta.tensor([1.0, 2.0], dtype=ta.float16, requires_grad=True)
    assert "dtype=float16" in repr(x) and "requires_grad=True" in repr(x)
    assert "grad_fn=<MulBackward>" in repr(x * 2.0)


def test_numpy_scalars_defer_to_tensor() -> None:
    x = ta.ones(2, dtype=ta.float16)
    y = np.float32(2.0) * x
    assert isinstance(y, ta.Tensor)


# ------------------------------------------------------------ values a tensor cannot hold
SUPPORTED_NAMES = ("float64, float32, float16, bfloat16, int64, int32, int16, int8, uint64, uint32, uint16, "
                   "uint8, bool, float8_e4m3fn, float8_e5m2, and float8_e8m0fnu")


@pytest.mark.parametrize("data, error, message", [
    # PyTorch: TypeError "new(): invalid data type 'str'"
    ("abc", TypeError, "ta.tensor: invalid data type 'str'"),
    (["1.5", "2"], TypeError, "ta.tensor: invalid data type 'str'"),
    ([1.0, "a"], TypeError, "ta.tensor: invalid data type 'str'"),
    (b"raw", TypeError, "ta.tensor: invalid data type 'bytes'"),
    # PyTorch: RuntimeError "Could not infer dtype of NoneType"
    (None, RuntimeError, "ta.tensor: Could not infer dtype of NoneType"),
    ([1.0, None], RuntimeError, "ta.tensor: Could not infer dtype of NoneType"),
    ({"a": 1}, RuntimeError, "ta.tensor: Could not infer dtype of dict"),
    ([object()], RuntimeError, "ta.tensor: Could not infer dtype of object"),
    # PyTorch: RuntimeError "Overflow when unpacking long"
    ([1, 2 ** 70], RuntimeError, "ta.tensor: Overflow when unpacking long"),
    # PyTorch makes complex64 here; tinyamp has no complex dtypes.
    (1 + 2j, TypeError, "ta.tensor: complex numbers are not supported"),
    ([1.0, 2j], TypeError, "ta.tensor: complex numbers are not supported"),
    # PyTorch: TypeError "can't convert np.ndarray of type numpy.X. The only supported types are: ..."
    (np.array([1.0], dtype=np.longdouble), TypeError, "can't convert np.ndarray of type numpy.longdouble"),
    (np.longdouble(1.0), TypeError, "can't convert np.ndarray of type numpy.longdouble"),
    (np.array([1j]), TypeError, "can't convert np.ndarray of type numpy.complex128"),
    (np.array(["a"]), TypeError, r"can't convert np.ndarray of type numpy.str_"),
    (np.array([{}, 1], dtype=object), TypeError, "can't convert np.ndarray of type numpy.object_"),
    (np.array(["2020-01-01"], dtype="datetime64[D]"), TypeError, "of type numpy.datetime64"),
    (np.zeros(2, dtype=[("a", "f4")]), TypeError, "of type numpy.void"),
], ids=lambda v: type(v).__name__ if not isinstance(v, str) else v[:30])
def test_tensor_refuses_values_it_cannot_hold(data, error, message) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        ta.tensor(data)
    with pytest.raises(error, match="ta.tensor"):
        ta.as_tensor(data)


def test_every_array_refusal_lists_the_supported_dtypes() -> None:
    for make in (ta.tensor, ta.as_tensor, ta.from_numpy, ta.Tensor):
        with pytest.raises(TypeError) as info:
            make(np.array([1.0], dtype=np.longdouble))
        assert str(info.value).endswith(f"The only supported types are: {SUPPORTED_NAMES}.")


def test_text_is_refused_even_with_a_numeric_dtype() -> None:
    # NumPy would parse "1.5" as a number; PyTorch refuses text whatever the dtype.
    with pytest.raises(TypeError, match="invalid data type 'str'"):
        ta.tensor(["1.5"], dtype=ta.float32)


@pytest.mark.parametrize("dtype", [np.complex64, np.longdouble, object, np.str_])
def test_unsupported_dtype_arguments_are_refused(dtype) -> None:
    name = str(np.dtype(dtype))
    for make in (lambda: ta.tensor([1.0], dtype=dtype), lambda: ta.zeros(2, dtype=dtype),
                 lambda: ta.ones(2).to(dtype)):
        with pytest.raises(TypeError, match=rf"dtype {name} is not supported: tinyamp tensors are float64, "):
            make()


def test_supported_values_still_convert() -> None:
    assert ta.tensor(np.array([1, 2], np.uint16)).dtype == np.uint16
    assert ta.tensor([True, 2]).dtype == ta.int64
    big_endian = np.array([1.5, -2.0], dtype=">f4")
    converted = ta.tensor(big_endian)
    assert converted.dtype == ta.float32 and converted.dtype.isnative
    np.testing.assert_array_equal(converted.numpy(), [1.5, -2.0])
    with pytest.raises(ValueError, match="ta.tensor: nested sequences of different lengths"):
        ta.tensor([[1, 2], [3]])
