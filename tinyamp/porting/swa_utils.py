"""``torch.optim.swa_utils``: weight averaging (SWA, EMA) with ``AveragedModel``, ``SWALR`` and ``update_bn``.

``AveragedModel(model)`` keeps a deep copy of ``model`` (under ``module``) and a
step counter (the int64 buffer ``n_averaged``), so its ``state_dict`` has
PyTorch's keys: ``n_averaged`` and ``module.<name>``. ``update_parameters(model)``
copies the model's weights on the first call and averages them afterwards:
the running mean (SWA) by default, or what ``avg_fn(avg, p, n)`` /
``multi_avg_fn(avg_list, p_list, n)`` compute (``get_ema_multi_avg_fn(decay)``
for an exponential moving average). Buffers (BatchNorm statistics) are averaged
too with ``use_buffers=True``, otherwise copied from the model. A float32
average of float16 weights (an O2 model) is kept in the average's own dtype:
each update rounds once into it.
"""

from __future__ import annotations

import copy
import itertools
import math
from typing import Any, Callable, Iterable

from .. import dtypes as dt
from ..grad_mode import no_grad
from .foreach import _foreach_add_, _foreach_lerp_, _foreach_sub
from ..nn.module import Module
from ..nn.normalization import _BatchNorm
from ..tensor import Tensor
from ..optim.lr_scheduler import LRScheduler
from ..optim.optimizer import Optimizer
from ..factories import tensor

AvgFn = Callable[[Tensor, Tensor, Any], Tensor]
MultiAvgFn = Callable[[list, list, Any], None]


def get_ema_multi_avg_fn(decay: float = 0.999) -> MultiAvgFn:
    """An EMA update of whole lists: avg <- decay * avg + (1 - decay) * p (``_foreach_lerp_``)."""
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] range.")

    def ema_update(ema_param_list: list, current_param_list: list, _: Any) -> None:
        with no_grad():
            if ema_param_list[0].is_floating_point():
                _foreach_lerp_(ema_param_list, current_param_list, 1 - decay)
            else:
                for p_ema, p_model in zip(ema_param_list, current_param_list):
                    p_ema.copy_(p_ema * decay + p_model * (1 - decay))
    return ema_update


def get_swa_multi_avg_fn() -> MultiAvgFn:
    """The running mean of whole lists: avg <- avg + (p - avg) / (n + 1)."""
    def swa_update(averaged_param_list: list, current_param_list: list, num_averaged: Any) -> None:
        with no_grad():
            if averaged_param_list[0].is_floating_point():
                _foreach_lerp_(averaged_param_list, current_param_list, 1 / (num_averaged + 1))
            else:
                diffs = _foreach_sub(current_param_list, averaged_param_list)
                _foreach_add_(averaged_param_list, diffs, alpha=1.0 / (float(num_averaged) + 1))
    return swa_update


def get_ema_avg_fn(decay: float = 0.999) -> AvgFn:
    """An EMA update of one tensor: decay * avg + (1 - decay) * p."""
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] range.")

    def ema_update(ema_param: Tensor, current_param: Tensor, num_averaged: Any) -> Tensor:
        with no_grad():
            return decay * ema_param + (1 - decay) * current_param
    return ema_update


def get_swa_avg_fn() -> AvgFn:
    """The running mean of one tensor: avg + (p - avg) / (n + 1)."""
    def swa_update(averaged_param: Tensor, current_param: Tensor, num_averaged: Any) -> Tensor:
        with no_grad():
            return averaged_param + (current_param - averaged_param) / (num_averaged + 1)
    return swa_update


