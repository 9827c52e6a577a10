"""Weight averaging, as ``torch.optim.swa_utils``: :class:`AveragedModel` (a copy of a model
whose parameters are a running average of the model's: stochastic weight averaging by
default, an exponential moving average with :func:`get_ema_multi_avg_fn`), :class:`SWALR`
(anneals each group's learning rate to a constant ``swa_lr``) and :func:`update_bn` (one pass
over data to recompute BatchNorm statistics for averaged weights).

The arithmetic is torch's on the CPU, so averaged weights are torch's bits: the default
average is ``avg + (model - avg) / (n + 1)`` per parameter, the EMA functions ``lerp``."""
from __future__ import annotations

import copy
import itertools
import math

from ..autograd import no_grad
from ..nn.layers.norm import _BatchNorm
from ..nn.module import Module
from ..ops import creation
from .lr_scheduler import LRScheduler, _per_group

__all__ = ["AveragedModel", "SWALR", "update_bn", "get_ema_multi_avg_fn",
           "get_swa_multi_avg_fn", "get_ema_avg_fn", "get_swa_avg_fn"]


def _check_decay(decay: float) -> None:
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in "
                         "[0,1] range.")


def get_ema_multi_avg_fn(decay: float = 0.999):
    """In place over lists: ``ema = lerp(ema, model, 1 - decay)`` (integer tensors:
    ``ema * decay + model * (1 - decay)``)."""
    _check_decay(decay)

    @no_grad()
    def ema_update(ema_params, current_params, _num_averaged):
        if ema_params[0].is_floating_point():
            for ema, current in zip(ema_params, current_params, strict=True):
                ema.lerp_(current, 1 - decay)
        else:
            for ema, current in zip(ema_params, current_params, strict=True):
                ema.copy_(ema * decay + current * (1 - decay))
    return ema_update


def get_swa_multi_avg_fn():
    """In place over lists: the equal-weight running average, ``lerp(avg, model, 1/(n+1))``
    (integer tensors: ``avg + (model - avg) / (n + 1)``)."""
    @no_grad()
    def swa_update(averaged_params, current_params, num_averaged):
        if averaged_params[0].is_floating_point():
            weight = float(1 / (num_averaged + 1))
            for avg, current in zip(averaged_params, current_params, strict=True):
                avg.lerp_(current, weight)
        else:
            for avg, current in zip(averaged_params, current_params, strict=True):
                avg.copy_(avg + (current - avg) / (num_averaged + 1))
    return swa_update


def get_ema_avg_fn(decay: float = 0.999):
    """One parameter: ``decay * ema + (1 - decay) * model``."""
    _check_decay(decay)

    @no_grad()
    def ema_update(ema_param, current_param, _num_averaged):
        return decay * ema_param + (1 - decay) * current_param
    return ema_update


def get_swa_avg_fn():
    """One parameter: ``avg + (model - avg) / (n + 1)``."""
    @no_grad()
    def swa_update(averaged_param, current_param, num_averaged):
        return averaged_param + (current_param - averaged_param) / (num_averaged + 1)
    return swa_update


class AveragedModel(Module):
    """A deep copy of ``model`` (``self.module``) whose parameters (and buffers, with
    ``use_buffers=True``) :meth:`update_parameters` averages with the model's: the first
    call copies them, later ones apply ``avg_fn`` (one tensor at a time) or
    ``multi_avg_fn`` (lists, in place), by default the equal-weight average. Without
    ``use_buffers`` the buffers are copied from the model at every update. ``n_averaged``
    (a buffer, so saved in the state dict) counts the updates. Calling it calls the copy."""

    def __init__(self, model: Module, device=None, avg_fn=None, multi_avg_fn=None,
                 use_buffers: bool = False):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", creation.tensor(0, dtype="int64"))
        self.avg_fn, self.multi_avg_fn, self.use_buffers = avg_fn, multi_avg_fn, use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _averaged(self, model: Module):
        if self.use_buffers:
            return (itertools.chain(self.module.parameters(), self.module.buffers()),
                    itertools.chain(model.parameters(), model.buffers()))
        return self.parameters(), model.parameters()

    def update_parameters(self, model: Module) -> None:
        """Fold ``model``'s current parameters into the average."""
        mine, theirs = self._averaged(model)
        pairs = [(p.detach(), q.detach()) for p, q in zip(mine, theirs)]
        with no_grad():
            first = int(self.n_averaged) == 0
            if first:
                for averaged, current in pairs:
                    averaged.copy_(current)
            elif self.avg_fn is not None:
                for averaged, current in pairs:
                    averaged.copy_(self.avg_fn(averaged, current, self.n_averaged))
            else:
                self._average_groups(pairs)
            if not self.use_buffers:
                for mine_b, theirs_b in zip(self.module.buffers(), model.buffers(),
                                            strict=True):
                    mine_b.copy_(theirs_b.detach())
            self.n_averaged += 1

    def _average_groups(self, pairs) -> None:
        """``multi_avg_fn`` once per dtype's list (torch groups by device and dtype), or
        the default average a tensor at a time, as torch on the CPU."""
        if self.multi_avg_fn is None:
            average = get_swa_avg_fn()
            for averaged, current in pairs:
                averaged.copy_(average(averaged, current, self.n_averaged))
            return
        groups: dict = {}
        for averaged, current in pairs:
            groups.setdefault(averaged.dtype, []).append((averaged, current))
        for group in groups.values():
            self.multi_avg_fn([a for a, _ in group], [c for _, c in group], self.n_averaged)


@no_grad()
def update_bn(loader, model: Module, device=None) -> None:
    """Recompute every BatchNorm's running statistics of ``model`` as the plain average over
    one pass of ``loader`` (a batch, or a list/tuple whose first item is the input), in
    training mode; momenta and the training flag are restored after."""
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
    """Anneals each group's learning rate from its value to ``swa_lr`` over
    ``anneal_epochs`` steps (``"cos"`` or ``"linear"``), then holds it there."""

    def __init__(self, optimizer, swa_lr, anneal_epochs: int = 10,
                 anneal_strategy: str = "cos", last_epoch: int = -1):
        for value, group in zip(_per_group("swa_lr", optimizer, swa_lr),
                                optimizer.param_groups, strict=True):
            group["swa_lr"] = value
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got "
                             f"{anneal_epochs}")
        self._anneal_strategy, self.anneal_epochs = anneal_strategy, anneal_epochs
        super().__init__(optimizer, last_epoch)

    def anneal_func(self, t: float) -> float:
        return (1 - math.cos(math.pi * t)) / 2 if self._anneal_strategy == "cos" else t

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        return swa_lr if alpha == 1 else (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self) -> list:
        # the rate before annealing is recovered from the current one, so that another
        # scheduler may have changed it between steps (torch's recursive form)
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        groups = self.optimizer.param_groups
        return [g["swa_lr"] * alpha + self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha)
                * (1 - alpha) for g in groups]
