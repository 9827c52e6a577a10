"""Writes through views: ``y[:, 1].mul_(3)`` changes ``y``, eagerly, in autograd and traced.

A view op's output (``slice``, ``reshape``, ``permute``, ``expand``: ``OpDef.view``) records
the op and attributes that made it from its base (``Tensor._view``), and the version of the
storage it was made at (``Tensor._view_version``; views share their base's version counter).
An in-place op on a view then has two effects beyond the view's own new value:

- the root (the first tensor of the chain that is not such a view) takes the written value
  in the viewed positions: eagerly its storage already holds it; its autograd history and,
  while tracing, its symbolic value become ``where(mask, scatter(value), root)``, where
  ``scatter`` is the chain's VJPs (each view op's VJP places a gradient where the view reads,
  zeros elsewhere) and ``mask`` the same scatter of ones (constant: folded when compiled);
- every other view of that storage made before is stale (the shared version moved on): the
  next op that reads it replays its view op on its base's current value and history
  (:func:`refresh`), as torch regenerates a view's ``grad_fn``.

Whether a chain is a view at all is the layout's question: ``reshape`` copies where the
strides can't give the new shape (``x.t().reshape(-1)``), and a write to that copy leaves
``x`` alone. Eagerly the arrays answer it; while tracing there are no arrays, so
:func:`shares_root` replays the chain on a stand-in array of the root's layout that owns no
memory, which answers as NumPy would (and says which views overlap themselves: ``overlaps_itself``).

>>> import dualgraph as dg
>>> w = dg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
>>> y = w * 1.0
>>> y[:, 1].mul_(3.0)
tensor([ 6., 12.], grad_fn=<MulBackward>)
>>> (y * y).sum().backward()
>>> w.grad
tensor([[ 2., 36.],
        [ 6., 72.]])
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .._helpers import format_site, user_site
from ..autograd.tape import no_grad
from ..dispatch import apply, modes
from ..errors import CaptureError
from ..graph.infer import substitute
from ..shapes import Sym
from ..tensor import MUTATIONS, Tensor


def chain_of(t: Tensor) -> tuple[list, Tensor]:
    """``([t, t's base, ...], root)``: the views from ``t`` down to the first tensor that is
    not a view op's output (``.data`` / ``.detach()`` aliases are roots: they are their own
    tensors to autograd)."""
    chain = []
    while t._view is not None:
        chain.append(t)
        t = t._base
    return chain, t


def shares_root(chain: list, root: Tensor) -> tuple[bool, bool]:
    """``(shares, writeable)``: whether the chain's result is the root's memory (not a
    reshape's copy), and whether it may be written (not an ``expand``'s broadcast). Eager
    arrays answer directly; traced values by replaying the ops on a stand-in array with the
    root's layout (a bound input's strides, else row-major) that owns no memory."""
    target = chain[0]._data
    if type(target) is np.ndarray and type(root._data) is np.ndarray:
        # (an empty view shares no bytes, but is a view in torch, which reshapes an empty
        # tensor as a view too: the write's history reaches the root, its gradients zeros)
        shares = target.size == 0 or np.may_share_memory(target, root._data)
        return shares, not overlaps_itself(target)
    stand_in = eager_layout(chain, root)
    if stand_in is ANY_LAYOUT:
        if any(t._view[0].view_layout is not None for t in chain):
            raise CaptureError("an in-place write through a reshape of a tensor with a "
                               "dynamic dim (whether the reshape copies is not known)",
                               format_site(user_site()),
                               "Write into the tensor itself, or mark no dim dynamic.")
        return True, True   # (slices and permutations never copy)
    if stand_in is None:   # (a reshape that copies)
        return False, True
    return True, not overlaps_itself(stand_in)


def overlaps_itself(array: np.ndarray) -> bool:
    """Whether elements of ``array`` share memory as torch sees it: a dim of stride 0 and
    more than one element (an expand's). torch refuses an in-place write only there; a
    row of an expanded tensor (``h.expand(2, -1, -1)[1]``) may be written, and writes
    the tensor it expands. An empty array shares nothing (NumPy gives it zero strides)."""
    return array.size > 0 and any(s == 0 and n > 1 for n, s in zip(array.shape, array.strides))


ANY_LAYOUT = object()   # the layout of a chain from a root with a dynamic dim: not known


def eager_layout(chain: list, root: Tensor):
    """A stand-in array with the strides the chain's result has when run eagerly (from
    the root's: a bound input's strides, else row-major), owning no memory; None when a
    reshape in the chain copies; ``ANY_LAYOUT`` for a root with a dynamic dim."""
    shape = tuple(root.shape)
    itemsize = np.dtype(root._data.dtype).itemsize
    known = root_layout(root)
    sizes = None
    if not all(isinstance(d, (int, np.integer)) for d in shape):
        # (symbolic dims: replayed at stand-in sizes, as the graph assumes its symbols are:
        # whether a view is row-major does not depend on which; a layout an in-place view
        # op recorded (``h.t_()``) is at those sizes, a bound input's at its own)
        shape, sizes = _stand_in_shape(shape)
        if known is not None and known.shape != shape:
            if not known.flags.c_contiguous:
                return ANY_LAYOUT
            known = None
    strides = known.strides if known is not None else _row_major(shape, itemsize)
    # (a stand-in of one element's memory, never read: its strides are all that matter)
    element = np.zeros(itemsize, np.uint8).view(np.dtype((np.void, itemsize)))
    stand_in = as_strided(element, shape=shape, strides=strides)
    for t in reversed(chain):
        op, attrs = t._view
        if sizes is not None:
            attrs = {k: substitute(v, sizes) for k, v in attrs.items()}
        try:
            stand_in = (op.view_layout or op.kernel)(stand_in, **attrs)
        except ValueError:   # a reshape that would copy
            return None
        except TypeError:    # (a symbol of another tensor's dims: not known)
            return ANY_LAYOUT
    return stand_in


_STAND_IN_SIZES: dict = {}


def _stand_in_shape(shape: tuple) -> tuple[tuple, dict]:
    """``shape`` with its symbols at stand-in sizes, and the sizes: distinct and above 1,
    each name's the same wherever it appears (the layout ``h.t_()`` recorded for a
    ``(s0, 6)`` tensor and a later replay of a view of it agree)."""
    names = sorted({n for d in shape if isinstance(d, Sym) for n in d.names})
    sizes = {n: _STAND_IN_SIZES.setdefault(n, 7 + 4 * len(_STAND_IN_SIZES)) for n in names}
    return tuple(substitute(shape, sizes)), sizes


def own_if_copied(t: Tensor) -> Tensor:
    """``t``, a view op's result, as a tensor of its own when the op copied (a reshape of
    a layout the strides can't give, ``x.t().reshape(-1)``; traced: where it copies
    eagerly): a later write to its base does not reach it, nor a write to it the base,
    so it neither shares the base's version counter nor is refreshed from it."""
    base = t._base
    if type(t._data) is np.ndarray and type(base._data) is np.ndarray:
        shares = np.may_share_memory(t._data, base._data)   # (eager: its own base, no walk)
    else:   # (a dynamic dim's reshape: taken as a view, as before it was known)
        shares = eager_layout(*chain_of(t)) is not None
    if shares:
        return t
    t._view, t._base, t._version, t._view_version = None, None, [0], 0
    return t


