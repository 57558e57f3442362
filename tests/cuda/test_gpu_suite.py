"""End-to-end checks of the CUDA paths, on the CUDA stand-in and on a GPU (``cuda_backend``).

Every test runs on the strict stand-in (cupy_standin) and, marked
``gpu``, on a real GPU (``pytest -m gpu``); the two that only a GPU can show
(a spinning kernel, torch's CUDA matmul) take ``gpu_cp`` or branch on
``backend.standin_active()``.

- the fused kernels of tinyamp/kernels/cuda/cuda_*.py against the NumPy paths, bit for bit
  (the same drivers as the CPU tests; Adam's bias corrections checked first,
  because CUDA's double ``pow`` is not the C library's);
- an AMP training step with tinyamp's optimizers and GradScaler never makes the
  host wait for the GPU: ``ta.cuda.sync_count()`` does not move, the stand-in
  counts no sync or device-to-host copy, and a GPU kept busy by a spinning
  kernel is still busy when the step's host code returns;
- a skipped step leaves parameters, masters and optimizer state bit-identical;
- gemm: CUBLAS_COMPUTE_32F, the length-4096 dot product of ones is exact,
  float16 (ours and ``torch.matmul``'s) within the standard dot-product bound;
- an out-of-range class index gives a nan loss on the GPU (no host check);
- the memory statistics follow allocations.
"""

from __future__ import annotations

import gc
import importlib

import numpy as np
import pytest

from tests.support import fused_drivers as fd
from tests.support.scaler_cases import scale_states
import tinyamp as ta
from tinyamp import backend
from tinyamp.kernels import loss_scale
from tinyamp.kernels.cuda import cuda_launch, cuda_optim

from conftest import GPU  # noqa: E402 - the real-GPU parameter (marked gpu)
from tests.kernels.test_gemm import _within_dot_product_bound  # noqa: E402
gemm_module = importlib.import_module("tinyamp.kernels.gemm")
cublas_gemm = importlib.import_module("tinyamp.kernels.cuda.cublas_gemm")  # last_gpu_call


@pytest.fixture
def cp(cuda_backend):
    """CuPy on a GPU, or the CUDA stand-in (every test here runs on both unless it takes gpu_cp)."""
    return backend.cupy()


@pytest.fixture(params=[GPU])
def gpu_cp(request):
    """CuPy on a real GPU only: for what the stand-in cannot show (NVRTC, timing, torch on CUDA)."""
    return backend.cupy()


def on_device(update):
    """Run a driver's ``update`` on CuPy copies of its arrays and copy the results back."""
    def run(*args, low=None, **hyper):
        cp = backend.cupy()
        host = [a for a in args if isinstance(a, np.ndarray)] + ([low] if low is not None else [])
        dev = {id(a): cp.asarray(a) for a in host}
        conv = [a if a is True or a is None else dev[id(a)] for a in args]
        update(*conv, low=None if low is None else dev[id(low)], **hyper)
        for a in host:
            a[...] = dev[id(a)].get()
    return run


# ------------------------------------------------------------ fused kernels
@pytest.mark.parametrize("pair", [(fd.F32, fd.F32), (fd.F16, fd.F32), (fd.BF16, fd.BF16), (fd.BF16, fd.F32),
                                  (fd.F16, fd.F16)], ids=str)
@pytest.mark.parametrize("bad", [None, np.inf, np.nan])
def test_fused_unscale_matches_the_numpy_path(cp, pair, bad) -> None:
    rng = np.random.default_rng(0)
    g_dt, o_dt = pair
    grads = [(rng.standard_normal(n) * 2.0 ** rng.integers(-30, 14, n)).astype(g_dt) for n in (1, 8191, 8193, 70000)]
    if bad is not None:
        grads[2][8192] = bad
    outs = [g.copy() if o_dt == g_dt else np.empty(g.shape, o_dt) for g in grads]
    d_grads = [cp.asarray(g) for g in grads]
    d_outs = [g if o_dt == g_dt else cp.empty(g.shape, o_dt) for g in d_grads]
    host_grads = [o if o_dt == g_dt else g for g, o in zip(grads, outs)]
    scale = np.full((), 3.0, np.float32)
    found, d_found = np.zeros((), np.float32), cp.zeros((), cp.float32)
    before = dict(cuda_launch.launches)
    with np.errstate(all="ignore"):
        loss_scale.unscale_group(np, host_grads, outs, scale, found)
    loss_scale.unscale_group(cp, d_grads, d_outs, cp.asarray(scale), d_found)
    launched = {k: n - before.get(k, 0) for k, n in cuda_launch.launches.items() if n > before.get(k, 0)}
    launched.pop("tinyamp_fill_pointers", None)  # a new pointer table is written by a launch of its own
    assert sum(launched.values()) == 1  # one launch for the group
    fd.assert_same_bits([o.get() for o in d_outs] + [d_found.get()], outs + [found], "unscale")


