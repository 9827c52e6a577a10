"""Adadelta, Adamax, NAdam, RAdam and SparseAdam, as torch.optim's (same arguments, defaults, update
arithmetic and state-dict keys).

As in Adam, the step count is a 0-d float64 tensor, so every quantity that depends on it
(bias corrections, NAdam's momentum schedule, RAdam's rectification) is a graph value in a
captured step rather than a constant that changes at every call.
"""
from __future__ import annotations

from ..ops import creation, elementwise
from . import _ops
from .optimizer import Optimizer, check_hyper, regularized_grad, step_counter


def _check_betas(betas) -> tuple:
    check_hyper("beta parameter at index 0", betas[0], 0.0, 1.0)
    check_hyper("beta parameter at index 1", betas[1], 0.0, 1.0)
    return tuple(betas)


def _decayed_grad(p, grad, group):
    """The gradient, after weight decay: decoupled (``p *= 1 - lr * wd``, AdamW's) or added
    to the gradient (``regularized_grad``), as the group says."""
    if not group["decoupled_weight_decay"]:
        return regularized_grad(p, grad, group)
    if group["weight_decay"] != 0:
        p.mul_(1 - group["lr"] * group["weight_decay"])
    return -grad if group["maximize"] else grad


class Adadelta(Optimizer):
    """Adadelta (Zeiler): the step is the gradient scaled by ``sqrt(E[dx^2] + eps) /
    sqrt(E[g^2] + eps)``, both running averages with factor ``rho``; ``lr`` scales it.

    >>> import dualgraph as dg
    >>> w = dg.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = dg.optim.Adadelta([w], lr=1.0)
    >>> (w * w).sum().backward()
    >>> opt.step()
    """

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, *,
                 maximize=False):
        check_hyper("learning rate", lr)
        check_hyper("rho value", rho, 0.0, 1.0 + 1e-12)
        check_hyper("epsilon value", eps)
        check_hyper("weight_decay value", weight_decay)
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize))

    def _init_state(self, p, group):
        return {"step": step_counter(), "square_avg": creation.state_like(p),
                "acc_delta": creation.state_like(p)}

    elementwise_update = True   # (one flat step for small parameters: optim/flat.py)

    def _update(self, p, grad, state, group):
        rho, eps = group["rho"], group["eps"]
        state["step"].add_(1)
        grad = regularized_grad(p, grad, group)
        square_avg = _ops.addcmul_(state["square_avg"].mul_(rho), grad, grad, value=1 - rho)
        std = (square_avg + eps).sqrt()
        delta = (state["acc_delta"] + eps).sqrt() / std * grad
        _ops.addcmul_(state["acc_delta"].mul_(rho), delta, delta, value=1 - rho)
        p.add_(delta, alpha=-group["lr"])


class Adamax(Optimizer):
    """Adamax (Kingma & Ba): Adam with the infinity norm, ``u = max(beta2 * u, |g| + eps)``
    in place of the root of the second moment; the step is ``lr / (1 - beta1^t) * m / u``.

    >>> import dualgraph as dg
    >>> w = dg.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = dg.optim.Adamax([w], lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> w
    tensor([ 0.9000, -1.9000], requires_grad=True)
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, *,
                 maximize=False):
        check_hyper("learning rate", lr)
        check_hyper("epsilon value", eps)
        check_hyper("weight_decay value", weight_decay)
        super().__init__(params, dict(lr=lr, betas=_check_betas(betas), eps=eps,
                                      weight_decay=weight_decay, maximize=maximize))

    def _init_state(self, p, group):
        return {"step": step_counter(), "exp_avg": creation.state_like(p),
                "exp_inf": creation.state_like(p)}

    elementwise_update = True   # (one flat step for small parameters: optim/flat.py)

    def _update(self, p, grad, state, group):
        beta1, beta2 = group["betas"]
        step = state["step"].add_(1)
        grad = regularized_grad(p, grad, group)
        exp_avg = _ops.lerp_(state["exp_avg"], grad, 1 - beta1)
        exp_inf = _ops.copy_(state["exp_inf"], elementwise.maximum(
            state["exp_inf"] * beta2, grad.abs() + group["eps"]))
        _ops.addcdiv_(p, exp_avg, exp_inf, value=-(group["lr"] / (1 - beta1 ** step)))


class NAdam(Optimizer):
    """NAdam (Dozat): Adam with Nesterov momentum, whose factor ``mu_t = beta1 * (1 - 0.5 *
    0.96^(t * momentum_decay))`` warms up; ``decoupled_weight_decay`` as in AdamW.

    >>> import dualgraph as dg
    >>> w = dg.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = dg.optim.NAdam([w], lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step()
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, maximize=False):
        check_hyper("learning rate", lr)
        check_hyper("epsilon value", eps)
        check_hyper("weight_decay value", weight_decay)
        check_hyper("momentum_decay value", momentum_decay)
        super().__init__(params, dict(lr=lr, betas=_check_betas(betas), eps=eps,
                                      weight_decay=weight_decay,
                                      momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    def _init_state(self, p, group):
        return {"step": step_counter(), "mu_product": step_counter(1),
                "exp_avg": creation.state_like(p), "exp_avg_sq": creation.state_like(p)}

    elementwise_update = True   # (one flat step for small parameters: optim/flat.py)

    def _update(self, p, grad, state, group):
        lr, (beta1, beta2), decay = group["lr"], group["betas"], group["momentum_decay"]
        step = state["step"].add_(1)
        grad = _decayed_grad(p, grad, group)
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * decay))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * decay))
        mu_product = state["mu_product"].mul_(mu)
        exp_avg = _ops.lerp_(state["exp_avg"], grad, 1 - beta1)
        exp_avg_sq = _ops.addcmul_(state["exp_avg_sq"].mul_(beta2), grad, grad,
                                   value=1 - beta2)
        denom = (exp_avg_sq / (1 - beta2 ** step)).sqrt() + group["eps"]
        _ops.addcdiv_(p, grad, denom, value=-lr * (1.0 - mu) / (1.0 - mu_product))
        _ops.addcdiv_(p, exp_avg, denom, value=-lr * mu_next / (1.0 - mu_product * mu_next))


