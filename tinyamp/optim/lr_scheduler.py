"""Learning-rate schedules: StepLR, MultiStepLR, ExponentialLR, LinearLR, CosineAnnealingLR, LambdaLR
(PyTorch's closed forms) and ReduceLROnPlateau (driven by a metric).

A scheduler sets ``group["lr"]`` of each of its optimizer's groups from the
group's ``initial_lr`` and the epoch counter ``last_epoch``. Construction
performs the first ``step()`` (``last_epoch`` goes from -1 to 0), as in PyTorch;
call ``step()`` once per epoch after ``optimizer.step()``. Every schedule here is
the closed form of ``last_epoch``, so resuming from ``state_dict()`` or jumping
epochs gives the same learning rates as stepping one by one. ReduceLROnPlateau
is the exception: ``step(metric)`` reacts to the values it is shown.
"""

from __future__ import annotations

import bisect
import math
import types
from typing import Callable, Sequence

from .optimizer import Optimizer


class LRScheduler:
    """Base class: subclasses give ``_closed_form(base_lr, group_index)`` for ``self.last_epoch``."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when "
                                   f"resuming an optimizer")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def get_lr(self) -> list[float]:
        """The learning rates for ``self.last_epoch``."""
        return [self._closed_form(base, i) for i, base in enumerate(self.base_lrs)]

    def _closed_form(self, base_lr: float, index: int) -> float:
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        """The learning rates the last ``step()`` set."""
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or jump to ``epoch``) and set the groups' learning rates."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        lrs = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = lrs

    def state_dict(self) -> dict:
        """Everything but the optimizer."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)


_LRScheduler = LRScheduler  # PyTorch's old name


class StepLR(LRScheduler):
    """``lr = base_lr * gamma ** (last_epoch // step_size)``."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        if int(step_size) != step_size or step_size < 1:
            raise ValueError(f"StepLR: step_size must be a positive integer, got {step_size!r}")
        self.step_size = int(step_size)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _closed_form(self, base_lr: float, index: int) -> float:
        return base_lr * self.gamma ** (self.last_epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """``lr = base_lr * gamma ** (number of milestones <= last_epoch)``."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.milestones = sorted(int(m) for m in milestones)  # a repeated milestone decays twice, as PyTorch
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _closed_form(self, base_lr: float, index: int) -> float:
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, self.last_epoch)


class ExponentialLR(LRScheduler):
    """``lr = base_lr * gamma ** last_epoch``."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _closed_form(self, base_lr: float, index: int) -> float:
        return base_lr * self.gamma ** self.last_epoch


class LinearLR(LRScheduler):
    """``lr = base_lr * (start + (end - start) * min(last_epoch, total_iters) / total_iters)`` (warm-up)."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1) -> None:
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1], got "
                             f"{start_factor} and {end_factor}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def _closed_form(self, base_lr: float, index: int) -> float:
        progress = min(self.last_epoch, self.total_iters) / self.total_iters if self.total_iters else 1.0
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * progress)


class CosineAnnealingLR(LRScheduler):
    """``lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * last_epoch / T_max)) / 2``."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,  # noqa: N803 - torch name
                 last_epoch: int = -1) -> None:
        if T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be positive, got {T_max!r}")
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def _closed_form(self, base_lr: float, index: int) -> float:
        cosine = math.cos(math.pi * self.last_epoch / self.T_max)
        return self.eta_min + (base_lr - self.eta_min) * (1 + cosine) / 2


class LambdaLR(LRScheduler):
    """``lr = base_lr * lr_lambda(last_epoch)``; one function, or one per group."""

    def __init__(self, optimizer: Optimizer, lr_lambda: "Callable[[int], float] | Sequence[Callable]",
                 last_epoch: int = -1) -> None:
        groups = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != groups:
                raise ValueError(f"Expected {groups} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * groups
        super().__init__(optimizer, last_epoch)

    def _closed_form(self, base_lr: float, index: int) -> float:
        return base_lr * self.lr_lambdas[index](self.last_epoch)

    def state_dict(self) -> dict:
        """As PyTorch: functions are not saved; a callable object's attributes are."""
        state = {key: value for key, value in self.__dict__.items() if key not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else dict(fn.__dict__)
                               for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        lambdas = state.pop("lr_lambdas", [])
        self.__dict__.update(state)
        for fn, attrs in zip(self.lr_lambdas, lambdas):
            if attrs is not None:
                fn.__dict__.update(attrs)


class ReduceLROnPlateau:
    """Multiply each group's lr by ``factor`` after ``patience`` epochs without improvement.

    ``step(metric)`` once per epoch with the monitored value (a number or a
    one-element tensor); PyTorch's arguments and rules (``mode``, ``threshold``
    relative or absolute, ``cooldown``, ``min_lr``, changes smaller than ``eps``
    ignored).
    """

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr: "float | Sequence[float]" = 0.0, eps: float = 1e-8) -> None:
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor should be < 1.0, got {factor}")
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: mode must be 'min' or 'max' and threshold_mode 'rel' or "
                             f"'abs', got {mode!r} and {threshold_mode!r}")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        groups = optimizer.param_groups
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != len(groups):
                raise ValueError(f"expected {len(groups)} min_lrs, got {len(min_lr)}")
            self.min_lrs = list(min_lr)
        else:
            self.min_lrs = [min_lr] * len(groups)
        self.optimizer = optimizer
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown, self.eps = threshold, threshold_mode, cooldown, eps
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = self.last_epoch = 0
        self._last_lr = [group["lr"] for group in groups]

    def _is_better(self, current: float) -> bool:
        if self.mode == "min":
            bound = self.best * (1 - self.threshold) if self.threshold_mode == "rel" else self.best - self.threshold
            return current < bound
        bound = self.best * (1 + self.threshold) if self.threshold_mode == "rel" else self.best + self.threshold
        return current > bound

    def step(self, metrics: float) -> None:
        current = float(metrics)
        self.last_epoch += 1
        if self._is_better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # improvements are not expected during cooldown
        if self.num_bad_epochs > self.patience:
            for group, min_lr in zip(self.optimizer.param_groups, self.min_lrs):
                new_lr = max(group["lr"] * self.factor, min_lr)
                if group["lr"] - new_lr > self.eps:
                    group["lr"] = new_lr
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
