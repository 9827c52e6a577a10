"""ONNX import: an ONNX model -> a dualgraph :class:`~dualgraph.graph.Graph` that runs,
compiled, on dualgraph's own kernels.

Each ONNX node goes through one import rule (``onnx_import_ops.import_rules()``: ONNX op
type -> a small function), which emits one or a few registry ops. Where a registry op is the
natural target of an ONNX op type (Relu -> relu, ReduceSum -> sum), the rule is that op's
``OpDef.onnx_import``; ONNX ops that dualgraph has no single op for are decomposed by the
converters of ``onnx_import_ops.CONVERTERS`` (Gemm is ``linear``, Squeeze a ``reshape``,
BatchNormalization a few elementwise ops). Graph inputs keep their ONNX names and
symbolic dims (``dim_param``); initializers become constants; every node's location names
the ONNX node, so a printed graph or an error points back into the model.

The attributes that ONNX passes as tensors (Reshape's shape, Slice's starts, Reduce*'s
axes, ...) are known when loading where they come from initializers, Constant nodes or
arithmetic on shapes: an op whose inputs are all known runs *now*, on the registry kernels,
instead of becoming a node (``Shape -> Gather -> Concat -> Reshape`` folds to one reshape).
Known shape values may hold symbolic dims (``[B, 12, 64]``), so a dynamic batch survives
such chains: the ops of such chains compute them with their ``OpDef.shape_fold``. Where such
a value is computed at run time (a Reshape's shape given as an input, ``T - 1``), the node
becomes a ``by_value`` node that runs its import rule on the values as the model runs, its
results' sizes fresh symbolic dims (``onnx_runtime``). Where a node has no such form (the
trip count of a Loop with scan outputs), the model is imported when it is called, for the
values of the graph inputs it comes from, and cached per value (``_Specialised``).

>>> import dualgraph as dg
>>> f = dg.onnx.load("mlp.onnx")                        # doctest: +SKIP
>>> f(np.ones((8, 784), np.float32)).shape              # doctest: +SKIP
Size([8, 10])
"""
from __future__ import annotations

import pathlib

import numpy as np

from .. import dtypes
from ..codegen import Executable
from ..graph import Graph
from ..graph.ir import GraphError, Value, infer_types, type_str
from ..ops.opdef import OpDef, get
from ..shapes import ShapedType, ShapeError, Sym, infer_reshape, numel
from ..tensor import Tensor
from .errors import OnnxError, require_onnx
from .onnx_check import bad_name, input_types_problem, node_problem, tensor_problem
from .onnx_import_ops import (DOMAINS, FOLD_LIMIT, STRUCTURED, Optional, Sequence,
                              SequenceOutput, import_rules, tidy)
from .onnx_runtime import (RunTimeNode, RunTimeValue, by_value_shapes, hint, inferred_types,
                           result_types)

_DEFAULT_DOMAINS = ("", "ai.onnx")
_DTYPE_NAMES = ", ".join(d.name for d in dtypes.ALL + dtypes.EXTRA)
EMPTY = "empty"   # (the layout of an output that is an empty optional: None)


def read_model(path_or_model) -> tuple:
    """``(onnx, model, label)``: an ONNX model (a path or an ``onnx.ModelProto``) read and
    its op types checked; :func:`import_model` turns it into a compiled function.

    Loading never executes code from the file: ``onnx.load`` parses protobuf, tensors are
    read with ``numpy_helper``. Every node is checked against its op's ONNX schema before
    it is converted (``onnx_check``). A malformed or unsupported model raises
    :class:`OnnxError` naming the file, the first node that can't be imported (its name or
    index, and op type) and why; no other exception escapes for a model's contents (a path
    that can't be read is an ``OSError``, as for any file).
    """
    onnx = require_onnx()
    if isinstance(path_or_model, (str, pathlib.Path)):
        label = pathlib.Path(path_or_model).name
        model = _read(onnx, pathlib.Path(path_or_model), label)
    elif isinstance(path_or_model, onnx.ModelProto):
        model, label = path_or_model, (path_or_model.graph.name or "model") + ".onnx"
    else:
        raise TypeError(f"load_model expects a path or an onnx.ModelProto, got "
                        f"{type(path_or_model).__name__}")
    if not model.graph.output:
        raise OnnxError(f"{label}: the model's graph has no outputs (is it an ONNX model?)")
    _check_op_types(onnx, model, label)
    return onnx, model, label


def load_model(path_or_model) -> "OnnxFunction":
    """:func:`import_model` of the model :func:`read_model` reads, whose inputs are tensors
    (``onnx_load.load`` takes any model).

    >>> f = load_model("double.onnx")                     # doctest: +SKIP
    >>> f(np.ones(2, np.float32))                         # doctest: +SKIP
    tensor([2., 2.])
    """
    return import_model(*read_model(path_or_model))


def import_model(onnx, model, label: str) -> "OnnxFunction":
    """The compiled function of ``model`` (read and checked by :func:`read_model`)."""
    importer = _Importer(onnx, model, label)
    try:
        return _function(importer)
    except _NeedsValues as need:
        return _Specialised(onnx, model, label, need.names, need.where)
    except _NeedsShapes as need:
        return _Specialised(onnx, model, label, (), need.where, by_shape=True)
    except Exception:
        if not importer.run_time_nodes:
            raise
    # (a node over the run-time nodes' fresh dims can't be imported: per value, as before)
    try:
        return _function(_Importer(onnx, model, label, run_time=False))
    except _NeedsValues as need:
        return _Specialised(onnx, model, label, need.names,
                            f"{need.where} (the model's run-time nodes can't be imported)",
                            run_time=False)
    except _NeedsShapes as need:
        return _Specialised(onnx, model, label, (), need.where, run_time=False,
                            by_shape=True)


