"""tinyamp.nn: Module registration and state, dtype conversion, init, clipping, layers."""

from __future__ import annotations

import math
import re
from collections import OrderedDict

import numpy as np
import pytest

import tinyamp as ta
import tinyamp.nn as nn
import tinyamp.nn.functional as F


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 3)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(3, 2, bias=False)
        self.scale = nn.Parameter(ta.ones(1))
        self.register_buffer("steps", ta.zeros((), dtype=ta.int64))
        self.register_buffer("cache", ta.zeros(2), persistent=False)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


# ------------------------------------------------------------ registration
def test_registration_and_traversal_order() -> None:
    net = Net()
    assert [n for n, _ in net.named_parameters()] == ["scale", "fc1.weight", "fc1.bias", "fc2.weight"]
    assert [n for n, _ in net.named_buffers()] == ["steps", "cache"]
    assert [n for n, _ in net.named_children()] == ["fc1", "act", "fc2"]
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "act", "fc2"]
    assert list(net.state_dict()) == ["scale", "steps", "fc1.weight", "fc1.bias", "fc2.weight"]
    assert [n for n, _ in net.named_parameters(recurse=False)] == ["scale"]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in net.parameters())
    assert net.fc2.bias is None and "bias" in net.fc2._parameters


def test_state_dict_is_detached_and_shares_memory() -> None:
    net = Net()
    sd = net.state_dict()
    weight = sd["fc1.weight"]
    assert not weight.requires_grad and not isinstance(weight, nn.Parameter)
    with ta.no_grad():
        net.fc1.weight.fill_(2.0)
    assert float(weight.array[0, 0]) == 2.0


def test_reassignment_rules() -> None:
    net = Net()
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'scale'"):
        net.scale = ta.ones(1)
    with pytest.raises(TypeError, match="cannot assign 'int' as child module 'fc1'"):
        net.fc1 = 3
    with pytest.raises(TypeError, match="cannot assign 'list' as buffer 'steps'"):
        net.steps = [1]
    net.fc1 = nn.Linear(4, 3)  # replacing a submodule keeps its place
    assert [n for n, _ in net.named_children()] == ["fc1", "act", "fc2"]
    net.scale = None
    assert "scale" not in dict(net.named_parameters())
    del net.act
    assert [n for n, _ in net.named_children()] == ["fc1", "fc2"]
    with pytest.raises(AttributeError, match="'Net' object has no attribute 'nothing'"):
        net.nothing


def test_parameter_before_init_is_an_error() -> None:
    class Bad(nn.Module):
        def __init__(self) -> None:
            self.w = nn.Parameter(ta.ones(1))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Bad()


