"""The porting promise: PyTorch AMP idioms run after ``import tinyamp as torch``.

Each test is written the way a PyTorch user writes the idiom (the module is
imported under torch's names) and checks the result against hand-computed or
NumPy values. PyTorch itself is never imported.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tinyamp as torch
import tinyamp.nn as nn
import tinyamp.nn.functional as F
from tinyamp.amp import GradScaler, autocast
from tinyamp.optim import lr_scheduler
from tinyamp.utils.data import DataLoader, Dataset, Subset, TensorDataset, random_split


# ------------------------------------------------------------ autocast, grad modes, scaler
def test_top_level_autocast_and_queries() -> None:
    x = torch.ones(2, 3)
    w = torch.full((3, 4), 0.5)
    assert not torch.is_autocast_enabled("cpu")
    with torch.autocast(device_type="cpu", dtype=torch.float16):
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.float16
        y = x @ w
        with torch.autocast("cpu", enabled=False):
            z = x @ w
    assert y.dtype == torch.float16 and z.dtype == torch.float32
    np.testing.assert_array_equal(y.float().numpy(), np.full((2, 4), 1.5, np.float32))

    @torch.autocast(device_type="cpu", dtype=torch.bfloat16)
    def forward(a: torch.Tensor) -> torch.Tensor:
        return a @ w

    assert forward(x).dtype == torch.bfloat16


def test_inference_mode_and_bare_no_grad_decorator() -> None:
    layer = nn.Linear(3, 2)
    x = torch.ones(4, 3)
    with torch.inference_mode():
        assert not torch.is_grad_enabled()
        assert not layer(x).requires_grad
    with torch.inference_mode(False):
        assert torch.is_grad_enabled()

    @torch.inference_mode()
    def predict(a: torch.Tensor) -> torch.Tensor:
        return layer(a)

    @torch.no_grad
    def predict_bare(a: torch.Tensor) -> torch.Tensor:
        return layer(a)

    assert not predict(x).requires_grad and not predict_bare(x).requires_grad
    assert torch.is_grad_enabled() and layer(x).requires_grad


def test_grad_scaler_takes_the_device_first() -> None:
    assert GradScaler("cpu", init_scale=2.0 ** 10).get_scale() == 1024.0
    assert torch.amp.GradScaler("cpu", 512.0, growth_interval=3).get_scale() == 512.0
    assert not torch.amp.GradScaler(device="cpu", enabled=False).is_enabled()
    with pytest.raises(TypeError, match="init_scale=65536.0"):
        GradScaler(65536.0)  # torch.cuda.amp's old positional order


# ------------------------------------------------------------------ operators and ops
def test_modulo_and_floor_division() -> None:
    a, b = np.array([7, -7, 5, -5, 0]), np.array([3, 3, -2, -2, 4])
    x, y = torch.tensor(a), torch.tensor(b)
    np.testing.assert_array_equal((x % y).numpy(), [1, 2, -1, -1, 0])  # sign of the divisor, as Python
    np.testing.assert_array_equal((x // y).numpy(), [2, -3, -3, 2, 0])
    assert (torch.arange(6) % 4).tolist() == [0, 1, 2, 3, 0, 1]
    assert (10 // torch.arange(1, 4)).tolist() == [10, 5, 3]
    assert (torch.arange(5) % 2).dtype == torch.int64

    p = torch.tensor([5.5, -3.25], requires_grad=True)
    q = torch.tensor([2.0, 2.0], requires_grad=True)
    r = torch.remainder(p, q)
    np.testing.assert_allclose(r.detach().numpy(), [1.5, 0.75])
    r.sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(q.grad.numpy(), [-2.0, 2.0])  # -floor(p / q)
    with pytest.raises(RuntimeError, match="floor_divide"):
        (p // q).sum().backward()


def test_new_tensor_factories_follow_the_source() -> None:
    x = torch.ones(2, dtype=torch.float16)
    zeros = x.new_zeros(2, 3)
    assert zeros.dtype == torch.float16 and zeros.shape == (2, 3) and not zeros.numpy().any()
    assert x.new_ones((4,)).numpy().tolist() == [1.0] * 4
    assert x.new_full((2,), 7.0).numpy().tolist() == [7.0, 7.0]
    assert x.new_tensor([1, 2]).dtype == torch.float16
    assert x.new_zeros(3, dtype=torch.int64).dtype == torch.int64
    assert x.new_empty(5).shape == (5,)
    assert x.new_zeros(2, requires_grad=True).requires_grad


def test_norms_against_numpy() -> None:
    a = np.arange(-5.0, 7.0).reshape(3, 4) / 3
    x = torch.tensor(a)
    np.testing.assert_allclose(x.norm().item(), np.linalg.norm(a))
    np.testing.assert_allclose(x.norm(2, dim=1).numpy(), np.linalg.norm(a, axis=1))
    np.testing.assert_allclose(torch.norm(x, dim=0, keepdim=True).numpy(), np.linalg.norm(a, axis=0, keepdims=True))
    np.testing.assert_allclose(x.norm(p=1).item(), np.abs(a).sum())
    np.testing.assert_allclose(torch.linalg.vector_norm(x, math.inf, dim=1).numpy(), np.abs(a).max(1))
    np.testing.assert_allclose(torch.linalg.norm(x).item(), np.linalg.norm(a))
    np.testing.assert_allclose(F.normalize(x, dim=1).numpy(), a / np.linalg.norm(a, axis=1, keepdims=True))
    with pytest.raises(ValueError, match="matrix norm"):
        torch.linalg.norm(x, ord=2)


def test_norm_of_zero_rows_has_zero_gradient() -> None:
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0]], requires_grad=True)
    x.norm(dim=1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.6, 0.8], [0.0, 0.0]])  # no nan on the zero row


def test_gradient_penalty_idiom() -> None:
    # critic(x) = x @ w, so d critic / dx = w for every sample and the penalty
    # ((||w|| - 1)^2) has gradient 2 (||w|| - 1) w / ||w|| with respect to w.
    w_np = np.array([[0.5], [1.0], [2.0]])
    critic = nn.Linear(3, 1, bias=False).double()
    with torch.no_grad():
        critic.weight.copy_(torch.tensor(w_np.T))
    real, fake = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    alpha = torch.rand(4, 1, dtype=torch.float64)
    interp = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    out = critic(interp)
    grads = torch.autograd.grad(outputs=out, inputs=interp, grad_outputs=torch.ones_like(out),
                                create_graph=True, retain_graph=True)[0]
    penalty = ((grads.norm(2, dim=1) - 1) ** 2).mean()
    penalty.backward()
    norm = np.linalg.norm(w_np)
    np.testing.assert_allclose(penalty.item(), (norm - 1) ** 2)
    np.testing.assert_allclose(critic.weight.grad.numpy(), (2 * (norm - 1) * w_np / norm).T)


def test_checks_on_values() -> None:
    pred, target = torch.tensor([0, 2, 1]), torch.tensor([0, 2, 2])
    assert not (pred == target).all() and (pred == target).any()
    assert (pred == target).all(dim=0).numpy().tolist() is False
    loss = torch.tensor([1.0, float("inf"), float("nan")])
    assert torch.isfinite(loss).numpy().tolist() == [True, False, False]
    assert loss.isnan().numpy().tolist() == [False, False, True]
    assert torch.isinf(loss).any().item()
    assert torch.allclose(torch.ones(3), torch.ones(3) + 1e-7) and not torch.allclose(torch.ones(3), torch.zeros(3))
    assert torch.equal(pred, torch.tensor([0, 2, 1])) and not torch.equal(pred, target)
    rows, cols = torch.where(torch.tensor([[True, False], [False, True]]))
    assert rows.tolist() == [0, 1] and cols.tolist() == [0, 1]
    assert torch.nonzero(torch.tensor([0, 3, 0, 4])).tolist() == [[1], [3]]


def test_one_hot() -> None:
    y = torch.tensor([2, 0, 1, 2])
    np.testing.assert_array_equal(F.one_hot(y, num_classes=4).numpy(), np.eye(4, dtype=np.int64)[[2, 0, 1, 2]])
    assert F.one_hot(y).shape == (4, 3) and F.one_hot(y).dtype == torch.int64
    assert F.one_hot(y, 3).float().dtype == torch.float32
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        F.one_hot(y, num_classes=2)
    with pytest.raises(RuntimeError, match="LongTensor"):
        F.one_hot(y.float())


def test_topk_accuracy_and_sort() -> None:
    logits = np.array([[0.1, 0.5, 0.3, 0.9], [0.8, 0.1, 0.05, 0.7], [0.2, 0.3, 0.4, 0.1]])
    target = np.array([1, 3, 0])
    output, y = torch.tensor(logits), torch.tensor(target)
    _, pred = output.topk(2, 1, True, True)
    pred = pred.t()
    correct = pred.eq(y.view(1, -1).expand_as(pred))
    top2 = np.argsort(-logits, axis=1)[:, :2]
    assert correct.sum().item() == sum(t in row for t, row in zip(target, top2)) == 2
    values, indices = torch.sort(output, dim=1, descending=True)
    np.testing.assert_array_equal(indices.numpy(), np.argsort(-logits, axis=1))
    np.testing.assert_array_equal(values.numpy(), -np.sort(-logits, axis=1))
    x = torch.tensor([3.0, 1.0, 2.0], requires_grad=True)
    x.topk(2).values.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 1.0])


def test_shape_and_fill_idioms() -> None:
    a = np.arange(6.0).reshape(2, 3)
    x = torch.tensor(a)
    np.testing.assert_array_equal(x.t().numpy(), a.T)
    np.testing.assert_array_equal(x.repeat(2, 2).numpy(), np.tile(a, (2, 2)))
    np.testing.assert_array_equal(x[:, :1].expand_as(x).numpy(), np.repeat(a[:, :1], 3, axis=1))
    np.testing.assert_array_equal(x.masked_fill(x > 2, -1.0).numpy(), np.where(a > 2, -1.0, a))
    y = x.clone()
    y.clamp_(1.0, 4.0)
    np.testing.assert_array_equal(y.numpy(), np.clip(a, 1.0, 4.0))
    y.masked_fill_(y == 4.0, 0.0)
    assert y.numpy().max() == 3.0
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    w.repeat(3, 1).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 3.0])


def test_formatting_a_loss() -> None:
    loss = torch.tensor(0.123456)
    assert f"{loss:.3f}" == "0.123"
    assert f"{torch.tensor(3):d}" == "3"
    assert f"{torch.ones(2)}" == repr(torch.ones(2))
    with pytest.raises(TypeError):
        f"{torch.ones(2):.1f}"  # noqa: B018 - only 0-d tensors take a number format, as in PyTorch


def test_silu_elu_and_modules() -> None:
    a = np.linspace(-3, 3, 7)
    x = torch.tensor(a)
    np.testing.assert_allclose(F.silu(x).numpy(), a / (1 + np.exp(-a)))
    np.testing.assert_allclose(nn.SiLU()(x).numpy(), a / (1 + np.exp(-a)))
    np.testing.assert_allclose(nn.ELU(alpha=0.5)(x).numpy(), np.where(a > 0, a, 0.5 * np.expm1(a)))
    big = torch.tensor([-30.0, 30.0], dtype=torch.float16, requires_grad=True)
    F.elu(big).sum().backward()  # exp(30) overflows float16; the unused branch must not make nan
    np.testing.assert_array_equal(big.grad.float().numpy(), [0.0, 1.0])


def test_adaptive_avg_pool_and_trunc_normal() -> None:
    a = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)
    pooled = nn.AdaptiveAvgPool2d((1, 1))(torch.from_numpy(a))
    np.testing.assert_allclose(pooled.numpy(), a.mean(axis=(2, 3), keepdims=True))
    np.testing.assert_allclose(F.adaptive_avg_pool2d(torch.from_numpy(a), 2).numpy(),
                               a.reshape(2, 3, 2, 2, 2, 2).mean(axis=(3, 5)))
    with pytest.raises(ValueError, match="must divide"):
        F.adaptive_avg_pool2d(torch.from_numpy(a), 3)
    w = torch.empty(200, 50)
    nn.init.trunc_normal_(w, std=0.5, a=-0.25, b=0.5)
    assert w.numpy().min() >= -0.25 and w.numpy().max() <= 0.5 and w.numpy().std() > 0.1


# ------------------------------------------------------------------------ schedulers
def _sgd(lr: float = 1.0) -> torch.optim.SGD:
    return torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=lr)


def _lrs(optimizer: torch.optim.Optimizer, scheduler: object, steps: int) -> list:
    seen = []
    for _ in range(steps):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return seen


def test_multistep_exponential_and_linear_schedules() -> None:
    opt = _sgd()
    np.testing.assert_allclose(_lrs(opt, lr_scheduler.MultiStepLR(opt, milestones=[2, 4], gamma=0.1), 6),
                               [1, 1, 0.1, 0.1, 0.01, 0.01])
    opt = _sgd()
    np.testing.assert_allclose(_lrs(opt, lr_scheduler.ExponentialLR(opt, gamma=0.5), 4), [1, 0.5, 0.25, 0.125])
    opt = _sgd()
    np.testing.assert_allclose(_lrs(opt, lr_scheduler.LinearLR(opt, start_factor=0.25, total_iters=3), 5),
                               [0.25, 0.5, 0.75, 1.0, 1.0])


def test_one_cycle_schedule_moves_lr_and_momentum() -> None:
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    sched = lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=5, pct_start=0.4, anneal_strategy="linear",
                                    div_factor=10.0, final_div_factor=100.0)
    lrs, momenta = [], []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        momenta.append(opt.param_groups[0]["momentum"])
        opt.step()
        sched.step()
    # warm-up ends at step 0.4 * 5 - 1 = 1 (0.1 -> 1.0), then 1.0 -> 0.1 / 100 over steps 1..4
    np.testing.assert_allclose(lrs, [0.1, 1.0, 1 - 0.999 / 3, 1 - 2 * 0.999 / 3, 0.001])
    np.testing.assert_allclose(momenta, [0.95, 0.85, 0.85 + 0.1 / 3, 0.85 + 0.2 / 3, 0.95])
    adam = torch.optim.AdamW(nn.Linear(2, 2).parameters())
    lr_scheduler.OneCycleLR(adam, max_lr=0.01, epochs=2, steps_per_epoch=3)
    assert adam.param_groups[0]["betas"] == (0.95, 0.999)
    with pytest.raises(ValueError, match="total_steps"):
        for _ in range(5):
            sched.step()


def test_reduce_lr_on_plateau() -> None:
    opt = _sgd(0.1)
    scheduler = lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=1, cooldown=1)
    seen = []
    for val_loss in [1.0, 0.9, 0.95, 0.95, 0.95, 0.95, 0.95, 0.5]:
        scheduler.step(torch.tensor(val_loss))
        seen.append(opt.param_groups[0]["lr"])
    # two bad epochs (> patience 1) halve the lr; the cooldown epoch after a cut counts no bad epoch
    np.testing.assert_allclose(seen, [0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025])
    assert scheduler.get_last_lr() == [0.025]


# ------------------------------------------------------------------ data and whole loops
class _Pairs(Dataset):
    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> tuple:
        return torch.full((3,), float(index)), index % 3


def test_custom_dataset_labels_batch_into_tensors() -> None:
    batches = list(DataLoader(_Pairs(), batch_size=4))
    x, y = batches[0]
    assert isinstance(y, torch.Tensor) and y.dtype == torch.int64 and y.tolist() == [0, 1, 2, 0]
    assert torch.utils.data.DataLoader is DataLoader
    loss = F.cross_entropy(torch.zeros(4, 3), y)
    np.testing.assert_allclose(loss.item(), math.log(3), rtol=1e-6)


def test_random_split_subsets_and_loader_arguments() -> None:
    ds = TensorDataset(torch.arange(20.0).reshape(10, 2), torch.arange(10))
    train, val = random_split(ds, [0.75, 0.25], generator=np.random.default_rng(0))
    assert (len(train), len(val)) == (8, 2)  # floor(7.5), floor(2.5), then one left over to the first
    assert sorted(train.indices + val.indices) == list(range(10))
    loader = DataLoader(train, batch_size=3, shuffle=True, num_workers=2, pin_memory=True)
    labels = [int(v) for _, y in loader for v in y.tolist()]
    assert sorted(labels) == sorted(train.indices)
    x, y = next(iter(DataLoader(Subset(ds, [4, 1]), batch_size=2)))
    np.testing.assert_array_equal(x.numpy(), [[8.0, 9.0], [2.0, 3.0]])
    assert y.tolist() == [4, 1]
    pairs = next(iter(DataLoader(ds, batch_size=2, collate_fn=lambda samples: samples)))
    assert len(pairs) == 2 and pairs[1][1].item() == 1
    with pytest.raises(ValueError, match="sum of input lengths"):
        random_split(ds, [5, 6])


def test_dtype_limits_optimizer_flags_and_reduction_dtype() -> None:
    assert torch.finfo(torch.float16).max == 65504.0
    assert torch.finfo(torch.float16).tiny == 2.0 ** -14
    assert torch.finfo(torch.bfloat16).eps == 2.0 ** -7
    assert torch.iinfo(torch.int64).max == 2 ** 63 - 1
    assert torch.get_default_dtype() == torch.float32
    params = nn.Linear(2, 2).parameters()
    torch.optim.AdamW(params, lr=1e-3, foreach=None, fused=False)
    torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1, foreach=False)
    big = torch.full((4,), 30000.0, dtype=torch.float16)
    assert big.sum(dtype=torch.float32).item() == 120000.0  # a float16 sum would overflow to inf
    assert big.mean(dtype=torch.float32).dtype == torch.float32


def test_loading_a_pytorch_file_says_how_to_convert(tmp_path) -> None:
    import zipfile

    path = tmp_path / "model.pt"
    with zipfile.ZipFile(path, "w") as archive:  # the layout of torch.save's zip files
        archive.writestr("model/data.pkl", b"\x80\x02}q\x00.")
        archive.writestr("model/version", b"3\n")
    with pytest.raises(RuntimeError, match="PyTorch torch.save file.*np.savez"):
        torch.load(path)


def test_tensor_data_is_a_tensor_and_a_raw_array_is_refused_with_the_way_to_wrap_it() -> None:
    out = torch.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])
    values, indices = torch.max(out.data, 1)  # torchvision's accuracy idiom
    assert indices.tolist() == [1, 0] and values.tolist() == [5.0, 7.0]
    with pytest.raises(TypeError, match=r"max: .*ndarray \(shape \[2, 3\]\); wrap arrays with ta.from_numpy"):
        torch.max(out.numpy(), 1)


def test_clip_on_an_overflowed_step_is_silent_and_the_step_is_skipped() -> None:
    model = nn.Linear(2, 1)
    before = model.weight.detach().clone().numpy()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler("cpu", init_scale=4.0)
    with autocast(device_type="cpu", dtype=torch.float16):
        loss = model(torch.tensor([[60000.0, 60000.0]])).sum() * 1e4
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        total = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    assert not torch.isfinite(total).item()
    scaler.step(optimizer)
    scaler.update()
    np.testing.assert_array_equal(model.weight.detach().numpy(), before)
    assert scaler.get_scale() == 2.0


def test_typical_amp_step_matches_numpy() -> None:
    # One step of the canonical loop on a linear model, against the same step in NumPy:
    # softmax cross-entropy gradient, clipping to norm 1, then SGD.
    rng = np.random.default_rng(0)
    w0, b0 = rng.standard_normal((3, 4)), rng.standard_normal(3)
    xs, ys = rng.standard_normal((8, 4)) * 2, np.array([0, 1, 2, 0, 1, 2, 0, 1])
    model = nn.Sequential(nn.Linear(4, 3)).to("cpu")
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor(w0))
        model[0].bias.copy_(torch.tensor(b0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = GradScaler("cpu", init_scale=2.0 ** 8)
    criterion = nn.CrossEntropyLoss()
    x, y = torch.tensor(xs, dtype=torch.float32), torch.tensor(ys)

    optimizer.zero_grad(set_to_none=True)
    with autocast(device_type="cpu", dtype=torch.float16):
        out = model(x)
        loss = criterion(out, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()

    logits = xs @ w0.T + b0
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    d = (p - np.eye(3)[ys]) / len(ys)
    gw, gb = d.T @ xs, d.sum(0)
    ref_norm = np.sqrt((gw ** 2).sum() + (gb ** 2).sum())
    coef = min(1.0, 1.0 / (ref_norm + 1e-6))
    # float16 logits (10-bit mantissa) bound the agreement to about 1e-3 relative
    np.testing.assert_allclose(loss.item(), -np.log(p[np.arange(8), ys]).mean(), rtol=2e-3)
    np.testing.assert_allclose(norm.item(), ref_norm, rtol=5e-3)
    np.testing.assert_allclose(model[0].weight.detach().numpy(), w0 - 0.5 * coef * gw, rtol=5e-3, atol=5e-4)
    np.testing.assert_allclose(model[0].bias.detach().numpy(), b0 - 0.5 * coef * gb, rtol=5e-3, atol=5e-4)
    assert out.dtype == torch.float16 and loss.dtype == torch.float32
    assert scaler.get_scale() == 2.0 ** 8


def test_torch_cuda_amp_spellings_are_torch_amps_with_pytorchs_deprecation_warning() -> None:
    """nanoGPT's ``torch.cuda.amp.GradScaler(enabled=...)`` ports by the import: ``ta.amp``'s CUDA scaler."""
    with pytest.warns(FutureWarning, match=r"torch\.cuda\.amp\.GradScaler\(args\.\.\.\)` is deprecated"):
        scaler = torch.cuda.amp.GradScaler(init_scale=1024.0, growth_interval=7, enabled=False)
    assert isinstance(scaler, torch.amp.GradScaler) and scaler.device == "cuda" and not scaler.is_enabled()
    assert scaler.get_growth_interval() == 7
    with pytest.warns(FutureWarning, match=r"torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated"), \
            warnings.catch_warnings():
        # Without a GPU autocast("cuda") also warns that it disables itself, as PyTorch's does: not this test's.
        warnings.filterwarnings("ignore", "User provided device_type of 'cuda', but CUDA is not available")
        region = torch.cuda.amp.autocast(dtype=torch.bfloat16)
    assert isinstance(region, torch.amp.autocast)
    assert (region.device_type, region.fast_dtype) == ("cuda", torch.bfloat16)
    assert torch.cuda.amp.custom_fwd is torch.amp.custom_fwd
