"""In-place composites the optimisers need (torch has them as Tensor methods), built from
registry ops so they trace.

Every update in ``dualgraph.optim`` goes through these or through the in-place Tensor
methods (``add_``, ``mul_``, ...): never through writes into ``._data``, so the same
``step()`` runs eagerly and, captured, becomes graph nodes whose in-place writes are
functionalised. ``adam_step_`` is one registry op (``adam_update``) for a whole Adam
update: Adam's ~20 small ops per parameter cost more in dispatch than in arithmetic.
"""
from __future__ import annotations

import math

import numpy as np

from .. import kernels
from ..autograd.tape import grad_mode
from ..dispatch import apply, modes
from ..ops import elementwise
from ..ops.inplace import commit_inplace
from ..ops.opdef import defop
from ..shapes import ShapedType
from ..tensor import Tensor


# torch's in-place Tensor methods, by the names the optimisers call them
copy_ = elementwise.copy_
lerp_ = elementwise.METHODS["lerp_"]
addcmul_ = elementwise.METHODS["addcmul_"]
addcdiv_ = elementwise.METHODS["addcdiv_"]


def _adam_kernel(p, grad, m, v, step, *, lr, beta1, beta2, eps, decay, out=None):
    # torch's Adam arithmetic in the parameter's dtype. The scalars are Python floats: a
    # NumPy float64 scalar would make NumPy compute the float32 arrays in float64. ``out``
    # (compiled steps) may name p, m and v themselves: each element is read before it is
    # written.
    t = float(step)
    if kernels.enabled(p, grad, m, v):   # the same arithmetic in one pass
        outs = _outputs(out, p, 3)
        consts = _adam_constants(t, lr, beta1, beta2, eps, decay)
        if all(o is a and a.flags.c_contiguous for o, a in zip(outs, (p, m, v))):
            kernels.optim.adam_in_place(*(kernels.flat(a) for a in (p, grad, m, v)), *consts)
        else:
            kernels.optim.adam(*(kernels.flat(a) for a in (p, grad, m, v)),
                               *(o.reshape(-1) for o in outs), *consts)
        return outs
    new_m = np.subtract(grad, m)
    new_m *= 1 - beta1
    new_m += m
    new_v = v * beta2
    update = np.square(grad, out=np.empty_like(grad))   # (an array for out= below, also 0-d)
    update *= 1 - beta2
    new_v += update
    np.sqrt(new_v, out=update)
    update /= math.sqrt(1 - beta2 ** t)
    update += eps
    np.divide(new_m, update, out=update)
    update *= -(lr / (1 - beta1 ** t))
    if decay == 1.0:
        update += p
        return _into(out, (update, new_m, new_v))
    new_p = p * decay
    new_p += update
    return _into(out, (new_p, new_m, new_v))


def _adam_constants(t: float, lr, beta1, beta2, eps, decay) -> tuple:
    """The float32 scalars the Adam loops take for step ``t``."""
    f32 = np.float32
    return (f32(1 - beta1), f32(beta2), f32(1 - beta2), f32(math.sqrt(1 - beta2 ** t)),
            f32(eps), f32(-(lr / (1 - beta1 ** t))), f32(decay))


def _adam_group_kernel(*args, lr, beta1, beta2, eps, decay, out=None):
    # (p, grad, m, v, step) per parameter -> (p, m, v) per parameter
    members = [args[i:i + 5] for i in range(0, len(args), 5)]
    return _adam_members(members, [(lr, beta1, beta2, eps, decay)] * len(members), out)


def _adam_members(members, hypers, out):
    # Where every update is written into its own state (a compiled step's donated arrays)
    # and every member has the same step and hyper-parameters, one loop call does them
    # all; otherwise each parameter's update runs as adam_update's kernel.
    outs = tuple(out) if out is not None else (None,) * (3 * len(members))
    table = _in_place_table(members, outs, count=4, written=(0, 2, 3))
    if table is not None:
        keys = {(float(member[4]), hyper) for member, hyper in zip(members, hypers)}
        if len(keys) == 1:
            step, hyper = keys.pop()
            kernels.optim.run_group(kernels.optim.adam_many_in_place, table[0],
                                    sum(member[0].size for member in members),
                                    *_adam_constants(step, *hyper))
            return outs
    results = []
    for k, (member, hyper) in enumerate(zip(members, hypers)):
        results += _adam_kernel(*member[:5], **dict(zip(_ADAM_HYPER, hyper)),
                                out=outs[3 * k:3 * k + 3])
    return tuple(results)


