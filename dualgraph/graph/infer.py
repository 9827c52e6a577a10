"""Re-typing a graph for new input types (for example a concrete batch size for ``B``)."""
from __future__ import annotations

from ..shapes import ShapeError, Sym
from .ir import Graph, GraphError, Value, as_dtype, as_shape
from .printer import format_node


def infer_shapes(graph: Graph, input_types) -> Graph:
    """A new graph like ``graph`` whose inputs have ``input_types``, every node re-typed.

    ``input_types`` holds one type per input: a ``ShapedType``, a ``(shape, dtype)`` pair or
    anything with ``.shape`` and ``.dtype`` (an array). Ranks must stay the same. Each
    symbolic dim of the old inputs is bound to the new dim in its place, and the binding is
    substituted into attrs (a ``reshape`` to ``(B, 784)`` becomes one to ``(32, 784)``;
    ``784*B`` becomes 25088) and into subgraphs.

    >>> from dualgraph.shapes import ShapedType
    >>> g = Graph(); x = g.add_input(("B", 3), "float32"); g.set_outputs(g.add_node("exp", [x]))
    >>> print(infer_shapes(g, [ShapedType((2, 3), x.dtype)]).outputs[0])
    %exp: f32[2,3]
    """
    types = [_as_type(t) for t in input_types]
    if len(types) != len(graph.inputs):
        raise GraphError(f"the graph has {len(graph.inputs)} inputs, got {len(types)} types")
    binding: dict[str, object] = {}
    for v, (shape, _) in zip(graph.inputs, types):
        _bind(v, shape, binding)
    return _rebuild(graph, types, binding)


def _as_type(t):
    shape, dtype = (t.shape, t.dtype) if hasattr(t, "shape") else t
    return as_shape(shape), as_dtype(dtype)


def _bind(v: Value, shape: tuple, binding: dict) -> None:
    if len(shape) != v.ndim:
        raise GraphError(f"input {v!r} has {v.ndim} dims; the new type {shape} has "
                         f"{len(shape)}")
    for old, new in zip(v.shape, shape):
        if isinstance(old, Sym) and not bind_dim(old, new, binding):
            raise GraphError(f"input {v!r}: {old} cannot be {new} when "
                             f"{format_binding(binding)}")


def _rebuild(graph: Graph, types, binding: dict) -> Graph:
    new = Graph()
    env: dict[Value, Value] = {}
    for v, (shape, dtype) in zip(graph.inputs, types):
        env[v] = new.add_input(shape, dtype, name=v.name)
    for v, arr in graph.constants.items():
        env[v] = new.add_constant(arr, name=v.name)
    for i, node in enumerate(graph.nodes):
        inputs = [env[x] if isinstance(x, Value) else x for x in node.inputs]
        attrs = {k: substitute(val, binding, _retype) for k, val in node.attrs.items()}
        try:
            outs = new.add_node(node.op, inputs, attrs, node.location,
                                names=[v.name for v in node.outputs])
        except Exception as e:
            e.add_note(f"while re-typing node {i}: {format_node(node)}")
            raise
        env.update(zip(node.outputs, outs))
    new.set_outputs([env[v] for v in graph.outputs])
    return new


def _retype(sub: Graph, binding: dict) -> Graph:
    """A subgraph re-typed under ``binding`` (its input dims substituted)."""
    types = [(substitute(v.shape, binding), v.dtype) for v in sub.inputs]
    return _rebuild(sub, types, binding)


def substitute(val, binding: dict, on_graph=None):
    """``val`` (an attr or shape) with each bound symbolic dim replaced by its value,
    recursively; subgraphs go through ``on_graph(graph, binding)`` when given."""
    if isinstance(val, Sym):
        return eval_dim(val, binding)
    if isinstance(val, Graph):
        return val if on_graph is None else on_graph(val, binding)
    if isinstance(val, (tuple, list)):
        return type(val)(substitute(v, binding, on_graph) for v in val)
    return val


def eval_dim(dim: Sym, binding: dict):
    """``dim`` under ``binding`` (names -> ints or Syms): ``784*B`` with B=2 is 1568,
    ``s0 + 1`` with s0=7 is 8; unbound names stay symbolic."""
    return dim.evaluate(binding)


def bind_dim(dim: Sym, size, binding: dict) -> bool:
    """Bind the names of ``dim`` in ``binding`` so that it equals ``size``; False when it
    cannot. A dim linear in its one unbound name is solved for it (``784*B`` = 1568 binds
    B=2, ``s0 + 1`` = 8 binds s0=7); one with several (``B*T``), or of a higher power,
    binds nothing until the others are bound."""
    val = dim.evaluate(binding)
    if not isinstance(val, Sym):
        return val == size
    if len(set(val.names)) > 1 or any(len(names) > 1 for names, _ in val.terms):
        return True
    (names, coef), = val.terms
    rest = size - val.const
    if isinstance(rest, int) and rest % coef:
        return False
    try:
        rest = rest // coef
    except ShapeError:   # a Sym that coef does not divide
        return False
    except TypeError:    # int // Sym: leave the name unbound
        return True
    binding[names[0]] = rest
    return True


def format_binding(binding: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(binding.items())) or "nothing is bound"
