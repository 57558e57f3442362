"""End to end: small models train to near-zero loss with SGD and Adam (the core-engine acceptance).

Written against PyTorch's API (``model(x)``, ``loss.backward()``, ``opt.step()``,
``opt.zero_grad()``), so each loop is what a PyTorch user would write.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
import tinyamp.nn as nn


def _blobs(n: int = 128) -> tuple[ta.Tensor, ta.Tensor]:
    """Two well separated Gaussian blobs in 2-D: a linearly separable 2-class problem."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=n)
    centers = np.array([[-2.0, -2.0], [2.0, 2.0]])
    points = centers[labels] + 0.5 * rng.standard_normal((n, 2))
    return ta.tensor(points.astype(np.float32)), ta.tensor(labels)


def _bars(n: int = 64) -> tuple[ta.Tensor, ta.Tensor]:
    """8x8 images with a vertical (class 0) or horizontal (class 1) bar at a random place, plus noise."""
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, size=n)
    images = 0.1 * rng.standard_normal((n, 1, 8, 8))
    for i, (label, pos) in enumerate(zip(labels, rng.integers(1, 7, size=n))):
        if label == 0:
            images[i, 0, 1:7, pos] += 1.0
        else:
            images[i, 0, pos, 1:7] += 1.0
    return ta.tensor(images.astype(np.float32)), ta.tensor(labels)


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))


def _cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 4 * 4, 2))


def _train(model: nn.Module, optimizer, x: ta.Tensor, y: ta.Tensor, steps: int) -> list[float]:
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses


def _accuracy(model: nn.Module, x: ta.Tensor, y: ta.Tensor) -> float:
    with ta.no_grad():
        predicted = model(x).numpy().argmax(axis=1)
    return float((predicted == y.numpy()).mean())


OPTIMIZERS = {
    "sgd": lambda params: ta.optim.SGD(params, lr=0.1, momentum=0.9),
    "adam": lambda params: ta.optim.Adam(params, lr=0.02),
}


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_mlp_trains_to_near_zero_loss(optimizer) -> None:
    x, y = _blobs()
    model = _mlp()
    losses = _train(model, OPTIMIZERS[optimizer](model.parameters()), x, y, steps=150)
    assert losses[0] > 0.3  # it starts far from the optimum, so the end point means something
    assert losses[-1] < 0.02, losses[::10]
    assert _accuracy(model, x, y) == 1.0


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_cnn_trains_to_near_zero_loss(optimizer) -> None:
    x, y = _bars()
    model = _cnn()
    losses = _train(model, OPTIMIZERS[optimizer](model.parameters()), x, y, steps=150)
    assert losses[0] > 0.5
    assert losses[-1] < 0.05, losses[::10]
    assert _accuracy(model, x, y) == 1.0


def test_checkpoint_resume_continues_identically(tmp_path) -> None:
    """Save model and optimizer state mid-run, load them into fresh objects, continue: same losses."""
    x, y = _blobs()
    model = _mlp()
    opt = ta.optim.Adam(model.parameters(), lr=0.02)
    _train(model, opt, x, y, steps=10)
    ta.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 10}, tmp_path / "ckpt.ta")
    expected = _train(model, opt, x, y, steps=10)

    checkpoint = ta.load(tmp_path / "ckpt.ta")
    resumed = _mlp()
    resumed.load_state_dict(checkpoint["model"])
    resumed_opt = ta.optim.Adam(resumed.parameters(), lr=0.02)
    resumed_opt.load_state_dict(checkpoint["optim"])
    assert checkpoint["step"] == 10
    assert _train(resumed, resumed_opt, x, y, steps=10) == expected
