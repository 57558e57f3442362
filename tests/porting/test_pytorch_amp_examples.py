"""PyTorch's AMP documentation, run under ``import tinyamp as torch`` (issue 12, acceptance).

Each test writes one example of PyTorch's "Automatic Mixed Precision examples"
page (docs/source/notes/amp_examples.rst) or of its "Automatic Mixed
Precision" recipe in the same shape and with the same names, changed only as
README.md's "Differences from PyTorch" lists: the device is the ``device``
fixture ("cpu", or "cuda" with a GPU) where the documentation writes "cuda",
models move with ``.to(device)``, and ``torch.load`` takes ``map_location=device``
where the recipe's comment passes a function of (storage, location).

None of them is only checked to run. Each is compared with the update rule:
the same loop written by hand with explicit loss scaling (``HandScaler``:
multiply the loss by S, divide the gradients by S, skip the step on inf/nan,
halve S on a skip and double it after ``growth_interval`` clean steps), run on
an identical copy of the model; the two must agree bit for bit (both take the
same float16/float32 operations, and S is a power of two, so scaling and
unscaling are exact). The default-precision recipe loop is compared with a
NumPy float64 transcription of the network and its SGD step. Every loop
contains an overflowing batch, so the skip and the scale back-off happen.
"""

from __future__ import annotations

import copy
import gc
import threading
import time

import numpy as np
import pytest

import tinyamp as torch
import tinyamp.nn as nn
import tinyamp.optim as optim
from tinyamp.amp import GradScaler, autocast, custom_bwd, custom_fwd


# --------------------------------------------------------------------------
# The hand-written reference
# --------------------------------------------------------------------------

class HandScaler:
    """PyTorch's dynamic loss scaling, written out: the rule every example is checked against."""

    def __init__(self, scale: float = 2.0 ** 16, growth_interval: int = 2000) -> None:
        self.scale, self.growth_interval, self.clean_steps = scale, growth_interval, 0
        self.history: list[float] = []

    def unscale(self, params) -> bool:
        """Divide every gradient by S (exactly: S is a power of two); True when all are finite."""
        finite = True
        for p in params:
            if p.grad is not None:
                p.grad = p.grad * (1.0 / self.scale)
                finite = finite and bool(np.isfinite(p.grad.detach().cpu().numpy()).all())
        return finite

    def update(self, finite: bool) -> None:
        if finite:
            self.clean_steps += 1
            if self.clean_steps == self.growth_interval:
                self.scale, self.clean_steps = self.scale * 2.0, 0
        else:
            self.scale, self.clean_steps = self.scale * 0.5, 0
        self.history.append(self.scale)


def assert_same_params(model_a: nn.Module, model_b: nn.Module) -> None:
    for (name, a), (_, b) in zip(model_a.named_parameters(), model_b.named_parameters()):
        np.testing.assert_array_equal(a.detach().cpu().numpy(), b.detach().cpu().numpy(), err_msg=name)


def snapshot(model: nn.Module) -> list[np.ndarray]:
    return [p.detach().cpu().numpy().copy() for p in model.parameters()]


class Net(nn.Module):
    """A small MLP standing in for the documentation's ``Net``."""

    def __init__(self, in_size: int = 8, hidden: int = 16, out_size: int = 4) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(in_size, hidden), nn.Linear(hidden, out_size)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def make_data(device: str, batches: int = 6, overflow_at: int = 3, batch: int = 8, in_size: int = 8,
              out_size: int = 4) -> list:
    """(input, target) pairs; batch ``overflow_at`` overflows float16 in the forward pass (and no other batch).

    Drawn by the CPU generator and moved to ``device``: every device trains on the same numbers, whose
    overflow pattern the tests count (the GPU generator's numbers overflowed a second batch on an H200).
    """
    data = []
    for i in range(batches):
        x = torch.randn(batch, in_size)
        if i == overflow_at:
            x = x * 1e6  # float16 activations become inf: the scaled gradients are inf/nan
        data.append((x.to(device), torch.randn(batch, out_size).to(device)))
    return data


def two_copies(device: str, make=Net) -> tuple:
    torch.manual_seed(0)
    model = make().to(device)
    return model, copy.deepcopy(model)


# --------------------------------------------------------------------------
# amp_examples.rst: "Typical Mixed Precision Training"
# --------------------------------------------------------------------------

