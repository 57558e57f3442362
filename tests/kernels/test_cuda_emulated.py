"""The fused CUDA kernel sources, run on the CUDA stand-in (g++), against the NumPy paths bit for bit.

Each kernel's source is compiled with g++ by ``cupy_standin/kernels.py``
and driven through the same launch code tinyamp uses on a GPU (pointer and
chunk tables, keep flags, kernel variants) on stand-in device arrays, then held
against the scaler's and the optimizers' NumPy paths, down to whole training
steps with GradScaler (O1 and O2, skipped steps included). The optimizer kernels
one by one are checked by tests/cuda/test_gpu_suite.py, which runs on the stand-in
too. What stays for a GPU run: NVRTC, CuPy's code generation, the PTX float16
conversions themselves and CUDA's pow.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tests.support import fused_drivers as fd
from tests.support.scaler_cases import HYPERS, UNSCALE_PAIRS, numpy_update_scale, scale_states
import tinyamp as ta
from tinyamp import backend
from tinyamp.kernels import cross_entropy, loss_scale
from tinyamp.kernels.cuda import cuda_epilogue, cuda_launch, cuda_optim, cuda_scaler, cuda_vector
from tinyamp.kernels.gemm import gemm, gemm_bias
from cupy_standin import kernels as standin_kernels

pytestmark = pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")


@pytest.fixture
def cp():
    with backend.use_cuda_standin():
        yield backend.cupy()


@pytest.mark.parametrize("chunk, block", [(64, 16), (8192, 256)])
def test_unscale_group_matches_the_numpy_path(cp, monkeypatch, chunk, block) -> None:
    monkeypatch.setattr(cuda_scaler, "UNSCALE_CHUNK", chunk)
    monkeypatch.setattr(cuda_scaler, "UNSCALE_BLOCK", block)
    before = cuda_launch.launches.get("tinyamp_unscale_f16_f32", 0)
    for bad_pair in [None, *range(len(UNSCALE_PAIRS))]:
        for scale in (2.0 ** 16, 3.0):
            results = []
            for fused in (False, True):
                rng = np.random.default_rng(5)
                grads, outs = [], []
                for k, (g_dt, o_dt) in enumerate(UNSCALE_PAIRS):  # one group, several dtype pairs
                    for n in (1, 63, 64, 65, 300):
                        g = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 14, n)).astype(g_dt)
                        if k == bad_pair and n == 65:
                            g[64] = np.nan if k % 2 else np.inf  # the last element of a chunk boundary
                        grads.append(g)
                        outs.append(g if o_dt == g_dt else np.empty(n, o_dt))
                grads.append(np.arange(6.0))  # float64: left to the loop
                outs.append(grads[-1])
                found = np.zeros((), np.float32)
                scale_array = np.full((), scale, np.float32)
                if fused:  # the scaler's function on device arrays: the fused kernel, float64 in its loop
                    dev = {id(a): cp.asarray(a) for a in grads + outs}
                    d_outs = [dev[id(o)] for o in outs]
                    d_found = cp.asarray(found)
                    loss_scale.unscale_group(cp, [dev[id(g)] for g in grads], d_outs, cp.asarray(scale_array),
                                                 d_found)
                    results.append([o.get() for o in d_outs] + [d_found.get()])
                else:
                    with np.errstate(all="ignore"):
                        loss_scale.unscale_group(np, grads, outs, scale_array, found)
                    results.append(outs + [found])
            fd.assert_same_bits(results[1], results[0], f"unscale bad={bad_pair}")
            assert (results[1][-1] == 1) == (bad_pair is not None)
    assert cuda_launch.launches["tinyamp_unscale_f16_f32"] - before == 2 * (len(UNSCALE_PAIRS) + 1)  # one per call
    rest = cuda_scaler.unscale_group([cp.ones(3), cp.ones(6, np.float32)[::2]], [cp.ones(3), cp.ones(3, np.float32)],
                                      cp.ones((), np.float32), cp.zeros((), np.float32))
    assert [g.dtype for g, _ in rest] == [np.float64, np.float32]  # float64 and a strided view are not taken


def test_bfloat16_rounding_of_the_unscale_kernel(cp) -> None:
    """float32 -> bfloat16 (the bit trick in the kernel source) against ml_dtypes, over all kinds of floats."""
    rng = np.random.default_rng(0)
    patterns = np.concatenate([rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32),
                               np.arange(0x7f7f0000, 0x7f800001, dtype=np.uint32),  # up to overflow and inf
                               np.arange(0, 0x20000, dtype=np.uint32)])  # subnormals, ties at the bottom
    x = patterns.view(np.float32)
    x = np.concatenate([x, -x])
    out = cp.empty(x.shape, ml_dtypes.bfloat16)
    cuda_scaler.unscale_group([cp.asarray(x)], [out], cp.ones((), np.float32), cp.zeros((), np.float32))
    with np.errstate(invalid="ignore"):
        want = x.astype(ml_dtypes.bfloat16)
    fd.assert_same_bits([out.get()], [want], "bfloat16 rounding")


@pytest.mark.parametrize("hyper", HYPERS)
def test_update_scale_kernel_matches_the_numpy_path(cp, hyper) -> None:
    for state in scale_states(hyper):
        want = [a.copy() for a in state] + [np.zeros(2, np.float32)]
        numpy_update_scale(*want[:4], **hyper, record=want[4])
        got = [cp.asarray(a) for a in state] + [cp.zeros(2, np.float32)]
        cuda_scaler.update_scale(*got[:4], **hyper, floor=loss_scale.DEFAULT_MIN_SCALE, record=got[4])
        fd.assert_same_bits([a.get() for a in got], want, f"update_scale {[a.item() for a in state]}")
        assert want[4][0] == state[0] and want[4][1] == want[0]  # the scale before and after


# -------------------------------------------------------- whole training steps
OPTIMIZERS = {
    "sgd-nesterov": lambda params, o2: ta.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True,
                                                    weight_decay=1e-4, master_weights=o2),
    "adam": lambda params, o2: ta.optim.Adam(params, lr=1e-3, weight_decay=1e-2, master_weights=o2),
    "adamw-amsgrad": lambda params, o2: ta.optim.AdamW(params, lr=2e-3, amsgrad=True, master_weights=o2),
}


def train(make_optimizer, o2: bool, device: str, steps: int = 5) -> list:
    """A small MLP under GradScaler; step 3 gets an inf gradient. Host snapshots of everything after each step."""
    ta.manual_seed(0)
    model = ta.nn.Sequential(ta.nn.Linear(12, 32), ta.nn.ReLU(), ta.nn.Linear(32, 4)).to(device)
    if o2:
        model.half()
    opt = make_optimizer(list(model.parameters()), o2)
    scaler = ta.amp.GradScaler(init_scale=2.0 ** 10, growth_interval=2)
    rng = np.random.default_rng(0)
    snapshots = []

    def host(array):
        return backend.to_host(array).copy()

    for step in range(steps):
        x = ta.tensor(rng.standard_normal((16, 12)).astype(np.float32), device=device)
        y = ta.tensor(rng.integers(0, 4, 16), device=device)
        opt.zero_grad()
        with ta.amp.autocast(device_type=device, enabled=not o2):
            out = model(x.half() if o2 else x)
            loss = ta.nn.functional.cross_entropy(out.float(), y)
        scaler.scale(loss).backward()
        if step == 3:
            model[0].weight.grad.array[0, 0] = np.inf
        before = [host(p.array) for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        params = [host(p.array) for p in model.parameters()]
        if step == 3:
            fd.assert_same_bits(params, before, "a skipped step changed a parameter")
        state = [host(t.array) for p in model.parameters() for _, t in sorted(opt.state.get(p, {}).items())
                 if isinstance(t, ta.Tensor)]
        snapshots.append(params + state + [host(scaler._scale), host(scaler._growth_tracker)])
    return snapshots


@pytest.mark.parametrize("o2", [False, True], ids=["O1", "O2"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_training_steps_with_fused_kernels_match_the_numpy_path(monkeypatch, name, o2) -> None:
    # cross_entropy's kernels call the C library's expf/logf where NumPy has its own (they differ in
    # the last bit for some inputs; test_cross_entropy_kernels.py compares them with the same ones):
    # here the loss takes its general path in both runs, so the scaler and optimizer kernels are compared.
    monkeypatch.setattr(cross_entropy, "fusable", lambda *args: False)
    want = train(OPTIMIZERS[name], o2, "cpu")
    with backend.use_cuda_standin():
        before = dict(cuda_launch.launches)
        ta.amp.clear_autocast_cache()
        got = train(OPTIMIZERS[name], o2, "cuda")
        if not o2:  # the kernel rewrote the cached float16 weights each step: converted on the first step only
            assert ta.amp.autocast_cache_info()["misses"] == 4  # two weights, two biases
    for step, (a, b) in enumerate(zip(got, want)):
        fd.assert_same_bits(a, b, f"{name} step {step}")
    launched = {k: n - before.get(k, 0) for k, n in cuda_launch.launches.items() if n > before.get(k, 0)}
    assert {"tinyamp_update_scale", "tinyamp_unscale_f32_f32" if not o2 else "tinyamp_unscale_f16_f32"} <= set(launched)
    # One launch per group and step: float32 weights (the masters under O2), float32 gradients, float16
    # copies written (O2's parameters; under O1 the weight-cast cache's, so no forward converts a weight
    # after the first step); the skipped step's launch writes nothing.
    update = "tinyamp_sgd_group_f32_f32_f16" if name.startswith("sgd") else "tinyamp_adam_group_f32_f32_f16"
    assert launched[update] == 5
    assert launched["tinyamp_advance_steps" if name.startswith("sgd") else "tinyamp_adam_prepare_group"] == 5


# ------------------------------------------------------ multi-tensor kernels
def on_device(cp, update):
    """Run a driver's ``update`` on stand-in copies of its arrays and copy the results back."""
    def run(*args, low=None, **hyper):
        host = [a for a in args if isinstance(a, np.ndarray)] + ([low] if low is not None else [])
        dev = {id(a): cp.asarray(a) for a in host}
        conv = [a if a is True or a is None else dev[id(a)] for a in args]
        update(*conv, low=None if low is None else dev[id(low)], **hyper)
        for a in host:
            a[...] = dev[id(a)].get()
    return run


