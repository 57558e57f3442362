"""Optimizers (``ta.optim``): the Optimizer base, SGD, the Adam family, RMSprop, Adagrad, Adadelta, schedulers,
``swa_utils`` (weight averaging).

Each optimizer follows PyTorch's update and constructor, plus two AMP features:
``master_weights=True`` (float32 master copies of float16/bfloat16 parameters, O2)
and the masked-update contract ``step(found_inf=...)`` that lets GradScaler skip
a step without a host synchronisation (see ``optimizer.py``).
"""

from __future__ import annotations

from . import lr_scheduler
from ..porting import swa_utils  # torch.optim.swa_utils
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .nadam import NAdam
from .optimizer import Optimizer
from .radam import RAdam
from .rmsprop import RMSprop
from .sgd import SGD
from ..porting.lbfgs import LBFGS  # the porting wing's (tinyamp/porting/lbfgs.py)

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta", "LBFGS",
           "lr_scheduler", "swa_utils"]
