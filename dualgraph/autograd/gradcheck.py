"""Finite-difference gradient checking (``dg.autograd.gradcheck``), as torch's."""
from __future__ import annotations

import numpy as np

from ..tensor import Tensor
from .engine import grad as autograd_grad
from .tape import no_grad


class GradcheckError(AssertionError):
    pass


def numerical_jacobian_vjp(fn, inputs, cotangents, eps):
    """d(sum(out_k * v_k))/d(input) by central differences, for every float input."""
    grads = []
    for inp in inputs:
        if not (isinstance(inp, Tensor) and inp.requires_grad):
            grads.append(None)
            continue
        data = inp._data
        g = np.zeros(data.shape, dtype=np.float64)
        flat = data.reshape(-1)
        for i in range(flat.size):
            orig = flat[i]
            flat[i] = orig + eps
            plus = _weighted(fn, inputs, cotangents)
            flat[i] = orig - eps
            minus = _weighted(fn, inputs, cotangents)
            flat[i] = orig
            g.reshape(-1)[i] = (plus - minus) / (2 * eps)
        grads.append(g)
    return grads


def _weighted(fn, inputs, cotangents) -> float:
    with no_grad():
        outs = fn(*inputs)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    total = 0.0
    for o, v in zip(outs, cotangents):
        if v is not None:
            total += float(np.sum(o._data.astype(np.float64) * v))
    return total


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0, raise_exception=True):
    """Compare the analytic vector-Jacobian products of ``fn`` at ``inputs`` (float64
    tensors; those with requires_grad are checked) with central differences.

    A random cotangent per float output makes this one VJP check instead of a full
    Jacobian, which catches the same wrong rules at a fraction of the cost.
    """
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    outs = fn(*inputs)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    rng = np.random.default_rng(seed)
    cotangents = [rng.standard_normal(o.shape) if o.requires_grad else None for o in outs]
    # (each cotangent paired with its own output: an output without grad may come first)
    diff = [(o, Tensor._make(v.astype(o._data.dtype)))
            for o, v in zip(outs, cotangents) if v is not None]
    wanted = [i for i in inputs if isinstance(i, Tensor) and i.requires_grad]
    if not diff or not wanted:
        raise GradcheckError("gradcheck needs an input that requires grad and a float output")
    analytic = autograd_grad([o for o, _ in diff], wanted, [v for _, v in diff],
                             allow_unused=True)
    numeric = [g for g in numerical_jacobian_vjp(fn, inputs, cotangents, eps) if g is not None]
    for k, (a, n) in enumerate(zip(analytic, numeric)):
        a = np.zeros_like(n) if a is None else a._data.astype(np.float64)
        if not np.allclose(a, n, atol=atol, rtol=rtol):
            if raise_exception:
                raise GradcheckError(
                    f"gradient of input {k} does not match finite differences: max abs "
                    f"difference {np.max(np.abs(a - n)):.3g}\nanalytic:\n{a}\nnumeric:\n{n}")
            return False
    return True
