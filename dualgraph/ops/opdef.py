"""The op registry: every operator is one :class:`OpDef`, defined once, read by everything.

Eager dispatch runs ``kernel``; tracing runs ``infer`` to type the new node; autograd runs
``vjp``; fusion reads ``elementwise``; ONNX export and import read ``onnx`` and
``onnx_import``; the generated op tests read the registry itself, so a new op is tested (or
the suite fails) without touching the tests.

Calling conventions, shared by kernel, infer and vjp so that each reads like the others:

- ``kernel(*inputs, **attrs)``: inputs are NumPy arrays or Python scalars; returns an array
  (or a tuple of arrays when ``num_outputs != 1``) of exactly the dtype ``infer`` promises.
- ``infer(*inputs, **attrs)``: the same call with *avals* (anything with ``.shape``,
  ``.dtype`` and ``.ndim``: arrays, graph Values, ShapedTypes) -> ``ShapedType`` or a tuple.
  It raises :class:`~dualgraph.shapes.ShapeError` naming the shapes on bad input.
- ``vjp(g, out, *inputs, **attrs)``: written with dualgraph ops on Tensors, so the same rule
  serves eager backward, traced backward and higher-order gradients. ``g`` and ``out`` are
  the output gradient and output (tuples for multi-output ops); returns one gradient or
  ``None`` per input.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable

REGISTRY: dict[str, "OpDef"] = {}


class Reduction(enum.Enum):
    """How a reduction op combines the elements of the dims it reduces (``OpDef.reduction``):
    a generated loop accumulates with the combination it has code for."""
    SUM = "sum"
    MEAN = "mean"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    ALL = "all"
    ANY = "any"


@dataclass(frozen=True)
class RowEpilogue:
    """How a fused group applies an op to each row of the group's result right after the
    loop computes the row, while it is in cache (``OpDef.row_epilogue``; LayerNorm's).

    The op's input 0 is the row source; its other inputs are parameters of the row's width.
    ``applies(*inputs, **attrs)`` says whether a call is such a row op (LayerNorm over the
    last dim only). The generated loop calls the Numba function ``function`` of
    ``module`` as ``stats = function(row, *params, *attrs, out_row)``: ``attrs`` names the
    attrs it passes (as float32), ``stats`` the per-row results it returns, which are the
    op's outputs after the first (shape ``[..., 1]``); output 0 is the normalised row.
    """
    module: str
    function: str
    attrs: tuple = ()
    stats: tuple = ()
    applies: Callable = lambda *inputs, **attrs: True


@dataclass(eq=False, repr=False)
class OpDef:
    name: str
    kernel: Callable
    infer: Callable
    vjp: Callable | None = None
    attrs: tuple = ()
    num_outputs: int | None = 1     # None: as many as infer returns (fused)
    elementwise: str | None = None   # scalar expression over {0}, {1}, ... for fusion
    saves: str = "i"                 # what the VJP reads: inputs "i", outputs "o", both, none;
    #                                  digits: only those inputs ("0": where's condition).
    #                                  Without "o" a one-output op's VJP gets None for its
    #                                  output (the node keeps none: dispatch._record)
    differentiable_outputs: tuple | None = None  # indices; None means all floating outputs
    saved_outputs: tuple | None = None   # with "o" in saves: the outputs the VJP reads
    #                                  (None: all); an in-place change of another output
    #                                  (relu_ of a max-pool's values) is then no error
    read_by: dict | None = None      # saved input i (or "o", the outputs) -> the input
    #                                  whose gradient alone reads it: saved only when that
    #                                  one requires grad (x in x * 0.5 is not, as in torch,
    #                                  so an in-place write to x before backward is no error)
    view: bool = False               # the output may share memory with input 0
    grad_block: Callable | None = None   # for a view op whose VJP writes its output's
    #                                  gradient into a block of zeros shaped like input 0
    #                                  (slice, select): ``grad_block(**attrs)``, the NumPy
    #                                  key of that block. The eager engine writes the
    #                                  gradients of several such views of one tensor (a
    #                                  split's parts) into one array, not one zero-filled
    #                                  array each and their sum
    view_layout: Callable | None = None  # for a view op whose kernel may copy (reshape):
    #                                  the op without copying, raising ValueError where it
    #                                  would have to (ops/views.py replays layouts with it)
    writes_out: bool = False         # the kernel takes out=(array or None per output) and
                                     # writes there, elementwise (an out may be an input)
    fills_out: bool = False          # the kernel, and any kernel ``specialise`` returns,
    #                                  takes ``out=``: None or an array (one output), or a
    #                                  tuple of an array or None per output; each array
    #                                  C-contiguous, of its output's type, overlapping no
    #                                  input, which it may fill with the result and return
    #                                  (or it returns a new array). Its results are never
    #                                  views of its inputs, so codegen/buffers.py may give
    #                                  them planned buffers (a step's MB-sized products)
    doc: str = ""

    # -- facts passes and codegen read (they match these, never an op's name) --------------
    commutative: bool = False        # a binary op whose result ignores its inputs' order
    #                                  (dtype promotion is symmetric too): cse and simplify
    #                                  treat op(a, b) and op(b, a) as one expression
    reduction: Reduction | None = None   # a reduction over ``dims`` of its one array input:
    #                                  how it combines (fusion appends it to a group)
    shape_only: bool = False         # the result depends only on the input's type (shape,
    #                                  dtype), never its values: it folds without constants
    bodies: bool = False             # the kernel runs subgraph attrs and takes ``run=``
    #                                  (how to run them; the reference interpreter by default)
    scalar32: str | None = None      # the kernels/fastmath function the eager float32 kernel
    #                                  applies per element: a fused float32 loop calls it for
    #                                  the template's function, so compiled == eager to the bit
    row_epilogue: RowEpilogue | None = None   # a fused group may end with this op, applied
    #                                  to each row as it is computed (see RowEpilogue)
    communicates: bool = False       # talks to other processes (a collective, send, recv):
    #                                  passes never fold, merge or drop it, and keep such
    #                                  nodes in their order, which every rank must share
    checks_values: bool = False      # the kernel raises on some values of its integer
    #                                  inputs (an index out of range): dce keeps a node of
    #                                  it whose result nobody reads unless those inputs are
    #                                  constants known in range, so compiled raises where
    #                                  eager does
    autocast: str | None = None      # what autocast does with the op's float inputs
    #                                  (PyTorch's per-op policy, dualgraph/amp): "lower"
    #                                  casts them to the low dtype (products, whose speed
    #                                  and memory it buys), "float32" to float32 (sums,
    #                                  exponentials, norms, losses: accuracy); None runs the
    #                                  op on its inputs as they are, promoted to the widest

    # -- lowering: compiler-only ops and the rewrite rules that make them ------------------
    # A compiler-only op (a fused or ``*_backward`` op that exists for speed: autodiff or a
    # lowering pass makes it in place of ordinary ops) is flagged and must name the ordinary
    # ops it stands for: ``decomposition(*inputs, **attrs)``, written with dualgraph ops on
    # Tensors and never with another compiler-only op, returns what ``kernel`` returns (a
    # Tensor, or a tuple for several outputs). The op tests run both on every row of the op
    # and compare them. An ordinary op promoted to a primitive for speed may name one too.
    compiler_only: bool = False
    decomposition: Callable | None = None
    # Codegen calls ``specialise(*inputs, **attrs)`` with the node's typed Values (and
    # literals): ``(name, kernel)`` binds ``kernel(*inputs)``, fitted to those static types
    # and attrs (no checks per call), in place of ``kernel``; None keeps ``kernel``.
    specialise: Callable | None = None
    # A group op names the op it runs many nodes of in one call (``group_updates``).
    group_of: "OpDef | None" = None

    # -- ONNX: export and import ------------------------------------------------------------
    # How the exporter writes a node of this op; it reads nothing else. An ONNX op type
    # (``"Exp"``) for an op without attrs whose one output and inputs map one to one (the
    # node computed in its dtype); else an export function ``fn(e, node) -> [ONNX output name
    # per output, None where ONNX can't give it]``, defined next to the op, that builds ONNX
    # nodes through the emitter ``e`` (export/onnx_ops.py). None: the op has no ONNX form.
    onnx: Any = None
    # The ONNX op types this op is the natural target of, for the import: {op type: None}
    # where the ONNX node's inputs are this op's inputs and it has no attributes, else
    # {op type: fn(b, xs, attrs) -> output or tuple of outputs} building nodes through the
    # importer ``b`` (export/onnx_import.py). None: ``{onnx: None}`` when ``onnx`` is an op
    # type, else nothing; ``{}`` where that op type decomposes into several ops (its
    # converter is then in export/onnx_import_ops.py, keyed by the ONNX op type).
    onnx_import: dict | None = None
    # The kernel on shape values that hold symbolic dims (NumPy object arrays of ints and
    # Syms), which the import computes when loading (``Shape -> Gather -> Concat ->
    # Reshape`` of a dynamic batch); None where such a value can't be an input.
    shape_fold: Callable | None = None

    # (not a field) what the engine calls when it frees a node of this op: a Checkpoint's
    # ``release`` drops its saved inputs; an OpDef saves none of its own. A class attribute,
    # so that the engine's lookup is not a failed one (which raises inside getattr).
    release = None

    def __reduce__(self):
        """Ops are singletons, as dtypes: copied and pickled by name (a view's tensor
        records the op that made it, ops/views.py; deepcopy and multiprocessing copy it)."""
        return get, (self.name,)

    def __post_init__(self):
        if self.autocast not in (None, "lower", "float32"):
            raise ValueError(f"op {self.name}: autocast must be None, 'lower' or 'float32', "
                             f"got {self.autocast!r}")
        some = tuple(int(c) for c in self.saves if c.isdigit())
        self.saves_inputs = "i" in self.saves or bool(some)
        self.saves_outputs = "o" in self.saves
        self.saved_inputs = some or None   # (None: all of them, when saves_inputs)

    def __repr__(self):
        return f"<op {self.name}>"


def register(op: OpDef) -> OpDef:
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name!r} is registered twice; an op is defined in one place")
    REGISTRY[op.name] = op
    return op


def defop(name: str, kernel: Callable, infer: Callable, vjp: Callable | None = None,
          **options) -> OpDef:
    """Define and register an op; see the module docstring for the calling conventions."""
    return register(OpDef(name, kernel, infer, vjp, **options))


def get(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no op named {name!r} in the registry") from None
