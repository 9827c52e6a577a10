"""Rows for the optimisers' fused update ops ``adam_update``, ``sgd_update`` and their
``_group`` forms (dualgraph.optim._ops): one step must equal torch's arithmetic written out
op by op, for one parameter or for several at once."""
import numpy as np

from dualgraph.dispatch import apply
from dualgraph.optim import _ops as optim_ops

from . import In, OpCase

HYPER = dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, decay=0.999)


def _adam(m, p, g, avg, avg_sq, step):
    if m.__name__ != "torch":
        return apply(optim_ops.ADAM_UPDATE, p, g, avg, avg_sq, step, **HYPER)
    lr, b1, b2, eps, decay = HYPER.values()
    avg = avg + (g - avg) * (1 - b1)
    avg_sq = avg_sq * b2 + g * g * (1 - b2)
    denom = avg_sq.sqrt() / (1 - b2 ** step).sqrt() + eps
    return p * decay - lr / (1 - b1 ** step) * avg / denom, avg, avg_sq


def _adam_group(m, p1, g1, avg1, sq1, step1, p2, g2, avg2, sq2, step2):
    if m.__name__ != "torch":
        return apply(optim_ops.ADAM_UPDATE_GROUP, p1, g1, avg1, sq1, step1,
                     p2, g2, avg2, sq2, step2, **HYPER)
    return (*_adam(m, p1, g1, avg1, sq1, step1), *_adam(m, p2, g2, avg2, sq2, step2))


def _step(rng, float_dtype):
    return np.array(3.0)


def _scalar(value, dtype=None):
    """A 0-d input of ``value``: in the case's dtype (a scheduled lr), or float64 (betas)."""
    return In((), "custom", grad=False,
              fn=lambda rng, float_dtype: np.array(value, dtype or float_dtype))


# the hyper-parameters as 0-d inputs (adam_update_hyper): lr, beta1, beta2, decay
HYPER_INPUTS = [_scalar(HYPER["lr"]), _scalar(HYPER["beta1"], "float64"),
                _scalar(HYPER["beta2"], "float64"), _scalar(HYPER["decay"])]


def _adam_hyper(m, p, g, avg, avg_sq, step, lr, b1, b2, decay):
    if m.__name__ != "torch":
        return apply(optim_ops.ADAM_UPDATE_HYPER, p, g, avg, avg_sq, step, lr, b1, b2, decay,
                     eps=HYPER["eps"])
    avg = avg + (g - avg) * (1 - b1)
    avg_sq = avg_sq * b2 + g * g * (1 - b2)
    denom = avg_sq.sqrt() / (1 - b2 ** step).sqrt() + HYPER["eps"]
    return p * decay - lr / (1 - b1 ** step) * avg / denom, avg, avg_sq


def _adam_hyper_group(m, *args):
    if m.__name__ != "torch":
        return apply(optim_ops.ADAM_UPDATE_HYPER_GROUP, *args, eps=HYPER["eps"])
    return (*_adam_hyper(m, *args[:9]), *_adam_hyper(m, *args[9:]))


CASES = [OpCase("adam_update", _adam,
                [In((3, 4)), In((3, 4)), In((3, 4)), In((3, 4), "pos"),
                 In((), "custom", fn=_step)],
                dtypes=("float32", "float64"), grad=False),
         OpCase("adam_update_group", _adam_group,
                [In((3, 4)), In((3, 4)), In((3, 4)), In((3, 4), "pos"),
                 In((), "custom", fn=_step),
                 In((5,)), In((5,)), In((5,)), In((5,), "pos"), In((), "custom", fn=_step)],
                dtypes=("float32", "float64"), grad=False),
         OpCase("adam_update_hyper", _adam_hyper,
                [In((3, 4)), In((3, 4)), In((3, 4)), In((3, 4), "pos"),
                 In((), "custom", fn=_step)] + HYPER_INPUTS,
                dtypes=("float32", "float64"), grad=False),
         OpCase("adam_update_hyper_group", _adam_hyper_group,
                [In((3, 4)), In((3, 4)), In((3, 4)), In((3, 4), "pos"),
                 In((), "custom", fn=_step)] + HYPER_INPUTS
                + [In((5,)), In((5,)), In((5,)), In((5,), "pos"), In((), "custom", fn=_step)]
                + HYPER_INPUTS,
                dtypes=("float32", "float64"), grad=False)]


def _sgd(nesterov, dampening=0.0):
    """One step of ``sgd_update`` against torch's arithmetic written out."""
    def fn(m, p, g, buf):
        if m.__name__ != "torch":
            return apply(optim_ops.SGD_UPDATE, p, g, buf, lr=0.1, momentum=0.9,
                         dampening=dampening, nesterov=nesterov)
        buf = buf * 0.9 + g * (1 - dampening)
        return p - 0.1 * (g + 0.9 * buf if nesterov else buf), buf
    return fn


CASES += [OpCase("sgd_update", _sgd(False), [In((3, 4))] * 3, dtypes=("float32", "float64"),
                 grad=False),
          OpCase("sgd_update", _sgd(True), [In((3, 4))] * 3, "nesterov", grad=False),
          OpCase("sgd_update", _sgd(False, 0.25), [In((3, 4))] * 3, "dampening", grad=False)]



def _sgd_group(m, p1, g1, b1, p2, g2, b2):
    one = _sgd(True)
    if m.__name__ != "torch":
        return apply(optim_ops.SGD_UPDATE_GROUP, p1, g1, b1, p2, g2, b2, lr=0.1,
                     momentum=0.9, dampening=0.0, nesterov=True)
    return (*one(m, p1, g1, b1), *one(m, p2, g2, b2))


CASES += [OpCase("sgd_update_group", _sgd_group, [In((3, 4))] * 3 + [In((5,))] * 3,
                 dtypes=("float32", "float64"), grad=False)]


def _sgd_hyper(m, p, g, buf, lr, momentum):
    """``sgd_update_hyper`` (lr and momentum as 0-d inputs) against torch's arithmetic."""
    if m.__name__ != "torch":
        return apply(optim_ops.SGD_UPDATE_HYPER, p, g, buf, lr, momentum, dampening=0.0,
                     nesterov=True)
    buf = buf * momentum + g
    return p - lr * (g + momentum * buf), buf


def _sgd_hyper_group(m, *args):
    if m.__name__ != "torch":
        return apply(optim_ops.SGD_UPDATE_HYPER_GROUP, *args, dampening=0.0, nesterov=True)
    return (*_sgd_hyper(m, *args[:5]), *_sgd_hyper(m, *args[5:]))


SGD_HYPER_INPUTS = [_scalar(0.1), _scalar(0.9)]
CASES += [OpCase("sgd_update_hyper", _sgd_hyper, [In((3, 4))] * 3 + SGD_HYPER_INPUTS,
                 dtypes=("float32", "float64"), grad=False),
          OpCase("sgd_update_hyper_group", _sgd_hyper_group,
                 [In((3, 4))] * 3 + SGD_HYPER_INPUTS + [In((5,))] * 3 + SGD_HYPER_INPUTS,
                 dtypes=("float32", "float64"), grad=False)]