def _function(importer: "_Importer") -> "OnnxFunction":
    graph, names, outputs, layout = _import(importer)
    fn = OnnxFunction(graph, names, outputs, importer.label, layout)
    fn.run_time_nodes = list(importer.run_time_nodes)
    return fn


def _import(importer: "_Importer"):
    """(graph, input names, output names, layout) of the importer's model, the inputs
    named in its ``bound`` taken as the known arrays it gives (``_NeedsValues`` when more
    must be)."""
    try:
        return importer.run()
    except (OnnxError, _NeedsValues, _NeedsShapes):
        raise
    except Exception as e:   # (a bug of the import's: still a model it can't load, named)
        raise importer.error(f"the import failed: {type(e).__name__}: {e}") from e


def _check_op_types(onnx, model, label: str) -> None:
    """One error naming every node, subgraphs included, whose op type the import lacks:
    each node's name (or index) and op type, its domain where not the default one, and the
    model's opset for the domain."""
    rules, opsets = import_rules(), {i.domain: i.version for i in model.opset_import}
    missing, kinds = [], {}   # (kinds: the op types, in order, once each)

    def walk(graph, path):
        for k, node in enumerate(graph.node):
            name = f"{path}node '{node.name}'" if node.name else f"{path}node #{k}"
            if not _supported(rules, node):
                domain = f" of domain {node.domain!r}" if node.domain not in _DEFAULT_DOMAINS \
                    else ""
                kinds[f"{node.op_type}{domain}"] = None
                missing.append(f"{name} ({node.op_type})")
            for a in node.attribute:
                for g in ([a.g] if a.type == a.GRAPH else list(a.graphs)):
                    walk(g, f"{name}: {a.name}: ")
    walk(model.graph, "")
    if missing:
        used = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in opsets.items())
        raise OnnxError(f"{label}: {', '.join(missing)}: op type{'s' * (len(kinds) > 1)} "
                        f"{', '.join(kinds)} {'are' if len(kinds) > 1 else 'is'} not supported "
                        f"by dualgraph's ONNX import at the model's opsets ({used}); "
                        f"{len(rules)} op types are: see "
                        "dualgraph.export.onnx_import_ops.import_rules()")


def _supported(rules, node) -> bool:
    """Whether the import has a rule for ``node``: its op type, in the default domain or
    the one ``DOMAINS`` names for the op type (the training ops')."""
    want = DOMAINS.get(node.op_type)
    return node.op_type in rules and (node.domain == want if want else
                                      node.domain in _DEFAULT_DOMAINS)


class _NeedsValues(Exception):
    """A shape, axes or count that the import must know is computed from these graph
    inputs: the model is imported once their values are given (``_Specialised``)."""

    def __init__(self, names, where: str = ""):
        super().__init__(sorted(names))
        self.names, self.where = set(names), where


class _NeedsShapes(Exception):
    """A node needs static sizes where the model's inputs have symbolic dims (Resize's
    weights along a dynamic axis): the model is imported per input shape
    (``_Specialised(by_shape=True)``)."""

    def __init__(self, where: str = ""):
        super().__init__(where)
        self.where = where


def _read(onnx, path: pathlib.Path, label: str):
    """The ModelProto in file ``path``, with its external data (an OSError when the file
    can't be read; an OnnxError when it doesn't hold a model)."""
    data = path.read_bytes()
    try:
        model = onnx.load_model_from_string(data)
        onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
    except Exception as e:   # (protobuf's DecodeError, a missing external data file, ...)
        raise OnnxError(f"{label}: not a readable ONNX model ({type(e).__name__}: {e})") \
            from None
    return model


class OnnxFunction:
    """An imported ONNX model: call it with one array or tensor per model input.

    ``graph`` is the imported graph (before optimisation), ``input_names`` and
    ``output_names`` the model's, ``code`` the generated Python that runs it. Returns one
    Tensor for a model with one output, else a tuple in ``output_names`` order.
    ``run_time_nodes`` names the nodes whose shapes, axes or counts are values computed
    as the model runs (each a ``by_value`` node: see ``onnx_runtime``).
    """

    run_time_nodes: list = []

    def __init__(self, graph: Graph, input_names, output_names, label: str, layout=None):
        self.graph = graph
        # per output: None (a tensor), a sequence's length, or EMPTY (an empty optional)
        self.layout = layout or [None] * len(output_names)
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.label = label
        self.executable = Executable(graph, passes=None)

    @property
    def code(self) -> str:
        return self.executable.code

    def _check_count(self, inputs) -> None:
        if len(inputs) != len(self.input_names):
            raise TypeError(f"{self.label} takes {len(self.input_names)} inputs "
                            f"({', '.join(self.input_names)}), got {len(inputs)}")

    def __call__(self, *inputs):
        self._check_count(inputs)
        arrays = [_as_array(x, v.dtype) for x, v in zip(inputs, self.graph.inputs)]
        flat = [Tensor._make(a) for a in self.executable.run(arrays)]
        outs = []
        for count in self.layout:   # (a sequence output is a list of its tensors)
            outs.append(None if count == EMPTY else flat.pop(0) if count is None else
                        [flat.pop(0) for _ in range(count)])
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __repr__(self):
        ins = ", ".join(f"{n}: {type_str(v.shape, v.dtype)}"
                        for n, v in zip(self.input_names, self.graph.inputs))
        outs = ", ".join(f"{n}: {type_str(v.shape, v.dtype)}"
                         for n, v in zip(self.output_names, self.graph.outputs))
        return f"<OnnxFunction {self.label}: ({ins}) -> ({outs}), {len(self.graph.nodes)} nodes>"

    def explain(self) -> str:
        """How the model's shapes, axes and counts are known: when loading, or as it runs
        (its ``by_value`` nodes and the symbolic dims they make)."""
        if not self.run_time_nodes:
            return (f"{self.label}: one import serves every input: each shape, axes and "
                    "count is known when loading (or a product of the inputs' symbolic dims)")
        made = sorted({d for n in self.graph.nodes if n.op is get("by_value")
                       for shape in n.attrs["shapes"] for d in shape if isinstance(d, str)})
        lines = "".join(f"\n  {where}" for where in self.run_time_nodes)
        return (f"{self.label}: one import serves every input: {len(self.run_time_nodes)} "
                "nodes read a shape, axes or count computed as the model runs, their "
                f"results sized by the symbolic dims {', '.join(made) or 'of the inputs'}:"
                f"{lines}")


