"""``ta.cuda.make_graphed_step``: a whole AMP training step captured once and replayed.

The central check: training the MNIST MLP with the graphed step follows eager
training bit for bit (losses, scale, skipped steps, weights), for AMP O1 and
O2 with SGD and Adam, through injected overflow steps. On the CUDA stand-in
the capture is also a capture-safety check (every sync, host copy or foreign
allocation in the step raises), and the replay redoes only what was recorded,
so a step that depended on host work at each call would drift here too.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tinyamp as ta
import tinyamp.nn.functional as F
from tinyamp import backend
from tinyamp.cuda import graphed_step
from tinyamp.data import load_mnist

STEPS = 100
BATCH = 32
HIDDEN = 16  # the example's MLP (784-hidden-10), small enough for CI
OVERFLOW_STEPS = (5, 31, 32, 77)  # a batch with a huge pixel: float16 overflows, the scaler skips the step
# (the scale, grown every 8 good steps, also overflows by itself now and then: both runs must skip those too)


def _batches(count: int = STEPS) -> list:
    images, labels = load_mnist(flatten=True, normalize=True)
    batches = []
    for k in range(count):
        x = images[k * BATCH:(k + 1) * BATCH].copy()
        if k in OVERFLOW_STEPS:
            x[3, 100] = 1e6  # inf in float16
        batches.append((ta.tensor(x, device="cuda"), ta.tensor(labels[k * BATCH:(k + 1) * BATCH], device="cuda")))
    return batches


def _training(level: str, optimizer: str, *, dropout: float = 0.0, init_scale: float = 2.0 ** 12,
              growth_interval: int = 8):
    """(model, optimizer, scaler, train_step) for the MNIST MLP at AMP ``level`` ("O1" or "O2"); ``dropout``
    puts a Dropout layer before the last Linear. By default the scale grows within the run and backs off too."""
    ta.manual_seed(0)
    layers = [ta.nn.Linear(784, HIDDEN), ta.nn.ReLU()] + ([ta.nn.Dropout(dropout)] if dropout else [])
    model = ta.nn.Sequential(*layers, ta.nn.Linear(HIDDEN, 10)).to("cuda")
    o2 = level == "O2"
    if o2:
        model.half()
    if optimizer == "adam":
        opt = ta.optim.Adam(model.parameters(), lr=1e-3, master_weights=o2)
    else:
        opt = ta.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, master_weights=o2)
    scaler = ta.amp.GradScaler(init_scale=init_scale, growth_interval=growth_interval)

    def train_step(x, y):
        opt.zero_grad()
        if o2:
            loss = F.cross_entropy(model(x.half()).float(), y)
        else:
            with ta.autocast("cuda", dtype=ta.float16):
                loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return model, opt, scaler, train_step


def _train(level: str, optimizer: str, batches: list, graphed: bool) -> dict:
    model, _, scaler, train_step = _training(level, optimizer)
    step = ta.cuda.make_graphed_step(train_step, batches[0]) if graphed else train_step
    losses, scales, skipped = [], [], []
    for x, y in batches:
        loss = step(x, y)
        losses.append(loss.item())
        scales.append(scaler.get_scale())
        skipped.append(scaler.last_step.skipped)
    result = {"losses": np.array(losses), "scales": scales, "skipped": skipped,
              "weights": [p.detach().float().numpy() for p in model.parameters()]}
    if graphed:
        assert step.captured and step.calls == len(batches)
        result["skipped_on_device"] = step.skipped_steps.item()
        result["scale_on_device"] = step.scale.item()
    return result


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("level", ["O1", "O2"])
def test_graphed_training_follows_eager_training_bit_for_bit(cuda_backend, level, optimizer) -> None:
    batches = _batches()
    eager = _train(level, optimizer, batches, graphed=False)
    graphed = _train(level, optimizer, batches, graphed=True)
    skipped = [k for k, s in enumerate(eager["skipped"]) if s]
    assert set(OVERFLOW_STEPS) <= set(skipped)
    assert len(set(eager["scales"])) >= 3  # the scale grew and backed off: a trajectory worth comparing
    assert graphed["skipped"] == eager["skipped"]
    assert graphed["scales"] == eager["scales"]
    np.testing.assert_array_equal(graphed["losses"], eager["losses"])  # NaN at the overflow steps, in both
    for got, want in zip(graphed["weights"], eager["weights"]):
        np.testing.assert_array_equal(got, want)
    assert graphed["skipped_on_device"] == len(skipped)
    assert graphed["scale_on_device"] == eager["scales"][-1]


def _dropout_training(graphed: bool, batches: list) -> tuple:
    """An MLP with dropout trained from seed 2: (each step's dropout output, the final weights)."""
    ta.manual_seed(2)
    model = ta.nn.Sequential(ta.nn.Linear(784, HIDDEN), ta.nn.ReLU()).to("cuda")
    head = ta.nn.Linear(HIDDEN, 10).to("cuda")
    opt = ta.optim.SGD([*model.parameters(), *head.parameters()], lr=0.05)

    def train_step(x, y):
        opt.zero_grad()
        h = F.dropout(model(x), 0.5)
        loss = F.cross_entropy(head(h), y)
        loss.backward()
        opt.step()
        return loss, h.detach()

    step = ta.cuda.make_graphed_step(train_step, batches[0], num_warmup_iters=2) if graphed else train_step
    dropped = [step(x, y)[1].cpu().numpy() for x, y in batches]
    if graphed:
        assert step.captured
    return dropped, [p.detach().numpy() for p in [*model.parameters(), *head.parameters()]]


def test_dropout_in_a_graphed_step_draws_the_eager_steps_masks(cuda_backend) -> None:
    """Each replay draws a new mask, the one the same eager step draws (PyTorch's guarantee too)."""
    batches = _batches(7)
    eager, eager_weights = _dropout_training(False, batches)
    graphed, graphed_weights = _dropout_training(True, batches)
    masks = [d == 0 for d in graphed]
    assert len({m.tobytes() for m in masks[3:]}) == 4  # the replays' masks differ
    for got, want in zip(graphed, eager):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(graphed_weights, eager_weights):
        np.testing.assert_array_equal(got, want)


def test_a_replayed_step_costs_one_graph_launch_and_no_host_work(standin_backend) -> None:
    batches = _batches(8)
    *_, train_step = _training("O1", "sgd")
    step = ta.cuda.make_graphed_step(train_step, batches[0])
    for x, y in batches[:4]:
        step(x, y)
    counters = ta.cuda.standin_counters()
    counters.reset()
    syncs = ta.cuda.sync_count()
    for x, y in batches[4:]:
        step(x, y)
    assert ta.cuda.sync_count() == syncs
    for kind, per_step in (("launches", 3), ("allocations", 0), ("h2d", 0), ("d2h", 0), ("syncs", 0)):
        assert counters.total(kind) == per_step * 4, (kind, counters.report())
    assert counters.kernels() == {"memcpyAsync": 8, "cudaGraphLaunch": 4}  # two input copies, one replay


def test_a_non_contiguous_input_is_copied_into_the_static_input_as_its_values(cuda_backend) -> None:
    batches = _batches(6)
    graphed_model, _, _, train_step = _training("O1", "sgd")
    step = ta.cuda.make_graphed_step(train_step, batches[0])
    eager_model, _, _, eager_step = _training("O1", "sgd")
    for x, y in batches:  # the last one overflows: a NaN loss, a skipped step, in both
        strided = ta.tensor(np.repeat(x.numpy(), 2, axis=1), device="cuda")[:, ::2]  # x's values, every other column
        assert not strided.array.flags.c_contiguous
        np.testing.assert_array_equal(step(strided, y).item(), eager_step(x, y).item())
    for graphed, eager in zip(graphed_model.parameters(), eager_model.parameters()):
        np.testing.assert_array_equal(graphed.detach().numpy(), eager.detach().numpy())


def test_the_capture_safety_mode_fails_when_a_host_read_is_added_to_the_step(cuda_backend) -> None:
    """The stand-in refuses a raw device read that tinyamp's own check cannot see; tinyamp refuses its own."""
    batches = _batches(5)
    *_, train_step = _training("O1", "sgd")

    def logging_step(x, y):
        loss = train_step(x, y)
        if bool(loss.array > 100):  # a raw CuPy read: a synchronisation
            raise AssertionError("diverged")
        return loss

    step = ta.cuda.make_graphed_step(logging_step, batches[0])
    for x, y in batches[:3]:
        step(x, y)  # eager warm-up: the read is allowed (and costs a sync)
    with pytest.raises(RuntimeError) as info:
        step(*batches[3])
    message = str(info.value)
    # CuPy's own refusal of the transfer (cupy/cuda/memory.pyx), which the stand-in gives too, naming the read
    assert message.startswith("the current stream is capturing, so D2H transfers are disallowed"), message
    if backend.standin_active():
        assert "a device-to-host copy (bool)" in message
        assert re.search(r"test_graphed_step\.py:\d+ \(logging_step\)", message), message
    with pytest.raises(RuntimeError, match=r"graphed step: its capture failed, so it cannot replay \("):
        step(*batches[4])


@pytest.mark.parametrize("read, what", [
    (lambda loss: loss.item(), r"Tensor\.item\(\)"),
    (lambda loss: float(loss), r"Tensor\.item\(\)"),
    (lambda loss: loss.detach().numpy(), r"Tensor\.numpy\(\)"),
    (lambda loss: f"{loss:.4f}", r"Tensor\.item\(\)"),
])
def test_a_host_read_in_the_step_is_refused_at_the_capture_naming_it(cuda_backend, read, what) -> None:
    batches = _batches(2)
    *_, train_step = _training("O1", "adam")

    def step_with_read(x, y):
        loss = train_step(x, y)
        read(loss)
        return loss

    step = ta.cuda.make_graphed_step(step_with_read, batches[0], num_warmup_iters=1)
    step(*batches[0])
    with pytest.raises(RuntimeError, match=what + r".* inside a CUDA graph capture, at .*test_graphed_step\.py:\d+ "
                                              r"\(<lambda>\): a host read needs the GPU's result now"):
        step(*batches[1])


class _HostSkippingSGD(ta.optim.SGD):
    """An optimizer without the device-side skip contract: GradScaler must read found_inf on the host."""

    _step_supports_amp_scaling = False


def test_an_optimizer_without_the_device_side_skip_contract_is_refused(cuda_backend) -> None:
    batches = _batches(2)
    model = ta.nn.Linear(784, 10).to("cuda")
    opt, scaler = _HostSkippingSGD(model.parameters(), lr=0.1), ta.amp.GradScaler()

    def train_step(x, y):
        opt.zero_grad()
        with ta.autocast("cuda", dtype=ta.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    step = ta.cuda.make_graphed_step(train_step, batches[0], num_warmup_iters=1)
    step(*batches[0])
    with pytest.raises(RuntimeError, match=r"GradScaler\.step\(_HostSkippingSGD\) inside a CUDA graph capture, at "
                                           r".*: _HostSkippingSGD does not implement the device-side skip contract "
                                           r"\(_step_supports_amp_scaling"):
        step(*batches[1])


def test_inputs_of_another_shape_dtype_or_device_are_refused(cuda_backend) -> None:
    batches = _batches(2)
    *_, train_step = _training("O1", "sgd")
    step = ta.cuda.make_graphed_step(train_step, batches[0], num_warmup_iters=1)
    x, y = batches[1]
    with pytest.raises(ValueError, match=r"graphed step: input 0 has shape \[16, 784\], dtype float32 on cuda:0, "
                                         r"but the step was made for shape \[32, 784\], dtype float32 on cuda:0"):
        step(x[:16], y[:16])
    with pytest.raises(ValueError, match=r"input 0 has shape \[32, 784\], dtype float16 .* made for shape "
                                         r"\[32, 784\], dtype float32"):
        step(x.half(), y)
    with pytest.raises(ValueError, match=r"input 1 has shape \[32\], dtype int64 on cpu, but .* on cuda:0"):
        step(x, y.cpu())
    with pytest.raises(TypeError, match=r"takes 2 input tensor\(s\), as its sample_inputs, got 1"):
        step(x)
    for _ in range(3):  # and the same checks hold once the step replays
        step(x, y)
    with pytest.raises(ValueError, match=r"input 0 has shape \[16, 784\]"):
        step(x[:16], y[:16])


def test_an_autocast_state_other_than_the_captures_is_refused(cuda_backend) -> None:
    batches = _batches(3)
    model = ta.nn.Linear(784, 10).to("cuda")
    opt = ta.optim.SGD(model.parameters(), lr=0.1)

    def train_step(x, y):  # autocast comes from the caller's region
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    step = ta.cuda.make_graphed_step(train_step, batches[0], num_warmup_iters=1)
    with ta.autocast("cuda", dtype=ta.float16):
        step(*batches[0])
        step(*batches[1])  # captured under float16 autocast
    with pytest.raises(RuntimeError, match=r"graphed step: called under autocast off, but it was captured under "
                                           r"autocast\(float16 on cuda\)"):
        step(*batches[2])
    with pytest.raises(RuntimeError, match=r"called under autocast\(bfloat16 on cuda\)"):
        with ta.autocast("cuda", dtype=ta.bfloat16):
            step(*batches[2])
    ta.amp.set_op_precision("linear", "fp32")
    try:
        with pytest.raises(RuntimeError, match=r"with overrides \{'linear': Precision\.FP32\}, but it was captured "
                                               r"under autocast\(float16 on cuda\);"):
            with ta.autocast("cuda", dtype=ta.float16):
                step(*batches[2])
    finally:
        ta.amp.reset_op_precision("linear")
    with ta.autocast("cuda", dtype=ta.float16):
        step(*batches[2])  # the capture's state again: it replays


def test_a_hyper_parameter_the_graph_froze_cannot_change_after_the_capture(cuda_backend) -> None:
    batches = _batches(3)
    _, opt, _, train_step = _training("O1", "sgd")
    step = ta.cuda.make_graphed_step(train_step, batches[0], num_warmup_iters=1)
    step(*batches[0])
    step(*batches[1])
    opt.param_groups[0]["nesterov"] = True
    with pytest.raises(RuntimeError, match=r"graphed step: SGD\.param_groups\[0\]\['nesterov'\] changed from False "
                                           r"to True after the step was captured, but the captured update still "
                                           r"uses False"):
        step(*batches[2])
    opt.param_groups[0]["nesterov"] = False
    opt.add_param_group({"params": [ta.nn.Parameter(ta.zeros(3, device="cuda"))]})
    with pytest.raises(RuntimeError, match=r"SGD has 2 parameter groups, but had 1 when the step was captured"):
        step(*batches[2])


def test_gradients_set_to_none_or_replaced_state_after_the_capture_are_refused(cuda_backend) -> None:
    batches = _batches(3)
    model, opt, _, train_step = _training("O1", "sgd")
    step = ta.cuda.make_graphed_step(train_step, batches[0], num_warmup_iters=1)
    step(*batches[0])
    step(*batches[1])
    opt.zero_grad()  # set_to_none=True outside the step: the graph would keep writing the old arrays
    with pytest.raises(RuntimeError, match=r"graphed step: SGD\.param_groups\[0\]\['params'\]\[0\] \(shape "
                                           r"\[16, 784\]\)\.grad is None since the capture.*zero_grad\(set_to_none="
                                           r"False\)"):
        step(*batches[2])
    step = ta.cuda.make_graphed_step(train_step, batches[0], num_warmup_iters=1)
    step(*batches[0])
    step(*batches[1])
    opt.load_state_dict(opt.state_dict())  # new state arrays: the graph would update the old ones
    with pytest.raises(RuntimeError, match=r"SGD\.state\[SGD\.param_groups\[0\]\['params'\]\[0\] \(shape "
                                           r"\[16, 784\]\)\]\['momentum_buffer'\] is another array since the "
                                           r"capture.*copy_ under no_grad"):
        step(*batches[2])


def test_make_graphed_step_checks_its_arguments(cuda_backend) -> None:
    x = ta.zeros(4, 784, device="cuda")
    with pytest.raises(ValueError, match=r"num_warmup_iters must be an integer >= 1, got 0"):
        ta.cuda.make_graphed_step(lambda x: x, (x,), num_warmup_iters=0)
    with pytest.raises(ValueError, match=r"sample_inputs\[0\] \(shape \[4, 784\], float32\) is on cpu"):
        ta.cuda.make_graphed_step(lambda x: x, (x.cpu(),))
    with pytest.raises(ValueError, match=r"sample_inputs\[0\] requires grad"):
        ta.cuda.make_graphed_step(lambda x: x, (x.requires_grad_(),))
    with pytest.raises(TypeError, match=r"sample_inputs\[1\] must be a Tensor, got int"):
        ta.cuda.make_graphed_step(lambda x: x, (ta.zeros(2, device="cuda"), 3))


def test_zero_grad_without_set_to_none_in_the_step_follows_eager_training(cuda_backend) -> None:
    batches = _batches(10)
    results = []
    for graphed in (False, True):
        model, opt, scaler, _ = _training("O1", "sgd")

        def train_step(x, y):
            opt.zero_grad(set_to_none=False)  # the graph zeroes the warm-up's gradient arrays, then fills them
            with ta.autocast("cuda", dtype=ta.float16):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return loss

        step = ta.cuda.make_graphed_step(train_step, batches[0], num_warmup_iters=2) if graphed else train_step
        results.append([step(x, y).item() for x, y in batches] + [p.detach().numpy() for p in model.parameters()])
    for got, want in zip(results[1], results[0]):
        np.testing.assert_array_equal(got, want)


def test_gradient_accumulation_with_a_graphed_micro_step_follows_eager_training(cuda_backend) -> None:
    """Graph forward + backward (no zero_grad: the graph adds into p.grad); step and zero outside the graph."""
    batches = _batches(12)
    results = []
    for graphed in (False, True):
        model, opt, _, _ = _training("O1", "sgd")

        def micro_step(x, y):
            with ta.autocast("cuda", dtype=ta.float16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss

        step = ta.cuda.make_graphed_step(micro_step, batches[0], num_warmup_iters=2) if graphed else micro_step
        losses = []
        for k, (x, y) in enumerate(batches):
            losses.append(step(x, y).item())
            if k % 3 == 2:
                opt.step()
                opt.zero_grad(set_to_none=False)  # keep the arrays the graph accumulates into
        results.append(losses + [p.detach().numpy() for p in model.parameters()])
    for got, want in zip(results[1], results[0]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_scheduler_changing_learning_rate_and_momentum_keeps_graphed_training_on_the_eager_path(
        cuda_backend, optimizer) -> None:
    """OneCycleLR moves the learning rate every step and the momentum (SGD) or beta1 (Adam) with it: the
    fused kernels read them from device memory, which each call refreshes before the replay."""
    batches = _batches()  # 100 steps, the injected overflows included
    results = []
    for graphed in (False, True):
        model, opt, _, train_step = _training("O1", optimizer)
        schedule = ta.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1 if optimizer == "sgd" else 3e-3,
                                                    total_steps=len(batches))
        step = ta.cuda.make_graphed_step(train_step, batches[0]) if graphed else train_step
        losses = []
        for x, y in batches:
            losses.append(step(x, y).item())
            schedule.step()
        results.append(losses + [p.detach().numpy() for p in model.parameters()])
    for got, want in zip(results[1], results[0]):
        np.testing.assert_array_equal(got, want)
    assert len({round(loss, 6) for loss in results[0][:STEPS]}) > 80  # a trajectory, not a constant


def test_without_the_refresh_a_graph_would_keep_the_captured_learning_rate(cuda_backend) -> None:
    """The check above can fail: skipping the refresh leaves the replays on the capture's learning rate."""
    batches = _batches(8)
    results = []
    for refresh in (True, False):
        model, opt, _, train_step = _training("O1", "sgd")
        step = ta.cuda.make_graphed_step(train_step, batches[0], num_warmup_iters=1)
        if not refresh:
            step._refresh_hyper_parameters = lambda: None
        for k, (x, y) in enumerate(batches):
            step(x, y)
            opt.param_groups[0]["lr"] = 0.05 / (k + 2)
        results.append([p.detach().numpy() for p in model.parameters()])
    assert not all(np.array_equal(a, b) for a, b in zip(*results))


# ------------------------------------------------- issue 30: every change after a capture, followed or refused
def _clean_batches(count: int) -> list:
    """Batches after the first injected overflow (step 5): every step of these is kept."""
    return _batches(6 + count)[6:]


def _table_training(level: str):
    """An MLP with dropout, SGD with momentum, a scale that grows but never overflows in 6 steps."""
    return _training(level, "sgd", dropout=0.25, init_scale=2.0 ** 8, growth_interval=2)


def _under_no_grad(write):
    def change(model, opt, scaler):
        with ta.no_grad():
            write(model, opt, scaler)
    return change


class _During:
    """A change that is the state the later calls run in (an autocast region, no_grad)."""

    def __init__(self, make) -> None:
        self.make = make

    def __call__(self, model, opt, scaler) -> "_During":
        return self


def _context(make) -> _During:
    return _During(make)


def _set_global_precision(model, opt, scaler):
    ta.amp.set_op_precision("relu", "fp32")


def _set_matmul_precision(model, opt, scaler):
    ta.set_float32_matmul_precision("high")


# Weights written in every public way: the replay's forward reads the new values (equal to eager).
_WEIGHT_WRITES = {
    "model.load_state_dict": lambda m, o, s: m.load_state_dict({k: v * 0.5 for k, v in m.state_dict().items()}),
    "p.copy_ under no_grad": _under_no_grad(lambda m, o, s: m[0].weight.copy_(m[0].weight * -1.0)),
    "p.zero_ under no_grad": _under_no_grad(lambda m, o, s: m[3].weight.zero_()),
    "p.mul_ under no_grad": _under_no_grad(lambda m, o, s: m[0].weight.mul_(0.25)),
    "p[k] = v under no_grad": _under_no_grad(lambda m, o, s: m[0].weight.__setitem__(slice(0, 4), 0.5)),
    "p.data.zero_()": lambda m, o, s: m[3].weight.data.zero_(),
    "p.data[:] = v": lambda m, o, s: m[0].weight.data.__setitem__(slice(None, 5), 0.125),
    "p.data.copy_": lambda m, o, s: m[0].weight.data.copy_(m[0].weight.data * 3.0),
    "p.data.mul_ (bias)": lambda m, o, s: m[0].bias.data.mul_(-2.0),
}

# Other changes a replay follows (equal to eager).
_FOLLOWED = {
    "learning rate": lambda m, o, s: o.param_groups[0].__setitem__("lr", 0.01),
    "momentum": lambda m, o, s: o.param_groups[0].__setitem__("momentum", 0.5),
    "weight_decay": lambda m, o, s: o.param_groups[0].__setitem__("weight_decay", 0.01),
    "momentum buffer zeroed": lambda m, o, s: [o.state[p]["momentum_buffer"].zero_() for p in m.parameters()],
    "zero_grad(set_to_none=False)": lambda m, o, s: o.zero_grad(set_to_none=False),
    "scaler.update(new_scale)": lambda m, o, s: s.update(256.0),
    "scaler.load_state_dict": lambda m, o, s: s.load_state_dict({**s.state_dict(), "scale": 512.0}),
    "model.eval() then model.train()": lambda m, o, s: m.eval().train(),
    "manual_seed": lambda m, o, s: ta.manual_seed(7),
    "autocast(enabled=False) around the step": _context(lambda: ta.autocast("cuda", enabled=False)),
}

# Changes the graph cannot follow: a clear error naming them.
_REFUSED = {
    "p.data = another tensor": (lambda m, o, s: setattr(m[0].weight, "data", m[0].weight.data.clone()),
                                r"the data of .*\(shape \[16, 784\]\) is another array since the capture"),
    "model.half()": (lambda m, o, s: m.half(), r"is another array since the capture"),
    "requires_grad_(False) on a layer": (lambda m, o, s: m[3].requires_grad_(False),
                                         r"graphed step: Sequential\.3\.weight \(shape \[10, 16\]\)\.requires_grad is "
                                         r"False since the capture \(True then\)"),
    "model.eval()": (lambda m, o, s: m.eval(), r"graphed step: Sequential\.training is False since the capture "
                                               r"\(True then\).*make_graphed_callables"),
    "dropout layer's eval()": (lambda m, o, s: m[2].eval(), r"Sequential\.2\.training is False"),
    "scaler.set_growth_factor": (lambda m, o, s: s.set_growth_factor(4.0),
                                 r"GradScaler\.growth_factor changed from 2\.0 to 4\.0 \(GradScaler\.set_growth_factor\)"),
    "scaler.set_backoff_factor": (lambda m, o, s: s.set_backoff_factor(0.25),
                                  r"GradScaler\.backoff_factor changed from 0\.5 to 0\.25"),
    "scaler.set_growth_interval": (lambda m, o, s: s.set_growth_interval(7),
                                   r"GradScaler\.growth_interval changed from 2 to 7"),
    "nesterov": (lambda m, o, s: o.param_groups[0].__setitem__("nesterov", True), r"\['nesterov'\] changed"),
    "add_param_group": (lambda m, o, s: o.add_param_group({"params": [ta.nn.Parameter(ta.zeros(3, device="cuda"))]}),
                        r"SGD has 2 parameter groups"),
    "optimizer.load_state_dict": (lambda m, o, s: o.load_state_dict(o.state_dict()),
                                  r"\['momentum_buffer'\] is another array since the capture"),
    "optimizer.zero_grad()": (lambda m, o, s: o.zero_grad(), r"\.grad is None since the capture"),
    "autocast(bfloat16) around the step": (_context(lambda: ta.autocast("cuda", dtype=ta.bfloat16)),
                                           r"called under autocast\(bfloat16 on cuda\), but it was captured under "
                                           r"autocast off"),
    "set_op_precision": (_set_global_precision, r"with overrides \{'relu': Precision\.FP32\}"),
    "no_grad around the step": (_context(ta.no_grad), r"called with grad mode disabled \(no_grad\), but it was "
                                                      r"captured with grad mode enabled"),
    "set_float32_matmul_precision": (_set_matmul_precision, r"float32 matmul precision high, but it was captured "
                                                            r"with float32 matmul precision highest"),
}


def _run_with_change(level: str, change, graphed: bool, batches: list) -> dict:
    """Calls 0-2 (a warm-up, the capture, a replay when graphed), ``change``, then calls 3-5."""
    model, opt, scaler, train_step = _table_training(level)
    step = ta.cuda.make_graphed_step(train_step, batches[0], num_warmup_iters=1) if graphed else train_step
    losses = [step(*batches[k]).item() for k in range(3)]
    if graphed:
        assert step.captured
    context = change(model, opt, scaler)
    for k in range(3, 6):
        with (context.make() if isinstance(context, _During) else _nothing()):
            losses.append(step(*batches[k]).item())
    return {"losses": losses, "scale": scaler.get_scale(),
            "weights": [p.detach().float().numpy() for p in model.parameters()]}


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None


@pytest.mark.parametrize("level, what", [*(("O1", what) for what in [*_WEIGHT_WRITES, *_FOLLOWED]),
                                         *(("O2", what) for what in _WEIGHT_WRITES)])  # O2: the masters follow
def test_a_change_after_the_capture_is_followed_as_eager_training_follows_it(standin_backend, level, what) -> None:
    change = _WEIGHT_WRITES.get(what) or _FOLLOWED[what]
    batches = _clean_batches(6)
    eager = _run_with_change(level, change, False, batches)
    graphed = _run_with_change(level, change, True, batches)
    assert np.isfinite(eager["losses"]).all()  # every step is kept: the change has to show in the weights
    assert graphed["losses"] == eager["losses"] and graphed["scale"] == eager["scale"]
    for got, want in zip(graphed["weights"], eager["weights"]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("what", list(_REFUSED))
def test_a_change_after_the_capture_the_graph_cannot_follow_is_refused_naming_it(standin_backend, what) -> None:
    change, message = _REFUSED[what]
    batches = _clean_batches(4)
    model, opt, scaler, train_step = _table_training("O1")
    step = ta.cuda.make_graphed_step(train_step, batches[0], num_warmup_iters=1)
    for k in range(3):
        step(*batches[k])
    context = change(model, opt, scaler)
    try:
        with pytest.raises(RuntimeError, match=message):
            with (context.make() if isinstance(context, _During) else _nothing()):
                step(*batches[3])
    finally:
        ta.amp.reset_op_precision("relu")
        ta.set_float32_matmul_precision("highest")


def test_the_weight_changes_reach_the_replay_only_through_the_refresh(standin_backend) -> None:
    """The followed-writes check can fail: without refreshing the 16-bit copies, the replay reads the old weights."""
    batches = _clean_batches(6)
    write = _WEIGHT_WRITES["p.zero_ under no_grad"]
    eager = _run_with_change("O1", write, False, batches)
    real = graphed_step.refresh_cached_copy
    graphed_step.refresh_cached_copy = lambda copy: None
    try:
        stale = _run_with_change("O1", write, True, batches)
    finally:
        graphed_step.refresh_cached_copy = real
    assert stale["losses"][3] != eager["losses"][3]
