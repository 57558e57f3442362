"""The fused CUDA kernels, checked on the CPU: sources, launch plumbing, NumPy references, memory API.

- importing tinyamp (and its CUDA kernel modules) never imports CuPy;
- every kernel's parameter list is well formed for CuPy (names, types, no
  write to a ``raw`` input, which CuPy declares ``const``), and every launch
  passes exactly its parameters with the right dtypes (checked by the CuPy
  stand-in's kernel classes, cupy_standin/kernels.py, without running
  anything);
- the NumPy references of the kernels agree with the scaler's and the
  optimizers' NumPy paths bit for bit;
- ``ta.cuda``'s memory statistics: 0 without CUDA, and the peak tracking on a
  stand-in pool.

tests/kernels/test_cuda_emulated.py runs the kernel sources themselves on the CPU.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import types

import numpy as np
import pytest

from tests.support import fused_drivers as fd
import tinyamp as ta
from tests.support import cuda_kernels_reference
from tinyamp import backend, cuda_memory
from cupy_standin import kernels as standin_kernels
from tinyamp.kernels import loss_scale
from tinyamp.kernels.cuda import cuda_epilogue, cuda_launch, cuda_optim, cuda_scaler
from tests.support import REPO
from tests.support.scaler_cases import HYPERS, UNSCALE_PAIRS, numpy_update_scale, scale_states

REPO = str(REPO)
SPECS = cuda_scaler.elementwise_specs() + cuda_epilogue.elementwise_specs()
# A float32 -> float32 kernel for the stand-in's argument checks.
ROUND_F16 = cuda_launch.KernelSpec("test_round_through_f16", "float32 x", "float32 y",
                                   "y = static_cast<float>(static_cast<float16>(x));")


def test_importing_tinyamp_never_imports_cupy(tmp_path) -> None:
    marker = tmp_path / "imported"
    fake = tmp_path / "cupy"
    fake.mkdir()
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise ImportError('stand-in')\n")
    code = ("import tinyamp, tinyamp.optim\n"
            "from tinyamp.kernels import loss_scale\nfrom tinyamp.kernels.cuda import cuda_launch, cuda_optim, cuda_scaler\n"
            "cuda_scaler.elementwise_specs(), cuda_optim.group_raw_sources(), cuda_scaler.raw_sources()\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=tmp_path)
    assert not marker.exists(), "importing tinyamp imported cupy"
    # The stand-in is importable: asking for CUDA does reach it (so the check above can fail).
    subprocess.run([sys.executable, "-c", "import tinyamp; assert not tinyamp.cuda.is_available()"],
                   check=True, env=env, cwd=tmp_path)
    assert marker.exists()


# ---------------------------------------------------------------- sources
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_elementwise_parameter_lists_are_valid_cupy(spec: cuda_launch.KernelSpec) -> None:
    ins, outs = standin_kernels.parse_params(spec.in_params), standin_kernels.parse_params(spec.out_params)
    names = [name for _, _, name in ins + outs]
    assert len(set(names)) == len(names)
    assert not any(n in ("i", "n") or n.startswith("_") for n in names), "CuPy reserves i, n and _names"
    for raw, t, name in ins + outs:
        assert len(t) == 1 or np.dtype(t).name == t, f"{name}: {t} is not a CuPy type name"
        assert re.search(rf"\b{name}\b", spec.body), f"{name} is never used"
    for raw, _, name in ins:
        # CuPy declares inputs const: an assignment would not compile.
        pattern = rf"\b{name}\s*\[[^\]]*\]\s*=(?!=)" if raw else rf"\b{name}\s*=(?!=)"
        assert not re.search(pattern, spec.body), f"{spec.name} writes its input {name}"
    assert spec.body.count("{") == spec.body.count("}")


def test_raw_kernel_signatures() -> None:
    sources = cuda_scaler.raw_sources()
    assert len({name for name, _ in sources}) == 9
    for name, source in sources:
        params = standin_kernels.parse_signature(source, name)
        assert [t for t, _ in params] == ["unsigned long long*", "int", "long long*", "float*", "float*"]
        assert source.count("{") == source.count("}")


@pytest.fixture
def checking_standin(monkeypatch):
    """The CUDA stand-in as backend, its kernels checking every call without running it (no compiler needed)."""
    monkeypatch.setattr(standin_kernels.ElementwiseKernel, "execute", False)
    monkeypatch.setattr(standin_kernels.RawKernel, "execute", False)
    with backend.use_cuda_standin():
        yield backend.cupy()


def test_every_launch_matches_its_parameter_list(checking_standin) -> None:
    """All kernel variants launched once through the checking stand-in (nothing runs)."""
    cp = checking_standin
    before = dict(cuda_launch.launches)
    for g_dt in (fd.F32, fd.F16, fd.BF16):
        for o_dt in (fd.F32, fd.F16, fd.BF16):
            rest = cuda_scaler.unscale_group([cp.ones(3, g_dt)], [cp.ones(3, o_dt)],
                                              cp.ones((), np.float32), cp.zeros((), np.float32))
            assert rest == []
    scalars = [cp.ones((), np.float32), cp.zeros((), np.int32), cp.ones((), np.int32), cp.zeros((), np.float32)]
    for max_scale in (None, 2.0 ** 24):
        cuda_scaler.update_scale(*scalars, growth_factor=2.0, backoff_factor=0.5, growth_interval=10,
                                  hysteresis=1, min_scale=None, max_scale=max_scale, floor=1e-38)
    w, low = cp.ones(4, np.float32), cp.ones(4, np.float16)
    hyper = cp.zeros(5, np.float64)
    for momentum in (False, True):
        for found in (None, cp.zeros(1, np.float32)):
            for lo in (None, low):
                state = [[w.copy()], [cp.zeros((), np.float32)]] if momentum else [None, None]
                cuda_optim.sgd_group([w], [w.astype(np.float16)], *state, [lo], found, hyper, nesterov=False,
                                     maximize=False)
    for amsgrad in (False, True):
        for lo in (None, low):
            cuda_optim.adam_group([w], [w], [w.copy()], [w.copy()], [w.copy()] if amsgrad else None,
                                  [cp.zeros((), np.float32)], [lo], None, hyper, decoupled=True)
    cuda_epilogue.relu_backward(cp.ones(3, np.float16), cp.ones(3, np.float16))
    expected = ({s.name for s in SPECS} | {name for name, _ in cuda_scaler.raw_sources()}
                | {"tinyamp_sgd_group_f32_f16_f16", "tinyamp_advance_steps", "tinyamp_fill_pointers",
                   "tinyamp_adam_group_f32_f32_f16", "tinyamp_adam_prepare_group"})
    assert {k for k, n in cuda_launch.launches.items() if n > before.get(k, 0)} == expected


@pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")
def test_pointer_tables_are_written_once_while_the_pointers_repeat(monkeypatch) -> None:
    monkeypatch.setattr(cuda_launch, "SITE_TABLES_KEPT", 2)
    with backend.use_cuda_standin():
        cp = backend.cupy()
        counters = ta.cuda.standin_counters()
        grads = [cp.ones(5, np.float32) for _ in range(4)]
        scale, found = cp.ones((), np.float32), cp.zeros((), np.float32)
        cuda_scaler.unscale_group(grads[:2], grads[:2], scale, found)
        ((site, tables),) = cuda_launch._site_tables.items()
        (first,) = tables.values()
        counters.reset()
        cuda_scaler.unscale_group(grads[:2], grads[:2], scale, found)
        assert list(tables.values()) == [first]  # found again, not written again
        assert counters.total("allocations") == 0 and "tinyamp_fill_pointers" not in counters.kernels()
        assert first.get().tolist() == [g.data.ptr for g in grads[:2]] * 2
        cuda_scaler.unscale_group(grads[1:3], grads[1:3], scale, found)
        # A new set of pointers: written by a kernel taking them as arguments, never copied from the host.
        assert counters.kernels()["tinyamp_fill_pointers"] == 1 and counters.total("h2d") == 0
        assert counters.total("allocations") == 1 and len(tables) == 2
        counters.reset()
        cuda_scaler.unscale_group(grads[2:], grads[2:], scale, found)
        # The site keeps two tables: the least recently used one (the first) is rewritten in place.
        assert counters.total("allocations") == 0 and counters.kernels()["tinyamp_fill_pointers"] == 1
        assert len(tables) == 2 and any(t is first for t in tables.values())
        assert first.get().tolist() == [g.data.ptr for g in grads[2:]] * 2
        # (thread, device, site): each thread keeps its own tables
        assert site == (threading.get_ident(), 0, ("unscale", np.dtype(np.float32), np.dtype(np.float32), 2))


def test_the_stand_in_rejects_what_cupy_rejects(checking_standin) -> None:
    cp = checking_standin
    spec = ROUND_F16
    kernel = cp.ElementwiseKernel(spec.in_params, spec.out_params, spec.body, spec.name)
    with pytest.raises(TypeError, match="mismatched"):
        kernel(cp.zeros(1, np.float64), cp.zeros(1, np.float64))  # float64 for a float32 parameter
    with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
        kernel(np.zeros(1, np.float32), cp.zeros(1, np.float32))  # a host array is not a device pointer
    spec = cuda_scaler.UPDATE_SCALE
    kernel = cp.ElementwiseKernel(spec.in_params, spec.out_params, spec.body, spec.name)
    with pytest.raises(ValueError, match="undecided"):  # every array is raw: size= is needed
        kernel(cp.zeros(1, np.float32), 2.0, 0.5, 10, 1, np.float32(1.0), False, 0.0, cp.ones(1, np.float32),
               cp.zeros(1, np.int32), cp.zeros(1, np.int32), cp.zeros(2, np.float32))
    name, source = cuda_scaler.unscale_source(fd.F32, fd.F32)
    raw = cp.RawKernel(source, name)
    with pytest.raises(TypeError, match="numpy.int32"):  # CuPy would pass a Python int as long long
        raw((1,), (1,), (cp.zeros(2, np.uint64), 1, cp.zeros((1, 3), np.int64), cp.ones((), np.float32),
                         cp.zeros((), np.float32)))


# ------------------------------------------------------------- references
def unscale_inputs(g_dt: np.dtype, o_dt: np.dtype, bad: float | None, sizes=(1, 37, 300, 5)) -> tuple:
    rng = np.random.default_rng(1)
    grads = [(rng.standard_normal(n) * 2.0 ** rng.integers(-30, 14, n)).astype(g_dt) for n in sizes]
    if bad is not None:
        grads[2][17] = bad
    outs = [g if o_dt == g_dt else np.empty(g.shape, o_dt) for g in grads]
    return grads, outs


@pytest.mark.parametrize("pair", UNSCALE_PAIRS, ids=lambda p: f"{p[0]}->{p[1]}")
@pytest.mark.parametrize("bad", [None, np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("scale", [2.0 ** 16, 3.0, 2.0 ** -120])  # 1/scale exact, rounded; results overflow
def test_unscale_reference_matches_the_numpy_path(pair, bad, scale) -> None:
    results = []
    for run in (lambda *a: loss_scale.unscale_group(np, *a), cuda_kernels_reference.unscale_reference):
        grads, outs = unscale_inputs(*pair, bad)
        found = np.zeros((), np.float32)
        with np.errstate(all="ignore"):
            run(grads, outs, np.full((), scale, np.float32), found)
        results.append(outs + [found])
    fd.assert_same_bits(results[0], results[1], "unscale")
    assert (results[0][-1] == 1.0) == (bad is not None or scale < 1e-30)


@pytest.mark.parametrize("hyper", HYPERS)
def test_update_scale_reference_matches_the_numpy_path(hyper) -> None:
    for state in scale_states(hyper):
        want = [a.copy() for a in state]
        numpy_update_scale(*want, **hyper)
        got = [a.copy() for a in state]
        cuda_kernels_reference.update_scale_reference(*got, **hyper, floor=loss_scale.DEFAULT_MIN_SCALE)
        fd.assert_same_bits(got, want, f"update_scale {[a.item() for a in state]}")


@pytest.mark.parametrize("dtypes", fd.DTYPE_CASES, ids=lambda d: "-".join(str(x) for x in d))
@pytest.mark.parametrize("case", fd.SGD_CASES, ids=fd.case_id)
def test_sgd_reference_matches_the_numpy_path(case, dtypes) -> None:
    want = fd.sgd_run(fd.numpy_sgd, case, dtypes)
    got = fd.sgd_run(cuda_kernels_reference.sgd_reference, case, dtypes)
    for step, (a, b) in enumerate(zip(got, want)):
        fd.assert_same_bits(a, b, f"sgd step {step}")


@pytest.mark.parametrize("dtypes", fd.DTYPE_CASES, ids=lambda d: "-".join(str(x) for x in d))
@pytest.mark.parametrize("case", fd.ADAM_CASES, ids=fd.case_id)
def test_adam_reference_matches_the_numpy_path(case, dtypes) -> None:
    want = fd.adam_run(fd.numpy_adam, case, dtypes)
    got = fd.adam_run(cuda_kernels_reference.adam_reference, case, dtypes)
    for step, (a, b) in enumerate(zip(got, want)):
        fd.assert_same_bits(a, b, f"adam step {step}")


def test_chunk_table_covers_every_element_once() -> None:
    sizes = [1, 8, 9, 0, 100]
    table = cuda_launch.chunk_table(sizes, 8)
    seen = [np.zeros(n, int) for n in sizes]
    for t, start, end in table:
        assert 0 < end - start <= 8
        seen[t][start:end] += 1
    assert all((s == 1).all() for s in seen)
    assert table.dtype == np.int64 and cuda_launch.chunk_table([], 8).shape == (0, 3)


# ------------------------------------------------------------------ memory
@pytest.mark.skipif(ta.cuda.is_available(), reason="what the API reports without CUDA")
def test_memory_statistics_are_zero_without_cuda() -> None:
    assert ta.cuda.memory_allocated() == 0
    assert ta.cuda.max_memory_allocated() == 0
    assert ta.cuda.memory_reserved() == 0
    ta.cuda.reset_peak_memory_stats()
    assert ta.cuda.max_memory_allocated("cuda:0") == 0


class FakePool:
    """A CuPy-like pool on two devices: malloc returns a handle, free gives its bytes back."""

    def __init__(self, runtime: types.SimpleNamespace) -> None:
        self.runtime, self.used, self.cached = runtime, {0: 0, 1: 0}, {0: 0, 1: 0}

    def malloc(self, nbytes: int) -> types.SimpleNamespace:
        dev = self.runtime.current
        self.used[dev] += nbytes
        self.cached[dev] = max(self.cached[dev] - nbytes, 0)
        return types.SimpleNamespace(device_id=dev, size=nbytes)  # as a MemoryPointer: its device, its size

    def free(self, handle: types.SimpleNamespace) -> None:
        self.used[handle.device_id] -= handle.size
        self.cached[handle.device_id] += handle.size

    def used_bytes(self) -> int:
        return self.used[self.runtime.current]

    def total_bytes(self) -> int:
        return self.used[self.runtime.current] + self.cached[self.runtime.current]


def fake_cuda_module(version: str = "14.2.0") -> types.SimpleNamespace:
    runtime = types.SimpleNamespace(current=0)
    runtime.getDevice = lambda: runtime.current
    runtime.getDeviceCount = lambda: 2
    pool = FakePool(runtime)

    class Device:
        def __init__(self, index: int) -> None:
            self.index = index

        def __enter__(self) -> None:
            self.previous, runtime.current = runtime.current, self.index

        def __exit__(self, *exc) -> None:
            runtime.current = self.previous

    allocator = types.SimpleNamespace(current=pool.malloc)
    cuda = types.SimpleNamespace(runtime=runtime, Device=Device,
                                 memory=types.SimpleNamespace(get_allocator=lambda: allocator.current),
                                 set_allocator=lambda f: setattr(allocator, "current", f))
    return types.SimpleNamespace(cuda=cuda, get_default_memory_pool=lambda: pool, pool=pool,
                                 alloc=lambda n: allocator.current(n), __version__=version)


@pytest.fixture
def fake_cuda(monkeypatch) -> types.SimpleNamespace:
    cp = fake_cuda_module()
    monkeypatch.setattr(cuda_memory, "tracker", None)
    monkeypatch.setattr(backend, "_load_cupy", lambda: cp)
    return cp


def test_peak_tracking_through_the_wrapped_allocator(fake_cuda, monkeypatch) -> None:
    monkeypatch.delenv("TINYAMP_CUDA_MEMORY_STATS", raising=False)
    cuda_memory.install_tracker(fake_cuda)
    cuda, pool = ta.cuda, fake_cuda.pool
    a, b = fake_cuda.alloc(1000), fake_cuda.alloc(3000)
    pool.free(b)
    c = fake_cuda.alloc(500)
    assert cuda.memory_allocated() == 1500
    assert cuda.max_memory_allocated() == 4000  # a and b were live together
    assert cuda.memory_reserved() == 1500 + 2500
    cuda.reset_peak_memory_stats()
    assert cuda.max_memory_allocated() == 1500
    with fake_cuda.cuda.Device(1):
        d = fake_cuda.alloc(700)
    pool.free(d)
    assert cuda.max_memory_allocated(1) == 700 and cuda.memory_allocated("cuda:1") == 0
    assert cuda.max_memory_allocated(0) == 1500  # device 1's allocation is not device 0's peak
    pool.free(a), pool.free(c)


def test_tracking_is_opt_in_where_used_bytes_walks_the_pool(fake_cuda, monkeypatch) -> None:
    """CuPy < 14.1 sums every live chunk in used_bytes(): a per-allocation read would cost O(live arrays)."""
    monkeypatch.delenv("TINYAMP_CUDA_MEMORY_STATS", raising=False)
    for version, tracked in (("13.6.0", False), ("14.0.1", False), ("14.1.0", True), ("15.0.0a1", True)):
        monkeypatch.setattr(cuda_memory, "tracker", None)
        fake_cuda.__version__ = version
        fake_cuda.cuda.set_allocator(fake_cuda.pool.malloc)
        cuda_memory.install_tracker(fake_cuda)
        assert (cuda_memory.tracker is not None) == tracked, version
    monkeypatch.setattr(cuda_memory, "tracker", None)
    monkeypatch.setenv("TINYAMP_CUDA_MEMORY_STATS", "1")  # the opt-in
    fake_cuda.__version__ = "13.6.0"
    fake_cuda.cuda.set_allocator(fake_cuda.pool.malloc)
    cuda_memory.install_tracker(fake_cuda)
    assert cuda_memory.tracker is not None


def test_no_tracking_with_a_foreign_allocator_or_when_disabled(fake_cuda, monkeypatch) -> None:
    monkeypatch.setenv("TINYAMP_CUDA_MEMORY_STATS", "0")
    cuda_memory.install_tracker(fake_cuda)
    assert cuda_memory.tracker is None
    monkeypatch.delenv("TINYAMP_CUDA_MEMORY_STATS")
    fake_cuda.cuda.set_allocator(lambda n: None)  # e.g. RMM's allocator: no pool to read
    cuda_memory.install_tracker(fake_cuda)
    assert cuda_memory.tracker is None
    handle = fake_cuda.pool.malloc(2048)
    assert ta.cuda.memory_allocated() == 2048 and ta.cuda.max_memory_allocated() == 2048
    fake_cuda.pool.free(handle)


# --------------------------------------------------------------- benchmark
def test_gpu_benchmark_script_runs_on_the_cpu(tmp_path, monkeypatch) -> None:
    """benchmarks/bench_gpu.py --dry-run: the same code as on a GPU, tiny sizes (nothing timed is checked)."""
    import importlib  # noqa: PLC0415
    import json  # noqa: PLC0415
    monkeypatch.setenv("CUPY_TF32", "1")  # the script must turn TF32 off (restored afterwards)
    monkeypatch.syspath_prepend(os.path.join(REPO, "benchmarks"))
    import bench_gpu  # noqa: PLC0415
    bench_gpu = importlib.reload(bench_gpu)  # run its module code under this environment

    assert os.environ["CUPY_TF32"] == "0"
    path = tmp_path / "bench.json"
    bench_gpu.main(["--dry-run", "--no-torch", "--json", str(path)])
    result = json.loads(path.read_text())
    assert result["environment"]["tf32"]["CUPY_TF32"] == "0"
    assert {(r["framework"], r["mode"]) for r in result["mlp"]} == {("tinyamp", "float32"), ("tinyamp", "amp")}
    amp = next(r for r in result["mlp"] if r["mode"] == "amp")
    assert amp["host_syncs_per_step"] == 0  # counted on the CPU too
    assert {t["target"] for t in result["targets"]} == set(bench_gpu.TARGETS)


def test_gpu_benchmark_script_runs_on_the_standin_with_the_cuda_graph_row(tmp_path, monkeypatch) -> None:
    """benchmarks/bench_gpu.py --standin: the GPU code paths, the captured AMP step (issue 11) included."""
    import importlib  # noqa: PLC0415
    import json  # noqa: PLC0415
    monkeypatch.setenv("CUPY_TF32", "1")
    monkeypatch.syspath_prepend(os.path.join(REPO, "benchmarks"))
    import bench_gpu  # noqa: PLC0415
    bench_gpu = importlib.reload(bench_gpu)  # run its module code under this environment

    path = tmp_path / "bench.json"
    bench_gpu.main(["--standin", "--no-torch", "--json", str(path)])
    assert not backend.standin_active() or os.environ.get("TINYAMP_CUDA") == "standin"  # the backend came back
    result = json.loads(path.read_text())
    assert result["standin"] and result["environment"]["gpu"] == "tinyamp CUDA stand-in (NumPy)"
    assert {(r["framework"], r["mode"]) for r in result["mlp"]} == {
        ("tinyamp", "float32"), ("tinyamp", "amp"), ("tinyamp", "amp-graph")}
    graph = next(r for r in result["mlp"] if r["mode"] == "amp-graph")
    assert graph["host_syncs_per_step"] == 0
    assert {t["target"] for t in result["targets"]} == set(bench_gpu.TARGETS)
    speedup = next(t for t in result["targets"] if t["target"] == "graph_amp_vs_float32_speedup")
    assert speedup["goal"] == ">= 2.5" and speedup["value"] > 0
    # Issue 20: every kernel of the AMP step timed with its bytes, and the GPU time per step (no CUPTI here).
    assert set(bench_gpu.ELEMENTWISE) <= {r["kernel"] for r in result["kernels"]}
    assert "tinyamp_convert_f16_f32_by8 (before)" in {r["kernel"] for r in result["kernels"]}  # the layout replaced
    assert all(r["bytes"] > 0 and r["tb_per_s"] > 0 for r in result["kernels"])
    assert {(r["framework"], r["mode"]) for r in result["gpu_time"]} == {("tinyamp", "amp"), ("tinyamp", "amp-graph")}


# ------------------------------------------------- range checks on a GPU
def test_gpu_range_behaviour_of_losses_on_numpy(monkeypatch) -> None:
    """The GPU branch (no host check, nan instead), run on NumPy by making the ops see 'device' arrays."""
    import importlib  # noqa: PLC0415 - the modules, not the functions tinyamp.ops exports under their names
    embedding_module = importlib.import_module("tinyamp.kernels.embedding")  # where the device branch lives
    loss_module = importlib.import_module("tinyamp.ops.loss")

    fake = types.SimpleNamespace(is_cupy_array=lambda a: True, array_module=lambda a: np,
                                 cuda_lib=lambda name: types.SimpleNamespace(scatter_add=np.add.at))
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((4, 5))
    good, bad = np.array([1, 4, 0, 2]), np.array([1, 5, 0, -2])
    runs = {}
    for name, patched in (("cpu", False), ("gpu", True)):
        if patched:
            monkeypatch.setattr(loss_module, "backend", fake)
            monkeypatch.setattr(embedding_module, "backend", fake)
        x = ta.tensor(logits, requires_grad=True)
        loss = ta.cross_entropy(x, ta.tensor(good))
        loss.backward()
        runs[name] = (loss.item(), x.grad.numpy())
    fd.assert_same_bits(list(runs["gpu"]), list(runs["cpu"]), "in-range targets")  # unchanged
    for reduction in ("mean", "sum", "none"):
        x = ta.tensor(logits, requires_grad=True)
        loss = ta.cross_entropy(x, ta.tensor(bad), reduction=reduction)
        loss.sum().backward()
        values, grad = loss.detach().numpy(), x.grad.numpy()
        if reduction == "none":
            assert np.isnan(values[[1, 3]]).all() and np.isfinite(values[[0, 2]]).all()
            assert np.isnan(grad[[1, 3]]).all() and np.isfinite(grad[[0, 2]]).all()
        else:
            assert np.isnan(values) and np.isnan(grad).any()
    assert np.isnan(ta.nll_loss(ta.tensor(logits), ta.tensor(bad)).item())
    # The embedding's GPU branch runs on the stand-in (tests/ops/test_ops_errors_nn.py): its check is a kernels/ call.


# ----------------------------------------------------- multi-tensor kernels
def test_group_kernel_sources_are_well_formed() -> None:
    sources = cuda_optim.group_raw_sources()
    assert len({name for name, _ in sources}) == len(sources) == 27 + 27 + 2
    for name, source in sources:
        params = standin_kernels.parse_signature(source, name)
        assert params[0] == ("unsigned long long*", "ptrs" if "group" in name and "prepare" not in name else "steps")
        assert source.count("{") == source.count("}")
        # The hyper-parameters come from a device array, never from host scalars a captured graph would freeze.
        assert not any(t in ("float", "double") for t, _ in params), params


def test_device_values_upload_only_when_they_change(checking_standin) -> None:
    counters = ta.cuda.standin_counters()
    mirror, dev = cuda_launch.DeviceValues(), checking_standin.cuda.Device(0)
    first = mirror.get(dev, (0.1, 0.9))
    counters.reset()
    assert mirror.get(dev, (0.1, 0.9)) is first and counters.total("h2d") == 0  # a steady step copies nothing
    again = mirror.get(dev, (0.05, 0.9))  # a scheduler moved the learning rate: same array, new contents
    assert again is first and counters.total("h2d") == 1 and first.get().tolist() == [0.05, 0.9]
    assert first.dtype == np.float64