class AveragedModel(Module):
    """A running average of a model's weights (SWA by default; EMA with ``get_ema_multi_avg_fn``)."""

    def __init__(self, model: Module, device: Any = None, avg_fn: "AvgFn | None" = None,
                 multi_avg_fn: "MultiAvgFn | None" = None, use_buffers: bool = False) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", tensor(0, dtype=dt.int64,
                                                          device=device if device is not None else "cpu"))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def _pairs(self, model: Module) -> "tuple[Iterable[Tensor], Iterable[Tensor]]":
        if self.use_buffers:
            return (itertools.chain(self.module.parameters(), self.module.buffers()),
                    itertools.chain(model.parameters(), model.buffers()))
        return self.module.parameters(), model.parameters()

    def update_parameters(self, model: Module) -> None:
        """Fold ``model``'s current weights into the average (the first call copies them)."""
        averaged, current = [], []
        first = int(self.n_averaged.item()) == 0
        with no_grad():
            for p_avg, p_model in zip(*self._pairs(model)):
                p_model_ = p_model.detach().to(p_avg.device)
                averaged.append(p_avg.detach())
                current.append(p_model_)
                if first:
                    p_avg.detach().copy_(p_model_)
            if not first:
                self._average(averaged, current)
            if not self.use_buffers:  # buffers follow the model (update_bn recomputes them for the average)
                for b_avg, b_model in zip(self.module.buffers(), model.buffers()):
                    b_avg.detach().copy_(b_model.detach().to(b_avg.device))
            self.n_averaged += 1

    def _average(self, averaged: list, current: list) -> None:
        if self.avg_fn is not None:
            for p_avg, p_model in zip(averaged, current):
                p_avg.copy_(self.avg_fn(p_avg, p_model, self.n_averaged.to(p_avg.device)))
            return
        groups: dict = {}  # PyTorch groups the lists by device and dtype before each multi-tensor call
        for p_avg, p_model in zip(averaged, current):
            lists = groups.setdefault((p_avg.device, p_avg.dtype), ([], []))
            lists[0].append(p_avg)
            lists[1].append(p_model)
        for (device, _), (avg_list, model_list) in groups.items():
            n_averaged = self.n_averaged.to(device)
            if self.multi_avg_fn is not None:
                self.multi_avg_fn(avg_list, model_list, n_averaged)
            elif device.type == "cuda":  # PyTorch's default: the foreach form where it has foreach kernels
                get_swa_multi_avg_fn()(avg_list, model_list, n_averaged)
            else:
                swa = get_swa_avg_fn()
                for p_avg, p_model in zip(avg_list, model_list):
                    p_avg.copy_(swa(p_avg, p_model, n_averaged))


def update_bn(loader: Iterable, model: Module, device: Any = None) -> None:
    """Recompute every BatchNorm's running statistics with one pass over ``loader`` (a cumulative average)."""
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    with no_grad():
        for batch in loader:
            if isinstance(batch, (list, tuple)):
                batch = batch[0]
            if device is not None:
                batch = batch.to(device)
            model(batch)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneal each group's learning rate to ``swa_lr`` over ``anneal_epochs`` epochs, then hold it."""

    def __init__(self, optimizer: Optimizer, swa_lr: "float | list[float]", anneal_epochs: int = 10,
                 anneal_strategy: str = "cos", last_epoch: int = -1) -> None:
        groups = optimizer.param_groups
        swa_lrs = list(swa_lr) if isinstance(swa_lr, (list, tuple)) else [swa_lr] * len(groups)
        if len(swa_lrs) != len(groups):
            raise ValueError(f"swa_lr must have the same length as optimizer.param_groups: swa_lr has "
                             f"{len(swa_lrs)}, optimizer.param_groups has {len(groups)}")
        for lr, group in zip(swa_lrs, groups):
            group["swa_lr"] = lr
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        self._step_count = 0
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t: float) -> float:
        return t

    @staticmethod
    def _cosine_anneal(t: float) -> float:
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr: float, swa_lr: float, alpha: float) -> float:
        return swa_lr if alpha == 1 else (lr - alpha * swa_lr) / (1 - alpha)

    def step(self, epoch: int | None = None) -> None:
        self._step_count += 1
        super().step(epoch)

    def get_lr(self) -> list[float]:
        """PyTorch's recursive form: undo the last step's blend from the group's lr, blend again one step on."""
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        groups = self.optimizer.param_groups
        prev_lrs = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in groups]
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in zip(groups, prev_lrs)]

    def state_dict(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if key not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
