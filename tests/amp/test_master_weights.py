"""Master weights (O2): float32 masters of float16/bfloat16 parameters in the optimizer.

Covers creation, the step with and without GradScaler, skipping, state dicts,
outside writes to the parameters, the O2-vs-O1 comparison on a small MLP and the
float16-without-masters stall that master weights exist to prevent.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.amp import GradScaler
from tinyamp.optim import SGD, Adadelta, Adagrad, Adam, AdamW, NAdam, RAdam, RMSprop

F = ta.nn.functional
F16, F32 = np.float16, np.float32

OPTIMIZERS = {
    "sgd": lambda ps, **kw: SGD(ps, lr=0.05, momentum=0.9, **kw),
    "adam": lambda ps, **kw: Adam(ps, lr=0.01, **kw),
    "adamw": lambda ps, **kw: AdamW(ps, lr=0.01, weight_decay=0.1, **kw),
    "rmsprop": lambda ps, **kw: RMSprop(ps, lr=0.01, momentum=0.5, centered=True, **kw),
    "adagrad": lambda ps, **kw: Adagrad(ps, lr=0.05, lr_decay=0.01, **kw),
    "adadelta": lambda ps, **kw: Adadelta(ps, weight_decay=0.01, **kw),
    "nadam": lambda ps, **kw: NAdam(ps, lr=0.01, weight_decay=0.1, **kw),
    "radam": lambda ps, **kw: RAdam(ps, lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, **kw),
}


def _half_params(seed: int = 0, dtype=ta.float16) -> list:
    rng = np.random.default_rng(seed)
    return [ta.tensor(rng.standard_normal(s).astype(F32), dtype=dtype, requires_grad=True)
            for s in ((4, 3), (3,))]


def _grads16(seed: int, steps: int) -> list:
    rng = np.random.default_rng(seed + 50)
    return [[rng.standard_normal(s).astype(F16) for s in ((4, 3), (3,))] for _ in range(steps)]


def test_masters_exist_for_low_precision_params_only() -> None:
    half = ta.tensor(np.ones(3, F16), requires_grad=True)
    bf = ta.tensor(np.ones(2, F32), dtype=ta.bfloat16, requires_grad=True)
    full = ta.ones(2, requires_grad=True)
    opt = SGD([half, bf, full], lr=0.1, master_weights=True)
    for p in (half, bf):
        master = opt.state[p]["master_param"]
        assert master.dtype == ta.float32 and np.array_equal(master.array, p.array.astype(F32))
    assert full not in opt.state
    assert list(opt.master_params())[2] is full
    assert SGD([ta.tensor(np.ones(3, F16), requires_grad=True)], lr=0.1).state == {}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_master_trajectory_equals_float32_training_on_the_same_grads(name: str) -> None:
    # The optimizer math on the masters is float32 training fed float32(g16):
    # bit-identical, and the float16 weights are its rounding.
    half = _half_params()
    full = [ta.tensor(p.array.astype(F32), requires_grad=True) for p in half]
    opt16 = OPTIMIZERS[name](half, master_weights=True)
    opt32 = OPTIMIZERS[name](full)
    for step in _grads16(0, 5):
        for p, q, g in zip(half, full, step):
            p.grad, q.grad = ta.tensor(g), ta.tensor(g.astype(F32))
        opt16.step()
        opt32.step()
        for p, q in zip(half, full):
            np.testing.assert_array_equal(opt16.state[p]["master_param"].array, q.array)
            np.testing.assert_array_equal(p.array, q.array.astype(F16))
            assert p.dtype == ta.float16


def test_bfloat16_params_with_masters() -> None:
    half = _half_params(dtype=ta.bfloat16)
    full = [ta.tensor(p.array.astype(F32), requires_grad=True) for p in half]
    opt_b, opt_f = Adam(half, lr=0.01, master_weights=True), Adam(full, lr=0.01)
    for step in _grads16(1, 3):
        for p, q, g in zip(half, full, step):
            p.grad = ta.tensor(g.astype(F32), dtype=ta.bfloat16)
            q.grad = ta.tensor(p.grad.array.astype(F32))
        opt_b.step()
        opt_f.step()
    for p, q in zip(half, full):
        np.testing.assert_array_equal(p.array, q.array.astype(ta.bfloat16))


def test_unscale_writes_float32_master_grads_and_leaves_param_grads_scaled() -> None:
    half = _half_params()
    opt = SGD(half, lr=2.0 ** 20, master_weights=True)  # a step large enough to see 3 * 2**-27
    scaler = GradScaler(init_scale=2.0 ** 16)
    scaler.scale(ta.tensor(1.0))
    # A gradient too small for float16 once unscaled (3 * 2**-27 is below half
    # the smallest float16 subnormal) survives in the float32 master gradient.
    small = [np.full(p.shape, 3 * 2.0 ** -27, F32) for p in half]
    scaled = [(g * 2.0 ** 16).astype(F16) for g in small]
    for p, g in zip(half, scaled):
        p.grad = ta.tensor(g)
    scaler.unscale_(opt)
    for p, g_scaled, g in zip(half, scaled, small):
        master = opt.state[p]["master_param"]
        assert master.grad.dtype == ta.float32
        np.testing.assert_array_equal(master.grad.array, g)
        np.testing.assert_array_equal(p.grad.array, g_scaled)  # the float16 grads stay scaled
    assert float(F16(small[0][0, 0])) == 0.0
    before = [opt.state[p]["master_param"].array.copy() for p in half]
    scaler.step(opt)
    scaler.update()
    for p, b, g in zip(half, before, small):
        np.testing.assert_array_equal(opt.state[p]["master_param"].array, b - F32(2.0 ** 20) * g)
        assert not np.array_equal(opt.state[p]["master_param"].array, b)
        assert opt.state[p]["master_param"].grad is None  # consumed by the step


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_skipped_step_changes_nothing_with_masters(name: str) -> None:
    half = _half_params()
    opt = OPTIMIZERS[name](half, master_weights=True)
    scaler = GradScaler(init_scale=2.0 ** 4)
    scaler.scale(ta.tensor(1.0))
    for step, grads in enumerate(_grads16(2, 4)):
        if step == 2:
            grads = [g.copy() for g in grads]
            grads[1][0] = np.inf
        snapshot = copy.deepcopy(opt.state_dict()), [p.array.copy() for p in half]
        for p, g in zip(half, grads):
            p.grad = ta.tensor(g * F16(16))
        scaler.step(opt)
        scaler.update()
        if step == 2:
            assert scaler.last_step.skipped
            for p, w in zip(half, snapshot[1]):
                np.testing.assert_array_equal(p.array, w)
            for i, entry in opt.state_dict()["state"].items():
                for key, value in entry.items():
                    np.testing.assert_array_equal(value.array, snapshot[0]["state"][i][key].array, err_msg=key)
        else:
            assert not scaler.last_step.skipped


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_state_dict_holds_masters_and_resumes_identically(name: str) -> None:
    half = _half_params()
    opt = OPTIMIZERS[name](half, master_weights=True)
    grads = _grads16(3, 6)

    def run(o, ps, gs):
        for step in gs:
            for p, g in zip(ps, step):
                p.grad = ta.tensor(g)
            o.step()
        return [p.array.copy() for p in ps]

    run(opt, half, grads[:3])
    saved = copy.deepcopy(opt.state_dict())
    saved_weights = [p.array.copy() for p in half]
    assert all(entry["master_param"].dtype == ta.float32 for entry in saved["state"].values())
    expected = run(opt, half, grads[3:])

    fresh = [ta.tensor(w, requires_grad=True) for w in saved_weights]
    opt2 = OPTIMIZERS[name](fresh, master_weights=True)
    opt2.load_state_dict(saved)
    for p, entry in zip(fresh, saved["state"].values()):
        np.testing.assert_array_equal(opt2.state[p]["master_param"].array, entry["master_param"].array)
    for a, b in zip(expected, run(opt2, fresh, grads[3:])):
        np.testing.assert_array_equal(a, b)


def test_outside_writes_to_a_param_refresh_only_the_changed_master_elements() -> None:
    p = ta.tensor(np.array([1.0, 1.0, 1.0], F16), requires_grad=True)
    opt = SGD([p], lr=1e-4, master_weights=True)
    p.grad = ta.tensor(np.array([1.0, 1.0, 1.0], F16))
    opt.step()
    master = opt.state[p]["master_param"]
    np.testing.assert_array_equal(master.array, F32(1.0) - F32(1e-4))  # below half an ulp: p stays 1
    np.testing.assert_array_equal(p.array, [1.0, 1.0, 1.0])
    with ta.no_grad():
        p[1] = ta.tensor(np.array(5.0, F16))  # e.g. a checkpoint load into the model
    p.grad = ta.tensor(np.array([0.0, 0.0, 0.0], F16))
    opt.step()
    np.testing.assert_array_equal(master.array, [F32(1.0) - F32(1e-4), 5.0, F32(1.0) - F32(1e-4)])


def test_clip_master_grads_after_unscale() -> None:
    half = _half_params()
    opt = SGD(half, lr=0.1, master_weights=True)
    scaler = GradScaler(init_scale=2.0 ** 8)
    scaler.scale(ta.tensor(1.0))
    for p in half:
        p.grad = ta.tensor(np.full(p.shape, 3.0 * 256, F16))
    scaler.unscale_(opt)
    norm = ta.nn.utils.clip_grad_norm_(opt.master_params(), max_norm=1.0)
    assert norm.item() == pytest.approx(3.0 * np.sqrt(15), rel=1e-6)
    total = np.sqrt(sum(float((opt.state[p]["master_param"].grad.array.astype(np.float64) ** 2).sum())
                        for p in half))
    assert total == pytest.approx(1.0, rel=1e-5)


# ------------------------------------------------------------ end to end
def _teacher_data(n: int = 256, d: int = 8):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d)).astype(F32)
    w1 = rng.standard_normal((d, 16)).astype(F32) / np.sqrt(d)
    w2 = rng.standard_normal((16, 1)).astype(F32) / 4
    return ta.tensor(x), ta.tensor((np.tanh(x @ w1) @ w2).astype(F32))


def _mlp() -> "ta.nn.Module":
    ta.manual_seed(1)
    nn = ta.nn
    return nn.Sequential(nn.Linear(8, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 1))


def _train_mlp(level: str, steps: int = 150) -> list:
    x, y = _teacher_data()
    model = _mlp()
    if level == "O2":
        model.half(keep_norm_fp32=True)
        assert model[0].weight.dtype == ta.float16 and model[1].weight.dtype == ta.float32
    opt = Adam(model.parameters(), lr=3e-3, master_weights=level == "O2")
    scaler = GradScaler(init_scale=2.0 ** 12, growth_interval=50)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        if level == "O1":
            with ta.amp.autocast():
                out = model(x)
        else:
            out = model(x.half())
        loss = F.mse_loss(out.float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return losses


def test_o2_mlp_reaches_the_o1_loss() -> None:
    o1, o2 = _train_mlp("O1"), _train_mlp("O2")
    # Step 0 does the same roundings in both: inputs and weights rounded to float16
    # once, float16 GEMMs with float32 accumulation, LayerNorm in float32 (O2 keeps
    # it float32), so the first losses, and the first gradients, are equal bit for bit.
    assert o1[0] == o2[0]
    assert o1[-1] < 0.05 * o1[0]  # both really train
    # What differs is the starting point of the float32 weights the updates go to:
    # O2's master weights are copies of the float16 model, so they start within
    # half a float16 ulp (relative 2**-11 = 4.9e-4) of O1's float32 weights, and a
    # later forward sometimes rounds the two to neighbouring float16 values. A
    # relative perturbation of 2**-11 in the weights moves the loss by a similar
    # relative amount; 2e-3 allows four such roundings. Measured on this model:
    # 1.8e-4 at the last of 150 steps, 6.3e-4 at the worst step (63).
    gap = np.abs(np.array(o2) - np.array(o1)) / np.array(o1)
    assert gap.max() <= 2e-3, (gap.max(), int(gap.argmax()))


def test_float16_without_master_weights_stalls() -> None:
    # Weights of magnitude in [1, 2) have an ulp of 2**-10: an SGD update below
    # half of that (lr * |g| < 2**-11) rounds back to the same float16 value.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 8)).astype(F32)
    w0 = (rng.uniform(1, 2, (8, 1)) * rng.choice([-1, 1], (8, 1))).astype(F16)
    y = ta.tensor(x @ (w0.astype(F32) + rng.uniform(-0.1, 0.1, (8, 1)).astype(F32)))
    xh, lr = ta.tensor(x).half(), 1e-3

    def train(master: bool) -> tuple:
        w = ta.tensor(w0.copy(), requires_grad=True)
        opt = SGD([w], lr=lr, master_weights=master)
        scaler = GradScaler(init_scale=2.0 ** 10, enabled=master)  # unscaling float16 needs masters
        losses = []
        for _ in range(300):
            opt.zero_grad()
            loss = F.mse_loss(ta.matmul(xh, w).float(), y)
            scaler.scale(loss).backward()
            if not losses:
                g = np.abs(w.grad.array.astype(F32)).max() / scaler.get_scale()
                assert lr * g < 2.0 ** -11  # the precondition of the stall
            scaler.step(opt)
            scaler.update()
            losses.append(loss.item())
        return losses, w

    stalled, w16 = train(master=False)
    np.testing.assert_array_equal(w16.array, w0)  # 300 steps, not one bit moved
    assert stalled[-1] == stalled[0]
    trained, _ = train(master=True)
    assert trained[-1] < 0.5 * trained[0]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_o2_step_with_clipping_has_no_host_sync(name: str) -> None:
    x, y = _teacher_data(64)
    model = _mlp().half(keep_norm_fp32=True)
    opt = OPTIMIZERS[name](model.parameters(), master_weights=True)
    scaler = GradScaler(init_scale=2.0 ** 12, growth_interval=3)
    ta.cuda.reset_sync_count()
    for i in range(8):
        opt.zero_grad()
        loss = F.mse_loss(model(x.half()).float(), y) * (1e36 if i == 4 else 1.0)  # one skipped step
        with np.errstate(over="ignore", invalid="ignore"):
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            ta.nn.utils.clip_grad_norm_(opt.master_params(), max_norm=1.0)
        scaler.step(opt)
        scaler.update()
    assert ta.cuda.sync_count() == 0
    assert scaler.get_scale() == 2.0 ** 13  # 4 clean (one growth), 1 skip (back off), 3 clean (one growth)


def test_a_write_through_a_data_alias_taken_before_the_step_reaches_the_master() -> None:
    # The alias shares the parameter's storage counter from before the step, so neither the version nor the
    # counter's identity moves: only the counter's count tells the master it is stale (issue 30's audit).
    p = ta.nn.Parameter(ta.full((4,), 1.0, dtype=ta.float16))
    opt = SGD([p], lr=0.5, master_weights=True)
    alias = p.data  # taken before the first step
    for _ in range(2):
        opt.zero_grad()
        (p.float() * 2).sum().backward()
        opt.step()
        if _ == 0:
            alias.fill_(10.0)  # the user's write between the steps
    np.testing.assert_array_equal(p.detach().float().numpy(), np.full(4, 10.0 - 0.5 * 2))
