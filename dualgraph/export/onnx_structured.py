"""ONNX import of a model whose inputs are sequences or optionals.

dualgraph's graphs take tensors, and the import knows each sequence's length and each
optional's presence when it loads a model: that is what turns SequenceAt, SequenceInsert,
OptionalHasElement, ... into the tensor ops they pick (``onnx_import_ops.Sequence``). So
such a model is imported per call *structure*: each sequence input's length and its
tensors' shapes, each optional input's presence, and the shapes of its tensor inputs (a
dim that a sequence's type names ``N`` may differ between its tensors, so no symbolic dim
is kept). For a structure the model is rewritten into one whose inputs are tensors of those
shapes: a sequence input ``s`` given 2 tensors becomes the tensor
inputs ``s.0`` and ``s.1`` and a first node ``s = SequenceConstruct(s.0, s.1)``, an empty
sequence ``SequenceEmpty()``, an optional ``o`` holding a value ``o = Optional(o.value)``,
an empty one ``o = Optional()``. That model is loaded as any other, and cached per
structure, as ``dg.jit.compile`` specialises a function on a list's length.

>>> f = dg.onnx.load("concat_sequence.onnx")          # doctest: +SKIP
>>> f([np.ones(2, np.float32), np.ones(3, np.float32)]).shape   # doctest: +SKIP
Size([5])
"""
from __future__ import annotations

from .errors import OnnxError
from .onnx_import import OnnxFunction, _as_array, load_model


