"""Learning-rate schedulers, as ``torch.optim.lr_scheduler``.

A scheduler rewrites ``group["lr"]`` of its optimiser's parameter groups each time its
``step()`` is called (once per epoch or per batch, after ``optimizer.step()``). The
formulas, including torch's recursive (chainable) forms, follow torch so that the learning
rates match torch's to the last bit of a float64:

>>> import dualgraph as dg
>>> w = dg.zeros(2, requires_grad=True)
>>> opt = dg.optim.SGD([w], lr=1.0)
>>> sched = dg.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
>>> lrs = []
>>> for epoch in range(5):
...     opt.step()
...     sched.step()
...     lrs.append(sched.get_last_lr()[0])
>>> lrs
[1.0, 0.5, 0.5, 0.25, 0.25]

A group's ``lr`` may be a 0-d tensor (``lr=dg.tensor(0.1)``): schedulers then write into
it in place, so a captured training step reads it as a graph input instead of baking the
value in as a constant (and retracing whenever it changes).
"""
from __future__ import annotations

import functools
import math
import types
import warnings
import weakref
from bisect import bisect_right
from collections import Counter

from ..ops import creation
from ..ops.inplace import commit_inplace
from ..tensor import Tensor

__all__ = ["LRScheduler", "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR",
           "ConstantLR", "LinearLR", "ExponentialLR", "PolynomialLR", "CosineAnnealingLR",
           "CosineAnnealingWarmRestarts", "SequentialLR", "ChainedScheduler", "OneCycleLR",
           "CyclicLR", "ReduceLROnPlateau"]


def _set(group: dict, key: str, value) -> None:
    """Set a hyper-parameter; a tensor-valued one is updated in place."""
    current = group[key]
    if isinstance(current, Tensor):
        commit_inplace(current, creation.full_like(current, float(value)))
    else:
        group[key] = value


def _lrs(optimizer) -> list:
    return [group["lr"] for group in optimizer.param_groups]


def _per_group(name: str, optimizer, value) -> list:
    """``value`` for every group: a list as given (one per group) or a repeated scalar."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"expected {n} values for {name} (one per param group), "
                             f"got {len(value)}")
        return list(value)
    return [value] * n


def _check_optimizer(optimizer) -> None:
    """An optimiser is what has ``param_groups`` (a list of dicts) and a ``step`` method:
    ``dg.optim.Optimizer`` or a user's class written in its image without subclassing it."""
    groups = getattr(optimizer, "param_groups", None)
    if not (isinstance(groups, list) and all(isinstance(g, dict) for g in groups)
            and callable(getattr(optimizer, "step", None))):
        raise TypeError(f"{type(optimizer).__name__} is not an Optimizer: a scheduler needs "
                        "an object with param_groups (a list of dicts) and a step() method")


def _track_step_calls(optimizer) -> None:
    """Wrap ``optimizer.step`` on the instance, as torch does, so that calling it marks
    ``_opt_called``: the warning about calling the scheduler first then holds for every
    optimiser, including a user's that overrides ``step`` or doesn't subclass Optimizer."""
    step = optimizer.step
    if getattr(step, "_marks_opt_called", False):
        return
    # The wrapper holds neither the optimiser nor its bound method (nor as ``__wrapped__``):
    # either would make optimizer -> step -> optimizer a reference cycle, which leaves a
    # dropped optimiser, its state and the model's parameters to a full collection.
    func = getattr(step, "__func__", None)
    call = step if func is None else None   # (a callable the instance holds, not a method)
    owner = weakref.ref(optimizer)

    @functools.wraps(step if func is None else func)
    def marked_step(*args, **kwargs):
        opt = owner()
        opt._opt_called = True
        return func(opt, *args, **kwargs) if call is None else call(*args, **kwargs)

    marked_step._marks_opt_called = True
    optimizer.step = marked_step