def test_shared_parameters_are_listed_once() -> None:
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    b.weight = a.weight
    model = nn.Sequential(a, b, a)
    names = [n for n, _ in model.named_parameters()]
    assert names == ["0.weight", "0.bias", "1.bias"]
    assert len(list(model.parameters())) == 3
    assert len(list(model.modules())) == 3  # Sequential, a, b: a appears once
    # The state dict keeps every key, as PyTorch's does (tied weights saved under both names).
    assert list(model.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"]


def test_parameter_repr_and_sharing() -> None:
    t = ta.tensor([1.0, 2.0])
    p = nn.Parameter(t)
    assert repr(p) == "Parameter containing:\ntensor([1., 2.], requires_grad=True)"
    assert p.array is t.array and p.is_leaf
    assert not nn.Parameter(t, requires_grad=False).requires_grad


# ---------------------------------------------------------- load_state_dict
def test_load_state_dict_copies_in_place_with_dtype_conversion() -> None:
    net, other = Net(), Net()
    weight = net.fc1.weight
    version = weight._version[0]
    source = other.state_dict()
    source["fc1.weight"] = source["fc1.weight"].double()  # the load casts to the parameter's dtype
    result = net.load_state_dict(source)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"
    assert net.fc1.weight is weight and weight.dtype == ta.float32
    assert weight._version[0] > version
    np.testing.assert_array_equal(weight.detach().numpy(), other.fc1.weight.detach().numpy())


def test_load_state_dict_strict_lists_missing_and_unexpected_keys() -> None:
    net = Net()
    before = net.fc1.weight.detach().numpy().copy()
    source = Net().state_dict()
    del source["fc1.bias"], source["steps"]
    source["fc3.weight"] = ta.ones(2)
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(source)
    message = str(info.value)
    assert message.startswith("Error(s) in loading state_dict for Net:")
    assert 'Missing key(s) in state_dict: "steps", "fc1.bias".' in message
    assert 'Unexpected key(s) in state_dict: "fc3.weight".' in message
    assert message.index("Missing") < message.index("Unexpected")  # PyTorch's order
    # Nothing was copied: the load is all or nothing.
    np.testing.assert_array_equal(net.fc1.weight.detach().numpy(), before)
    result = net.load_state_dict(source, strict=False)
    assert result.missing_keys == ["steps", "fc1.bias"] and result.unexpected_keys == ["fc3.weight"]
    np.testing.assert_array_equal(net.fc1.weight.detach().numpy(), source["fc1.weight"].numpy())


def test_load_state_dict_size_mismatch_even_when_not_strict() -> None:
    model = nn.Sequential(OrderedDict(fc=nn.Linear(30, 10)))
    source = nn.Sequential(OrderedDict(fc=nn.Linear(20, 10))).state_dict()
    for strict in (True, False):
        with pytest.raises(RuntimeError, match=re.escape(
                "size mismatch for fc.weight: copying a param with shape [10, 20] from checkpoint, "
                "the shape in current model is [10, 30].")):
            model.load_state_dict(source, strict=strict)


# ---------------------------------------------------------- dtype and device
def test_half_and_float_keep_identity_and_convert_floating_only() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    params = list(model.parameters())
    weight = model[0].weight
    weight.grad = ta.ones(4, 3)
    version = weight._version[0]
    model.half()
    assert list(model.parameters()) == params and model[0].weight is weight
    assert all(p.dtype == ta.float16 for p in model.parameters())
    assert weight.grad.dtype == ta.float16 and weight._version[0] > version
    assert model[1].running_mean.dtype == ta.float16
    assert model[1].num_batches_tracked.dtype == ta.int64
    model.float()
    assert all(p.dtype == ta.float32 for p in model.parameters())
    assert model[1].num_batches_tracked.dtype == ta.int64
    model.to(ta.bfloat16)
    assert weight.dtype == ta.bfloat16
    model.double()
    assert weight.dtype == ta.float64
    with pytest.raises(TypeError, match="only accepts floating point dtypes"):
        model.to(ta.int32)


def test_half_keep_norm_fp32() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 4), nn.LayerNorm(4))
    model.half(keep_norm_fp32=True)
    dtypes = {name: p.dtype for name, p in model.named_parameters()}
    assert dtypes == {"0.weight": ta.float16, "0.bias": ta.float16, "1.weight": ta.float32,
                      "1.bias": ta.float32, "2.weight": ta.float16, "2.bias": ta.float16,
                      "3.weight": ta.float32, "3.bias": ta.float32}
    assert model[1].running_var.dtype == ta.float32


def test_to_same_dtype_is_a_no_op() -> None:
    model = nn.Linear(2, 2)
    data, version = model.weight.array, model.weight._version[0]
    model.to(ta.float32).to("cpu")
    assert model.weight.array is data and model.weight._version[0] == version


# -------------------------------------------------------------- modes etc.
def test_train_eval_propagate() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(0.5), nn.BatchNorm1d(2)))
    assert all(m.training for m in model.modules())
    assert model.eval() is model
    assert not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())
    model[1].train(False)
    assert model.training and not model[1][0].training
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        model.train("yes")


def test_zero_grad_apply_requires_grad() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    for p in model.parameters():
        p.grad = ta.ones(p.shape)
    model.zero_grad(set_to_none=False)
    assert all(float(p.grad.array.sum()) == 0.0 for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    seen = []
    model.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "Linear", "Sequential"]
    model.requires_grad_(False)
    assert not any(p.requires_grad for p in model.parameters())


def test_repr_snapshot() -> None:
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Sequential(nn.Linear(64, 10), nn.Dropout(0.1)),
        nn.CrossEntropyLoss(reduction="sum"),
    )
    assert repr(model) == """Sequential(
  (0): Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
  (1): BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
  (2): ReLU()
  (3): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)
  (4): Flatten(start_dim=1, end_dim=-1)
  (5): Sequential(
    (0): Linear(in_features=64, out_features=10, bias=True)
    (1): Dropout(p=0.1, inplace=False)
  )
  (6): CrossEntropyLoss(reduction='sum')
)"""


