"""tinyamp: a small deep-learning framework whose point is native mixed precision.

``import tinyamp as ta``; ``with ta.amp.autocast(): loss = loss_fn(model(x), y)``.
This module only gathers the public API; each piece lives in its own module.
"""

from __future__ import annotations

from . import backend, dtypes, random
from .backend import Device, device, get_default_device, set_default_device
from .dtypes import as_public as _public, dtype, finfo, get_default_dtype, iinfo
# torch.float16 and friends: dtype objects (equal to NumPy's dtypes, with PyTorch's attributes)
bfloat16, double, float16, float32, float64, half = (_public(d) for d in (
    dtypes.bfloat16, dtypes.double, dtypes.float16, dtypes.float32, dtypes.float64, dtypes.half))
int8, int16, int32, int64, long, uint8 = (_public(d) for d in (
    dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.long, dtypes.uint8))
bool, float, int, short = (_public(d) for d in (  # noqa: A001 - torch.bool, torch.float, torch.int, ...
    dtypes.bool_, dtypes.float, dtypes.int32, dtypes.int16))
float8_e4m3fn, float8_e5m2, float8_e8m0fnu = (_public(d) for d in dtypes.FP8)
from .tensor import Tensor
from . import autograd  # before ops: ta.autograd.Function (custom_function.py) builds on the op library
from .ops.methods import _assert, is_tensor
from .autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from . import ops
from .ops import *  # noqa: F401,F403 - ta.add, ta.matmul, ... are the op functions
from .porting import distributed
from . import amp
from .amp import autocast, get_autocast_dtype, is_autocast_enabled  # torch.autocast, ...
from .random import Generator, get_rng_state, initial_seed, manual_seed, seed, set_rng_state
from .factories import (arange, as_tensor, empty, empty_like, eye, from_numpy, full, full_like, linspace,
                        ones, ones_like, rand, rand_like, randint, randn, randn_like, randperm, tensor,
                        zeros, zeros_like)
from . import factories
from . import data
from .porting import utils  # torch.utils.data spellings
from .study import memory  # ta.memory: bytes a step keeps alive
from . import optim
from .porting import backends  # ta.backends.cuda.matmul.allow_tf32, ta.backends.cudnn.benchmark, ...
from .precision import get_float32_matmul_precision, set_float32_matmul_precision
from .porting.foreach import *  # noqa: F401,F403 - ta._foreach_mul_, ... (torch._foreach_*)
from . import nn
from . import cuda  # ta.cuda: devices, memory, CUDA graphs, make_graphed_step, ...
from .cuda.accelerator import accelerator
from .serialization import load, save
from .dtypes import channels_last, channels_last_3d, contiguous_format, memory_format, preserve_format
from .porting import jit  # ta.jit.is_scripting(), ...
from .porting.legacy_types import (BFloat16Tensor, BoolTensor, ByteTensor, CharTensor, DoubleTensor, FloatTensor,
                                   HalfTensor, IntTensor, LongTensor, ShortTensor)
from .porting import paths  # PyTorch's module paths: import tinyamp.distributed, tinyamp.nn.parallel, ...

from .version import __version__