@pytest.mark.parametrize("dtypes", fd.DTYPE_CASES, ids=lambda d: "-".join(str(x) for x in d))
@pytest.mark.parametrize("case", fd.SGD_CASES, ids=fd.case_id)
def test_sgd_group_kernel_matches_the_numpy_path(cp, case, dtypes) -> None:
    want = fd.sgd_run(fd.numpy_sgd, case, dtypes)
    got = fd.sgd_run(on_device(cp, fd.sgd_as_group(cuda_optim.sgd_group, cp.asarray)), case, dtypes)
    for step, (a, b) in enumerate(zip(got, want)):
        fd.assert_same_bits(a, b, f"sgd group step {step}")


@pytest.mark.parametrize("dtypes", fd.DTYPE_CASES, ids=lambda d: "-".join(str(x) for x in d))
@pytest.mark.parametrize("case", fd.ADAM_CASES, ids=fd.case_id)
def test_adam_group_kernel_matches_the_numpy_path(cp, case, dtypes) -> None:
    want = fd.adam_run(fd.numpy_adam, case, dtypes)
    got = fd.adam_run(on_device(cp, fd.adam_as_group(cuda_optim.adam_group, cp.asarray)), case, dtypes)
    for step, (a, b) in enumerate(zip(got, want)):
        fd.assert_same_bits(a, b, f"adam group step {step}")


