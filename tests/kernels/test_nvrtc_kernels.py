"""Every CUDA source tinyamp builds while training compiles with the real NVRTC and CuPy's headers.

The CUDA stand-in compiles kernel sources with g++, which is not CUDA's
compiler and does not see CuPy's code generation (an H200 found a kernel
g++ accepted and NVRTC refused). This test trains small models on the
stand-in (every optimizer, float16 and bfloat16, O1 and O2, a graphed step,
the cross-entropy variants, a one-output regression head) with the stand-in's kernel classes hooked to
record every kernel they are asked to run, then compiles each with NVRTC
for compute_80 and compute_90, as CuPy would:

- a ``RawKernel`` source as written (CuPy prepends no header);
- an ``ElementwiseKernel`` as CuPy's own code generator writes it
  (``cupy._core._kernel._get_elementwise_kernel_code``: a typedef per type
  placeholder, ``const T &x`` inputs, ``T &x`` outputs, ``CArray`` raw
  arrays, ``cupy/float16.cuh``/``bfloat16.cuh`` only for a parameter of
  that type), after CuPy's headers (``cupy._core.core._cupy_header_list``)
  and with CuPy's compiler options (``assemble_cupy_compiler_options``).

NVRTC runs on the CPU: no GPU or driver is needed, only the ``test`` extra's
``cupy-cuda13x``, ``nvidia-cuda-nvrtc`` and ``nvidia-cuda-runtime`` (CUDA's
headers). Without them the test fails and says so.
"""

from __future__ import annotations

import collections
import importlib
import os
import tomllib
from typing import Any, Iterator

import numpy as np
import pytest

import tinyamp as ta
import tinyamp.nn.functional as F
import cupy_standin as cuda_standin
from tinyamp import backend
from tests.support.fp8_training import fp8_step
from tinyamp.amp import recipe as fp8_recipes
from tinyamp.kernels import fp8
from tinyamp.kernels.cuda import (cuda_attention, cuda_embedding, cuda_fp8, cuda_gelu, cuda_launch, cuda_layer_norm,
                                  cuda_random, cuda_softmax)
from tests.support import REPO

import common  # the benchmarks' GPT step (benchmarks/ is on pytest's pythonpath)

ARCHS = ("compute_80", "compute_90")
PACKAGES = "cupy-cuda13x, nvidia-cuda-nvrtc and nvidia-cuda-runtime (`pip install -e .[test]`)"
OPTIMIZERS = {
    "SGD": dict(lr=0.05, momentum=0.9), "Adam": dict(lr=1e-3), "AdamW": dict(lr=1e-3, amsgrad=True),
    "NAdam": dict(lr=1e-3), "RAdam": dict(lr=1e-3), "RMSprop": dict(lr=1e-3, momentum=0.5),
    "Adagrad": dict(lr=1e-2), "Adadelta": dict(lr=1.0),
}


def _cupy_codegen() -> tuple:
    """CuPy's NVRTC binding and code generator, or a failure naming the packages to install."""
    try:
        nvrtc = importlib.import_module("cupy_backends.cuda.libs.nvrtc")
        cupy = importlib.import_module("cupy")
        kernel = importlib.import_module("cupy._core._kernel")
        core = importlib.import_module("cupy._core.core")
        carray = importlib.import_module("cupy._core._carray")
        scalar = importlib.import_module("cupy._core._scalar")
        options = core.assemble_cupy_compiler_options(())
    except (ImportError, RuntimeError) as exc:
        pytest.fail(f"compiling tinyamp's CUDA sources needs {PACKAGES}: {type(exc).__name__}: {exc}")
    return nvrtc, cupy, kernel, core, carray, scalar, options


# ------------------------------------------------------------------ recording
Built = collections.namedtuple("Built", "kind name code params operation preamble options args")