def test_typical_mixed_precision_training(device: str) -> None:
    model, reference = two_copies(device)
    loss_fn = nn.MSELoss()
    data, epochs = make_data(device), range(2)

    # The example: model and optimizer in default precision, one GradScaler for the run.
    optimizer = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = GradScaler()
    scales, skipped = [], []
    for epoch in epochs:
        for input, target in data:
            optimizer.zero_grad()
            before = snapshot(model)
            with autocast(device_type=device, dtype=torch.float16):
                output = model(input)
                loss = loss_fn(output, target)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scales.append(scaler.get_scale())
            skipped.append(all(np.array_equal(a, b) for a, b in zip(before, snapshot(model))))

    # By hand: scale, unscale, skip, update the scale.
    hand_optimizer = optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    hand = HandScaler()
    for epoch in epochs:
        for input, target in data:
            hand_optimizer.zero_grad()
            with autocast(device_type=device, dtype=torch.float16):
                loss = loss_fn(reference(input), target)
            (loss * hand.scale).backward()
            finite = hand.unscale(reference.parameters())
            if finite:
                hand_optimizer.step()
            hand.update(finite)

    assert scales == hand.history == [2.0 ** 16] * 3 + [2.0 ** 15] * 6 + [2.0 ** 14] * 3
    assert skipped == [False, False, False, True, False, False] * 2
    assert_same_params(model, reference)


# --------------------------------------------------------------------------
# "Working with Unscaled Gradients": gradient clipping
# --------------------------------------------------------------------------

def test_gradient_clipping_with_unscale(device: str) -> None:
    model, reference = two_copies(device)
    loss_fn, max_norm = nn.MSELoss(), 0.5
    data, epochs = make_data(device), range(2)

    optimizer = optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler()
    for epoch in epochs:
        for input, target in data:
            optimizer.zero_grad()
            with autocast(device_type=device, dtype=torch.float16):
                output = model(input)
                loss = loss_fn(output, target)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)  # the gradients are unscaled in place, so clip as usual
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)  # already unscaled: step only checks for inf/nan
            scaler.update()

    # By hand: the clip is the NumPy formula (float64 norm), the step the SGD rule.
    hand = HandScaler()
    for epoch in epochs:
        for input, target in data:
            for p in reference.parameters():
                p.grad = None
            with autocast(device_type=device, dtype=torch.float16):
                loss = loss_fn(reference(input), target)
            (loss * hand.scale).backward()
            finite = hand.unscale(reference.parameters())
            if finite:
                grads = [p.grad.detach().cpu().numpy().astype(np.float64) for p in reference.parameters()]
                norm = np.sqrt(sum((g * g).sum() for g in grads))
                coef = min(max_norm / (norm + 1e-6), 1.0)
                with torch.no_grad():
                    for p, g in zip(reference.parameters(), grads):
                        p.copy_(torch.tensor(p.detach().cpu().numpy() - 0.1 * g * coef, device=device))
            hand.update(finite)

    assert scaler.get_scale() == hand.scale == 2.0 ** 14
    # tinyamp computes the norm and the update in float32, the reference in float64:
    # a few float32 roundings of values below 1 (6e-8 each), over 10 steps.
    for a, b in zip(model.parameters(), reference.parameters()):
        np.testing.assert_allclose(a.detach().cpu().numpy(), b.detach().cpu().numpy(), rtol=0, atol=2e-6)


# --------------------------------------------------------------------------
# "Working with Scaled Gradients": gradient accumulation
# --------------------------------------------------------------------------

def test_gradient_accumulation(device: str) -> None:
    model, reference = two_copies(device)
    loss_fn, iters_to_accumulate = nn.MSELoss(), 2
    data, epochs = make_data(device, batches=8, overflow_at=5), range(1)

    optimizer = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = GradScaler()
    for epoch in epochs:
        for i, (input, target) in enumerate(data):
            with autocast(device_type=device, dtype=torch.float16):
                output = model(input)
                loss = loss_fn(output, target)
                loss = loss / iters_to_accumulate
            scaler.scale(loss).backward()  # scaled gradients add up over the effective batch
            if (i + 1) % iters_to_accumulate == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()

    hand_optimizer = optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    hand = HandScaler()
    for epoch in epochs:
        for i, (input, target) in enumerate(data):
            with autocast(device_type=device, dtype=torch.float16):
                loss = loss_fn(reference(input), target) / iters_to_accumulate
            (loss * hand.scale).backward()  # S stays fixed while the effective batch accumulates
            if (i + 1) % iters_to_accumulate == 0:
                finite = hand.unscale(reference.parameters())
                if finite:
                    hand_optimizer.step()
                hand.update(finite)
                hand_optimizer.zero_grad()

    assert hand.history == [2.0 ** 16, 2.0 ** 16, 2.0 ** 15, 2.0 ** 15]  # batch 5 spoils step 3 only
    assert scaler.get_scale() == hand.scale
    assert_same_params(model, reference)


