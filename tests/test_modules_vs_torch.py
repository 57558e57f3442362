"""tinyamp's modules against PyTorch's recorded results (tests/module_cases.py, tests/module_references.npz).

Each case is the same code run with ``lib = tinyamp`` here and ``lib = torch``
(2.13.0) when the references were made (tests/make_module_references.py, not
run by the suite). Checked, in float64: the state_dict's keys and shapes
(PyTorch's parameter names, so state_dicts load), the outputs, and the
gradients of sum(output * cotangent) for the inputs and every parameter. Then
the output dtypes under ``autocast(float16)`` from float32 weights and inputs,
against PyTorch's CUDA autocast lists (``Case.amp``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tinyamp as ta
from module_cases import CASES, Case

REFS = np.load(Path(__file__).parent / "module_references.npz")
BY_NAME = {c.name: c for c in CASES}
# float64 on both sides: only the order of float64 roundings differs.
RTOL, ATOL = 1e-9, 1e-11


def _flatten(value: object) -> list:
    if value is None:
        return []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _flatten(v)]
    return [value]


def _module(case: Case, dtype: object) -> object:
    ta.manual_seed(case.seed)
    module = case.build(ta)
    if module is None:
        return None
    prefix = case.name + "/"
    module.train(case.train).to(dtype)
    keys = [str(k) for k in REFS[prefix + "keys"] if str(k)]
    state = module.state_dict()
    assert list(state.keys()) == keys, f"{case.name}: state_dict keys differ from PyTorch's"
    values = {}
    for key in keys:
        ref = REFS[prefix + "state/" + key]
        assert tuple(state[key].shape) == ref.shape, f"{case.name}: {key} {state[key].shape} vs {ref.shape}"
        values[key] = ta.tensor(ref, dtype=dtype if ref.dtype.kind == "f" else None)
    module.load_state_dict(values)
    return module


def _inputs(case: Case, dtype: object) -> dict:
    prefix = case.name + "/in/"
    tensors = {}
    for key in REFS.files:
        if key.startswith(prefix):
            name = key[len(prefix):]
            array = REFS[key]
            t = ta.tensor(array, dtype=dtype if array.dtype.kind == "f" else None)
            if name in case.inputs and case.inputs[name][3]:
                t.requires_grad_()
            tensors[name] = t
    return tensors


@pytest.mark.parametrize("name", list(BY_NAME))
def test_outputs_and_gradients_match_pytorch(name: str) -> None:
    case = BY_NAME[name]
    prefix = name + "/"
    module = _module(case, ta.float64)
    tensors = _inputs(case, ta.float64)
    outs = _flatten(case.call(ta, module, tensors))
    assert len(outs) == len([k for k in REFS.files if k.startswith(prefix + "out/")])
    total = None
    for i, out in enumerate(outs):
        ref = REFS[prefix + f"out/{i}"]
        assert tuple(out.shape) == ref.shape, f"{name}: output {i} shape {out.shape} vs PyTorch {ref.shape}"
        np.testing.assert_allclose(out.detach().numpy(), ref, rtol=RTOL, atol=ATOL, err_msg=f"{name} output {i}")
        if prefix + f"cot/{i}" in REFS.files:
            term = (out * ta.tensor(REFS[prefix + f"cot/{i}"])).sum()
            total = term if total is None else total + term
    if total is None:
        return
    params = dict(module.named_parameters()) if module is not None else {}
    leaves = {**{"in/" + k: t for k, t in tensors.items() if t.requires_grad},
              **{"param/" + k: p for k, p in params.items()}}
    grads = ta.autograd.grad(total, list(leaves.values()), allow_unused=True)
    for key, g in zip(leaves, grads):
        ref_key = prefix + "grad/" + key
        if ref_key not in REFS.files:
            assert g is None or not np.any(g.numpy()), f"{name}: {key} has a gradient PyTorch does not give"
            continue
        assert g is not None, f"{name}: no gradient for {key}"
        np.testing.assert_allclose(g.numpy(), REFS[ref_key], rtol=RTOL, atol=ATOL, err_msg=f"{name} grad {key}")


@pytest.mark.parametrize("name", [c.name for c in CASES if c.amp])
def test_autocast_output_dtypes_follow_pytorch_cuda_lists(name: str) -> None:
    case = BY_NAME[name]
    module = _module(case, ta.float32)
    tensors = _inputs(case, ta.float32)
    with ta.autocast("cpu", dtype=ta.float16):
        outs = _flatten(case.call(ta, module, tensors))
    assert [str(o.dtype) for o in outs] == list(case.amp)
    # The float32 leaves get float32 gradients back through the casts.
    total = sum((o.float().sum() for o in outs if o.dtype in (ta.float16, ta.float32) and o.requires_grad),
                ta.tensor(0.0))
    if total.requires_grad:
        total.backward()
        for p in ([] if module is None else module.parameters()):
            assert p.grad is None or p.grad.dtype == ta.float32


def test_references_were_made_by_torch_2_13() -> None:
    assert str(REFS["torch_version"]).startswith("2.13.0")


# ------------------------------------------------------------ no reference values needed
@pytest.mark.parametrize("cls, shape", [("Dropout2d", (4, 6, 3, 5)), ("Dropout2d", (6, 3, 5)),
                                        ("Dropout1d", (4, 6, 7)), ("Dropout1d", (6, 7))])
def test_channel_dropout_zeroes_whole_channels(cls: str, shape: tuple) -> None:
    ta.manual_seed(0)
    x = ta.ones(*shape, requires_grad=True)
    layer = getattr(ta.nn, cls)(p=0.4)
    y = layer(x)
    # PyTorch: a 3-D input to Dropout2d is (N, C, L), a 2-D one to Dropout1d is (C, L).
    rows = shape[0] * shape[1] if len(shape) >= 3 else shape[0]
    per_channel = y.detach().numpy().reshape(rows, -1)
    assert set(np.unique(per_channel)) <= {0.0, np.float32(1 / 0.6)}
    assert np.all(per_channel.min(-1) == per_channel.max(-1)), "a channel was partly dropped"
    assert 0 < np.count_nonzero(per_channel[:, 0]) < rows
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y.detach().numpy())
    assert layer.eval()(x) is x


def test_channel_dropout_refuses_other_ranks() -> None:
    with pytest.raises(RuntimeError, match=r"dropout1d: Expected 2D or 3D input.*\[2, 3, 4, 5\]"):
        ta.nn.functional.dropout1d(ta.ones(2, 3, 4, 5))
    with pytest.raises(RuntimeError, match=r"dropout2d: Expected 3D or 4D input"):
        ta.nn.functional.dropout2d(ta.ones(2, 3))


def test_batchnorm_base_class_at_pytorchs_path() -> None:
    from tinyamp.nn.modules.batchnorm import _BatchNorm
    model = ta.nn.Sequential(ta.nn.Conv2d(1, 2, 3), ta.nn.BatchNorm2d(2), ta.nn.Linear(2, 2), ta.nn.BatchNorm1d(2))
    found = [m for m in model.modules() if isinstance(m, ta.nn.modules.batchnorm._BatchNorm)]
    assert found == [model[1], model[3]] and _BatchNorm is ta.nn.modules.batchnorm._BatchNorm


def test_group_norm_and_huber_refuse_bad_input() -> None:
    with pytest.raises(ValueError, match=r"group_norm: .*divisible by num_groups.*\[2, 6, 3\].*num_groups=4"):
        ta.nn.functional.group_norm(ta.ones(2, 6, 3), 4)
    with pytest.raises(ValueError, match=r"GroupNorm.*\(N, 6, \*\).*\[2, 4, 3\]"):
        ta.nn.GroupNorm(2, 6)(ta.ones(2, 4, 3))
    with pytest.raises(ValueError, match=r"huber_loss: input shape \[3\] and target shape \[2\]"):
        ta.nn.functional.huber_loss(ta.ones(3), ta.ones(2))
    with pytest.raises(ValueError, match=r"huber_loss: Weights and input must have the same size"):
        ta.nn.functional.huber_loss(ta.ones(3), ta.ones(3), weight=ta.ones(2))
    with pytest.raises(ValueError, match="smooth_l1_loss: beta must be non-negative"):
        ta.nn.functional.smooth_l1_loss(ta.ones(3), ta.ones(3), beta=-1.0)


def test_recurrent_init_is_pytorchs_uniform() -> None:
    ta.manual_seed(0)
    for module in (ta.nn.LSTM(8, 16, num_layers=2, bidirectional=True), ta.nn.GRUCell(8, 16)):
        values = np.concatenate([p.detach().numpy().ravel() for p in module.parameters()])
        bound = 1 / np.sqrt(16)
        assert values.min() >= -bound and values.max() <= bound
        assert abs(values.std() - bound / np.sqrt(3)) < 0.01  # the std of U(-b, b)


def test_lstm_dropout_acts_between_layers_only_in_training() -> None:
    ta.manual_seed(0)
    lstm = ta.nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    x = ta.randn(5, 2, 3)
    eval_out = lstm.eval()(x)[0].detach().numpy()
    np.testing.assert_array_equal(lstm(x)[0].detach().numpy(), eval_out)
    assert not np.allclose(lstm.train()(x)[0].detach().numpy(), eval_out)
    single = ta.nn.LSTM(3, 4, num_layers=1, dropout=0.5)  # one layer: nothing to drop between
    np.testing.assert_array_equal(single.train()(x)[0].detach().numpy(), single.eval()(x)[0].detach().numpy())


def test_recurrent_layers_refuse_bad_input() -> None:
    lstm = ta.nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(RuntimeError, match=r"LSTM: input.size\(-1\) must be equal to input_size. Expected 3, got 5"):
        lstm(ta.ones(2, 1, 5))
    with pytest.raises(RuntimeError, match=r"LSTM: Expected hidden size \[2, 1, 4\], got \[1, 1, 4\]"):
        lstm(ta.ones(2, 1, 3), (ta.zeros(1, 1, 4), ta.zeros(2, 1, 4)))
    with pytest.raises(ValueError, match="LSTM: input must have the type float32, got type float64"):
        lstm(ta.ones(2, 1, 3, dtype=ta.float64))
    with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM"):
        ta.nn.RNNBase("GRU", 3, 4, proj_size=2)
    with pytest.raises(ValueError, match=r"GRUCell: Expected input of shape \(N, 3\)"):
        ta.nn.GRUCell(3, 4)(ta.ones(2, 5))
    lstm.flatten_parameters()  # PyTorch code calls it; nothing to do here
