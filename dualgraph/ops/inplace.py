"""In-place ops: ``x.add_(y)`` is ``add(x, y)`` committed into ``x``'s storage.

Autograd treats an in-place op functionally: the new value gets the out-of-place op's
history, the old value's saved copies are protected by the version counter (a VJP that
needs an overwritten value raises instead of returning a wrong gradient), and while tracing
the tensor simply starts referring to the new symbolic value.

The op families build their in-place variants here, so this module imports none of them:
the cast to the target's dtype is the Tensor method ``to``, bound when ``dualgraph.ops``
loads.
"""
from __future__ import annotations

import numpy as np

from .._helpers import format_site, user_site
from .. import dtypes
from ..autograd.tape import grad_mode, no_grad
from ..dispatch import modes
from ..errors import CaptureError
from ..tensor import MUTATIONS, Tensor, bump
from . import views


READ_ONLY = ("in-place operation on a tensor whose storage is read-only (an expanded or "
             "broadcast view: more than one element of it refers to a single memory "
             "location); call .clone() first")


def commit_inplace(target: Tensor, result: Tensor) -> Tensor:
    """Make ``target`` hold ``result``: write into its storage (so views see it), bump its
    version (so saved copies are caught), and give it ``result``'s history. A write into a
    view also gives the tensor it views the new history and, while tracing, the new value
    (ops/views.py)."""
    if grad_mode.enabled and result.requires_grad and modes.building_graph():
        _no_history_into_arguments(target)
    if grad_mode.enabled and target.requires_grad and target.grad_fn is None:
        raise RuntimeError(
            "a leaf tensor that requires grad is being used in an in-place operation; "
            "wrap the update in `with dg.no_grad():` or work on a clone")
    if target._returned_by is not None and grad_mode.enabled:
        raise RuntimeError(
            f"an output of {target._returned_by} is a view of its input (a custom Function "
            "that returned an input as it is, or a module's backward hooks) and is being "
            "modified in place: the write would override the function's backward, "
            "leading to incorrect gradients. Clone the output first (torch refuses it too)")
    data = target._data
    eager = type(data) is np.ndarray and type(result._data) is np.ndarray
    through = None   # (chain, root) of a view whose root takes the write
    if target._view is not None and (not eager or grad_mode.enabled and (
            result.requires_grad or target._base.requires_grad)):
        through = _written_through(target, eager)
    if eager:
        if result._data is not data:   # (else the kernel wrote it: an update's ``out=``)
            _write(data, result._data)
    elif through is not None:   # tracing: the root's new value, then the view's
        chain, root = through
        new_root = views.write_root(chain, root, result)
        commit_write(root, new_root._data)
        commit_write(target, result.to(target.dtype)._data)
    else:  # tracing: the tensor now refers to the new symbolic value (functionalised)
        if target._alias:
            _write_alias_of_view(target, result)
        commit_write(target, result.to(target.dtype)._data)
    bump(target)
    # (an integer or bool tensor never requires grad: ``mask.copy_(x)`` takes x's values)
    differentiable = grad_mode.enabled and target.dtype.is_floating_point
    if through is not None and differentiable and (
            result.requires_grad or through[1].requires_grad):
        chain, root = through
        new_root = views.write_root(chain, root, result) if eager else new_root
        root.requires_grad, root.grad_fn, root._output_nr = (True, new_root.grad_fn,
                                                             new_root._output_nr)
        modes.refresh_views = views.refresh_stale
    if target._view is not None:
        target._view_version = target._version[0]
    if result.requires_grad and differentiable:
        result = result.to(target.dtype)
        target.requires_grad = True
        target.grad_fn = result.grad_fn
        target._output_nr = result._output_nr
    return target


# Foreach-style updates (torch's ``_foreach_*``): an eager update of many small tensors runs
# once on their concatenation, then each takes its slice back. Up to this many elements a
# tensor's share of the copies costs less than the ops of its own update (optim/flat.py,
# nn.utils.clip_grad_norm_).
FLAT_MAX_NUMEL = 4096


def flat_of(tensors) -> Tensor:
    """The entries of the eager ``tensors`` concatenated into one new 1-d tensor."""
    return Tensor._make(np.concatenate([t._data.reshape(-1) for t in tensors]))


