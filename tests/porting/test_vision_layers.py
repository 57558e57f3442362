"""The porting wing's vision layers and norms beyond the numbers (those are in tests/nn/test_modules_vs_torch.py).

Errors, reprs and state_dict keys against PyTorch 2.13's recorded answers
(tests/support/porting_cases.py); the precision tags PyTorch's CUDA autocast lists give;
``init.orthogonal_``; ``SyncBatchNorm.convert_sync_batchnorm``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tinyamp as ta
from tests.support.porting_refs import check
from tinyamp.precision import FP32, NEUTRAL


@pytest.mark.parametrize("name", ["vision_errors", "vision_reprs", "norm_state_dicts"])
def test_vision_case_matches_pytorch(name: str) -> None:
    check(name)


def test_precision_tags_follow_pytorchs_cuda_lists() -> None:
    from tinyamp.ops.normalization import InstanceNorm
    from tinyamp.ops.upsample import Interpolate, InterpolateGrad
    assert Interpolate.precision == InterpolateGrad.precision == FP32  # upsample_* are on the float32 list
    assert InstanceNorm.precision == NEUTRAL  # instance_norm is on no list: the input's dtype
    x = ta.ones(1, 2, 3, 3, dtype=ta.float16, requires_grad=True)
    with ta.autocast("cpu", dtype=ta.float16):
        assert ta.nn.functional.interpolate(x, scale_factor=2).dtype == ta.float32
        assert ta.nn.InstanceNorm2d(2, affine=True)(x).dtype == ta.float16


def test_interpolate_rounds_16_bit_once_and_keeps_dtype(device: str) -> None:
    x64 = np.random.default_rng(0).uniform(-4, 4, (2, 3, 5, 4))
    x = ta.tensor(x64, dtype=ta.float16, device=device, requires_grad=True)
    y = ta.nn.functional.interpolate(x, size=(9, 7), mode="bicubic")
    exact = ta.nn.functional.interpolate(ta.tensor(x.detach().float().numpy()), size=(9, 7), mode="bicubic").numpy()
    assert y.dtype == ta.float16
    np.testing.assert_array_equal(y.detach().numpy(), exact.astype(np.float16))  # float32 compute, one rounding
    y.float().sum().backward()
    assert x.grad.dtype == ta.float16 and x.grad.shape == x.shape


def test_area_mode_keeps_an_inf_inside_its_window() -> None:
    x = ta.zeros(1, 1, 1, 5)
    x[0, 0, 0, 4] = float("inf")
    y = ta.nn.functional.interpolate(x, size=(1, 2), mode="area").numpy().ravel()
    assert y[0] == 0 and y[1] == np.inf  # windows [0, 3) and [2, 5): the padded taps add nothing


def test_interpolate_double_backward() -> None:
    x = ta.tensor(np.random.default_rng(1).uniform(-1, 1, (1, 2, 3, 4)), dtype=ta.float64, requires_grad=True)
    assert ta.autograd.gradcheck(lambda t: ta.nn.functional.interpolate(t, scale_factor=1.5, mode="bilinear"), (x,))
    assert ta.autograd.gradgradcheck(lambda t: ta.nn.functional.interpolate(t, size=(5, 2), mode="area") ** 2, (x,))


def test_instance_norm_warns_when_features_do_not_match_without_affine() -> None:
    with pytest.warns(UserWarning, match="input's size at dim=1 does not match num_features"):
        ta.nn.InstanceNorm2d(3)(ta.randn(2, 4, 3, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ta.nn.InstanceNorm2d(4)(ta.randn(2, 4, 3, 3))


@pytest.mark.parametrize("shape, gain", [((3, 5), 2.0), ((6, 2, 2), 1.0), ((4, 4), 0.5)])
def test_orthogonal_init(shape: tuple, gain: float, device: str) -> None:
    ta.manual_seed(0)
    w = ta.empty(*shape, device=device)
    assert ta.nn.init.orthogonal_(w, gain=gain) is w
    a = w.numpy().reshape(shape[0], -1)
    small = a @ a.T if a.shape[0] <= a.shape[1] else a.T @ a
    np.testing.assert_allclose(small, gain ** 2 * np.eye(len(small)), atol=1e-5)
    ta.manual_seed(0)
    again = ta.nn.init.orthogonal_(ta.empty(*shape, device=device), gain=gain)
    np.testing.assert_array_equal(again.numpy(), w.numpy())


def test_convert_sync_batchnorm_keeps_tensors_and_refuses_many_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    model = ta.nn.Sequential(ta.nn.Conv2d(1, 2, 3), ta.nn.BatchNorm2d(2), ta.nn.Sequential(ta.nn.BatchNorm1d(2)))
    weight, mean = model[1].weight, model[1].running_mean
    converted = ta.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert type(converted[1]) is ta.nn.SyncBatchNorm and type(converted[2][0]) is ta.nn.SyncBatchNorm
    assert converted[1].weight is weight and converted[1].running_mean is mean
    assert isinstance(converted[1], ta.nn.modules.batchnorm._BatchNorm)
    from tinyamp.distributed import process_group as pg
    monkeypatch.setattr(pg, "is_initialized", lambda: True)
    monkeypatch.setattr(pg, "get_world_size", lambda group=None: 2)
    with pytest.raises(NotImplementedError, match="SyncBatchNorm: synchronising batch statistics over 2"):
        converted[1](ta.randn(2, 2, 3, 3))
    converted.eval()(ta.randn(2, 1, 5, 5))  # eval uses the running statistics: nothing to synchronise
