"""Unit tests for ta.amp.GradScaler: arguments, scale/unscale_/step/update, the state
machine and its errors, the scale rule (hysteresis, bounds), state dicts, bfloat16
auto-disabling and the host-synchronisation count of a training step.
"""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.amp import AmpScaler, GradScaler
from tinyamp.optim import SGD, Adam, Optimizer

F32 = np.float32


def _problem(device: str = "cpu", seed: int = 0):
    """A linear least-squares problem built from elementwise ops only."""
    rng = np.random.default_rng(seed)
    w = ta.tensor(rng.standard_normal((3, 2)).astype(F32), device=device, requires_grad=True)
    x = ta.tensor(rng.standard_normal((8, 3, 1)).astype(F32), device=device)
    y = ta.tensor(rng.standard_normal((8, 2)).astype(F32), device=device)
    return w, x, y


def _loss(w, x, y, blow_up: float = 1.0):
    d = (x * w).sum(1) - y
    return (d * d).mean() * blow_up


def _set_grads(params, values):
    for p, v in zip(params, values):
        p.grad = ta.tensor(np.asarray(v, dtype=p.dtype), device=p.device)


def _init(scaler: GradScaler, device: str = "cpu") -> None:
    scaler.scale(ta.tensor(1.0, device=device))


class PlainSGD(Optimizer):
    """An optimizer without the masked-update contract: the scaler must check on the host."""

    def __init__(self, params, lr):
        super().__init__(params, dict(lr=lr))

    def step(self, closure=None):
        with ta.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.data -= group["lr"] * p.grad.data
        return "stepped"


# ------------------------------------------------------------ construction
def test_defaults_getters_setters_and_alias() -> None:
    s = GradScaler()
    assert AmpScaler is GradScaler
    assert s.get_scale() == 2.0 ** 16 and s.get_growth_factor() == 2.0 and s.get_backoff_factor() == 0.5
    assert s.get_growth_interval() == 2000 and s.get_hysteresis() == 1 and s.is_enabled()
    s.set_growth_factor(3.0)
    s.set_backoff_factor(0.25)
    s.set_growth_interval(7)
    assert (s.get_growth_factor(), s.get_backoff_factor(), s.get_growth_interval()) == (3.0, 0.25, 7)
    assert GradScaler("cpu", 2.0 ** 10).get_scale() == 2.0 ** 10  # PyTorch's device-first spelling


def test_cuda_scaler_on_a_machine_with_cuda_stays_enabled(cuda_backend) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaler = GradScaler("cuda", init_scale=2.0 ** 12)
    assert scaler.is_enabled() and scaler.get_scale() == 2.0 ** 12


@pytest.mark.skipif(ta.cuda.is_available(), reason="checks the machine without CUDA")
def test_cuda_scaler_without_cuda_warns_and_disables_itself() -> None:
    with pytest.warns(UserWarning, match=r"^torch\.cuda\.amp\.GradScaler is enabled, but CUDA is not available\.  "
                                         r"Disabling\.$"):
        scaler = GradScaler("cuda")
    assert not scaler.is_enabled() and scaler.get_scale() == 1.0
    loss = ta.tensor(3.0, requires_grad=True)
    assert scaler.scale(loss) is loss  # disabled: outputs pass through, as in PyTorch
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert GradScaler("cuda", enabled=False).is_enabled() is False  # no warning when asked to be off
        assert GradScaler("cpu").is_enabled()


@pytest.mark.parametrize("kwargs, match", [
    (dict(growth_factor=1.0), "growth factor must be > 1.0"),
    (dict(growth_factor=float("inf")), "growth factor"),
    (dict(backoff_factor=1.0), r"backoff factor must be in \(0, 1\)"),
    (dict(backoff_factor=0.0), "backoff factor"),
    (dict(growth_interval=0), "growth_interval must be an integer >= 1"),
    (dict(growth_interval=2.5), "growth_interval"),
    (dict(hysteresis=0), "hysteresis must be an integer >= 1"),
    (dict(init_scale=-1.0), "init_scale must be a positive finite number"),
    (dict(init_scale=float("nan")), "init_scale"),
    (dict(init_scale=8.0, min_scale=16.0), r"min_scale \(16.0\) must be <= init_scale \(8.0\)"),
    (dict(init_scale=8.0, max_scale=4.0), r"max_scale \(4.0\) must be >= init_scale"),
    (dict(min_scale=0.0), "min_scale must be a positive"),
])
def test_invalid_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GradScaler(**kwargs)


