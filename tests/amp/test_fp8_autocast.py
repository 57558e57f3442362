"""``ta.amp.fp8_autocast``: nn.Linear's three GEMMs in fp8, the Cast nodes on the tape, the weight cache, state.

- the forward, input-gradient and weight-gradient GEMMs equal a NumPy
  reference written from the definitions, bit for bit (E4M3 input and weight,
  E5M2 output gradient under HYBRID; E4M3 everywhere under Format.E4M3);
- every quantisation is an ``Fp8Cast`` node (recorded, listed by the trace),
  the gradient's in the backward phase; everything else keeps the 16-bit rules;
- the module filter keeps the first and last Linear in 16 bits;
- the fp8 weight cache quantises a weight once per region and version, its
  entry holding codes and scale together;
- the quantiser state is in ``state_dict`` and a resumed run equals an
  uninterrupted one bit for bit (delayed scaling, an update still pending);
- no host synchronisation in an fp8 step; the stand-in computes the CPU's bits.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

import tinyamp as ta
from tinyamp import backend
from tinyamp.amp import recipe as R
from tinyamp.kernels import fp8
from tinyamp.ops.cast import Fp8Cast

BF16 = ta.bfloat16


def _bf16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32).astype(BF16)


def _quant(x: np.ndarray, f: fp8.Fp8Format) -> tuple:
    """(decoded codes, scale_inv) of current scaling, written out."""
    x32 = x.astype(np.float32)
    amax = np.float32(np.abs(x32).max())
    scale = np.float32(f.max) / amax
    codes = fp8.encode_reference(x32 * scale, f)
    return codes.view(f.dtype).astype(np.float32), np.float32(1) / scale


@pytest.mark.parametrize("fmt", [R.Format.HYBRID, R.Format.E4M3])
def test_linear_gemms_equal_the_numpy_reference(fmt: R.Format) -> None:
    rng = np.random.default_rng(0)
    layer = ta.nn.Linear(48, 24)
    x = ta.tensor(rng.standard_normal((2, 5, 48)).astype(np.float32), requires_grad=True)
    g = _bf16(rng.standard_normal((2, 5, 24)) * 1e-3)
    with ta.autocast(dtype=BF16):
        with ta.amp.fp8_autocast(fp8_recipe=R.Float8CurrentScaling(fp8_format=fmt)):
            y = layer(x)
    y.backward(ta.from_numpy(g))

    backward_fmt = fp8.E5M2 if fmt is R.Format.HYBRID else fp8.E4M3
    xv, xs = _quant(x.detach().numpy().reshape(10, 48), fp8.E4M3)
    wv, ws = _quant(layer.weight.detach().numpy(), fp8.E4M3)
    b16 = _bf16(layer.bias.detach().numpy())
    y_ref = _bf16(np.matmul(xv, wv.T) * (xs * ws) + b16.astype(np.float32))
    assert y.dtype == BF16
    np.testing.assert_array_equal(y.detach().numpy().reshape(10, 24).view(np.uint16), y_ref.view(np.uint16))
    gv, gs = _quant(g.reshape(10, 24), backward_fmt)
    dx = _bf16(np.matmul(gv, wv) * (gs * ws)).astype(np.float32)
    dw = _bf16(np.matmul(gv.T, xv) * (gs * xs)).astype(np.float32)
    np.testing.assert_array_equal(x.grad.numpy().reshape(10, 48), dx)
    np.testing.assert_array_equal(layer.weight.grad.numpy(), dw)
    db = _bf16(g.reshape(10, 24).astype(np.float32).sum(axis=0)).astype(np.float32)
    np.testing.assert_array_equal(layer.bias.grad.numpy(), db)
    assert layer._fp8_meta[1]["grad_output"].fmt is backward_fmt


def test_fp8_autocast_alone_stands_for_float32_values() -> None:
    """Without a 16-bit region around it the operands stand for float32: the GEMMs round once to float32."""
    rng = np.random.default_rng(1)
    layer = ta.nn.Linear(32, 16)
    x = ta.tensor(rng.standard_normal((6, 32)).astype(np.float32), requires_grad=True)
    g = (rng.standard_normal((6, 16)) * 1e-2).astype(np.float32)
    with ta.amp.fp8_autocast(fp8_recipe=R.Float8CurrentScaling()):
        y = layer(x)
    y.backward(ta.from_numpy(g))
    xv, xs = _quant(x.detach().numpy(), fp8.E4M3)
    wv, ws = _quant(layer.weight.detach().numpy(), fp8.E4M3)
    gv, gs = _quant(g, fp8.E5M2)
    assert y.dtype == ta.float32 and y.grad_fn.name == "fp8linear"
    np.testing.assert_array_equal(y.detach().numpy(), np.matmul(xv, wv.T) * (xs * ws) + layer.bias.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), np.matmul(gv, wv) * (gs * ws))
    np.testing.assert_array_equal(layer.weight.grad.numpy(), np.matmul(gv.T, xv) * (gs * xs))


def _model() -> ta.nn.Module:
    ta.manual_seed(0)
    return ta.nn.Sequential(ta.nn.Linear(32, 64), ta.nn.ReLU(), ta.nn.Linear(64, 64), ta.nn.GELU(),
                            ta.nn.Linear(64, 8))


def test_quantisations_are_cast_nodes_the_trace_lists_and_the_rest_keeps_16_bit_rules() -> None:
    model = _model()
    x = ta.randn(4, 32)
    with ta.amp.trace() as t:
        with ta.autocast(dtype=BF16):
            with ta.amp.fp8_autocast(fp8_recipe=R.DelayedScaling(amax_history_len=8)):
                y = model(x)
            loss = y.float().square().mean()
        assert isinstance(y.grad_fn, type(y.grad_fn)) and y.grad_fn.name == "fp8linear"
        assert all(isinstance(e[0], Fp8Cast) for e in y.grad_fn._edges[:2])
        loss.backward()
    forward = [op.name for op in t.ops if op.phase == "forward"]
    backward = [op.name for op in t.ops if op.phase == "backward"]
    assert forward.count("fp8_cast") == 6 and forward.count("fp8linear") == 3 and "linear" not in forward
    # one gradient quantisation per layer; dW for each, dx for all but the first (its input needs none)
    assert backward.count("fp8_cast") == 3 and backward.count("fp8_matmul") == 5
    for op in t.ops:
        if op.name in ("relu", "gelu"):
            assert op.outputs == ["bfloat16"]
    assert [p.grad.dtype for p in model.parameters()] == [ta.float32] * 6


def test_the_module_filter_keeps_first_and_last_layers_in_16_bits() -> None:
    model = _model()
    with ta.amp.trace() as t:
        with ta.autocast(dtype=BF16):
            with ta.amp.fp8_autocast(fp8_recipe=R.Float8CurrentScaling(),
                                     module_filter_fn=ta.amp.exclude_first_last(model)):
                model(ta.randn(4, 32))
    names = [op.name for op in t.ops]
    assert names.count("linear") == 2 and names.count("fp8linear") == 1
    assert "_fp8_meta" in model[2].__dict__ and "_fp8_meta" not in model[0].__dict__


def test_the_weight_cache_quantises_once_per_region_and_version(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = ta.nn.Linear(16, 16)
    recipe = R.DelayedScaling(amax_history_len=2)
    calls = []
    with ta.amp.fp8_autocast(fp8_recipe=recipe):
        layer(ta.randn(3, 16))
        quantizer = layer._fp8_meta[1]["weight"]
        original = quantizer.quantize
        monkeypatch.setattr(quantizer, "quantize", lambda *a, **k: calls.append(1) or original(*a, **k))
        out1 = layer(ta.randn(3, 16))
        w1 = out1.grad_fn._edges[1][0]
        assert calls == [] and w1.cached is not None  # a hit: the same codes with the same scale
        with ta.no_grad():
            layer.weight.mul_(2.0)  # a new version: quantised again
        out2 = layer(ta.randn(3, 16))
        assert calls == [1] and out2.grad_fn._edges[1][0].cached is None
    with ta.amp.fp8_autocast(fp8_recipe=recipe):  # a new region (new scales): quantised again
        layer(ta.randn(3, 16))
    assert calls == [1, 1]


def _train(model: ta.nn.Module, opt: ta.optim.Optimizer, recipe: R.Recipe, steps: range) -> list:
    losses = []
    for k in steps:
        rng = np.random.default_rng(k)
        x = ta.tensor(rng.standard_normal((8, 32)).astype(np.float32) * (1 + k))
        opt.zero_grad()
        with ta.autocast(dtype=BF16):
            with ta.amp.fp8_autocast(fp8_recipe=recipe):
                y = model(x)
            loss = y.float().square().mean()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def test_state_dict_holds_the_quantisers_and_resumes_exactly() -> None:
    recipe = R.DelayedScaling(amax_history_len=3, margin=1)
    whole = _model()
    whole_opt = ta.optim.SGD(whole.parameters(), lr=0.01, momentum=0.9)
    expected = _train(whole, whole_opt, recipe, range(6))

    first = _model()
    first_opt = ta.optim.SGD(first.parameters(), lr=0.01, momentum=0.9)
    got = _train(first, first_opt, recipe, range(3))
    buffer = io.BytesIO()
    ta.save({"model": first.state_dict(), "opt": first_opt.state_dict()}, buffer)
    state = first.state_dict()
    assert {"0._extra_state", "2._extra_state", "4._extra_state"} <= set(state)
    assert state["0._extra_state"]["fp8_recipe"] == "DelayedScaling"
    assert bool(state["0._extra_state"]["grad_output"]["update_pending"].numpy())  # a backward ran since

    R.PENDING_BACKWARD.clear()  # a new process: nothing pending but what the checkpoint says
    buffer.seek(0)
    checkpoint = ta.load(buffer)
    resumed = _model()
    resumed.load_state_dict(checkpoint["model"])
    resumed_opt = ta.optim.SGD(resumed.parameters(), lr=0.01, momentum=0.9)
    resumed_opt.load_state_dict(checkpoint["opt"])
    got += _train(resumed, resumed_opt, recipe, range(3, 6))
    assert got == expected
    for a, b in zip(resumed.parameters(), whole.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    R.update_pending_backward()  # the gradient scales' last updates (the next region's entry would make them)
    for a, b in zip(resumed.modules(), whole.modules()):
        if "_fp8_meta" in b.__dict__:
            for role in R.ROLES:
                qa, qb = a._fp8_meta[1][role], b._fp8_meta[1][role]
                np.testing.assert_array_equal(qa.scale, qb.scale)
                np.testing.assert_array_equal(qa.amax_history, qb.amax_history)


def test_plain_checkpoints_are_unchanged_and_bad_extra_state_is_refused() -> None:
    layer = ta.nn.Linear(4, 4)
    assert list(layer.state_dict()) == ["weight", "bias"]  # never run under fp8: PyTorch's keys
    with pytest.raises(RuntimeError, match="_extra_state must be a dict"):
        layer.load_state_dict({**layer.state_dict(), "_extra_state": 3})
    with ta.amp.fp8_autocast(fp8_recipe=R.Float8CurrentScaling()):
        layer(ta.randn(2, 4))
    state = layer.state_dict()
    other = ta.nn.Linear(4, 4)
    with ta.amp.fp8_autocast(fp8_recipe=R.DelayedScaling()):
        other(ta.randn(2, 4))
    with pytest.raises(RuntimeError, match="for Float8CurrentScaling, this layer runs DelayedScaling"):
        other.load_state_dict(state)


@pytest.mark.parametrize("recipe", [R.DelayedScaling(amax_history_len=4), R.Float8CurrentScaling(),
                                    R.Float8BlockScaling(block=16), R.MXFP8BlockScaling()],
                         ids=["delayed", "current", "block", "mxfp8"])
def test_an_fp8_step_has_no_host_sync_and_the_stand_in_computes_the_cpus_bits(recipe: R.Recipe) -> None:
    def step(device: str) -> list:
        model = _model().to(device)
        opt = ta.optim.SGD(model.parameters(), lr=0.01)
        x = ta.tensor(np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32), device=device)
        for _ in range(3):
            opt.zero_grad()
            with ta.autocast(dtype=BF16):
                with ta.amp.fp8_autocast(fp8_recipe=recipe):
                    y = model(x)
                loss = y.float().square().mean()
            before = backend.sync_count()
            loss.backward()
            opt.step()
            assert backend.sync_count() == before
        return [p.detach().cpu().numpy() for p in model.parameters()]

    cpu = step("cpu")
    with backend.use_cuda_standin():
        standin = step("cuda")
    for a, b in zip(cpu, standin):
        np.testing.assert_array_equal(a, b)


def test_region_arguments_and_state() -> None:
    with pytest.raises(TypeError, match="fp8_recipe must be"):
        ta.amp.fp8_autocast(fp8_recipe="delayed")
    with pytest.raises(ValueError, match="calibrating"):
        ta.amp.fp8_autocast(calibrating=True)
    with pytest.raises(ValueError, match="fp8_group"):
        ta.amp.fp8_autocast(fp8_group=object())
    assert not ta.amp.is_fp8_enabled()
    with ta.amp.fp8_autocast():
        assert ta.amp.is_fp8_enabled()
        assert isinstance(ta.amp.fp8_autocast().fp8_recipe, R.DelayedScaling)
        with ta.amp.fp8_autocast(enabled=False):
            assert not ta.amp.is_fp8_enabled()
    with pytest.raises(ValueError, match="must be one of"):
        ta.backends.fp8.accumulate = "fp16"
    assert ta.backends.fp8.accumulate == "fp32"


def test_second_derivatives_through_an_fp8_gemm_are_refused() -> None:
    layer = ta.nn.Linear(8, 8)
    x = ta.randn(2, 8, requires_grad=True)
    with ta.amp.fp8_autocast(fp8_recipe=R.Float8CurrentScaling()):
        y = layer(x)
    (gx,) = ta.autograd.grad(y.square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="fp8_matmul: an fp8 GEMM has no second derivative"):
        gx.sum().backward()
