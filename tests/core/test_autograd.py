"""Engine tests: the tape, accumulation, higher order, hooks, freeing and errors."""

from __future__ import annotations

import gc
import sys
import threading
import weakref

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.autograd.function import Function
from tinyamp.precision import NEUTRAL


def test_reused_subexpression_accumulates() -> None:
    a = ta.tensor(3.0, requires_grad=True)
    b = a + a
    c = b + b
    c.backward()
    assert a.grad.item() == 4.0


def test_leaf_gradients_accumulate_across_backward_calls() -> None:
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0 + 3.0, 4.0 + 3.0])


def test_long_chain_has_no_recursion_limit() -> None:
    # Twice the interpreter's recursion limit (whatever it is set to), so a backward
    # that recursed once per node would raise RecursionError here.
    depth = 2 * sys.getrecursionlimit()
    x = ta.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(depth):
        y = y + 1.0
    y.backward()
    assert x.grad.item() == 1.0


def test_newton_method_with_create_graph() -> None:
    # f(x) = x^4 - 2x^2 + x; Newton on f' finds a stationary point f'(x) = 0.
    x = ta.tensor(2.0, dtype=ta.float64, requires_grad=True)
    for _ in range(20):
        y = x * x * x * x - 2.0 * x * x + x
        (gx,) = ta.autograd.grad(y, x, create_graph=True)
        (gxx,) = ta.autograd.grad(gx, x)
        with ta.no_grad():
            x.data = x.data - gx.data / gxx.data
    value = x.item()
    assert abs(4 * value**3 - 4 * value + 1) < 1e-12
    # second derivative at the solution, analytic 12x^2 - 4, matches what Newton used
    y = x * x * x * x - 2.0 * x * x + x
    (gx,) = ta.autograd.grad(y, x, create_graph=True)
    (gxx,) = ta.autograd.grad(gx, x)
    assert gxx.item() == pytest.approx(12 * value**2 - 4, rel=1e-12)


def test_gradient_penalty_matches_analytic() -> None:
    # L = sum((w * x)^2) ; dL/dx = 2 w^2 x ; P = ||dL/dx||^2 = sum(4 w^4 x^2)
    # dP/dw = 16 w^3 x^2
    rng = np.random.default_rng(0)
    w0, x0 = rng.standard_normal(5), rng.standard_normal(5)
    w = ta.tensor(w0, requires_grad=True)
    x = ta.tensor(x0, requires_grad=True)
    loss = ((w * x) * (w * x)).sum()
    (gx,) = ta.autograd.grad(loss, x, create_graph=True)
    penalty = (gx * gx).sum()
    penalty.backward()
    np.testing.assert_allclose(w.grad.numpy(), 16 * w0**3 * x0**2, rtol=1e-12)


def test_grad_does_not_touch_dot_grad() -> None:
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    (g,) = ta.autograd.grad((x * x).sum(), x)
    assert x.grad is None
    np.testing.assert_array_equal(g.numpy(), [2.0, 4.0])


def test_grad_of_intermediate_and_allow_unused() -> None:
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    z = ta.tensor([5.0], requires_grad=True)
    h = x * 3.0
    y = (h * h).sum()
    (gh,) = ta.autograd.grad(y, h, retain_graph=True)
    np.testing.assert_array_equal(gh.numpy(), [6.0, 12.0])
    with pytest.raises(RuntimeError, match="not have been used"):
        ta.autograd.grad(y, [x, z], retain_graph=True)
    gx, gz = ta.autograd.grad(y, [x, z], allow_unused=True)
    assert gz is None
    np.testing.assert_array_equal(gx.numpy(), [18.0, 36.0])


def test_hooks_on_leaf_and_intermediate() -> None:
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    h = x * 2.0
    h.register_hook(lambda g: seen.append(g.numpy().copy()))
    handle = x.register_hook(lambda g: g * 10.0)
    (h * h).sum().backward()
    np.testing.assert_array_equal(seen[0], [4.0, 8.0])
    np.testing.assert_array_equal(x.grad.numpy(), [80.0, 160.0])
    handle.remove()
    x.grad = None
    (x * 1.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0])