def test_setters_validate() -> None:
    s = GradScaler()
    with pytest.raises(ValueError, match="growth factor"):
        s.set_growth_factor(0.5)
    with pytest.raises(ValueError, match="backoff factor"):
        s.set_backoff_factor(2.0)
    with pytest.raises(ValueError, match="growth_interval"):
        s.set_growth_interval(0)


# ------------------------------------------------------------ scale
def test_scale_tensor_and_nested_structures() -> None:
    s = GradScaler(init_scale=4.0)
    t = ta.tensor([1.0, 2.0])
    np.testing.assert_array_equal(s.scale(t).array, [4.0, 8.0])
    Pair = collections.namedtuple("Pair", "a b")
    out = s.scale([t, (t, Pair(t, [t]))])
    assert isinstance(out, list) and isinstance(out[1], tuple) and isinstance(out[1][1], Pair)
    assert isinstance(out[1][1].b, list)
    np.testing.assert_array_equal(out[1][1].b[0].array, [4.0, 8.0])
    with pytest.raises(ValueError, match="outputs must be a Tensor or an iterable of Tensors.*got dict"):
        s.scale({"loss": t})
    with pytest.raises(ValueError, match="got float"):
        s.scale([t, 3.0])


def test_a_float32_loss_is_scaled_by_one_light_node_and_others_by_mul() -> None:
    s = GradScaler(init_scale=2.0 ** 10)
    w = ta.tensor([1.5, -2.0], requires_grad=True)
    scaled = s.scale(w * 3.0)
    assert type(scaled.grad_fn).__name__ == "ScaleBy" and scaled.grad_fn.needs_input_grad == (True,)
    assert scaled.dtype == ta.float32
    np.testing.assert_array_equal(scaled.array, np.float32([4.5, -6.0]) * F32(1024))
    half = s.scale(w.half() * 3.0)  # float16 times the float32 scale: mul promotes, as in the general rule
    assert type(half.grad_fn).__name__ == "Mul" and half.dtype == ta.float32
    # Its backward on arrays, and recorded when a graph is wanted (double backward).
    (g,) = ta.autograd.grad(scaled.sum(), [w], create_graph=True)
    np.testing.assert_array_equal(g.array, np.full(2, 3.0 * 1024, np.float32))
    (gg,) = ta.autograd.grad((g * w).sum(), [w])
    np.testing.assert_array_equal(gg.array, np.full(2, 3.0 * 1024, np.float32))
    from tinyamp.ops.elementwise import ScaleBy
    with pytest.raises(ValueError, match=r"scale_by: expects a 0-d scale of the input's dtype, got input "
                                         r"float16 \[2\] and scale float32 \[\]"):
        ScaleBy(np.float32(2.0) * np.ones((), np.float32))(w.half())


def test_scaled_loss_backward_gives_scaled_grads() -> None:
    w, x, y = _problem()
    _loss(w, x, y).backward()
    plain = w.grad.array.copy()
    w.grad = None
    GradScaler(init_scale=2.0 ** 10).scale(_loss(w, x, y)).backward()
    np.testing.assert_array_equal(w.grad.array, plain * F32(2.0 ** 10))


# ------------------------------------------------------------ unscale_
def test_unscale_divides_exactly_and_records_found_inf() -> None:
    a = ta.zeros(3, requires_grad=True)
    b = ta.zeros(2, dtype=ta.float64, requires_grad=True)
    opt = SGD([a, b], lr=0.1)
    s = GradScaler(init_scale=2.0 ** 12)
    _init(s)
    ga, gb = np.array([3.0, -5.5, 1e-3], F32), np.array([7.25, 1e-300])
    _set_grads([a, b], [ga * F32(2.0 ** 12), gb * 2.0 ** 12])
    s.unscale_(opt)
    np.testing.assert_array_equal(a.grad.array, ga)
    np.testing.assert_array_equal(b.grad.array, gb)
    assert s.found_inf(opt).item() == 0.0
    s.step(opt)
    s.update()
    _set_grads([a, b], [[1.0, np.nan, 2.0], [0.0, 0.0]])
    s.unscale_(opt)
    assert s.found_inf(opt).item() == 1.0