class LRScheduler:
    """Base class: keeps ``base_lrs`` (each group's ``initial_lr``) and ``last_epoch`` (the
    number of ``step()`` calls so far, -1 before the first), and after each ``step()`` writes
    :meth:`get_lr` into the groups. Subclasses define :meth:`get_lr`."""

    _is_initial = False

    def __init__(self, optimizer, last_epoch: int = -1):
        _check_optimizer(optimizer)
        _track_step_calls(optimizer)
        self.optimizer = optimizer
        for i, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                lr = group["lr"]
                group.setdefault("initial_lr", creation.clone(lr)
                                 if isinstance(lr, Tensor) else lr)
            elif "initial_lr" not in group:
                raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] "
                               "when resuming a scheduler with last_epoch >= 0; load the "
                               "optimizer's state_dict first")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list:
        """The learning rates for epoch ``last_epoch``, one per group."""
        raise NotImplementedError

    def get_last_lr(self) -> list:
        """The learning rates the last ``step()`` set, one per group."""
        return self._last_lr

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or jump to ``epoch``, deprecated as in torch)."""
        if self._step_count == 1 and not getattr(self.optimizer, "_opt_called", False):
            warnings.warn("lr_scheduler.step() was called before optimizer.step(); call "
                          "optimizer.step() first, or the first learning rate of the "
                          "schedule is skipped", UserWarning, stacklevel=2)
        self._step_count += 1
        if epoch is not None:
            warnings.warn("passing an epoch to step() is deprecated", UserWarning,
                          stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        """Set the learning rates for the next epoch, or for ``epoch`` (by the closed form
        where the scheduler has one: the recursive form needs the previous epoch's rate)."""
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            values = (self._closed_form_lr() if hasattr(self, "_closed_form_lr")
                      else self.get_lr())
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            _set(group, "lr", lr)
        self._last_lr = _lrs(self.optimizer)

    def state_dict(self) -> dict:
        """Everything but the optimiser (which has its own state_dict)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)


class _LambdaScheduler(LRScheduler):
    """Shared by LambdaLR and MultiplicativeLR: one function of the epoch per group.

    Functions are not saved by ``state_dict`` (only the attributes of callable objects), as
    in torch."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.optimizer = optimizer
        self.lr_lambdas = _per_group("lr_lambda", optimizer, lr_lambda)
        for fn in self.lr_lambdas:
            if not callable(fn):
                raise TypeError(f"lr_lambda should be a function, got {type(fn).__name__}")
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else
                               dict(fn.__dict__) for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        for fn, saved in zip(self.lr_lambdas, state.pop("lr_lambdas")):
            if saved is not None:
                fn.__dict__.update(saved)
        self.__dict__.update(state)


class LambdaLR(_LambdaScheduler):
    """``lr = initial_lr * lr_lambda(epoch)``.

    >>> import dualgraph as dg
    >>> opt = dg.optim.SGD([dg.zeros(1, requires_grad=True)], lr=0.1)
    >>> sched = dg.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.5 ** epoch)
    """

    def get_lr(self):
        return [base * fn(self.last_epoch) for fn, base in zip(self.lr_lambdas, self.base_lrs)]


class MultiplicativeLR(_LambdaScheduler):
    """``lr = lr * lr_lambda(epoch)`` at every step after the first."""

    def get_lr(self):
        if self._is_initial:
            return _lrs(self.optimizer)
        return [group["lr"] * fn(self.last_epoch)
                for fn, group in zip(self.lr_lambdas, self.optimizer.param_groups)]


class StepLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` every ``step_size`` epochs."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return _lrs(self.optimizer)
        return [lr * self.gamma for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        return [base * self.gamma ** (self.last_epoch // self.step_size)
                for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` at each epoch in ``milestones``."""

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return _lrs(self.optimizer)
        factor = self.gamma ** self.milestones[self.last_epoch]
        return [lr * factor for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        milestones = sorted(self.milestones.elements())
        return [base * self.gamma ** bisect_right(milestones, self.last_epoch)
                for base in self.base_lrs]

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        # A saved Counter may come back from JSON with string keys.
        self.milestones = Counter({int(k): v for k, v in self.milestones.items()})


class ConstantLR(LRScheduler):
    """Multiply the learning rate by ``factor`` for the first ``total_iters`` epochs."""

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1):
        if not 0 <= factor <= 1:
            raise ValueError(f"ConstantLR's factor must be in [0, 1], got {factor}")
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [lr * self.factor for lr in _lrs(self.optimizer)]
        if self.last_epoch != self.total_iters:
            return _lrs(self.optimizer)
        return [lr * (1.0 / self.factor) for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        factor = self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor)
        return [base * factor for base in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale the learning rate by a factor going linearly from ``start_factor`` to
    ``end_factor`` over ``total_iters`` epochs (a warm-up with the defaults)."""

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not 0 < start_factor <= 1:
            raise ValueError(f"LinearLR's start_factor must be in (0, 1], got {start_factor}")
        if not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR's end_factor must be in [0, 1], got {end_factor}")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in _lrs(self.optimizer)]
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        delta = self.end_factor - self.start_factor
        factor = 1.0 + delta / (self.total_iters * self.start_factor
                                + (self.last_epoch - 1) * delta)
        return [lr * factor for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        done = min(self.total_iters, self.last_epoch)
        factor = (self.start_factor
                  + (self.end_factor - self.start_factor) * done / self.total_iters)
        return [base * factor for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` every epoch."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return _lrs(self.optimizer)
        return [lr * self.gamma for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class PolynomialLR(LRScheduler):
    """Decay the learning rate as ``(1 - epoch / total_iters) ** power`` to zero."""

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0,
                 last_epoch: int = -1):
        self.total_iters = total_iters
        self.power = power
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        factor = ((1.0 - self.last_epoch / self.total_iters)
                  / (1.0 - (self.last_epoch - 1) / self.total_iters)) ** self.power
        return [lr * factor for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        factor = (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
        return [base * factor for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from the initial learning rate to ``eta_min`` over ``T_max``
    epochs (then back up, periodically), in torch's recursive form: each step rescales
    the current learning rate, so it composes with other schedulers changing it."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        epoch, t_max, eta_min = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return _lrs(self.optimizer)
        if self._step_count == 1 and epoch > 0:   # resumed with last_epoch: closed form
            return self._closed_form_lr()
        if (epoch - 1 - t_max) % (2 * t_max) == 0:   # the bottom of a cycle
            return [group["lr"] + (base - eta_min) * (1 - math.cos(math.pi / t_max)) / 2
                    for base, group in zip(self.base_lrs, self.optimizer.param_groups)]
        ratio = ((1 + math.cos(math.pi * epoch / t_max))
                 / (1 + math.cos(math.pi * (epoch - 1) / t_max)))
        return [ratio * (lr - eta_min) + eta_min for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        cos = math.cos(math.pi * self.last_epoch / self.T_max)
        return [self.eta_min + (base - self.eta_min) * (1 + cos) / 2 for base in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from the initial learning rate to ``eta_min`` over ``T_0`` epochs,
    then restarting, each period ``T_mult`` times the previous (SGDR, Loshchilov & Hutter).
    ``step(epoch)`` takes fractional epochs (``epoch + i / iters`` once per batch), as
    torch's.

    >>> import dualgraph as dg
    >>> opt = dg.optim.SGD([dg.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = dg.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2)
    >>> opt.step(); sched.step(); sched.get_last_lr()
    [0.5]
    """

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,
                 last_epoch: int = -1):
        if not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        self.T_0 = self.T_i = T_0
        self.T_mult = T_mult
        self.eta_min = eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        cos = math.cos(math.pi * self.T_cur / self.T_i)
        return [self.eta_min + (base - self.eta_min) * (1 + cos) / 2 for base in self.base_lrs]

    def step(self, epoch=None) -> None:
        """Advance one epoch, or go to ``epoch`` (a float for a position within one)."""
        self._step_count += 1
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:   # a restart
                self.T_cur -= self.T_i
                self.T_i *= self.T_mult
        elif epoch < 0:
            raise ValueError(f"Expected non-negative epoch, but got {epoch}")
        elif epoch < self.T_0:
            self.T_i, self.T_cur = self.T_0, epoch
        elif self.T_mult == 1:
            self.T_cur = epoch % self.T_0
        else:   # the period that epoch falls in: T_0 * (1 + m + ... + m^(n-1)) <= epoch
            n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
            self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
            self.T_i = self.T_0 * self.T_mult ** n
        self.last_epoch = math.floor(epoch)
        for group, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            _set(group, "lr", lr)
        self._last_lr = _lrs(self.optimizer)


class _Composite(LRScheduler):
    """Shared by SequentialLR and ChainedScheduler: a list of schedulers of one optimiser,
    saved and loaded together."""

    def _set_schedulers(self, optimizer, schedulers) -> None:
        if not schedulers:
            raise ValueError(f"{type(self).__name__} needs at least one scheduler")
        for i, s in enumerate(schedulers):
            if isinstance(s, ReduceLROnPlateau):
                raise ValueError(f"{type(self).__name__} does not support ReduceLROnPlateau "
                                 f"(at index {i}): its step() needs a metric")
            if s.optimizer is not optimizer:
                raise ValueError(f"{type(self).__name__}: the scheduler at index {i} belongs "
                                 "to a different optimizer")
        self.optimizer = optimizer
        self._schedulers = list(schedulers)

    def state_dict(self) -> dict:
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        for s, saved in zip(self._schedulers, state.pop("_schedulers")):
            s.load_state_dict(saved)
        self.__dict__.update(state)


class SequentialLR(_Composite):
    """Run ``schedulers[i]`` from epoch ``milestones[i - 1]`` on (e.g. a LinearLR warm-up,
    then cosine annealing); each restarts from the initial learning rate."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        self._set_schedulers(optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR needs one milestone fewer than schedulers, got "
                             f"{len(schedulers)} schedulers and {len(milestones)} milestones")
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        for group in optimizer.param_groups:
            _set(group, "lr", group["initial_lr"])
        for s in self._schedulers:   # undo the initial step each scheduler made
            s.last_epoch -= 1
        first = self._schedulers[bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def step(self):
        self.last_epoch += 1
        i = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[i]
        if i > 0 and self._milestones[i - 1] == self.last_epoch:
            scheduler._update_lr(0)   # a fresh start of the next scheduler
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


class ChainedScheduler(_Composite):
    """Step several schedulers at once; their (chainable) changes compose."""

    def __init__(self, schedulers, optimizer=None):
        self._set_schedulers(optimizer or schedulers[0].optimizer, schedulers)
        self._last_lr = _lrs(self.optimizer)

    def step(self):
        for s in self._schedulers:
            s.step()
        self._last_lr = _lrs(self.optimizer)


class _MomentumCycle:
    """Shared by OneCycleLR and CyclicLR: with ``cycle_momentum`` they move each group's
    momentum (or Adam's beta1) between ``base_momentum`` and ``max_momentum``."""

    def _init_momentum(self, optimizer, cycle_momentum, base_momentum, max_momentum,
                       last_epoch) -> None:
        self.cycle_momentum = cycle_momentum
        if not cycle_momentum:
            return
        if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
            raise ValueError("optimizer must support momentum or beta1 with "
                             "`cycle_momentum` option enabled")
        self.use_beta1 = "betas" in optimizer.defaults
        if last_epoch == -1:
            for group, top, base in zip(
                    optimizer.param_groups,
                    _per_group("max_momentum", optimizer, max_momentum),
                    _per_group("base_momentum", optimizer, base_momentum)):
                self._set_momentum(group, top)
                group["max_momentum"] = top
                group["base_momentum"] = base

    def _set_momentum(self, group: dict, value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value


class OneCycleLR(_MomentumCycle, LRScheduler):
    """The 1cycle policy (Smith & Topin): warm up from ``max_lr / div_factor`` to ``max_lr``
    over ``pct_start`` of ``total_steps``, then anneal to ``initial_lr / final_div_factor``
    (``three_phase``: back to the initial rate first). With ``cycle_momentum`` the momentum
    (or Adam's beta1) moves inversely between ``max_momentum`` and ``base_momentum``.
    Step it after every batch."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True,
                 base_momentum=0.85, max_momentum=0.95, div_factor=25.0,
                 final_div_factor=1e4, three_phase=False, last_epoch=-1):
        _check_optimizer(optimizer)
        self.optimizer = optimizer
        self.total_steps = _total_steps(total_steps, epochs, steps_per_epoch)
        if not 0 <= pct_start <= 1:
            raise ValueError(f"expected pct_start in [0, 1], got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be 'cos' or 'linear', got "
                             f"{anneal_strategy!r}")
        self._anneal_func_type = anneal_strategy
        self._schedule_phases = _one_cycle_phases(pct_start, self.total_steps, three_phase)
        if last_epoch == -1:
            for group, top in zip(optimizer.param_groups,
                                  _per_group("max_lr", optimizer, max_lr)):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self._init_momentum(optimizer, cycle_momentum, base_momentum, max_momentum,
                            last_epoch)
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"tried to step {step} times; OneCycleLR was set up for "
                             f"total_steps={self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end = phase["end_step"]
                if step <= end or i == len(self._schedule_phases) - 1:
                    pct = (step - start) / (end - start)
                    break
                start = end
            lrs.append(self._anneal(group[phase["start_lr"]], group[phase["end_lr"]], pct))
            if self.cycle_momentum:
                self._set_momentum(group, self._anneal(group[phase["start_momentum"]],
                                                       group[phase["end_momentum"]], pct))
        return lrs


class CyclicLR(_MomentumCycle, LRScheduler):
    """Cyclical learning rates (Smith): up from ``base_lr`` to ``max_lr`` in
    ``step_size_up`` steps and down in ``step_size_down``, the amplitude scaled per cycle
    (``mode``: ``"triangular"`` constant, ``"triangular2"`` halved each cycle,
    ``"exp_range"`` ``gamma ** step``) or by ``scale_fn``; the momentum moves the other way
    with ``cycle_momentum``. Step it after every batch.

    >>> import dualgraph as dg
    >>> opt = dg.optim.SGD([dg.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9)
    >>> sched = dg.optim.lr_scheduler.CyclicLR(opt, 0.1, 1.0, step_size_up=2)
    >>> opt.step(); sched.step(); sched.get_last_lr()
    [0.55]
    """

    def __init__(self, optimizer, base_lr, max_lr, step_size_up=2000, step_size_down=None,
                 mode="triangular", gamma=1.0, scale_fn=None, scale_mode="cycle",
                 cycle_momentum=True, base_momentum=0.8, max_momentum=0.9, last_epoch=-1):
        _check_optimizer(optimizer)
        base_lrs = _per_group("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for group, lr in zip(optimizer.param_groups, base_lrs):
                _set(group, "lr", lr)
        self.max_lrs = _per_group("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = up if step_size_down is None else float(step_size_down)
        self.total_size, self.step_ratio = up + down, up / (up + down)
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(f"mode must be 'triangular', 'triangular2' or 'exp_range' "
                             f"when scale_fn is None, got {mode!r}")
        self.mode, self.gamma, self.scale_fn = mode, gamma, scale_fn
        self.scale_mode = (scale_mode if scale_fn is not None
                           else "iterations" if mode == "exp_range" else "cycle")
        self._init_momentum(optimizer, cycle_momentum, base_momentum, max_momentum,
                            last_epoch)
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _scale(self, x):
        if self.scale_fn is not None:
            return self.scale_fn(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self):
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        up = x <= self.step_ratio
        factor = x / self.step_ratio if up else (x - 1) / (self.step_ratio - 1)
        scale = self._scale(cycle if self.scale_mode == "cycle" else self.last_epoch)
        if self.cycle_momentum:
            for group in self.optimizer.param_groups:
                top, base = group["max_momentum"], group["base_momentum"]
                self._set_momentum(group, top - (top - base) * factor * scale)
        return [base + (top - base) * factor * scale
                for base, top in zip(self.base_lrs, self.max_lrs)]

    def state_dict(self) -> dict:
        """As the base's, without a ``scale_fn`` function (code is not state; torch drops
        it too)."""
        return {k: v for k, v in super().state_dict().items() if k != "scale_fn"}


def _total_steps(total_steps, epochs, steps_per_epoch) -> int:
    if total_steps is not None:
        if not isinstance(total_steps, int) or total_steps <= 0:
            raise ValueError(f"expected a positive integer total_steps, got {total_steps}")
        return total_steps
    if epochs is None or steps_per_epoch is None:
        raise ValueError("OneCycleLR needs total_steps, or epochs and steps_per_epoch")
    for name, value in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"expected a positive integer {name}, got {value}")
    return epochs * steps_per_epoch


def _one_cycle_phases(pct_start: float, total_steps: int, three_phase: bool) -> list:
    """Phases as torch lays them out: the end step and which group keys to anneal."""
    def phase(end_step, lr_from, lr_to, mom_from, mom_to):
        return {"end_step": end_step, "start_lr": lr_from, "end_lr": lr_to,
                "start_momentum": mom_from, "end_momentum": mom_to}
    warmup_end = float(pct_start * total_steps) - 1
    if not three_phase:
        return [phase(warmup_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                phase(total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
    return [phase(warmup_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
            phase(float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr",
                  "base_momentum", "max_momentum"),
            phase(total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]


class ReduceLROnPlateau(LRScheduler):
    """Multiply the learning rate by ``factor`` when a metric (passed to ``step``) has not
    improved for ``patience`` epochs; wait ``cooldown`` epochs after each reduction.

    >>> import dualgraph as dg
    >>> opt = dg.optim.SGD([dg.zeros(1, requires_grad=True)], lr=0.1)
    >>> sched = dg.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
    >>> sched.step(1.0); sched.step(2.0); sched.get_last_lr()
    [0.010000000000000002]
    """

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8):
        if factor >= 1.0:
            raise ValueError("ReduceLROnPlateau's factor should be < 1.0")
        _check_optimizer(optimizer)
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"threshold_mode must be 'rel' or 'abs', got {threshold_mode!r}")
        self.optimizer = optimizer
        self.factor = factor
        self.min_lrs = _per_group("min_lr", optimizer, min_lr)
        self.patience, self.cooldown, self.eps = patience, cooldown, eps
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.last_epoch = 0
        self._last_lr = _lrs(optimizer)
        self.best = math.inf if mode == "min" else -math.inf
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(self, metrics, epoch=None):
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self._is_better(current):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0   # bad epochs in cooldown don't count
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = _lrs(self.optimizer)

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def _reduce_lr(self) -> None:
        for group, min_lr in zip(self.optimizer.param_groups, self.min_lrs, strict=True):
            old = float(group["lr"])
            new = max(old * self.factor, min_lr)
            if old - new > self.eps:
                _set(group, "lr", new)

    def _is_better(self, a: float) -> bool:
        best, threshold = self.best, self.threshold
        if self.mode == "min":
            return a < best * (1.0 - threshold) if self.threshold_mode == "rel" \
                else a < best - threshold
        return a > best * (threshold + 1.0) if self.threshold_mode == "rel" \
            else a > best + threshold