def is_contiguous(t: Tensor) -> bool:
    """Whether ``t``'s elements lie in row-major order, as eagerly: a traced value answers
    from its view chain replayed on its root's layout (``eager_layout``), so
    ``contiguous()`` copies while tracing exactly where it copies eagerly, and a write to
    the copy (or to its base) stays apart as it does eagerly."""
    layout = layout_of(t)
    return layout is None or layout.flags.c_contiguous


def layout_of(t: Tensor):
    """The array ``t`` is eagerly, or while tracing a stand-in with the strides it would
    have (``eager_layout``); None where it is row-major (a traced op's result, a reshape's
    copy) or, for a dynamic dim, not known (taken as row-major, docs/capture.md)."""
    data = t._data
    if type(data) is np.ndarray:
        return data
    chain, root = chain_of(t)
    if not chain:
        return root_layout(root)
    stand_in = eager_layout(chain, root)
    return None if stand_in is ANY_LAYOUT else stand_in


def root_layout(root: Tensor):
    """While tracing, an array with the strides the root ``root`` has eagerly: a bound
    input's, or those an in-place view op gave it (``h.t_()``, ``tracer.layouts``); None
    for a traced op's result (row-major, as eager kernels return)."""
    tracer = modes.tracer
    if tracer is None:
        return None
    bound = tracer._bound.get(id(root))
    if bound is not None:
        return bound.array
    tensor, stand_in = tracer.layouts.get(id(root), (None, None))
    if tensor is not root or stand_in is None:
        return None
    # (only while it has the shape the view op gave it: symbols at their stand-in sizes)
    shape = tuple(root.shape)
    if not all(isinstance(d, (int, np.integer)) for d in shape):
        shape = _stand_in_shape(shape)[0]
    return stand_in if stand_in.shape == shape else None


def _row_major(shape, itemsize) -> tuple:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def scatter(chain: list, value: Tensor) -> Tensor:
    """``value`` (the chain's target's shape) placed where the chain reads its root, zeros
    elsewhere: the chain's VJPs, outermost view first."""
    for t in chain:
        op, attrs = t._view
        value = op.vjp(value, t, t._base, **attrs)
    return value


def write_root(chain: list, root: Tensor, value: Tensor) -> Tensor:
    """The root after ``value`` is written through the chain, as ops (recorded for autograd,
    symbolic while tracing): ``where(mask, scatter(value), root)``. The root enters through
    an alias with its own version counter, so the ``where`` node does not pin the root's
    version (a later write to the root must not invalidate this one's backward: where's
    gradient needs only the mask)."""
    with no_grad():
        mask = scatter(chain, value.new_ones(tuple(value.shape))).ne(0)
    old = Tensor._make(root._data)
    old.requires_grad, old.grad_fn, old._output_nr = (root.requires_grad, root.grad_fn,
                                                      root._output_nr)
    if root.requires_grad and root.grad_fn is None:
        old._accumulator = root._accumulate_node()
    return scatter(chain, value.to(root.dtype)).where(mask, old)


def refresh(t: Tensor) -> None:
    """Give the stale view ``t`` its base's current value (while tracing) and history: its
    view op replayed on the base. Eagerly its array already shows the base's memory."""
    base = t._base
    if base._view is not None and base._view_version != base._version[0]:
        refresh(base)
    op, attrs = t._view
    fresh = apply(op, base, **attrs)
    if modes.tracer is not None:
        modes.tracer.note_refresh(t)
        t._data, t._trace_id = fresh._data, fresh._trace_id
        MUTATIONS[0] += 1
    t.requires_grad, t.grad_fn, t._output_nr = (fresh.requires_grad, fresh.grad_fn,
                                                fresh._output_nr)
    t._view_version = t._version[0]


def refresh_stale(args) -> None:
    """Refresh the stale views among an op's arguments (dispatch calls this once a write
    through a view gave a root a history, when recording autograd)."""
    for a in args:
        if isinstance(a, Tensor) and a._view is not None \
                and a._view_version != a._version[0]:
            refresh(a)