def test_forward_hooks() -> None:
    model = nn.Identity()
    calls = []
    handle = model.register_forward_hook(lambda m, args, out: calls.append(out) or out * 2)
    pre = model.register_forward_pre_hook(lambda m, args: (args[0] + 1,))
    out = model(ta.tensor(1.0))
    assert float(out) == 4.0 and float(calls[0]) == 2.0
    handle.remove()
    pre.remove()
    assert float(model(ta.tensor(1.0))) == 1.0


# ------------------------------------------------------------- containers
def test_sequential_indexing() -> None:
    layers = [nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1)]
    seq = nn.Sequential(*layers)
    assert len(seq) == 3 and seq[0] is layers[0] and seq[-1] is layers[2]
    assert list(seq) == layers
    sub = seq[1:]
    assert isinstance(sub, nn.Sequential) and list(sub) == layers[1:]
    seq.append(nn.Tanh())
    assert len(seq) == 4 and isinstance(seq[3], nn.Tanh)
    del seq[1]
    assert [n for n, _ in seq.named_children()] == ["0", "1", "2"] and seq[1] is layers[2]
    with pytest.raises(IndexError, match="index 5 is out of range for Sequential of length 3"):
        seq[5]
    named = nn.Sequential(OrderedDict(enc=nn.Linear(2, 2), act=nn.ReLU()))
    assert [n for n, _ in named.named_parameters()] == ["enc.weight", "enc.bias"]


def test_module_list_and_dict() -> None:
    blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    blocks.append(nn.Linear(2, 3))
    assert len(blocks) == 4 and len(list(blocks.parameters())) == 8
    assert [n for n, _ in blocks.named_parameters()][-1] == "3.bias"
    heads = nn.ModuleDict({"a": nn.Linear(2, 1), "b": nn.Linear(2, 2)})
    assert list(heads) == ["a", "b"] and "a" in heads
    heads["c"] = nn.Identity()
    assert list(heads.keys()) == ["a", "b", "c"]
    assert [n for n, _ in heads.named_parameters()] == ["a.weight", "a.bias", "b.weight", "b.bias"]


# ----------------------------------------------------------- input checks
def test_linear_wrong_input_size_names_the_module() -> None:
    layer = nn.Linear(784, 10)
    with pytest.raises(ValueError, match=re.escape(
            "Linear(in_features=784, out_features=10, bias=True): input of shape [32, 700] (float32) has 700 "
            "features in its last dimension, expected in_features=784")):
        layer(ta.zeros(32, 700))


def test_layer_input_checks() -> None:
    with pytest.raises(ValueError, match=r"BatchNorm2d\(8.*expected 8 channels in dimension 1.*\[2, 3, 4, 4\]"):
        nn.BatchNorm2d(8)(ta.zeros(2, 3, 4, 4))
    with pytest.raises(ValueError, match=r"expected 4D input \(got 2D input\).*shape \[2, 8\]"):
        nn.BatchNorm2d(8)(ta.zeros(2, 8))
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        nn.BatchNorm1d(8)(ta.zeros(1, 8))
    with pytest.raises(ValueError, match=r"Conv2d\(3, 4.*expected input of shape \(N, 3, H, W\).*\[1, 2, 5, 5\]"):
        nn.Conv2d(3, 4, 3)(ta.zeros(1, 2, 5, 5))
    with pytest.raises(ValueError, match=r"trailing shape \[5\], got \[2, 4\]"):
        nn.LayerNorm(5)(ta.zeros(2, 4))
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        nn.Dropout(1.5)
    with pytest.raises(ValueError, match="avg is not a valid value for reduction"):
        nn.MSELoss(reduction="avg")
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)


def test_functional_forwards_names_lazily() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'add'"):
        F.add
    assert "cross_entropy" in dir(F) and "relu" in F.__all__


# ------------------------------------------------------------------- init
def test_calculate_gain_and_fans() -> None:
    assert nn.init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert nn.init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert nn.init.calculate_gain("leaky_relu", math.sqrt(5)) == pytest.approx(math.sqrt(1 / 3))
    assert nn.init.calculate_gain("conv2d") == 1.0
    with pytest.raises(ValueError, match="Unsupported nonlinearity swish"):
        nn.init.calculate_gain("swish")
    assert nn.init._calculate_fan_in_and_fan_out(ta.empty(16, 3, 5, 5)) == (75, 400)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        nn.init._calculate_fan_in_and_fan_out(ta.empty(5))


# Samples are computed in float32 (u * 2b - b) and may round past the float64 bound by one float32 ulp.
F32_ROUNDING = 1 + 2.0**-23