@pytest.mark.parametrize("hyper", [
    dict(growth_factor=2.0, backoff_factor=0.5, growth_interval=3, hysteresis=1, min_scale=None, max_scale=None),
    dict(growth_factor=1.5, backoff_factor=0.3, growth_interval=1, hysteresis=3, min_scale=0.125,
         max_scale=2.0 ** 20)])
def test_fused_update_scale_matches_the_numpy_path(cp, hyper) -> None:
    for state in scale_states(hyper):
        want = [a.copy() for a in state]
        with np.errstate(over="ignore"):
            loss_scale.update_scale(np, *want, **hyper)
        got = [cp.asarray(a) for a in state]
        loss_scale.update_scale(cp, *got, **hyper)
        fd.assert_same_bits([a.get() for a in got], want, f"update_scale {[a.item() for a in state]}")


@pytest.mark.parametrize("dtypes", fd.DTYPE_CASES, ids=lambda d: "-".join(str(x) for x in d))
@pytest.mark.parametrize("case", fd.SGD_CASES, ids=fd.case_id)
def test_fused_sgd_matches_the_numpy_path(cp, case, dtypes) -> None:
    want = fd.sgd_run(fd.numpy_sgd, case, dtypes)
    got = fd.sgd_run(on_device(fd.sgd_as_group(cuda_optim.sgd_group, cp.asarray)), case, dtypes)
    for step, (a, b) in enumerate(zip(got, want)):
        fd.assert_same_bits(a, b, f"sgd step {step}")


def test_adam_bias_corrections_match_numpy(cp) -> None:
    """CUDA's double pow is within 2 ulp, glibc's is correctly rounded: after rounding to float32 they agree
    unless a value lands next to a float32 rounding boundary. Checked for every step the tests use and more."""
    mismatches = []
    for beta1, beta2 in [(0.9, 0.999), (0.8, 0.99), (0.9, 0.95)]:
        for t in range(1000):
            step = cp.full((), t, cp.float32)
            coef = cp.empty((2,), cp.float32)
            cuda_optim.adam_bias_corrections([step], cp.zeros((1,), cp.float32),
                                             cp.asarray([1e-3, beta1, beta2, 0.0, 0.0]), coef)
            tt = np.float64(np.float32(t) + np.float32(1))
            want = [np.float32(1e-3 / (1 - beta1 ** tt)), np.float32(np.sqrt(1 - beta2 ** tt))]
            if coef.get().tolist() != [float(w) for w in want]:
                mismatches.append((beta1, beta2, t, coef.get().tolist(), want))
    assert not mismatches, f"float32 bias corrections differ from NumPy's (pow): {mismatches[:5]}"


@pytest.mark.parametrize("dtypes", fd.DTYPE_CASES, ids=lambda d: "-".join(str(x) for x in d))
@pytest.mark.parametrize("case", fd.ADAM_CASES, ids=fd.case_id)
def test_fused_adam_matches_the_numpy_path(cp, case, dtypes) -> None:
    # Bit for bit given equal bias corrections (test_adam_bias_corrections_match_numpy).
    want = fd.adam_run(fd.numpy_adam, case, dtypes)
    got = fd.adam_run(on_device(fd.adam_as_group(cuda_optim.adam_group, cp.asarray)), case, dtypes)
    for step, (a, b) in enumerate(zip(got, want)):
        fd.assert_same_bits(a, b, f"adam step {step}")


# ------------------------------------------------------------ training steps
SPIN = r"""
extern "C" __global__ void tinyamp_test_spin(volatile int* release, long long max_cycles) {
    const long long start = clock64();
    while (release[0] == 0 && clock64() - start < max_cycles) { }
}
"""


def host_never_waits(cp, fn) -> bool:
    """Run ``fn`` while a spinning kernel holds the GPU: True when the GPU is still busy afterwards.

    Any host synchronisation inside ``fn`` would wait for the spinning kernel
    (up to 60 s), so "still busy" means the host never waited. The spinner is
    released from a non-blocking stream afterwards.
    """
    release = cp.zeros((1,), cp.int32)
    spin = cp.RawKernel(SPIN, "tinyamp_test_spin")
    cp.cuda.Device().synchronize()
    spin((1,), (1,), (release, np.int64(120_000_000_000)))  # about a minute at 2 GHz, unless released
    fn()
    busy = not cp.cuda.get_current_stream().done  # a query, not a wait
    with cp.cuda.Stream(non_blocking=True):  # runs beside the spinner, not behind it
        release.fill(1)
    cp.cuda.Device().synchronize()
    return busy