_ADAM_HYPER = ("lr", "beta1", "beta2", "eps", "decay")


def _in_place_table(members, outs, count: int, written: tuple):
    """For a group kernel's one loop call: the table of ``id()`` s of the flat views of
    each member's first ``count`` inputs, and those views (keep them alive while the loop
    runs). The call's outputs must be the inputs at positions ``written`` themselves
    (writeable). None where the loop cannot take them all: not float32 arrays of one shape,
    not C-contiguous, a fresh output, or no Numba."""
    if not kernels.numba_available() or not kernels.native.array_struct_known():
        return None
    width = len(written)
    ids, flat = [], []
    for k, member in enumerate(members):   # (plain loops: this runs at every step)
        shape = member[0].shape
        for a in member[:count]:
            if (type(a) is not np.ndarray or a.dtype != _FLOAT32 or a.shape != shape
                    or not a.flags.c_contiguous):
                return None
            view = a.reshape(-1)
            flat.append(view)
            ids.append(id(view))
        for j, i in enumerate(written):
            if outs[width * k + j] is not member[i] or not member[i].flags.writeable:
                return None
    return np.array(ids, np.int64).reshape(len(members), count), flat


_FLOAT32 = np.dtype(np.float32)


def _outputs(out, like, n: int) -> tuple:
    """``out``'s arrays, fresh ones where it has None (or there is no ``out``)."""
    out = out or (None,) * n
    return tuple(np.empty(like.shape, like.dtype) if o is None else o for o in out)


def _into(out, results: tuple) -> tuple:
    """``results``, copied into ``out``'s arrays where it has them."""
    if out is None:
        return results
    for o, r in zip(out, results):
        if o is not None:
            np.copyto(o, r)
    return tuple(r if o is None else o for o, r in zip(out, results))


def _adam_decomposition(p, grad, m, v, step, *, lr, beta1, beta2, eps, decay):
    """torch's Adam arithmetic, op by op."""
    m = m + (grad - m) * (1 - beta1)
    v = v * beta2 + grad * grad * (1 - beta2)
    denom = v.sqrt() / (1 - beta2 ** step).sqrt() + eps
    return p * decay - lr / (1 - beta1 ** step) * m / denom, m, v


def _grouped(decomposition, width: int):
    """A group op's decomposition: ``decomposition`` on each member's ``width`` inputs."""
    def grouped(*args, **hyper):
        members = (args[i:i + width] for i in range(0, len(args), width))
        return tuple(t for member in members for t in decomposition(*member, **hyper))
    return grouped


def _group_op(single, kernel, width: int, infer, decomposition, doc: str):
    """The op running many nodes of ``single`` (``width`` inputs each, one after another)
    in one call, with ``single``'s attributes; the ``group_updates`` pass makes it."""
    return defop(
        single.name + "_group", kernel,
        lambda *args, **attrs: tuple(t for i in range(0, len(args), width)
                                     for t in infer(*args[i:i + width])),
        compiler_only=True, decomposition=_grouped(decomposition, width), num_outputs=None,
        attrs=single.attrs, saves="", onnx=None, writes_out=True, group_of=single, doc=doc)


def _infer_adam(p, grad, m, v, step, *hyper, **attrs):
    return tuple(ShapedType(tuple(x.shape), x.dtype) for x in (p, m, v))


ADAM_UPDATE = defop(
    "adam_update", _adam_kernel, _infer_adam, num_outputs=3,
    compiler_only=True,
    decomposition=_adam_decomposition,
    attrs=("lr", "beta1", "beta2", "eps", "decay"), saves="", onnx=None, writes_out=True,
    doc="One Adam step: (param, grad, exp_avg, exp_avg_sq, step) -> the new param, exp_avg "
        "and exp_avg_sq; ``decay`` multiplies the param first (AdamW's decoupled decay). "
        "Optimisers run it under no_grad, so it has no VJP.")