def _uniform_var_tolerance(bound: float, n: int) -> float:
    # x ~ U(-b, b): Var(x^2) = b^4/5 - b^4/9 = 4 b^4 / 45; allow 6 standard errors of the mean of x^2.
    return 6 * math.sqrt(4 / 45) * bound**2 / math.sqrt(n)


@pytest.mark.parametrize("mode, nonlinearity", [("fan_in", "relu"), ("fan_out", "leaky_relu"),
                                                ("fan_in", "tanh")])
def test_kaiming_uniform_statistics(mode, nonlinearity) -> None:
    w = ta.empty(500, 200, 3, 3)  # fan_in 1800, fan_out 4500, 900k values
    nn.init.kaiming_uniform_(w, mode=mode, nonlinearity=nonlinearity)
    fan = 1800 if mode == "fan_in" else 4500
    bound = nn.init.calculate_gain(nonlinearity, 0) * math.sqrt(3 / fan)  # a=0: leaky_relu's gain is sqrt(2)
    values = w.numpy().astype(np.float64)
    assert np.abs(values).max() <= bound * F32_ROUNDING
    # The extremes of 900k uniform draws lie within 1e-4 of the bounds (probability of a miss ~ e^-45).
    assert values.max() > bound * (1 - 1e-4) and values.min() < -bound * (1 - 1e-4)
    assert abs(np.mean(values**2) - bound**2 / 3) < _uniform_var_tolerance(bound, values.size)


def test_normal_inits_statistics() -> None:
    n = 400 * 900
    w = ta.empty(400, 900)
    nn.init.kaiming_normal_(w, nonlinearity="relu")
    std = math.sqrt(2 / 900)
    # The sample variance of n normals has relative standard error sqrt(2/n); allow 6 of them.
    assert abs(w.numpy().var() / std**2 - 1) < 6 * math.sqrt(2 / n)
    assert abs(w.numpy().mean()) < 6 * std / math.sqrt(n)
    nn.init.xavier_normal_(w, gain=2.0)
    std = 2.0 * math.sqrt(2 / 1300)
    assert abs(w.numpy().var() / std**2 - 1) < 6 * math.sqrt(2 / n)
    nn.init.xavier_uniform_(w)
    bound = math.sqrt(6 / 1300)
    assert np.abs(w.numpy()).max() <= bound * F32_ROUNDING
    assert abs(np.mean(w.numpy().astype(np.float64) ** 2) - bound**2 / 3) < _uniform_var_tolerance(bound, n)


def test_init_draws_float32_then_rounds_once() -> None:
    half, single = ta.empty(64, 32, dtype=ta.float16), ta.empty(64, 32)
    nn.init.kaiming_uniform_(half, generator=ta.Generator().manual_seed(7))
    nn.init.kaiming_uniform_(single, generator=ta.Generator().manual_seed(7))
    np.testing.assert_array_equal(half.numpy(), single.numpy().astype(np.float16))
    nn.init.constant_(half, 0.1)
    assert half.numpy()[0, 0] == np.float16(0.1)
    nn.init.ones_(single)
    nn.init.zeros_(half)
    assert single.numpy().min() == 1.0 and half.numpy().max() == 0.0


def test_init_is_reproducible_under_manual_seed() -> None:
    ta.manual_seed(123)
    a = nn.Linear(5, 4)
    ta.manual_seed(123)
    b = nn.Linear(5, 4)
    np.testing.assert_array_equal(a.weight.detach().numpy(), b.weight.detach().numpy())
    np.testing.assert_array_equal(a.bias.detach().numpy(), b.bias.detach().numpy())
    c = nn.Linear(5, 4)
    assert not np.array_equal(a.weight.detach().numpy(), c.weight.detach().numpy())


@pytest.mark.parametrize("make, fan_in", [(lambda: nn.Linear(1000, 300), 1000),
                                          (lambda: nn.Conv2d(40, 600, 5), 1000)])
def test_default_layer_init_bounds(make, fan_in) -> None:
    layer = make()
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform_(a=sqrt(5)) gives gain sqrt(1/3): bound sqrt(1/3)*sqrt(3/fan_in)
    weight = layer.weight.detach().numpy()
    assert np.abs(weight).max() <= bound * F32_ROUNDING and np.abs(weight).max() > bound * (1 - 1e-3)
    assert abs(np.mean(weight.astype(np.float64) ** 2) - bound**2 / 3) < _uniform_var_tolerance(bound, weight.size)
    bias = layer.bias.detach().numpy()
    # 300+ uniform draws all below 90% of the bound: probability 0.9^300 ~ 2e-14.
    assert np.abs(bias).max() <= bound * F32_ROUNDING and np.abs(bias).max() > bound * 0.9
    assert layer.weight.dtype == ta.float32


