"""Porting cases: one function per case, run with ``lib = torch`` (tests/support/make_porting_references.py
records the answers in porting_references.json) and with ``lib = tinyamp`` (the tests compare).

A case returns plain JSON values: tensors become nested lists (``plain``), an
exception becomes ``"TypeName: message"`` (``error``). This file imports neither library.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

CASES: dict = {}


def case(fn: Callable) -> Callable:
    CASES[fn.__name__] = fn
    return fn


def plain(value: Any) -> Any:
    """Tensors and NumPy arrays as lists, containers element by element."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def error(fn: Callable) -> str:
    """``"TypeName: message"`` of what ``fn()`` raises."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the exception is the answer
        return f"{type(exc).__name__}: {exc}"
    return "no error"


# ------------------------------------------------------------------ data: samplers and the DataLoader
@case
def samplers_orders(lib: Any) -> dict:
    data = lib.utils.data
    seq = data.SequentialSampler(range(7))
    return {
        "sequential": list(seq), "sequential_len": len(seq),
        "batches": list(data.BatchSampler(data.SequentialSampler(range(10)), 3, False)),
        "batches_drop_last": list(data.BatchSampler(range(10), batch_size=3, drop_last=True)),
        "len": [len(data.BatchSampler(range(10), 3, False)), len(data.BatchSampler(range(10), 3, True))],
        "is_sampler": [isinstance(seq, data.Sampler), isinstance(data.BatchSampler(seq, 2, False), data.Sampler)],
        "random_is_permutation": sorted(data.RandomSampler(range(9))) == list(range(9)),
        "random_num_samples": len(list(data.RandomSampler(range(4), num_samples=10))),
        "random_replacement_len": len(data.RandomSampler(range(4), replacement=True, num_samples=6)),
        "subset_random": sorted(data.SubsetRandomSampler([5, 2, 8])),
        "weighted_only_positive": sorted(set(data.WeightedRandomSampler([0, 1, 0, 1], 20))),
    }


@case
def sampler_errors(lib: Any) -> dict:
    data = lib.utils.data
    return {
        "batch_size_0": error(lambda: data.BatchSampler(range(3), 0, False)),
        "batch_size_float": error(lambda: data.BatchSampler(range(3), 2.5, False)),
        "drop_last_int": error(lambda: data.BatchSampler(range(3), 2, 1)),
        "random_num_samples": error(lambda: data.RandomSampler(range(3), num_samples=0)),
        "random_replacement": error(lambda: data.RandomSampler(range(3), replacement=1)),
        "weighted_num_samples": error(lambda: data.WeightedRandomSampler([1.0], 0)),
        "weighted_2d": error(lambda: data.WeightedRandomSampler([[1.0]], 1)),
        "base_iter": error(lambda: iter(data.Sampler())),
    }


class _Endless:
    """detectron2's TrainingSampler in miniature: an index stream without an end (no __len__).

    It refuses to be read past 100 indices, so a loader that reads the whole order
    before its first batch fails here instead of hanging.
    """

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        for i in itertools.count():
            if i == 100:
                raise RuntimeError("the endless sampler was read past 100 indices before a batch was used")
            yield i % self.n


@case
def loader_with_samplers(lib: Any) -> dict:
    data = lib.utils.data
    ds = data.TensorDataset(lib.arange(10) * 10)
    batch_sampler = data.BatchSampler(data.SequentialSampler(ds), 4, False)
    endless = iter(data.DataLoader(ds, batch_size=4, sampler=_Endless(10)))
    endless_batches = iter(data.DataLoader(ds, batch_sampler=data.BatchSampler(_Endless(10), 3, False)))
    plain_list = list(range(5))
    return {
        "batch_sampler": [plain(b) for b in data.DataLoader(ds, batch_sampler=batch_sampler)],
        "batch_sampler_len": len(data.DataLoader(ds, batch_sampler=batch_sampler)),
        "batch_sampler_attrs": [data.DataLoader(ds, batch_sampler=batch_sampler).batch_size,
                                data.DataLoader(ds, batch_sampler=batch_sampler).drop_last],
        "endless_sampler": [plain(next(endless)) for _ in range(4)],
        "endless_batch_sampler": [plain(next(endless_batches)) for _ in range(4)],
        "endless_len": error(lambda: len(data.DataLoader(ds, sampler=_Endless(10)))),
        "list_dataset": [plain(b) for b in data.DataLoader(plain_list, batch_size=2, sampler=[4, 0, 3])],
        "no_batching": [plain(b) for b in data.DataLoader(plain_list, batch_size=None)],
        "default_sampler_types": [type(data.DataLoader(ds).sampler).__name__,
                                  type(data.DataLoader(ds, shuffle=True).sampler).__name__,
                                  type(data.DataLoader(ds).batch_sampler).__name__],
        "dataloader_module": [data.dataloader.DataLoader is data.DataLoader,
                              data.dataloader.default_collate([1, 2]).tolist(),
                              data.sampler.BatchSampler is data.BatchSampler,
                              data.dataloader.get_worker_info() is None],
    }


@case
def loader_errors(lib: Any) -> dict:
    data = lib.utils.data
    ds = list(range(6))
    bs = data.BatchSampler(range(6), 2, False)
    return {
        "sampler_and_shuffle": error(lambda: data.DataLoader(ds, sampler=[0, 1], shuffle=True)),
        "batch_sampler_and_batch_size": error(lambda: data.DataLoader(ds, batch_size=2, batch_sampler=bs)),
        "batch_sampler_and_drop_last": error(lambda: data.DataLoader(ds, drop_last=True, batch_sampler=bs)),
        "batch_sampler_and_sampler": error(lambda: data.DataLoader(ds, sampler=[0], batch_sampler=bs)),
        "no_batching_and_drop_last": error(lambda: data.DataLoader(ds, batch_size=None, drop_last=True)),
        "negative_workers": error(lambda: data.DataLoader(ds, num_workers=-1)),
        "negative_timeout": error(lambda: data.DataLoader(ds, timeout=-1)),
        "prefetch_without_workers": error(lambda: data.DataLoader(ds, prefetch_factor=2)),
        "persistent_without_workers": error(lambda: data.DataLoader(ds, persistent_workers=True)),
        "batch_size_0": error(lambda: data.DataLoader(ds, batch_size=0)),
    }


# ------------------------------------------------------------------ nn: vision layers, norms, resampling
@case
def vision_errors(lib: Any) -> dict:
    nn, F, ones = lib.nn, lib.nn.functional, lib.ones
    return {
        "shuffle_rank": error(lambda: F.pixel_shuffle(ones(2, 3), 2)),
        "shuffle_channels": error(lambda: F.pixel_shuffle(ones(1, 7, 2, 2), 2)),
        "shuffle_factor": error(lambda: F.pixel_shuffle(ones(1, 4, 2, 2), 0)),
        "unshuffle_height": error(lambda: F.pixel_unshuffle(ones(1, 1, 3, 4), 2)),
        "unshuffle_width": error(lambda: F.pixel_unshuffle(ones(1, 1, 4, 3), 2)),
        "reflection_too_wide": error(lambda: nn.ReflectionPad2d((3, 3, 0, 0))(ones(1, 1, 3, 3))),
        "instance_norm_rank": error(lambda: nn.InstanceNorm2d(3)(ones(2, 3))),
        "instance_norm_features": error(lambda: nn.InstanceNorm2d(3, affine=True)(ones(2, 4, 3, 3))),
        "instance_norm_one_element": error(lambda: F.instance_norm(ones(2, 3, 1, 1))).replace(
            "torch.Size([2, 3, 1, 1])", "[2, 3, 1, 1]"),  # tinyamp's shapes are tuples, printed as lists
        "batch_norm3d_rank": error(lambda: nn.BatchNorm3d(3)(ones(2, 3, 3, 3))).split(":")[:2],
        "sync_batch_norm_rank": error(lambda: nn.SyncBatchNorm(3)(ones(3))).split(":")[:2],
        "lrn_rank": error(lambda: F.local_response_norm(ones(2, 3), 2)).replace(" " * 26, " "),
        "orthogonal_rank": error(lambda: nn.init.orthogonal_(ones(3))),
        "interp_rank": error(lambda: nn.Upsample(scale_factor=2)(ones(2, 3))).replace("lanczos | ", ""),
        "interp_align_corners": error(lambda: F.interpolate(ones(1, 1, 2, 2), scale_factor=2, align_corners=True)),
        "interp_both": error(lambda: F.interpolate(ones(1, 1, 2, 2), size=3, scale_factor=2)),
        "interp_neither": error(lambda: F.interpolate(ones(1, 1, 2, 2))),
        "interp_size_len": error(lambda: F.interpolate(ones(1, 1, 4, 4), size=[2])),
        "interp_scale_len": error(lambda: F.interpolate(ones(1, 1, 4, 4), scale_factor=[2.0])),
        "interp_size_type": error(lambda: F.interpolate(ones(1, 1, 4, 4), size=(2.5, 2))).replace(
            "<class 'float'>", "float").replace("<class 'int'>", "int"),
        "interp_linear_4d": error(lambda: F.interpolate(ones(1, 1, 4, 4), size=2, mode="linear")),
        "interp_bilinear_3d": error(lambda: F.interpolate(ones(1, 1, 4), size=2, mode="bilinear")),
        "interp_recompute_with_size": error(lambda: F.interpolate(ones(1, 1, 4, 4), size=2,
                                                                  recompute_scale_factor=True)),
    }


@case
def vision_reprs(lib: Any) -> list:
    nn = lib.nn
    return [repr(m) for m in (nn.Upsample(scale_factor=2), nn.Upsample(size=(3, 4), mode="bilinear"),
                              nn.InstanceNorm2d(3), nn.InstanceNorm1d(4, affine=True, track_running_stats=True),
                              nn.PixelShuffle(2), nn.PixelUnshuffle(3), nn.ReflectionPad2d(2),
                              nn.ReplicationPad1d((1, 2)), nn.ZeroPad2d(1), nn.ConstantPad2d(1, 3.5),
                              nn.LocalResponseNorm(3), nn.UpsamplingBilinear2d(scale_factor=2))]


@case
def norm_state_dicts(lib: Any) -> dict:
    nn = lib.nn
    layers = {"instance_affine_tracked": nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
              "instance_plain": nn.InstanceNorm3d(3), "batch3d_no_bias": nn.BatchNorm3d(2, bias=False),
              "sync": nn.SyncBatchNorm(2), "lrn": nn.LocalResponseNorm(2)}
    return {k: {n: list(v.shape) for n, v in m.state_dict().items()} for k, m in layers.items()}


# ------------------------------------------------------------------ functional forms and Tensor methods
def error_type(fn: Callable) -> str:
    """The name of the exception ``fn()`` raises (tinyamp's messages add shapes and dtypes to PyTorch's)."""
    return error(fn).split(":")[0]


@case
def functional_error_types(lib: Any) -> dict:
    x, i = lib.ones(3, 4), lib.tensor([[0, 1], [2, 3]])
    return {
        "gather_int32_index": error_type(lambda: lib.gather(x, 1, i.int())),
        "gather_rank": error_type(lambda: lib.gather(x, 1, lib.tensor([0, 1]))),
        "gather_out_of_range": error_type(lambda: lib.gather(x, 1, lib.tensor([[0, 4]]))),
        "gather_index_too_large": error_type(lambda: lib.gather(x, 1, lib.zeros(4, 1, dtype=lib.long))),
        "scatter_dtype": error_type(lambda: x.scatter(1, i, lib.ones(2, 2, dtype=lib.long))),
        "scatter_out_of_range": error_type(lambda: x.scatter(0, i, 1.0)),
        "flip_repeated_dim": error_type(lambda: x.flip(0, 0)),
        "flip_dim_range": error_type(lambda: x.flip(2)),
        "einsum_operands": error_type(lambda: lib.einsum("ij,jk->ik", x)),
        "einsum_rank": error_type(lambda: lib.einsum("ijk->i", x)),
        "kl_div_reduction": error_type(lambda: lib.nn.functional.kl_div(x, x, reduction="avg")),
        "fliplr_1d": error_type(lambda: lib.fliplr(lib.ones(3))),
    }


@case
def tensor_method_values(lib: Any) -> dict:
    x = lib.arange(12.0).reshape(3, 4)
    return {"nelement": x.nelement(), "reshape_kw": list(x.reshape(shape=(2, 6)).shape),
            "median_even": x.median().item(), "median_dim": plain(x.median(1)),
            "prod_int": [x.long().prod(1).tolist(), str(x.long().prod().dtype).split(".")[-1]],
            "prod_bool": str(lib.ones(2, dtype=lib.bool).prod().dtype).split(".")[-1],
            "median_nan": str(plain(lib.tensor([1.0, float("nan"), 0.0]).median(0))),
            "median_empty": str(lib.ones(0).median().item()),
            "relu_in_place_is_self": (lambda y: lib.nn.functional.relu_(y) is y)(x - 5),
            "kl_mean_warns": _warns(lambda: lib.nn.functional.kl_div(x, x.exp()))}


def _warns(fn: Callable) -> str:
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return str(caught[0].message) if caught else "no warning"


# ------------------------------------------------------------------ types and devices
@case
def dtype_objects(lib: Any) -> dict:
    names = ["float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
             "half", "float", "double", "long"]
    x = lib.ones(2, dtype=lib.float16)
    return {
        "attributes": {n: [getattr(lib, n).is_floating_point, getattr(lib, n).is_signed, getattr(lib, n).itemsize,
                           getattr(lib, n).is_complex] for n in names},
        "isinstance": [isinstance(x.dtype, lib.dtype), isinstance(lib.float32, lib.dtype), x.dtype is lib.float16,
                       x.dtype == lib.half, x.dtype != lib.float32, lib.long is lib.int64],
        "ema_style": [v.dtype.is_floating_point for v in (lib.ones(1), lib.ones(1, dtype=lib.long))],
        "hash_dict": {lib.float16: "h", lib.float32: "f"}[x.dtype],
    }


@case
def legacy_types_and_layouts(lib: Any) -> dict:
    t = lib.LongTensor([1, 2, 3])
    f = lib.FloatTensor(2, 3)
    x = lib.ones(2, 3, 4, 5)
    m = lib.nn.Conv2d(3, 2, 1).to(memory_format=lib.channels_last)
    return {
        "long": [t.tolist(), str(t.dtype).split(".")[-1], isinstance(t, lib.LongTensor),
                 isinstance(t, lib.FloatTensor), isinstance(lib.ones(1), lib.FloatTensor)],
        "float_shape": [list(f.shape), str(f.dtype).split(".")[-1]],
        "type_conversion": str(lib.ones(2).type(lib.LongTensor).dtype).split(".")[-1],
        "channels_last_values": x.to(memory_format=lib.channels_last).sum().item(),
        "contiguous_values": x.contiguous(memory_format=lib.channels_last).shape[1],
        "module_to": m.weight.shape[0],
        "is_contiguous": [lib.ones(2, 3).is_contiguous(), lib.ones(2, 1, 3, 3).is_contiguous(
            memory_format=lib.channels_last)],
        "is_scripting": [lib.jit.is_scripting(), lib.jit.is_tracing()],
        "memory_format_class": isinstance(lib.channels_last, lib.memory_format),
    }


# ------------------------------------------------------------------ behaviours
@case
def repeat_is_a_copy(lib: Any) -> list:
    x = lib.tensor([[1.0, 2.0]])
    r = x.repeat(3, 2)
    r.div_(2)
    rows = x.repeat(4, 1)  # only leading copies: a broadcast view (stride 0) refuses the in-place write
    rows.div_(2)
    return [plain(r), plain(rows), plain(x), plain(lib.arange(3).repeat(2, 1, 2))]


@case
def grad_scaler_bfloat16_resume(lib: Any) -> dict:
    """detectron2's AMPTrainer resume: an enabled scaler in a bfloat16 region scales, and its state round-trips."""
    import warnings
    lib.manual_seed(0)
    layer = lib.nn.Linear(3, 1)
    with lib.no_grad():
        layer.weight.copy_(lib.tensor([[0.5, -0.25, 0.125]]))
        layer.bias.fill_(0.1)
    opt = lib.optim.SGD(layer.parameters(), lr=0.1)
    scaler = lib.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
    x = lib.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
    scaled = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tinyamp warns that bfloat16 needs no scaling; PyTorch is silent
        for _ in range(3):
            opt.zero_grad()
            with lib.autocast("cpu", dtype=lib.bfloat16):
                loss = layer(x).float().pow(2).mean()
            s = scaler.scale(loss)
            scaled.append(round(float(s.item() / loss.item())))
            s.backward()
            scaler.step(opt)
            scaler.update()
    keys = ["scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"]
    state = scaler.state_dict()
    fresh = lib.amp.GradScaler("cpu")
    fresh.load_state_dict(state)
    return {"scaled_by": scaled, "state": {k: state[k] for k in keys},
            "fresh": {k: fresh.state_dict()[k] for k in keys}, "fresh_scale": fresh.get_scale(),
            "enabled": [scaler.is_enabled(), fresh.is_enabled()],
            "weight": [round(v, 3) for v in layer.weight.detach().reshape(-1).tolist()]}


