"""An fp8 training step captured by ``ta.cuda.make_graphed_step`` equals the eager step bit for bit.

On the CUDA stand-in the capture refuses every host sync and host copy, so
this also proves the fp8 step capture-safe: the quantisers' amaxes, scales and
histories, the scale updates at the region boundaries and the fp8 weight cache
all live on the device. Every recipe: delayed scaling's state moves between
steps, so a replay that froze a scale would drift from the eager run.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tests.support.fp8_training import fp8_step
from tinyamp.amp import recipe as R
from tinyamp.data import load_mnist

STEPS = 8


def _batches() -> list:
    images, labels = load_mnist(flatten=True, normalize=True)
    return [(ta.tensor(images[k * 32:(k + 1) * 32].copy(), device="cuda"),
             ta.tensor(labels[k * 32:(k + 1) * 32], device="cuda")) for k in range(STEPS)]


def _train(make_recipe, batches: list, graphed: bool) -> tuple:
    ta.manual_seed(0)
    model = ta.nn.Sequential(ta.nn.Linear(784, 32), ta.nn.ReLU(), ta.nn.Linear(32, 10)).to("cuda")
    opt = ta.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    recipe = make_recipe()

    def train_step(x, y):
        return fp8_step(model, opt, recipe, x, y)

    step = ta.cuda.make_graphed_step(train_step, batches[0], num_warmup_iters=2) if graphed else train_step
    losses = [step(x, y).item() for x, y in batches]
    if graphed:
        assert step.captured
    scales = [q.scale.get() for m in model.modules() if "_fp8_meta" in m.__dict__
              for q in m._fp8_meta[1].values() if getattr(q, "scale", None) is not None]
    return np.array(losses), [p.detach().float().cpu().numpy() for p in model.parameters()], scales


@pytest.mark.parametrize("make_recipe", [lambda: R.DelayedScaling(amax_history_len=3), R.Float8CurrentScaling,
                                         lambda: R.Float8BlockScaling(block=32), R.MXFP8BlockScaling],
                         ids=["delayed", "current", "block", "mxfp8"])
def test_graphed_fp8_training_follows_eager_training_bit_for_bit(cuda_backend, make_recipe) -> None:
    batches = _batches()
    eager = _train(make_recipe, batches, graphed=False)
    R.update_pending_backward()
    graphed = _train(make_recipe, batches, graphed=True)
    np.testing.assert_array_equal(graphed[0], eager[0])
    for got, want in zip(graphed[1], eager[1]):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(graphed[2], eager[2]):
        np.testing.assert_array_equal(got, want)
    if make_recipe().delayed():
        assert len(eager[2]) == 6 and len({float(s[0]) for s in eager[2]}) > 1  # the scales moved