def test_layer_dtype_argument() -> None:
    layer = nn.Linear(8, 4, dtype=ta.float16)
    assert layer.weight.dtype == ta.float16 and layer.bias.dtype == ta.float16
    assert np.abs(layer.weight.detach().numpy()).max() <= np.float16(1 / math.sqrt(8))


def test_embedding_init_and_padding_row() -> None:
    emb = nn.Embedding(1000, 64, padding_idx=-1)
    assert emb.padding_idx == 999
    weight = emb.weight.detach().numpy()
    assert np.all(weight[999] == 0)
    assert abs(weight[:999].std() - 1) < 0.02  # 64k N(0,1) draws: std error of std ~0.003


# ---------------------------------------------------------------- clipping
def _with_grads(*grads) -> list:
    params = []
    for g in grads:
        g = np.asarray(g)
        p = nn.Parameter(ta.zeros(g.shape, dtype=g.dtype))
        p.grad = ta.tensor(g)
        params.append(p)
    return params


def test_clip_grad_norm_against_hand_computation() -> None:
    params = _with_grads(np.array([3.0, 4.0], np.float32), np.array([[12.0]], np.float32))
    total = nn.utils.clip_grad_norm_(params, max_norm=6.5)
    assert total.dtype == ta.float32 and total.shape == ()
    assert float(total) == pytest.approx(13.0)  # sqrt(9 + 16 + 144)
    coef = 6.5 / (13.0 + 1e-6)
    np.testing.assert_allclose(params[0].grad.numpy(), [3 * coef, 4 * coef], rtol=1e-6)
    np.testing.assert_allclose(params[1].grad.numpy(), [[12 * coef]], rtol=1e-6)
    # Already below the limit: untouched (coefficient clamped to 1).
    params = _with_grads(np.array([0.3, 0.4], np.float32))
    assert float(nn.utils.clip_grad_norm_(params, 1.0)) == pytest.approx(0.5)
    np.testing.assert_array_equal(params[0].grad.numpy(), np.array([0.3, 0.4], np.float32))


def test_clip_grad_norm_inf_and_p_norms() -> None:
    params = _with_grads(np.array([1.0, -5.0], np.float32), np.array([2.0], np.float32))
    assert float(nn.utils.clip_grad_norm_(params, 10.0, norm_type="inf")) == 5.0
    params = _with_grads(np.array([1.0, -5.0], np.float32), np.array([2.0], np.float32))
    assert float(nn.utils.clip_grad_norm_(params, 100.0, norm_type=1)) == pytest.approx(8.0)
    params = _with_grads(np.array([1.0, -5.0], np.float32), np.array([2.0], np.float32))
    assert float(nn.utils.clip_grad_norm_(params, 1.0, norm_type=math.inf)) == 5.0
    np.testing.assert_allclose(params[0].grad.numpy(), [0.2, -1.0], rtol=1e-6)


def test_clip_grad_norm_float16_grads_in_float32() -> None:
    # sum of squares = 1000 * 300^2 = 9e7: overflows float16 (max 65504) but not float32.
    params = _with_grads(np.full(1000, 300.0, np.float16))
    total = nn.utils.clip_grad_norm_(params, max_norm=1.0)
    assert total.dtype == ta.float32
    assert float(total) == pytest.approx(300.0 * math.sqrt(1000), rel=1e-6)
    assert params[0].grad.dtype == ta.float16
    np.testing.assert_allclose(params[0].grad.numpy().astype(np.float32), 1 / math.sqrt(1000), rtol=1e-3)


def test_clip_grad_norm_nonfinite_and_empty() -> None:
    params = _with_grads(np.array([np.inf, 1.0], np.float32))
    with pytest.raises(RuntimeError, match="non-finite, so it cannot be clipped"):
        nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    assert float(nn.utils.clip_grad_norm_([nn.Parameter(ta.ones(2))], 1.0)) == 0.0


def test_clip_grad_value() -> None:
    params = _with_grads(np.array([-3.0, 0.5, 2.0], np.float32), np.array([1.5, -0.25], np.float16))
    nn.utils.clip_grad_value_(params, 1.0)
    np.testing.assert_array_equal(params[0].grad.numpy(), [-1.0, 0.5, 1.0])
    np.testing.assert_array_equal(params[1].grad.numpy(), np.array([1.0, -0.25], np.float16))
    assert params[1].grad.dtype == ta.float16


