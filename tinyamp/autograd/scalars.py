"""Python numbers as op inputs: a 0-d array of the tensor operand's dtype and device.

``Function.__call__`` hands its arguments here when one is not a Tensor. NumPy 2
would treat a 0-d float64 array as a strong type and silently promote
float16/float32 to float64 off the tape, so ``x * 0.5`` multiplies by a 0-d
array of ``x``'s dtype (PyTorch's weak Python scalars). On a GPU that 0-d array is
made once and kept (:func:`device_scalar`): no host-to-device copy per call, which
a captured CUDA graph could not hold. A raw array is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..backend import array_module
from ..tensor import Tensor


def with_scalars(name: str, args: tuple) -> list[Tensor]:
    """``args`` as Tensors: a Python or NumPy number takes the dtype and device of the first Tensor."""
    reference = None
    for arg in args:
        if isinstance(arg, Tensor):
            reference = arg
            break
    tensors = []
    for arg in args:
        if isinstance(arg, Tensor):
            tensors.append(arg)
        elif isinstance(arg, (bool, int, float, np.number, np.bool_)):
            # NumPy scalars are treated like Python numbers (weak), as PyTorch does.
            tensors.append(_scalar_tensor(arg.item() if isinstance(arg, np.generic) else arg, reference))
        elif hasattr(arg, "__array_interface__") or hasattr(arg, "__cuda_array_interface__"):
            # A raw array (`t.array`, `t.numpy()`): PyTorch refuses it too; say how to wrap it.
            raise TypeError(f"{name}: expected Tensors or Python numbers, got a {type(arg).__name__} "
                            f"(shape {list(arg.shape)}); wrap arrays with ta.from_numpy / ta.tensor "
                            f"(`tensor.array` is tinyamp's raw NumPy/CuPy array; `tensor.data` and "
                            f"`tensor.detach()` are Tensors)")
        else:
            raise TypeError(f"{name}: expected Tensors or Python numbers, got {type(arg).__name__}")
    return tensors


def _scalar_tensor(value: Any, reference: "Tensor | None") -> Tensor:
    if reference is None:
        dtype = dt.bool_ if isinstance(value, bool) else dt.int64 if isinstance(value, int) else dt.float32
        return Tensor._wrap(np.asarray(value, dtype=dtype))
    dtype = reference.dtype
    if isinstance(value, float) and dtype not in dt.FLOATING:
        dtype = dt.float32  # int_tensor * 0.5 is a float32 op, as in PyTorch
    elif isinstance(value, int) and not isinstance(value, bool) and dtype == dt.bool_:
        dtype = dt.int64
    xp = array_module(reference.array)
    if xp is np:
        return Tensor._wrap(np.asarray(value, dtype=dtype))
    return Tensor._wrap(device_scalar(xp, reference.array, value, dtype))


_DEVICE_SCALARS: dict = {}  # (module, device id, dtype, type, value) -> 0-d device array, never written
_DEVICE_SCALARS_KEPT = 1024
backend.on_cuda_switch(_DEVICE_SCALARS.clear)  # arrays of one CUDA backend never reach the other


def device_scalar(xp: Any, like: Any, value: Any, dtype: np.dtype) -> Any:
    """A 0-d device array holding ``value`` on ``like``'s device, made once and kept.

    ``x * 0.5`` on a GPU would otherwise copy the 0.5 to the device on every
    call (a host-to-device transfer, which a captured CUDA graph cannot hold).
    The arrays are only ever op inputs, never written.
    """
    key = (id(xp), like.device.id, dtype, type(value), value)
    array = _DEVICE_SCALARS.get(key)
    capture = backend.current_capture()
    if capture is not None:
        # A CUDA graph capture cannot copy from the host: a new value is filled by a kernel that carries
        # it as an argument (kept by the graph, not cached: it holds the value only once the graph has
        # run), and a cached one is held by the graph, which reads it at every replay.
        if array is None:
            with like.device:
                array = xp.full((), value, dtype=dtype)
        capture.keep_alive(array)
        return array
    if array is None:
        if len(_DEVICE_SCALARS) >= _DEVICE_SCALARS_KEPT:
            _DEVICE_SCALARS.clear()
        with like.device:
            array = _DEVICE_SCALARS[key] = xp.asarray(value, dtype=dtype)
    return array
