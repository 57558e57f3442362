"""Learning-rate schedules: StepLR, MultiStepLR, ExponentialLR, LinearLR, CosineAnnealingLR, OneCycleLR,
LambdaLR (PyTorch's closed forms), ReduceLROnPlateau (driven by a metric), and SequentialLR and
ChainedScheduler, which combine them.

A scheduler sets ``group["lr"]`` of each of its optimizer's groups from the
group's ``initial_lr`` and the epoch counter ``last_epoch``. Construction
performs the first ``step()`` (``last_epoch`` goes from -1 to 0), as in PyTorch;
call ``step()`` once per epoch after ``optimizer.step()``. Every schedule here is
the closed form of ``last_epoch``, so resuming from ``state_dict()`` or jumping
epochs gives the same learning rates as stepping one by one. ReduceLROnPlateau
is the exception: ``step(metric)`` reacts to the values it is shown.

A group added to the optimizer after the scheduler was made (``add_param_group``,
to unfreeze layers) follows the schedule where PyTorch's does: PyTorch's StepLR,
MultiStepLR, ExponentialLR and LinearLR multiply each group's current lr, so the
new group is scheduled from the lr it had when it joined (here: the closed form
from that lr and epoch), and ReduceLROnPlateau reduces it too. The schedules
PyTorch computes from each group's ``initial_lr`` (CosineAnnealingLR, LambdaLR,
OneCycleLR, SequentialLR) raise instead, as PyTorch 2.13's do: make the
scheduler after adding the group.
"""

from __future__ import annotations