def test_vector_to_parameters() -> None:
    params = [nn.Parameter(ta.zeros(2, 2)), nn.Parameter(ta.zeros(3, dtype=ta.float16))]
    nn.utils.vector_to_parameters(ta.arange(7, dtype=ta.float32), params)
    np.testing.assert_array_equal(params[0].detach().numpy(), [[0, 1], [2, 3]])
    np.testing.assert_array_equal(params[1].detach().numpy(), np.array([4, 5, 6], np.float16))
    with pytest.raises(ValueError, match="vector has 5 elements, parameters hold 7"):
        nn.utils.vector_to_parameters(ta.zeros(5), params)


# ------------------------------------------------------- layers (forward)
def _np(t) -> np.ndarray:
    return t.detach().numpy().astype(np.float64)


def test_linear_forward_backward() -> None:
    layer = nn.Linear(5, 3)
    x = ta.randn(4, 5)
    y = layer(x)
    np.testing.assert_allclose(_np(y), _np(x) @ _np(layer.weight).T + _np(layer.bias), rtol=1e-5, atol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(_np(layer.weight.grad), np.ones((3, 4)) @ _np(x), rtol=1e-5)
    np.testing.assert_allclose(_np(layer.bias.grad), np.full(3, 4.0))
    nobias = nn.Linear(5, 3, bias=False)
    np.testing.assert_allclose(_np(nobias(x)), _np(x) @ _np(nobias.weight).T, rtol=1e-5, atol=1e-6)


def test_module_under_autocast_gets_float32_grads() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with ta.amp.autocast():
        out = model(ta.randn(3, 4))
        assert out.dtype == ta.float16
        loss = F.mse_loss(out, ta.zeros(3, 2, dtype=ta.float16))
    loss.backward()
    assert all(p.grad.dtype == ta.float32 for p in model.parameters())


def _norm_model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8), nn.LayerNorm(8),
                         nn.Linear(8, 2))


def test_halved_model_with_float32_norms_runs_forward_and_backward() -> None:
    reference, model = _norm_model(), _norm_model()
    model.load_state_dict(reference.state_dict())
    model.half(keep_norm_fp32=True)
    x = ta.randn(16, 4)
    out = model(x.half())
    assert out.dtype == ta.float16
    # Only float16 rounding separates the two (weights, activations, outputs ~ 2^-11 relative each).
    np.testing.assert_allclose(_np(out), _np(reference(x)), rtol=2e-2, atol=2e-2)
    out.float().sum().backward()
    for name, p in model.named_parameters():
        expected = ta.float32 if name.startswith(("1.", "4.")) else ta.float16
        assert p.dtype == expected and p.grad.dtype == expected, name
        assert np.isfinite(_np(p.grad)).all() and np.abs(_np(p.grad)).sum() > 0, name
    assert model[1].running_mean.dtype == ta.float32 and float(model[1].num_batches_tracked) == 1


def test_batchnorm_running_statistics() -> None:
    bn = nn.BatchNorm1d(3)
    x = ta.randn(10, 3) * 2 + 1
    xs = _np(x)
    y = bn(x)
    np.testing.assert_allclose(_np(y), (xs - xs.mean(0)) / np.sqrt(xs.var(0) + 1e-5), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(bn.running_mean), 0.1 * xs.mean(0), rtol=1e-5)
    np.testing.assert_allclose(_np(bn.running_var), 0.9 + 0.1 * xs.var(0, ddof=1), rtol=1e-5)
    assert int(bn.num_batches_tracked) == 1 and bn.num_batches_tracked.dtype == ta.int64
    bn.eval()
    z = ta.randn(4, 3)
    expected = (_np(z) - _np(bn.running_mean)) / np.sqrt(_np(bn.running_var) + 1e-5)
    np.testing.assert_allclose(_np(bn(z)), expected, rtol=1e-4, atol=1e-5)
    assert int(bn.num_batches_tracked) == 1  # eval leaves the statistics alone