class Structured(OnnxFunction):
    """A model with sequence or optional inputs: a sequence is given as a list of arrays or
    tensors, an optional as its value or None. ``graph`` is the last one run."""

    def __init__(self, onnx, model, label: str):
        self.onnx, self.model, self.label = onnx, model, label
        inits = {i.name for i in model.graph.initializer}
        self.inputs = [i for i in model.graph.input if i.name not in inits]
        self.input_names = [i.name for i in self.inputs]
        self.output_names = [o.name for o in model.graph.output]
        self.cache: dict = {}
        self.graph = self.executable = None
        self._taken: set = set()

    def __call__(self, *inputs):
        self._check_count(inputs)
        key = tuple(self._structure(i.name, i.type, x) for i, x in zip(self.inputs, inputs))
        if key not in self.cache:
            self.cache[key] = load_model(self._rewrite(inputs))
        run = self.cache[key]
        flat = [a for i, x in zip(self.inputs, inputs) for a in _flat(i.type, x)]
        try:
            return run(*flat)
        finally:
            self.graph, self.executable = run.graph, run.executable

    def __repr__(self):
        return (f"<OnnxFunction {self.label}: ({', '.join(self.input_names)}) -> "
                f"({', '.join(self.output_names)}), imported per length of its sequences and "
                f"presence of its optionals; {len(self.cache)} imported>")

    def _structure(self, name: str, type_proto, x):
        """What of input ``x`` the graph depends on: a tensor's shape, the shapes of a
        sequence's tensors, whether an optional holds a value (and its structure)."""
        if type_proto.HasField("sequence_type"):
            if not isinstance(x, (list, tuple)):
                raise TypeError(f"{self.label}: input {name!r} is a sequence: give a list of "
                                f"arrays or tensors, not {type(x).__name__}")
            return tuple(_as_array(t, None).shape for t in x)
        if type_proto.HasField("optional_type"):
            return None if x is None else \
                ("value", self._structure(name, type_proto.optional_type.elem_type, x))
        return _as_array(x, None).shape

    def _rewrite(self, inputs):
        """The model for the structure of ``inputs``, whose inputs are all tensors."""
        model = self.onnx.ModelProto()
        model.CopyFrom(self.model)
        g = model.graph
        g.name = self.label[:-5] if self.label.endswith(".onnx") else self.label
        self._taken = _names(g)
        for k, node in enumerate(g.node):   # (named by their index in the model, which
            node.name = node.name or f"#{k}"   # errors name, before the nodes added here)
        given = dict(zip(self.input_names, inputs))
        prelude, ins = [], []
        for info in g.input:
            if info.name in given:
                self._expand(info.name, info.type, given[info.name], prelude, ins)
            else:
                ins.append(info)
        nodes = prelude + list(g.node)
        del g.input[:], g.node[:]
        g.input.extend(ins)
        g.node.extend(nodes)
        return model

    def _expand(self, name: str, type_proto, x, prelude: list, ins: list) -> None:
        """Tensor inputs (``ins``) and first nodes (``prelude``) that make ``name``, of ONNX
        type ``type_proto``, the value ``x``."""
        make_node = self.onnx.helper.make_node
        if type_proto.HasField("tensor_type"):
            ins.append(self._tensor_input(name, type_proto.tensor_type, x))
        elif type_proto.HasField("sequence_type") and \
                type_proto.sequence_type.elem_type.HasField("tensor_type"):
            t = type_proto.sequence_type.elem_type.tensor_type
            parts = [self._fresh(f"{name}.{k}") for k in range(len(x))]
            ins += [self._tensor_input(p, t, e) for p, e in zip(parts, x)]
            prelude.append(make_node("SequenceConstruct", parts, [name]) if parts else
                           make_node("SequenceEmpty", [], [name],
                                     dtype=t.elem_type or self.onnx.TensorProto.FLOAT))
        elif type_proto.HasField("optional_type"):
            elem = type_proto.optional_type.elem_type
            if x is None:
                prelude.append(make_node("Optional", [], [name], type=elem))
                return
            value = self._fresh(f"{name}.value")
            self._expand(value, elem, x, prelude, ins)
            prelude.append(make_node("Optional", [value], [name]))
        else:
            raise OnnxError(f"{self.label}: input {name!r} is of ONNX type kind "
                            f"{type_proto.WhichOneof('value')}; dualgraph's ONNX import reads "
                            "tensors, sequences of tensors and optionals of those")

    def _tensor_input(self, name: str, t, x):
        """The input ``name``: tensor type ``t`` as declared, with the dims of the array
        ``x`` where ``t`` gives no number (a sequence's tensors may differ in a dim that its
        type names ``N``), and its dtype where ``t`` gives none."""
        helper = self.onnx.helper
        array = _as_array(x, None)
        dims = list(array.shape)
        if t.HasField("shape"):
            if len(t.shape.dim) != array.ndim:
                raise OnnxError(f"{self.label}: input {name!r} has {len(t.shape.dim)} dims, "
                                f"got an array of shape {dims}")
            dims = [d.dim_value if d.HasField("dim_value") else n
                    for d, n in zip(t.shape.dim, dims)]
        try:
            elem = t.elem_type or helper.np_dtype_to_tensor_dtype(array.dtype)
        except (KeyError, TypeError, ValueError):
            raise OnnxError(f"{self.label}: input {name!r} is given an array of dtype "
                            f"{array.dtype}, which ONNX has no type for") from None
        return helper.make_tensor_value_info(name, elem, dims)

    def _fresh(self, name: str) -> str:
        while name in self._taken:
            name += "_"
        self._taken.add(name)
        return name


def _flat(type_proto, x) -> list:
    """The tensors of input ``x`` (of ONNX type ``type_proto``), in the order ``_expand``
    makes them inputs."""
    if type_proto.HasField("sequence_type"):
        return list(x)
    if type_proto.HasField("optional_type"):
        return [] if x is None else _flat(type_proto.optional_type.elem_type, x)
    return [x]


def _names(graph) -> set:
    """Every value name in ``graph`` and its subgraphs."""
    names = {v.name for part in (graph.input, graph.output, graph.initializer) for v in part}
    for node in graph.node:
        names.update(node.input, node.output)
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else list(a.graphs)):
                names |= _names(g)
    return names

