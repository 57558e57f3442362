"""tinyamp's CUDA backend API: choosing the stand-in, devices, ta.cuda / ta.accelerator names, sync accounting.

- ``backend.use_cuda_standin()`` and ``TINYAMP_CUDA=standin`` make the stand-in
  the CUDA backend and restore what was there;
- ``ta.cuda.sync_count()`` and the stand-in's sync counter count the same
  host reads on a training step;
- devices are cached values: a training step never asks the runtime for the
  device count again; the peak-memory tracker costs O(1) per allocation;
- ``set_default_device``, ``ta.accelerator``, ``ta.cuda.empty_cache``,
  ``reset_max_memory_allocated`` and ``is_bf16_supported`` with PyTorch's
  meaning, with CUDA (the stand-in) and without (a CPU-only build's answers).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tinyamp as ta
import cupy_standin as standin
from tinyamp import backend, cuda_memory
from tests.support import REPO

REPO = str(REPO)
NO_CUDA = not ta.cuda.is_available()
without_cuda = pytest.mark.skipif(not NO_CUDA, reason="checks a machine without CUDA")


@pytest.fixture
def on_standin():
    with backend.use_cuda_standin():
        yield standin


def _amp_step_setup(device: str = "cuda"):
    ta.manual_seed(0)
    model = ta.nn.Sequential(ta.nn.Linear(20, 16), ta.nn.ReLU(), ta.nn.Linear(16, 4)).to(device)
    opt = ta.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = ta.amp.GradScaler()
    x = ta.randn(8, 20, device=device)
    y = ta.randint(0, 4, (8,), device=device)

    def step() -> ta.Tensor:
        opt.zero_grad()
        with ta.amp.autocast(device_type=device):
            loss = ta.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return model, scaler, step


# ------------------------------------------------------------ choosing it
def test_use_cuda_standin_switches_and_restores() -> None:
    before = (ta.cuda.is_available(), backend.standin_active())
    with backend.use_cuda_standin():
        assert ta.cuda.is_available() and backend.standin_active() and backend.cupy() is standin
        x = ta.ones(3, device="cuda")
        assert x.is_cuda and type(x.array) is standin.ndarray and x.device == ta.device("cuda:0")
        assert backend.array_module(x.array) is standin and backend.is_cupy_array(x.array)
    assert (ta.cuda.is_available(), backend.standin_active()) == before
    switch = backend.use_cuda_standin()  # called, not entered: switched until restore()
    assert backend.standin_active()
    switch.restore()
    assert backend.standin_active() == before[1]


def test_the_environment_variable_selects_the_standin() -> None:
    code = ("import tinyamp as ta; from tinyamp import backend\n"
            "assert ta.cuda.is_available() and backend.standin_active()\n"
            "x = ta.randn(4, 3, device='cuda'); print(type(x.array).__module__, float((x * 0).sum().item()))\n")
    env = dict(os.environ, PYTHONPATH=REPO, TINYAMP_CUDA="standin")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["cupy_standin._array", "0.0"]
    env["TINYAMP_CUDA"] = "gpu"
    result = subprocess.run([sys.executable, "-c", "import tinyamp as ta; ta.zeros(1, device='cuda')"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert "TINYAMP_CUDA='gpu' is not one of 'cupy' (the default) or 'standin'" in result.stderr


def test_cuda_libraries_come_from_the_standin(on_standin) -> None:
    assert backend.cuda_lib("cupy_backends.cuda.libs.cublas") is standin.cublas
    assert backend.cuda_lib("cupyx") is standin.cupyx
    with pytest.raises(ImportError, match="the CUDA stand-in has no 'cupy_backends.cuda.libs.cusolver'"):
        backend.cuda_lib("cupy_backends.cuda.libs.cusolver")


@pytest.mark.skipif(backend.standin_active(), reason="the whole run is on the stand-in")
def test_standin_counters_need_the_standin() -> None:
    with pytest.raises(RuntimeError, match="the CUDA stand-in is not active"):
        ta.cuda.standin_counters()
    with backend.use_cuda_standin():
        assert ta.cuda.standin_counters() is standin.counters


# -------------------------------------------------------- sync accounting
def test_sync_count_agrees_with_the_standins_syncs(on_standin) -> None:
    """Both count every device-to-host read; a step that reads values on the host shows the same number."""
    model, scaler, step = _amp_step_setup()
    step(), step()
    counters = ta.cuda.standin_counters()
    counters.reset()
    syncs = ta.cuda.sync_count()
    step()
    assert counters.total("syncs") == ta.cuda.sync_count() - syncs == 0
    loss = step()
    loss.item()  # one read each ...
    scaler.get_scale()
    model[0].weight.detach().numpy()
    loss.tolist()
    float(loss)
    ta.cuda.synchronize()  # ... and an explicit wait
    assert counters.total("syncs") == ta.cuda.sync_count() - syncs == 6
    # The five reads, and at the first read after the step the cross-entropy kernel's error flag (16
    # bytes, copied once that read has waited for the device: no sync of its own).
    assert counters.total("d2h") == 6


# ------------------------------------------------------------ devices
def test_a_training_step_does_not_ask_for_the_device_count(on_standin, monkeypatch) -> None:
    calls = []
    count = standin.runtime.getDeviceCount
    monkeypatch.setattr(standin.runtime, "getDeviceCount", lambda: calls.append(1) or count())
    _, _, step = _amp_step_setup()
    for _ in range(3):
        step()
    assert len(calls) <= 1  # once per backend (cached), not once per Device made (about 20 a step before)


def test_peak_tracking_costs_o1_per_allocation(on_standin, monkeypatch) -> None:
    gc.collect()  # earlier tests' cyclic garbage freed now, not by a collection in the middle of this test
    pool = standin.get_default_memory_pool()
    used_reads, device_reads = [], []
    used = pool.used_bytes
    monkeypatch.setattr(standin.runtime, "getDevice", lambda: device_reads.append(1) or 0)
    monkeypatch.setattr(cuda_memory.tracker, "_used_bytes", lambda: used_reads.append(1) or used())
    ta.cuda.reset_peak_memory_stats()
    base = ta.cuda.memory_allocated()
    device_reads.clear()
    arrays = [standin.empty(1000, np.float32) for _ in range(50)]
    assert len(used_reads) == 50 and device_reads == []  # one counter read each, no runtime call
    assert ta.cuda.max_memory_allocated() == base + 50 * 4096
    del arrays
    assert ta.cuda.memory_allocated() == base and ta.cuda.max_memory_allocated() == base + 50 * 4096


# --------------------------------------------------------- default device
def test_set_default_device_moves_factories_and_modules(on_standin) -> None:
    try:
        ta.set_default_device("cuda")
        assert ta.get_default_device() == ta.device("cuda:0")
        assert ta.zeros(2).is_cuda and ta.randn(3).is_cuda and ta.tensor([1.0]).is_cuda and ta.arange(3).is_cuda
        assert all(p.is_cuda for p in ta.nn.Linear(3, 2).parameters())
        assert not ta.zeros(2, device="cpu").is_cuda  # an explicit device wins
        assert not ta.from_numpy(np.ones(2)).is_cuda  # shares memory with its array, as in PyTorch
    finally:
        ta.set_default_device(None)
    assert ta.get_default_device() == ta.device("cpu") and not ta.zeros(2).is_cuda


@without_cuda
def test_default_device_cuda_without_cuda_fails_on_use() -> None:
    ta.set_default_device("cuda")  # as in PyTorch: setting works ...
    try:
        with pytest.raises(RuntimeError, match="CUDA is unavailable"):
            ta.zeros(2)  # ... making a tensor there does not
    finally:
        ta.set_default_device(None)


# ------------------------------------------------- accelerator, ta.cuda names
def test_accelerator_with_cuda(on_standin) -> None:
    assert ta.accelerator.is_available() and ta.accelerator.device_count() == 1
    assert ta.accelerator.current_accelerator() == ta.device("cuda")
    assert ta.accelerator.current_accelerator(check_available=True).type == "cuda"


@without_cuda
def test_accelerator_without_cuda_is_a_cpu_only_build() -> None:
    assert ta.accelerator.is_available() is False and ta.accelerator.device_count() == 0
    assert ta.accelerator.current_accelerator(check_available=True) is None
    # Without CuPy installed there is no CUDA "build" at all: None, as torch on a CPU-only build.
    assert (ta.accelerator.current_accelerator() is None) == (not backend.cuda_built())


def test_empty_cache_and_reset_max_memory_allocated(on_standin) -> None:
    gc.collect()  # earlier tests' cyclic garbage freed now, not by a collection in the middle of this test
    x = ta.ones(100_000, device="cuda")
    ta.cuda.reset_peak_memory_stats()
    del x
    assert ta.cuda.memory_reserved() > ta.cuda.memory_allocated()  # the freed block is cached
    ta.cuda.empty_cache()
    assert ta.cuda.memory_reserved() == ta.cuda.memory_allocated()
    peak = ta.cuda.max_memory_allocated()
    assert peak >= ta.cuda.memory_allocated() + 400_000
    with pytest.warns(FutureWarning, match=r"torch\.cuda\.reset_max_memory_allocated now calls "
                                           r"torch\.cuda\.reset_peak_memory_stats, which resets /all/ peak"):
        ta.cuda.reset_max_memory_allocated()
    assert ta.cuda.max_memory_allocated() == ta.cuda.memory_allocated() < peak


@without_cuda
def test_memory_names_without_cuda_answer_as_a_cpu_only_build() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ta.cuda.reset_max_memory_allocated()
    ta.cuda.empty_cache()  # nothing to free
    assert ta.cuda.max_memory_allocated() == ta.cuda.memory_reserved() == 0
    assert ta.cuda.is_bf16_supported() is False


def test_is_bf16_supported_follows_the_compute_capability(on_standin, monkeypatch) -> None:
    assert ta.cuda.is_bf16_supported() is True  # the stand-in reports compute capability 8.0
    monkeypatch.setattr(standin.runtime, "COMPUTE_CAPABILITY", (7, 5))  # a T4
    assert ta.cuda.is_bf16_supported() is False and ta.cuda.is_bf16_supported(including_emulation=False) is False


def test_a_boolean_mask_index_is_a_counted_sync(on_standin) -> None:
    x = ta.randn(6, device="cuda", requires_grad=True)
    counters = ta.cuda.standin_counters()
    counters.reset()
    syncs = ta.cuda.sync_count()
    x[x > 0].sum().backward()
    assert counters.total("syncs") == ta.cuda.sync_count() - syncs == 1  # the mask's count, read by the host


def test_op_constants_are_kernel_arguments_not_uploads(on_standin) -> None:
    """leaky_relu's slope, clamp's bounds and the nan of an out-of-range embedding index: no host-to-device copy."""
    x = ta.randn(4, 3, device="cuda", dtype=ta.bfloat16)
    weight, index = ta.randn(5, 3, device="cuda"), ta.tensor([0, 7], device="cuda")
    counters = ta.cuda.standin_counters()
    counters.reset()
    y = ta.nn.functional.leaky_relu(x, 0.1)
    z = x.clamp(-0.5, 0.5)
    rows = ta.nn.functional.embedding(index, weight)
    assert counters.total("h2d") == 0
    with pytest.raises(IndexError, match="embedding: index 7 is out of range"):  # flagged on the device
        rows.numpy()
    assert y.dtype == z.dtype == ta.bfloat16 and np.isnan(rows.numpy()[1]).all()


@pytest.mark.parametrize("start", ["cpu", "cuda"])
def test_a_gradient_comes_back_through_a_device_move_to_the_leafs_device(on_standin, start: str) -> None:
    # ToDevice's backward moves the gradient back (issue 30's audit: no test took a gradient through
    # .to("cuda") or .cpu(); returning it unmoved left a CUDA gradient on a CPU leaf).
    other = "cuda" if start == "cpu" else "cpu"
    x = ta.tensor([1.0, 2.0, 3.0], device=start, requires_grad=True)
    y = x.to(other) if start == "cpu" else x.cpu()
    (y * ta.tensor([2.0, 3.0, 4.0], device=other)).sum().backward()
    assert x.grad.device == ta.device(start) and y.device == ta.device(other)
    np.testing.assert_array_equal(x.grad.cpu().numpy(), [2.0, 3.0, 4.0])