def test_batchnorm_cumulative_average_and_untracked() -> None:
    bn = nn.BatchNorm2d(2, momentum=None)
    a, b = ta.randn(4, 2, 3, 3), ta.randn(4, 2, 3, 3) + 3
    bn(a)
    bn(b)
    means = [_np(t).mean(axis=(0, 2, 3)) for t in (a, b)]
    np.testing.assert_allclose(_np(bn.running_mean), (means[0] + means[1]) / 2, rtol=1e-5)
    free = nn.BatchNorm2d(2, affine=False, track_running_stats=False).eval()
    assert free.running_mean is None and list(free.state_dict()) == []
    out = _np(free(b))
    np.testing.assert_allclose(out.mean(axis=(0, 2, 3)), 0, atol=1e-5)  # batch statistics even in eval


def test_layernorm_forward() -> None:
    ln = nn.LayerNorm((2, 3))
    with ta.no_grad():
        ln.weight.copy_(ta.tensor([[1.0, 2.0, 3.0], [0.5, 1.0, -1.0]]))
    x = ta.randn(5, 2, 3)
    xs = _np(x).reshape(5, 6)
    expected = ((xs - xs.mean(1, keepdims=True)) / np.sqrt(xs.var(1, keepdims=True) + 1e-5)).reshape(5, 2, 3)
    np.testing.assert_allclose(_np(ln(x)), expected * _np(ln.weight), rtol=1e-4, atol=1e-5)


def test_conv_pool_flatten_shapes_and_values() -> None:
    conv = nn.Conv2d(2, 3, 3, stride=1, padding=1)
    x = ta.randn(2, 2, 6, 6)
    y = conv(x)
    assert y.shape == (2, 3, 6, 6)
    np.testing.assert_array_equal(_np(y), _np(F.conv2d(x, conv.weight, conv.bias, 1, 1)))
    # One output pixel by hand: the 3x3 window at (0, 0) with zero padding.
    window = np.pad(_np(x), ((0, 0), (0, 0), (1, 1), (1, 1)))[0, :, 0:3, 0:3]
    expected = (window * _np(conv.weight)[1]).sum() + _np(conv.bias)[1]
    assert _np(y)[0, 1, 0, 0] == pytest.approx(expected, rel=1e-5)
    assert nn.Conv2d(2, 3, 4, padding="same")(x).shape == (2, 3, 6, 6)
    assert nn.Conv2d(2, 4, 3, stride=2, groups=2, bias=False)(x).shape == (2, 4, 2, 2)
    pooled = nn.MaxPool2d(2)(x)
    np.testing.assert_array_equal(_np(pooled), _np(x).reshape(2, 2, 3, 2, 3, 2).max(axis=(3, 5)))
    averaged = nn.AvgPool2d(3)(x)
    np.testing.assert_allclose(_np(averaged), _np(x).reshape(2, 2, 2, 3, 2, 3).mean(axis=(3, 5)), rtol=1e-5)
    assert nn.Flatten()(x).shape == (2, 72) and nn.Flatten(0, 1)(x).shape == (4, 6, 6)


def test_activation_modules() -> None:
    x = ta.tensor([-2.0, -0.5, 0.0, 1.5])
    xs = _np(x)
    np.testing.assert_allclose(_np(nn.ReLU()(x)), np.maximum(xs, 0))
    np.testing.assert_allclose(_np(nn.LeakyReLU(0.1)(x)), np.where(xs > 0, xs, 0.1 * xs), rtol=1e-6)
    np.testing.assert_allclose(_np(nn.Tanh()(x)), np.tanh(xs), rtol=1e-6)
    np.testing.assert_allclose(_np(nn.Sigmoid()(x)), 1 / (1 + np.exp(-xs)), rtol=1e-6)
    gelu = xs * 0.5 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in xs]))
    np.testing.assert_allclose(_np(nn.GELU()(x)), gelu, rtol=1e-5, atol=1e-7)
    soft = np.exp(xs) / np.exp(xs).sum()
    np.testing.assert_allclose(_np(nn.Softmax(dim=0)(x)), soft, rtol=1e-6)
    np.testing.assert_allclose(_np(nn.LogSoftmax(dim=-1)(x)), np.log(soft), rtol=1e-5)
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        nn.GELU("fast")


def test_dropout_train_and_eval() -> None:
    drop = nn.Dropout(0.25)
    x = ta.ones(200, 100)
    out = _np(drop(x))
    kept = out != 0
    # 20000 Bernoulli(0.75): std of the kept fraction ~ 0.003; allow 6 of them.
    assert abs(kept.mean() - 0.75) < 0.02
    np.testing.assert_allclose(out[kept], 1 / 0.75, rtol=1e-6)
    drop.eval()
    np.testing.assert_array_equal(_np(drop(x)), _np(x))