def test_hook_needs_requires_grad() -> None:
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        ta.tensor([1.0]).register_hook(lambda g: g)


def test_no_grad_records_nothing_and_is_thread_local() -> None:
    x = ta.tensor([1.0], requires_grad=True)
    with ta.no_grad():
        y = x * 2.0
        seen = {}
        thread = threading.Thread(target=lambda: seen.update(mode=ta.is_grad_enabled()))
        thread.start()
        thread.join()
        with ta.enable_grad():
            z = x * 2.0
    assert y.grad_fn is None and not y.requires_grad
    assert z.grad_fn is not None
    assert seen["mode"] is True
    ta.set_grad_enabled(False)
    assert not ta.is_grad_enabled()
    ta.set_grad_enabled(True)
    with ta.set_grad_enabled(False):
        assert not ta.is_grad_enabled()
    assert ta.is_grad_enabled()

    @ta.no_grad()
    def f(t):
        return t * 2.0

    assert f(x).grad_fn is None


def test_saved_tensor_modified_in_place_is_an_error() -> None:
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    y = h.exp()           # saves its output
    z = (h * h).sum()     # saves h
    with ta.no_grad():
        h.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()
    del y


def test_accumulating_into_grad_bumps_its_version() -> None:
    # .grad is written in place by the second backward; a graph that saved the
    # old .grad (here: as the other operand of a product) must refuse to use it.
    w = ta.tensor([1.0, 2.0], requires_grad=True)
    (w * 3.0).sum().backward()
    alias = w.grad
    version = alias._version[0]
    x = ta.tensor([1.0, 1.0], requires_grad=True)
    y = (x * alias).sum()           # saves alias for dx = gy * alias
    (w * 2.0).sum().backward()      # accumulates: w.grad += 2, in the same buffer
    assert w.grad is alias and alias._version[0] == version + 1
    np.testing.assert_array_equal(alias.numpy(), [5.0, 5.0])
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation: \[float32 \[2\]\] saved by Mul "
                                           r"is at version 1; expected version 0"):
        y.backward()


@pytest.mark.parametrize("op", [
    ta.exp, ta.sigmoid, ta.tanh, ta.sqrt,
    lambda h: ta.softmax(h, dim=0), lambda h: ta.log_softmax(h, dim=0),
], ids=["exp", "sigmoid", "tanh", "sqrt", "softmax", "log_softmax"])
def test_saved_output_modified_in_place_is_an_error(op) -> None:
    # These ops keep their output (not their input) for backward.
    x = ta.tensor([0.5, 2.0], requires_grad=True)
    y = op(x * 1.0)
    saved = y.grad_fn
    assert saved.save_outputs == (0,) and not saved.save_inputs
    y.mul_(2.0)                     # recorded in place: y's buffer (the saved output) changes
    with pytest.raises(RuntimeError, match=rf"modified by an inplace operation: \[float32 \[2\]\] saved by "
                                           rf"{type(saved).__name__} is at version 1; expected version 0"):
        y.sum().backward()


def test_saved_output_of_a_custom_function_modified_in_place_is_an_error() -> None:
    class Exp(ta.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, gy):
            (y,) = ctx.saved_tensors
            return gy * y

    x = ta.tensor([0.5, 2.0], requires_grad=True)
    y = Exp.apply(x)
    with ta.no_grad():
        y.mul_(2.0)
    with pytest.raises(RuntimeError, match=r"\[float32 \[2\]\] saved by Exp is at version 1; expected version 0"):
        y.sum().backward()
    # Unmodified, the same Function backpropagates its saved output.
    x.grad = None
    Exp.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.5, 2.0]).astype(np.float32), rtol=1e-6)