ADAM_UPDATE_GROUP = _group_op(
    ADAM_UPDATE, _adam_group_kernel, 5, _infer_adam, _adam_decomposition,
    doc="Every ``adam_update`` of one step with these hyper-parameters: (param, grad, "
        "exp_avg, exp_avg_sq, step) per parameter -> (param, exp_avg, exp_avg_sq) per "
        "parameter; the ``group_updates`` pass makes it, so that a compiled step runs its "
        "whole Adam/AdamW update in one call.")


# The same updates with the hyper-parameters a schedule changes at every step (lr, and
# Adam's betas and the decoupled decay computed from lr; SGD's momentum) as 0-d inputs
# rather than attributes: a compiled step whose lr is a graph input keeps one fused loop.
# Each input may be a 0-d array or a Python number; the kernels read them as Python floats,
# so the arithmetic is the attribute form's.


def _floats(values) -> tuple:
    return tuple(float(v) for v in values)


def _adam_hyper_kernel(p, grad, m, v, step, lr, beta1, beta2, decay, *, eps, out=None):
    lr, beta1, beta2, decay = _floats((lr, beta1, beta2, decay))
    return _adam_kernel(p, grad, m, v, step, lr=lr, beta1=beta1, beta2=beta2, eps=eps,
                        decay=decay, out=out)


def _adam_hyper_group_kernel(*args, eps, out=None):
    # (p, grad, m, v, step, lr, beta1, beta2, decay) per parameter -> (p, m, v) per parameter
    members = [args[i:i + 9] for i in range(0, len(args), 9)]
    hypers = [(lr, beta1, beta2, eps, decay)
              for lr, beta1, beta2, decay in (_floats(member[5:]) for member in members)]
    return _adam_members(members, hypers, out)


def _adam_hyper_decomposition(p, grad, m, v, step, lr, beta1, beta2, decay, *, eps):
    return _adam_decomposition(p, grad, m, v, step, lr=lr, beta1=beta1, beta2=beta2,
                               eps=eps, decay=decay)


ADAM_UPDATE_HYPER = defop(
    "adam_update_hyper", _adam_hyper_kernel, _infer_adam, num_outputs=3,
    compiler_only=True,
    decomposition=_adam_hyper_decomposition,
    attrs=("eps",), saves="", onnx=None, writes_out=True,
    doc="``adam_update`` with lr, beta1, beta2 and decay as 0-d inputs: (param, grad, "
        "exp_avg, exp_avg_sq, step, lr, beta1, beta2, decay) -> the new param, exp_avg and "
        "exp_avg_sq. The form a step takes when a schedule makes lr (or the betas) a graph "
        "input, so that the update stays one loop.")


ADAM_UPDATE_HYPER_GROUP = _group_op(
    ADAM_UPDATE_HYPER, _adam_hyper_group_kernel, 9, _infer_adam, _adam_hyper_decomposition,
    doc="Every ``adam_update_hyper`` of one step with this eps, as ``adam_update_group``: "
        "one loop call where the members' steps and hyper-parameters are equal.")


def adam_step_(p, grad, exp_avg, exp_avg_sq, step, *, lr, beta1, beta2, eps, decay=1.0):
    """Adam's update of ``p``, ``exp_avg`` and ``exp_avg_sq`` in place (``step`` already
    counts this step). Hyper-parameters that are tensors (a schedule's graph inputs) are
    inputs of the update (``adam_update_hyper``)."""
    targets = (p, exp_avg, exp_avg_sq)
    if _all_numbers(lr, beta1, beta2, decay):
        return _update_(ADAM_UPDATE, targets, p, grad, exp_avg, exp_avg_sq, step,
                        lr=float(lr), beta1=float(beta1), beta2=float(beta2), eps=float(eps),
                        decay=float(decay))
    return _update_(ADAM_UPDATE_HYPER, targets, p, grad, exp_avg, exp_avg_sq, step,
                    *_numbers_as_floats(lr, beta1, beta2, decay), eps=float(eps))


def _sgd_constants(lr, momentum, dampening, nesterov) -> tuple:
    """The scalars the SGD loops take."""
    return (np.float32(momentum), np.float32(1 - dampening), np.float32(-lr), bool(nesterov))


