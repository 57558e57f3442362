"""The fused CUDA kernel sources, run on the CUDA stand-in (g++), against the NumPy paths bit for bit.

Each kernel's source is compiled with g++ by ``tinyamp/cuda_standin/kernels.py``
and driven through the same launch code tinyamp uses on a GPU (pointer and
chunk tables, keep flags, kernel variants) on stand-in device arrays, then held
against the scaler's and the optimizers' NumPy paths, down to whole training
steps with GradScaler (O1 and O2, skipped steps included). The optimizer kernels
one by one are checked by tests/test_gpu_suite.py, which runs on the stand-in
too. What stays for a GPU run: NVRTC, CuPy's code generation, the PTX float16
conversions themselves and CUDA's pow.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fused_drivers as fd
import tinyamp as ta
from tinyamp import backend
from tinyamp.kernels import cuda_launch, cuda_scaler, loss_scale
from tinyamp.cuda_standin import kernels as standin_kernels

pytestmark = pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")

from test_cuda_kernels import HYPERS, UNSCALE_PAIRS, numpy_update_scale, scale_states  # noqa: E402


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
        for inv in (2.0 ** -16, 1 / 3):
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
                inv_scale = np.full((), inv, np.float32)
                if fused:  # the scaler's function on device arrays: the fused kernel, float64 in its loop
                    dev = {id(a): cp.asarray(a) for a in grads + outs}
                    d_outs = [dev[id(o)] for o in outs]
                    d_found = cp.asarray(found)
                    loss_scale.unscale_group(cp, [dev[id(g)] for g in grads], d_outs, cp.asarray(inv_scale),
                                                 d_found)
                    results.append([o.get() for o in d_outs] + [d_found.get()])
                else:
                    with np.errstate(all="ignore"):
                        loss_scale.unscale_group(np, grads, outs, inv_scale, found)
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
        want = [a.copy() for a in state]
        numpy_update_scale(*want, **hyper)
        got = [cp.asarray(a) for a in state]
        cuda_scaler.update_scale(*got, **hyper, floor=loss_scale.DEFAULT_MIN_SCALE)
        fd.assert_same_bits([a.get() for a in got], want, f"update_scale {[a.item() for a in state]}")


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
            model[0].weight.grad.data[0, 0] = np.inf
        before = [host(p.data) for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        params = [host(p.data) for p in model.parameters()]
        if step == 3:
            fd.assert_same_bits(params, before, "a skipped step changed a parameter")
        state = [host(t.data) for p in model.parameters() for _, t in sorted(opt.state.get(p, {}).items())
                 if isinstance(t, ta.Tensor)]
        snapshots.append(params + state + [host(scaler._scale), host(scaler._growth_tracker)])
    return snapshots


@pytest.mark.parametrize("o2", [False, True], ids=["O1", "O2"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_training_steps_with_fused_kernels_match_the_numpy_path(name, o2) -> None:
    want = train(OPTIMIZERS[name], o2, "cpu")
    with backend.use_cuda_standin():
        before = dict(cuda_launch.launches)
        got = train(OPTIMIZERS[name], o2, "cuda")
    for step, (a, b) in enumerate(zip(got, want)):
        fd.assert_same_bits(a, b, f"{name} step {step}")
    kernels = {k for k, n in cuda_launch.launches.items() if n > before.get(k, 0)}
    assert {"tinyamp_update_scale", "tinyamp_unscale_f32_f32" if not o2 else "tinyamp_unscale_f16_f32"} <= kernels
    family = "tinyamp_sgd_momentum" if name.startswith("sgd") else "tinyamp_adam" + ("_amsgrad" * ("ams" in name))
    assert family + ("_low" if o2 else "") in kernels
