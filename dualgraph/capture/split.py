"""Graph breaks that split a compiled function instead of sending it to eager.

A *graph break* is a line that needs a traced tensor's value in Python: ``print(x)``,
``loss.item()`` or ``bool(t)`` in a branch, ``x.numpy()`` handed to another library. Once a
function has one, :class:`Splitter` runs it at every call under a :class:`SplitTracer`:

* the Python runs as written, once, every call (its prints, branches and counters are
  eager's), while the tensor ops are recorded into one graph, as a normal trace does;
* at a break, the ops recorded since the previous break form a *piece*: it is compiled
  (cached by its structure: ops, attrs, constants, input types), run on the real inputs,
  and the value the line needs is handed to Python, which goes on recording;
* when the function returns, what the pieces did not compute (the rest of the forward, a
  traced ``loss.backward()``, the optimiser's update) is the *last piece*: one graph that
  reads the values the pieces computed as inputs, with the writebacks of the whole call
  (parameters, gradients, optimiser state, state made by the call), and the backward half
  of the whole call when its outputs are differentiated outside (``autodiff.py``). A break
  in the forward of a training step so keeps forward, backward and update in compiled code.

The values a piece outputs are the ones later code read from it at the previous call
(a new piece's first run keeps all its values, unoptimised, and so does that call's last
piece); a value later code needs and no piece kept is computed again. Random ops read the
generator's seed state as in any graph, so a split step draws the numbers the unsplit
compiled step draws. Tensors made after a break (``dg.tensor(numpy_result)``) are inputs
of the pieces, not constants, so that their values do not make a new piece at every call.

A call whose pieces have settled is a tape the next call replays (capture/replay.py): its
ops are compared with the tape's instead of building a graph, and a call that matched all
of it runs the tape's compiled last piece. What remains at every call is the Python (the
user's and dualgraph's, as eager runs it, without the kernels), so after ``COMPARE_AFTER``
calls a split function runs eagerly every other
call, ``SAMPLES`` times each, and keeps the faster. It also runs eagerly from then on when
its pieces keep changing (more than ``MAX_PIECES`` pieces, or ``RETRACE_LIMIT`` last
pieces: a Python number from a break used in tensor math is baked into the next piece).
A trace that meets something else it can't capture raises CaptureError as before: then the
function runs eagerly from that call on (``Compiled._graph_break``).
"""
from __future__ import annotations

import copy
import operator
import sys
import time
import warnings
from types import SimpleNamespace

import numpy as np

from .._helpers import _is_internal, format_site, user_site
from .._pytree import flatten
from ..autograd.tape import grad_mode
from ..codegen import Executable
from ..dispatch import outside_trace
from ..errors import CONCRETE_FIX, CaptureError
from ..graph import Graph
from ..graph.ir import Value
from ..passes import run_pipeline
from ..tensor import Tensor
from .autodiff import differentiable
from .guards import optimizer_facts
from .records import RETRACE_LIMIT, Record, _name
from .replay import MADE, Tape
from .reuse import capture_key, graph_key, io_key
from .scope import readable_names
from .subgraph import copy_nodes
from .trace import Binding, Tracer

tensor_module = sys.modules[Tensor.__module__]
MAX_PIECES = 32     # pieces compiled per function before it runs eagerly
COMPARE_AFTER = 8   # split calls (compiling the pieces) before split is timed against eager
SAMPLES = 3         # calls of each, alternating: the faster is kept
LATE_OUTPUTS = 2    # recompiles of a piece to output more values; then it outputs them all

BREAK_FIX = ("The function is split there: the code before and after it is compiled and "
             "this line runs eagerly in between. To keep one graph, use dg.cond / dg.where "
             "for tensor-dependent choices or move the line out of the compiled function.")