def _recording(monkeypatch: pytest.MonkeyPatch) -> list:
    """Hook the stand-in's kernel classes: every launch records its kernel and argument layout."""
    built: list = []
    elementwise_call = cuda_standin.kernels.ElementwiseKernel.__call__
    raw_call = cuda_standin.kernels.RawKernel.__call__

    def elementwise(self: Any, *args: Any, **kwargs: Any) -> Any:
        params = tuple(", ".join(f"{'raw ' if raw else ''}{t} {name}" for raw, t, name in group)
                       for group in (self.ins, self.outs))
        layout = tuple((a.dtype, a.ndim, bool(a.flags.c_contiguous)) if type(a) is cuda_standin.ndarray else None
                       for a in args)
        built.append(Built("ElementwiseKernel", self.name, None, params, self.operation, self.preamble,
                           self.options, (layout, kwargs.get("size", -1) != -1)))
        return elementwise_call(self, *args, **kwargs)

    def raw(self: Any, grid: Any, block: Any, args: Any, *rest: Any, **kwargs: Any) -> Any:
        built.append(Built("RawKernel", self.name, self.code, None, None, None, self.options, None))
        return raw_call(self, grid, block, args, *rest, **kwargs)

    monkeypatch.setattr(cuda_standin.kernels.ElementwiseKernel, "__call__", elementwise)
    monkeypatch.setattr(cuda_standin.kernels.RawKernel, "__call__", raw)
    return built


def _mlp(dtype: Any = None) -> Any:
    model = ta.nn.Sequential(ta.nn.Linear(12, 16), ta.nn.ReLU(), ta.nn.Linear(16, 5)).to("cuda")
    return model if dtype is None else model.to(dtype)


def _batch(step: int) -> tuple:
    x = np.random.default_rng(step).standard_normal((8, 12)).astype(np.float32)
    if step == 1:
        x[0, 0] = 1e6  # inf in float16: the scaler skips this step (the masked kernels run)
    y = np.arange(8, dtype=np.int64) % 5
    return ta.tensor(x, device="cuda"), ta.tensor(y, device="cuda")


def _train(optimizer: str, dtype: Any, level: str, graphed: bool = False) -> None:
    """A few AMP steps of a small MLP: O1 (autocast, float32 weights) or O2 (16-bit weights, masters)."""
    ta.manual_seed(0)
    o2 = level == "O2"
    model = _mlp(dtype if o2 else None)
    opt = getattr(ta.optim, optimizer)(model.parameters(), master_weights=o2, **OPTIMIZERS[optimizer])
    scaler = ta.amp.GradScaler(init_scale=2.0 ** 10, growth_interval=1, auto_disable_bf16=False)  # all kernels

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        if o2:
            loss = F.cross_entropy(model(x.to(dtype)).float(), y)
        else:
            with ta.autocast("cuda", dtype=dtype):
                loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        ta.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        return loss

    batches = [_batch(k) for k in range(3)]
    run = ta.cuda.make_graphed_step(step, batches[0], num_warmup_iters=1) if graphed else step
    for x, y in batches:
        run(x, y)


def _one_output_regression(dtype: Any) -> None:
    """A linear layer with one output feature under autocast: its bias gradient is rounded through ``dtype``
    by the round-through kernel."""
    ta.manual_seed(0)
    model = ta.nn.Sequential(ta.nn.Linear(12, 16), ta.nn.ReLU(), ta.nn.Linear(16, 1)).to("cuda")
    opt = ta.optim.SGD(model.parameters(), lr=0.01)
    for step in range(2):
        x, _ = _batch(step + 2)
        opt.zero_grad()
        with ta.autocast("cuda", dtype=dtype):
            loss = F.mse_loss(model(x).float(), ta.zeros(8, 1, device="cuda"))
        loss.backward()
        opt.step()


def _cross_entropy_variants() -> None:
    for dtype in (ta.float16, ta.bfloat16, ta.float32):
        for kwargs in (dict(), dict(reduction="sum"), dict(reduction="none"), dict(label_smoothing=0.1),
                       dict(ignore_index=2), dict(weight=ta.ones(5, device="cuda", dtype=dtype))):
            logits = ta.randn(8, 5, device="cuda").to(dtype).requires_grad_()
            target = ta.tensor(np.arange(8, dtype=np.int64) % 5, device="cuda")
            F.cross_entropy(logits, target, **kwargs).sum().backward()
            with ta.autocast("cuda", dtype=ta.float16 if dtype == ta.float32 else dtype):
                F.cross_entropy(logits, target, **kwargs).sum().backward()


def _random_draws() -> None:
    """The Philox kernels: eager draws of each kind and dtype, and dropout captured in a graph and replayed."""
    for dtype in (ta.float32, ta.float64):
        ta.rand(5, device="cuda", dtype=dtype)
        ta.randn(5, device="cuda", dtype=dtype)
    x = ta.ones(8, device="cuda")
    g = ta.cuda.CUDAGraph()
    with ta.cuda.graph(g):
        F.dropout(x, 0.5)
        ta.randn(3, device="cuda", dtype=ta.float64)
    g.replay()