# sgd and adam run the fused kernels; the others run their CuPy array paths.
GPU_OPTIMIZERS = {
    "sgd": lambda ps, **kw: ta.optim.SGD(ps, lr=0.05, momentum=0.9, **kw),
    "adam": lambda ps, **kw: ta.optim.Adam(ps, lr=1e-3, **kw),
    "rmsprop": lambda ps, **kw: ta.optim.RMSprop(ps, lr=1e-3, momentum=0.9, centered=True, **kw),
    "adagrad": lambda ps, **kw: ta.optim.Adagrad(ps, lr=1e-2, lr_decay=1e-3, **kw),
    "adadelta": lambda ps, **kw: ta.optim.Adadelta(ps, weight_decay=1e-4, **kw),
    "nadam": lambda ps, **kw: ta.optim.NAdam(ps, lr=1e-3, **kw),
    "radam": lambda ps, **kw: ta.optim.RAdam(ps, lr=1e-3, **kw),
}


def make_run(o2: bool, opt_name: str):
    ta.manual_seed(0)
    # The stand-in computes on the CPU: a smaller model checks the same syncs and bits there.
    hidden, batch = (64, 32) if backend.standin_active() else (512, 256)
    model = ta.nn.Sequential(ta.nn.Linear(784, hidden), ta.nn.ReLU(), ta.nn.Linear(hidden, 10)).to("cuda")
    if o2:
        model.half()
    params = list(model.parameters())
    opt = GPU_OPTIMIZERS[opt_name](params, master_weights=o2)
    scaler = ta.amp.GradScaler()
    rng = np.random.default_rng(0)
    x = ta.tensor(rng.random((batch, 784), dtype=np.float32), device="cuda")
    y = ta.tensor(rng.integers(0, 10, batch), device="cuda")

    def step(poison: bool = False):
        opt.zero_grad()
        with ta.amp.autocast(device_type="cuda", enabled=not o2):
            logits = model(x.half() if o2 else x)
            loss = ta.nn.functional.cross_entropy(logits.float(), y)
        scaler.scale(loss).backward()
        if poison:
            params[0].grad.array[0, 0] = float("inf")
        scaler.step(opt)
        scaler.update()
        return loss

    return model, opt, scaler, step


@pytest.mark.parametrize("o2", [False, True], ids=["O1", "O2"])
@pytest.mark.parametrize("opt_name", list(GPU_OPTIMIZERS))
def test_amp_training_step_makes_no_host_sync(cp, o2, opt_name) -> None:
    """No host read or wait in an AMP step after warm-up.

    On the stand-in its sync and device-to-host counters must stay at zero; on
    a GPU a spinning kernel must still be running when three steps' host code
    has returned. (Host-to-device copies of rebuilt pointer tables are the
    launch-and-transfer budget's business, issue 10 item 3: each table miss
    allocates a small block that moves later gradients to other addresses, so
    the tables take 3 to 20 steps to settle on the stand-in's pool.)
    """
    _, _, _, step = make_run(o2, opt_name)
    for _ in range(3):  # warm-up: kernels compiled, memory pool grown
        step()
    cp.cuda.Device().synchronize()
    syncs = ta.cuda.sync_count()
    launches = sum(cuda_launch.launches.values())
    if backend.standin_active():
        counters = ta.cuda.standin_counters()
        counters.reset()
        for _ in range(3):
            step()
        assert (counters.total("syncs"), counters.total("d2h")) == (0, 0)
    else:
        assert host_never_waits(cp, lambda: [step() for _ in range(3)]), "the host waited for the GPU in a step"
    assert ta.cuda.sync_count() == syncs
    if opt_name in ("sgd", "adam"):
        assert sum(cuda_launch.launches.values()) > launches  # the fused kernels did the work


@pytest.mark.parametrize("o2", [False, True], ids=["O1", "O2"])
@pytest.mark.parametrize("opt_name", list(GPU_OPTIMIZERS))
def test_skipped_step_leaves_everything_bit_identical(cp, o2, opt_name) -> None:
    model, opt, scaler, step = make_run(o2, opt_name)
    step(), step()

    def snapshot():
        arrays = [p.array for p in model.parameters()]
        arrays += [t.array for p in model.parameters() for t in opt.state.get(p, {}).values() if isinstance(t, ta.Tensor)]
        return [a.get() for a in arrays]

    before, scale = snapshot(), scaler.get_scale()
    step(poison=True)
    assert scaler.last_step.skipped and scaler.get_scale() == scale / 2
    fd.assert_same_bits(snapshot(), before, "skipped step")