# ------------------------------------------------------------------ LBFGS
def _rosenbrock(lib: Any, line_search: "str | None", steps: int, **kw: Any) -> dict:
    xy = lib.tensor([-1.5, 2.0], dtype=lib.float64, requires_grad=True)
    opt = lib.optim.LBFGS([xy], lr=kw.pop("lr", 1), line_search_fn=line_search, **kw)

    def closure() -> Any:
        opt.zero_grad()
        loss = (1 - xy[0]) ** 2 + 100 * (xy[1] - xy[0] ** 2) ** 2
        loss.backward()
        return loss

    losses = [round(float(opt.step(closure).detach()), 10) for _ in range(steps)]
    state = opt.state[xy]
    return {"losses": losses, "xy": [round(v, 8) for v in xy.tolist()], "func_evals": state["func_evals"],
            "n_iter": state["n_iter"]}


@case
def lbfgs_rosenbrock_strong_wolfe(lib: Any) -> dict:
    return _rosenbrock(lib, "strong_wolfe", 4)


@case
def lbfgs_rosenbrock_fixed_step(lib: Any) -> dict:
    return _rosenbrock(lib, None, 3, lr=0.05, max_iter=10, history_size=4)


@case
def lbfgs_sequence_model(lib: Any) -> dict:
    """pytorch/examples' time-sequence prediction: an LSTMCell and a Linear trained by LBFGS with a closure."""
    import numpy as np
    lib.manual_seed(0)
    cell, head = lib.nn.LSTMCell(1, 4).double(), lib.nn.Linear(4, 1).double()
    rng = np.random.default_rng(0)
    with lib.no_grad():
        for p in list(cell.parameters()) + list(head.parameters()):
            p.copy_(lib.tensor(rng.uniform(-0.5, 0.5, tuple(p.shape))))
    wave = lib.tensor(np.sin(np.arange(12) / 2.0).reshape(2, 6))
    opt = lib.optim.LBFGS(list(cell.parameters()) + list(head.parameters()), lr=0.8, max_iter=5)

    def closure() -> Any:
        opt.zero_grad()
        h = c = lib.zeros(2, 4, dtype=lib.float64)
        outs = []
        for t in range(5):
            h, c = cell(wave[:, t:t + 1], (h, c))
            outs.append(head(h))
        loss = lib.nn.functional.mse_loss(lib.cat(outs, 1), wave[:, 1:])
        loss.backward()
        return loss

    return {"losses": [round(float(opt.step(closure).detach()), 9) for _ in range(3)]}


@case
def lbfgs_errors(lib: Any) -> dict:
    p = lib.zeros(2, requires_grad=True)
    return {"lr": error(lambda: lib.optim.LBFGS([p], lr=-1)),
            "groups": error(lambda: lib.optim.LBFGS([{"params": [p]}, {"params": [lib.zeros(1, requires_grad=True)]}])),
            "line_search": error(lambda: lib.optim.LBFGS([p], line_search_fn="armijo").step(
                lambda: (p - 1).pow(2).sum().backward() or (p - 1).pow(2).sum())),
            "max_eval_default": lib.optim.LBFGS([p], max_iter=8).param_groups[0]["max_eval"]}
