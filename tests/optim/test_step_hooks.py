"""The optimizer's step hooks (PyTorch's ``register_step_pre_hook``/``register_step_post_hook`` and the global
``register_optimizer_step_pre_hook``/``..._post_hook``) and what the base class no longer carries."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.optim import optimizer as optimizer_module


def _sgd(lr: float = 0.5) -> tuple:
    p = ta.nn.Parameter(ta.ones(3))
    p.grad = ta.ones(3)
    return p, ta.optim.SGD([p], lr=lr)


def test_hooks_run_in_pytorchs_order_and_their_handles_remove_them() -> None:
    p, opt = _sgd()
    seen = []
    handles = [
        optimizer_module.register_optimizer_step_pre_hook(lambda o, a, k: seen.append(("global pre", o))),
        opt.register_step_post_hook(lambda o, a, k: seen.append(("post", float(p.array[0])))),
        opt.register_step_pre_hook(lambda o, a, k: seen.append(("pre", float(p.array[0])))),
        optimizer_module.register_optimizer_step_post_hook(lambda o, a, k: seen.append(("global post", o))),
    ]
    opt.step()
    assert seen == [("global pre", opt), ("pre", 1.0), ("post", 0.5), ("global post", opt)]
    for handle in handles:
        handle.remove()
    seen.clear()
    opt.step()
    assert seen == [] and p.array[0] == 0.0


def test_a_pre_hook_may_replace_the_arguments_and_is_told_them() -> None:
    p, opt = _sgd()
    told = []
    opt.register_step_pre_hook(lambda o, args, kwargs: ((), {"found_inf": ta.tensor([1.0])}))
    opt.register_step_post_hook(lambda o, args, kwargs: told.append((args, sorted(kwargs))))
    opt.step()
    assert p.array[0] == 1.0  # the hook's found_inf skipped the step
    assert told == [((), ["found_inf"])]


def test_a_pre_hook_returning_something_else_is_refused_with_pytorchs_message() -> None:
    _, opt = _sgd()
    opt.register_step_pre_hook(lambda o, args, kwargs: 3)
    with pytest.raises(RuntimeError, match=r"must return None or a tuple of \(new_args, new_kwargs\), but got 3"):
        opt.step()


class _OwnStep(ta.optim.SGD):
    """A step written by a subclass (PyTorch's hooks wrap it too), calling the base step once."""

    calls = 0

    def step(self, closure=None):
        type(self).calls += 1
        return super().step(closure)


def test_a_step_a_subclass_writes_runs_each_hook_once() -> None:
    p = ta.nn.Parameter(ta.ones(2))
    p.grad = ta.ones(2)
    opt = _OwnStep([p], lr=0.25)
    seen = []
    opt.register_step_pre_hook(lambda o, a, k: seen.append("pre"))
    opt.register_step_post_hook(lambda o, a, k: seen.append("post"))
    with opt.register_step_pre_hook(lambda o, a, k: seen.append("scoped")):  # a handle is a context manager
        opt.step()
    opt.step()
    assert seen == ["pre", "scoped", "post", "pre", "post"] and _OwnStep.calls == 2
    np.testing.assert_array_equal(p.array, [0.5, 0.5])


def test_the_base_is_groups_state_masters_and_the_contract() -> None:
    """No study instrument as a base class (swamping attaches through the hooks), and a short step."""
    assert ta.optim.Optimizer.__mro__ == (ta.optim.Optimizer, object)
    step = inspect.unwrap(ta.optim.Optimizer.step)
    lines = inspect.getsource(step).rstrip("\n").splitlines()
    assert len(lines) - 1 <= 30, f"Optimizer.step is {len(lines) - 1} lines"  # without the hooks' decorator line
    p, opt = _sgd()
    opt.track_swamping()
    assert len(opt._step_pre_hooks) == len(opt._step_post_hooks) == 1
    opt.track_swamping(False)
    assert not opt._step_pre_hooks and not opt._step_post_hooks