def _sgd_kernel(p, grad, buf, *, lr, momentum, dampening, nesterov, out=None):
    # the arithmetic of buf.mul_(momentum).add_(grad, alpha=1 - dampening), then
    # p.add_(step, alpha=-lr) with step = buf (or grad + momentum * buf, Nesterov); ``out``
    # as for Adam
    if kernels.enabled(p, grad, buf):   # the same in one pass
        new_p, new_buf = _outputs(out, p, 2)
        consts = _sgd_constants(lr, momentum, dampening, nesterov)
        if all(o is a and a.flags.c_contiguous for o, a in ((new_p, p), (new_buf, buf))):
            kernels.optim.sgd_momentum_in_place(*(kernels.flat(a) for a in (p, grad, buf)),
                                                *consts)
        else:
            kernels.optim.sgd_momentum(*(kernels.flat(a) for a in (p, grad, buf)),
                                       new_p.reshape(-1), new_buf.reshape(-1), *consts)
        return new_p, new_buf
    new_buf = buf * momentum
    new_buf += grad if dampening == 0 else grad * (1 - dampening)
    step = grad + new_buf * momentum if nesterov else new_buf
    return _into(out, (p + step * -lr, new_buf))


def _sgd_decomposition(p, grad, buf, *, lr, momentum, dampening, nesterov):
    buf = buf * momentum + grad * (1 - dampening)
    return p - lr * (grad + momentum * buf if nesterov else buf), buf


def _infer_sgd(p, *rest, **attrs):
    return ShapedType(tuple(p.shape), p.dtype), ShapedType(tuple(p.shape), p.dtype)


SGD_UPDATE = defop(
    "sgd_update", _sgd_kernel, _infer_sgd,
    compiler_only=True,
    decomposition=_sgd_decomposition,
    num_outputs=2, attrs=("lr", "momentum", "dampening", "nesterov"), saves="", onnx=None,
    writes_out=True,
    doc="One SGD step with momentum after the first: (param, grad, momentum buffer) -> the "
        "new param and buffer. Optimisers run it under no_grad, so it has no VJP.")


def _sgd_group_kernel(*args, lr, momentum, dampening, nesterov, out=None):
    # (p, grad, buf) per parameter -> (p, buf) per parameter, as _adam_group_kernel
    members = [args[i:i + 3] for i in range(0, len(args), 3)]
    return _sgd_members(members, [(lr, momentum, dampening, nesterov)] * len(members), out)


def _sgd_members(members, hypers, out):
    # as _adam_members: one loop call where all are in place with equal hyper-parameters
    outs = tuple(out) if out is not None else (None,) * (2 * len(members))
    table = _in_place_table(members, outs, count=3, written=(0, 2))
    if table is not None and len(set(hypers)) == 1:
        kernels.optim.run_group(kernels.optim.sgd_many_in_place, table[0],
                                sum(member[0].size for member in members),
                                *_sgd_constants(*hypers[0]))
        return outs
    results = []
    for k, (member, hyper) in enumerate(zip(members, hypers)):
        results += _sgd_kernel(*member[:3], **dict(zip(_SGD_HYPER, hyper)),
                               out=outs[2 * k:2 * k + 2])
    return tuple(results)


_SGD_HYPER = ("lr", "momentum", "dampening", "nesterov")


SGD_UPDATE_GROUP = _group_op(
    SGD_UPDATE, _sgd_group_kernel, 3, _infer_sgd, _sgd_decomposition,
    doc="Every ``sgd_update`` of one step with these hyper-parameters: (param, grad, "
        "momentum buffer) per parameter -> (param, buffer) per parameter; made by the "
        "``group_updates`` pass, as ``adam_update_group``.")


def _sgd_hyper_kernel(p, grad, buf, lr, momentum, *, dampening, nesterov, out=None):
    lr, momentum = _floats((lr, momentum))
    return _sgd_kernel(p, grad, buf, lr=lr, momentum=momentum, dampening=dampening,
                       nesterov=nesterov, out=out)


