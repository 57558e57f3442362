"""``Tensor.data`` as PyTorch's: a detached Tensor on the same array, and what sees writes through it.

Reference values and semantics from PyTorch 2.13.0 (CPU), recorded as literals.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tinyamp as ta
from tinyamp import nn

F32 = np.float32
# rng = np.random.default_rng(0); e, q = rng.standard_normal(6), rng.standard_normal(6) (float32)
E = np.array([0.1257302165031433, -0.13210485875606537, 0.6404226422309875, 0.10490011423826218,
              -0.5356693863868713, 0.3615950644016266], F32)
Q = np.array([1.3040000200271606, 0.9470809698104858, -0.7037352323532104, -1.2654215097427368,
              -0.6232744455337524, 0.04132597893476486], F32)


def _bits(t: ta.Tensor) -> list:
    return t.detach().numpy().view(np.uint32).tolist()


def test_data_is_a_detached_plain_tensor_on_the_same_array() -> None:
    p = nn.Parameter(ta.tensor([1.0, 2.0, 3.0]))
    d = p.data
    assert type(d) is ta.Tensor and not d.requires_grad and d.grad_fn is None and d.is_leaf
    assert d.array is p.array and d.grad is None
    y = p * 2
    assert y.data.grad_fn is None and not y.data.requires_grad and y.data.array is y.array
    d.mul_(2)  # the write lands in p's array; p's version counter is not d's (PyTorch: p._version stays 0)
    assert p.tolist() == [2.0, 4.0, 6.0] and p._version[0] == 0 and d._version[0] == 1
    p.data[1] = 9.0
    assert p.tolist() == [2.0, 9.0, 6.0]


def test_writes_through_data_are_invisible_to_autograd_as_in_pytorch() -> None:
    x = ta.ones(3, requires_grad=True)
    y = (x * x).sum()
    x.data.mul_(3)        # PyTorch: no "modified by an inplace operation" error; backward reads the new values
    y.backward()
    assert x.grad.tolist() == [6.0, 6.0, 6.0]
    x = ta.ones(3, requires_grad=True)
    y = (x * x).sum()
    x.data = ta.full((3,), 5.0)
    y.backward()
    assert x.grad.tolist() == [10.0, 10.0, 10.0]


def test_setting_data_shares_the_new_tensors_array_and_refuses_other_types() -> None:
    p = nn.Parameter(ta.ones(3))
    t = ta.zeros(2, 5)
    p.data = t  # another shape is allowed, as in PyTorch
    assert p.shape == (2, 5) and p.array is t.array and p.requires_grad and p.is_leaf
    t.add_(1.0)
    assert p.sum().item() == 10.0  # they share storage
    with pytest.raises(TypeError, match="Variable data has to be a tensor, but got ndarray.*ta.from_numpy"):
        p.data = np.zeros(3, F32)
    with pytest.raises(TypeError, match="Variable data has to be a tensor, but got int"):
        p.data = 3
    with pytest.raises(RuntimeError, match="data set to a tensor that requires gradients must be floating point"):
        p.data = ta.zeros(3, dtype=ta.int64)


def test_pytorch_update_idioms_written_with_data() -> None:
    # EMA (SWA docs, diffusers, MoCo, BYOL): same bits as PyTorch
    ema, p = ta.tensor(E), nn.Parameter(ta.tensor(Q))
    d = 0.999
    ema.data.mul_(d).add_(p.data, alpha=1 - d)
    assert _bits(ema) == [1040315468, 3188075416, 1059297958, 1037305710, 3205048159, 1052309763]
    # a blend assigned to .data (MoCo's momentum encoder): same bits as PyTorch, p stays a leaf parameter
    a, b = nn.Parameter(ta.tensor(E)), nn.Parameter(ta.tensor(Q))
    a.data = a.data * 0.9 + b.data * (1 - 0.9)
    assert _bits(a) == [1048143630, 3167101512, 1057065386, 3171130598, 3205193666, 1051245864]
    assert a.requires_grad and a.is_leaf and a.grad_fn is None
    # the deprecated add_(alpha, other) of old SGD code: accepted with PyTorch's warning
    w = nn.Parameter(ta.tensor(E))
    w.grad = ta.tensor(Q)
    with pytest.warns(UserWarning, match=r"This overload of add_ is deprecated:\n\tadd_\(Number alpha, Tensor other\)"):
        w.data.add_(-0.1, w.grad)
    torch_bits = np.array([3147367684, 3194503592, 1060501181, 1047330612, 3203553760, 1052181842], np.uint32)
    # PyTorch's vectorised CPU kernel fuses alpha * other into the add (one rounding) on some
    # elements; tinyamp rounds alpha * other first: they differ by at most half an ulp of that product.
    np.testing.assert_allclose(w.detach().numpy(), torch_bits.view(F32), rtol=0,
                               atol=float(np.max(np.spacing(np.abs(F32(0.1) * Q)))))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w.data.sub_(w.grad, alpha=0.5)  # the current signature warns nothing


def test_fairseq_fp16_optimizer_copies_through_data() -> None:
    # fairseq's FP16Optimizer: p32.data.copy_(p16.data.float()) and back
    p16 = nn.Parameter(ta.tensor([1 / 3, 65504.0, 1e-5, -2.5], dtype=ta.float16))
    p32 = nn.Parameter(ta.zeros(4))
    assert p16.data.float().dtype == ta.float32 and p16.data.float().shape == (4,)
    p32.data.copy_(p16.data.float())
    np.testing.assert_array_equal(p32.detach().numpy(), p16.detach().numpy().astype(F32))
    p32.data.mul_(2.0)
    p16.data.copy_(p32.data)  # rounded into float16 (65504 * 2 overflows to inf, as PyTorch's copy_)
    assert p16.detach().numpy().tolist()[1] == float("inf") and p16.dtype == ta.float16
    assert p16.detach().numpy()[3] == -5.0


@pytest.mark.parametrize("route", ["mul_", "index", "copy_", "assign", "assign_expression"])
def test_a_write_through_data_is_seen_by_the_next_autocast_forward(route) -> None:
    layer = nn.Linear(4, 3)
    x = ta.ones(2, 4)
    with ta.autocast("cpu"):
        first = layer(x)
    assert first.dtype == ta.float16 and float(first.abs().sum()) > 0
    weight = layer.weight
    if route == "mul_":
        weight.data.mul_(0.0)
    elif route == "index":
        weight.data[...] = 0.0
    elif route == "copy_":
        weight.data.copy_(ta.zeros(3, 4))
    elif route == "assign":
        weight.data = ta.zeros(3, 4)
    else:
        weight.data = weight.data * 0.0
    layer.bias.data.zero_()
    with ta.autocast("cpu"):
        second = layer(x)
    assert second.tolist() == [[0.0] * 3] * 2  # not the float16 copy of the old weight


ROUTES = ["data_mul_", "data_copy_", "data_index", "data_assign", "data_assign_expression",
          "no_grad_copy_", "no_grad_mul_", "load_state_dict"]


def _write(route: str, model: nn.Linear) -> None:
    p = model.weight
    new = np.array([[0.5, -4.0, 8.0], [2.0, 16.0, -0.25]], np.float16)
    if route == "data_mul_":
        p.data.mul_(0.5)
    elif route == "data_copy_":
        p.data.copy_(ta.tensor(new))
    elif route == "data_index":
        p.data[0, 1] = 100.0
    elif route == "data_assign":
        p.data = ta.tensor(new, dtype=ta.float16)
    elif route == "data_assign_expression":
        p.data = p.data * 0.5
    elif route == "no_grad_copy_":
        with ta.no_grad():
            p.copy_(ta.tensor(new))
    elif route == "no_grad_mul_":
        with ta.no_grad():
            p.mul_(0.5)
    else:
        state = model.state_dict()
        model.load_state_dict({"weight": ta.tensor(new), "bias": state["bias"]})


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
@pytest.mark.parametrize("route", ROUTES)
def test_o2_a_write_to_a_parameter_reaches_its_float32_master(route, optimizer) -> None:
    model = nn.Linear(3, 2).half()
    opt = getattr(ta.optim, optimizer)(model.parameters(), lr=2.0 ** -6, master_weights=True)
    for p in model.parameters():
        p.grad = ta.ones(*p.shape, dtype=ta.float16)
    opt.step()  # the masters exist and hold the parameters
    master_before = opt.state[model.weight]["master_param"]
    old = master_before.detach().numpy().copy()
    _write(route, model)
    written = model.weight.detach().numpy().copy()
    assert not np.array_equal(written, old.astype(np.float16))
    opt.step()
    master = opt.state[model.weight]["master_param"]
    # one step (SGD, and Adam with constant gradients: minus lr) from the written values; elements
    # the write left alone keep their float32 master bits
    expected = np.where(written != old.astype(np.float16), written.astype(F32), old) - F32(2.0 ** -6)
    np.testing.assert_array_equal(master.detach().numpy(), expected)
    np.testing.assert_array_equal(model.weight.detach().numpy(), expected.astype(np.float16))
    assert master is master_before


def test_o2_a_parameter_given_another_shape_through_data_gets_a_new_master() -> None:
    p = nn.Parameter(ta.ones(3, dtype=ta.float16))
    opt = ta.optim.SGD([p], lr=0.5, master_weights=True)
    p.grad = ta.ones(3, dtype=ta.float16)
    opt.step()
    p.data = ta.full((2, 2), 4.0, dtype=ta.float16)
    p.grad = ta.ones(2, 2, dtype=ta.float16)
    opt.step()
    assert opt.state[p]["master_param"].shape == (2, 2)
    assert p.tolist() == [[3.5, 3.5], [3.5, 3.5]]


def test_o2_a_write_keeps_the_float32_bits_of_elements_it_left_alone() -> None:
    p = nn.Parameter(ta.ones(3, dtype=ta.float16))
    opt = ta.optim.SGD([p], lr=1e-4, master_weights=True)
    p.grad = ta.ones(3, dtype=ta.float16)
    opt.step()  # master 1 - 1e-4: below half an ulp of float16's 1.0, p stays 1
    p.data[1] = 5.0
    opt.step()
    master = opt.state[p]["master_param"].detach().numpy()
    step = F32(1e-4)
    np.testing.assert_array_equal(master, [(F32(1.0) - step) - step, F32(5.0) - step, (F32(1.0) - step) - step])


def test_an_unrecorded_indexing_view_shares_its_bases_version_as_in_pytorch() -> None:
    x = ta.ones(3, requires_grad=True)
    y = (x * x).sum()
    with ta.no_grad():
        x[0].mul_(2)
    assert x._version[0] == 1  # PyTorch 2.13: 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    t = ta.ones(2, 3)
    t[0].add_(1)
    d = t.data
    d[1].add_(1)
    assert t._version[0] == 1 and d._version[0] == 1  # PyTorch 2.13: 1 and 1
    t[[0, 1]].add_(1)  # advanced indexing makes a copy: t is not written
    assert t._version[0] == 1 and t.sum().item() == 12.0


@pytest.mark.parametrize("route", ["no_grad_view", "data_view"])
def test_a_write_into_an_indexing_view_reaches_the_cache_and_the_o2_master(route) -> None:
    layer = nn.Linear(2, 2)
    x = ta.ones(1, 2)
    with ta.autocast("cpu"):
        layer(x)
    if route == "no_grad_view":
        with ta.no_grad():
            layer.weight[0].zero_()
    else:
        layer.weight.data[0].zero_()
    with ta.autocast("cpu"):
        out = layer(x)
    assert out[0, 0].item() == np.float16(layer.bias[0].item())  # row 0 of the weight is zero now
    model = nn.Linear(2, 2).half()
    opt = ta.optim.SGD(model.parameters(), lr=0.0, master_weights=True)
    for p in model.parameters():
        p.grad = ta.zeros(*p.shape, dtype=ta.float16)
    opt.step()
    if route == "no_grad_view":
        with ta.no_grad():
            model.weight[0].fill_(3.0)
    else:
        model.weight.data[0].fill_(3.0)
    opt.step()
    assert model.weight[0].tolist() == [3.0, 3.0]
    assert opt.state[model.weight]["master_param"][0].tolist() == [3.0, 3.0]