def commit_flat(targets, flat: Tensor) -> None:
    """Write consecutive slices of the 1-d ``flat`` into ``targets`` (each keeps its
    shape), each as ``commit_inplace``: the other half of an update made on
    ``flat_of(targets)``. A ``flat`` without history written into a plain eager tensor
    (not a view; not a leaf that requires grad with grad mode on, which ``commit_inplace``
    refuses) is what an optimiser step or a clip makes: it is copied and the version
    bumped, what ``commit_inplace`` does there, without its checks per tensor."""
    data, offset = flat._data, 0
    plain = type(data) is np.ndarray and not flat.requires_grad
    enabled = grad_mode.enabled
    for t in targets:
        n = t._data.size
        piece = data[offset:offset + n].reshape(t._data.shape)
        offset += n
        if (plain and t._view is None and type(t._data) is np.ndarray
                and not (enabled and t.requires_grad and t.grad_fn is None)):
            _write(t._data, piece)
            bump(t)
        else:
            commit_inplace(t, Tensor._make(piece))


def _write(data: np.ndarray, values: np.ndarray) -> None:
    """Copy ``values`` into the eager array ``data`` (cast to its dtype)."""
    if not writeable(data):
        raise RuntimeError(READ_ONLY)
    np.copyto(data, values, casting="unsafe")


def writeable(data: np.ndarray) -> bool:
    """Whether an eager write into ``data`` is allowed, by torch's rule: refused only where
    the tensor overlaps itself (``views.overlaps_itself``). NumPy marks every broadcast
    read-only, and the views of one: a view of writeable memory without such a dim (a row
    of an expand) is made writeable here; memory no array may write stays read-only."""
    if data.flags.writeable:
        return True
    if views.overlaps_itself(data):
        return False
    base = data.base
    while isinstance(base, np.ndarray) and not base.flags.writeable:
        base = base.base
    if not isinstance(base, np.ndarray):
        return False
    data.flags.writeable = True
    return True


def _written_through(target: Tensor, eager: bool):
    """``(chain, root)`` when a write into the view ``target`` reaches the tensor it views.
    None where the "view" is a reshape's copy, which then stops being a view (later writes
    to its base must not reach it). A broadcast (``expand``) raises while tracing as its
    read-only array raises eagerly (values made functionally, as a converted loop's
    initial rows, are not views: capture/ast/rows.py). A view
    of a leaf that requires grad is refused as torch refuses it. A chain through a view of
    the bytes (``view(dtype)``, no VJP) shares memory but not history, as torch's: eagerly
    the write reaches the root's memory only; while tracing it is a graph break."""
    chain, root = views.chain_of(target)
    if any(t._view[0].vjp is None for t in chain):
        if eager:
            return None
        raise CaptureError("an in-place write through a view(dtype) of another tensor",
                           format_site(user_site()), "Write into the tensor itself, or "
                           "move the write out of the compiled function.")
    shares, writeable = views.shares_root(chain, root)
    if shares and not writeable and not eager:   # (eagerly the array refuses the write)
        raise RuntimeError(READ_ONLY)
    if not shares:
        target._view = target._base = None
        target._version = [target._version[0]]
        MUTATIONS[0] += 1
        return None
    if grad_mode.enabled and root.requires_grad and root.grad_fn is None:
        raise RuntimeError(
            "a view of a leaf tensor that requires grad is being used in an in-place "
            "operation; wrap the update in `with dg.no_grad():` or work on a clone")
    return chain, root


def set_data(target: Tensor, value) -> None:
    """``p.data = t``: ``p`` takes ``t``'s values without history, as torch's.

    Eagerly ``p`` shares ``t``'s storage from then on (``.data`` / ``.detach()`` aliases
    taken before keep the old storage). While tracing it is an in-place write of ``p``,
    written back after each call as ``p.add_()`` is, so ``t`` must have ``p``'s shape and
    dtype there::

        with dg.no_grad():
            p.data = p.data - lr * p.grad      # a hand-written SGD step
    """
    if not isinstance(value, Tensor):
        raise TypeError(f"Tensor.data must be set to a Tensor, not {type(value).__name__}")
    new = value._data
    if new is target._data:      # p.data -= x: the in-place op already wrote p
        return
    if not modes.building_graph():
        target._data = new
        target._version = [target._version[0]]   # new storage: old aliases no longer share
        MUTATIONS[0] += 1
        return
    new = modes.tracer.value_of(value)
    if target._alias:   # (eagerly it stops sharing; its writeback would reach the owner)
        raise CaptureError("assigning .data of an alias (t.data.data = ..., "
                           "t.detach().data = ...)", format_site(user_site()),
                           "Assign to the tensor itself: t.data = ...")
    if new.shape != target._data.shape or new.dtype != target._data.dtype:
        raise CaptureError(
            f"assigning .data of shape {tuple(new.shape)} {new.dtype} to a tensor of shape "
            f"{tuple(target._data.shape)} {target._data.dtype}", format_site(user_site()),
            "Assign a value of the same shape and dtype (p.data.copy_(t)), or do it outside "
            "the compiled function.")
    commit_write(target, new)