# ------------------------------------------------------------------- gemm
def test_gemm_uses_compute_32f_and_strided_batched(cp) -> None:
    a = cp.asarray(np.random.default_rng(0).standard_normal((64, 32)), dtype=cp.float16)
    gemm_module.gemm(a, a, trans_b=True)
    call = cublas_gemm.last_gpu_call
    assert call["function"] == "gemmEx" and call["compute_type_name"] == "CUBLAS_COMPUTE_32F"
    assert call["compute_type"] == backend.cuda_lib("cupy_backends.cuda.libs.cublas").CUBLAS_COMPUTE_32F == 68
    gemm_module.gemm(cp.stack([a, a]), cp.stack([a.T, a.T]).copy())
    assert cublas_gemm.last_gpu_call["function"] == "gemmStridedBatchedEx"  # not CuPy's float32 upcast
    assert cublas_gemm.last_gpu_call["a_type"] == "float16"


def test_length_4096_dot_product_of_ones_is_exact(cp) -> None:
    ones = cp.ones((1, 4096), dtype=cp.float16)
    out = gemm_module.gemm(ones, ones, trans_b=True)
    assert out.dtype == cp.float16 and float(out.get()[0, 0]) == 4096.0  # a float16 accumulator stops at 2048


def test_float16_gemm_agrees_with_torch_within_the_dot_product_bound(gpu_cp) -> None:
    cp = gpu_cp
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((512, 1024)).astype(np.float16), rng.standard_normal((1024, 768)).astype(np.float16)
    ours = gemm_module.gemm(cp.asarray(a), cp.asarray(b)).get()
    flag = torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False  # float32 accumulation there too
    try:
        theirs = torch.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()).cpu().numpy()
    finally:
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = flag
    # Both sum the same products in float32, in different orders, and round once: each is held to the
    # standard dot-product bound against the exact product (one ulp apart is not promised: see the helper).
    assert _within_dot_product_bound(ours, a, b, np.float16).all()
    assert _within_dot_product_bound(theirs, a, b, np.float16).all()


# ------------------------------------------------------- losses, memory
def test_out_of_range_class_index_raises_at_the_next_host_read(cp) -> None:
    # No host check in the step (a sync every step): the kernel sets a device flag and makes the loss and
    # gradients NaN; the next host read, which waits for the device anyway, raises (PyTorch's device-side
    # assert surfaces the same way). An embedding index gives NaN rows only (README, Differences).
    logits = ta.randn(4, 10, device="cuda", requires_grad=True)
    target = ta.tensor([1, 10, 3, 0], device="cuda")
    syncs = ta.cuda.sync_count()
    loss = ta.nn.functional.cross_entropy(logits, target)
    loss.backward()
    weight = ta.randn(5, 3, device="cuda", requires_grad=True)
    rows = ta.nn.functional.embedding(ta.tensor([0, 7], device="cuda"), weight)
    assert ta.cuda.sync_count() == syncs
    with pytest.raises(IndexError, match=r"cross_entropy: target value 10 is out of range for 10 classes"):
        loss.item()
    assert np.isnan(loss.item()) and np.isnan(logits.grad.numpy()).all()  # reported once; the values stay
    assert np.isnan(rows.detach().numpy()[1]).all() and not np.isnan(rows.detach().numpy()[0]).any()
    good = ta.nn.functional.cross_entropy(logits, ta.tensor([1, 9, 3, 0], device="cuda"))
    assert np.isfinite(good.item())


def test_memory_statistics_follow_allocations(cp) -> None:
    gc.collect()  # earlier tests' cyclic garbage freed now, not by a collection in the middle of this test
    ta.cuda.reset_peak_memory_stats()
    base = ta.cuda.memory_allocated()
    a = cp.empty(1 << 22, dtype=cp.uint8)
    b = cp.empty(1 << 21, dtype=cp.uint8)
    assert ta.cuda.memory_allocated() >= base + (1 << 22) + (1 << 21)
    del a, b
    assert ta.cuda.memory_allocated() == base
    assert ta.cuda.max_memory_allocated() >= base + (1 << 22) + (1 << 21)
    assert ta.cuda.memory_reserved() >= ta.cuda.max_memory_allocated()  # the freed blocks stay cached
    ta.cuda.reset_peak_memory_stats()
    assert ta.cuda.max_memory_allocated() == base
