"""tinyamp: a small deep-learning framework whose point is native mixed precision.

``import tinyamp as ta``; ``with ta.amp.autocast(): loss = loss_fn(model(x), y)``.
This module only gathers the public API; each piece lives in its own module.
"""

from __future__ import annotations

from . import backend, dtypes, random
from .backend import Device, device, get_default_device, set_default_device
from .dtypes import (bfloat16, bool_ as bool, double, float16, float32, float64, half, int8,  # noqa: A004
                     float8_e4m3fn, float8_e5m2, float8_e8m0fnu, int16, int32, int64, long, uint8)
from .dtypes import float as float  # noqa: A001,PLC0414 - torch.float
from .dtypes import finfo, get_default_dtype, iinfo
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
from .porting import paths  # PyTorch's module paths: import tinyamp.distributed, tinyamp.nn.parallel, ...

from .version import __version__
