"""Gradients a user-defined Function's backward returns are fitted to its inputs as PyTorch does (issue 12, item 2).

What PyTorch 2.13's engine does (``validate_outputs`` after ``PyNode::apply``),
checked case by case and written out here by hand:

- a gradient of another dtype is cast to the input's dtype (float16, float64,
  int64 and bool gradients for a float32 input; float32 for a float16 input);
- a gradient whose shape the input's shape broadcasts to is summed down to the
  input's shape (``at::sum_to``), before the cast;
- any other shape raises "Function XBackward returned an invalid gradient at
  index i - got [..] but expected shape compatible with [..]", where i counts
  the Tensor inputs only;
- extra trailing Nones are dropped; too few or too many gradients, a non-Tensor
  gradient, or a gradient for a non-Tensor argument are errors;
- the cast and the sum are recorded: with ``create_graph`` they differentiate.

Built-in ops stay strict (tests/core/test_autograd.py): their gradients must match.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tinyamp as ta


class ReturnsGiven(ta.autograd.Function):
    """y = 2 x; backward returns ``ReturnsGiven.make(gy)`` as x's gradient."""

    make = None

    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, gy):
        return ReturnsGiven.make(gy)


def _grad_of(x: ta.Tensor, make) -> ta.Tensor:
    ReturnsGiven.make = staticmethod(make)
    ReturnsGiven.apply(x).sum().backward()
    return x.grad


@pytest.mark.parametrize("grad_dtype", [ta.float16, ta.float64, ta.int64, ta.bool])
def test_a_gradient_of_another_dtype_is_cast_to_the_input_dtype(grad_dtype: object) -> None:
    x = ta.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    grad = _grad_of(x, lambda gy: ta.full(gy.shape, 3, dtype=grad_dtype))
    assert grad.dtype == ta.float32
    np.testing.assert_array_equal(grad.numpy(), np.full((2, 3), 1.0 if grad_dtype == ta.bool else 3.0))


def test_a_float32_gradient_for_a_float16_input_is_rounded_to_float16() -> None:
    x = ta.ones(3, dtype=ta.float16, requires_grad=True)
    grad = _grad_of(x, lambda gy: ta.full((3,), 1 + 2.0 ** -12))  # below float16's half ulp of 1
    assert grad.dtype == ta.float16 and grad.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("shape,grad_shape,factor", [
    ((2, 3), (4, 2, 3), 4.0),      # leading dims added
    ((1, 3), (2, 3), 2.0),         # a size-1 dim broadcast
    ((), (2, 3), 6.0),             # a 0-d input
    ((2, 1), (5, 2, 4), 20.0),     # both at once
])
def test_a_broadcast_gradient_is_summed_to_the_input_shape(shape: tuple, grad_shape: tuple, factor: float) -> None:
    x = ta.ones(shape, requires_grad=True)
    grad = _grad_of(x, lambda gy: ta.full(grad_shape, 0.5))
    assert grad.shape == shape and grad.dtype == ta.float32
    np.testing.assert_array_equal(grad.numpy(), np.full(shape, 0.5 * factor))


def test_a_broadcast_float32_gradient_for_float16_is_summed_then_cast() -> None:
    x = ta.ones((2,), dtype=ta.float16, requires_grad=True)
    # 4096 copies of 1 + 2**-12: summed in float32 to 4097, then rounded once to float16 (4096).
    grad = _grad_of(x, lambda gy: ta.full((4096, 2), 1 + 2.0 ** -12))
    assert grad.dtype == ta.float16 and grad.tolist() == [4096.0, 4096.0]


@pytest.mark.parametrize("shape,grad_shape", [
    ((1, 3), (3,)),       # fewer dims than the input: not expandable
    ((2, 3), (3,)),
    ((2, 3), ()),
    ((2, 3), (3, 2)),     # transposed
    ((2, 3), (6,)),       # same size, other shape
])
def test_a_gradient_of_an_incompatible_shape_is_refused(shape: tuple, grad_shape: tuple) -> None:
    x = ta.ones(shape, requires_grad=True)
    message = (f"Function ReturnsGivenBackward returned an invalid gradient at index 0 - got "
               f"{list(grad_shape)} but expected shape compatible with {list(shape)}")
    with pytest.raises(RuntimeError, match=re.escape(message)):
        _grad_of(x, lambda gy: ta.ones(grad_shape))


class Scale(ta.autograd.Function):
    """y = k x with a number k first: the gradient index counts Tensor inputs only."""

    result = None

    @staticmethod
    def forward(ctx, k, x):
        return x * k

    @staticmethod
    def backward(ctx, gy):
        return Scale.result(gy)


def _scale_backward(result) -> None:
    Scale.result = staticmethod(result)
    x = ta.ones((2, 3), requires_grad=True)
    Scale.apply(2.0, x).sum().backward()


def test_the_index_in_the_message_counts_tensor_inputs() -> None:
    with pytest.raises(RuntimeError, match=r"ScaleBackward returned an invalid gradient at index 0 - got \[3, 2\]"):
        _scale_backward(lambda gy: (None, ta.ones(3, 2)))


def test_the_number_and_kind_of_gradients_are_checked_as_in_pytorch() -> None:
    _scale_backward(lambda gy: (None, gy * 2.0, None, None))  # extra trailing Nones are fine
    with pytest.raises(RuntimeError, match=r"function ScaleBackward returned an incorrect number of gradients "
                                           r"\(expected 2, got 1\)"):
        _scale_backward(lambda gy: gy)
    with pytest.raises(RuntimeError, match=r"incorrect number of gradients \(expected 2, got 3\)"):
        _scale_backward(lambda gy: (None, gy, gy))
    with pytest.raises(RuntimeError, match=r"function ScaleBackward returned a gradient different than None at "
                                           r"position 1, but the corresponding forward input was not a Tensor"):
        _scale_backward(lambda gy: (gy, gy))
    with pytest.raises(RuntimeError, match=r"function ScaleBackward returned a float as the gradient at position 2; "
                                           r"expected a Tensor or None"):
        _scale_backward(lambda gy: (None, 1.0))


def test_the_fitted_gradient_is_differentiable() -> None:
    class Square(ta.autograd.Function):
        """y = x^2; backward returns 2 x gy in float64, broadcast over a new leading dim of 3."""

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, gy):
            (x,) = ctx.saved_tensors
            return ta.stack([gy * x * 2.0] * 3).double() / 3.0

    x = ta.tensor([1.0, 2.0], requires_grad=True)
    (gx,) = ta.autograd.grad(Square.apply(x).sum(), x, create_graph=True)
    assert gx.dtype == ta.float32 and gx.tolist() == [2.0, 4.0] and gx.requires_grad
    gx.sum().backward()  # d/dx sum(2 x) = 2, through the recorded cast and sum
    assert x.grad.tolist() == [2.0, 2.0]