def test_unscale_catches_overflow_of_the_unscaled_value() -> None:
    # A scale below 1 multiplies: a finite scaled gradient can overflow when unscaled.
    p = ta.zeros(2, requires_grad=True)
    opt = SGD([p], lr=0.1)
    s = GradScaler(init_scale=2.0 ** -4)
    _init(s)
    _set_grads([p], [[3e37, 1.0]])
    s.unscale_(opt)
    assert s.found_inf(opt).item() == 1.0


def test_float16_grads_without_master_weights_are_refused() -> None:
    good = ta.zeros(4, requires_grad=True)
    bad = ta.zeros((2, 3), dtype=ta.float16, requires_grad=True)
    opt = SGD([good, bad], lr=0.1)
    s = GradScaler()
    _init(s)
    _set_grads([good, bad], [np.ones(4), np.ones((2, 3))])
    with pytest.raises(ValueError) as info:
        s.unscale_(opt)
    message = str(info.value)
    assert "Attempting to unscale FP16 gradients" in message
    assert "param_groups[0]['params'][1] (shape [2, 3])" in message
    assert "master_weights=True" in message
    np.testing.assert_array_equal(good.grad.array, np.ones(4))  # nothing was touched


# ------------------------------------------------------------ the state machine
def test_state_machine_errors() -> None:
    p = ta.zeros(2, requires_grad=True)
    opt = SGD([p], lr=0.1)
    s = GradScaler()
    with pytest.raises(RuntimeError, match="Attempted unscale_ but _scale is None"):
        s.unscale_(opt)
    with pytest.raises(RuntimeError, match="Attempted step but _scale is None"):
        s.step(opt)
    with pytest.raises(RuntimeError, match="Attempted update but _scale is None"):
        s.update()
    _init(s)
    with pytest.raises(RuntimeError, match=r"^No inf checks were recorded prior to update\.$"):
        s.update()
    with pytest.raises(RuntimeError, match=r"^No inf checks were recorded for this optimizer\.$"):
        s.step(opt)  # no gradients at all
    s.update(new_scale=2.0 ** 16)  # reset the optimizer's state
    _set_grads([p], [np.ones(2)])
    s.unscale_(opt)
    with pytest.raises(RuntimeError, match=r"^unscale_\(\) has already been called on this optimizer since the "
                                           r"last update\(\)\.$"):
        s.unscale_(opt)
    s.step(opt)
    with pytest.raises(RuntimeError, match=r"^unscale_\(\) is being called after step\(\)\.$"):
        s.unscale_(opt)
    with pytest.raises(RuntimeError, match=r"^step\(\) has already been called since the last update\(\)\.$"):
        s.step(opt)
    s.update()
    _set_grads([p], [np.ones(2)])
    s.unscale_(opt)  # READY again after update()


def test_closure_is_refused() -> None:
    p = ta.zeros(2, requires_grad=True)
    opt = SGD([p], lr=0.1)
    s = GradScaler()
    _init(s)
    with pytest.raises(RuntimeError, match="Closure use is not currently supported if GradScaler is enabled."):
        s.step(opt, closure=lambda: None)
    with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
        s.step(opt, lambda: None)


