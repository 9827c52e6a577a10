"""RMSprop, as ``torch.optim.RMSprop``."""
from __future__ import annotations

from ..ops import creation
from . import _ops
from .optimizer import Optimizer, check_hyper, regularized_grad, step_counter


class RMSprop(Optimizer):
    """Divide the gradient by the root of a moving average ``v = alpha * v + (1 - alpha) *
    g**2`` (minus the squared mean gradient when ``centered``), plus ``eps``; with
    ``momentum`` the quotient feeds a momentum buffer.

    >>> import dualgraph as dg
    >>> w = dg.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = dg.optim.RMSprop([w], lr=0.01)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> w
    tensor([ 0.9, -1.9], requires_grad=True)
    """

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, *, maximize=False):
        check_hyper("learning rate", lr)
        check_hyper("epsilon value", eps)
        check_hyper("momentum value", momentum)
        check_hyper("weight_decay value", weight_decay)
        check_hyper("alpha value", alpha)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered,
                                      maximize=maximize))

    def _init_state(self, p, group):
        state = {"step": step_counter(), "square_avg": creation.state_like(p)}
        if group["momentum"] > 0:
            state["momentum_buffer"] = creation.state_like(p)
        if group["centered"]:
            state["grad_avg"] = creation.state_like(p)
        return state

    elementwise_update = True   # (one flat step for small parameters: optim/flat.py)

    def _update(self, p, grad, state, group):
        grad = regularized_grad(p, grad, group)
        alpha = group["alpha"]
        state["step"].add_(1)
        square_avg = _ops.addcmul_(state["square_avg"].mul_(alpha), grad, grad,
                                   value=1 - alpha)
        if group["centered"]:
            grad_avg = _ops.lerp_(state["grad_avg"], grad, 1 - alpha)
            avg = (square_avg - grad_avg * grad_avg).sqrt() + group["eps"]
        else:
            avg = square_avg.sqrt() + group["eps"]
        if group["momentum"] > 0:
            buf = _ops.addcdiv_(state["momentum_buffer"].mul_(group["momentum"]), grad, avg)
            p.add_(buf, alpha=-group["lr"])
        else:
            _ops.addcdiv_(p, grad, avg, value=-group["lr"])