class Piece:
    """One compiled piece: the code between two breaks (``graph``: its inputs are the values
    it reads; no outputs)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.wanted: set[int] = set()       # positions among its values later code reads
        self.outputs: list[int] | None = None   # those the executable returns
        self.executable = None
        self.recompiles = 0

    def run(self, arrays: list, passes, fast_math) -> list:
        """``[(position, array)]`` for the values it keeps."""
        produced = [v for node in self.graph.nodes for v in node.outputs]
        if self.outputs is None:   # (first call: every value, unoptimised)
            g = copy_nodes(self.graph, self.graph.inputs, self.graph.nodes, produced)
            kept, outs = range(len(produced)), run_once(g, arrays)
        else:
            with outside_trace():   # (the passes fold constants by running kernels too)
                if self.executable is None:
                    g = copy_nodes(self.graph, self.graph.inputs, self.graph.nodes,
                                   [produced[i] for i in self.outputs])
                    g, _ = run_pipeline(g, passes)
                    self.executable = Executable(g, fast_math=fast_math, body_passes=passes)
                kept, outs = self.outputs, self.executable.run(arrays)
        # (an output that is an input's array, or a view of one, is copied: the last piece
        # may update that input in place, a parameter, before it reads the output)
        ids = {id(x) for x in arrays}
        return [(i, a.copy() if id(a) in ids or (a.base is not None and any(
            np.may_share_memory(a, x) for x in arrays)) else a) for i, a in zip(kept, outs)]

    def keep(self, wanted: set) -> bool:
        """Output ``wanted`` (positions) from the next call on; whether that is a change."""
        if self.outputs is None:
            self.wanted |= wanted
            self.outputs = sorted(self.wanted)
            return True
        if not wanted <= set(self.outputs):
            self.wanted |= wanted
            self.recompiles += 1
            everything = range(sum(len(n.outputs) for n in self.graph.nodes))
            self.outputs = sorted(self.wanted if self.recompiles <= LATE_OUTPUTS
                                  else everything)
            self.executable = None
            return True
        return False


class SplitTracer(Tracer):
    """A trace that computes the value a graph break needs and goes on (see the module
    docstring): ``env`` holds the arrays of the graph's inputs and of the values the
    pieces run so far computed; nodes before ``cut`` ran in a piece. With a ``tape`` (the
    previous call's record) it replays that call while the Python does the same
    (capture/replay.py): ``graph`` is then the tape's and ``pos`` the nodes matched."""

    def __init__(self, names=None, compiled=None, tape=None):
        super().__init__(names)
        self.compiled = compiled   # (None in a control-flow body's tracer: ops/control.py)
        self.env: dict[Value, np.ndarray] = {}
        self.cut = 0
        # (piece, first node, end node, position of the break's value, the values it
        # reads, the values it makes) of this call's pieces
        self.ran: list = []
        self.broke = False
        self.new_pieces = False   # whether a piece ran for the first time (kept every value)
        self._hook = None
        self.tape, self.pos = tape, 0
        if tape is not None:
            self.graph = tape.graph
        self.replayed = None      # the tape, when the call matched all of it
        self.input_facts: list = []   # per input: (kind, index, made after a break, shape,
        self.made: list = []          # dtype); the constants made before the first break
        self.fn_nodes = 0             # the nodes when the function returned

    def __enter__(self):
        self._hook = tensor_module.concretize_hook
        tensor_module.concretize_hook = self.concretize
        return super().__enter__()

    def __exit__(self, *exc):
        tensor_module.concretize_hook = self._hook
        return super().__exit__(*exc)

    def bind(self, t, kind, name=None, shape=None, index=-1):
        array = t._data
        binding = super().bind(t, kind, name, shape, index)
        self.env[binding.value] = array
        return binding

    def grad_value(self, leaf):
        known = id(leaf) in self._grad_bound
        value = super().grad_value(leaf)
        if not known:
            self.env[value] = leaf.grad._data
        return value

    def constant(self, array):
        if self.broke:   # (maybe from a value Python computed, different every call)
            return self.bind(Tensor._make(np.asarray(array)), "captured", MADE).value
        value = None
        if self.tape is not None:
            value = self.tape.constant(len(self.made), np.asarray(array))
            if value is None:
                self.diverge()
        if value is None:
            value = super().constant(array)
        self.made.append(value)
        return value

    def new_input(self, t, kind, name, shape, dtype, index=-1):
        facts = (kind, index, name == MADE, tuple(shape), dtype)
        self.input_facts.append(facts)
        if self.tape is not None:
            value = self.tape.input(len(self.bindings), t, facts)
            if value is not None:
                return value
            self.diverge()
        return super().new_input(t, kind, name, shape, dtype, index)

    def add(self, op, inputs, attrs):
        if self.tape is not None:
            node = self.tape.node(self.pos, op, inputs, attrs)
            if node is not None:
                self.pos += 1
                return node.outputs[0] if op.num_outputs == 1 else node.outputs
            self.diverge()
        return super().add(op, inputs, attrs)

    def diverge(self) -> None:
        """End the replay: the graph matched so far becomes this call's own (sharing the
        tape's Values), and the call goes on tracing into it."""
        tape, self.tape = self.tape, None
        graph = Graph()
        for b in self.bindings:
            graph.share_input(b.value)
        for value in self.made:
            if not graph.share_constant(value, tape.graph.constants[value]):
                raise AssertionError(f"replay: constant {value!r} can't be shared")
        if graph.share_nodes(tape.nodes[:self.pos]) != self.pos:
            raise AssertionError("replay: the nodes matched can't be shared")
        self.graph = graph

    def finish(self, result, created=()):
        tape = self.tape
        if tape is not None and not tape.done(self):
            self.diverge()
            tape = None
        self.fn_nodes = self.pos if tape is not None else len(self.graph.nodes)
        if tape is None:
            return super().finish(result, created)
        outputs = self.graph.outputs
        capture = super().finish(result, created)
        new = self.graph.outputs
        if (len(new) != len(outputs) or not all(map(operator.is_, new, outputs))
                or (grad_mode.enabled and all(differentiable(capture, self.result_leaves)))):
            # (other outputs, or a backward half to build: a graph of its own after all)
            self.graph.outputs = outputs
            self.diverge()
            self.graph.set_outputs(new)
            capture.graph = self.graph
        else:
            self.replayed = tape
        return capture

    def concretize(self, t: Tensor, what: str) -> np.ndarray:
        """The value of traced tensor ``t`` that a break (``what``: "item()", ...) needs,
        read-only (writing to it would not change the tensor, as eager's would)."""
        location = format_site(user_site())
        if type(t._data) is Value and t._data not in self.graph:   # (a dg.cond body's)
            raise CaptureError(f"{what} on a traced tensor", location, CONCRETE_FIX)
        if self.compiled._split is None:   # (the first break: split from this call on)
            self.compiled._split = Splitter(self.compiled)
        self.splitter = self.compiled._split
        value = self.value_of(t)
        if value not in self.env and value not in self.graph.constants:
            end = self.pos if self.tape is not None else len(self.graph.nodes)
            if not any(value in n.outputs for n in self.graph.nodes[self.cut:end]):
                self._recompute([value])
            elif not self._replay_piece(value):
                self._run_piece(value, location)
        self.splitter.note_break(location, f"{what} on a traced tensor")
        self.broke = True
        array = self.env.get(value)
        if array is None:
            array = self.graph.constants[value]
        array = array.view()
        array.flags.writeable = False
        return array

    def _replay_piece(self, value: Value) -> bool:
        """Run the tape's next piece when it ends here with ``value``; whether it ran (a
        replay that meets another break ends: ``diverge``)."""
        tape = self.tape
        if tape is None:
            return False
        k = len(self.ran)
        if k < len(tape.ran):
            piece, start, end, broke, reads, produced = tape.ran[k]
            if start == self.cut and end == self.pos and produced[broke] is value:
                self._run(piece, end, broke, reads, produced)
                return True
        self.diverge()
        return False

    def _run_piece(self, value: Value, location: str) -> None:
        nodes = self.graph.nodes[self.cut:]
        produced = [v for node in nodes for v in node.outputs]
        reads = _reads(nodes, set(produced), self.graph.constants)
        constants = self.graph.constants
        used = {x: constants[x] for n in nodes for x in n.inputs
                if isinstance(x, Value) and x in constants}
        key = (graph_key(SimpleNamespace(inputs=reads, constants=used, nodes=nodes,
                                         outputs=())), produced.index(value))
        piece = self.splitter.piece(key, lambda: copy_nodes(self.graph, reads, nodes, []),
                                    location)
        self._run(piece, len(self.graph.nodes), produced.index(value), reads, produced)

    def _run(self, piece: Piece, end: int, broke: int, reads: list, produced: list) -> None:
        """Run ``piece`` (the nodes from ``cut`` to ``end``) on the values known."""
        self._recompute([r for r in reads if r not in self.env])
        self.new_pieces |= piece.outputs is None
        for i, array in piece.run([self.env[r] for r in reads], self.splitter.passes,
                                  self.splitter.fast_math):
            self.env[produced[i]] = array
        self.ran.append((piece, self.cut, end, broke, reads, produced))
        self.cut = end

    def _recompute(self, values: list) -> None:
        """Compute ``values`` (of nodes that ran in a piece that did not keep them) from
        the values known, node by node."""
        if not values:
            return
        wanted, nodes = set(values), []
        for node in reversed(self.graph.nodes[:self.cut]):
            if any(v in wanted for v in node.outputs):
                nodes.append(node)
                wanted.update(x for x in node.inputs if isinstance(x, Value)
                              and x not in self.env and x not in self.graph.constants)
        nodes.reverse()
        reads = _reads(nodes, {v for n in nodes for v in n.outputs}, self.graph.constants)
        g = copy_nodes(self.graph, reads, nodes, values)
        self.env.update(zip(values, run_once(g, [self.env[r] for r in reads])))

    def learn(self) -> bool:
        """After the call: each piece keeps, from the next call on, the values that later
        code read from it (its break's value too). Whether any piece changed."""
        read_after = set(self.graph.outputs)
        ends = sorted({end for _, _, end, *_ in self.ran}, reverse=True)
        later, position = {}, len(self.graph.nodes)
        for end in ends:
            for node in self.graph.nodes[end:position]:
                read_after.update(x for x in node.inputs if isinstance(x, Value))
            later[end], position = set(read_after), end
        changed = False
        for piece, start, end, broke, _, produced in self.ran:
            changed |= piece.keep({i for i, v in enumerate(produced) if v in later[end]}
                                  | {broke})
        return changed

    def cut_forward(self, capture) -> tuple[int, list]:
        """Make the values the pieces computed inputs of the last piece (``capture``'s
        graph, by name: the forward half is a copy); the number of nodes it then skips, and
        those values (of this tracer's graph)."""
        graph = capture.graph
        computed = {v.name: a for v, a in self.env.items()
                    if v.producer is not None and v in self.graph}
        known = {v for node in graph.nodes for v in node.outputs if v.name in computed}
        needed, keep = set(graph.outputs), []
        for node in reversed(graph.nodes):
            outs = [v for v in node.outputs if v in needed]
            if outs and not all(v in known for v in outs):
                keep.append(node)
                needed.update(x for x in node.inputs if isinstance(x, Value))
        keep.reverse()
        cut = [v for node in graph.nodes for v in node.outputs if v in known and v in needed]
        if not cut:
            return 0, []
        capture.graph = copy_nodes(graph, list(graph.inputs) + cut, keep, graph.outputs)
        ours = {v.name: v for v in self.env}
        self.bind_cut(capture, [ours[v.name] for v in cut])
        return len(graph.nodes) - len(keep), [ours[v.name] for v in cut]

    def bind_cut(self, capture, cut: list) -> None:
        """Feed the last piece's inputs for ``cut`` (values of this tracer's graph) from
        the arrays the pieces computed."""
        for v in cut:
            array = self.env[v]
            capture.bindings.append(Binding("captured", Tensor._make(array), v, array,
                                            cut=True))


def run_once(graph: Graph, arrays: list) -> list:
    """``graph``'s outputs for ``arrays``, by its code generated without optimising it."""
    with outside_trace():
        return Executable(graph).run(arrays)


def _reads(nodes, produced: set, constants) -> list:
    """The values ``nodes`` read that they do not make (nor constants), in order."""
    reads = {}
    for node in nodes:
        for x in node.inputs:
            if isinstance(x, Value) and x not in produced and x not in constants:
                reads[x] = None
    return list(reads)


class _NoReplay:
    """A split call's backward can't replay its forward (the pieces ran apart): a
    ``create_graph=True`` backward through it is an error, not a wrong gradient."""
    kept, read = [], []

    def gradients(self, *_):
        raise RuntimeError("dg.compile: create_graph=True backward through a compiled "
                           "function split at a graph break is not supported; remove the "
                           "break (see explain()) or call the function uncompiled")


class Splitter:
    """A compiled function split at its graph breaks (see the module docstring)."""

    def __init__(self, compiled, reason: str = ""):
        self.compiled = compiled
        self.reason = reason   # why its Python runs at every call, when no break split it
        self.passes, self.fast_math = compiled.passes, compiled.fast_math
        self.pieces: dict = {}   # key -> Piece
        self.lasts: dict = {}    # role key of the last piece -> its Entry
        self.breaks: set = set()
        self.costs = (0.0, 0.0)   # (seconds) the latest call's trace, then its last piece
        self.hyper = ()   # the optimisers' hyper-parameters at the latest call (guards.py)
        self.calls = 0
        self.replays = 0   # calls that replayed the whole tape of the call before
        self.timings = {"split": [], "eager": []}   # (seconds) while comparing the two
        self.verdict = None   # what the comparison found, once made
        self.tape = None      # the latest settled call, replayed by the next (replay.py)

    def piece(self, key, make_graph, location) -> Piece:
        """The piece of ``key``; a new one's graph is ``make_graph()``."""
        piece = self.pieces.get(key)
        if piece is None:
            graph = make_graph()
            piece = self.pieces[key] = Piece(graph)
            self._record(f"before the break at {location}", graph.nodes)
        return piece

    def note_break(self, location: str, reason: str) -> None:
        """Report a break the first time it is met (a warning and an ``explain()`` line)."""
        if (location, reason) in self.breaks:
            return
        self.breaks.add((location, reason))
        self.compiled.records.append(Record("break", reason + "; split there", BREAK_FIX,
                                            location))
        warnings.warn(f"dg.compile: graph break in {_name(self.compiled.fn)} at {location}: "
                      f"{reason}; the function is split there (explain() lists the "
                      "compiled pieces)", stacklevel=_user_stacklevel())

    def _record(self, where: str, nodes, entry=None) -> None:
        detail = f"{where} (lines {source_lines(nodes)})"
        self.compiled.records.append(Record("piece", detail, nodes=len(nodes), entry=entry,
                                            times=dict(entry.times) if entry else {}))

    def __call__(self, args, kwargs):
        """One call: split (traced), or, while comparing the two, eager every other call."""
        self.calls += 1
        if self.calls <= COMPARE_AFTER or self.verdict is not None:
            return self._split_call(args, kwargs)
        times = self.timings
        mode = "eager" if len(times["eager"]) <= len(times["split"]) else "split"
        start = time.perf_counter()
        if mode == "eager":
            result = self.compiled.fn(*args, **kwargs)
        else:
            result = self._split_call(args, kwargs)
        times[mode].append(time.perf_counter() - start)
        if min(len(t) for t in times.values()) >= SAMPLES:
            self._decide()
        return result

    def _decide(self) -> None:
        """Keep splitting if it was faster than eager, else run eagerly from now on."""
        split, eager = min(self.timings["split"]), min(self.timings["eager"])
        self.verdict = (f"split {split * 1e3:.2f} ms per call, eager {eager * 1e3:.2f} ms "
                        f"(the best of {SAMPLES} calls each, alternating)")
        if split > eager:
            self._give_up(f"the split function ran slower than eagerly ({self.verdict})",
                          "remove the graph breaks above (or move them out of the compiled "
                          "function) to run it as one compiled graph")

    def _split_call(self, args, kwargs):
        c = self.compiled
        if c._optimizers:   # (a learning rate set at every step: a graph input, as unsplit)
            facts = optimizer_facts(c._optimizers, c._dynamic)
            if self.hyper and c._new_hyper_inputs(facts, self.hyper):
                facts = optimizer_facts(c._optimizers, c._dynamic)
            self.hyper = facts
        tracer = SplitTracer(readable_names(c.fn), c, self.tape)
        try:
            capture, backward, _, times = c._trace(tracer, args, kwargs,
                                                   c.leaf_names(args, kwargs), [],
                                                   as_inputs=False)
        except CaptureError as e:   # (not a value Python needs: eager from now on)
            c._split = None
            c._graph_break(e)
            return c.fn(*args, **kwargs)
        return self.finish(tracer, capture, backward, args, kwargs, times)

    def finish(self, tracer, capture, backward, args, kwargs, times):
        """Run the last piece of a call traced by ``tracer`` (``times``: the trace's, as
        ``Compiled._trace`` gives them); the call's result."""
        c = self.compiled
        start = time.perf_counter()
        leaves, _ = flatten((args, kwargs))
        if len(self.pieces) > MAX_PIECES:
            self._give_up(f"more than {MAX_PIECES} different pieces compiled")
        entry = self._replayed(tracer, capture) if tracer.replayed is not None else None
        if entry is None:
            entry = self._cut(tracer, capture, backward)
        else:
            self.replays += 1
        c._last = entry
        result = entry.run(args, kwargs, leaves=leaves)
        self.costs = (sum(times.values()), time.perf_counter() - start)
        return result

    def _cut(self, tracer, capture, backward):
        """The last piece of a call traced (not replayed to its end): the pieces learn what
        later code read, the graph is cut after them, and its compiled code found or made.
        A call whose pieces had settled is the tape the next call replays."""
        changed = tracer.learn()
        settled = not (changed or tracer.new_pieces) and backward is None
        key = io_key(_keyed(capture), _roles(capture)) if settled else None
        skipped, cut = tracer.cut_forward(capture)
        entry = self._last_piece(capture, backward, tracer)
        if skipped and backward is not None:
            entry.replay = _NoReplay()
        self.tape = Tape(tracer, cut, capture.graph, entry, key, capture) if settled else None
        return entry

    def _replayed(self, tracer, capture):
        """The tape's last piece for a call that replayed all of it, when its capture binds
        and writes the same tensors by role (else None: cut as a trace is)."""
        tape = tracer.replayed
        if (any(v not in tracer.env for v in tape.cut)
                or io_key(_keyed(capture), _roles(capture)) != tape.key):
            return None
        tape.made_state(capture)
        capture.graph = tape.last
        tracer.bind_cut(capture, tape.cut)
        return tape.entry.rebound(capture, None)

    def describe(self) -> str:
        """The ``explain()`` line on what splitting costs at every call."""
        trace, last = self.costs
        compared = f"; compared with eager: {self.verdict}, split kept" if self.verdict else ""
        where, fix = (f"split at {len(self.breaks)} graph break(s)",
                      "; remove the breaks for one graph run from its guards alone")
        if not self.breaks:
            where, fix = f"no graph break, but {self.reason}", ""
        return (f"{where}: every call runs the function's "
                f"Python again, replaying the ops of the call before while they are the same "
                f"({self.replays} of {self.calls} calls replayed it all; the latest call: "
                f"{trace * 1e3:.1f} ms with the pieces before the breaks, then "
                f"{last * 1e3:.1f} ms for the last piece){compared}{fix}")

    def _last_piece(self, capture, backward, tracer):
        key = capture_key(_keyed(capture), backward, tensor_key=_roles(capture))
        entry = self.lasts.get(key)
        if entry is not None:
            return entry.rebound(capture, backward)
        c = self.compiled
        capture.graph.verify()
        if tracer.new_pieces:   # (its pieces kept every value: the next call's differs)
            return c.new_entry(capture, backward, passes=False)
        entry = c.new_entry(capture, backward)
        self.lasts[key] = entry
        self._record("after the last break" if tracer.ran else "(no break this call)",
                     tracer.graph.nodes[tracer.cut:], entry)
        if len(self.lasts) > RETRACE_LIMIT:
            self._give_up(f"{len(self.lasts)} different last pieces compiled (values from "
                          "Python that change every call?)")
        return entry

    def _give_up(self, why: str, fix: str = "make the values the graph breaks above "
                 "compute the same at every call, or remove the breaks") -> None:
        """Run eagerly from the next call on (this one's pieces still run)."""
        c = self.compiled
        c._split, c.eager_only = None, True
        c.records.append(Record("eager", why, fix))
        warnings.warn(f"dg.compile: {why} for a function split at graph breaks; running it "
                      "eagerly from now on", stacklevel=_user_stacklevel())


def _keyed(capture):
    """``capture`` as a split call's last piece is keyed: not by the Python values it
    returns (``return loss.item()``)."""
    keyed = copy.copy(capture)
    keyed.out_leaves = [k if k == "value" else ("const", None) for k in capture.out_leaves]
    return keyed


def _roles(capture):
    """Key a tensor by the first graph input it feeds (its role), not by identity: each
    call's trace binds its own tensors (a value made after a break, ...)."""
    first = {}
    for k, b in enumerate(capture.bindings):
        first.setdefault(id(b.tensor), k)
    return lambda t: first.get(id(t), -1)


def source_lines(nodes) -> str:
    """``step.py:12-14,20; model.py:30``: the user's lines that recorded ``nodes``."""
    lines: dict[str, set] = {}
    for node in nodes:
        location = (node.location or "").split(" ")[0]
        path, _, line = location.rpartition(":")
        if path and line.isdigit():
            lines.setdefault(path.rsplit("/", 1)[-1], set()).add(int(line))
    parts = []
    for path, numbers in lines.items():
        numbers, ranges = sorted(numbers), []
        for n in numbers:
            if ranges and n == ranges[-1][1] + 1:
                ranges[-1][1] = n
            else:
                ranges.append([n, n])
        parts.append(path + ":" + ",".join(f"{a}-{b}" if a != b else f"{a}"
                                           for a, b in ranges))
    return "; ".join(parts) or "none"


def _user_stacklevel() -> int:
    """The stacklevel of a ``warnings.warn`` in the caller that names the user's frame."""
    frame, level = sys._getframe(1), 1
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level
