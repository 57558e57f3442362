"""``optim.swa_utils`` (AveragedModel, SWALR, update_bn, the avg-fn factories) and
``lr_scheduler.SequentialLR``/``ChainedScheduler`` against PyTorch.

``tests/support/swa_torch_2_13_0.json`` holds torch 2.13.0's values for the same cases: the learning
rate after each step, the averaged models' state_dicts (keys, dtypes, values) after three
updates of a model perturbed the same way, and update_bn's statistics.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tinyamp as ta
from tinyamp import nn
from tinyamp.optim.lr_scheduler import (ChainedScheduler, CosineAnnealingLR, ExponentialLR, LinearLR, MultiStepLR,
                                        SequentialLR, StepLR)
from tinyamp.optim.swa_utils import (SWALR, AveragedModel, get_ema_avg_fn, get_ema_multi_avg_fn, get_swa_avg_fn,
                                     get_swa_multi_avg_fn, update_bn)
from tests.support import SUPPORT

REF = json.loads((SUPPORT / "swa_torch_2_13_0.json").read_text())


def opt(lr: float = 0.1) -> ta.optim.SGD:
    return ta.optim.SGD([nn.Parameter(ta.zeros(1))], lr=lr)


def lrs(sched, o, n: int) -> list:
    seq = [o.param_groups[0]["lr"]]
    for _ in range(n):
        o.step()
        sched.step()
        seq.append(o.param_groups[0]["lr"])
    return seq


@pytest.mark.parametrize("strategy", ["cos", "linear"])
@pytest.mark.parametrize("anneal_epochs", [0, 1, 3])
def test_swalr_matches_pytorch(strategy: str, anneal_epochs: int) -> None:
    o = opt(0.5)
    s = SWALR(o, swa_lr=0.05, anneal_epochs=anneal_epochs, anneal_strategy=strategy)
    np.testing.assert_allclose(lrs(s, o, 6), REF[f"swalr_{strategy}_{anneal_epochs}"], rtol=1e-12)


def test_swalr_errors() -> None:
    with pytest.raises(ValueError, match=REF["swalr_bad_strategy"].split(": ", 1)[1]):
        SWALR(opt(), 0.1, anneal_strategy="x")
    with pytest.raises(ValueError, match=REF["swalr_bad_epochs"].split(": ", 1)[1]):
        SWALR(opt(), 0.1, anneal_epochs=-1)


def test_sequential_lr_matches_pytorch() -> None:
    o = opt(1.0)
    s = SequentialLR(o, [LinearLR(o, start_factor=0.1, total_iters=3), ExponentialLR(o, gamma=0.9)], milestones=[3])
    np.testing.assert_allclose(lrs(s, o, 7), REF["seq_linear_exp"], rtol=1e-12)
    o = opt(1.0)
    s = SequentialLR(o, [LinearLR(o, start_factor=0.5, total_iters=2), StepLR(o, step_size=2, gamma=0.5),
                         CosineAnnealingLR(o, T_max=4)], milestones=[2, 5])
    np.testing.assert_allclose(lrs(s, o, 10), REF["seq_three"], rtol=1e-12, atol=1e-15)


def test_sequential_lr_state_dict_resumes() -> None:
    def make():
        o = opt(1.0)
        return o, SequentialLR(o, [LinearLR(o, start_factor=0.1, total_iters=3), ExponentialLR(o, gamma=0.9)],
                               milestones=[3])
    o, s = make()
    for _ in range(4):
        o.step()
        s.step()
    state = s.state_dict()
    assert sorted(state) == REF["seq_state_keys"] and s.last_epoch == REF["seq_last_epoch"]
    o2, s2 = make()
    s2.load_state_dict(state)
    tail = lrs(s, o, 3)[1:]
    assert lrs(s2, o2, 3)[1:] == tail


def test_sequential_lr_errors() -> None:
    o = opt()
    with pytest.raises(ValueError, match="Sequential Schedulers expects number of schedulers provided to be one more "
                                         "than the number of milestone points, but got number of schedulers 2 and "
                                         "the number of milestones to be equal to 2"):
        SequentialLR(o, [LinearLR(o), ExponentialLR(o, 0.9)], milestones=[1, 2])
    assert REF["seq_bad_milestones"].startswith("ValueError: Sequential Schedulers expects number of schedulers")
    o2 = opt()
    with pytest.raises(ValueError, match="SequentialLR expects all schedulers to belong to the same optimizer"):
        SequentialLR(o, [LinearLR(o), ExponentialLR(o2, 0.9)], milestones=[1])


def test_chained_scheduler_matches_pytorch() -> None:
    o = opt(1.0)
    s = ChainedScheduler([LinearLR(o, start_factor=0.1, total_iters=3), ExponentialLR(o, gamma=0.9)])
    np.testing.assert_allclose(lrs(s, o, 6), REF["chained_linear_exp"], rtol=1e-12)
    o = opt(1.0)
    s = ChainedScheduler([StepLR(o, step_size=2, gamma=0.5), MultiStepLR(o, milestones=[3, 5], gamma=0.1)],
                         optimizer=o)
    np.testing.assert_allclose(lrs(s, o, 7), REF["chained_step_multistep"], rtol=1e-12)


def model() -> nn.Sequential:
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    with ta.no_grad():
        for i, p in enumerate(m.parameters()):
            p.copy_(ta.linspace(-1, 1, p.numel()).reshape(p.shape) * (i + 1))
    return m


def perturb(m: nn.Sequential, k: int) -> None:
    with ta.no_grad():
        for p in m.parameters():
            p.add_(ta.linspace(0, 1, p.numel(), device=p.device).reshape(p.shape) * (k + 1) * 0.1)
        m[1].running_mean.add_(0.5 * (k + 1))
        m[1].running_var.mul_(1.5)
        m[1].num_batches_tracked.add_(1)


AVERAGES = {"swa": {}, "ema": dict(multi_avg_fn=get_ema_multi_avg_fn(0.9)), "ema_avg": dict(avg_fn=get_ema_avg_fn(0.9)),
            "swa_avg": dict(avg_fn=get_swa_avg_fn()), "swa_multi": dict(multi_avg_fn=get_swa_multi_avg_fn()),
            "ema_buffers": dict(multi_avg_fn=get_ema_multi_avg_fn(0.9), use_buffers=True)}


@pytest.mark.parametrize("name", sorted(AVERAGES))
def test_averaged_model_matches_pytorch(device: str, name: str) -> None:
    m = model().to(device)
    avg = AveragedModel(m, **AVERAGES[name])
    for k in range(3):
        perturb(m, k)
        avg.update_parameters(m)
    state = avg.state_dict()
    assert list(state) == REF["avg_keys_" + name]  # n_averaged, then module.<name>
    assert {k: "torch." + ta.dtypes.dtype_name(v.dtype) for k, v in state.items()} == REF["avg_dtypes_" + name]
    for key, value in state.items():
        np.testing.assert_allclose(value.detach().cpu().numpy(), REF["avg_" + name][key], rtol=2e-6, atol=1e-6, err_msg=key)
    # the average is a model: its forward is the copy's
    x = ta.randn(5, 3, device=device)
    avg.eval()
    assert avg(x).shape == (5, 2)


def test_averaged_model_is_a_copy_and_takes_a_device() -> None:
    m = model()
    avg = AveragedModel(m, device="cpu")
    assert avg.module is not m and avg.module[0].weight is not m[0].weight
    with pytest.raises(AssertionError, match="Only one of avg_fn and multi_avg_fn should be provided"):
        AveragedModel(m, avg_fn=get_swa_avg_fn(), multi_avg_fn=get_swa_multi_avg_fn())
    with pytest.raises(ValueError, match=r"Invalid decay value 1.5 provided. Please provide a value in \[0,1\] range."):
        get_ema_multi_avg_fn(1.5)


def test_ema_of_an_o2_model_keeps_the_averages_dtype() -> None:
    """An EMA kept in float32 over float16 weights: each update rounds once into the float32 average."""
    m = model()
    avg = AveragedModel(m, multi_avg_fn=get_ema_multi_avg_fn(0.5))
    m.half()
    avg.update_parameters(m)
    assert avg.module[0].weight.dtype == ta.float32
    np.testing.assert_array_equal(avg.module[0].weight.detach().numpy(), m[0].weight.detach().float().numpy())


def test_update_bn_matches_pytorch() -> None:
    m = model()
    m.train()
    xs = [ta.linspace(-2, 2, 15).reshape(5, 3) * (i + 1) + i for i in range(3)]
    update_bn([(x, ta.zeros(5)) for x in xs], m)
    want = REF["update_bn"]
    bn = m[1]
    np.testing.assert_allclose(bn.running_mean.numpy(), want["running_mean"], rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), want["running_var"], rtol=1e-5)
    assert bn.num_batches_tracked.item() == want["num_batches_tracked"]
    assert bn.momentum == want["momentum"] and m.training == want["training"]
    update_bn([ta.zeros(2, 3)], nn.Linear(3, 2))  # no BatchNorm: nothing to do


def test_the_swa_docs_loop_runs_unchanged() -> None:
    """The loop of PyTorch's swa_utils documentation, with AMP."""
    ta.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = ta.optim.SGD(m.parameters(), lr=0.1)
    swa_model = AveragedModel(m)
    scheduler = CosineAnnealingLR(optimizer, T_max=4)
    swa_start, swa_scheduler = 2, SWALR(optimizer, swa_lr=0.05)
    loader = [(ta.randn(6, 4), ta.randn(6, 1)) for _ in range(3)]
    for epoch in range(4):
        for x, y in loader:
            optimizer.zero_grad()
            with ta.autocast("cpu", dtype=ta.float16):
                loss = ta.nn.functional.mse_loss(m(x).float(), y)
            loss.backward()
            optimizer.step()
        if epoch > swa_start:
            swa_model.update_parameters(m)
            swa_scheduler.step()
        else:
            scheduler.step()
    update_bn(loader, swa_model)
    assert swa_model.n_averaged.item() == 1
    assert swa_model(loader[0][0]).shape == (6, 1)