def test_loss_modules_against_numpy() -> None:
    logits = ta.tensor([[2.0, 0.5, -1.0], [0.1, 0.2, 0.3]])
    target = ta.tensor([0, 2])
    ls = _np(logits)
    logp = ls - np.log(np.exp(ls).sum(1, keepdims=True))
    assert float(nn.CrossEntropyLoss()(logits, target)) == pytest.approx(-(logp[0, 0] + logp[1, 2]) / 2, rel=1e-6)
    assert float(nn.NLLLoss(reduction="sum")(ta.tensor(logp.astype(np.float32)), target)) == \
        pytest.approx(-(logp[0, 0] + logp[1, 2]), rel=1e-6)
    weighted = nn.CrossEntropyLoss(weight=ta.tensor([1.0, 1.0, 3.0]))
    assert "weight" in dict(weighted.named_buffers())
    assert float(weighted(logits, target)) == pytest.approx(-(logp[0, 0] + 3 * logp[1, 2]) / 4, rel=1e-6)
    a, b = ta.tensor([1.0, -2.0, 0.5]), ta.tensor([0.0, 1.0, 0.5])
    assert float(nn.MSELoss()(a, b)) == pytest.approx((1 + 9 + 0) / 3)
    assert float(nn.L1Loss(reduction="sum")(a, b)) == pytest.approx(4.0)
    p = 1 / (1 + np.exp(-_np(a)))
    bce = -(_np(b) * np.log(p) + (1 - _np(b)) * np.log(1 - p)).mean()
    assert float(nn.BCEWithLogitsLoss()(a, b)) == pytest.approx(bce, rel=1e-5)
    assert float(nn.BCELoss()(ta.tensor(p.astype(np.float32)), b)) == pytest.approx(bce, rel=1e-5)


def test_embedding_forward_and_padding_gradient() -> None:
    emb = nn.Embedding(5, 3, padding_idx=0)
    ids = ta.tensor([[0, 2], [2, 4]])
    out = emb(ids)
    np.testing.assert_array_equal(_np(out), _np(emb.weight)[[[0, 2], [2, 4]]])
    out.sum().backward()
    np.testing.assert_array_equal(_np(emb.weight.grad)[:, 0], [0, 0, 2, 0, 1])


def test_functional_is_the_op_library() -> None:
    assert F.relu is ta.ops.relu and F.cross_entropy is ta.ops.cross_entropy
    x = ta.randn(3, 4)
    np.testing.assert_array_equal(_np(F.dropout(x, 0.5, training=False)), _np(x))


def test_parameters_to_vector() -> None:
    model = nn.Linear(3, 2)
    vec = nn.utils.parameters_to_vector(model.parameters())
    assert vec.shape == (8,)
    np.testing.assert_array_equal(_np(vec), np.concatenate([_np(model.weight).ravel(), _np(model.bias)]))
    (vec * vec).sum().backward()
    np.testing.assert_allclose(_np(model.weight.grad), 2 * _np(model.weight), rtol=1e-6)


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")  # PyTorch warns the same
@pytest.mark.parametrize("shape", [(2, 0), (4, 2, 0), (0,)])
def test_linear_with_no_input_features_returns_the_bias(shape) -> None:
    # PyTorch: an empty sum is 0, so y = bias broadcast over the batch; dW is (out, 0).
    layer = nn.Linear(0, 3)
    with ta.no_grad():
        layer.bias.copy_(ta.tensor([1.5, -2.0, 0.25]))
    x = ta.zeros(*shape, requires_grad=True)
    y = layer(x)
    assert y.shape == shape[:-1] + (3,) and y.dtype == ta.float32
    np.testing.assert_array_equal(y.detach().numpy(), np.broadcast_to([1.5, -2.0, 0.25], y.shape))
    y.sum().backward()
    rows = int(np.prod(shape[:-1]))
    np.testing.assert_array_equal(layer.bias.grad.numpy(), [rows] * 3)
    assert layer.weight.grad.shape == (3, 0) and x.grad.shape == shape
    with ta.amp.autocast():
        low = layer(x)
    assert low.dtype == ta.float16
    np.testing.assert_array_equal(low.detach().float().numpy(), y.detach().numpy())


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
def test_linear_with_no_output_features_is_empty() -> None:
    layer = nn.Linear(3, 0)
    x = ta.ones(2, 3, requires_grad=True)
    y = layer(x)
    assert y.shape == (2, 0)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 3), np.float32))
