"""tinyamp's modules against PyTorch's recorded results (tests/support/module_cases.py, tests/support/module_references.npz).

Each case is the same code run with ``lib = tinyamp`` here and ``lib = torch``
(2.13.0) when the references were made (tests/support/make_module_references.py, not
run by the suite). Checked, in float64: the state_dict's keys and shapes
(PyTorch's parameter names, so state_dicts load), the outputs, and the
gradients of sum(output * cotangent) for the inputs and every parameter. Then
the output dtypes under ``autocast(float16)`` from float32 weights and inputs,
against PyTorch's CUDA autocast lists (``Case.amp``).
"""

from __future__ import annotations


import numpy as np
import pytest

import tinyamp as ta
from tests.support.module_cases import CASES, Case
from tests.support import SUPPORT

REFS = np.load(SUPPORT / "module_references.npz")
BY_NAME = {c.name: c for c in CASES}
# float64 on both sides: only the order of float64 roundings differs.
RTOL, ATOL = 1e-9, 1e-11


def _flatten(value: object) -> list:
    if value is None:
        return []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _flatten(v)]
    return [value]


def _host(t: "ta.Tensor") -> np.ndarray:
    return t.detach().cpu().numpy()


def _module(case: Case, dtype: object, device: str = "cpu") -> object:
    ta.manual_seed(case.seed)
    module = case.build(ta)
    if module is None:
        return None
    prefix = case.name + "/"
    module.train(case.train).to(device=device, dtype=dtype)
    keys = [str(k) for k in REFS[prefix + "keys"] if str(k)]
    state = module.state_dict()
    assert list(state.keys()) == keys, f"{case.name}: state_dict keys differ from PyTorch's"
    values = {}
    for key in keys:
        ref = REFS[prefix + "state/" + key]
        assert tuple(state[key].shape) == ref.shape, f"{case.name}: {key} {state[key].shape} vs {ref.shape}"
        values[key] = ta.tensor(ref, dtype=dtype if ref.dtype.kind == "f" else None, device=device)
    module.load_state_dict(values)
    return module


def _inputs(case: Case, dtype: object, device: str = "cpu") -> dict:
    prefix = case.name + "/in/"
    tensors = {}
    for key in REFS.files:
        if key.startswith(prefix):
            name = key[len(prefix):]
            array = REFS[key]
            t = ta.tensor(array, dtype=dtype if array.dtype.kind == "f" else None, device=device)
            if name in case.inputs and case.inputs[name][3]:
                t.requires_grad_()
            tensors[name] = t
    return tensors


@pytest.mark.parametrize("name", list(BY_NAME))
def test_outputs_and_gradients_match_pytorch(name: str, device: str) -> None:
    case = BY_NAME[name]
    prefix = name + "/"
    module = _module(case, ta.float64, device)
    tensors = _inputs(case, ta.float64, device)
    outs = _flatten(case.call(ta, module, tensors))
    assert len(outs) == len([k for k in REFS.files if k.startswith(prefix + "out/")])
    total = None
    for i, out in enumerate(outs):
        ref = REFS[prefix + f"out/{i}"]
        assert tuple(out.shape) == ref.shape, f"{name}: output {i} shape {out.shape} vs PyTorch {ref.shape}"
        np.testing.assert_allclose(_host(out), ref, rtol=RTOL, atol=ATOL, err_msg=f"{name} output {i}")
        if prefix + f"cot/{i}" in REFS.files:
            term = (out * ta.tensor(REFS[prefix + f"cot/{i}"], device=device)).sum()
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
            assert g is None or not np.any(_host(g)), f"{name}: {key} has a gradient PyTorch does not give"
            continue
        assert g is not None, f"{name}: no gradient for {key}"
        np.testing.assert_allclose(_host(g), REFS[ref_key], rtol=RTOL, atol=ATOL, err_msg=f"{name} grad {key}")


@pytest.mark.parametrize("name", [c.name for c in CASES if c.amp])
def test_autocast_output_dtypes_follow_pytorch_cuda_lists(name: str, device: str) -> None:
    case = BY_NAME[name]
    module = _module(case, ta.float32, device)
    tensors = _inputs(case, ta.float32, device)
    with ta.autocast(ta.device(device).type, dtype=ta.float16):
        outs = _flatten(case.call(ta, module, tensors))
    assert [str(o.dtype) for o in outs] == list(case.amp)
    # The float32 leaves get float32 gradients back through the casts.
    total = sum((o.float().sum() for o in outs if o.dtype in (ta.float16, ta.float32) and o.requires_grad),
                ta.tensor(0.0, device=device))
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


def test_channel_dropout_in_place_writes_its_input() -> None:
    ta.manual_seed(0)
    leaf = ta.ones(2, 3, 4, requires_grad=True)
    x = leaf * 1
    y = ta.nn.Dropout1d(0.5, inplace=True)(x)
    assert y is x
    y.sum().backward()
    np.testing.assert_array_equal(leaf.grad.numpy(), x.detach().numpy())


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