# --------------------------------------------------------------------------
# "Working with Scaled Gradients": gradient penalty
# --------------------------------------------------------------------------

def test_gradient_penalty(device: str) -> None:
    model, reference = two_copies(device)
    loss_fn = nn.MSELoss()
    data, epochs = make_data(device, batches=4, overflow_at=2), range(1)

    optimizer = optim.SGD(model.parameters(), lr=0.05)
    scaler = GradScaler()
    for epoch in epochs:
        for input, target in data:
            optimizer.zero_grad()
            with autocast(device_type=device, dtype=torch.float16):
                output = model(input)
                loss = loss_fn(output, target)

            # Out-of-place gradients of the scaled loss, kept differentiable.
            scaled_grad_params = torch.autograd.grad(outputs=scaler.scale(loss),
                                                     inputs=model.parameters(),
                                                     create_graph=True)
            # No optimizer owns them: unscale by ordinary (recorded) multiplication.
            inv_scale = 1. / scaler.get_scale()
            grad_params = [p * inv_scale for p in scaled_grad_params]

            # The penalty is part of the forward pass: inside autocast.
            with autocast(device_type=device, dtype=torch.float16):
                grad_norm = 0
                for grad in grad_params:
                    grad_norm += grad.pow(2).sum()
                grad_norm = grad_norm.sqrt()
                loss = loss + grad_norm

            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    hand_optimizer = optim.SGD(reference.parameters(), lr=0.05)
    hand = HandScaler()
    for epoch in epochs:
        for input, target in data:
            hand_optimizer.zero_grad()
            with autocast(device_type=device, dtype=torch.float16):
                loss = loss_fn(reference(input), target)
            scaled = torch.autograd.grad(loss * hand.scale, list(reference.parameters()), create_graph=True)
            with autocast(device_type=device, dtype=torch.float16):
                penalty = sum((g * (1.0 / hand.scale)).pow(2).sum() for g in scaled).sqrt()
                loss = loss + penalty
            (loss * hand.scale).backward()
            finite = hand.unscale(reference.parameters())
            if finite:
                hand_optimizer.step()
            hand.update(finite)

    assert scaler.get_scale() == hand.scale == 2.0 ** 15
    assert_same_params(model, reference)
    assert all(p.grad is not None for p in model.parameters())  # the penalty's double backward reached them


# --------------------------------------------------------------------------
# "Working with Multiple Models, Losses, and Optimizers"
# --------------------------------------------------------------------------