def test_saved_input_of_a_custom_function_modified_in_place_is_an_error() -> None:
    class Square(ta.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, gy):
            (x,) = ctx.saved_tensors
            return 2.0 * gy * x

    x = ta.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    z = Square.apply(h)
    with ta.no_grad():
        h.mul_(2.0)
    with pytest.raises(RuntimeError, match=r"saved by Square is at version 1; expected version 0"):
        z.sum().backward()


def test_inplace_on_leaf_requiring_grad_is_refused() -> None:
    w = ta.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w.add_(1.0)
    with ta.no_grad():
        w.add_(1.0)
    assert w.item() == 2.0 and w._version[0] == 1


def test_inplace_on_intermediate_is_recorded() -> None:
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    h.mul_(x)             # h = 3x * x
    h.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 12.0])


def test_second_backward_through_freed_graph() -> None:
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    z = (x * x).sum()
    z.backward(retain_graph=True)
    z.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0 + 4.0, 4.0 + 8.0])


def test_saved_tensors_are_released_after_backward() -> None:
    x = ta.tensor(np.ones(4), requires_grad=True)
    h = x * 2.0
    ref = weakref.ref(h)
    y = (h * h).sum()     # the Mul node saves h
    del h
    gc.collect()
    assert ref() is not None  # kept alive by the graph
    y.backward()
    gc.collect()
    assert ref() is None      # freed with the saved tensors


def test_backward_on_non_scalar_needs_gradient() -> None:
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2.0
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        y.backward()
    y.backward(ta.tensor([1.0, -1.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, -2.0])
    with pytest.raises(RuntimeError, match="shape"):
        (x * 2.0).backward(ta.tensor([1.0, 2.0, 3.0]))


def test_backward_on_tensor_without_graph() -> None:
    with pytest.raises(RuntimeError, match="does not require grad"):
        ta.tensor(1.0).backward()


def test_autograd_backward_with_several_roots() -> None:
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    a, b = (x * 2.0).sum(), (x * x).sum()
    ta.autograd.backward([a, b], [ta.tensor(1.0), ta.tensor(0.5)])
    np.testing.assert_array_equal(x.grad.numpy(), [2.0 + 1.0, 2.0 + 2.0])


def test_integer_tensor_cannot_require_grad() -> None:
    with pytest.raises(RuntimeError, match="floating point"):
        ta.tensor([1, 2, 3]).requires_grad_()
    with pytest.raises(RuntimeError, match="int64"):
        ta.tensor([1, 2], requires_grad=True)


def test_engine_refuses_gradient_of_wrong_dtype_or_shape_from_a_builtin_op() -> None:
    # Built-in ops get no help (a user Function's gradient is fitted: test_custom_function_grads.py):
    # a float16 gradient for a float32 input, or a missing sum over a broadcast dim, is a bug.
    class Double(Function):
        """y = 2 x; dx = 2 gy (wrong on purpose: see ``bad``)"""

        precision = NEUTRAL
        bad = None

        def forward(self, xp, x):
            return x * 2

        def backward(self, gy):
            return self.bad(gy)

    x = ta.tensor([1.0, 2.0], requires_grad=True)
    Double.bad = staticmethod(lambda gy: (gy * 2).half())
    with pytest.raises(RuntimeError, match=r"Function DoubleBackward returned an invalid gradient at index 0: got "
                                           r"shape \[2\] dtype float16, expected shape \[2\] dtype float32"):
        Double()(x).sum().backward()
    Double.bad = staticmethod(lambda gy: ta.stack([gy, gy]) * 2)
    with pytest.raises(RuntimeError, match=r"got shape \[2, 2\] dtype float32, expected shape \[2\]"):
        Double()(x).sum().backward()


def test_custom_function_save_for_backward_and_needs_input_grad() -> None:
    class Cube(ta.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale):
            ctx.save_for_backward(x)
            ctx.scale = scale
            return x * x * x * scale

        @staticmethod
        def backward(ctx, gy):
            (x,) = ctx.saved_tensors
            assert ctx.needs_input_grad == (True, False)
            return gy * 3.0 * x * x * ctx.scale, None

    x = ta.tensor([1.0, 2.0], dtype=ta.float64, requires_grad=True)
    y = Cube.apply(x, 2.0)
    assert y.grad_fn is not None
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 24.0])
    # the backward is written in tinyamp ops, so it is itself differentiable
    assert ta.autograd.gradgradcheck(lambda t: Cube.apply(t, 2.0), [x])


