"""Stochastic gradient descent with momentum, as ``torch.optim.SGD``."""
from __future__ import annotations

from ..ops import creation
from ..tensor import Tensor
from . import _ops
from .optimizer import Optimizer, check_hyper, regularized_grad, scalar_hypers


class SGD(Optimizer):
    """``p -= lr * g`` where ``g`` is the gradient (plus ``weight_decay * p``), or with
    ``momentum`` the buffer ``b = momentum * b + (1 - dampening) * g`` (``b = g`` at the
    first step) and ``g = b``, or ``g + momentum * b`` with ``nesterov``.

    >>> import dualgraph as dg
    >>> w = dg.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = dg.optim.SGD([w], lr=0.1, momentum=0.9)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> w
    tensor([ 0.8, -1.6], requires_grad=True)
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False):
        check_hyper("learning rate", lr)
        check_hyper("momentum value", momentum)
        check_hyper("weight_decay value", weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize))

    elementwise_update = True   # (one flat step for small parameters: optim/flat.py)

    def _update(self, p, grad, state, group):
        grad = regularized_grad(p, grad, group)
        momentum = group["momentum"]
        if isinstance(momentum, Tensor) or momentum != 0:   # (a tensor: a graph input)
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = _ops.copy_(creation.state_like(p), grad)
            elif scalar_hypers(group["lr"], momentum) and _numbers(group["dampening"]):
                # one op (a Numba loop); in a compiled step the group_updates pass makes
                # the step's updates one call across all parameters
                _ops.sgd_momentum_step_(p, grad, buf, lr=group["lr"], momentum=momentum,
                                        dampening=group["dampening"],
                                        nesterov=group["nesterov"])
                return
            else:   # a dampening given as a tensor
                buf.mul_(momentum).add_(grad, alpha=1 - group["dampening"])
            grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
        p.add_(grad, alpha=-group["lr"])


def _numbers(*values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)

