"""The backward engine: ``tensor.backward()`` and ``dg.autograd.grad``.

Gradients flow from the roots through the recorded nodes, latest-created first: a node is
created after every node it takes input from, so when it runs, all the nodes that feed it
gradient have already run (PyTorch orders its engine the same way). Each node's VJP is a function of
dualgraph ops, so with ``create_graph=True`` the backward pass is itself recorded and can be
differentiated again; otherwise it runs under ``no_grad``.
"""
from __future__ import annotations

import heapq
import sys

import numpy as np

from .. import dtypes
from ..dispatch import autocast, modes
from ..kernels import recycle
from ..ops import creation
from ..ops.shape import stack
from ..shapes import numel
from ..tensor import Tensor, bump
from .tape import (AccumulateGrad, Node, departures, grad_mode, set_grad_enabled,
                   unpacked_inputs)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate d(tensors)/d(leaf) into ``leaf.grad`` for every leaf that requires grad,
    as ``torch.autograd.backward``: ``tensors`` is one tensor or a sequence, with one
    gradient each in ``grad_tensors`` (None for a scalar)."""
    tensors = _as_tuple(tensors)
    grads = (None,) * len(tensors) if grad_tensors is None else _as_tuple(grad_tensors)
    if len(grads) != len(tensors):
        raise ValueError(f"backward: {len(tensors)} tensors but {len(grads)} gradients")
    run_backward(tensors, grads, retain_graph, create_graph, inputs=inputs)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False,
         materialize_grads=False):
    """The gradients of ``outputs`` with respect to ``inputs``, returned as a tuple (``.grad``
    is left untouched), as ``torch.autograd.grad``, with its arguments in its order:
    ``only_inputs`` is accepted and ignored, as torch (which deprecated it) ignores it;
    ``materialize_grads`` gives zeros for unused inputs. ``is_grads_batched``: the first
    dimension of every ``grad_outputs`` tensor indexes separate vector-Jacobian products
    (a backward pass each, as ``dg.func.vmap`` maps), stacked in the results."""
    if is_grads_batched:
        return _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph,
                             allow_unused, materialize_grads)
    outputs = _as_tuple(outputs)
    single = isinstance(inputs, Tensor)
    names = list(inputs) if isinstance(inputs, dict) else None
    inputs = _as_tuple(inputs.values() if names is not None else inputs)
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    grads = run_backward(outputs, _as_tuple(grad_outputs), retain_graph, create_graph,
                         capture=inputs)
    if materialize_grads:
        grads = [creation.zeros_like(t) if g is None else g for t, g in zip(inputs, grads)]
    for t, g in zip(inputs, grads):
        if g is None and not allow_unused:
            raise RuntimeError(
                f"one of the inputs (shape {tuple(t.shape)}) was not used to compute the "
                "outputs; pass allow_unused=True to get None for it")
    if names is not None:
        return dict(zip(names, grads))
    return tuple(grads[0:1]) if single else tuple(grads)


def _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
                  materialize_grads):
    cotangents = _as_tuple(grad_outputs) if grad_outputs is not None else ()
    sizes = {g.shape[0] for g in cotangents if isinstance(g, Tensor) and g.dim() > 0}
    if len(sizes) != 1 or not all(isinstance(g, Tensor) for g in cotangents):
        raise RuntimeError("autograd.grad(is_grads_batched=True) needs grad_outputs: one "
                           "tensor per output, all with the same first (batch) dimension")
    size = sizes.pop()
    rows = [grad(outputs, inputs, [g[i] for g in cotangents],
                 retain_graph=True if i < size - 1 else retain_graph,
                 create_graph=create_graph, allow_unused=allow_unused,
                 materialize_grads=materialize_grads) for i in range(size)]
    columns = rows[0].keys() if isinstance(rows[0], dict) else range(len(rows[0]))
    stacked = {k: None if rows[0][k] is None else stack([r[k] for r in rows]) for k in columns}
    return stacked if isinstance(rows[0], dict) else tuple(stacked.values())


def _as_tuple(x):
    """One tensor (or array) as a 1-tuple; any other iterable (a list, ``dict.values()``,
    a generator of parameters) as the tuple of its items, as torch takes them."""
    if isinstance(x, (Tensor, np.ndarray)) or not hasattr(x, "__iter__"):
        return (x,)
    return tuple(x)


def _root_grad(t: Tensor, g):
    if g is None:
        if numel(t._data.shape) != 1:
            raise RuntimeError(
                f"backward() on a tensor of shape {tuple(t.shape)} needs a gradient: grad "
                "can be implicitly created only for scalar outputs; call .sum() first or "
                "pass gradient= a tensor of the same shape")
        return creation.ones_like(t)
    if not isinstance(g, Tensor):
        g = Tensor._make(np.asarray(g, dtype=t._data.dtype))
    if tuple(g.shape) != tuple(t.shape):
        raise RuntimeError(
            f"gradient has shape {tuple(g.shape)} but the tensor has shape {tuple(t.shape)}; "
            "they must match")
    return g


def run_backward(roots, root_grads, retain_graph, create_graph, capture=None, inputs=None,
                 stop=None, leaf_hooks=True):
    """Propagate gradients from ``roots``; returns the gradients of ``capture`` if given.

    ``stop``: edges ``(node, output index)`` where propagation ends (the boundary of a
    checkpointed region, autograd/checkpoint.py): their nodes do not run, and the
    gradients that reach them are returned, in order (None where none arrives).
    ``leaf_hooks=False``: the leaves' gradient hooks do not run (the backward a compiled
    forward traces: its gradients reach those leaves later, at each call's backward,
    which runs their hooks then)."""
    if retain_graph is None:
        retain_graph = create_graph
    pending: dict = {}            # node -> {output index: gradient so far}
    ready: list = []              # heap of (-seq, node): latest-created node first
    owned: set = set()            # ids of the sums this pass allocated (safe to add into)
    for t, g in zip(roots, root_grads):
        if not t.requires_grad:
            raise RuntimeError(
                "element 0 of tensors does not require grad and does not have a grad_fn; "
                "set requires_grad=True on the inputs you want gradients for")
        g = _root_grad(t, g)
        if t.grad_fn is not None:
            _add(pending, ready, owned, t.grad_fn, t._output_nr, g)
        else:
            _add(pending, ready, owned, t._accumulate_node(), 0, g)

    targets = capture if capture is not None else inputs
    captured = _capture_points(targets) if targets is not None else None
    results = [None] * (len(targets) if targets is not None else 0)
    needed = None
    if captured is not None and stop is None:
        needed = _leading_to({node for node, _ in captured}, [n for _, n in ready])
    if stop is not None:
        captured, results = {}, [None] * len(stop)
        for i, edge in enumerate(stop):
            captured.setdefault(edge, []).append(i)
        stop = {edge[0] for edge in stop}

    outer = grad_mode.in_backward, grad_mode.partial
    outer_autocast = autocast.dtype
    # (autocast off: each VJP computes in the dtypes its forward op ran in, as in PyTorch)
    grad_mode.in_backward, autocast.dtype = True, None
    if stop is None:
        grad_mode.partial = targets is not None
    try:
        with set_grad_enabled(create_graph):
            _propagate(pending, ready, owned, captured, capture, inputs, results,
                       retain_graph, create_graph, stop, needed, leaf_hooks)
            while _callbacks and not outer[0]:
                _callbacks.pop(0)()
    finally:
        (grad_mode.in_backward, grad_mode.partial), autocast.dtype = outer, outer_autocast
        if not outer[0]:
            _callbacks.clear()
    return results


_callbacks: list = []   # queue_callback's functions, run when the outermost backward ends


def queue_callback(callback) -> None:
    """Run ``callback()`` once the backward now running has propagated every gradient (as
    torch's ``Variable._execution_engine.queue_callback``): data parallelism waits for its
    gradient reductions there.

    >>> w = dg.ones(2, requires_grad=True)
    >>> _ = w.register_hook(lambda g: queue_callback(lambda: print("done")))
    >>> (w * 2).sum().backward()
    done
    """
    if not grad_mode.in_backward:
        raise RuntimeError("queue_callback can only be called during backward")
    _callbacks.append(callback)


def _propagate(pending, ready, owned, captured, capture, inputs, results, retain_graph,
               create_graph, stop=None, needed=None, leaf_hooks=True):
    """Run nodes latest-first until no gradient is pending (once per recorded op: the
    heap's functions are locals, and a gradient with one source skips ``_add``). Given
    ``needed`` (gradients of some tensors only), a node runs only if it leads to one of
    them, as in torch's engine: the rest of the graph is neither run nor freed."""
    pop, push = heapq.heappop, heapq.heappush
    while ready:
        node = pop(ready)[1]
        grads = pending.pop(node)
        mine = False
        if owned:   # popped sums leave the engine's hands (a VJP may pass them on)
            for total in grads.values():   # (most nodes have one gradient: no set work)
                if id(total) in owned:
                    owned.discard(id(total))
                    mine = True
            total = None   # (a gradient this frame holds is not _unshared)
        if stop is not None and node in stop:
            for idx, g in grads.items():
                for i in captured.get((node, idx), ()):
                    results[i] = g
            continue
        if type(node) is AccumulateGrad:
            hooks = node.leaf._hooks if leaf_hooks else None
            g = _run_hooks(hooks, grads[0])
            if captured is not None and (node, 0) in captured:
                for i in captured[(node, 0)]:
                    results[i] = g
                if capture is not None:
                    continue
            elif capture is not None or inputs is not None:
                continue   # grad() leaves every .grad alone; backward(inputs=...) all others
            if not node.leaf.requires_grad:   # (turned off since the op reached it: no
                continue                       # gradient, as torch's AccumulateGrad)
            take = not hooks and (mine or _unshared(g))
            _accumulate(node.leaf, g, create_graph, take)
            for hook in node.leaf._post_accumulate_hooks or ():
                hook(node.leaf)
            continue
        if node.hooks:
            for idx, hooks in node.hooks.items():
                if idx in grads:
                    grads[idx] = _run_hooks(hooks, grads[idx])
        if captured is not None:
            for idx, g in grads.items():
                for i in captured.get((node, idx), ()):
                    results[i] = g
        if needed is not None and not any(e is not None and e[0] in needed for e in node.next):
            continue   # (a captured tensor's producer, with nothing needed beyond it)
        if (getattr(node.op, "grad_block", None) is not None   # (a compiled step's is no
                and _add_block(pending, ready, owned, node, grads)):   # OpDef)
            if not retain_graph:
                _free(node)
            continue
        inputs_of = node.inputs   # (before _free drops them)
        if node.packed and inputs_of is not None:
            inputs_of = unpacked_inputs(node)
        input_grads = _call_vjp(node, grads, inputs_of)
        if not retain_graph:   # (_free, inlined but for an op's own release)
            node.inputs = node.outputs = None
            node.versions = ()
            if getattr(node.op, "release", None) is not None:
                _free(node)
        for edge, inp, g in zip(node._next, inputs_of, input_grads):
            if edge is None or g is None:
                continue
            # (tape.edge_of: the edge to a node's output 0 is the node itself)
            target, nr = edge if type(edge) is tuple else (edge, 0)
            if needed is not None and target not in needed:
                continue
            if (type(g) is not Tensor or g._data.shape != inp._data.shape
                    or g._data.dtype is not inp._data.dtype):
                g = _fit(node, inp, g)
            slot = pending.get(target)
            if slot is None:   # (_add's first case, inlined: most gradients have one source)
                pending[target] = {nr: g}
                push(ready, (-target.seq, target))
            else:
                _add(pending, ready, owned, target, nr, g)
        input_grads = g = None   # (a gradient this frame holds is not _unshared)


def _capture_points(targets) -> dict:
    """Where each captured tensor's gradient shows up: a leaf's accumulator, or a
    non-leaf's producing node and output index -> the positions in ``targets``."""
    captured: dict = {}
    for i, t in enumerate(_as_tuple(targets)):
        if not t.requires_grad:
            raise RuntimeError(f"input {i} of the gradient targets does not require grad")
        key = ((t.grad_fn, t._output_nr) if t.grad_fn is not None
               else (t._accumulate_node(), 0))
        captured.setdefault(key, []).append(i)
    return captured


def _leading_to(targets: set, starts) -> set:
    """The nodes reachable from ``starts`` (by their gradient edges) that are in
    ``targets`` or lead to one: what a gradient of the targets alone must run."""
    leads: dict = {}
    stack = [(n, False) for n in starts]
    while stack:
        node, done = stack.pop()
        edges = getattr(node, "next", ())   # (an AccumulateGrad has none)
        if done:   # (the graph is acyclic: every successor is settled by now)
            leads[node] = node in targets or any(
                e is not None and leads[e[0]] for e in edges)
        elif node not in leads:
            leads[node] = False
            stack.append((node, True))
            stack.extend((e[0], False) for e in edges if e is not None and e[0] not in leads)
    return {n for n, yes in leads.items() if yes}


def _add(pending, ready, owned, node, out_nr, g):
    slot = pending.get(node)
    if slot is None:
        pending[node] = {out_nr: g}
        heapq.heappush(ready, (-node.seq, node))
        return
    prev = slot.get(out_nr)
    if prev is None:
        slot[out_nr] = g
    elif grad_mode.enabled or modes.tracer is not None:   # create_graph / capture: record it
        slot[out_nr] = prev + g
    elif id(prev) in owned:
        # _call_vjp made shapes and dtypes equal; this buffer is ours alone: add in place
        np.add(prev._data, g._data, out=prev._data)
    else:
        total = Tensor._make(np.asarray(np.add(prev._data, g._data)))   # (0-d: not a scalar)
        owned.add(id(total))   # (alive in `pending` while the id is in use)
        slot[out_nr] = total


def _add_block(pending, ready, owned, node, grads) -> bool:
    """Add the gradient of a view ``node`` of a block of its input (``OpDef.grad_block``: a
    slice, a select) into that block of the input's pending gradient, an array of the
    engine's own: the parts of a split (x[:, t] of a loop) then fill one array, where
    their VJPs would give a zero-filled array each and ``_add`` their sums. False where
    the VJP must run: a recording backward (create_graph, capture), anomaly mode, a freed
    node, a gradient not of the block's shape and the input's dtype."""
    g, edge, inputs = grads.get(0), node._next[0], node.inputs
    if (grad_mode.enabled or modes.tracer is not None or g is None or edge is None
            or inputs is None or node.versions or node.packed or type(g) is not Tensor
            or (departures["anomaly"] and grad_mode.anomaly)):
        return False
    like, key = inputs[0]._data, node.op.grad_block(**node.attrs)
    if g._data.dtype != like.dtype or like[key].shape != g._data.shape:
        return False
    target, nr = edge if type(edge) is tuple else (edge, 0)
    slot = pending.get(target)
    prev = None if slot is None else slot.get(nr)
    if prev is not None and id(prev) in owned:
        prev._data[key] += g._data
        return True
    if prev is None:   # (zeros, and the block written: no read of them)
        total = Tensor._make(np.zeros(like.shape, like.dtype))
        total._data[key] = g._data
    else:
        total = Tensor._make(np.array(prev._data, like.dtype))
        total._data[key] += g._data
    owned.add(id(total))   # (alive in `pending` while the id is in use)
    if prev is None:
        _add(pending, ready, owned, target, nr, total)
    else:
        slot[nr] = total
    return True


def _call_vjp(node: Node, grads: dict, inputs):
    """Run ``node``'s VJP on ``grads`` (by output index), ``inputs`` its (unpacked) inputs."""
    op = node.op
    if inputs is None:   # (freed)
        raise RuntimeError(
            f"trying to backward through the graph a second time at {node!r} (saved values "
            "were freed after the first backward); pass retain_graph=True to the first "
            "backward() if you need to call it twice")
    for t, version in node.versions:
        if t._version[0] != version:
            raise RuntimeError(
                f"a tensor needed to compute the gradient of {op.name} (called at "
                f"{node.location}) was modified by an in-place operation: it is at version "
                f"{t._version[0]}, expected version {version}. Use an out-of-place op (e.g. "
                "x = x + y instead of x += y) or clone the tensor before changing it")
    outs = node.outputs
    if op.saves_outputs and grad_mode.enabled:   # (create_graph: the VJP records)
        _give_history(node, outs)
    if op.num_outputs == 1:
        g = grads.get(0)
        out = outs[0]
    else:
        # (zeros for an output that got no gradient, unless the VJP takes None there: a
        # custom function's, whose ctx.set_materialize_grads decides)
        fill = not getattr(op, "takes_missing_grads", False)
        g = tuple(grads.get(i) if i in grads else creation.zeros_like(o)
                  if fill and o.requires_grad else None for i, o in enumerate(outs))
        out = outs
    tracer = modes.tracer
    if tracer is None:
        attrs = node.attrs
        result = op.vjp(g, out, *inputs, **attrs) if attrs else op.vjp(g, out, *inputs)
    else:   # traced VJP nodes carry the location of the forward op they differentiate
        outer, tracer.backward_site = getattr(tracer, "backward_site", None), node.site
        try:
            result = op.vjp(g, out, *inputs, **node.attrs)
        finally:
            tracer.backward_site = outer
    if not isinstance(result, tuple):
        result = (result,)
    if len(result) != len(inputs):
        raise AssertionError(f"vjp of {op.name} returned {len(result)} gradients for "
                             f"{len(inputs)} inputs")
    if departures["anomaly"] and grad_mode.anomaly:
        _check_backward_nan(node, result)
    return result


def _give_history(node: Node, outs):
    """Make ``node`` the ``grad_fn`` of the stand-ins it keeps for its outputs
    (dispatch._shells), so that a VJP that records (``create_graph``) differentiates
    through what it reads of them as through the outputs themselves. Only now: a node that
    held its outputs with their history from the start would be a reference cycle."""
    for i, t in enumerate(outs):
        if t.requires_grad and t.grad_fn is None:
            t.grad_fn, t._output_nr = node, i


def _fit(node: Node, inp, g):
    """Input ``inp``'s gradient ``g`` from ``node``'s VJP as a Tensor of ``inp``'s dtype,
    checked to have its shape (a VJP may return a plain number, or compute in another
    dtype)."""
    if not isinstance(g, Tensor):
        g = creation.full_like(inp, g)
    data, want = g._data, inp._data
    if data.shape != want.shape:
        raise AssertionError(f"vjp of {node.op.name} gave a gradient of shape "
                             f"{data.shape} for an input of shape {want.shape}")
    if data.dtype is not want.dtype and data.dtype != want.dtype:
        g = g.to(dtypes.from_np(want.dtype))
    return g


def _free(node: Node):
    node.inputs = node.outputs = None   # (and so node.freed)
    node.versions = ()
    release = getattr(node.op, "release", None)
    if release is not None:   # (an op holding saved values of its own: a checkpoint's)
        release()


def _run_hooks(hooks, g):
    if hooks:
        for hook in list(hooks):
            new = hook(g)
            if new is not None:
                g = new
    return g


# References to a gradient that reached a leaf, none of them another holder's: the popped
# ``grads`` dict and ``g`` in _propagate, _unshared's argument and getrefcount's own.
_ENGINE_REFS = 4


def _unshared(g: Tensor) -> bool:
    """Whether the gradient ``g`` reaching a leaf is the engine's alone, so that it can
    become ``.grad`` without a copy, as torch's AccumulateGrad takes a gradient whose use
    count says nothing else holds it: a writeable C-contiguous array; no other reference
    to the Tensor (another leaf's pending gradient, a hook's list, a captured result, the
    caller's ``gradient=``); its array and the arrays it views referenced only by it and
    by the recycler (which hands out an array only once nothing else references it:
    kernels/recycle.py)."""
    data = g._data
    if (sys.getrefcount(g) > _ENGINE_REFS or type(data) is not np.ndarray
            or not data.flags.c_contiguous or not data.flags.writeable):
        return False   # (a broadcast zero or a strided view stays a VJP's, copied)
    refs = 3   # (g's attribute, this name, getrefcount's argument)
    while True:
        if type(data) is not np.ndarray:
            return False
        recycler = recycle.current
        tracked = recycler is not None and recycler.tracks(data)
        if sys.getrefcount(data) > refs + tracked:
            return False
        if data.base is None:
            return True
        data, refs = data.base, 3   # (the view's base attribute, this name, the argument)


def _accumulate(leaf: Tensor, g: Tensor, create_graph: bool, owned: bool = False):
    """Add ``g`` into ``leaf.grad``; ``owned``: g's buffer belongs to the engine alone,
    so it can become ``.grad`` without a copy."""
    if not create_graph:   # (no history, and no alias of the engine's own temporary: a
        g = Tensor._make(g._data)   # .grad is a tensor of its own, whose .data can be set)
    tracer = modes.tracer
    if tracer is not None and type(g._data) is not np.ndarray:
        _accumulate_traced(tracer, leaf, g)
    elif leaf.grad is None:
        # Own the storage: the incoming gradient may alias another tensor's data.
        leaf.grad = g if create_graph or owned else Tensor._make(np.array(g._data, copy=True))
    elif create_graph:
        leaf.grad = leaf.grad + g
    else:
        np.add(leaf.grad._data, g._data, out=leaf.grad._data)
        bump(leaf.grad)


def _accumulate_traced(tracer, leaf: Tensor, g: Tensor):
    """While tracing, ``.grad`` becomes a traced value; an existing eager gradient is read
    as a graph input, so accumulation across calls works in the compiled step too."""
    old = leaf.grad
    if old is not None and type(old._data) is np.ndarray:
        old = Tensor._make(tracer.grad_value(leaf))
    leaf.grad = g if old is None else old + g
    tracer.note_grad(leaf)


def _check_backward_nan(node, grads):
    for i, g in enumerate(grads):
        if (isinstance(g, Tensor) and type(g._data) is np.ndarray   # (a traced backward's
                and g._data.dtype.kind == "f" and np.isnan(g._data).any()):   # are symbolic)
            raise FloatingPointError(
                f"anomaly: the gradient of {node.op.name} returned NaN in its input {i}; "
                f"the forward op was called at {node.location}")
