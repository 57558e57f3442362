"""RMSprop, Adagrad, Adadelta, NAdam and RAdam: PyTorch's updates, arguments and state, and the AMP contract.

The update rules are held against ``optim_references.py`` (float64 NumPy
transcriptions of PyTorch's rules, checked against torch 2.13's update in a
scratch script, not imported). The skip contract, master weights, state dicts
and host-sync counts of these optimizers are also covered by the shared
parametrisations in test_optim.py, test_master_weights.py and
test_grad_scaler.py; this file holds what is particular to them.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tests.support import optim_references as ref
import tinyamp as ta
from tinyamp.amp import GradScaler
from tinyamp.optim import Adadelta, Adagrad, NAdam, RAdam, RMSprop

STEPS = 12  # RAdam switches to its rectified branch at step 6 with beta2 = 0.999: both are covered
SHAPES = ((3, 4), (5,))
# float64 against float64: the references group a few products differently
# (lr * d / avg against lr * (d / avg)), a few ulps per step. The worst
# |tinyamp - reference| / (ATOL + RTOL |w|) measured over these cases is 0.003,
# while a wrong rule is off by about lr * |g| (1e-3 or more).
RTOL, ATOL = 1e-12, 1e-14

CONFIGS = {
    RMSprop: (ref.rmsprop, [dict(lr=0.01), dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1),
                            dict(lr=0.01, momentum=0.9), dict(lr=0.01, centered=True),
                            dict(lr=0.01, momentum=0.5, centered=True, maximize=True, weight_decay=0.05)]),
    Adagrad: (ref.adagrad, [dict(), dict(lr=0.1, lr_decay=0.05, weight_decay=0.1),
                            dict(lr=0.1, initial_accumulator_value=0.5, eps=1e-6, maximize=True)]),
    Adadelta: (ref.adadelta, [dict(), dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1), dict(maximize=True)]),
    NAdam: (ref.nadam, [dict(), dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1),
                        dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True),
                        dict(lr=0.01, momentum_decay=0.01, maximize=True)]),
    RAdam: (ref.radam, [dict(), dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1),
                        dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True), dict(lr=0.01, maximize=True)]),
}
CASES = [(cls, config) for cls, (_, configs) in CONFIGS.items() for config in configs]


def _case_id(case) -> str:
    cls, config = case
    return cls.__name__ + "(" + ",".join(f"{k}={v}" for k, v in config.items()) + ")"


def _params(device: str = "cpu", seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [ta.tensor(rng.standard_normal(s), requires_grad=True, device=device) for s in SHAPES]


def _grads(seed: int = 0, steps: int = STEPS) -> list:
    rng = np.random.default_rng(seed + 100)
    return [[rng.standard_normal(s) for s in SHAPES] for _ in range(steps)]


def _set_grads(params: list, grads: list) -> None:
    for p, g in zip(params, grads):
        p.grad = ta.tensor(g, dtype=p.dtype, device=p.device)


def _host(t: ta.Tensor) -> np.ndarray:
    return t.detach().numpy().copy()


def _host_state(opt: ta.optim.Optimizer) -> dict:
    return {i: {k: _host(v) for k, v in entry.items()} for i, entry in opt.state_dict()["state"].items()}


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_matches_pytorch_update_rule(case, device: str) -> None:
    cls, config = case
    params = _params(device)
    start = [_host(p) for p in params]
    grads = _grads()
    opt = cls(params, **config)
    history = []
    for step_grads in grads:
        _set_grads(params, step_grads)
        opt.step()
        history.append([_host(p) for p in params])
    rule = CONFIGS[cls][0]
    for i, w0 in enumerate(start):
        expected = rule(w0, [g[i] for g in grads], **config)
        for k in range(STEPS):
            np.testing.assert_allclose(history[k][i], expected[k], rtol=RTOL, atol=ATOL, err_msg=f"step {k + 1}")


# ------------------------------------------------------------ arguments and state
def test_defaults_are_pytorch_defaults() -> None:
    p = _params()[:1]
    groups = {cls: cls(p).param_groups[0] for cls in CONFIGS}
    assert {k: groups[RMSprop][k] for k in ("lr", "alpha", "eps", "weight_decay", "momentum", "centered")} == \
        dict(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False)
    assert {k: groups[Adagrad][k] for k in ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")} == \
        dict(lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10)
    assert {k: groups[Adadelta][k] for k in ("lr", "rho", "eps", "weight_decay")} == \
        dict(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0)
    assert {k: groups[NAdam][k] for k in ("lr", "betas", "eps", "weight_decay", "momentum_decay",
                                          "decoupled_weight_decay")} == \
        dict(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3, decoupled_weight_decay=False)
    assert {k: groups[RAdam][k] for k in ("lr", "betas", "eps", "weight_decay", "decoupled_weight_decay")} == \
        dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False)
    assert all(not g["maximize"] for g in groups.values())


def test_positional_arguments_follow_pytorch_order() -> None:
    p = _params()[:1]
    g = RMSprop(p, 0.1, 0.5, 1e-3, 0.2, 0.3, True).param_groups[0]
    assert (g["lr"], g["alpha"], g["eps"], g["weight_decay"], g["momentum"], g["centered"]) == (0.1, 0.5, 1e-3, 0.2, 0.3, True)
    g = Adagrad(p, 0.1, 0.2, 0.3, 0.4, 1e-3).param_groups[0]
    assert (g["lr"], g["lr_decay"], g["weight_decay"], g["initial_accumulator_value"], g["eps"]) == (0.1, 0.2, 0.3, 0.4, 1e-3)
    g = Adadelta(p, 0.1, 0.5, 1e-3, 0.2).param_groups[0]
    assert (g["lr"], g["rho"], g["eps"], g["weight_decay"]) == (0.1, 0.5, 1e-3, 0.2)
    g = NAdam(p, 0.1, (0.5, 0.6), 1e-3, 0.2, 0.3, True).param_groups[0]
    assert (g["lr"], g["betas"], g["eps"], g["weight_decay"], g["momentum_decay"], g["decoupled_weight_decay"]) == \
        (0.1, (0.5, 0.6), 1e-3, 0.2, 0.3, True)
    g = RAdam(p, 0.1, (0.5, 0.6), 1e-3, 0.2, True).param_groups[0]
    assert (g["lr"], g["betas"], g["eps"], g["weight_decay"], g["decoupled_weight_decay"]) == \
        (0.1, (0.5, 0.6), 1e-3, 0.2, True)


@pytest.mark.parametrize("make, message", [
    (lambda p: RMSprop(p, lr=-1), r"^Invalid learning rate: -1$"),
    (lambda p: RMSprop(p, eps=-1.0), r"^Invalid epsilon value: -1.0$"),
    (lambda p: RMSprop(p, momentum=-0.5), r"^Invalid momentum value: -0.5$"),
    (lambda p: RMSprop(p, weight_decay=-1), r"^Invalid weight_decay value: -1$"),
    (lambda p: RMSprop(p, alpha=-0.1), r"^Invalid alpha value: -0.1$"),
    (lambda p: Adagrad(p, lr=-0.5), r"^Invalid learning rate: -0.5$"),
    (lambda p: Adagrad(p, lr_decay=-1), r"^Invalid lr_decay value: -1$"),
    (lambda p: Adagrad(p, weight_decay=-2), r"^Invalid weight_decay value: -2$"),
    (lambda p: Adagrad(p, initial_accumulator_value=-1), r"^Invalid initial_accumulator_value value: -1$"),
    (lambda p: Adagrad(p, eps=-1e-10), r"^Invalid epsilon value: -1e-10$"),
    (lambda p: Adadelta(p, lr=-1), r"^Invalid learning rate: -1$"),
    (lambda p: Adadelta(p, rho=1.5), r"^Invalid rho value: 1.5$"),
    (lambda p: Adadelta(p, eps=-1), r"^Invalid epsilon value: -1$"),
    (lambda p: Adadelta(p, weight_decay=-1), r"^Invalid weight_decay value: -1$"),
    (lambda p: NAdam(p, lr=-1), r"^Invalid learning rate: -1$"),
    (lambda p: NAdam(p, eps=-1), r"^Invalid epsilon value: -1$"),
    (lambda p: NAdam(p, betas=(1.0, 0.9)), r"^Invalid beta parameter at index 0: 1.0$"),
    (lambda p: NAdam(p, betas=(0.9, -0.1)), r"^Invalid beta parameter at index 1: -0.1$"),
    (lambda p: NAdam(p, weight_decay=-1), r"^Invalid weight_decay value: -1$"),
    (lambda p: NAdam(p, momentum_decay=-1), r"^Invalid momentum_decay value: -1$"),
    (lambda p: RAdam(p, lr=-1), r"^Invalid learning rate: -1$"),
    (lambda p: RAdam(p, eps=-1), r"^Invalid epsilon value: -1$"),
    (lambda p: RAdam(p, betas=(-0.1, 0.9)), r"^Invalid beta parameter at index 0: -0.1$"),
    (lambda p: RAdam(p, betas=(0.9, 1.0)), r"^Invalid beta parameter at index 1: 1.0$"),
    (lambda p: RAdam(p, weight_decay=-1), r"^Invalid weight_decay value: -1$"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_invalid_arguments_give_pytorch_errors(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(_params()[:1])


def test_portability_flags_are_accepted_and_differentiable_is_refused() -> None:
    p = _params()[:1]
    RMSprop(p, capturable=True, foreach=True, maximize=True)
    Adagrad(p, foreach=False, fused=True)
    Adadelta(p, foreach=True, capturable=True)
    NAdam(p, foreach=True, capturable=True)
    RAdam(p, foreach=True, capturable=True)
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together."):
        Adagrad(p, foreach=True, fused=True)
    for cls in CONFIGS:
        with pytest.raises(NotImplementedError, match=f"{cls.__name__}: differentiable=True is not supported"):
            cls(p, differentiable=True)


@pytest.mark.parametrize("cls, config, keys", [
    (RMSprop, dict(), ["step", "square_avg"]),
    (RMSprop, dict(momentum=0.9, centered=True), ["step", "square_avg", "momentum_buffer", "grad_avg"]),
    (Adagrad, dict(), ["step", "sum"]),
    (Adadelta, dict(), ["step", "square_avg", "acc_delta"]),
    (NAdam, dict(), ["step", "mu_product", "exp_avg", "exp_avg_sq"]),
    (RAdam, dict(), ["step", "exp_avg", "exp_avg_sq"]),
])
def test_state_names_and_step_counters_are_pytorchs(cls, config: dict, keys: list, device: str) -> None:
    params = _params(device)
    opt = cls(params, **config)
    _set_grads(params, _grads()[0])
    opt.step()
    for p in params:
        state = opt.state[p]
        assert list(state) == keys  # PyTorch's names, in PyTorch's order
        assert state["step"].shape == () and state["step"].dtype == ta.float32 and state["step"].device == p.device
        assert state["step"].item() == 1.0
        for key in keys[1:]:
            expected_shape = () if key == "mu_product" else p.shape
            assert state[key].shape == expected_shape and state[key].device == p.device, key


def test_adagrad_state_exists_before_the_first_step_as_in_pytorch() -> None:
    params = _params()
    opt = Adagrad(params, initial_accumulator_value=0.25)
    state = opt.state_dict()["state"]
    assert set(state) == {0, 1}
    for i, p in enumerate(params):
        assert state[i]["step"].item() == 0.0
        np.testing.assert_array_equal(state[i]["sum"].numpy(), np.full(p.shape, 0.25))
    # A group added later gets its state on its first step (PyTorch: lazily too).
    extra = ta.ones(2, requires_grad=True)
    opt.add_param_group({"params": [extra]})
    extra.grad = ta.full((2,), 2.0)
    opt.step()
    np.testing.assert_array_equal(opt.state[extra]["sum"].numpy(), [4.25, 4.25])


def test_nadam_mu_product_is_a_float32_product_of_the_schedule() -> None:
    p = _params()[0]
    opt = NAdam([p], momentum_decay=0.05)
    product = np.float32(1.0)
    for t in range(1, 6):
        p.grad = ta.ones_like(p)
        opt.step()
        mu = 0.9 * (1 - 0.5 * 0.96 ** (t * 0.05))
        product = np.float32(product * np.float32(mu))
        assert opt.state[p]["mu_product"].dtype == ta.float32
        assert opt.state[p]["mu_product"].item() == product


def test_radam_takes_the_momentum_branch_until_rho_exceeds_five() -> None:
    # rho_t for beta2 = 0.999: 1.0, 2.0, 3.0, 4.0, 5.0 (just below), then above 5 from step 6.
    # With grads of 1 and no weight decay the momentum branch moves w by exactly lr * m_hat = lr.
    p = ta.zeros(3, dtype=ta.float64, requires_grad=True)
    opt = RAdam([p], lr=0.1)
    moves = []
    for _ in range(7):
        before = _host(p)
        p.grad = ta.ones_like(p)
        opt.step()
        moves.append(float(before[0] - _host(p)[0]))
    np.testing.assert_allclose(moves[:5], [0.1] * 5, rtol=1e-14)
    assert all(abs(m - 0.1) > 1e-3 for m in moves[5:])  # rectified: rect * adaptive differs from 1


def test_small_beta2_never_rectifies() -> None:
    # rho_inf = 2 / (1 - 0.5) - 1 = 3 < 5: every step is plain momentum (and no NaN from the formula).
    p = ta.zeros(2, dtype=ta.float64, requires_grad=True)
    opt = RAdam([p], lr=0.1, betas=(0.9, 0.5))
    grads = [np.array([1.0, -2.0])] * 4
    for g in grads:
        p.grad = ta.tensor(g)
        opt.step()
    np.testing.assert_allclose(_host(p), ref.radam(np.zeros(2), grads, lr=0.1, betas=(0.9, 0.5))[-1], rtol=1e-14)


# ------------------------------------------------------------ the AMP contract
@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_skipped_steps_change_nothing_and_do_not_advance_the_schedule(case, device: str) -> None:
    # A run with poisoned, skipped steps (the first one included) must equal, bit
    # for bit, the run that never saw them: steps, mu_product and RAdam's branch included.
    cls, config = case
    clean, poisoned = _params(device, 3), _params(device, 3)
    opt_clean, opt_poisoned = cls(clean, **config), cls(poisoned, **config)
    for k, step_grads in enumerate(_grads(3, steps=8)):
        if k in (0, 3):
            before = _host_state(opt_poisoned), [_host(q) for q in poisoned]
            for q in poisoned:
                q.grad = ta.full(q.shape, float("inf") if k else float("nan"), dtype=q.dtype, device=device)
            opt_poisoned.step(found_inf=ta.tensor(1.0, device=device))
            for i, entry in _host_state(opt_poisoned).items():
                # State made by a skipped first step holds its initial values (PyTorch's lazy init).
                initial = {"step": 0.0, "mu_product": 1.0}
                for key, value in entry.items():
                    expected = before[0][i][key] if i in before[0] else np.full_like(value, initial.get(key, 0.0))
                    np.testing.assert_array_equal(value, expected, err_msg=key)
            for q, w in zip(poisoned, before[1]):
                np.testing.assert_array_equal(_host(q), w)
        _set_grads(clean, step_grads)
        _set_grads(poisoned, step_grads)
        opt_clean.step()
        opt_poisoned.step(found_inf=ta.tensor(0.0, device=device))
    for p, q in zip(clean, poisoned):
        np.testing.assert_array_equal(_host(p), _host(q))
    for (i, a), b in zip(_host_state(opt_clean).items(), _host_state(opt_poisoned).values()):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


class HostReadError(AssertionError):
    pass


class _DeviceLike(np.ndarray):
    """A NumPy array that refuses to be read on the host, as a device array should be in a step.

    Every array derived from it by NumPy's ufuncs is one too, so a ``float(step)``,
    ``if step > 0`` or ``.item()`` anywhere in the update raises.
    """

    def _refuse(self, *args, **kwargs):
        raise HostReadError("a device value was read on the host inside the optimizer step")

    __bool__ = __float__ = __int__ = __index__ = item = tolist = _refuse


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_the_step_never_reads_a_device_value_on_the_host(case) -> None:
    cls, config = case
    params = _params(seed=4)
    opt = cls(params, **config)
    for k, step_grads in enumerate(_grads(4, steps=7)):
        _set_grads(params, step_grads)
        for p in params:
            p.grad.array = p.grad.array.view(_DeviceLike)
        found_inf = ta.tensor(np.array(float(k == 2), np.float32).view(_DeviceLike))
        opt.step(found_inf=found_inf)
        for p in params:  # the state the step made or advanced stays device-like for the next one
            for key, value in opt.state[p].items():
                if not isinstance(value.array, _DeviceLike):
                    value.array = value.array.view(_DeviceLike)
    with pytest.raises(HostReadError):  # the guard works
        bool(opt.state[params[0]]["step"].array > 0)


def _o1_o2_training(cls, config: dict, level: str) -> tuple:
    """A few AMP training steps with GradScaler, one of them overflowing: (scaler, optimizer, params, syncs)."""
    rng = np.random.default_rng(5)
    x = ta.tensor(rng.standard_normal((16, 6)).astype(np.float32))
    y = ta.tensor(rng.standard_normal((16, 1)).astype(np.float32))
    ta.manual_seed(2)
    model = ta.nn.Sequential(ta.nn.Linear(6, 8), ta.nn.Tanh(), ta.nn.Linear(8, 1))
    if level == "O2":
        model.half()
    opt = cls(model.parameters(), **config, master_weights=level == "O2")
    scaler = GradScaler(init_scale=2.0 ** 10, growth_interval=2)
    ta.cuda.reset_sync_count()
    for i in range(6):
        opt.zero_grad()
        with ta.amp.autocast(enabled=level == "O1"):
            out = model(x.half() if level == "O2" else x)
        loss = ta.nn.functional.mse_loss(out.float(), y) * (1e38 if i == 3 else 1.0)
        with np.errstate(over="ignore", invalid="ignore"):
            scaler.scale(loss).backward()
        before = copy.deepcopy(opt.state_dict()["state"]), [p.array.copy() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        if i == 3:
            for p, w in zip(model.parameters(), before[1]):
                np.testing.assert_array_equal(p.array, w)
            for key, entry in opt.state_dict()["state"].items():
                for name, value in entry.items():
                    np.testing.assert_array_equal(value.array, before[0][key][name].array, err_msg=name)
    return scaler, opt, list(model.parameters()), ta.cuda.sync_count()


@pytest.mark.parametrize("level", ["O1", "O2"])
@pytest.mark.parametrize("cls", list(CONFIGS), ids=lambda c: c.__name__)
def test_grad_scaler_training_skips_the_overflow_without_host_syncs(cls, level: str) -> None:
    config = dict(lr=1e-2) if cls is not Adadelta else dict()
    scaler, opt, params, syncs = _o1_o2_training(cls, config, level)
    assert syncs == 0
    # 3 clean steps (one growth at 2), the overflow (back off), 2 clean (one growth).
    assert scaler.get_scale() == 2.0 ** 11
    for p in params:
        assert opt.state[p]["step"].item() == 5.0  # the skipped step did not count
        if level == "O2":
            assert p.dtype == ta.float16 and opt.state[p]["master_param"].dtype == ta.float32
            np.testing.assert_array_equal(p.array, opt.state[p]["master_param"].array.astype(np.float16))