def test_multiple_models_losses_and_optimizers(device: str) -> None:
    torch.manual_seed(0)
    model0, model1 = Net().to(device), Net().to(device)
    ref0, ref1 = copy.deepcopy(model0), copy.deepcopy(model1)
    loss_fn = nn.MSELoss()
    data, epochs = make_data(device, batches=5, overflow_at=3), range(1)

    optimizer0 = optim.SGD(model0.parameters(), lr=0.05, momentum=0.9)
    optimizer1 = optim.Adam(model1.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler()
    scales = []
    for epoch in epochs:
        for input, target in data:
            optimizer0.zero_grad()
            optimizer1.zero_grad()
            with autocast(device_type=device, dtype=torch.float16):
                output0 = model0(input)
                output1 = model1(input)
                loss0 = loss_fn(2 * output0 + 3 * output1, target)
                loss1 = loss_fn(3 * output0 - 5 * output1, target)

            # The two backward passes share the graph of output0 and output1.
            scaler.scale(loss0).backward(retain_graph=True)
            scaler.scale(loss1).backward()

            # Explicit unscaling for one optimizer only, e.g. to inspect its gradients.
            scaler.unscale_(optimizer0)

            scaler.step(optimizer0)
            scaler.step(optimizer1)

            scaler.update()
            scales.append(scaler.get_scale())

    hand0 = optim.SGD(ref0.parameters(), lr=0.05, momentum=0.9)
    hand1 = optim.Adam(ref1.parameters(), lr=0.01)
    hand = HandScaler()
    for epoch in epochs:
        for input, target in data:
            hand0.zero_grad()
            hand1.zero_grad()
            with autocast(device_type=device, dtype=torch.float16):
                out0, out1 = ref0(input), ref1(input)
                l0, l1 = loss_fn(2 * out0 + 3 * out1, target), loss_fn(3 * out0 - 5 * out1, target)
            (l0 * hand.scale).backward(retain_graph=True)
            (l1 * hand.scale).backward()
            finite0 = hand.unscale(ref0.parameters())  # each optimizer decides for itself
            finite1 = hand.unscale(ref1.parameters())
            if finite0:
                hand0.step()
            if finite1:
                hand1.step()
            hand.update(finite0 and finite1)  # one update, after every optimizer stepped

    # 2 * output0 + 3 * output1 doubles the loss's gradient twice over: the first two
    # backward passes overflow float16 at 2**16 and 2**15, then batch 3 overflows forward.
    assert scales == hand.history == [2.0 ** 15, 2.0 ** 14, 2.0 ** 14, 2.0 ** 13, 2.0 ** 13]
    assert_same_params(model0, ref0)
    assert_same_params(model1, ref1)


# --------------------------------------------------------------------------
# "Working with Multiple GPUs": autocast inside the model's forward, for side threads
# --------------------------------------------------------------------------

def test_autocast_in_forward_reaches_side_threads(device: str) -> None:
    # DataParallel is not provided; what the section is about is threads: autocast's
    # state is per thread, so a model run in a side thread (as DataParallel's
    # replicas are) autocasts only if its forward enables autocast itself.
    class MyModel(Net):
        @autocast(device_type=device, dtype=torch.float16)
        def forward(self, input):
            return super().forward(input)

    torch.manual_seed(0)
    model, plain = MyModel().to(device), Net().to(device)
    plain.load_state_dict(model.state_dict())
    input = torch.randn(8, 8, device=device)
    results = {}

    def side_thread() -> None:
        results["model"], results["plain"] = model(input), plain(input)

    with autocast(device_type=device, dtype=torch.float16):  # set in the main thread only
        main_output = model(input)
        worker = threading.Thread(target=side_thread)
        worker.start()
        worker.join()
    assert main_output.dtype == results["model"].dtype == torch.float16
    assert results["plain"].dtype == torch.float32  # the main thread's region did not reach it
    np.testing.assert_array_equal(results["model"].detach().cpu().numpy(), main_output.detach().cpu().numpy())


# --------------------------------------------------------------------------
# "Autocast and Custom Autograd Functions"
# --------------------------------------------------------------------------

class MyMM(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a.mm(b)

    @staticmethod
    @custom_bwd
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad.mm(b.t()), a.t().mm(grad)


def test_functions_with_multiple_inputs_or_autocastable_ops(device: str) -> None:
    mymm = MyMM.apply
    torch.manual_seed(0)
    input1 = torch.randn(6, 5, device=device, requires_grad=True)
    input2 = torch.randn(5, 3, device=device, requires_grad=True)

    with autocast(device_type=device, dtype=torch.float16):
        output = mymm(input1, input2)
    assert output.dtype == torch.float16  # forward ran under autocast: mm is a float16 op
    (output.float() * torch.arange(18., device=device).reshape(6, 3)).sum().backward()
    # backward ran under the same autocast state (custom_bwd): float16 products, and
    # each gradient comes back in its input's dtype (float32), as PyTorch's engine casts it.
    assert input1.grad.dtype == input2.grad.dtype == torch.float32

    # The rule: the same products done by hand in float16, rounded once, cast up.
    weights = np.arange(18.0).reshape(6, 3).astype(np.float16)
    a16 = input1.detach().cpu().numpy().astype(np.float16)
    b16 = input2.detach().cpu().numpy().astype(np.float16)

    def mm16(x: np.ndarray, y: np.ndarray) -> np.ndarray:  # float16 operands, float32 accumulation
        return (x.astype(np.float32) @ y.astype(np.float32)).astype(np.float16)

    np.testing.assert_array_equal(output.detach().cpu().numpy(), mm16(a16, b16))
    np.testing.assert_array_equal(input1.grad.cpu().numpy(), mm16(weights, b16.T).astype(np.float32))
    np.testing.assert_array_equal(input2.grad.cpu().numpy(), mm16(a16.T, weights).astype(np.float32))


def test_functions_that_need_a_particular_dtype(device: str) -> None:
    class MyFloat32Func(torch.autograd.Function):
        """y = x * exp(x), computed in float32 whatever autocast says."""

        @staticmethod
        @custom_fwd(device_type=device, cast_inputs=torch.float32)
        def forward(ctx, input):
            ctx.save_for_backward(input)
            assert input.dtype == torch.float32 and not torch.is_autocast_enabled(device)
            fwd_output = input * input.exp()
            return fwd_output

        @staticmethod
        @custom_bwd(device_type=device)
        def backward(ctx, grad):
            (input,) = ctx.saved_tensors
            return grad * (1 + input) * input.exp()

    func = MyFloat32Func.apply
    values = np.array([-2.0, -0.5, 0.25, 3.0, 7.5])
    input = torch.tensor(values, dtype=torch.float16, device=device, requires_grad=True)

    with autocast(device_type=device, dtype=torch.float16):
        # func runs in float32, regardless of the surrounding autocast state
        output = func(input)
    assert output.dtype == torch.float32
    output.sum().backward()
    assert input.grad.dtype == torch.float16  # the cast_inputs cast is undone in backward

    x = values.astype(np.float16).astype(np.float32)  # the float16 input, widened exactly
    np.testing.assert_allclose(output.detach().cpu().numpy(), x * np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(input.grad.cpu().numpy(), ((1 + x) * np.exp(x)).astype(np.float16))

    # The documentation's fallback for a function one cannot decorate: disable
    # autocast locally and pass float32 inputs; the result is the same.
    def imported_function(a, b):
        return a * b.exp()

    with autocast(device_type=device, dtype=torch.float16):
        with autocast(device_type=device, dtype=torch.float16, enabled=False):
            fallback = imported_function(input.float(), input.float())
    np.testing.assert_array_equal(fallback.detach().cpu().numpy(), output.detach().cpu().numpy())


# --------------------------------------------------------------------------
# The "Automatic Mixed Precision" recipe
# --------------------------------------------------------------------------

batch_size, in_size, out_size, num_layers, num_batches, epochs = 16, 32, 8, 3, 4, 2
start_time = None


def start_timer() -> None:
    global start_time
    gc.collect()
    torch.cuda.empty_cache()
    with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):  # deprecated in PyTorch too
        torch.cuda.reset_max_memory_allocated()
    torch.cuda.synchronize()
    start_time = time.time()


def end_timer_and_print(local_msg: str) -> None:
    torch.cuda.synchronize()
    end_time = time.time()
    print("\n" + local_msg)
    print("Total execution time = {:.3f} sec".format(end_time - start_time))
    print("Max memory used by tensors = {} bytes".format(torch.cuda.max_memory_allocated()))


def make_model(in_size: int, out_size: int, num_layers: int, device: str):
    layers = []
    for _ in range(num_layers - 1):
        layers.append(torch.nn.Linear(in_size, in_size))
        layers.append(torch.nn.ReLU())
    layers.append(torch.nn.Linear(in_size, out_size))
    return torch.nn.Sequential(*tuple(layers)).to(device)


def recipe_data(device: str) -> tuple[list, list]:
    torch.manual_seed(1)
    data = [torch.randn(batch_size, in_size, device=device) for _ in range(num_batches)]
    targets = [torch.randn(batch_size, out_size, device=device) for _ in range(num_batches)]
    return data, targets


def numpy_sgd_run(net, data: list, targets: list, lr: float) -> list[np.ndarray]:
    """The default-precision loop in float64 NumPy: Linear/ReLU layers, MSE loss, plain SGD."""
    params = [p.detach().cpu().numpy().astype(np.float64) for p in net.parameters()]
    weights, biases = params[0::2], params[1::2]
    for epoch in range(epochs):
        for x, t in zip(data, targets):
            acts = [x.cpu().numpy().astype(np.float64)]
            for k, (w, b) in enumerate(zip(weights, biases)):
                h = acts[-1] @ w.T + b
                acts.append(np.maximum(h, 0) if k < len(weights) - 1 else h)
            grad = 2 * (acts[-1] - t.cpu().numpy()) / acts[-1].size
            for k in range(len(weights) - 1, -1, -1):
                gw, gb = grad.T @ acts[k], grad.sum(axis=0)
                if k > 0:
                    grad = (grad @ weights[k]) * (acts[k] > 0)
                weights[k] = weights[k] - lr * gw
                biases[k] = biases[k] - lr * gb
    return [p for pair in zip(weights, biases) for p in pair]


def test_recipe_default_precision(device: str) -> None:
    data, targets = recipe_data(device)
    loss_fn = torch.nn.MSELoss().to(device)
    torch.manual_seed(0)
    net = make_model(in_size, out_size, num_layers, device)
    expected = numpy_sgd_run(net, data, targets, lr=0.001)
    opt = torch.optim.SGD(net.parameters(), lr=0.001)

    start_timer()
    for epoch in range(epochs):
        for input, target in zip(data, targets):
            output = net(input)
            loss = loss_fn(output, target)
            loss.backward()
            opt.step()
            opt.zero_grad()
    end_timer_and_print("Default precision:")
    # float32 against float64: sums of 32 products of values below ~3, 8 steps of lr 1e-3.
    for p, e in zip(net.parameters(), expected):
        np.testing.assert_allclose(p.detach().cpu().numpy(), e, rtol=0, atol=1e-6)


def test_recipe_adding_autocast_gives_float16_outputs_and_float32_loss(device: str) -> None:
    data, targets = recipe_data(device)
    loss_fn = torch.nn.MSELoss().to(device)
    net = make_model(in_size, out_size, num_layers, device)
    for input, target in zip(data, targets):
        with torch.autocast(device_type=device, dtype=torch.float16):
            output = net(input)
            assert output.dtype is torch.float16  # linear layers autocast to float16
            loss = loss_fn(output, target)
            assert loss.dtype is torch.float32  # mse_loss autocasts to float32


def test_recipe_default_grad_scaler_values() -> None:
    scaler = torch.amp.GradScaler()
    assert scaler.get_scale() == 65536.0 and scaler.get_growth_factor() == 2.0
    assert scaler.get_backoff_factor() == 0.5 and scaler.get_growth_interval() == 2000
    assert scaler.is_enabled()
    state = scaler.state_dict()
    # PyTorch's keys and values (tinyamp adds its hysteresis and bounds, with defaults that change nothing).
    assert {k: state[k] for k in ("scale", "growth_factor", "backoff_factor", "growth_interval",
                                  "_growth_tracker")} == {"scale": 65536.0, "growth_factor": 2.0,
                                                          "backoff_factor": 0.5, "growth_interval": 2000,
                                                          "_growth_tracker": 0}


def recipe_amp_run(device: str, use_amp: bool, data: list, targets: list) -> tuple:
    """The recipe's "All together" loop; returns (net, opt, scaler)."""
    loss_fn = torch.nn.MSELoss().to(device)
    torch.manual_seed(0)
    net = make_model(in_size, out_size, num_layers, device)
    opt = torch.optim.SGD(net.parameters(), lr=0.001)
    scaler = torch.amp.GradScaler(device, enabled=use_amp)

    start_timer()
    for epoch in range(epochs):
        for input, target in zip(data, targets):
            with torch.autocast(device_type=device, dtype=torch.float16, enabled=use_amp):
                output = net(input)
                loss = loss_fn(output, target)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()  # set_to_none=True here can modestly improve performance
    end_timer_and_print("Mixed precision:" if use_amp else "Default precision:")
    return net, opt, scaler


@pytest.mark.parametrize("use_amp", [True, False])
def test_recipe_all_together(device: str, use_amp: bool) -> None:
    data, targets = recipe_data(device)
    if use_amp:
        data[1] = data[1] * 1e6  # overflows float16: that step is skipped, in each epoch
    net, opt, scaler = recipe_amp_run(device, use_amp, data, targets)

    loss_fn = torch.nn.MSELoss().to(device)
    torch.manual_seed(0)
    reference = make_model(in_size, out_size, num_layers, device)
    hand_opt = torch.optim.SGD(reference.parameters(), lr=0.001)
    hand = HandScaler()
    for epoch in range(epochs):
        for input, target in zip(data, targets):
            if use_amp:
                with torch.autocast(device_type=device, dtype=torch.float16):
                    loss = loss_fn(reference(input), target)
                (loss * hand.scale).backward()
                finite = hand.unscale(reference.parameters())
                if finite:
                    hand_opt.step()
                hand.update(finite)
            else:  # enabled=False: autocast and the scaler are no-ops, this is plain float32 SGD
                loss_fn(reference(input), target).backward()
                hand_opt.step()
            hand_opt.zero_grad()
    assert_same_params(net, reference)
    if use_amp:
        assert scaler.get_scale() == hand.scale == 2.0 ** 14  # the overflowing batch, seen in each epoch
    else:
        assert not scaler.is_enabled() and scaler.state_dict() == {}


def test_recipe_inspecting_gradients_clips_unscaled_gradients(device: str) -> None:
    data, targets = recipe_data(device)
    loss_fn = torch.nn.MSELoss().to(device)
    torch.manual_seed(0)
    net = make_model(in_size, out_size, num_layers, device)
    opt = torch.optim.SGD(net.parameters(), lr=0.001)
    scaler = torch.amp.GradScaler(device)
    norms = []
    for input, target in zip(data, targets):
        with torch.autocast(device_type=device, dtype=torch.float16):
            output = net(input)
            loss = loss_fn(output, target)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        # The gradients are unscaled: the same max_norm as without gradient scaling.
        norms.append(float(torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=0.1)))
        after = np.sqrt(sum((p.grad.cpu().numpy().astype(np.float64) ** 2).sum() for p in net.parameters()))
        assert after == pytest.approx(min(norms[-1], 0.1), rel=1e-5)  # float32 scaling of each gradient
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    # The norms are of unscaled gradients: an MSE gradient of this net is O(1), not O(65536).
    assert all(0.01 < n < 100 for n in norms), norms


def test_recipe_saving_and_resuming(device: str, tmp_path) -> None:
    data, targets = recipe_data(device)
    data[1] = data[1] * 1e6  # a skipped step before the checkpoint: the scale is not the default
    loss_fn = torch.nn.MSELoss().to(device)

    def train(net, opt, scaler, batches) -> list[float]:
        scales = []
        for input, target in batches:
            with torch.autocast(device_type=device, dtype=torch.float16):
                output = net(input)
                loss = loss_fn(output, target)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            scales.append(scaler.get_scale())
        return scales

    def fresh():
        torch.manual_seed(0)
        net = make_model(in_size, out_size, num_layers, device)
        opt = torch.optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
        return net, opt, torch.amp.GradScaler(device, growth_interval=3)

    batches = list(zip(data, targets)) * 2  # batches 1 and 5 overflow
    net, opt, scaler = fresh()
    train(net, opt, scaler, batches[:3])
    # Save at the end of an iteration, after scaler.update().
    checkpoint = {"model": net.state_dict(),
                  "optimizer": opt.state_dict(),
                  "scaler": scaler.state_dict()}
    torch.save(checkpoint, tmp_path / "filename")
    uninterrupted = train(net, opt, scaler, batches[3:])

    resumed_net, resumed_opt, resumed_scaler = fresh()
    checkpoint = torch.load(tmp_path / "filename", map_location=device)
    resumed_net.load_state_dict(checkpoint["model"])
    resumed_opt.load_state_dict(checkpoint["optimizer"])
    resumed_scaler.load_state_dict(checkpoint["scaler"])
    assert resumed_scaler.get_scale() == 2.0 ** 15 and resumed_scaler._get_growth_tracker() == 1
    resumed = train(resumed_net, resumed_opt, resumed_scaler, batches[3:])

    assert_same_params(net, resumed_net)  # bit for bit, momentum buffers and scale included
    assert resumed_scaler.state_dict() == scaler.state_dict()
    # Grown back after 3 clean steps (growth_interval=3), then halved at batch 5.
    assert resumed == uninterrupted == [2.0 ** 15, 2.0 ** 16, 2.0 ** 15, 2.0 ** 15, 2.0 ** 15]
