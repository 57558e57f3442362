"""optim.LBFGS against PyTorch 2.13's recorded trajectories (tests/support/porting_cases.py): the Rosenbrock function
with and without the strong-Wolfe line search, and pytorch/examples' LSTMCell sequence model."""

from __future__ import annotations

import pytest

import tinyamp as ta
from tests.support.porting_refs import REFS, check


@pytest.mark.parametrize("name", ["lbfgs_rosenbrock_strong_wolfe", "lbfgs_rosenbrock_fixed_step", "lbfgs_errors"])
def test_lbfgs_matches_pytorch(name: str) -> None:
    check(name)


def test_lbfgs_sequence_model_follows_pytorch() -> None:
    from tests.support.porting_cases import CASES
    ours = CASES["lbfgs_sequence_model"](ta)["losses"]
    theirs = REFS["lbfgs_sequence_model"]["losses"]
    # float64 on both sides; the LSTM's gate sums and BLAS dot products round in another order
    assert ours == pytest.approx(theirs, rel=1e-7, abs=1e-9)
    assert theirs[-1] < 0.5 * theirs[0]


def test_lbfgs_refuses_amp_arguments_and_its_state_holds_the_history() -> None:
    p = ta.tensor([3.0, -1.0], requires_grad=True)
    opt = ta.optim.LBFGS([p], history_size=2)

    def closure():
        opt.zero_grad()
        loss = ((p - 1) ** 2).sum() + (p[0] * p[1]) ** 2
        loss.backward()
        return loss

    opt.step(closure)
    state = opt.state[p]
    assert len(state["old_dirs"]) <= 2 and state["n_iter"] >= 1
    with pytest.raises(TypeError, match="no AMP arguments"):
        opt.step(closure, found_inf=ta.zeros(1))