def test_multihead_attention_options_and_errors() -> None:
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        ta.nn.MultiheadAttention(6, 4)
    with pytest.raises(NotImplementedError, match="add_bias_kv and add_zero_attn"):
        ta.nn.MultiheadAttention(4, 2, add_bias_kv=True)
    mha = ta.nn.MultiheadAttention(4, 2, kdim=3)
    assert [n for n, _ in mha.named_parameters()] == ["q_proj_weight", "k_proj_weight", "v_proj_weight",
                                                      "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    q = ta.ones(2, 1, 4)
    with pytest.raises(AssertionError, match=r"expected embedding sizes query 4, key 3, value 4.*key \[2, 1, 4\]"):
        mha(q, q, q)
    mha = ta.nn.MultiheadAttention(4, 2)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        mha(q, q, q, is_causal=True)
    with pytest.raises(RuntimeError, match=r"shape of the attn_mask should be \[2, 2\] or \[2, 2, 2\], got \[3, 2\]"):
        mha(q, q, q, attn_mask=ta.zeros(3, 2))
    with pytest.raises(AssertionError, match=r"key_padding_mask of shape \[1, 2\], got \[2, 2\]"):
        mha(q, q, q, key_padding_mask=ta.zeros(2, 2, dtype=ta.bool))


def test_attention_dropout_only_in_training() -> None:
    ta.manual_seed(0)
    mha = ta.nn.MultiheadAttention(8, 2, dropout=0.5)
    x = ta.randn(5, 2, 8)
    eval_out, eval_w = mha.eval()(x, x, x)
    assert np.allclose(eval_w.detach().numpy().sum(-1), 1)
    train_out, train_w = mha.train()(x, x, x)
    assert not np.allclose(train_out.detach().numpy(), eval_out.detach().numpy())
    # PyTorch returns the weights after dropout: their rows no longer sum to 1.
    assert not np.allclose(train_w.detach().numpy().sum(-1), 1)


def test_transformer_stacks_hold_independent_copies() -> None:
    layer = ta.nn.TransformerEncoderLayer(8, 2, 16)
    stack = ta.nn.TransformerEncoder(layer, 3)
    weights = [m.linear1.weight for m in stack.layers]
    assert len({id(w) for w in weights}) == 3
    np.testing.assert_array_equal(weights[0].detach().numpy(), weights[2].detach().numpy())
    with ta.no_grad():
        weights[0].add_(1)
    assert not np.allclose(weights[0].detach().numpy(), weights[1].detach().numpy())
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        ta.nn.TransformerEncoderLayer(8, 2, activation="tanh")


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "transformer"])
def test_amp_training_steps_port_unchanged(kind: str, device: str) -> None:
    """pytorch/examples' word language model loop (and its Transformer variant) under autocast + GradScaler."""
    torch, nn = ta, ta.nn
    torch.manual_seed(0)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Embedding(20, 16)
            if kind == "transformer":
                self.body = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1), 2)
            else:
                self.body = getattr(nn, kind)(16, 16, num_layers=2, dropout=0.2)
            self.decoder = nn.Linear(16, 20)

        def forward(self, x: "ta.Tensor") -> "ta.Tensor":
            h = self.encoder(x)
            if kind == "transformer":
                mask = torch.triu(torch.full((x.shape[0], x.shape[0]), float("-inf"), device=x.device), diagonal=1)
                out = self.body(h, mask=mask, is_causal=True)
            else:
                out, _ = self.body(h)
            return self.decoder(out)

    kind_of_device = torch.device(device).type
    model = Model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=5.0)
    scaler = torch.amp.GradScaler(kind_of_device)
    data = torch.tensor(np.tile(np.arange(10), (4, 1)).T.copy(), device=device)  # (L=10, N=4): next token = +1
    losses = []
    for _ in range(15):
        opt.zero_grad()
        with torch.autocast(kind_of_device, dtype=torch.float16):
            logits = model(data[:-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, 20), data[1:].reshape(-1))
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert logits.dtype == torch.float16 and all(p.dtype == torch.float32 for p in model.parameters())
    assert losses[-1] < 0.8 * losses[0], losses


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_truncated_bptt_under_autocast_feeds_the_returned_state_back(device: str, kind: str, dtype: str) -> None:
    # The word-language-model loop: each chunk under autocast starts from the detached state the last chunk
    # returned (16-bit). PyTorch's autocast casts input, h0 and c0 together; the state's dtype does not matter.
    ta.manual_seed(0)
    low = getattr(ta, dtype)
    model = getattr(ta.nn, kind)(3, 4, num_layers=2).to(device)
    chunks = [ta.randn(5, 2, 3, device=device) for _ in range(3)]
    hidden = None
    for x in chunks:
        with ta.autocast(device.split(":")[0], dtype=low):
            out, hidden = model(x, hidden)
            loss = out.float().sum()
        loss.backward()
        assert out.dtype == low
        hidden = tuple(h.detach() for h in hidden) if kind == "LSTM" else hidden.detach()
        states = hidden if kind == "LSTM" else (hidden,)
        assert all(h.dtype == low for h in states)
    with ta.autocast(device.split(":")[0], dtype=low):  # a float32 state of the same values: the same result
        widened = tuple(h.float() for h in hidden) if kind == "LSTM" else hidden.float()
        again, _ = model(chunks[0], widened)
        once, _ = model(chunks[0], hidden)
    np.testing.assert_array_equal(_host(again.float()), _host(once.float()))
    with pytest.raises(RuntimeError, match=rf"{kind}: input and hidden state must have the same dtype, got input "
                                           rf"float32 and hidden state {dtype}$"):
        model(chunks[0], hidden)  # outside autocast the dtypes must match, as in PyTorch
    state64 = tuple(h.double() for h in hidden) if kind == "LSTM" else hidden.double()
    with pytest.raises(RuntimeError, match=r"hidden state float64 \(autocast casts float16, bfloat16 and float32 "
                                           r"states, never float64\)"):
        with ta.autocast(device.split(":")[0], dtype=low):
            model(chunks[0], state64)
