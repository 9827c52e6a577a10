"""Rows for the control-flow ops (cond, while_loop, scan).

Eager, these functions are plain Python, so each row runs dualgraph through ``dg.compile``
(the op is then a graph node: kernel, shape rule and VJP are what is tested) and torch
through a Python version of the same semantics (torch.cond is slow to call eagerly and
torch's while_loop has no backward).
"""
from dualgraph.ops import control

from . import In, OpCase


class _Python:
    """torch.cond / while_loop / jax.lax.scan semantics in Python, over any tensor library."""

    @staticmethod
    def cond(pred, true_fn, false_fn, operands):
        return true_fn(*operands) if pred else false_fn(*operands)

    @staticmethod
    def while_loop(cond_fn, body_fn, carried, max_iters=None):
        while cond_fn(*carried):
            carried = tuple(body_fn(*carried))
        return carried

    @staticmethod
    def scan(f, init, xs, reverse=False):
        carry, ys = init, []
        for i in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
            carry, y = f(carry, xs[i])
            ys.append(y)
        return carry, (ys[::-1] if reverse else ys)


def captured(body):
    """``fn(lib, *xs)`` for a row: ``body(lib, ctl, *xs)`` with ``ctl`` the control-flow
    functions, captured by dg.compile for dualgraph."""
    cache = {}

    def fn(lib, *xs):
        if lib.__name__ == "dualgraph":
            if "f" not in cache:
                cache["f"] = lib.compile(lambda *a: body(lib, control, *a), fullgraph=True)
            return cache["f"](*xs)
        return body(lib, _Python, *xs)
    return fn


def _stack_ys(lib, ys):
    return ys if not isinstance(ys, list) else lib.stack(ys)


def _cond(lib, c, x, w):
    return c.cond(x.sum() > 0, lambda a, b: a * b.exp(), lambda a, b: a - b * 2, (x, w))


def _cond_tuple(lib, c, x, w):
    y, z = c.cond(x.sum() < 0, lambda a, b: (a.sin(), a * b), lambda a, b: (a.cos(), a + b),
                  (x, w))
    return y, z


def _while(lib, c, x, w):
    i, y = c.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * w + 1.0),
                        (lib.tensor(0), x), max_iters=5)
    return y


def _while_data(lib, c, x):
    y, = c.while_loop(lambda y: y.sum() < 20.0, lambda y: (y * 1.5 + 0.5,), (x,),
                      max_iters=40)
    return y


def _scan(lib, c, h, xs, w):
    carry, ys = c.scan(lambda h, r: (lib.tanh(h * w + r), h.sum() * r), h, xs)
    return carry, _stack_ys(lib, ys)


def _scan_reverse(lib, c, h, xs):
    carry, ys = c.scan(lambda h, r: (h * r + 1.0, h), h, xs, reverse=True)
    return carry, _stack_ys(lib, ys)


def _barrier(lib, x, after):
    # (torch has no such op: the value is x itself; its gradient flows to x only)
    if lib.__name__ == "dualgraph":
        return control.recompute_barrier(x, after)
    return x.view_as(x)


CASES = [
    OpCase("recompute_barrier", _barrier, [In((2, 3)), In((3,))]),
    OpCase("cond", captured(_cond), [In((3,), "pos"), In((3,))], "true"),
    OpCase("cond", captured(_cond), [In((2, 3), "pos"), In((3,))], "broadcast"),
    OpCase("cond", captured(_cond_tuple), [In((3,), "pos"), In((3,))], "tuple-false"),
    OpCase("while_loop", captured(_while), [In((2, 3)), In((3,))], "counted"),
    OpCase("while_loop", captured(_while_data), [In((3,), "pos")], "data-dependent"),
    OpCase("scan", captured(_scan), [In((3,)), In((4, 3)), In((3,))]),
    OpCase("scan", captured(_scan_reverse), [In((2,)), In((3, 2))], "reverse"),
]
