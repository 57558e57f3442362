"""dtype objects, legacy tensor types, memory formats, ``ta.jit``, ``ta.cuda.device``, ``Tensor.repeat`` and the
GradScaler under bfloat16, against PyTorch 2.13's recorded answers (tests/support/porting_cases.py)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import tinyamp as ta
from tests.support.porting_refs import check
from tinyamp import backend


@pytest.mark.parametrize("name", ["dtype_objects", "legacy_types_and_layouts", "repeat_is_a_copy",
                                  "grad_scaler_bfloat16_resume"])
def test_case_matches_pytorch(name: str) -> None:
    check(name)


def test_dtype_objects_are_numpy_dtypes_to_numpy_and_survive_pickling() -> None:
    assert ta.zeros(2, dtype=ta.bfloat16).array.dtype == np.dtype("bfloat16")
    assert np.zeros(2, dtype=ta.float16).dtype == np.float16  # NumPy reads the object's .dtype
    assert pickle.loads(pickle.dumps(ta.float16)) is ta.float16
    assert ta.float32 == np.float32 and hash(ta.float32) == hash(np.dtype(np.float32))
    assert str(ta.float16) == "float16" and ta.float16.kind == "f"
    with pytest.raises(TypeError, match="memory_format must be a tinyamp.memory_format"):
        ta.ones(2).to(memory_format="channels_last")


def test_repeat_gradient_sums_the_copies(device: str) -> None:
    x = ta.tensor([[1.0, 2.0]], device=device, requires_grad=True)
    (x.repeat(3, 2) * ta.arange(12.0, device=device).reshape(3, 4)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0 + 2 + 4 + 6 + 8 + 10, 1 + 3 + 5 + 7 + 9 + 11]])


def test_cuda_device_context_restores_the_current_gpu() -> None:
    with backend.use_cuda_standin():
        before = ta.cuda.current_device()
        with ta.cuda.device(0) as ctx:
            assert ta.cuda.current_device() == 0 and ctx.idx == 0
        with ta.cuda.device(None), ta.cuda.device(-1):  # PyTorch: no change
            pass
        assert ta.cuda.current_device() == before
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            with ta.cuda.device("cuda:7"):
                pass
    if not ta.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is unavailable"):
            with ta.cuda.device(0):
                pass