def _gpt_step(dtype: Any) -> None:
    """Two AMP steps of a one-block GPT (benchmarks/common.gpt_training): GELU, LayerNorm, attention and
    embedding kernels as training builds them."""
    g = common.gpt_training(ta, blocks=1, channels=32, heads=2, seq=8, batch=2, vocab=16, device="cuda", dtype=dtype)
    for _ in range(2):
        g.step(g.idx, g.targets)


def _fp8_training(recipe: Any) -> None:
    """Two steps of an MLP whose Linear GEMMs run in fp8 (bfloat16 autocast around): the cast kernels."""
    ta.manual_seed(0)
    model = ta.nn.Sequential(ta.nn.Linear(64, 32), ta.nn.ReLU(), ta.nn.Linear(32, 10)).to("cuda")
    opt = ta.optim.SGD(model.parameters(), lr=0.05)
    x = ta.randn(16, 64, device="cuda")
    y = ta.tensor(np.arange(16, dtype=np.int64) % 10, device="cuda")
    for _ in range(2):
        fp8_step(model, opt, recipe, x, y)


def _workloads() -> Iterator[tuple]:
    """(name, function) of every training run the kernels are collected from."""
    for optimizer in OPTIMIZERS:
        for dtype in (ta.float16, ta.bfloat16):
            for level in ("O1", "O2"):
                yield f"{optimizer} {dtype} {level}", lambda o=optimizer, d=dtype, lv=level: _train(o, d, lv)
    for optimizer in ("SGD", "Adam"):
        for level in ("O1", "O2"):
            yield f"{optimizer} float16 {level} graphed", \
                lambda o=optimizer, lv=level: _train(o, ta.float16, lv, graphed=True)
    for dtype in (ta.float16, ta.bfloat16):
        yield f"one-output regression {dtype}", lambda d=dtype: _one_output_regression(d)
    for dtype in (ta.float16, ta.bfloat16):
        yield f"GPT step {dtype}", lambda d=dtype: _gpt_step(d)
    yield "cross-entropy variants", _cross_entropy_variants
    yield "random draws", _random_draws
    yield "fp8 delayed scaling", lambda: _fp8_training(fp8_recipes.DelayedScaling(amax_history_len=4))
    yield "fp8 MXFP8", lambda: _fp8_training(fp8_recipes.MXFP8BlockScaling())
    yield "fp8 current scaling", lambda: _fp8_training(fp8_recipes.Float8CurrentScaling())
    yield "fp8 block scaling", lambda: _fp8_training(fp8_recipes.Float8BlockScaling(block=16))


Collected = collections.namedtuple("Collected", "built errors")