# A group mixing sizes (empty, chunk edges) and dtype triples: (weight, gradient, low copy or None).
GROUP_TENSORS = [((0,), fd.F32, fd.F32, None), ((1,), fd.F32, fd.F16, None), ((7, 9), fd.F32, fd.F32, fd.F16),
                 ((64,), fd.F32, fd.F32, fd.BF16), ((65,), fd.F32, fd.F32, None), ((130,), fd.F16, fd.F16, None),
                 ((3, 50), fd.BF16, fd.BF16, None), ((200,), fd.F32, fd.F16, None)]


def group_arrays(rng) -> dict:
    arrays = {"w": [], "low": [], "buf": [], "m": [], "v": [], "v_max": [], "step": []}
    for shape, w_dt, _, low_dt in GROUP_TENSORS:
        w = rng.standard_normal(shape).astype(w_dt)
        arrays["w"].append(w)
        arrays["low"].append(None if low_dt is None else w.astype(low_dt))
        for name in ("buf", "m", "v", "v_max"):
            arrays[name].append(np.zeros(shape, w_dt))
        arrays["step"].append(np.zeros((), np.float32))
    return arrays


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_one_launch_updates_a_mixed_group_as_the_numpy_path_does_per_tensor(cp, monkeypatch, optimizer) -> None:
    """Small chunks so that tensors span several blocks; one update launch per dtype triple and step."""
    monkeypatch.setattr(cuda_optim, "GROUP_CHUNK", 64)
    monkeypatch.setattr(cuda_optim, "GROUP_BLOCK", 16)
    sgd_case = dict(lr=0.03, momentum=0.9, dampening=0.1, weight_decay=1e-4, nesterov=False, maximize=True)
    adam_case = dict(lr=2e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, decoupled=True)
    before = dict(cuda_launch.launches)
    results = []
    for fused in (False, True):
        rng = np.random.default_rng(4)
        a = group_arrays(rng)
        if fused:
            a = {k: [None if x is None else cp.asarray(x) for x in v] for k, v in a.items()}
        snapshots = []
        for keep in fd.KEEPS:
            grads = [(rng.standard_normal(shape) * 0.5).astype(g_dt) for shape, _, g_dt, _ in GROUP_TENSORS]
            if keep is not True and not bool(keep):
                grads[4][17] = np.inf  # what a skipped step sees
            found = fd.found_of(keep)
            with np.errstate(all="ignore"):
                if fused and optimizer == "sgd":
                    cuda_optim.sgd_group(a["w"], [cp.asarray(g) for g in grads], a["buf"], a["step"], a["low"],
                                         None if found is None else cp.asarray(found),
                                         cp.asarray([0.03, 0.9, 0.1, 1e-4]), nesterov=False, maximize=True)
                elif fused:
                    cuda_optim.adam_group(a["w"], [cp.asarray(g) for g in grads], a["m"], a["v"], a["v_max"],
                                          a["step"], a["low"], None if found is None else cp.asarray(found),
                                          cp.asarray([2e-3, 0.9, 0.95, 1e-8, 0.1]), decoupled=True)
                else:
                    for i in range(len(GROUP_TENSORS)):
                        if optimizer == "sgd":
                            fd.numpy_sgd(a["w"][i], grads[i], a["buf"][i], a["step"][i], keep, low=a["low"][i],
                                         **sgd_case)
                        else:
                            fd.numpy_adam(a["w"][i], grads[i], a["m"][i], a["v"][i], a["v_max"][i], a["step"][i],
                                          keep, low=a["low"][i], **adam_case)
            snapshots.append([x.get() if fused else x.copy() for name in ("w", "low", "buf", "m", "v", "v_max", "step")
                              for x in a[name] if x is not None])
        results.append(snapshots)
    for step, (got, want) in enumerate(zip(results[1], results[0])):
        fd.assert_same_bits(got, want, f"{optimizer} group step {step}")
    per_step = {"sgd": "tinyamp_advance_steps", "adam": "tinyamp_adam_prepare_group"}[optimizer]
    launched = {k: n - before.get(k, 0) for k, n in cuda_launch.launches.items() if n > before.get(k, 0)}
    triples = {(w, g, fd.F16 if lo is None else lo) for _, w, g, lo in GROUP_TENSORS}
    launched.pop("tinyamp_fill_pointers", None)  # new pointer tables (the first steps)
    assert launched.pop(per_step) == len(fd.KEEPS)
    assert sum(launched.values()) == len(triples) * len(fd.KEEPS) == 5 * 6, launched


