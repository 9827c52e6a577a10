"""L-BFGS, as ``torch.optim.LBFGS``: a fixed step or the strong-Wolfe line search."""
from __future__ import annotations

from ..autograd import enable_grad, no_grad
from ..ops import creation
from ..ops.shape import cat, reshape
from .line_search import strong_wolfe
from .optimizer import Optimizer, check_hyper


class LBFGS(Optimizer):
    """Limited-memory BFGS, torch's algorithm (after minFunc): each ``step(closure)`` runs up
    to ``max_iter`` iterations, each a step of ``lr`` along the quasi-Newton direction built
    from the last ``history_size`` gradient differences, re-evaluating ``closure`` (which
    must zero the gradients, compute the loss, call ``backward`` and return the loss).
    With ``line_search_fn="strong_wolfe"`` each step's length is searched for instead
    (optim/line_search.py), as in torch.

    One parameter group only, as in torch. It decides with Python numbers (``.item()``) when
    to stop, so it runs eagerly (a compiled ``closure`` runs compiled).

    >>> import dualgraph as dg
    >>> w = dg.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = dg.optim.LBFGS([w])
    >>> def closure():
    ...     opt.zero_grad()
    ...     loss = ((w - 3) ** 2).sum()
    ...     loss.backward()
    ...     return loss
    >>> loss = opt.step(closure)   # w is now close to [3, 3]
    """

    def __init__(self, params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7,
                 tolerance_change=1e-9, history_size=100, line_search_fn=None):
        check_hyper("learning rate", lr)
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: line_search_fn must be None or 'strong_wolfe', got "
                             f"{line_search_fn!r}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                                      tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change,
                                      history_size=history_size,
                                      line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def _flat_grad(self):
        return cat([reshape(creation.zeros_like(p) if p.grad is None else p.grad, (-1,))
                    for p in self._params])

    def _add_grad(self, step_size, update) -> None:
        offset = 0
        for p in self._params:
            n = p.numel()
            p.add_(reshape(update[offset:offset + n], tuple(p.shape)), alpha=step_size)
            offset += n

    def _evaluator(self, closure):
        """``evaluate(t, d)``: the loss and flat gradient at the parameters moved by ``t d``,
        the parameters then put back (the line search's trial points, all from the point
        the search starts at: copied once)."""
        start = [creation.clone(p) for p in self._params]

        def evaluate(t, d):
            self._add_grad(float(t), d)
            with enable_grad():
                loss = float(closure())
            flat_grad = self._flat_grad()
            for p, saved in zip(self._params, start):
                p.copy_(saved)
            return loss, flat_grad
        return evaluate

    def step(self, closure):
        """Run up to ``max_iter`` iterations; returns the loss ``closure`` gave first."""
        with no_grad():
            return self._run(closure)

    def _run(self, closure):
        group = self.param_groups[0]
        lr, max_iter, max_eval = float(group["lr"]), group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with enable_grad():
            orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._flat_grad()
        if flat_grad.abs().max().item() <= tolerance_grad:
            return orig_loss
        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        h_diag, prev_flat_grad = state.get("H_diag"), state.get("prev_flat_grad")
        prev_loss = state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d, old_dirs, old_stps, ro, h_diag = -flat_grad, [], [], [], 1
            else:
                h_diag = _update_history(flat_grad - prev_flat_grad, d * t, old_dirs,
                                         old_stps, ro, h_diag, group["history_size"])
                d = _direction(flat_grad, old_dirs, old_stps, ro, h_diag)
            prev_flat_grad = creation.clone(flat_grad)
            prev_loss = loss
            # the first step is scaled down by the gradient's size (torch's rule)
            t = lr
            if state["n_iter"] == 1:
                inverse = 1.0 / flat_grad.abs().sum()
                t = (inverse if inverse.item() < 1.0 else 1.0) * lr
            gtd = flat_grad.dot(d)
            if gtd.item() > -tolerance_change:
                break   # not a descent direction
            evals = 0
            if group["line_search_fn"] is not None:
                loss, flat_grad, t, evals = strong_wolfe(self._evaluator(closure), t, d, loss,
                                                         flat_grad, gtd)
                self._add_grad(float(t), d)
            else:
                self._add_grad(float(t), d)
                if n_iter != max_iter:
                    with enable_grad():
                        loss = float(closure())
                    flat_grad, evals = self._flat_grad(), 1
            current_evals += evals
            state["func_evals"] += evals
            if (n_iter == max_iter or current_evals >= max_eval
                    or flat_grad.abs().max().item() <= tolerance_grad
                    or (d * t).abs().max().item() <= tolerance_change
                    or abs(loss - prev_loss) < tolerance_change):
                break
        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag,
                     prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss


# The curvature scalars are 0-d tensors of the parameters' dtype, as in torch, so that the
# arithmetic rounds as torch's does.
def _update_history(y, s, old_dirs, old_stps, ro, h_diag, history_size):
    """Add this iteration's curvature pair when ``y.s`` is positive (dropping the oldest
    beyond ``history_size``); returns the new scale of the initial inverse Hessian."""
    ys = y.dot(s)
    if ys.item() > 1e-10:
        if len(old_dirs) == history_size:
            old_dirs.pop(0)
            old_stps.pop(0)
            ro.pop(0)
        old_dirs.append(y)
        old_stps.append(s)
        ro.append(1.0 / ys)
        h_diag = ys / y.dot(y)
    return h_diag


def _direction(flat_grad, old_dirs, old_stps, ro, h_diag):
    """The two-loop recursion: the quasi-Newton direction from the curvature pairs."""
    al = [None] * len(old_dirs)
    q = -flat_grad
    for i in range(len(old_dirs) - 1, -1, -1):
        al[i] = old_stps[i].dot(q) * ro[i]
        q = q - old_dirs[i] * al[i]
    r = q * h_diag
    for i in range(len(old_dirs)):
        be_i = old_dirs[i].dot(r) * ro[i]
        r = r + old_stps[i] * (al[i] - be_i)
    return r
