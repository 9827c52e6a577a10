"""Captured graphs as deployable artefacts: freezing the tensors they read into constants.

A captured graph reads the tensors the function closes over (module parameters and
buffers, globals, closure variables) as extra inputs, bound at every call to the same
tensor objects (capture/trace.py), and a differentiable capture's graph also returns the
values its backward graph needs. Neither belongs in a saved model: ``dg.graph.load(path)``
must run with the function's own arguments and give the function's own outputs.

:class:`CapturedGraph` is what ``compiled.graph`` and ``traced.graph`` return: the captured
graph itself (it prints and runs as before) that also knows its capture, so that
``save(path)`` writes it *frozen* (:meth:`CapturedGraph.frozen`): the tensors it reads
become constants holding their values at save time, and only the function's outputs are
returned. ``save(path, freeze=False)`` writes :meth:`CapturedGraph.unfrozen` instead, whose
inputs are the arguments then the tensors read, in the printed order.

:func:`freeze_parameters` freezes a compiled *inference* call the same way, for speed
(torch's ``torch.jit.freeze`` and inductor's freezing): a module called under
``dg.no_grad()`` reads its parameters and buffers as constants, so that the passes fold
what they alone determine (eval-mode BatchNorm into its convolution, ``fold_batchnorm``).
The constants are read-only views of the tensors' own arrays (no copy), and the call is
guarded by each tensor's identity of storage and version counter (:class:`Frozen`): an
optimiser step, ``load_state_dict``, an in-place op or ``p.data = t`` makes the frozen
graph stale and the call traces again with the new values. (Writes that bypass the
tensor, through an array from ``t.numpy()``, are not seen, as in torch; nor is an array
put in a tensor's private ``_data`` by code outside dualgraph, which does not count the
change in ``tensor.MUTATIONS``: ``p.data = t`` is the way.)
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..graph import Graph
from ..graph.ir import GraphError, type_str
from ..tensor import Tensor
from .subgraph import needed_nodes
from .trace import Capture


class CapturedGraph(Graph):
    """A captured graph that knows how its inputs bind to tensors (``capture``), so that it
    can be saved as a self-contained model.

    >>> import dualgraph as dg
    >>> w = dg.tensor([1.0, 2.0])
    >>> f = dg.jit.trace(lambda x: x * w, dg.ones(2))
    >>> [v.name for v in f.graph.inputs], [v.name for v in f.graph.frozen().inputs]
    (['x', 'w'], ['x'])
    """

    def __init__(self, capture: Capture):
        super().__init__()
        graph = capture.graph
        if len(graph.inputs) != len(capture.bindings):
            raise GraphError(f"the captured graph has {len(graph.inputs)} inputs for "
                             f"{len(capture.bindings)} bound tensors")
        self.capture = capture
        # the same Values and nodes (immutable, so graphs may share them): no copy
        for v in graph.inputs:
            self.share_input(v)
        for v, array in graph.constants.items():
            self.share_constant(v, array)
        self.share_nodes(graph.nodes)
        self.set_outputs(graph.outputs)
        self._num_results = sum(kind == "value" for kind in capture.out_leaves)

    def frozen(self) -> Graph:
        """This graph as a self-contained model: inputs are the function's tensor arguments;
        every other tensor it reads is a constant holding a copy of its current value (later
        updates of the tensor don't change the result); outputs are the function's tensor
        outputs (not the values saved for a backward pass). A function that updates tensors
        (BatchNorm's running statistics in training mode, an optimiser step, ``.grad``) is
        not a pure function of its inputs, so it raises: see :meth:`unfrozen`.

        >>> import dualgraph as dg
        >>> m = dg.nn.Linear(2, 1)
        >>> graph = dg.jit.trace(m, dg.ones(3, 2)).graph.frozen()
        >>> print(graph)   # doctest: +SKIP
        graph(%x: f32[3,2]) {
          %linear: f32[3,1] = linear(%x, %weight, %bias)    # ...
          return (%linear)
        }
        """
        updated = self._updated()
        if updated:
            raise GraphError(f"this captured function updates {', '.join(updated)}, which a "
                             "frozen graph can't do: it is a pure function of its inputs. "
                             "Save it with save(path, freeze=False) (those tensors are then "
                             "inputs and their new values outputs), or capture the function "
                             "without the updates (model.eval(), no backward or optimiser "
                             "step)")
        return self._cut(self.outputs[:self._num_results], freeze=True)

    def unfrozen(self) -> Graph:
        """This graph as a pure function of all it reads: inputs are the function's tensor
        arguments, then the tensors it reads (parameters, buffers, globals, gradients it
        accumulates into), in the printed order; outputs are the function's tensor outputs,
        then the new values of the tensors it updates (not the values saved for a backward
        pass).

        >>> import dualgraph as dg
        >>> w = dg.tensor([1.0, 2.0])
        >>> f = dg.jit.trace(lambda x: x * w, dg.ones(2))
        >>> f.graph.unfrozen()(dg.ones(2), dg.tensor([3.0, 4.0]))
        [array([3., 4.], dtype=float32)]
        """
        return self._cut(self.outputs[:self._num_results + len(self.capture.writebacks)],
                         freeze=False)

    def save(self, path, freeze: bool = True) -> None:
        """Write :meth:`frozen` (or, with ``freeze=False``, :meth:`unfrozen`) to ``path``;
        ``dg.graph.load(path)`` reads it back (see ``dualgraph/graph/serialize.py``).

        >>> import dualgraph as dg, os, tempfile
        >>> w = dg.tensor([1.0, 2.0])
        >>> f = dg.jit.trace(lambda x: x * w, dg.ones(2))
        >>> path = os.path.join(tempfile.mkdtemp(), "model.json")
        >>> f.graph.save(path)
        >>> dg.graph.load(path)(dg.ones(2))
        [array([1., 2.], dtype=float32)]
        """
        (self.frozen() if freeze else self.unfrozen()).save(path)

    def _cut(self, outputs, freeze: bool) -> Graph:
        """A graph of the nodes ``outputs`` need (shared, not copied); with ``freeze`` the
        bound tensors' inputs become constants, else all inputs stay."""
        nodes = needed_nodes(self, outputs)
        read = {x for node in nodes for x in node.inputs} | set(outputs)
        g = Graph()
        for v, binding in zip(self.inputs, self.capture.bindings):
            if not freeze or binding.kind == "arg":
                g.share_input(v)
            elif v in read:
                g.share_constant(v, _current_value(v, binding.tensor))
        for v, array in self.constants.items():
            if v in read:
                g.share_constant(v, array)
        g.share_nodes(nodes)
        g.set_outputs(outputs)
        g.verify()
        return g

    def _updated(self) -> list[str]:
        """The readable names of the tensors (and ``.grad``s) the function updates. (A
        ``.grad`` it reads is one it accumulates into, so it is among them.)"""
        names = {id(b.tensor): v.name for v, b in zip(self.inputs, self.capture.bindings)
                 if b.kind != "grad"}
        return [names.get(id(t), "a tensor") + (".grad" if kind == "grad" else "")
                for kind, t in self.capture.writebacks]


def _current_value(v, tensor) -> np.ndarray:
    """A read-only copy of what ``tensor`` (bound to input ``v``) holds now."""
    array = tensor._data
    if not isinstance(array, np.ndarray):
        raise GraphError(f"{v.name} is being traced; save the graph after the capture ends")
    if array.dtype != v.dtype or array.shape != v.shape:
        raise GraphError(f"{v.name} is now {type_str(array.shape, array.dtype)} but was "
                         f"traced as {type_str(v.shape, v.dtype)} (model.double(), .to()?); "
                         "call the function again (dg.compile retraces; trace a "
                         "dg.jit.trace function again) before saving")
    array = np.array(array, copy=True, order="C")
    array.flags.writeable = False
    return array


@dataclasses.dataclass(frozen=True, eq=False)
class Frozen:
    """A tensor frozen into a compiled graph as a constant: valid while ``tensor`` holds
    ``array`` (the same storage) at ``version`` (no in-place write since)."""
    tensor: Tensor
    array: np.ndarray
    version: int
    name: str

    def changed(self) -> bool:
        return self.tensor._data is not self.array or self.tensor._version[0] != self.version

    def change(self) -> str:
        """What changed, for ``explain()``: the dtype or shape (``model.double()``), else
        the values."""
        a, old = self.tensor._data, self.array
        if a.dtype != old.dtype or a.shape != old.shape:
            return (f"captured tensor {self.name} is now {a.dtype} {tuple(a.shape)}, traced "
                    f"as {old.dtype} {tuple(old.shape)}")
        return (f"{self.name}, frozen into the graph as a constant, changed (an in-place "
                "update, load_state_dict, .data =)")


def freeze_parameters(capture: Capture, freezable: set) -> tuple[Capture, list]:
    """``(capture, frozen)``: ``capture`` with the tensors it reads by identity whose ids are
    in ``freezable`` (a module's parameters and buffers), and that it does not write, made
    constants of its graph (read-only views of their arrays, not copies), and the
    :class:`Frozen` guards of those tensors. ``capture`` itself when there are none.

    >>> import dualgraph as dg
    >>> m = dg.nn.Linear(2, 1)
    >>> with dg.no_grad():
    ...     capture = dg.jit.trace(m, dg.ones(3, 2)).capture
    >>> frozen_capture, frozen = freeze_parameters(capture, {id(p) for p in m.parameters()})
    >>> [v.name for v in frozen_capture.graph.inputs], [f.name for f in frozen]
    (['input'], ['weight', 'bias'])
    """
    written = {id(t) for _, t in capture.writebacks}
    graph, bindings, frozen, constants = Graph(), [], [], []
    for v, b in zip(capture.graph.inputs, capture.bindings):
        array = b.tensor._data
        if (b.kind == "captured" and id(b.tensor) in freezable and id(b.tensor) not in written
                and type(array) is np.ndarray and array.flags.c_contiguous
                and array.dtype == v.dtype and array.shape == tuple(v.shape)):
            view = array.view()
            view.flags.writeable = False   # (the view only: the tensor stays writeable)
            constants.append((v, view))
            frozen.append(Frozen(b.tensor, array, b.tensor._version[0], v.name))
        else:
            graph.share_input(v)
            bindings.append(b)
    if not frozen:
        return capture, []
    for v, array in constants + list(capture.graph.constants.items()):
        graph.share_constant(v, array)
    graph.share_nodes(capture.graph.nodes)
    graph.set_outputs(capture.graph.outputs)
    return dataclasses.replace(capture, graph=graph, bindings=bindings, view=None), frozen
