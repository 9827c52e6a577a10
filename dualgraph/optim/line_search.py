"""The strong-Wolfe line search of ``LBFGS(line_search_fn="strong_wolfe")``: the bracketing
and zoom of Nocedal & Wright's Algorithms 3.5 and 3.6 with safeguarded cubic interpolation,
in the form minFunc's ``WolfeLineSearch`` gives them (which torch follows), so that a
program's iterates follow torch's.

Losses are Python floats and directional derivatives 0-d tensors of the parameters' dtype,
as in torch, so that the trial steps round as torch's do.
"""
from __future__ import annotations

import math

from ..ops import creation

C1, C2 = 1e-4, 0.9   # sufficient decrease, curvature
MAX_EVALS = 25


def cubic_minimum(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2,
    clipped to ``bounds`` (default: between the two points); their midpoint where the cubic
    has no minimum."""
    low, high = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = d2_square.sqrt() if hasattr(d2_square, "sqrt") else math.sqrt(d2_square)
        if x1 <= x2:
            at = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            at = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(at, low), high)
    return (low + high) / 2.0


class _Point:
    """A trial step: its length, loss, flat gradient and slope along the direction."""

    __slots__ = ("t", "f", "g", "gtd")

    def __init__(self, t, f, g, gtd):
        self.t, self.f, self.g, self.gtd = t, f, g, gtd


def strong_wolfe(evaluate, t, d, f, g, gtd, tolerance_change=1e-9):
    """A step length along ``d`` from the point with loss ``f``, gradient ``g`` and slope
    ``gtd``, starting at ``t``, that satisfies the strong Wolfe conditions (or the best one
    found in ``MAX_EVALS`` evaluations). ``evaluate(t, d)`` gives the loss and flat
    gradient at ``x + t d`` and leaves the parameters at ``x``. Returns (loss, gradient,
    step, evaluations)."""
    d_norm = d.abs().max()
    start = _Point(0, f, creation.clone(g), gtd)
    f_new, g_new = evaluate(t, d)
    evals, step = 1, 0
    prev, new = start, _Point(t, f_new, g_new, g_new.dot(d))
    bracket, done = None, False
    while step < MAX_EVALS:   # widen the step until a minimum is bracketed
        too_far = new.f > f + C1 * new.t * gtd or (step > 1 and new.f >= prev.f)
        if not too_far and abs(new.gtd) <= -C2 * gtd:
            bracket, done = [new], True
            break
        if too_far or new.gtd >= 0:
            bracket = [prev, _Point(new.t, new.f, creation.clone(new.g), new.gtd)]
            break
        t = cubic_minimum(prev.t, prev.f, prev.gtd, new.t, new.f, new.gtd,
                          bounds=(new.t + 0.01 * (new.t - prev.t), new.t * 10))
        prev = _Point(new.t, new.f, creation.clone(new.g), new.gtd)
        f_new, g_new = evaluate(t, d)
        new = _Point(t, f_new, g_new, g_new.dot(d))
        evals, step = evals + 1, step + 1
    if step == MAX_EVALS:
        bracket = [start, new]
    low, high = (0, 1) if bracket[0].f <= bracket[-1].f else (1, 0)
    insufficient = False
    while not done and step < MAX_EVALS:   # zoom into the bracket
        a, b = bracket
        if abs(b.t - a.t) * d_norm < tolerance_change:
            break
        t = cubic_minimum(a.t, a.f, a.gtd, b.t, b.f, b.gtd)
        t, insufficient = _away_from_ends(t, max(a.t, b.t), min(a.t, b.t), insufficient)
        f_new, g_new = evaluate(t, d)
        new = _Point(t, f_new, creation.clone(g_new), g_new.dot(d))
        evals, step = evals + 1, step + 1
        if new.f > f + C1 * t * gtd or new.f >= bracket[low].f:
            bracket[high] = new
            low, high = (0, 1) if bracket[0].f <= bracket[1].f else (1, 0)
        else:
            if abs(new.gtd) <= -C2 * gtd:
                done = True
            elif new.gtd * (bracket[high].t - bracket[low].t) >= 0:
                bracket[high] = bracket[low]
            bracket[low] = new
    best = bracket[low]
    return best.f, best.g, best.t, evals


def _away_from_ends(t, top, bottom, insufficient):
    """``t`` moved a tenth of the bracket in from an end it came too close to twice in a
    row (or lies beyond), and whether it came too close this time without being moved."""
    margin = 0.1 * (top - bottom)
    if min(top - t, t - bottom) >= margin:
        return t, False
    if insufficient or t >= top or t <= bottom:
        return (top - margin if abs(t - top) < abs(t - bottom) else bottom + margin), False
    return t, True