def _as_array(x, dtype) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.detach().numpy()
    return np.asarray(x, dtype=dtype)


class _Specialised(OnnxFunction):
    """A model in which a count that has no run-time form (the trip count of a Loop
    with scan outputs, see ``onnx_runtime``) is computed from graph inputs rather than
    known: the model is imported and compiled for each value of those inputs it is called
    with, as ``dg.jit.compile`` specialises on a Python scalar: the graph is cached per
    value (the guard), and the other inputs stay run-time inputs (the other values
    computed at run time are read as it runs, unless ``run_time`` is False or that import
    fails). ``graph`` is the last one run."""

    def __init__(self, onnx, model, label: str, names, why: str = "", run_time=True,
                 by_shape=False):
        self.onnx, self.model, self.label, self.why = onnx, model, label, why
        self.run_time, self.by_shape = run_time, by_shape
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.output_names = [o.name for o in model.graph.output]
        self.by_value = set(names)
        self.cache: dict = {}
        self.graph = self.executable = None

    def __call__(self, *inputs):
        if len(inputs) != len(self.input_names):
            raise TypeError(f"{self.label} takes {len(self.input_names)} inputs "
                            f"({', '.join(self.input_names)}), got {len(inputs)}")
        given = dict(zip(self.input_names, inputs))
        while True:
            bound = {n: _as_array(given[n], None) for n in sorted(self.by_value)}
            shapes = {n: tuple(np.shape(given[n]) if not isinstance(given[n], Tensor)
                               else given[n].shape)
                      for n in self.input_names} if self.by_shape else None
            key = tuple((n, a.dtype.str, a.shape, a.tobytes()) for n, a in bound.items()) \
                + tuple(sorted((shapes or {}).items()))
            if key in self.cache:
                break
            try:
                graph, names, _, layout = _import(_Importer(
                    self.onnx, self.model, self.label, bound=bound, run_time=self.run_time,
                    shapes=shapes))
            except _NeedsValues as need:
                self.by_value |= need.names
                continue
            except _NeedsShapes:
                if self.by_shape:
                    raise
                self.by_shape = True
                continue
            except Exception:
                if not self.run_time:
                    raise
                self.run_time = False   # (per value only, as for a model that needs it)
                continue
            self.cache[key] = (OnnxFunction(graph, names, self.output_names, self.label,
                                            layout), names)
        run, names = self.cache[key]
        self.graph, self.executable = run.graph, run.executable
        return run(*(given[n] for n in names))

    def _per(self) -> str:
        """What the imports are per: values of some inputs, the inputs' shapes, or both."""
        parts = [f"value of {', '.join(sorted(self.by_value))}"] if self.by_value else []
        return " and ".join(parts + ["input shape"] * self.by_shape)

    def __repr__(self):
        return (f"<OnnxFunction {self.label}: ({', '.join(self.input_names)}) -> "
                f"({', '.join(self.output_names)}), imported per {self._per()}; "
                f"{len(self.cache)} imported>")

    def explain(self) -> str:
        return (f"{self.label}: imported per {self._per()} ({len(self.cache)} imports so "
                f"far): {self.why} has no run-time form (a Loop's trip count with scan "
                "outputs, an If choosing between sequences, a result of unknown rank, a node "
                "that can't work over the sizes run-time nodes make, or a Resize along a "
                "dynamic dim)")