def _sgd_hyper_group_kernel(*args, dampening, nesterov, out=None):
    # (p, grad, buf, lr, momentum) per parameter -> (p, buf) per parameter
    members = [args[i:i + 5] for i in range(0, len(args), 5)]
    hypers = [(*_floats(member[3:]), dampening, nesterov) for member in members]
    return _sgd_members(members, hypers, out)


def _sgd_hyper_decomposition(p, grad, buf, lr, momentum, *, dampening, nesterov):
    return _sgd_decomposition(p, grad, buf, lr=lr, momentum=momentum, dampening=dampening,
                              nesterov=nesterov)


SGD_UPDATE_HYPER = defop(
    "sgd_update_hyper", _sgd_hyper_kernel, _infer_sgd, num_outputs=2,
    compiler_only=True,
    decomposition=_sgd_hyper_decomposition,
    attrs=("dampening", "nesterov"), saves="", onnx=None, writes_out=True,
    doc="``sgd_update`` with lr and momentum as 0-d inputs: (param, grad, momentum buffer, "
        "lr, momentum) -> the new param and buffer, as ``adam_update_hyper``.")


SGD_UPDATE_HYPER_GROUP = _group_op(
    SGD_UPDATE_HYPER, _sgd_hyper_group_kernel, 5, _infer_sgd, _sgd_hyper_decomposition,
    doc="Every ``sgd_update_hyper`` of one step with these attributes, as "
        "``sgd_update_group``.")


def sgd_momentum_step_(p, grad, buf, *, lr, momentum, dampening, nesterov):
    """SGD's update of ``p`` and its momentum buffer ``buf`` in place (not the first step,
    where the buffer is the gradient itself). An lr or momentum that is a tensor (a
    schedule's graph input) is an input of the update (``sgd_update_hyper``)."""
    if _all_numbers(lr, momentum):
        return _update_(SGD_UPDATE, (p, buf), p, grad, buf, lr=float(lr),
                        momentum=float(momentum), dampening=float(dampening),
                        nesterov=bool(nesterov))
    return _update_(SGD_UPDATE_HYPER, (p, buf), p, grad, buf,
                    *_numbers_as_floats(lr, momentum), dampening=float(dampening),
                    nesterov=bool(nesterov))


def _update_(op, targets: tuple, *args, **attrs) -> Tensor:
    """Run the update ``op`` (its outputs: the new values of ``targets``, in order) and
    commit each into its target; returns the first target.

    Eagerly, where the kernel can write the targets' arrays itself (:func:`_writes_in_place`),
    they are its ``out=``: an update reads each element before writing it, so that gives
    the values of a fresh result copied back, without the fresh arrays (page faults at
    every step: the buffers are as big as the model) and without the copies. The commits
    then only bump the versions. Otherwise (tracing, views, mixed dtypes) the op makes new
    values and each commit writes or rebinds as any in-place op's."""
    if _writes_in_place(targets, args):
        attrs["out"] = tuple(t._data for t in targets)
    results = apply(op, *args, **attrs)
    for t, r in zip(targets[1:], results[1:]):
        commit_inplace(t, r)
    return commit_inplace(targets[0], results[0])


def _writes_in_place(targets: tuple, args: tuple) -> bool:
    """Whether an eager update may write ``targets`` in place: no trace, no grad mode (so
    no history to give them, as an optimiser's step), each target a plain writeable
    C-contiguous array of the first's dtype (the dtype the kernel computes in) that no
    other target or input overlaps except as itself."""
    if modes.tracer is not None or grad_mode.enabled:
        return False
    dtype = targets[0]._data.dtype
    arrays = [a._data for a in args if isinstance(a, Tensor)]
    for t in targets:
        data = t._data
        if (type(data) is not np.ndarray or t._view is not None or data.dtype != dtype
                or not data.flags.c_contiguous or not data.flags.writeable):
            return False
        for a in arrays:
            if a is not data and np.may_share_memory(a, data):
                return False
    return True


def _all_numbers(*values) -> bool:
    return all(isinstance(v, (int, float)) for v in values)


def _numbers_as_floats(*values) -> tuple:
    """Python numbers as floats (literal inputs), tensors as they are."""
    return tuple(float(v) if isinstance(v, (int, float)) else v for v in values)
