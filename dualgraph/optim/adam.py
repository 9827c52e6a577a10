"""Adam and AdamW, as ``torch.optim.Adam`` / ``torch.optim.AdamW``."""
from __future__ import annotations

from ..ops import creation, elementwise
from . import _ops
from .optimizer import (Optimizer, check_hyper, regularized_grad, scalar_hypers,
                        step_counter)


class Adam(Optimizer):
    """Adam (Kingma & Ba): moving averages ``m`` of the gradient and ``v`` of its square,
    bias-corrected, give the step ``lr * m_hat / (sqrt(v_hat) + eps)``. ``amsgrad`` uses the
    running maximum of ``v``; ``decoupled_weight_decay`` shrinks ``p`` by
    ``1 - lr * weight_decay`` instead of adding ``weight_decay * p`` to the gradient (AdamW).

    >>> import dualgraph as dg
    >>> w = dg.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = dg.optim.Adam([w], lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> w
    tensor([ 0.9, -1.9], requires_grad=True)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, maximize=False, decoupled_weight_decay=False):
        check_hyper("learning rate", lr)
        check_hyper("epsilon value", eps)
        check_hyper("beta parameter at index 0", betas[0], 0.0, 1.0)
        check_hyper("beta parameter at index 1", betas[1], 0.0, 1.0)
        check_hyper("weight_decay value", weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def _init_state(self, p, group):
        state = {"step": step_counter(), "exp_avg": creation.state_like(p),
                 "exp_avg_sq": creation.state_like(p)}
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = creation.state_like(p)
        return state

    elementwise_update = True   # (one flat step for small parameters: optim/flat.py)

    def _update(self, p, grad, state, group):
        lr, (beta1, beta2) = group["lr"], group["betas"]
        decoupled = group["decoupled_weight_decay"]
        if decoupled:
            grad = -grad if group["maximize"] else grad
        else:
            grad = regularized_grad(p, grad, group)
        decay = 1 - lr * group["weight_decay"] if decoupled else 1.0
        step = state["step"].add_(1)
        if _fusable(p, grad, group):
            _ops.adam_step_(p, grad, state["exp_avg"], state["exp_avg_sq"], step, lr=lr,
                            beta1=beta1, beta2=beta2, eps=group["eps"], decay=decay)
            return
        if decoupled:
            p.mul_(decay)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        _ops.lerp_(exp_avg, grad, 1 - beta1)
        _ops.addcmul_(exp_avg_sq.mul_(beta2), grad, grad, value=1 - beta2)
        if group["amsgrad"]:
            exp_avg_sq = _ops.copy_(state["max_exp_avg_sq"],
                                    elementwise.maximum(state["max_exp_avg_sq"], exp_avg_sq))
        # The bias corrections are 0-d float64 tensors (step is one): they stay precise
        # where 1 - beta2**t cancels, and they trace as graph values, not constants.
        step_size = lr / (1 - beta1 ** step)
        denom = exp_avg_sq.sqrt() / (1 - beta2 ** step).sqrt() + group["eps"]
        _ops.addcdiv_(p, exp_avg, denom, value=-step_size)


def _fusable(p, grad, group) -> bool:
    """Whether one fused update op can do the step: no amsgrad, a Python float eps (lr and
    the betas may be 0-d tensors, a schedule's graph inputs: ``adam_update_hyper``), and
    parameter, gradient and state of one float dtype of at least 32 bits (half precision
    keeps the op-by-op path and its promotion rules)."""
    return (not group["amsgrad"] and isinstance(group["eps"], (int, float))
            and scalar_hypers(group["lr"], *group["betas"])
            and p.dtype == grad.dtype and p.dtype.np.kind == "f" and p.dtype.np.itemsize >= 4)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), default
    ``weight_decay=0.01``; the same as ``Adam(..., decoupled_weight_decay=True)``."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         decoupled_weight_decay=True)
