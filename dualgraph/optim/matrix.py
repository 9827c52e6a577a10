"""Optimisers that treat a weight as a matrix: Muon (the momentum orthogonalised by a
Newton-Schulz iteration) and Adafactor (the second moment factored into row and column
means), as torch.optim's (same arguments, defaults, update arithmetic and state-dict keys).

Both are written with dualgraph's ops, so a compiled training step captures them as it
captures Adam. Torch's Adafactor reads its step count, the parameter's norm and the update's
norm back as Python floats (``.item()``) to form its scales; here they stay 0-d tensors
(``min`` / ``max`` as clamps), the same numbers with no graph break.
"""
from __future__ import annotations

import math

import ml_dtypes

from .. import dtypes
from ..ops import creation, elementwise, linalg, reduce
from .optimizer import Optimizer, check_hyper, step_counter

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)   # torch's quintic Newton-Schulz iteration


def orthogonalised(update, coefficients=NS_COEFFICIENTS, steps: int = 5, eps: float = 1e-7):
    """A matrix near ``U V^T`` for ``update = U S V^T``: ``steps`` iterations of the quintic
    ``X <- a X + (b A + c A^2) X`` with ``A = X X^T``, from ``update`` divided by its norm,
    in bfloat16 as torch's (the wide side transposed to the right, so ``A`` is the small
    Gram matrix)."""
    if update.ndim != 2:
        raise ValueError(f"Muon: the update must be a 2-D matrix, got shape "
                         f"{tuple(update.shape)}")
    if steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    a, b, c = coefficients
    tall = update.shape[0] > update.shape[1]
    x = update.to(dtypes.bfloat16)
    x = x.T if tall else x
    x = elementwise.div(x, elementwise.clamp(reduce.norm(x), min=eps))
    for _ in range(steps):
        gram = linalg.matmul(x, x.T)
        x = linalg.addmm(x, linalg.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


class Muon(Optimizer):
    """Muon for 2-D weights (hidden layers; biases and embeddings want AdamW): the momentum
    ``b = lerp(b, g, 1 - momentum)``, the update ``lerp(g, b, momentum)`` (``nesterov``) or
    ``b``, orthogonalised (:func:`orthogonalised`), then ``p *= 1 - lr * weight_decay`` and
    ``p -= lr' * update`` with ``lr' = lr * sqrt(max(1, rows / cols))`` (``adjust_lr_fn``
    None or ``"original"``), ``0.2 lr sqrt(max(rows, cols))`` (``"match_rms_adamw"``).

    >>> import dualgraph as dg
    >>> w = dg.nn.Parameter(dg.randn(4, 3))
    >>> opt = dg.optim.Muon([w], lr=0.02)
    >>> (w * w).sum().backward()
    >>> opt.step()
    """

    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=NS_COEFFICIENTS, eps=1e-7, ns_steps=5, adjust_lr_fn=None):
        check_hyper("Learning rate", lr)
        check_hyper("momentum", momentum)
        check_hyper("weight decay", weight_decay)
        if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
        if len(ns_coefficients) != 3:
            raise ValueError("Coefficients must be a tuple of exactly 3 values")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                                      nesterov=nesterov, ns_coefficients=ns_coefficients,
                                      eps=eps, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn))
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon only supports 2D parameters whereas we found a "
                                     f"parameter with size: {tuple(p.shape)}")

    def _init_state(self, p, group):
        return {"momentum_buffer": creation.zeros_like(p)}

    def _update(self, p, grad, state, group):
        buf, momentum = state["momentum_buffer"], group["momentum"]
        buf.lerp_(grad, 1 - momentum)
        update = grad.lerp(buf, momentum) if group["nesterov"] else buf
        update = orthogonalised(update, group["ns_coefficients"], group["ns_steps"],
                                group["eps"])
        rows, cols = p.shape
        scale = (0.2 * math.sqrt(max(rows, cols)) if group["adjust_lr_fn"] == "match_rms_adamw"
                 else math.sqrt(max(1, rows / cols)))
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.add_(update.to(p.dtype), alpha=-group["lr"] * scale)


class Adafactor(Optimizer):
    """Adafactor (Shazeer and Stern), as torch's: for a weight of two or more dims the
    second moment is the outer product of running row and column means of ``g^2``
    (decaying as ``step ** beta2_decay``) over the mean row mean; vectors keep it whole.
    The update ``g / sqrt(max(v, eps1^2))`` is divided by ``max(1, rms(update) / d)`` and
    scaled by ``max(eps2, rms(p)) * min(lr, 1 / sqrt(step))``; ``weight_decay`` is decoupled.

    >>> import dualgraph as dg
    >>> w = dg.nn.Parameter(dg.randn(4, 3))
    >>> opt = dg.optim.Adafactor([w])
    >>> (w * w).sum().backward()
    >>> opt.step()
    """

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0,
                 weight_decay=0.0, *, foreach=None, maximize=False):
        check_hyper("Learning rate", lr)
        if not beta2_decay <= 0.0:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not eps[0] >= 0.0:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        check_hyper("epsilon2", eps[1])
        if not d >= 1.0:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        check_hyper("weight_decay", weight_decay)
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=tuple(eps), d=d,
                                      weight_decay=weight_decay, maximize=maximize))

    def _init_state(self, p, group):
        state = {"step": step_counter()}
        if p.ndim > 1:
            state["row_var"] = creation.zeros(tuple(p.shape[:-1]) + (1,), dtype=p.dtype)
            state["col_var"] = creation.zeros(tuple(p.shape[:-2]) + (1, p.shape[-1]),
                                              dtype=p.dtype)
        else:
            state["variance"] = creation.zeros_like(p)
        return state

    def _update(self, p, grad, state, group):
        grad = -grad if group["maximize"] else grad
        eps1, eps2 = group["eps"]
        eps1 = float(ml_dtypes.finfo(p._data.dtype).eps) if eps1 is None else eps1
        lr = group["lr"]
        step = state["step"]
        step.add_(1)
        decay = elementwise.pow(step, group["beta2_decay"])
        rho = elementwise.clamp(elementwise.rsqrt(step), max=lr)
        rms = elementwise.div(reduce.norm(p).to(dtypes.float64), math.sqrt(p.numel()))
        alpha = elementwise.mul(elementwise.clamp(rms, min=eps2), rho)
        if group["weight_decay"] != 0:
            p.mul_(1 - lr * group["weight_decay"])
        if grad.ndim > 1:
            row_var, col_var = state["row_var"], state["col_var"]
            row_mean = elementwise.div(reduce.norm(grad, dim=-1, keepdim=True).square(),
                                       grad.shape[-1])
            row_var.lerp_(row_mean, decay.to(p.dtype))
            col_mean = elementwise.div(reduce.norm(grad, dim=-2, keepdim=True).square(),
                                       grad.shape[-2])
            col_var.lerp_(col_mean, decay.to(p.dtype))
            estimate = elementwise.div(linalg.matmul(row_var, col_var), elementwise.clamp(
                reduce.mean(row_var, dim=-2, keepdim=True), min=eps1))
        else:
            state["variance"].lerp_(grad * grad, decay.to(p.dtype))
            estimate = state["variance"]
        update = elementwise.mul(elementwise.rsqrt(elementwise.clamp(estimate,
                                                                     min=eps1 * eps1)), grad)
        spread = elementwise.div(reduce.norm(update).to(dtypes.float64),
                                 math.sqrt(update.numel()) * group["d"])
        denom = elementwise.clamp(spread, min=1.0)
        p.sub_(elementwise.mul(update, elementwise.div(alpha, denom).to(p.dtype)))