def _write_alias_of_view(alias: Tensor, result: Tensor) -> None:
    """While tracing, a write into ``alias`` (``a.data``, ``a.detach()``) of a view ``a``
    (``a = energies.squeeze(-1)``; ``a.data.masked_fill_(mask, -inf)``): the tensor ``a``
    views takes the values, as their shared storage does eagerly, so that ``a`` read
    again (its view op replayed on its base) has them. Values only: autograd never sees a
    write through ``.data``, so neither tensor's history changes."""
    owner = alias._storage_owner(modes.tracer._bound)
    if owner._view is None:
        return
    with no_grad():
        through = _written_through(owner, eager=False)
        if through is not None:
            chain, root = through
            commit_write(root, views.write_root(chain, root, result)._data)


def _no_history_into_arguments(target: Tensor) -> None:
    """While tracing: an in-place write with autograd history into a tensor argument (or a
    view of one) would give the caller's tensor a new history eagerly, which the graph's
    writeback of its value does not; refused, naming the line."""
    name = getattr(modes.tracer, "history_of", lambda t: None)(target)
    if name is not None:
        raise CaptureError(
            f"an in-place write that gives the argument {name} autograd history",
            format_site(user_site()), "Write into a copy (x = x.clone()), or under "
            "dg.no_grad(), or call the function uncompiled.")


def commit_write(target: Tensor, value) -> None:
    """While tracing: ``target`` (and the tensor whose storage it aliases) now holds the
    symbolic ``value``, written back after each call of the graph."""
    tracer = modes.tracer
    owner = target._storage_owner(tracer._bound)   # p.data.add_(...) updates p
    tracer.note_mutation(owner)
    owner._data = target._data = value
    MUTATIONS[0] += 1
    owner._trace_id = target._trace_id = tracer.trace_id   # (this trace's value now)


def source_of(target: Tensor, *others) -> Tensor:
    """What an in-place op on ``target`` should compute from: ``target`` itself, or, when
    the result will be recorded for autograd, a copy of its current value with its
    history. The copy is what the backward node saves, so overwriting ``target`` does not
    invalidate it (``y.sin_()`` differentiates through the old ``y``, as in torch)."""
    if not grad_mode.enabled:
        return target
    if target._view is not None and target._view_version != target._version[0]:
        views.refresh(target)   # (its base was written since: compute from its new history)
    if not (target.requires_grad
            or any(isinstance(o, Tensor) and o.requires_grad for o in others)):
        return target
    tracer = modes.tracer
    if tracer is None:
        snapshot = Tensor._make(target._data.copy())
    else:   # traced values are immutable: share it, but not the version counter
        snapshot = Tensor._make(tracer.value_of(target))
    snapshot.requires_grad = target.requires_grad
    snapshot.grad_fn = target.grad_fn
    snapshot._output_nr = target._output_nr
    return snapshot


def inplace(fn):
    """``x.fn_(*args)``: compute ``fn(x, *args)`` and commit it into ``x``; a result that
    torch would not cast into ``x`` (float into an integer tensor, anything but bool into
    a bool one: ``i.add_(0.5)``, ``i /= 2``) raises, as torch's, instead of truncating, and
    so does one that broadcasts ``x`` to a larger shape (``row.add_(matrix)``), traced too
    (where the write once replaced ``x`` by the larger result)."""
    def method(self, *args, **kwargs):
        source = source_of(self, *args, *kwargs.values())
        result = fn(source, *args, **kwargs)
        _check_castable(result, self, method.__name__)
        if result._data.shape != self._data.shape:
            raise RuntimeError(f"{method.__name__}: output with shape {tuple(self.shape)} "
                               f"doesn't match the broadcast shape {tuple(result.shape)}")
        return commit_inplace(self, result)
    method.__name__ = fn.__name__ + "_"
    method.__doc__ = f"In-place version of :meth:`{fn.__name__}`."
    return method


def _check_castable(result: Tensor, target: Tensor, name: str) -> None:
    """Torch's rule for an op's result written into ``target``: no float into integers or
    bool, no non-bool into bool."""
    have, want = result.dtype, target.dtype
    if have == want:
        return
    if (have.is_floating_point and not want.is_floating_point
            or want == dtypes.bool_ and have != dtypes.bool_):
        raise RuntimeError(
            f"{name}: result type {have} can't be cast to the desired output type {want} "
            f"at {format_site(user_site())}; use the out-of-place op (x = x.{name[:-1]}(...)) "
            f"or cast first (x = x.to({have}))")