import bisect
import math
import types
from typing import Any, Callable, Sequence

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
        self.added_groups: list[tuple[float, int]] = []  # (lr, last_epoch) of each group added since
        self.last_epoch = last_epoch
        self.step()

    # Whether a group added to the optimizer later follows the schedule from its lr then (PyTorch's
    # recursive schedules do) rather than being refused (those PyTorch computes from initial_lr).
    _follows_added_groups = False

    def get_lr(self) -> list[float]:
        """The learning rates for ``self.last_epoch``."""
        return ([self._closed_form(base, i) for i, base in enumerate(self.base_lrs)]
                + [self._closed_form_since(lr, epoch) for lr, epoch in self.added_groups])

    def _closed_form(self, base_lr: float, index: int) -> float:
        raise NotImplementedError

    def _closed_form_since(self, lr: float, epoch: int) -> float:
        """The lr at ``self.last_epoch`` of a group that joined with ``lr`` after epoch ``epoch``."""
        raise NotImplementedError

    def _reference_lr(self, index: int) -> float:
        """What group ``index``'s schedule multiplies: its initial lr, or its lr when it joined."""
        if index < len(self.base_lrs):
            return self.base_lrs[index]
        return self.added_groups[index - len(self.base_lrs)][0]

    def _adopt_added_groups(self, previous_epoch: int) -> None:
        """Groups the optimizer gained since the last step: scheduled from their lr now, or refused."""
        groups = self.optimizer.param_groups
        known = len(self.base_lrs) + len(self.added_groups)
        if len(groups) == known:
            return
        name = type(self).__name__
        if len(groups) < known or not self._follows_added_groups:
            raise RuntimeError(
                f"{name}: the optimizer has {len(groups)} parameter groups, but had {known} when this scheduler "
                f"was made (a group added or removed since); {name}'s schedule starts from each group's initial "
                f"lr, which a group added later lacks (PyTorch 2.13 raises too). Make the scheduler after "
                f"adding the group")
        self.added_groups += [(group["lr"], previous_epoch) for group in groups[known:]]

    def get_last_lr(self) -> list[float]:
        """The learning rates the last ``step()`` set."""
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or jump to ``epoch``) and set the groups' learning rates."""
        self._adopt_added_groups(self.last_epoch)
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        lrs = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = lrs

    def state_dict(self) -> dict:
        """Everything but the optimizer."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update({"added_groups": [], **state_dict})


_LRScheduler = LRScheduler  # PyTorch's old name


class StepLR(LRScheduler):
    """``lr = base_lr * gamma ** (last_epoch // step_size)``."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        if int(step_size) != step_size or step_size < 1:
            raise ValueError(f"StepLR: step_size must be a positive integer, got {step_size!r}")
        self.step_size = int(step_size)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    _follows_added_groups = True

    def _closed_form(self, base_lr: float, index: int) -> float:
        return base_lr * self.gamma ** (self.last_epoch // self.step_size)

    def _closed_form_since(self, lr: float, epoch: int) -> float:
        return lr * self.gamma ** (self.last_epoch // self.step_size - epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """``lr = base_lr * gamma ** (number of milestones <= last_epoch)``."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.milestones = sorted(int(m) for m in milestones)  # a repeated milestone decays twice, as PyTorch
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    _follows_added_groups = True

    def _closed_form(self, base_lr: float, index: int) -> float:
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, self.last_epoch)

    def _closed_form_since(self, lr: float, epoch: int) -> float:
        passed = bisect.bisect_right(self.milestones, self.last_epoch) - bisect.bisect_right(self.milestones, epoch)
        return lr * self.gamma ** passed


class ExponentialLR(LRScheduler):
    """``lr = base_lr * gamma ** last_epoch``."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    _follows_added_groups = True

    def _closed_form(self, base_lr: float, index: int) -> float:
        return base_lr * self.gamma ** self.last_epoch

    def _closed_form_since(self, lr: float, epoch: int) -> float:
        return lr * self.gamma ** (self.last_epoch - epoch)


class LinearLR(LRScheduler):
    """``lr = base_lr * (start + (end - start) * min(last_epoch, total_iters) / total_iters)`` (warm-up)."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1) -> None:
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1], got "
                             f"{start_factor} and {end_factor}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    _follows_added_groups = True

    def _factor(self, epoch: int) -> float:
        progress = min(epoch, self.total_iters) / self.total_iters if self.total_iters else 1.0
        return self.start_factor + (self.end_factor - self.start_factor) * progress

    def _closed_form(self, base_lr: float, index: int) -> float:
        return base_lr * self._factor(self.last_epoch)

    def _closed_form_since(self, lr: float, epoch: int) -> float:
        # PyTorch multiplies by factor(e) / factor(e - 1) at each step up to total_iters: the product telescopes.
        if epoch >= self.total_iters:
            return lr
        return lr * self._factor(self.last_epoch) / self._factor(epoch)


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


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin): warm up to ``max_lr``, then anneal far below; step per batch.

    PyTorch's phases and arguments: ``initial_lr = max_lr / div_factor``, the
    warm-up lasts ``pct_start`` of ``total_steps`` (or ``epochs * steps_per_epoch``),
    the floor is ``initial_lr / final_div_factor``; ``three_phase`` comes back
    to ``initial_lr`` before the final anneal. With ``cycle_momentum`` the
    momentum (SGD) or beta1 (Adam) moves inversely, between ``max_momentum``
    and ``base_momentum``.
    """

    def __init__(self, optimizer: Optimizer, max_lr: "float | Sequence[float]", total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True, base_momentum: float = 0.85,
                 max_momentum: float = 0.95, div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1) -> None:
        if total_steps is None:
            if not epochs or not steps_per_epoch or epochs <= 0 or steps_per_epoch <= 0:
                raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch (positive)")
            total_steps = epochs * steps_per_epoch
        if total_steps <= 0 or not 0 <= pct_start <= 1 or anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: expected total_steps > 0, pct_start in [0, 1] and anneal_strategy "
                             f"'cos' or 'linear', got {total_steps}, {pct_start}, {anneal_strategy!r}")
        self.total_steps, self.anneal_strategy, self.cycle_momentum = total_steps, anneal_strategy, cycle_momentum
        groups = optimizer.param_groups
        max_lrs = list(max_lr) if isinstance(max_lr, (list, tuple)) else [max_lr] * len(groups)
        warm = float(pct_start * total_steps)
        if three_phase:  # (end step, lr from -> to, momentum from -> to), lr names looked up per group
            self._phases = [(warm - 1, "initial_lr", "max_lr", max_momentum, base_momentum),
                            (2 * warm - 2, "max_lr", "initial_lr", base_momentum, max_momentum),
                            (total_steps - 1, "initial_lr", "min_lr", max_momentum, max_momentum)]
        else:
            self._phases = [(warm - 1, "initial_lr", "max_lr", max_momentum, base_momentum),
                            (total_steps - 1, "max_lr", "min_lr", base_momentum, max_momentum)]
        for group, peak in zip(groups, max_lrs):
            if last_epoch == -1:
                group["initial_lr"] = peak / div_factor
                group["max_lr"], group["min_lr"] = peak, peak / div_factor / final_div_factor
            if cycle_momentum:
                if "momentum" not in group and "betas" not in group:
                    raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option enabled")
                self._set_momentum(group, max_momentum)
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _set_momentum(group: dict, momentum: float) -> None:
        if "betas" in group:
            group["betas"] = (momentum, *group["betas"][1:])
        else:
            group["momentum"] = momentum

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2 * (1 + math.cos(math.pi * pct))
        return start + (end - start) * pct

    def _closed_form(self, base_lr: float, index: int) -> float:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: tried to step {step} times; the schedule has total_steps="
                             f"{self.total_steps}")
        group = self.optimizer.param_groups[index]
        start = 0.0
        for i, (end, lr_from, lr_to, m_from, m_to) in enumerate(self._phases):
            if step <= end or i == len(self._phases) - 1:
                pct = (step - start) / (end - start)
                if self.cycle_momentum:  # a side effect, as in PyTorch's get_lr
                    self._set_momentum(group, self._anneal(m_from, m_to, pct))
                return self._anneal(group[lr_from], group[lr_to], pct)
            start = end
        raise AssertionError("unreachable")


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
            self.default_min_lr = None
        else:
            self.min_lrs = [min_lr] * len(groups)
            self.default_min_lr = min_lr  # a group added later gets it, as in PyTorch
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
            groups = self.optimizer.param_groups
            if len(groups) != len(self.min_lrs):
                if getattr(self, "default_min_lr", None) is None:  # PyTorch 2.13's message
                    raise RuntimeError(
                        f"The number of param groups in the `optimizer` ({len(groups)}) differs from when "
                        f"`ReduceLROnPlateau` was initialized ({len(self.min_lrs)}), usually due to a new param "
                        f"group being added to the optimizer. Please modify the `min_lrs` field to match the "
                        f"length of the `optimizer` param groups.")
                self.min_lrs = [self.default_min_lr] * len(groups)
            for group, min_lr in zip(groups, self.min_lrs):
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


def _check_schedulers(owner: str, optimizer: Any, schedulers: Sequence[Any]) -> None:
    """PyTorch's checks of the schedulers a SequentialLR or ChainedScheduler combines."""
    for i, scheduler in enumerate(schedulers):
        if not hasattr(scheduler, "optimizer"):
            raise TypeError(f"{owner} at index {i} should have `optimizer` as its attribute.")
        if isinstance(scheduler, ReduceLROnPlateau):
            raise ValueError(f"{owner} does not support `ReduceLROnPlateau` scheduler as it "
                             f"requires additional kwargs to be specified when calling `step`, but got one "
                             f"at index {i} in the given schedulers sequence.")
        if scheduler.optimizer is not optimizer:
            raise ValueError(f"{owner} expects all schedulers to belong to the same optimizer, "
                             f"but got scheduler {type(scheduler).__name__} at index {i} has "
                             f"{scheduler.optimizer}, which is different from {type(optimizer).__name__}.")