# ------------------------------------------------------ linear's epilogues
SPECIALS = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 1e-8, -3.0, 2.5])


@pytest.mark.parametrize("dtype", [fd.F16, fd.BF16], ids=str)
def test_gemm_bias_rounds_the_accumulator_plus_bias_once(cp, dtype) -> None:
    """Linear's 16-bit forward on a GPU: the bits of the float32 accumulator, += the widened bias, one cast."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((33, 24)) * 60).astype(dtype)
    w = (rng.standard_normal((10, 24)) * 60).astype(dtype)
    bias = (rng.standard_normal(10) * 1e3).astype(dtype)
    with np.errstate(all="ignore"):
        x[0, :10] = SPECIALS.astype(dtype)  # inf, nan, overflow past float16's largest value
        acc = gemm(cp.asarray(x), cp.asarray(w), np.float32, trans_b=True).get()
        want = (acc + bias.astype(np.float32)).astype(dtype)
        got = gemm_bias(cp.asarray(x), cp.asarray(w), cp.asarray(bias), trans_b=True)
        fd.assert_same_bits([got.get()], [want], "gemm_bias")
        on_cpu = gemm_bias(x, w, bias, trans_b=True)  # the CPU path: the same bits
        fd.assert_same_bits([on_cpu], [want], "gemm_bias on the CPU")
    with pytest.raises(ValueError, match=r"gemm_bias: bias must be \(10,\) " + np.dtype(dtype).name):
        gemm_bias(cp.asarray(x), cp.asarray(w), cp.asarray(bias.astype(np.float32)), trans_b=True)
    with pytest.raises(ValueError, match=r"gemm_bias: needs 2-D operands"):
        gemm_bias(cp.asarray(x[None]), cp.asarray(w[None]), cp.asarray(bias), trans_b=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=str)
def test_gemm_bias_of_wide_operands_is_the_gemm_plus_the_bias(cp, dtype) -> None:
    """Linear's float32/float64 forward on both devices: the GEMM's result, the bias added to it."""
    rng = np.random.default_rng(5)
    x, w, bias = (rng.standard_normal(s).astype(dtype) for s in ((33, 24), (10, 24), (10,)))
    want = gemm(x, w, trans_b=True) + bias
    fd.assert_same_bits([gemm_bias(x, w, bias, trans_b=True)], [want], "gemm_bias on the CPU")
    got = gemm_bias(cp.asarray(x), cp.asarray(w), cp.asarray(bias), trans_b=True)
    fd.assert_same_bits([got.get()], [(gemm(cp.asarray(x), cp.asarray(w), trans_b=True) + cp.asarray(bias)).get()],
                        "gemm_bias on the GPU")


def test_gemm_bias_is_one_cublaslt_call_with_the_bias_epilogue(cp) -> None:
    """Linear's 16-bit forward on a GPU is one cuBLASLt GEMM (no bias kernel, no float32 output), views too."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((17, 24)).astype(np.float16)
    w = rng.standard_normal((10, 24)).astype(np.float16)
    bias = rng.standard_normal(11).astype(np.float16)
    want = gemm_bias(x[1:], w, bias[1:], trans_b=True)  # the CPU path
    dx, dw, db = cp.asarray(x), cp.asarray(w), cp.asarray(bias)
    for a, b in ((dx[1:], db[1:]), (dx[1:], db[1:]), (dx[:16], db[:10])):  # 48- and 2-byte aligned views
        cp.counters.reset()
        got = gemm_bias(a, dw, b, trans_b=True)
        assert cp.counters.kernels() == {"cublasLtMatmul": 1}
        fd.assert_same_bits([got.get()], [gemm_bias(a.get(), w, b.get(), trans_b=True)], "gemm_bias")
    fd.assert_same_bits([gemm_bias(dx[1:], dw, db[1:], trans_b=True).get()], [want], "gemm_bias")