def test_found_inf_needs_an_inf_check() -> None:
    opt = SGD([ta.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(RuntimeError, match="no inf checks were recorded for this optimizer"):
        GradScaler().found_inf(opt)


# ------------------------------------------------------------ step
@pytest.mark.parametrize("make", [lambda ps: SGD(ps, lr=0.1, momentum=0.9), lambda ps: Adam(ps, lr=0.1),
                                  lambda ps: PlainSGD(ps, lr=0.1)], ids=["sgd", "adam", "plain"])
def test_step_skips_on_inf_and_steps_otherwise(make) -> None:
    p = ta.tensor([1.0, 2.0], requires_grad=True)
    opt = make([p])
    s = GradScaler(init_scale=8.0)
    _init(s)
    _set_grads([p], [[np.inf, 8.0]])
    s.step(opt)
    s.update()
    np.testing.assert_array_equal(p.array, [1.0, 2.0])
    assert s.get_scale() == 4.0 and s.last_step.skipped and not s.last_step.applied
    _set_grads([p], [[4.0, 4.0]])
    s.step(opt)
    s.update()
    assert not np.array_equal(p.array, [1.0, 2.0])
    assert s.last_step.applied and s.last_step.scale_before == 4.0 == s.last_step.scale_after


def test_last_step_keeps_its_values_through_the_next_iteration() -> None:
    p = ta.tensor([1.0, 2.0], requires_grad=True)
    opt = SGD([p], lr=0.1)
    s = GradScaler(init_scale=8.0)
    _init(s)
    _set_grads([p], [[np.inf, 8.0]])
    s.step(opt)
    s.update()
    skipped = s.last_step
    _set_grads([p], [[4.0, 4.0]])
    s.unscale_(opt)  # the next iteration's flag is a new array: the record still says skipped
    syncs = ta.cuda.sync_count()
    assert skipped.skipped and skipped.scale_before == 8.0 and skipped.scale_after == 4.0
    assert ta.cuda.sync_count() == syncs + 3  # one host read per property, on the CPU too
    assert float(s.found_inf(opt).array) == 0.0
    s.step(opt)
    s.update(new_scale=64.0)
    assert not s.last_step.skipped and s.last_step.scale_before == 4.0 and s.last_step.scale_after == 64.0
    s.update(new_scale=ta.tensor([0.5]))  # no optimizer stepped: nothing found, the scale set
    assert s.last_step.found_inf is None and not s.last_step.skipped
    assert s.last_step.scale_before == 64.0 and s.last_step.scale_after == 0.5 == s.get_scale()
    assert skipped.skipped and skipped.scale_after == 4.0


def test_step_returns_the_optimizers_value() -> None:
    p = ta.tensor([1.0], requires_grad=True)
    opt = PlainSGD([p], lr=0.1)
    s = GradScaler()
    _init(s)
    _set_grads([p], [[1.0]])
    assert s.step(opt) == "stepped"


def test_one_optimizer_may_skip_while_another_steps() -> None:
    a, b = ta.tensor([1.0], requires_grad=True), ta.tensor([1.0], requires_grad=True)
    opt_a, opt_b = SGD([a], lr=0.5), Adam([b], lr=0.5)
    s = GradScaler(init_scale=2.0)
    _init(s)
    _set_grads([a, b], [[np.nan], [2.0]])
    s.step(opt_a)
    s.step(opt_b)
    assert s.found_inf(opt_a).item() == 1.0 and s.found_inf(opt_b).item() == 0.0
    s.update()
    assert a.array[0] == 1.0 and b.array[0] != 1.0
    assert s.get_scale() == 1.0  # the combined check backs off


# ------------------------------------------------------------ update
def _drive(s: GradScaler, pattern: str) -> list:
    """Run updates for a string of 'c' (clean) / 'i' (inf); returns the scale after each."""
    p = ta.zeros(1, requires_grad=True)
    opt = SGD([p], lr=0.0)
    _init(s)
    scales = []
    for c in pattern:
        _set_grads([p], [[np.inf if c == "i" else 1.0]])
        s.step(opt)
        s.update()
        scales.append(s.get_scale())
    return scales


def test_growth_after_interval_clean_updates_and_backoff() -> None:
    s = GradScaler(init_scale=16.0, growth_interval=3)
    assert _drive(s, "cccccci") == [16.0, 16.0, 32.0, 32.0, 32.0, 64.0, 32.0]
    assert s._get_growth_tracker() == 0
    assert _drive(s, "cci") == [32.0, 32.0, 16.0]  # an inf resets the count


def test_hysteresis_delays_backoff_until_growth_resets_it() -> None:
    s = GradScaler(init_scale=16.0, growth_interval=2, hysteresis=2)
    # 1st inf: tolerated; 2nd (not consecutive): backs off; 3rd: backs off again;
    # a growth restores the budget of 2.
    assert _drive(s, "icicicci") == [16.0, 16.0, 8.0, 8.0, 4.0, 4.0, 8.0, 8.0]
    assert s._get_hysteresis_tracker() == 1


def test_scale_bounds() -> None:
    s = GradScaler(init_scale=4.0, growth_interval=1, min_scale=2.0, max_scale=16.0)
    assert _drive(s, "ciiicccc") == [8.0, 4.0, 2.0, 2.0, 4.0, 8.0, 16.0, 16.0]
    top = GradScaler(init_scale=2.0 ** 127, growth_interval=1)
    assert _drive(top, "cc") == [2.0 ** 127, 2.0 ** 127]  # never to inf
    bottom = GradScaler(init_scale=2.0 ** -125, backoff_factor=0.125)
    assert _drive(bottom, "ii") == [float(np.finfo(F32).tiny)] * 2  # stays positive


def test_update_with_new_scale() -> None:
    s = GradScaler(min_scale=1.0, max_scale=2.0 ** 20)
    _init(s)
    s.update(1024.0)
    assert s.get_scale() == 1024.0
    s.update(ta.tensor([2.0 ** 30]))  # a device value cannot be checked without a sync: clamped
    assert s.get_scale() == 2.0 ** 20
    with pytest.raises(ValueError, match="outside"):
        s.update(0.5)
    with pytest.raises(ValueError, match="1-element tinyamp Tensor with requires_grad=False"):
        s.update(ta.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="requires_grad=False"):
        s.update(ta.tensor(4.0, requires_grad=True))
    with pytest.raises(TypeError, match="new_scale should be a float"):
        s.update("big")


# ------------------------------------------------------------ state dict
def test_state_dict_round_trip_and_lazy_load() -> None:
    s = GradScaler(init_scale=64.0, growth_interval=3, hysteresis=2, min_scale=1.0)
    _drive(s, "ccic")
    state = s.state_dict()
    assert state == {"scale": 64.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3,
                     "_growth_tracker": 1, "hysteresis": 2, "_hysteresis_tracker": 1, "min_scale": 1.0,
                     "max_scale": None}
    fresh = GradScaler()
    fresh.load_state_dict(state)  # before lazy init: becomes the initial values
    assert fresh.get_scale() == 64.0
    assert _drive(fresh, "ic") == _drive(s, "ic")


def test_disabled_state_dict_is_empty_and_loading_it_is_an_error() -> None:
    assert GradScaler(enabled=False).state_dict() == {}
    with pytest.raises(RuntimeError, match="The source state dict is empty, possibly because it was saved "
                                           "from a disabled instance of GradScaler."):
        GradScaler().load_state_dict({})


def test_pytorch_state_dict_keys_suffice() -> None:
    s = GradScaler(min_scale=2.0)
    s.load_state_dict({"scale": 8.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 5,
                       "_growth_tracker": 3})
    assert s.get_scale() == 8.0 and s._get_growth_tracker() == 3 and s.state_dict()["min_scale"] == 2.0


# ------------------------------------------------------------ disabled / bfloat16
def test_disabled_scaler_is_a_pass_through() -> None:
    p = ta.tensor([1.0], requires_grad=True)
    opt = PlainSGD([p], lr=0.5)
    s = GradScaler(enabled=False)
    loss = (p * p).sum()
    assert s.scale(loss) is loss
    loss.backward()
    s.unscale_(opt)
    assert s.step(opt) == "stepped"
    s.update()
    assert p.array[0] == 0.0 and s.get_scale() == 1.0 and not s.last_step.skipped
    assert s.found_inf(opt).item() == 0.0


def test_bfloat16_autocast_disables_the_scaler_on_request_with_a_warning() -> None:
    w, x, y = _problem()
    s = GradScaler(auto_disable_bf16=True)
    with ta.amp.autocast(dtype=ta.bfloat16):
        loss = _loss(w, x, y)
        with pytest.warns(UserWarning, match="bfloat16 has float32's exponent range"):
            scaled = s.scale(loss)
    assert scaled is loss and not s.is_enabled()


def test_bfloat16_graph_seen_after_the_autocast_region() -> None:
    # The usual loop scales after leaving autocast: the graph still shows bfloat16.
    w, x, y = _problem()
    s = GradScaler(auto_disable_bf16=True)
    with ta.amp.autocast(dtype=ta.bfloat16):
        w_low = ta.ops.cast(w, ta.bfloat16)  # what a LOWER op does to a weight under bfloat16 autocast
        loss = _loss(ta.ops.cast(w_low, ta.float32), x, y)
    with pytest.warns(UserWarning, match="computed from bfloat16 tensors"):
        s.scale(loss)
    assert not s.is_enabled()


def test_bfloat16_keeps_scaling_by_default_with_one_warning_and_float16_never_warns() -> None:
    w, x, y = _problem()
    s = GradScaler()
    with ta.amp.autocast(dtype=ta.bfloat16):
        with pytest.warns(UserWarning, match="the scaler keeps scaling, as PyTorch's does"):
            scaled = s.scale(_loss(w, x, y))
        assert scaled is not None and s.is_enabled() and s.get_scale() == 2.0 ** 16
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per scaler
            s.scale(_loss(w, x, y))
    s16 = GradScaler()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ta.amp.autocast(dtype=ta.float16):
            s16.scale(_loss(w, x, y))
    assert s16.is_enabled()


# ------------------------------------------------------------ host syncs
def _train(device: str, make, steps: int, blow_up_at: tuple = ()) -> tuple:
    w, x, y = _problem(device)
    opt = make([w])
    s = GradScaler(init_scale=2.0 ** 8, growth_interval=2)
    ta.cuda.reset_sync_count()
    for i in range(steps):
        opt.zero_grad()
        # 1e38 overflows float32 once multiplied by the scale: a skipped step.
        loss = _loss(w, x, y, blow_up=1e38 if i in blow_up_at else 1.0)
        with np.errstate(over="ignore", invalid="ignore"):
            s.scale(loss).backward()
        s.step(opt)
        s.update()
    return ta.cuda.sync_count(), s


@pytest.mark.parametrize("make", [lambda ps: SGD(ps, lr=0.01, momentum=0.9), lambda ps: Adam(ps, lr=0.01),
                                  lambda ps: ta.optim.RMSprop(ps, lr=0.01, momentum=0.9, centered=True),
                                  lambda ps: ta.optim.Adagrad(ps, lr=0.01, lr_decay=0.1),
                                  lambda ps: ta.optim.Adadelta(ps), lambda ps: ta.optim.NAdam(ps, lr=0.01),
                                  lambda ps: ta.optim.RAdam(ps, lr=0.01)],
                         ids=["sgd", "adam", "rmsprop", "adagrad", "adadelta", "nadam", "radam"])
def test_training_step_with_tinyamp_optimizers_has_no_host_sync(device: str, make) -> None:
    syncs, s = _train(device, make, steps=6, blow_up_at=(1, 4))
    assert syncs == 0
    assert s.get_scale() == 2.0 ** 7  # 1 skip, growth after 2 clean, 1 skip, 1 clean: reads are counted
    assert ta.cuda.sync_count() == 1


def test_non_contract_optimizer_costs_one_sync_per_step(device: str) -> None:
    syncs, _ = _train(device, lambda ps: PlainSGD(ps, lr=0.01), steps=5, blow_up_at=(2,))
    assert syncs == 5


def test_unscale_bumps_the_version_of_every_gradient_it_writes(device: str) -> None:
    """A gradient unscaled in place is a new value: a node that saved it must see the write."""
    ta.manual_seed(0)
    model = ta.nn.Linear(4, 3).to(device)
    opt = ta.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler(init_scale=2.0 ** 4)
    with ta.amp.autocast():
        loss = model(ta.ones(2, 4, device=device)).float().sum()
    scaler.scale(loss).backward()
    before = [p.grad._version[0] for p in model.parameters()]
    scaler.unscale_(opt)
    assert [p.grad._version[0] for p in model.parameters()] == [v + 1 for v in before]


@pytest.mark.parametrize("cuda_first", [False, True])
def test_an_inf_on_either_device_of_one_optimizer_skips_the_whole_step(standin_backend: str, cuda_first: bool) -> None:
    # One optimizer over a CPU and a CUDA parameter: found_inf is per device, and the step must see them all
    # (issue 30's audit: the first device's flag alone stepped the CPU parameter and made the CUDA one -inf).
    cpu = ta.nn.Parameter(ta.ones(3))
    gpu = ta.nn.Parameter(ta.ones(3, device="cuda"))
    params = [gpu, cpu] if cuda_first else [cpu, gpu]
    opt = ta.optim.SGD(params, lr=0.1)
    scaler = ta.amp.GradScaler("cuda", init_scale=4.0)
    loss = cpu.sum().to("cuda") + gpu.sum()
    scaler.scale(loss).backward()
    with ta.no_grad():
        gpu.grad[0] = float("inf")
    scaler.step(opt)
    scaler.update()
    assert scaler.last_step.skipped and scaler.get_scale() == 2.0
    np.testing.assert_array_equal(cpu.detach().numpy(), np.ones(3, np.float32))
    np.testing.assert_array_equal(gpu.detach().cpu().numpy(), np.ones(3, np.float32))