# -- the importer ---------------------------------------------------------------------------
class _Importer:
    """Walks the ONNX graph once, node by node, building the dualgraph graph.

    ``env`` maps each ONNX value name to a graph Value (computed at run time) or a NumPy
    array (known now: an initializer, a Constant, or folded). Known arrays become graph
    constants only where a run-time op reads them; an ``object`` array holds a shape with
    symbolic dims and can't become one.

    A subgraph (an If branch, a Loop or Scan body) is imported by an importer of its own
    whose ``parent`` is the enclosing one: ONNX subgraphs read outer names freely, while
    dualgraph's bodies are closed, so an outer run-time Value it reads becomes an input of
    its graph, listed in ``captured`` (the control-flow node passes them in)."""

    def __init__(self, onnx, model, label: str, parent=None, scope: str = "",
                 bound: dict | None = None, run_time: bool = True, eager: bool = False,
                 shapes: dict | None = None):
        self.onnx = onnx
        self.model = model
        self.label = label
        self.opset = _default_opset(model)
        self.graph = Graph()
        self.env: dict[str, object] = {}
        self.node = None
        self.index = 0   # of self.node in the ONNX graph
        self.parent, self.scope = parent, scope
        self.captured: list[Value] = []          # outer Values read, in input order
        self._lifted: dict[Value, Value] = {}    # outer Value -> its input here
        self._constants: dict[int, tuple] = {}   # id(array) -> (array, its constant)
        self._names: dict[int, str] = {}         # id(known array) -> its ONNX name
        self.bound = bound or {}                  # graph input name -> its given value
        self.shapes = shapes                      # graph input name -> its given shape
        self.layout: list = []   # per output: None (a tensor) or a sequence's length
        # a node needing a value computed at run time becomes a ``by_value`` node (else the
        # model is imported per value); ``eager``: every op is computed now (that node's
        # kernel runs its import rule so)
        self.run_time, self.eager = run_time and parent is None, eager
        self.run_time_nodes: list[str] = []   # the ONNX nodes made ``by_value`` nodes
        self._types: dict | None = None       # ONNX's inferred types, when first needed
        self._dims: dict = {}                 # ONNX dim_param -> a fresh dim
        self._made = 0                        # fresh dims made

    def run(self):
        g = self.model.graph
        self._initializers(g)
        inputs = [i for i in g.input if i.name not in self.env]   # (IR < 4 lists weights)
        for i in inputs:
            if i.name in self.env or not i.name:
                raise self.error(f"graph input {i.name!r} is named twice or has no name")
            self.env[i.name] = self._input(i)
            if i.name in self.bound:   # (checked against the declared type, then known)
                self.env[i.name] = self._bind(i.name, self.env[i.name])
        self.graph.inputs = [v for v in self.graph.inputs if v.name not in self.bound]
        self._nodes(g)
        names = [i.name for i in inputs if i.name not in self.bound]
        return self.graph, names, [o.name for o in g.output], self.layout

    def _bind(self, name: str, v: Value) -> np.ndarray:
        array = np.asarray(self.bound[name], dtype=v.dtype)
        if array.ndim != v.ndim or any(isinstance(d, int) and d != n
                                       for d, n in zip(v.shape, array.shape)):
            raise OnnxError(f"{self.label}: input {name!r} is {type_str(v.shape, v.dtype)}, "
                            f"got an array of shape {list(array.shape)}")
        self._names[id(array)] = name
        return array

    def _initializers(self, g) -> None:
        """Read ``g``'s initializers (checking the names of all its values first)."""
        problem = bad_name([v.name for part in (g.initializer, g.input, g.output) for v in part],
                           "the graph's initializers, inputs and outputs")
        if problem:
            raise self.error(problem)
        for init in g.initializer:
            if init.name in self.env:
                raise self.error(f"initializer {init.name!r} is given twice")
            self.env[init.name] = self.tensor(init, f"initializer {init.name!r}")
            self._names[id(self.env[init.name])] = init.name

    def tensor(self, proto, what: str) -> np.ndarray:
        """TensorProto ``proto`` (``what`` it is, for errors) as an array, its dims and data
        checked."""
        problem = tensor_problem(self.onnx, proto)
        if problem is None:
            try:
                array = self.onnx.numpy_helper.to_array(proto)
            except Exception as e:   # (data that does not fit the dims, external data)
                problem = f"can't be read: {type(e).__name__}: {e}"
            else:
                if array.shape == tuple(proto.dims):
                    return array
                problem = f"holds data of shape {list(array.shape)} for dims {list(proto.dims)}"
        raise self.error(f"{what} {problem}")

    def _nodes(self, g) -> list:
        """Convert ``g``'s nodes and set the graph's outputs; returns what the outputs are
        (Values or known arrays)."""
        for self.index, node in enumerate(g.node):
            self._convert(node)
        self.node = None
        outs, results = [], []
        for o in g.output:
            seq = self.lookup(o.name) if self.has(o.name) else None
            if isinstance(seq, STRUCTURED) and self.parent is not None:
                raise SequenceOutput(self.error(
                    f"output {o.name!r} of a subgraph is a sequence or an optional; "
                    "dualgraph's control flow carries tensors only"))
            if isinstance(seq, Optional):   # (a model's output: its value, or None)
                seq = seq.value
                if seq is None or not isinstance(seq, Sequence):
                    self.layout.append(EMPTY if seq is None else None)
                    outs += [] if seq is None else [self.value(seq)]
                    results.append(seq)
                    continue
            if isinstance(seq, Sequence):   # (its tensors, in order)
                outs += [self.value(t) for t in seq]
                self.layout.append(len(seq))
                results.append(seq)
                continue
            outs.append(self._output(o.name, renamed=outs))
            self.layout.append(None)
            results.append(self.lookup(o.name))
            self._check_declared(o, outs[-1])
        self.graph.set_outputs(outs)
        return results

    def body(self, proto, formal: list, scope: str) -> "_Importer":
        """Import the subgraph ``proto`` (attr ``scope`` of the current node) into a closed
        graph. ``formal`` gives its inputs, in order: a type (the input becomes a graph
        input of that type) or a known array (the input is bound to it). The importer
        returned holds the graph, the outer Values it ``captured`` (its inputs after the
        formal ones) and ``results``, what its outputs are."""
        if len(proto.input) != len(formal):
            raise self.error(f"the {scope} takes {len(proto.input)} inputs; {self.node.op_type} "
                             f"gives it {len(formal)}")
        sub = _Importer(self.onnx, self.model, self.label, parent=self, scope=scope)
        sub._initializers(proto)
        for info, t in zip(proto.input, formal):
            sub.env[info.name] = t if isinstance(t, np.ndarray) else \
                sub.graph.add_input(t.shape, t.dtype, name=info.name)
        sub.results = sub._nodes(proto)
        return sub

    def inline(self, proto, inputs=()) -> tuple:
        """The outputs of subgraph ``proto`` (an If branch taken whatever the inputs, or one
        step of an unrolled Loop: ``inputs`` bind its inputs), its nodes converted here as
        if they were the enclosing graph's; its own names go out of scope after (a Loop
        step is inlined again with the same names)."""
        node, index, before = self.node, self.index, dict(self.env)
        for info, x in zip(proto.input, inputs):
            self.env[info.name] = x
        for init in proto.initializer:
            self.env[init.name] = self.tensor(init, f"initializer {init.name!r}")
        for self.index, inner in enumerate(proto.node):
            self._convert(inner)
        self.node, self.index = node, index
        outs = tuple(self.lookup(o.name) for o in proto.output)
        self.env.clear()
        self.env.update(before)
        return outs

    # -- names in scope --
    def has(self, name: str) -> bool:
        return name in self.env or self.parent is not None and self.parent.has(name)

    def lookup(self, name: str):
        """What ONNX name ``name`` is here: a name of this graph or of an enclosing one (an
        outer run-time Value becomes an input of this graph, once)."""
        if name in self.env:
            return self.env[name]
        x = self.parent.lookup(name)
        if isinstance(x, Value):
            if x not in self._lifted:
                self._lifted[x] = self.graph.add_input(x.shape, x.dtype, name=name)
                self.captured.append(x)
            x = self._lifted[x]
        self.env[name] = x
        return x

    # -- graph inputs and outputs --
    def _input(self, info) -> Value:
        t = info.type.tensor_type
        if not info.type.HasField("tensor_type") or not t.HasField("shape"):
            raise OnnxError(f"{self.label}: input {info.name!r} is not a tensor of known rank; "
                            "dualgraph needs each input's rank (its dims may be symbolic)")
        dims = [self._dim(d, info.name, k) for k, d in enumerate(t.shape.dim)]
        if self.shapes is not None and info.name in self.shapes:
            dims = self._given_shape(info.name, dims)
        static = [d for d in dims if isinstance(d, int)]
        if min(static, default=0) < 0 or np.prod(static, dtype=np.float64) >= 2 ** 63:
            raise self.error(f"input {info.name!r} has negative dims or more elements than "
                             f"an int64 counts: {dims}")
        return self.graph.add_input(dims, self.onnx_dtype(t.elem_type, f"input {info.name!r}"),
                                    name=info.name)

    def _given_shape(self, name: str, dims: list) -> list:
        """The shape given for input ``name`` (a model imported per input shape), checked
        against its declared rank and static dims."""
        given = list(self.shapes[name])
        if len(given) != len(dims) or any(isinstance(d, int) and d != n
                                          for d, n in zip(dims, given)):
            raise OnnxError(f"{self.label}: input {name!r} has shape {dims}, got an array "
                            f"of shape {given}")
        return given

    def needs_shapes(self) -> None:
        """Raise ``_NeedsShapes`` where the model can be imported per input shape (it is
        not already): a node that needs static sizes the inputs leave symbolic."""
        root = self
        while root.parent is not None:
            root = root.parent
        if root.shapes is None:
            raise _NeedsShapes(self.where())

    def _dim(self, d, name: str, k: int):
        if d.HasField("dim_value"):
            return int(d.dim_value)
        text = d.dim_param if d.HasField("dim_param") else f"{name}_{k}"
        problem = bad_name([text], f"dim {k} of input {name!r}")
        if problem:
            raise self.error(problem)
        return _as_sym(text)

    def _output(self, name: str, renamed) -> Value:
        """The Value of graph output ``name``, which takes that name when a node makes it
        (and no earlier output is the same Value)."""
        if not self.has(name):
            raise OnnxError(f"{self.where()}: output {name!r} is not computed by any node")
        v = self.value(self.lookup(name))
        if v.producer is not None and v not in renamed:
            self.graph.rename(v, name)
        return v

    def _check_declared(self, info, v: Value) -> None:
        """Output ``info`` declares the dtype, rank and static dims that the graph computes,
        where it declares them (a dim static in one and symbolic in the other may differ)."""
        t = info.type.tensor_type
        dtype = self.onnx_dtype(t.elem_type, f"output {info.name!r}") if t.elem_type else None
        dims = [d.dim_value if d.HasField("dim_value") else "?" for d in t.shape.dim] \
            if t.HasField("shape") else None
        if dtype not in (None, v.dtype) or dims is not None and (
                len(dims) != v.ndim or any(isinstance(d, int) and isinstance(n, int) and d != n
                                           for d, n in zip(dims, v.shape))):
            declared = ("" if dtype is None else f" {dtype}") + \
                ("" if dims is None else f" of shape {dims}")
            raise self.error(f"output {info.name!r} is declared{declared}, but the graph "
                             f"computes {type_str(v.shape, v.dtype)}")

    def onnx_dtype(self, elem_type: int, what: str) -> np.dtype:
        """The NumPy dtype of an ONNX TensorProto type (an OnnxError when dualgraph lacks
        it)."""
        try:
            return dtypes.to_np(self.onnx.helper.tensor_dtype_to_np_dtype(elem_type))
        except (TypeError, KeyError, ValueError):
            name = _type_name(self.onnx, elem_type)
            raise OnnxError(f"{self.where()}: {what} has ONNX type {name}, which dualgraph "
                            f"has no dtype for (it has {_DTYPE_NAMES})") from None

    # -- nodes --
    def _convert(self, node) -> None:
        self.node = node
        rules = import_rules()
        convert = rules.get(node.op_type)
        if not _supported(rules, node):
            domain = f" of domain {node.domain!r}" if node.domain not in _DEFAULT_DOMAINS else ""
            raise self.error(f"op type {node.op_type}{domain} is not supported by dualgraph's "
                             f"ONNX import ({len(rules)} op types are: see "
                             "dualgraph.export.onnx_import_ops.import_rules())")
        opset = self.opset if node.domain in _DEFAULT_DOMAINS else \
            next(i.version for i in self.model.opset_import if i.domain == node.domain)
        problem = node_problem(self.onnx, node, opset)
        if problem:
            raise self.error(problem)
        missing = [n for n in node.input if n and not self.has(n)]
        if missing:
            raise self.error(f"reads {missing[0]!r}, which no earlier node computes (the "
                             "model's nodes must be in topological order)")
        xs = [self.lookup(n) if n else None for n in node.input]
        problem = input_types_problem(self.onnx, node, opset,
                                      [None if x is None or isinstance(x, STRUCTURED) else x.dtype
                                       for x in xs])
        if problem:
            raise self.error(problem)
        attrs = self._attrs(node)
        try:
            try:
                outs = convert(self, xs, attrs)
            except RunTimeValue as need:
                outs = self._by_value(node, convert, xs, attrs, need)
        except (OnnxError, _NeedsValues, _NeedsShapes):
            raise
        except (ShapeError, GraphError) as e:   # (a shape rule's verdict on the model)
            raise self.error(str(e)) from e
        except Exception as e:   # (a case the checks and the rule missed: still named)
            raise self.error(f"the import failed: {type(e).__name__}: {e}") from e
        outs = outs if isinstance(outs, tuple) and not isinstance(outs, Sequence) else (outs,)
        for k, name in enumerate(node.output):
            if not name:
                continue
            if name in self.env:
                raise self.error(f"output {k} ({name!r}) is already defined by an earlier "
                                 "node, input or initializer (ONNX names are assigned once)")
            if k >= len(outs) or outs[k] is None:
                raise self.error(f"output {k} ({name!r}) is not supported by the import")
            self.env[name] = outs[k]
            if isinstance(outs[k], np.ndarray):   # (named so, should it become a constant)
                self._names.setdefault(id(outs[k]), name)

    def _attrs(self, node) -> dict:
        out = {}
        for a in node.attribute:
            if a.type == a.GRAPHS:
                raise self.error(f"attr {a.name!r} is a list of subgraphs, which no "
                                 "supported op type takes")
            # (a subgraph stays a GraphProto: its converter imports it with ``body``)
            out[a.name] = a.g if a.type == a.GRAPH else \
                self._plain(self.onnx.helper.get_attribute_value(a))
        return out

    def _plain(self, val):
        if isinstance(val, bytes):
            try:
                return val.decode()
            except UnicodeDecodeError:
                raise self.error(f"a string attr holds {val!r}, which is not UTF-8") from None
        if isinstance(val, self.onnx.TensorProto):
            return self.tensor(val, "a tensor attr")
        if isinstance(val, (list, tuple)):
            return tuple(self._plain(v) for v in val)
        return val

    def where(self) -> str:
        """``model.onnx: node 'fc1' (Gemm)``: the location of nodes and errors."""
        outer = self.label if self.parent is None else f"{self.parent.where()}: {self.scope}"
        if self.node is None:
            return outer
        name = f"'{self.node.name}'" if self.node.name else f"#{self.index}"
        return f"{outer}: node {name} ({self.node.op_type})"

    def error(self, message: str) -> OnnxError:
        return OnnxError(f"{self.where()}: {message}")

    # -- what converters call --
    def op(self, op, *inputs, **attrs):
        """``op(*inputs, **attrs)`` (an OpDef or a registry name): a new node, or, when no
        input is a run-time Value (and no attr holds a symbolic dim), the op's kernel run
        now on the known arrays. One output is returned as it is, several as a tuple.

        Ops with bodies and results over ``FOLD_LIMIT`` elements are never run now: loading
        a model neither loops nor allocates on the model's say-so (a Loop of 2**40 steps, an
        Expand to [2**20, 2**20] of a constant run when the model does)."""
        op = op if isinstance(op, OpDef) else get(op)
        if self.eager or (not any(isinstance(x, Value) for x in inputs) and not _has_sym(attrs)
                          and not op.bodies and self._small(op, inputs, attrs)):
            return self._fold(op, inputs, attrs)
        return self._node(op, inputs, attrs)

    def _node(self, op: OpDef, inputs, attrs):
        try:
            outs = self.graph.add_node(op, [self.value(x) for x in inputs], attrs,
                                       location=self.where())
        except (GraphError, ShapeError, TypeError, IndexError) as e:
            raise self.error(str(e)) from e
        return outs[0] if len(outs) == 1 else outs

    @staticmethod
    def _small(op: OpDef, inputs, attrs) -> bool:
        """Do ``op``'s results on these known inputs have at most FOLD_LIMIT elements? (Shape
        values with symbolic dims are small; a call the shape rule refuses is left to
        ``add_node``, which names the problem.)"""
        if any(isinstance(x, np.ndarray) and x.dtype == object for x in inputs):
            return True
        types = [ShapedType(x.shape, x.dtype) if isinstance(x, np.ndarray) else x
                 for x in inputs]
        try:
            return sum(numel(t.shape) for t in infer_types(op, types, attrs)) <= FOLD_LIMIT
        except Exception:   # (the node's add_node raises the error, named)
            return False

    def check_size(self, count, what: str) -> None:
        """A load-time array of ``count`` elements is at most FOLD_LIMIT of them."""
        if count > FOLD_LIMIT and not self.eager:
            raise self.error(f"the {what} would have {count} elements, more than the "
                             f"{FOLD_LIMIT} that dualgraph computes when loading a model")

    def _fold(self, op: OpDef, inputs, attrs):
        if any(isinstance(x, np.ndarray) and x.dtype == object for x in inputs):
            try:   # (else Sym arithmetic that has no Sym result, T - 1: run when it runs)
                if op.shape_fold is not None:
                    return tidy(op.shape_fold(*inputs, **attrs))
            except (TypeError, ShapeError):
                pass
            return self._node(op, inputs, attrs)
        try:
            out = op.kernel(*inputs, **attrs)
        except (ValueError, TypeError, IndexError) as e:
            raise self.error(f"{op.name} of known values failed: {e}") from e
        return tuple(out) if isinstance(out, (tuple, list)) else np.asarray(out)

    def value(self, x):
        """``x`` as a node input: Values and Python scalars as they are, a known array as a
        graph constant (one per array)."""
        if not isinstance(x, np.ndarray):
            return x
        hit = self._constants.get(id(x))
        if hit is None and x.dtype == object:   # (dims, some symbolic: sized as it runs)
            values = tuple(d if isinstance(d, Sym) else int(d) for d in x.reshape(-1).tolist())
            hit = self._constants[id(x)] = (x, self._node(
                get("dims_tensor"), (), dict(values=values, shape=x.shape,
                                             dtype=np.dtype(np.int64))))
        if hit is None:
            self._check_dtype(x)
            name = self._names.get(id(x), "const")
            hit = self._constants[id(x)] = (x, self.graph.add_constant(x, name=name))
        return hit[1]

    def _check_dtype(self, x: np.ndarray) -> None:
        try:
            dtypes.to_np(x.dtype)
        except TypeError:
            raise self.error(f"a tensor of dtype {x.dtype} is used at run time; dualgraph "
                             f"has no dtype for it (it has {_DTYPE_NAMES})") from None

    def static(self, x, what: str) -> np.ndarray:
        """The known array of an input that must be known at load time (a shape, axes)."""
        if isinstance(x, np.ndarray):
            return x
        raise RunTimeValue(self._root_inputs(x), what)

    def _by_value(self, node, convert, xs, attrs, need: RunTimeValue):
        """``node`` as one ``by_value`` node: its import rule run as the model runs, on the
        run-time values of the inputs that are Values (or dims with symbolic sizes)."""
        types = need.types or self._result_types(node, hint(node, xs, attrs))
        if not self.run_time or types is None or any(
                a.type in (a.GRAPH, a.GRAPHS) for a in node.attribute) or any(
                isinstance(x, STRUCTURED) for x in xs):
            if need.names:
                raise _NeedsValues(need.names, f"{self.where()}: its {need.what}")
            raise self.error(f"the {need.what} must be known when the model is loaded (an "
                             "initializer, a Constant or arithmetic on shapes); here it is "
                             "computed at run time, and the node has no run-time form (see "
                             "dualgraph.export.onnx_runtime)")
        slots = [k for k, x in enumerate(xs) if isinstance(x, Value) or
                 isinstance(x, np.ndarray) and x.dtype == object]
        eager = _Importer(self.onnx, self.model, self.label, eager=True)
        eager.node, eager.index = node, self.index
        keep = [k for k, name in enumerate(node.output) if name]
        fn = RunTimeNode(convert, eager, [None if k in slots else x for k, x in enumerate(xs)],
                         slots, attrs, keep)
        made = {n for shape, _ in types for d in shape if isinstance(d, Sym)
                for n in d.names} - self._bound_names()
        outs = self._node(get("by_value"), [xs[k] for k in slots],
                          dict(fn=fn, shapes=by_value_shapes(types, made),
                               dtypes=tuple(dtype for _, dtype in types)))
        self.run_time_nodes.append(self.where())
        outs = outs if isinstance(outs, tuple) else (outs,)
        result = [None] * len(node.output)
        for k, v in zip(keep, outs):
            result[k] = v
        return tuple(result)

    def _bound_names(self) -> set:
        """The names of the symbolic dims known before the next node runs: the inputs'
        and those the graph's nodes made so far."""
        return {n for v in self.graph.inputs for d in v.shape if isinstance(d, Sym)
                for n in d.names} | {n for node in self.graph.nodes for v in node.outputs
                                     for d in v.shape if isinstance(d, Sym) for n in d.names}

    def _result_types(self, node, shapes):
        """The (shape, dtype) of ``node``'s named outputs, as ONNX's shape inference gives
        them (None where it gives no rank)."""
        if self._types is None:
            self._types = inferred_types(self.onnx, self.model)
        inputs = {n for v in self.graph.inputs for d in v.shape if isinstance(d, Sym)
                  for n in d.names}

        def dim_of(param):
            sym = _as_sym(param) if param else None
            if sym is not None and sym.names[0] in inputs:
                return sym
            if param and param in self._dims:
                return self._dims[param]
            fresh = self._fresh_dim()
            if param:
                self._dims[param] = fresh
            return fresh
        return result_types(node, self._types,
                            lambda t: self.onnx_dtype(t, "a run-time result"), dim_of, shapes)

    def _fresh_dim(self) -> Sym:
        """A new symbolic dim, ``R1``, ``R2``, ...: a size that a node's values set."""
        taken = self._bound_names()
        while True:
            self._made += 1
            if f"R{self._made}" not in taken:
                return Sym(f"R{self._made}")

    def _root_inputs(self, x: Value):
        """The names of the top-level graph inputs that ``x`` is computed from, or None when
        it depends on anything else (a loop's carried value)."""
        names, seen, todo = set(), set(), [(self, x)]
        while todo:
            imp, v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            if v.producer is not None:
                if v.producer.op.bodies:
                    return None
                todo += [(imp, u) for u in v.producer.inputs if isinstance(u, Value)]
            elif v in imp.graph.constants:
                continue
            elif imp.parent is None:
                names.add(v.name)
            else:   # (an outer Value that the subgraph lifted, or one of its own inputs)
                outer = [o for o, inner in imp._lifted.items() if inner is v]
                if not outer:
                    return None
                todo.append((imp.parent, outer[0]))
        return names or None

    def ints(self, x, what: str, shape: bool = False) -> list:
        """A known 0-d or 1-d input as a list of ints; a ``shape`` may hold Syms too."""
        x = self.static(x, what)
        if x.dtype.kind not in "iuO" or x.ndim > 1:
            raise self.error(f"the {what} must be a 0-d or 1-d tensor of integers, got "
                             f"{x.dtype} of shape {list(x.shape)}")
        vals = x.reshape(-1).tolist()
        if not shape and any(isinstance(v, Sym) for v in vals):
            raise RunTimeValue(None, what)   # (numbers as the model runs)
        return [v if isinstance(v, Sym) else int(v) for v in vals]

    def attr_or_input(self, attrs, name: str, xs, k: int, since: int):
        """An argument that is attr ``name`` before opset ``since`` and input ``k`` from it
        on (Reduce*'s axes, Split's split, Squeeze's axes): a list of ints, or None."""
        if self.opset < since:
            val = attrs.get(name)
            return None if val is None else [int(v) for v in np.reshape(val, -1)]
        x = xs[k] if len(xs) > k else None
        return None if x is None else self.ints(x, name)

    def dim(self, axis: int, ndim: int) -> int:
        """ONNX's ``axis`` (negative from the end) as a dim of a tensor with ``ndim`` dims."""
        if not -ndim <= axis < max(ndim, 1):
            raise self.error(f"axis {axis} is out of range for a tensor with {ndim} dims")
        return axis % max(ndim, 1)

    def need_rank(self, x, low: int, what: str, high: int | None = None) -> None:
        """``x`` (the node's ``what``) has ``low`` to ``high`` dims (at least ``low``)."""
        if x.ndim < low or high is not None and x.ndim > high:
            want = f"at least {low}" if high is None else str(low) if low == high else \
                f"{low} to {high}"
            raise self.error(f"the {what} has shape {tuple(x.shape)}; it needs {want} dims")

    def dims(self, axes, ndim: int) -> tuple:
        return tuple(sorted({self.dim(a, ndim) for a in axes}))

    def reduce_dims(self, xs, attrs, since: int = 18):
        """A Reduce* node's (dims, keepdim); its ``axes`` are an attr before opset ``since``
        and input 1 from it on. dims is None where the node is the identity (no axes and
        ``noop_with_empty_axes``)."""
        x = xs[0]
        keep = bool(attrs.get("keepdims", 1))
        axes = self.attr_or_input(attrs, "axes", xs, 1, since)
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return None, keep
            axes = range(x.ndim)
        return self.dims(axes, x.ndim), keep

    def cast(self, x, dtype):
        """``x`` as ``dtype`` (itself when it has it)."""
        return x if x.dtype == dtype else self.op("cast", x, dtype=np.dtype(dtype))

    def reshape(self, x, shape):
        try:
            shape = infer_reshape(tuple(x.shape), tuple(shape))
        except ShapeError as e:
            raise self.error(str(e)) from None
        return x if shape == tuple(x.shape) else self.op("reshape", x, shape=shape)

    def slice_dims(self, x, index):
        return x if all(s is None for s in index) else self.op("slice", x, index=tuple(index))


def _type_name(onnx, elem_type: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"number {elem_type}"


def _default_opset(model) -> int:
    for imp in model.opset_import:
        if imp.domain in _DEFAULT_DOMAINS:
            return int(imp.version)
    return 1


def _as_sym(text: str) -> Sym:
    """The symbolic dim of ONNX's ``dim_param`` ``text``, its name a Python identifier."""
    text = "".join(c if c.isalnum() or c == "_" else "_" for c in text)
    return Sym(text if text[:1].isalpha() or text[:1] == "_" else "d" + text)


def _has_sym(val) -> bool:
    if isinstance(val, Sym):
        return True
    if isinstance(val, (tuple, list)):
        return any(_has_sym(v) for v in val)
    if isinstance(val, dict):
        return any(_has_sym(v) for v in val.values())
    return False