class RAdam(Optimizer):
    """RAdam (Liu et al.): Adam whose adaptive step is scaled by a rectification term once
    the variance of the adaptive rate is tractable (``rho_t > 5``), and plain momentum SGD
    before; ``decoupled_weight_decay`` as in AdamW.

    >>> import dualgraph as dg
    >>> w = dg.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = dg.optim.RAdam([w], lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> w
    tensor([ 0.8000, -1.6000], requires_grad=True)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, maximize=False):
        check_hyper("learning rate", lr)
        check_hyper("epsilon value", eps)
        check_hyper("weight_decay value", weight_decay)
        super().__init__(params, dict(lr=lr, betas=_check_betas(betas), eps=eps,
                                      weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    def _init_state(self, p, group):
        return {"step": step_counter(), "exp_avg": creation.state_like(p),
                "exp_avg_sq": creation.state_like(p)}

    elementwise_update = True   # (one flat step for small parameters: optim/flat.py)

    def _update(self, p, grad, state, group):
        lr, (beta1, beta2) = group["lr"], group["betas"]
        step = state["step"].add_(1)
        grad = _decayed_grad(p, grad, group)
        exp_avg = _ops.lerp_(state["exp_avg"], grad, 1 - beta1)
        exp_avg_sq = _ops.addcmul_(state["exp_avg_sq"].mul_(beta2), grad, grad,
                                   value=1 - beta2)
        bias_correction2 = 1 - beta2 ** step
        corrected = exp_avg / (1 - beta1 ** step)
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * beta2 ** step / bias_correction2
        # Both branches are computed and one is chosen with where(), so that the choice is
        # a graph value in a captured step; the clamp keeps the unused root finite.
        rect = ((rho_t - 4) * (rho_t - 2) * rho_inf
                / ((rho_inf - 4) * (rho_inf - 2) * rho_t)).clamp(min=0).sqrt()
        adaptive = bias_correction2.sqrt() / (exp_avg_sq.sqrt() + group["eps"])
        update = elementwise.where(rho_t > 5.0, corrected * lr * adaptive * rect,
                                   corrected * lr)
        p.add_(update, alpha=-1.0)


class SparseAdam(Optimizer):
    """SparseAdam: Adam that updates only the rows a step's gradient reaches, for embedding
    tables with ``sparse=True``. dualgraph's gradients are dense (``sparse=True`` is
    accepted), so the rows reached are those whose gradient is not all zero; their moments
    and values follow torch's SparseAdam (``eps`` added to ``sqrt(v)`` before the bias
    correction, folded into the step size), and the other rows keep their moments and
    values. One difference: a row looked up whose gradient is exactly zero is left alone,
    where torch would decay its moments.

    >>> import dualgraph as dg
    >>> emb = dg.nn.Embedding(4, 2, sparse=True)
    >>> opt = dg.optim.SparseAdam(emb.parameters(), lr=0.1)
    >>> emb(dg.tensor([1, 3])).sum().backward()
    >>> before = emb.weight.detach().clone()
    >>> opt.step()
    >>> bool((emb.weight[0] == before[0]).all()), bool((emb.weight[1] != before[1]).all())
    (True, True)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False):
        check_hyper("learning rate", lr)
        check_hyper("epsilon value", eps)
        super().__init__(params, dict(lr=lr, betas=_check_betas(betas), eps=eps,
                                      maximize=maximize))

    def _init_state(self, p, group):
        return {"step": step_counter(), "exp_avg": creation.state_like(p),
                "exp_avg_sq": creation.state_like(p)}

    def _update(self, p, grad, state, group):
        beta1, beta2 = group["betas"]
        step = state["step"].add_(1)
        grad = -grad if group["maximize"] else grad
        reached = grad.ne(0)
        if grad.ndim > 1:
            reached = reached.any(dim=tuple(range(1, grad.ndim)), keepdim=True)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        m = elementwise.where(reached, exp_avg * beta1 + grad * (1 - beta1), exp_avg)
        v = elementwise.where(reached, exp_avg_sq * beta2 + grad * grad * (1 - beta2),
                              exp_avg_sq)
        _ops.copy_(exp_avg, m)
        _ops.copy_(exp_avg_sq, v)
        step_size = group["lr"] * (1 - beta2 ** step).sqrt() / (1 - beta1 ** step)
        update = m / (elementwise.sqrt(v) + group["eps"]) * step_size
        p.sub_(elementwise.where(reached, update, 0.0))
