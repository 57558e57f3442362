"""User mistakes and bad state get a clear error, never a silent wrong answer or a read out of bounds.

Issue 19's classes: gradients and optimizer state that do not fit their
parameters (the numba, NumPy and fused CUDA update paths), tensor hooks,
all-or-nothing state loading, GradScaler arguments, BatchNorm on an empty
batch, the default collate, ``detach_`` of a view, read-only arrays, and
threads on the CUDA stand-in. PyTorch 2.13's behaviour is the reference where
it has one (its messages are quoted from it).
"""

from __future__ import annotations

import copy
import sys

import numpy as np
import pytest

import tinyamp as ta
from tests.support.threads import run_threads
from tinyamp import backend
from tinyamp.kernels.cpu import cpu_path as kernel_path
from tinyamp.kernels import loss_scale
from tinyamp.kernels.cpu import cpu_optim
from tinyamp.kernels.cuda import cuda_launch, cuda_optim
from tinyamp.utils import data as tdata
from tinyamp.utils.data import DataLoader


@pytest.fixture(params=["numba", "astype"])
def cpu_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The CPU update path: the numba kernels (the default install) or the NumPy expressions."""
    if request.param == "numba":
        assert kernel_path.numba_available(), "numba is a dependency of the default install and must load"
    monkeypatch.setattr(kernel_path, "BACKEND", request.param)
    return request.param


def _linear(device: str, fan_in: int, fan_out: int, seed: int = 0) -> ta.nn.Linear:
    ta.manual_seed(seed)
    return ta.nn.Linear(fan_in, fan_out).to(device)


def _fill_grads(model: ta.nn.Module) -> None:
    for p in model.parameters():
        p.grad = ta.ones(*p.shape, dtype=p.dtype, device=p.device) * 0.5


OPTIMIZERS = [
    pytest.param(lambda ps: ta.optim.SGD(ps, lr=0.1, momentum=0.9), id="SGD-momentum"),
    pytest.param(lambda ps: ta.optim.Adam(ps, lr=0.1), id="Adam"),
    pytest.param(lambda ps: ta.optim.AdamW(ps, lr=0.1, amsgrad=True), id="AdamW-amsgrad"),
    pytest.param(lambda ps: ta.optim.RMSprop(ps, lr=0.1, momentum=0.5), id="RMSprop"),
]


# --------------------------------------------------------------------- class 1: shapes at the boundary

def test_assigning_a_grad_of_another_size_dtype_or_type_is_refused(device: str) -> None:
    p = ta.zeros(4, 4, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"attempting to assign a gradient of size '\[4\]' to a tensor of "
                                           r"size '\[4, 4\]'"):
        p.grad = ta.zeros(4, device=device)
    with pytest.raises(RuntimeError, match="attempting to assign a gradient with dtype 'float16' to a tensor "
                                           "with grad_dtype 'float32'"):
        p.grad = ta.zeros(4, 4, dtype=ta.float16, device=device)
    with pytest.raises(TypeError, match="assigned grad expected to be a Tensor or None but got grad of type "
                                        "numpy.ndarray"):
        p.grad = np.zeros((4, 4), np.float32)
    assert p.grad is None  # nothing was assigned
    p.grad = ta.ones(4, 4, device=device)
    p.grad = None
    assert p.grad is None


def test_assigning_a_grad_on_another_device_is_refused() -> None:
    with backend.use_cuda_standin():
        p = ta.zeros(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="assigned grad has data located on a different device"):
            p.grad = ta.zeros(3, device="cuda")


@pytest.mark.parametrize("make", OPTIMIZERS)
def test_resuming_after_a_layer_changed_shape_is_refused_and_loads_nothing(device: str, cpu_path: str,
                                                                           make) -> None:
    # The saved run had Linear(4, 6); the resumed one Linear(6, 4): the same parameter count, transposed.
    old = _linear(device, 4, 6)
    opt_old = make(old.parameters())
    _fill_grads(old)
    opt_old.step()
    new = _linear(device, 6, 4, seed=1)
    opt_new = make(new.parameters())
    _fill_grads(new)
    opt_new.step()
    before = copy.deepcopy(opt_new.state_dict())
    with pytest.raises(ValueError, match=r"load_state_dict: state\['\w+'\] of shape \[6, 4\].*shape \[4, 6\]"):
        opt_new.load_state_dict(opt_old.state_dict())
    after = opt_new.state_dict()
    assert after["param_groups"] == before["param_groups"]
    for key, entry in before["state"].items():
        for name, value in entry.items():
            assert np.array_equal(np.asarray(after["state"][key][name].cpu()), np.asarray(value.cpu())), name


@pytest.mark.parametrize("make", OPTIMIZERS)
def test_a_state_buffer_that_does_not_fit_is_refused_at_step(device: str, cpu_path: str, make) -> None:
    model = _linear(device, 40, 40)
    opt = make(model.parameters())
    _fill_grads(model)
    opt.step()
    weight = model.weight
    name = next(k for k in opt.state[weight] if k not in ("step", "mu_product"))
    opt.state[weight][name] = ta.zeros(40, device=device)  # a user's edit, or a hand-made checkpoint
    w0 = weight.detach().cpu().numpy().copy()
    with pytest.raises(RuntimeError, match=rf"step: state\['{name}'\] of shape \[40\].*expected shape \[40, 40\]"):
        opt.step()
    assert np.array_equal(weight.detach().cpu().numpy(), w0)


@pytest.mark.parametrize("make", OPTIMIZERS)
def test_a_gradient_of_the_wrong_shape_reaching_step_is_refused(device: str, cpu_path: str, make) -> None:
    model = _linear(device, 400, 400)
    opt = make(model.parameters())
    _fill_grads(model)
    model.weight.grad.array = model.weight.grad.array[0]  # a raw write past the assignment check: (400,)
    w0 = model.weight.detach().cpu().numpy().copy()
    with pytest.raises(RuntimeError, match=r"step: the gradient of shape \[400\] does not fit its parameter of "
                                           r"shape \[400, 400\]"):
        opt.step()
    assert np.array_equal(model.weight.detach().cpu().numpy(), w0)


def test_the_numba_update_kernels_refuse_arrays_of_another_shape() -> None:
    w, g = np.zeros((4, 4), np.float32), np.zeros(16, np.float32)
    m, v = np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32)
    step = np.zeros((), np.float32)
    with pytest.raises(ValueError, match=r"adam_update: an array of shape \[16\] does not fit the weight"):
        cpu_optim.adam_update(w, g, m, v, None, step, lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8,
                              weight_decay=0.0, decoupled=False)
    with pytest.raises(ValueError, match=r"sgd_update: an array of shape \[3\] does not fit the weight"):
        cpu_optim.sgd_update(w, w.copy(), np.zeros(3, np.float32), step, lr=0.1, momentum=0.9, dampening=0.0,
                             weight_decay=0.0, nesterov=False, maximize=False)


def test_unscale_refuses_a_gradient_and_output_of_different_shapes(cpu_path: str) -> None:
    found = np.zeros((1,), np.float32)
    with pytest.raises(ValueError, match=r"unscale: a gradient of shape \[4\] cannot be unscaled into an output "
                                         r"of shape \[4, 4\]"):
        loss_scale.unscale_group(np, [np.ones(4, np.float16)], [np.zeros((4, 4), np.float32)], np.float32(2),
                                 found)


def test_the_fused_cuda_update_kernels_refuse_tables_that_do_not_fit() -> None:
    with backend.use_cuda_standin():
        cp = backend.cupy()
        w = cp.zeros((8, 8), np.float32)
        good, short = cp.zeros((8, 8), np.float32), cp.zeros(8, np.float32)
        step = cp.zeros((), np.float32)
        hyper = cp.zeros(5, np.float64)
        with pytest.raises(ValueError, match=r"adam_group: exp_avg 0 of shape \[8\]"):
            cuda_optim.adam_group([w], [good], [short], [good.copy()], None, [step], None, None, hyper,
                                  decoupled=False)
        with pytest.raises(ValueError, match=r"sgd_group: gradient 0 of shape \[8, 4\].*c_contiguous=False"):
            cuda_optim.sgd_group([w], [cp.zeros((8, 8), np.float32)[:, ::2]], None, None, None, None, hyper,
                                 nesterov=False, maximize=False)
        assert not cuda_launch.fusable_update(w, cp.zeros((8, 8), np.float32).T[::-1])


def test_a_strided_parameter_takes_the_array_path_on_cuda() -> None:
    with backend.use_cuda_standin():
        base = ta.randn(8, 8, device="cuda")
        start = base.cpu().numpy().T.copy()
        p = ta.nn.Parameter(base)
        p.array = base.array.T  # a transposed (non-contiguous) parameter
        opt = ta.optim.Adam([p], lr=0.1)
        p.grad = ta.ones(8, 8, device="cuda")
        p.grad.array = p.grad.array.T
        opt.step()
        ref = ta.nn.Parameter(ta.tensor(start))
        opt_ref = ta.optim.Adam([ref], lr=0.1)
        ref.grad = ta.ones(8, 8)
        opt_ref.step()
        np.testing.assert_allclose(p.detach().cpu().numpy(), ref.detach().numpy(), rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------- class 4: hooks

def test_a_hook_that_changes_the_size_type_or_kind_of_the_gradient_is_refused(device: str) -> None:
    def grow(g):
        return ta.ones(2, 4, device=device)

    def halve(g):
        return g.half()

    def number(g):
        return 1.0

    for hook, error, message in ((grow, RuntimeError, r"hook 'grow' has changed the size of value"),
                                 (halve, RuntimeError, r"hook 'halve' has changed the type of value "
                                                       r"\(was float32 got float16\)"),
                                 (number, TypeError, r"expected Tensor, but hook 'number' returned 'float'")):
        leaf = ta.ones(4, device=device, requires_grad=True)
        handle = leaf.register_hook(hook)
        with pytest.raises(error, match=message):
            (leaf * 2).sum().backward()
        assert leaf.grad is None
        handle.remove()
        inner = ta.ones(4, device=device, requires_grad=True)
        y = inner * 2
        y.register_hook(hook)
        with pytest.raises(error, match=message):
            y.sum().backward()
    leaf = ta.ones(4, device=device, requires_grad=True)
    leaf.register_hook(lambda g: g * 3)  # a replacement of the same shape and dtype is used
    (leaf * 2).sum().backward()
    assert leaf.grad.tolist() == [6.0] * 4


# ---------------------------------------------------------------------- class 6: state loading

def test_an_o2_optimizer_resumes_a_float32_run_with_master_weights_on(device: str, cpu_path: str) -> None:
    f32 = _linear(device, 4, 4)
    opt32 = ta.optim.Adam(f32.parameters(), lr=0.01)
    _fill_grads(f32)
    opt32.step()
    half = _linear(device, 4, 4).half()
    half.load_state_dict(f32.state_dict())
    opt16 = ta.optim.Adam(half.parameters(), lr=0.01, master_weights=True)
    opt16.load_state_dict(opt32.state_dict())
    assert opt16.param_groups[0]["master_weights"] is True
    assert all(state["exp_avg"].dtype == ta.float32 for state in opt16.state.values())
    _fill_grads(half)
    opt16.step()  # master weights made from the float16 parameters, moments from the float32 run
    masters = [opt16.state[p]["master_param"] for p in half.parameters()]
    assert all(m.dtype == ta.float32 for m in masters)


def test_master_weights_are_not_dropped_silently(device: str) -> None:
    half = _linear(device, 4, 4).half()
    opt16 = ta.optim.SGD(half.parameters(), lr=0.1, master_weights=True)
    _fill_grads(half)
    opt16.step()
    f32 = _linear(device, 4, 4)
    opt32 = ta.optim.SGD(f32.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="holds a float32 master weight .* build it with master_weights=True"):
        opt32.load_state_dict(opt16.state_dict())
    assert opt32.param_groups[0]["master_weights"] is False and not opt32.state


def test_optimizer_load_state_dict_applies_the_constructors_checks() -> None:
    model = _linear("cpu", 3, 3)
    opt = ta.optim.Adam(model.parameters(), lr=0.1)
    saved = opt.state_dict()
    saved["param_groups"][0]["lr"] = -1.0
    with pytest.raises(ValueError, match="Invalid learning rate: -1.0"):
        opt.load_state_dict(saved)
    assert opt.param_groups[0]["lr"] == 0.1


def test_module_load_state_dict_with_an_uncastable_value_copies_nothing() -> None:
    model = ta.nn.Sequential(ta.nn.Linear(4, 4), ta.nn.Linear(4, 2))
    before = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    saved = {k: ta.ones(*v.shape) for k, v in model.state_dict().items()}
    saved["1.bias"] = np.array(["x", "y"])
    with pytest.raises(RuntimeError, match=r'While copying the parameter named "1.bias"'):
        model.load_state_dict(saved)
    for key, value in model.state_dict().items():
        assert np.array_equal(value.detach().numpy(), before[key]), key


def _scaler_state(**changes) -> dict:
    state = dict(scale=1024.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=100, _growth_tracker=3,
                 hysteresis=1, _hysteresis_tracker=1, min_scale=None, max_scale=None)
    state.update(changes)
    return state


def test_grad_scaler_load_state_dict_accepts_numpy_numbers() -> None:
    scaler = ta.amp.GradScaler("cpu", init_scale=8.0)
    scaler.load_state_dict(_scaler_state(scale=np.float32(1024.0), growth_factor=np.float32(2.0),
                                         growth_interval=np.int64(100)))
    assert scaler.get_scale() == 1024.0 and scaler.get_growth_interval() == 100


@pytest.mark.parametrize("changes, message", [
    (dict(min_scale=2048.0), r"min_scale \(2048.0\) must be <= scale"),
    (dict(max_scale=512.0), r"max_scale \(512.0\) must be >= scale"),
    (dict(max_scale=-1), "max_scale must be a positive finite number"),
    (dict(min_scale="x"), "min_scale must be a positive finite number"),
    (dict(scale=float("nan")), "scale must be a positive finite number"),
    (dict(growth_interval=2 ** 31), "growth_interval must be an integer >= 1 and <= 2147483647"),
    (dict(_growth_tracker=-1), "_growth_tracker must be an integer >= 0"),
    (dict(backoff_factor=np.float32(2.0)), "backoff factor must be in"),
])
def test_grad_scaler_load_state_dict_refuses_bad_state_and_changes_nothing(changes: dict, message: str) -> None:
    scaler = ta.amp.GradScaler("cpu", init_scale=8.0, growth_interval=7)
    with pytest.raises(ValueError, match=message):
        scaler.load_state_dict(_scaler_state(**changes))
    assert (scaler.get_scale(), scaler.get_growth_interval(), scaler.state_dict()["min_scale"]) == (8.0, 7, None)


# ------------------------------------------------------------------ class 7: GradScaler arguments

@pytest.mark.parametrize("name", ["growth_interval", "hysteresis"])
def test_grad_scaler_refuses_counters_beyond_int32_at_construction(name: str) -> None:
    with pytest.raises(ValueError, match=rf"{name} must be an integer >= 1 and <= 2147483647 \(its counter is "
                                         rf"int32\), got 2147483648"):
        ta.amp.GradScaler("cpu", **{name: 2 ** 31})
    ta.amp.GradScaler("cpu", **{name: 2 ** 31 - 1})


def _one_scaled_step(device: str, scaler: ta.amp.GradScaler) -> None:
    p = ta.nn.Parameter(ta.ones(2, device=device))
    opt = ta.optim.SGD([p], lr=0.1)
    scaler.scale((p * 2).sum()).backward()
    scaler.step(opt)


def test_update_with_a_nan_tensor_keeps_the_scale_and_clamps_others(device: str) -> None:
    scaler = ta.amp.GradScaler(init_scale=8.0, max_scale=64.0)
    _one_scaled_step(device, scaler)
    scaler.update(new_scale=ta.tensor(float("nan"), device=device))
    assert scaler.get_scale() == 8.0
    _one_scaled_step(device, scaler)
    scaler.update(new_scale=ta.tensor(float("inf"), device=device))
    assert scaler.get_scale() == 64.0


# --------------------------------------------------------------- class 8: data and modules

@pytest.mark.parametrize("module, shape", [(lambda: ta.nn.BatchNorm1d(3), (0, 3)),
                                           (lambda: ta.nn.BatchNorm1d(3, momentum=None), (0, 3, 5)),
                                           (lambda: ta.nn.BatchNorm2d(3), (0, 3, 2, 2))])
def test_batch_norm_trains_on_an_empty_batch(device: str, module, shape: tuple) -> None:
    # PyTorch 2.13: an empty output, running statistics unchanged, num_batches_tracked counted, zero grads.
    bn = module().to(device)
    x = ta.zeros(*shape, device=device, requires_grad=True)
    with np.errstate(all="raise"):
        y = bn(x)
        y.sum().backward()
    assert y.shape == shape and x.grad.shape == shape
    assert bn.running_mean.tolist() == [0.0] * 3 and bn.running_var.tolist() == [1.0] * 3
    assert bn.num_batches_tracked.item() == 1
    assert bn.weight.grad.tolist() == [0.0] * 3 and bn.bias.grad.tolist() == [0.0] * 3
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        bn(ta.zeros(1, 3, *[1] * (len(shape) - 2), device=device))


class _Samples:
    def __init__(self, samples: list) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        return self.samples[index]


def test_default_collate_keeps_structure_and_per_field_dtypes() -> None:
    # torch.utils.data.default_collate (2.13): a dict of batches, nested structure kept, int labels int64.
    batch = tdata.default_collate([{"x": ta.ones(2), "y": 1, "meta": (0.5, "a")},
                             {"x": ta.zeros(2), "y": 2, "meta": (1.5, "b")}])
    assert set(batch) == {"x", "y", "meta"}
    assert batch["x"].shape == (2, 2) and batch["x"].dtype == ta.float32
    assert batch["y"].dtype == ta.int64 and batch["y"].tolist() == [1, 2]
    assert batch["meta"][0].dtype == ta.float64 and batch["meta"][1] == ["a", "b"]
    x, (label, weight) = tdata.default_collate([(ta.ones(3), (1, 2.0)), (ta.zeros(3), (3, 4.0))])
    assert x.shape == (2, 3) and label.dtype == ta.int64 and weight.dtype == ta.float64
    assert tdata.default_collate([True, False]).dtype == ta.bool
    loader = DataLoader(_Samples([{"x": np.ones(2, np.float32), "y": i} for i in range(4)]), batch_size=2)
    first = next(iter(loader))
    assert first["x"].dtype == np.float32 and first["y"].dtype == ta.int64


def test_default_collate_refuses_samples_of_different_sizes() -> None:
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        next(iter(DataLoader(_Samples([(1, 2), (1, 2, 3)]), batch_size=2)))
    with pytest.raises(RuntimeError, match=r"stack expects each tensor to be equal size, got shapes \[2\], \[3\]"):
        tdata.default_collate([ta.ones(2), ta.ones(3)])


def test_detach_in_place_of_a_view_is_refused(device: str) -> None:
    x = ta.ones(4, 3, device=device, requires_grad=True)
    for view in (lambda: x[1:], lambda: x.reshape(12), lambda: x.detach()[1:], lambda: x.t()):
        with pytest.raises(RuntimeError, match=r"Can't detach views in-place. Use detach\(\) instead."):
            view().detach_()
    y = (x * 2).detach_()  # not a view
    assert y.grad_fn is None and not y.requires_grad
    assert x.max(1)[0].detach_().grad_fn is None


def test_writing_into_a_read_only_numpy_array_says_so() -> None:
    array = np.ones(3, np.float32)
    array.flags.writeable = False
    t = ta.from_numpy(array)
    with pytest.raises(RuntimeError, match="shares the memory of a read-only NumPy array"):
        t.add_(1)
    with pytest.raises(RuntimeError, match="an expanded view"):
        ta.ones(3).expand(2, 3).add_(1)


# ----------------------------------------------------------------------- class 9: threads on CUDA

def _model(seed: int) -> ta.nn.Module:
    ta.manual_seed(seed)
    return ta.nn.Sequential(ta.nn.Linear(16, 32), ta.nn.ReLU(), ta.nn.Linear(32, 4)).to("cuda")


def _train(seed: int, model: ta.nn.Module, optimizer: str, steps: int = 4) -> list:
    rng = np.random.default_rng(seed)
    opt = getattr(ta.optim, optimizer)(model.parameters(), lr=1e-2)
    scaler = ta.amp.GradScaler("cuda")
    x = ta.tensor(rng.standard_normal((8, 16)).astype(np.float32)).to("cuda")
    y = ta.tensor(rng.integers(0, 4, 8)).to("cuda")
    for _ in range(steps):
        opt.zero_grad()
        with ta.autocast("cuda"):
            loss = ta.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return [p.detach().cpu().numpy() for p in model.parameters()]


@pytest.mark.parametrize("optimizer", ["Adam", "SGD"])
def test_threads_training_separate_models_on_the_stand_in_equal_sequential_runs(optimizer: str) -> None:
    seeds = range(4)
    with backend.use_cuda_standin():
        sequential = {s: _train(s, _model(s), optimizer) for s in seeds}
        models = {s: _model(s) for s in seeds}  # the global generator: made in order, outside the threads
        results: dict = {}

        def run(seed: int) -> None:
            results[seed] = _train(seed, models[seed], optimizer)

        errors = run_threads(run, [(s,) for s in seeds], switch_interval=1e-5)
    assert not errors, errors
    for s in seeds:
        for got, want in zip(results[s], sequential[s]):
            np.testing.assert_array_equal(got, want)


def test_pointer_tables_under_threads_hold_each_threads_own_pointers() -> None:
    with backend.use_cuda_standin():
        cp = backend.cupy()
        dev = cuda_launch._device(cp.zeros(1))

        def run(offset: int) -> None:
            for i in range(300):
                pointers = [offset * 10_000 + i % 7, offset * 10_000 + 1 + i % 5]
                table = cuda_launch.pointer_table(dev, pointers, site=("test", 2))
                plain = cuda_launch.pointer_table(dev, pointers[:1] + [i % 70])
                assert table.get().tolist() == pointers
                assert plain.get().tolist() == pointers[:1] + [i % 70]

        errors = run_threads(run, [(k,) for k in range(1, 5)])
    assert not errors, errors[:3]


def test_the_stand_in_memory_pool_under_threads() -> None:
    # Allocations, frees (from whichever thread drops the last reference) and the address lookups that
    # kernels and cuBLAS make interleave; CuPy's pool is thread-safe, so is the stand-in's.
    from cupy_standin import _memory

    pool = _memory.MemoryPool(0)

    def run(k: int) -> None:
        for i in range(20000):
            pointers = [pool.malloc(512 * (1 + (k + i + j) % 4)) for j in range(3)]
            _memory.resolve(pointers[0].ptr, 8, "test")
            del pointers

    errors = run_threads(run, [(k,) for k in range(4)])
    assert not errors, errors[:3]
    assert pool.used_bytes() == 0 and pool.free_bytes() == sum(size * len(blocks)
                                                               for size, blocks in pool._free.items())


# ----------------------------------------------------------------------- class 10: leftovers

_KILLED_SAVE = """
import os, signal, sys
import numpy as np
import tinyamp as ta

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)  # a save killed half-way: nothing can clean up

