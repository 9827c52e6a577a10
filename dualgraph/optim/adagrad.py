"""Adagrad, as ``torch.optim.Adagrad``."""
from __future__ import annotations

from ..ops import creation
from . import _ops
from .optimizer import Optimizer, check_hyper, regularized_grad, step_counter


class Adagrad(Optimizer):
    """Divide the gradient by the root of the running sum of its squares (plus ``eps``),
    with a learning rate ``lr / (1 + (t - 1) * lr_decay)`` at step ``t``.

    >>> import dualgraph as dg
    >>> w = dg.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = dg.optim.Adagrad([w], lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> w
    tensor([ 0.9, -1.9], requires_grad=True)
    """

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0,
                 initial_accumulator_value=0, eps=1e-10, *, maximize=False):
        check_hyper("learning rate", lr)
        check_hyper("lr_decay value", lr_decay)
        check_hyper("weight_decay value", weight_decay)
        check_hyper("initial_accumulator_value", initial_accumulator_value)
        check_hyper("epsilon value", eps)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      eps=eps, maximize=maximize))
        # torch creates Adagrad's state up front, so a fresh state_dict already has it.
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p].update(self._init_state(p, group))

    def _init_state(self, p, group):
        return {"step": step_counter(),
                "sum": creation.state_like(p, group["initial_accumulator_value"])}

    elementwise_update = True   # (one flat step for small parameters: optim/flat.py)

    def _update(self, p, grad, state, group):
        step = state["step"].add_(1)
        grad = regularized_grad(p, grad, group)
        clr = group["lr"] / (1 + (step - 1) * group["lr_decay"])
        std = _ops.addcmul_(state["sum"], grad, grad).sqrt() + group["eps"]
        _ops.addcdiv_(p, grad, std, value=-clr)