def test_gemm_bias_without_a_cublaslt_algorithm_computes_the_same_bits(cp, monkeypatch) -> None:
    """Where cuBLASLt's heuristic offers no algorithm, a float32 GEMM, the bias and one cast give the same bits."""
    from tinyamp.kernels.cuda import cublaslt_direct
    rng = np.random.default_rng(4)
    x, w = (rng.standard_normal(s).astype(np.float16) for s in ((9, 16), (8, 16)))
    bias = rng.standard_normal(8).astype(np.float16)
    monkeypatch.setattr(cublaslt_direct, "_plans", {})
    monkeypatch.setattr(cublaslt_direct, "_plan", lambda *args: None)
    got = gemm_bias(cp.asarray(x), cp.asarray(w), cp.asarray(bias), trans_b=True)
    fd.assert_same_bits([got.get()], [gemm_bias(x, w, bias, trans_b=True)], "gemm_bias without cuBLASLt")


def test_the_standin_cublaslt_refuses_an_algorithm_on_a_less_aligned_pointer(cp) -> None:
    """An algorithm chosen for 256-byte aligned operands is not run on a 2-byte aligned view (a GPU could fault)."""
    from tinyamp.kernels.cuda import cublaslt_direct
    x, w, bias = cp.ones((9, 16), np.float16), cp.ones((8, 16), np.float16), cp.ones(8, np.float16)
    out = cp.empty((8, 8), np.float16)
    assert cublaslt_direct.matmul_bias(x[:8], w, bias, out, True)
    problem = next(key for key in cublaslt_direct._plans if key[1][:3] == (8, 8, 16))
    plan = cublaslt_direct._plans[problem]
    cublaslt_direct._plans[(problem[0], problem[1][:6] + ((256,) * 5,))] = plan
    row = x[1:]  # 32 bytes past the allocation's start
    lib = cublaslt_direct._library()
    desc, a_layout, b_layout, d_layout, algo = plan
    import ctypes
    with pytest.raises(Exception, match="matrix B at 0x[0-9a-f]+ is not 256-byte aligned"):
        lib.cublasLtMatmul(problem[0], desc, ctypes.byref(ctypes.c_float(1)), w.data.ptr, a_layout, row.data.ptr,
                           b_layout, ctypes.byref(ctypes.c_float(0)), out.data.ptr, d_layout, out.data.ptr, d_layout,
                           ctypes.byref(algo), 0, 0, cp.cuda.get_current_stream().ptr)