np.lib.format.write_array = killed
ta.save({"w": ta.ones(4)}, sys.argv[1])
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_the_next_save_removes_the_temporary_a_killed_save_left(tmp_path) -> None:
    import subprocess

    path = tmp_path / "ckpt.ta"
    ta.save({"step": 1}, path)
    result = subprocess.run([sys.executable, "-c", _KILLED_SAVE, str(path)], capture_output=True, text=True,
                            timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(
                                __import__("pathlib").Path(ta.__file__).parent.parent)})
    assert result.returncode == -9, result.stderr
    left = [p.name for p in tmp_path.iterdir() if p.name != "ckpt.ta"]
    assert len(left) == 1 and left[0].startswith(".ckpt.ta.") and left[0].endswith(".tmp")
    others = [".ckpt.ta.1.0123abcd.tmp",  # a save in progress in a running process (pid 1 runs)
              ".other.ta.999999999.0123abcd.tmp", "ckpt.ta.tmp", ".ckpt.ta.notours.tmp"]  # not this pattern
    for name in others:
        (tmp_path / name).write_bytes(b"x")
    ta.save({"step": 2}, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ckpt.ta", *others])
    assert ta.load(path) == {"step": 2}


def test_an_atomic_save_fsyncs_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch) -> None:
    import os

    from tinyamp import serialization

    calls: list = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append(("fsync", "folder" if os.path.isdir(f"/proc/self/fd/{fd}") else "file"))
        real_fsync(fd)

    def replace(src, dst) -> None:
        calls.append(("replace", os.path.basename(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(serialization.os, "fsync", fsync)
    monkeypatch.setattr(serialization.os, "replace", replace)
    ta.save({"w": ta.ones(3)}, tmp_path / "ckpt.ta")
    assert calls == [("fsync", "file"), ("replace", "ckpt.ta"), ("fsync", "folder")]


# ------------------------------------------------------------- gaps a mutation audit found (issue 19)

@pytest.mark.parametrize("out_dtype, expected", [(np.float32, 1 + 2 ** -8 + 2 ** -11), ("bfloat16", 1 + 2 ** -7)])
def test_a_16_bit_gemm_on_cuda_rounds_once_into_another_output_dtype(out_dtype, expected: float) -> None:
    # 1 + 2**-8 + 2**-11 is exact in float32; float16 would round it (a tie) to 1 + 2**-8, and bfloat16 from
    # there to 1.0: rounded once, bfloat16 gives 1 + 2**-7. cuBLAS must write float32 (then one cast).
    from tinyamp.kernels import gemm as gemm_module

    out = ta.bfloat16 if out_dtype == "bfloat16" else np.dtype(out_dtype)
    with backend.use_cuda_standin():
        cp = backend.cupy()
        a = cp.asarray(np.array([[1.0, 2.0 ** -8, 2.0 ** -11]], np.float16))
        b = cp.asarray(np.ones((3, 1), np.float16))
        result = gemm_module.gemm(a, b, out_dtype=out)
        assert result.dtype == out and float(result.get().astype(np.float64)[0, 0]) == expected


def test_unscale_of_cpu_gradients_in_place_bumps_their_versions() -> None:
    p = ta.nn.Parameter(ta.ones(4))
    opt = ta.optim.SGD([p], lr=0.1)
    scaler = ta.amp.GradScaler("cpu", init_scale=4.0)
    scaler.scale((p * 2).sum()).backward()
    version = p.grad._version[0]
    scaler.unscale_(opt)
    assert p.grad._version[0] > version  # a node that saved the gradient sees the in-place write
    assert p.grad.tolist() == [2.0] * 4


def test_graph_device_keys_only_for_groups_wholly_on_the_fused_kernels() -> None:
    with backend.use_cuda_standin():
        p32 = ta.nn.Parameter(ta.ones(4, device="cuda"))
        p64 = ta.nn.Parameter(ta.ones(4, device="cuda", dtype=ta.float64))
        q32 = ta.nn.Parameter(ta.ones(4, device="cuda"))
        opt = ta.optim.Adam([{"params": [p32, p64]}, {"params": [q32]}], lr=0.1)
        for p in (p32, p64, q32):
            p.grad = ta.ones(4, device="cuda", dtype=p.dtype)
        opt.step()
        mixed, fused = opt.param_groups
        # The float64 parameter takes the array path, which passes the learning rate as a Python number:
        # a captured graph freezes it, so the group may not claim it can change between replays.
        assert opt._graph_device_keys(mixed) == ()
        assert opt._graph_device_keys(fused) == ("lr", "betas", "eps", "weight_decay")


def test_the_shadow_run_counts_a_nan_in_both_runs_at_one_element_as_agreement() -> None:
    from tinyamp.study import shadow

    same = shadow.relative_error(np.array([1.0, np.nan, 2.0]), np.array([1.0, np.nan, 2.0]))
    assert (same.max, same.rms) == (0.0, 0.0)
    close = shadow.relative_error(np.array([1.0, np.nan, 2.5]), np.array([1.0, np.nan, 2.0]))
    assert close.max == 0.25
    one_sided = shadow.relative_error(np.array([1.0, np.nan]), np.array([1.0, 1.0]))
    assert one_sided.max == np.inf


_AMP_STEPS = """
import tinyamp as ta
model = ta.nn.Sequential(ta.nn.Linear(8, 16), ta.nn.ReLU(), ta.nn.Linear(16, 4))
opt, scaler = ta.optim.Adam(model.parameters()), ta.amp.GradScaler("cpu")
x, y = ta.randn(4, 8), ta.tensor([0, 1, 2, 3])
for _ in range(2):
    with ta.autocast("cpu"):
        loss = ta.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
"""


def test_a_new_process_finds_every_numba_kernel_in_the_cache(tmp_path) -> None:
    # numba is a dependency of the default install; each kernel an AMP step uses compiles once per cache.
    import os
    import subprocess

    assert kernel_path.numba_available()
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "NUMBA_DEBUG_CACHE": "1",
           "PYTHONPATH": os.path.dirname(os.path.dirname(ta.__file__))}
    env.pop("TINYAMP_CAST_BACKEND", None)
    runs = [subprocess.run([sys.executable, "-c", _AMP_STEPS], capture_output=True, text=True, env=env, timeout=300)
            for _ in range(2)]
    assert all(run.returncode == 0 for run in runs), runs[-1].stderr
    assert "data saved" in runs[0].stdout  # the first process compiled and saved its kernels
    recompiled = [line for line in runs[1].stdout.splitlines() if "data saved" in line]
    assert not recompiled, recompiled


# --------------------------------------------------------- class 5: an out-of-range class on CUDA

def test_cross_entropy_out_of_range_on_cuda_raises_at_the_next_host_read() -> None:
    with backend.use_cuda_standin():
        model = _model(0)
        opt = ta.optim.SGD(model.parameters(), lr=0.1)
        scaler = ta.amp.GradScaler("cuda")
        x = ta.randn(8, 16, device="cuda")
        bad = ta.tensor([0, 1, 2, 3, 4, 0, 1, 2]).to("cuda")  # 4 classes: 4 is out of range
        before = [p.detach().cpu().numpy() for p in model.parameters()]
        syncs = ta.cuda.sync_count()
        with ta.autocast("cuda"):
            loss = ta.nn.functional.cross_entropy(model(x), bad)
        scaler.scale(loss).backward()
        scaler.step(opt)  # NaN gradients: the scaler skips the step, on the device
        scaler.update()
        assert ta.cuda.sync_count() == syncs  # nothing read on the host: no extra sync in the step
        with pytest.raises(IndexError, match=r"cross_entropy: target value 4 is out of range for 4 classes "
                                             r"\(input \[8, 4\] \(float32\), target shape \[8\]\)"):  # the logits' Cast
            loss.item()
        assert all(np.array_equal(p.detach().cpu().numpy(), b) for p, b in zip(model.parameters(), before))
        with ta.autocast("cuda"):
            ta.nn.functional.cross_entropy(model(x), bad)
        with pytest.raises(IndexError, match="target value 4 is out of range"):
            ta.cuda.synchronize()  # an explicit wait reports it too
        with ta.autocast("cuda"):
            good = ta.nn.functional.cross_entropy(model(x), bad.clamp(0, 3))
        assert np.isfinite(good.item())


# ------------------------------------------------------------------------ found while probing

def test_a_tensor_cannot_be_its_own_grad() -> None:
    p = ta.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="can't assign Variable as its own grad"):
        p.grad = p


def test_index_assignment_out_of_bounds_names_the_write(device: str) -> None:
    x = ta.arange(5, device=device).float()
    with pytest.raises(IndexError, match=r"index assignment: index 7 is out of bounds .* \(tensor of shape \[5\], "
                                         r"float32\)"):
        x[ta.tensor([7]).to(device)] = 1.0
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]  # nothing written (CuPy would have written x[2])


def test_index_assignment_checks_each_index_array_against_its_axis(device: str) -> None:
    x = ta.zeros(2, 3, 4, device=device)
    x[..., ta.tensor([-4, 3]).to(device)] = 1.0  # in range, a negative one included
    with pytest.raises(IndexError, match=r"^index assignment: index -3 is out of bounds for axis 0 with size 2 "
                                         r"\(tensor of shape \[2, 3, 4\], float32\)$"):
        x[ta.tensor([-3]).to(device), :, ta.tensor([0]).to(device)] = 2.0
    with pytest.raises(IndexError, match=r"^index assignment: index 4 is out of bounds for axis 2 with size 4 "):
        x[:, [0], ta.tensor([4, 1]).to(device)] = 2.0
    assert x.sum().item() == 12.0
