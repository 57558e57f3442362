"""``Module.register_full_backward_hook`` / ``register_full_backward_pre_hook`` against PyTorch.

``REF`` was produced once by torch 2.13.0 (CPU) with the same modules, weights, inputs and hooks
as below: the grad_input/grad_output tuples the hooks saw, the gradients after a hook replaced
them, the order the hooks ran in, and the error messages.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tinyamp import nn

W = [[0.5, -1.0, 0.25], [1.5, 0.75, -0.5]]
B = [0.1, -0.2]
X = [[1.0, 2.0, -1.0], [0.5, -0.5, 3.0]]

REF = {'bad_count': 'RuntimeError: Backward hook returned an invalid number of grad_input, got 2, but expected 1',
 'no_input_grad': {'gi': [True]},
 'no_input_replace': 'RuntimeError: Backward hook for Modules where no input requires gradient should always '
                     'return None or None for all gradients.',
 'pre': {'order': ['pre',
                   ['full',
                    [[-9.899999618530273, 19.799999237060547], [9.600000381469727, -7.950000286102295]]]],
         'wgrad': [[-5.09999942779541, -24.599998474121094, 38.70000076293945],
                   [15.82499885559082, 43.57499694824219, -43.650001525878906]],
         'xgrad': [[24.75, 24.75, -12.375], [-7.125, -15.5625, 6.375]]},
 'record': {'gi': [[[3.5, 0.5, -0.75], [7.5, 0.0, -1.25]]],
            'go': [[[1.0, 2.0], [3.0, 4.0]]],
            'wgrad': [[2.5, 0.5, 8.0], [4.0, 2.0, 10.0]],
            'xgrad': [[3.5, 0.5, -0.75], [7.5, 0.0, -1.25]]},
 'removed_calls': 0,
 'replace_input': {'wgrad': [[-1.6999999284744263, -8.199999809265137, 12.90000057220459],
                             [5.274999618530273, 14.524999618530273, -14.550000190734863]],
                   'xgrad': [[16.5, 16.5, -8.25], [-4.75, -10.375, 4.25]]},
 'two': {'gi': [[5.0, 5.0], None, [3.0, -5.0]], 'go': [[1.0, 1.0], [3.0, 3.0]]}}


def lin() -> nn.Linear:
    m = nn.Linear(3, 2)
    with ta.no_grad():
        m.weight.copy_(ta.tensor(W))
        m.bias.copy_(ta.tensor(B))
    return m


def close(got, want) -> None:
    np.testing.assert_allclose(np.asarray(got.numpy() if isinstance(got, ta.Tensor) else got, np.float64),
                               np.asarray(want, np.float64), rtol=1e-6, atol=1e-6)


def test_the_hook_sees_grad_input_and_grad_output() -> None:
    m, seen = lin(), {}

    def hook(module, grad_input, grad_output):
        assert module is m and isinstance(grad_input, tuple) and isinstance(grad_output, tuple)
        seen["gi"], seen["go"] = grad_input, grad_output

    handle = m.register_full_backward_hook(hook)
    x = ta.tensor(X, requires_grad=True)
    (m(x) * ta.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    want = REF["record"]
    assert len(seen["gi"]) == len(want["gi"]) and len(seen["go"]) == len(want["go"])
    close(seen["gi"][0], want["gi"][0])
    close(seen["go"][0], want["go"][0])
    close(x.grad, want["xgrad"])
    close(m.weight.grad, want["wgrad"])
    handle.remove()


def test_a_returned_grad_input_replaces_the_gradient() -> None:
    m = lin()
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 2,))
    x = ta.tensor(X, requires_grad=True)
    (m(x) ** 2).sum().backward()
    close(x.grad, REF["replace_input"]["xgrad"])
    close(m.weight.grad, REF["replace_input"]["wgrad"])  # the parameters' gradients are not the hook's


def test_a_pre_hook_replaces_grad_output_before_the_module_and_the_hook_see_it() -> None:
    m, order = lin(), []

    def pre(module, grad_output):
        order.append("pre")
        return (grad_output[0] * 3,)

    m.register_full_backward_pre_hook(pre)
    m.register_full_backward_hook(lambda mod, gi, go: order.append(("full", go[0].numpy().tolist())))
    x = ta.tensor(X, requires_grad=True)
    (m(x) ** 2).sum().backward()
    want = REF["pre"]
    close(x.grad, want["xgrad"])
    close(m.weight.grad, want["wgrad"])
    assert order[0] == "pre" and order[1][0] == "full"
    close(order[1][1], want["order"][1][1])


def test_with_no_input_requiring_grad_the_hook_fires_at_the_outputs() -> None:
    m, seen = lin(), {}
    m.register_full_backward_hook(lambda mod, gi, go: seen.update(gi=[g is None for g in gi]))
    with pytest.warns(UserWarning, match="Full backward hook is firing when gradients are computed with respect "
                                         "to module outputs since no inputs require gradients"):
        (m(ta.tensor(X)) ** 2).sum().backward()
    assert seen == REF["no_input_grad"]
    assert m.weight.grad is not None
    m2 = lin()
    m2.register_full_backward_hook(lambda mod, gi, go: (ta.ones(1),))
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="Backward hook for Modules where no input "
                                                                     "requires gradient should always return None"):
        m2(ta.tensor(X)).sum().backward()
    assert REF["no_input_replace"].startswith("RuntimeError: Backward hook for Modules where no input requires")


def test_handles_remove_and_prepend() -> None:
    m, calls = lin(), []
    h = m.register_full_backward_hook(lambda *a: calls.append("a"))
    m.register_full_backward_hook(lambda *a: calls.append("b"))
    m.register_full_backward_hook(lambda *a: calls.append("c"), prepend=True)
    h.remove()
    m(ta.tensor(X, requires_grad=True)).sum().backward()
    assert calls == ["c", "b"]
    assert REF["removed_calls"] == 0


def test_several_inputs_and_outputs_are_tuples_with_none_for_non_tensors() -> None:
    class Two(nn.Module):
        def forward(self, a, k, b):
            return a * k + b * b, a - b

    t, seen = Two(), {}
    t.register_full_backward_hook(lambda mod, gi, go: seen.update(gi=gi, go=go))
    a = ta.tensor([1.0, 2.0], requires_grad=True)
    b = ta.tensor([3.0, -1.0], requires_grad=True)
    y1, y2 = t(a, 2.0, b)
    (y1.sum() + (y2 * 3).sum()).backward()
    want = REF["two"]
    assert seen["gi"][1] is None and want["gi"][1] is None
    close(seen["gi"][0], want["gi"][0])
    close(seen["gi"][2], want["gi"][2])
    close(seen["go"][0], want["go"][0])
    close(seen["go"][1], want["go"][1])


def test_a_wrong_number_of_gradients_is_pytorchs_error() -> None:
    m = lin()
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="Backward hook returned an invalid number of grad_input, got 2, but "
                                           "expected 1"):
        m(ta.tensor(X, requires_grad=True)).sum().backward()
    assert REF["bad_count"].startswith("RuntimeError: Backward hook returned an invalid number of grad_input, got 2")


def test_hooks_on_a_submodule_under_autocast_see_16_bit_gradients() -> None:
    """Forum/fastai activation-gradient hooks: a hook on each layer of a Sequential, AMP on."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    seen = []
    for layer in model:
        layer.register_full_backward_hook(lambda mod, gi, go: seen.append((type(mod).__name__, go[0].dtype)))
    x = ta.randn(3, 4, requires_grad=True)
    with ta.autocast("cpu", dtype=ta.float16):
        loss = model(x).float().sum()
    loss.backward()
    assert [name for name, _ in seen] == ["Linear", "ReLU", "Linear"]
    assert all(dtype == ta.float16 for _, dtype in seen)
    assert x.grad is not None and x.grad.dtype == ta.float32
