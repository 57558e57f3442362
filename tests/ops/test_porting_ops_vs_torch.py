"""flip, median, einsum, gather/scatter, prod, kl_div, relu_, nelement, reshape(shape=) beyond the numbers.

The numbers (forward and backward, float64, against PyTorch 2.13) are module
cases in tests/support/module_cases.py; here: which errors PyTorch raises and the
values of methods (tests/support/porting_cases.py), the precision tags from PyTorch's
CUDA autocast lists, and tinyamp's messages naming the op, shapes and dtypes.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tests.support.porting_refs import check
from tinyamp.precision import FP32, LOWER, NEUTRAL, PROMOTE


@pytest.mark.parametrize("name", ["functional_error_types", "tensor_method_values"])
def test_functional_case_matches_pytorch(name: str) -> None:
    check(name)


def test_precision_tags() -> None:
    from tinyamp.ops.einsum import Einsum
    from tinyamp.ops.flip import Flip
    from tinyamp.ops.gather_scatter import Gather, GatherGrad, Scatter, ScatterAdd
    from tinyamp.ops.loss_kl import KLDiv
    from tinyamp.ops.median import Median, MedianDim
    from tinyamp.ops.product import Prod
    assert Einsum.precision == LOWER                      # a contraction: on the CUDA float16 list
    assert Prod.precision == KLDiv.precision == FP32      # both on the CUDA float32 list
    assert ScatterAdd.precision == Scatter.precision == PROMOTE  # on the CUDA promote list (scatter: tinyamp's)
    assert {Flip.precision, Gather.precision, GatherGrad.precision, Median.precision, MedianDim.precision} == {NEUTRAL}
    a = ta.randn(2, 3, requires_grad=True)
    with ta.autocast("cpu", dtype=ta.bfloat16):
        assert ta.einsum("ij,kj->ik", a, a).dtype == ta.bfloat16
        assert a.prod().dtype == ta.float32


def test_errors_name_op_shapes_and_dtypes() -> None:
    x = ta.ones(3, 4)
    with pytest.raises(RuntimeError, match=r"gather\(\): Expected dtype int32/int64 for index, got float32"):
        ta.gather(x, 1, ta.zeros(3, 1))
    with pytest.raises(RuntimeError, match=r"gather: Index tensor must have the same number of dimensions.*\[2\] "
                                           r"int64.*\[3, 4\] float32"):
        ta.gather(x, 1, ta.tensor([0, 1]))
    with pytest.raises(RuntimeError, match="gather: index 4 is out of bounds for dimension 1 with size 4"):
        ta.gather(x, 1, ta.tensor([[0, 4]]))
    with pytest.raises(RuntimeError, match=r"Size does not match at dimension 0 expected index \[4, 1\] to be no "
                                           r"larger than self \[3, 4\]"):
        ta.gather(x, 1, ta.zeros(4, 1, dtype=ta.long))
    with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
        x.scatter(1, ta.tensor([[0]]), ta.ones(1, 1, dtype=ta.int64))
    with pytest.raises(RuntimeError, match=r"einsum\(\): the number of subscripts.*\(3\).*\(2\).*\[3, 4\]"):
        ta.einsum("ijk->i", x)
    with pytest.raises(RuntimeError, match="flip: dim 0 appears multiple times"):
        x.flip(0, 0)
    with pytest.raises(TypeError, match=r"reshape\(\): expected the shape"):
        x.reshape(2, shape=(6, 2))


def test_scatter_in_place_on_a_leaf_under_no_grad_and_on_device(device: str) -> None:
    x = ta.zeros(2, 3, device=device)
    index = ta.tensor([[2], [0]], device=device)
    assert x.scatter_(1, index, 5.0) is x
    np.testing.assert_array_equal(x.numpy(), [[0, 0, 5], [5, 0, 0]])
    x.scatter_add_(1, index, ta.ones(2, 1, device=device))
    np.testing.assert_array_equal(x.numpy(), [[0, 0, 6], [6, 0, 0]])
    with pytest.raises(RuntimeError, match="index 3 is out of bounds"):  # a write checks its bounds on every device
        x.scatter_(1, ta.tensor([[3]], device=device), 1.0)


def test_gather_gradient_sums_repeats_in_float32() -> None:
    x = ta.zeros(1, 2, dtype=ta.float16, requires_grad=True)
    index = ta.zeros(1, 4096, dtype=ta.long)
    ta.gather(x, 1, index).sum().backward()
    assert x.grad.dtype == ta.float16 and x.grad.numpy().tolist() == [[4096.0, 0.0]]  # float16 steps would stall
