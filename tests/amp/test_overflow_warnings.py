"""An overflowing AMP step is silent, as in PyTorch; the user's own NumPy code still warns (issue 12, item 7).

Inf and nan in a float16 step are expected: the scaler finds them and skips the
step. NumPy would print "overflow encountered", "invalid value encountered" and
"divide by zero" RuntimeWarnings for them. tinyamp runs its AMP machinery
(autocast regions, backward, GradScaler, optimizer steps, gradient clipping)
under ``np.errstate(all="ignore")``, entered once per call, never by changing
NumPy's global state.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tinyamp as ta
import tinyamp.nn as nn
import tinyamp.nn.functional as F


def _model() -> nn.Module:
    ta.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def _params(model: nn.Module) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("where", ["forward", "backward"])
@pytest.mark.parametrize("clip", [False, True])
def test_an_overflowing_amp_step_emits_no_warning(where: str, clip: bool, device: str) -> None:
    model = _model().to(device)
    opt = ta.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    # forward: inputs whose float16 activations overflow (inf, then inf - inf = nan in the loss's
    # gradient). backward: a finite forward, but a scale that overflows every float16 gradient.
    scale = 2.0 ** 16 if where == "forward" else 2.0 ** 100
    scaler = ta.amp.GradScaler(device, init_scale=scale)
    x = ta.full((5, 4), 6e4 if where == "forward" else 1.0, device=device)
    x[0] = -6e4 if where == "forward" else -1.0
    y = ta.zeros(5, 3, device=device)
    before = _params(model)
    errors_before = np.geterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        with ta.autocast(device, dtype=ta.float16):
            out = model(x)
            loss = F.mse_loss(out, y)
        finite_forward = np.isfinite(out.detach().float().cpu().numpy()).all()
        assert finite_forward == (where == "backward")
        scaler.scale(loss).backward()
        assert not all(np.isfinite(p.grad.cpu().numpy()).all() for p in model.parameters())
        if clip:
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # inf norm: 0 * inf = nan, quietly
        scaler.step(opt)
        scaler.update()
    assert scaler.get_scale() == scale / 2  # the step was skipped and the scale backed off
    for old, new in zip(before, _params(model)):
        np.testing.assert_array_equal(old, new)
    assert np.geterr() == errors_before  # NumPy's state is untouched


def test_the_users_own_numpy_code_still_warns() -> None:
    with ta.autocast("cpu", dtype=ta.float16):
        loss = (ta.full((2,), 6e4, requires_grad=True).half() * 2).float().sum()
    loss.backward()
    assert loss.item() == float("inf")
    with pytest.warns(RuntimeWarning, match="overflow"):
        np.float16(6e4) * np.float16(2)
    with pytest.warns(RuntimeWarning, match="divide by zero"):
        np.log(np.zeros(1))


def test_an_exception_inside_a_region_restores_numpys_state() -> None:
    errors_before = np.geterr()
    with pytest.raises(ZeroDivisionError):
        with ta.autocast("cpu", dtype=ta.float16):
            1 / 0
    assert np.geterr() == errors_before
    with pytest.warns(RuntimeWarning, match="invalid value"):
        np.sqrt(-np.ones(1))