def test_custom_function_saving_its_output() -> None:
    class Exp(ta.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, gy):
            (y,) = ctx.saved_tensors
            return gy * y

    x = ta.tensor([0.5, -1.0], dtype=ta.float64, requires_grad=True)
    assert ta.autograd.gradcheck(Exp.apply, [x])
    assert ta.autograd.gradgradcheck(Exp.apply, [x])


def test_gradcheck_detects_a_wrong_derivative() -> None:
    class Wrong(ta.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * x

        @staticmethod
        def backward(ctx, gy):
            return gy * 3.0

    x = ta.tensor([0.3, 0.7], dtype=ta.float64, requires_grad=True)
    with pytest.raises(AssertionError, match="Jacobian mismatch"):
        ta.autograd.gradcheck(Wrong.apply, [x])


def test_gradient_dtypes_follow_the_leaves() -> None:
    w = ta.tensor([1.0, 2.0], requires_grad=True)          # float32
    h = ta.tensor([1.0, 2.0], dtype=ta.float16, requires_grad=True)
    (w * h).sum().backward()                                 # PROMOTE: h cast to float32 on the tape
    assert w.grad.dtype == ta.float32
    assert h.grad.dtype == ta.float16


def test_leaf_gradients_never_alias_each_other_or_the_seed() -> None:
    # x + y hands the same gradient array to both leaves; in-place work on one
    # .grad (unscale_, clipping, accumulation) must not change the other.
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    y = ta.tensor([3.0, 4.0], requires_grad=True)
    (x + y).backward(ta.tensor([1.0, 1.0]))
    assert x.grad.array is not y.grad.array
    x.grad.array *= 10.0
    np.testing.assert_array_equal(y.grad.numpy(), [1.0, 1.0])
    seed = ta.tensor([1.0, 1.0])
    z = ta.tensor([0.0, 0.0], requires_grad=True)
    z.backward(seed)
    z.grad.array += 1.0
    np.testing.assert_array_equal(seed.numpy(), [1.0, 1.0])
    m = ta.ones(3, requires_grad=True)
    m.mean().backward()           # the gradient is a broadcast view of one value
    m.grad.array[0] = 5.0          # owned and writable
    np.testing.assert_allclose(m.grad.numpy(), [5.0, 1 / 3, 1 / 3])


def test_reachable_nodes_visits_each_node_once_without_recursion() -> None:
    from tinyamp.autograd.graph import reachable_nodes

    x = ta.tensor([1.0, 2.0], requires_grad=True)
    shared = x.exp()
    y = shared * shared + shared  # exp feeds mul (twice) and add: a diamond
    assert sorted(node.name for node in reachable_nodes([y])) == ["add", "exp", "mul"]
    assert list(reachable_nodes([x, ta.tensor([1.0])])) == []  # leaves and constants have no node
    h = x
    for _ in range(10_000):
        h = h * 1.0
    assert sum(1 for _ in reachable_nodes([h])) == 10_000


def test_a_node_reports_its_inputs_as_recorded_after_autocast() -> None:
    x = ta.ones(4, 3, requires_grad=True)
    w = ta.ones(2, 3, requires_grad=True)
    with ta.amp.autocast():
        y = ta.matmul(x, w.detach().T.contiguous().requires_grad_())
        z = ta.nn.functional.linear(x, w)
    assert y.grad_fn.input_shapes == ((4, 3), (3, 2))
    assert y.grad_fn.input_dtypes == (ta.float16, ta.float16)  # the casts' outputs, not the float32 leaves
    assert z.grad_fn.input_shapes == ((4, 3), (2, 3))
    assert z.grad_fn.input_dtypes == (ta.float16, ta.float16)  # linear's weight arrives through a Cast node too