class _Combined(LRScheduler):
    """A scheduler made of others (SequentialLR, ChainedScheduler): its state holds theirs."""

    def state_dict(self) -> dict:
        state = {key: value for key, value in self.__dict__.items() if key not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        schedulers = state.pop("_schedulers")
        self.__dict__.update(state)
        for scheduler, sub in zip(self._schedulers, schedulers):
            scheduler.load_state_dict(sub)


class SequentialLR(_Combined):
    """One scheduler after another: ``schedulers[i]`` runs from ``milestones[i-1]`` on, restarted at its epoch 0."""

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int],
                 last_epoch: int = -1, verbose: str = "deprecated") -> None:
        if len(schedulers) < 1:
            raise ValueError(f"{type(self).__name__} expects at least one scheduler, but got no scheduler.")
        _check_schedulers(type(self).__name__, optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("Sequential Schedulers expects number of schedulers provided to be one more than the "
                             f"number of milestone points, but got number of schedulers {len(schedulers)} and the "
                             f"number of milestones to be equal to {len(milestones)}")
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        # Each scheduler stepped once when it was made; undo that and start the first one.
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for scheduler in self._schedulers:
            scheduler.last_epoch -= 1
        self._schedulers[0].step()
        self._last_lr = self._schedulers[0].get_last_lr()

    def step(self, epoch: int | None = None) -> None:  # type: ignore[override]
        """Advance one epoch; at a milestone the next scheduler starts from its epoch 0."""
        if len(self.optimizer.param_groups) != len(self._schedulers[0].base_lrs):
            raise RuntimeError(
                f"SequentialLR: the optimizer has {len(self.optimizer.param_groups)} parameter groups, but had "
                f"{len(self._schedulers[0].base_lrs)} when this scheduler was made (a group added since); "
                f"PyTorch 2.13 raises too. Make the schedulers after adding the group")
        self.last_epoch += 1
        index = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[index]
        if index > 0 and self._milestones[index - 1] == self.last_epoch:
            scheduler.step(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ChainedScheduler(_Combined):
    """Several schedulers at once: each group's lr is its initial lr times every scheduler's factor.

    PyTorch's schedulers step recursively (each multiplies the lr the previous
    one left); tinyamp's are closed forms, so the chain multiplies their factors
    (``lr / initial_lr`` of each): the same learning rates for the
    multiplicative schedules (StepLR, MultiStepLR, ExponentialLR, LinearLR,
    LambdaLR).
    """

    def __init__(self, schedulers: Sequence[LRScheduler], optimizer: "Optimizer | None" = None) -> None:
        if len(schedulers) < 1:
            raise ValueError(f"{type(self).__name__} expects at least one scheduler to be chained, but got no "
                             f"scheduler.")
        optimizer = optimizer or schedulers[0].optimizer
        _check_schedulers(type(self).__name__, optimizer, schedulers)
        self._schedulers = list(schedulers)
        self.optimizer = optimizer
        self._set_product()

    def _set_product(self) -> None:
        lrs = []
        for i, group in enumerate(self.optimizer.param_groups):
            lr = self._schedulers[0]._reference_lr(i)  # initial_lr, or a group's lr when it was added
            for scheduler in self._schedulers:
                base = scheduler._reference_lr(i)
                lr *= scheduler.get_last_lr()[i] / base if base else 0.0
            group["lr"] = lr
            lrs.append(lr)
        self._last_lr = lrs

    def step(self, epoch: int | None = None) -> None:  # type: ignore[override]
        """Step every scheduler once, then set the product of their factors."""
        for scheduler in self._schedulers:
            scheduler.step()
        self._set_product()
