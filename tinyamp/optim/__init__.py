"""Optimizers (``ta.optim``): the Optimizer base, SGD, Adam, AdamW and lr schedulers.

Each optimizer follows PyTorch's update and constructor, plus two AMP features:
``master_weights=True`` (float32 master copies of float16/bfloat16 parameters, O2)
and the masked-update contract ``step(found_inf=...)`` that lets GradScaler skip
a step without a host synchronisation (see ``optimizer.py``).
"""

from __future__ import annotations

from . import lr_scheduler
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]