@pytest.mark.parametrize("dtypes", [(fd.F32, fd.F32), (fd.F16, fd.F16), (fd.BF16, fd.BF16), (fd.F32, fd.F16)],
                         ids=str)
def test_relu_backward_kernel_matches_cupys_multiply(cp, dtypes) -> None:
    rng = np.random.default_rng(1)
    gy = rng.standard_normal(40).astype(dtypes[0])
    y = rng.standard_normal(40).astype(dtypes[1])
    with np.errstate(all="ignore"):  # 65520 overflows float16: inf, one more special value
        gy[:10], y[10:20] = SPECIALS.astype(dtypes[0]), SPECIALS.astype(dtypes[1])
        want = np.multiply(gy, y > 0, dtype=gy.dtype)
        got = cuda_epilogue.relu_backward(cp.asarray(gy), cp.asarray(y))
        fd.assert_same_bits([got.get()], [want], "relu backward")


def test_group_kernels_give_the_same_bits_on_misaligned_views(cp) -> None:
    """A view one element into its allocation cannot be read four elements at a time: the scalar loop runs,
    with the vector loop's bits (unscale, SGD with momentum and a float16 copy, Adam)."""
    rng = np.random.default_rng(9)
    base = {name: rng.standard_normal(203).astype(np.float32) for name in ("w", "g", "buf", "m", "v")}
    base["v"] = np.abs(base["v"])

    def run(offset: int) -> list:
        a = {}
        for k, v in base.items():  # a fresh copy each run, ``offset`` elements into its allocation
            a[k] = cp.zeros(204, np.float32)[offset:offset + 203]
            a[k][...] = cp.asarray(v)
        low = cp.empty(204, np.float16)[offset:offset + 203]
        assert cuda_vector.aligned(a["w"]) == (offset == 0)
        found = cp.zeros(1, np.float32)
        snapshots = []
        cuda_scaler.unscale_group([a["g"]], [a["g"]], cp.asarray(np.float32([4.0])), found)
        snapshots += [a["g"].get()]
        step = cp.ones((), np.float32)
        cuda_optim.sgd_group([a["w"]], [a["g"]], [a["buf"]], [step], [low], found,
                             cp.asarray([0.03, 0.9, 0.1, 1e-4]), nesterov=True, maximize=False)
        snapshots += [x.get() for x in (a["w"], a["buf"], low)]
        cuda_optim.adam_group([a["w"]], [a["g"]], [a["m"]], [a["v"]], None, [step], [low], found,
                              cp.asarray([2e-3, 0.9, 0.95, 1e-8, 0.1]), decoupled=False)
        return snapshots + [x.get() for x in (*a.values(), low)]

    fd.assert_same_bits(run(1), run(0), "misaligned views")


@pytest.mark.parametrize("lane", [0, 1, 2, 3])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("pair", [(np.float32, np.float32), (np.float16, np.float32), ("bfloat16", "bfloat16")])
def test_the_unscale_kernels_four_wide_loop_finds_a_bad_value_in_every_lane(cp, lane: int, bad: float,
                                                                           pair: tuple) -> None:
    # The existing tests put the bad value in the scalar tail (issue 30's audit): here it sits in the four-wide
    # loop of an aligned 300-element gradient, in each of the four lanes, and nowhere else.
    g_dt, o_dt = (ta.bfloat16 if d == "bfloat16" else np.dtype(d) for d in pair)
    grad = np.ones(300, np.float32)
    grad[40 + lane] = bad
    grad = grad.astype(g_dt)
    d_grad = cp.asarray(grad)
    d_out = d_grad if g_dt == o_dt else cp.empty(300, o_dt)
    assert cuda_vector.aligned(d_grad) and 40 + lane < 4 * (300 // 4)
    found = cp.zeros((), np.float32)
    assert cuda_scaler.unscale_group([d_grad], [d_out], cp.asarray(np.float32(2.0)), found) == []
    assert float(found.get()) == 1.0
    out = d_out.get().astype(np.float32)
    assert np.isnan(out[40 + lane]) if np.isnan(bad) else out[40 + lane] == bad
    assert (np.delete(out, 40 + lane) == 0.5).all()