@pytest.fixture(scope="module")
def collected() -> Iterator[Collected]:
    """Every kernel launched while training on the stand-in (a record per launch), and each run's error.

    A run that raises is recorded and the others go on, so the kernels built
    before and after it are still compiled.
    """
    errors = {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        built = _recording(monkeypatch)
        with backend.use_cuda_standin():
            for name, run in _workloads():
                try:
                    run()
                except Exception as exc:  # noqa: BLE001 - reported by test_every_training_run_completes
                    errors[name] = f"{type(exc).__name__}: {exc}"
        yield Collected(built, errors)


# ------------------------------------------------------------------ CuPy's code and NVRTC
def cupy_source(built: Built, codegen: tuple) -> tuple[str, tuple]:
    """(the source CuPy hands NVRTC, CuPy's compiler options) for one recorded kernel."""
    _, cupy, kernel, core, carray, scalar, _ = codegen
    options = core.assemble_cupy_compiler_options(tuple(built.options))
    if built.kind == "RawKernel":
        return built.code, options  # CuPy compiles a RawKernel's source as it is
    ew = cupy.ElementwiseKernel(built.params[0], built.params[1], built.operation, built.name,
                                preamble=built.preamble, options=tuple(built.options))
    layout, sized = built.args
    n_in = len(ew.in_params)
    in_dtypes = tuple(None if a is None else a[0] for a in layout[:n_in])
    out_dtypes = tuple(None if a is None else a[0] for a in layout[n_in:])
    in_types, _, type_map = kernel._decide_params_type(ew.in_params, ew.out_params, in_dtypes, out_dtypes)
    # CuPy folds the non-raw arrays of an all-contiguous call into one dimension (reduce_dims).
    flat = all(a is None or a[2] or p.raw for a, p in zip(layout, ew.params))
    infos = []
    for index, (a, p) in enumerate(zip(layout, ew.params)):
        if a is None:
            infos.append(kernel._ArgInfo(3, scalar.CScalar, np.dtype(in_types[index]), 0, True, True))
        else:
            ndim = a[1] if p.raw or not flat else 1
            infos.append(kernel._ArgInfo(1, cupy.ndarray, a[0], ndim, a[2], True))
    index_ndim = 1 if sized or flat else max(a[1] for a, p in zip(layout, ew.params) if a and not p.raw)
    infos.append(kernel._ArgInfo(2, carray.Indexer, None, index_ndim, True, True))
    code = kernel._get_elementwise_kernel_code(tuple(infos), type_map, ew.params, ew.operation, ew.name,
                                               ew.preamble)
    return "".join(f"#include <{h}>\n" for h in core._cupy_header_list) + code, options


def nvrtc_compile(nvrtc: Any, source: str, name: str, options: tuple, arch: str) -> "str | None":
    """None when NVRTC compiles ``source`` to PTX for ``arch``, else NVRTC's log."""
    program = nvrtc.createProgram(source, f"{name}.cu", [], [])
    try:
        nvrtc.compileProgram(program, list(options) + [f"-arch={arch}"])
        return None if nvrtc.getPTX(program) else "no PTX"
    except nvrtc.NVRTCError as exc:
        return f"{exc}\n{nvrtc.getProgramLog(program)}"
    finally:
        nvrtc.destroyProgram(program)


def test_every_training_run_completes(collected: Collected) -> None:
    assert not collected.errors, "\n".join(f"{name}: {error}" for name, error in collected.errors.items())


def test_the_training_runs_build_every_kind_of_kernel(collected: Collected) -> None:
    """The hook saw the kernels: the conversions, the fused optimizers and scaler, cross-entropy, epilogues."""
    names = {b.name for b in collected.built}
    kinds = {b.kind for b in collected.built}
    assert kinds == {"ElementwiseKernel", "RawKernel"}
    for expected in ("tinyamp_convert_f32_f16", "tinyamp_convert_f16_f32", "tinyamp_fill_pointers"):
        assert expected in names, sorted(names)
    for family in ("sgd", "adam", "unscale", "ce_forward", "ce_backward", "relu_backward", "philox_uniform",
                   "philox_normal", "_graph", "fp8_encode_e4m3", "fp8_encode_e5m2", "fp8_decode_e4m3",
                   "gelu_none", "layer_norm_backward", "attention_dkv", "embedding_backward"):
        assert any(family in n for n in names), (family, sorted(names))


def test_every_kernel_compiles_with_nvrtc(collected: Collected) -> None:
    codegen = _cupy_codegen()
    nvrtc = codegen[0]
    sources: dict[tuple, str] = {}
    for b in collected.built:
        source, options = cupy_source(b, codegen)
        sources.setdefault((source, options), b.name)
    failures = []
    for (source, options), name in sources.items():
        for arch in ARCHS:
            log = nvrtc_compile(nvrtc, source, name, options, arch)
            if log is not None:
                failures.append(f"{name} ({arch}): {log.strip()}")
    assert not failures, (f"{len(failures)} of {len(sources) * len(ARCHS)} NVRTC compilations failed:\n"
                          + "\n\n".join(failures))


def test_every_source_of_the_kernel_modules_compiles_with_nvrtc() -> None:
    """Each kernel module's sources, every variant (the runs above may not build them all)."""
    nvrtc, *_, options = _cupy_codegen()
    failures = []
    for name, source in (cuda_random.sources() + cuda_fp8.sources([fp8.E4M3, fp8.E5M2]) + cuda_gelu.sources()
                         + cuda_layer_norm.sources() + cuda_softmax.sources() + cuda_attention.sources()
                         + cuda_embedding.sources()):
        for arch in ARCHS:
            log = nvrtc_compile(nvrtc, source, name, tuple(options) + cuda_launch.NVRTC_OPTIONS, arch)
            if log is not None:
                failures.append(f"{name} ({arch}): {log.strip()}")
    assert not failures, "\n\n".join(failures)


def test_the_test_extra_installs_what_this_test_needs() -> None:
    """The README's test command installs the ``test`` extra: it must bring CuPy, NVRTC and CUDA's headers."""
    with open(os.path.join(str(REPO), "pyproject.toml"), "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["test"]
    assert {"cupy-cuda13x", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime"} <= set(extra), extra
