"""Rprop and ASGD, as ``torch.optim.Rprop`` / ``torch.optim.ASGD``."""
from __future__ import annotations

from ..ops import creation, elementwise
from . import _ops
from .optimizer import Optimizer, check_hyper, regularized_grad, step_counter


class Rprop(Optimizer):
    """Resilient backpropagation (Riedmiller & Braun): each weight moves by its own step
    size against the gradient's sign; the step size grows by ``etas[1]`` while the sign
    holds, shrinks by ``etas[0]`` when it flips (and that step is skipped), within
    ``step_sizes``.

    >>> import dualgraph as dg
    >>> w = dg.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = dg.optim.Rprop([w], lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> w
    tensor([ 0.9000, -1.9000], requires_grad=True)
    """

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 maximize=False):
        check_hyper("learning rate", lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]} (need "
                             "0 < etaminus < 1 < etaplus)")
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes),
                                      maximize=maximize))

    def _init_state(self, p, group):
        return {"step": step_counter(), "prev": creation.state_like(p),
                "step_size": creation.state_like(p, float(group["lr"]))}

    elementwise_update = True   # (one flat step for small parameters: optim/flat.py)

    def _update(self, p, grad, state, group):
        (etaminus, etaplus), (low, high) = group["etas"], group["step_sizes"]
        state["step"].add_(1)
        grad = -grad if group["maximize"] else grad
        sign = (grad * state["prev"]).sign()
        factor = elementwise.where(sign > 0, etaplus, elementwise.where(sign < 0, etaminus, 1))
        step_size = _ops.copy_(state["step_size"],
                               (state["step_size"] * factor).clamp(low, high))
        grad = elementwise.where(sign < 0, 0, grad)   # a flipped sign: no step this time
        _ops.addcmul_(p, grad.sign(), step_size, value=-1)
        _ops.copy_(state["prev"], grad)


class ASGD(Optimizer):
    """Averaged SGD (Polyak & Juditsky): SGD with a learning rate ``eta`` decaying as
    ``lr / (1 + lambd * lr * t) ** alpha`` and an average ``ax`` of the iterates from step
    ``t0`` on (in ``state["ax"]``; the parameters themselves follow plain SGD).

    >>> import dualgraph as dg
    >>> w = dg.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = dg.optim.ASGD([w], lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step()
    """

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, *,
                 maximize=False):
        check_hyper("learning rate", lr)
        check_hyper("weight_decay value", weight_decay)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0,
                                      weight_decay=weight_decay, maximize=maximize))

    def _init_state(self, p, group):
        # eta and mu are 0-d float64 like step: schedule values, graph inputs when captured
        return {"step": step_counter(), "eta": step_counter(group["lr"]),
                "mu": step_counter(1), "ax": creation.state_like(p)}

    elementwise_update = True   # (one flat step for small parameters: optim/flat.py)

    def _update(self, p, grad, state, group):
        lr, lambd = group["lr"], group["lambd"]
        step = state["step"].add_(1)
        grad = regularized_grad(p, grad, group)
        eta, mu = state["eta"], state["mu"]
        p.mul_(1 - lambd * eta)
        p.sub_(grad * eta)
        ax = state["ax"]
        _ops.copy_(ax, elementwise.where(mu == 1, p, ax + (p - ax) * mu))
        _ops.copy_(eta, lr / (1 + lambd * lr * step) ** group["alpha"])
        _ops.copy_(mu, 1 / elementwise.maximum(step - group["t0"], 1.0))
