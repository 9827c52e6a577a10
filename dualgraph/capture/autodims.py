"""Automatic dynamic dims (torch's ``automatic_dynamic_shapes``): a dim whose size alone
made a call miss the cache is traced symbolic from then on.

Without ``dynamic=``, a compiled function is traced for the shapes it is called with. When
a call misses the cache only because some dims of its tensor arguments have other sizes
than the latest capture's (a batch of sequences of another length, a shorter last batch),
those dims are *marked*, and the function is traced again with them symbolic, so one graph
serves every size. Dims of equal size in a call share one symbol (``s0``; a call where
they differ is another signature, so a graph never runs with sizes it did not assume
equal), and a dim of size 0 or 1 stays a number (broadcasting depends on it). A call
whose shapes a static graph was traced for still runs that graph (its kernels fitted to
those shapes). A concatenation along a symbolic dim or a slice of it by constants gives a
dim that is a sum (``s0 + 1``, ``s0 - 1``): what the trace assumed of its size is checked
before each run (:class:`DimFacts`), with the case each slice's clamp took at the traced
sizes (``pos[:s0]`` of a table of 12 rows: ``12 - s0 >= 0``, ``shapes.SizeCases``); a
call in another case traces that case once (``Entry.cases``, capture/compile.py). Where
an op cannot keep a dim symbolic (a strided slice of it), the trace fails and the function
goes back to static shapes for good (one graph per shape), as ``explain()`` says.
``dynamic=False`` never marks a dim.

>>> auto = AutoDims(True)
>>> import dualgraph as dg
>>> x = dg.ones(5, 3)
>>> auto.leaf_dynamic(["x"], [x])
[None]
"""
from __future__ import annotations

from ..shapes import Sym
from ..tensor import Tensor


class AutoDims:
    """The dims marked dynamic of one compiled function (``dims``: leaf name -> dims), and
    the latest capture's leaf names and static signature (``last``), which a miss is
    compared with."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.dims: dict = {}
        self.places = PlaceDims()
        self.last = None

    def leaf_dynamic(self, names: list, leaves: list) -> list:
        """Per argument leaf, ``{dim: Sym}`` for its marked dims of this call's sizes, or
        None; equal sizes share a symbol, named in order of appearance."""
        symbols, out = {}, []
        for name, leaf in zip(names, leaves):
            dims = self.dims.get(name) if isinstance(leaf, Tensor) else None
            marked = {}
            for d in sorted(dims or ()):
                size = leaf._data.shape[d] if d < leaf.ndim else 0
                if size > 1:
                    marked[d] = symbols.setdefault(size, Sym(f"s{len(symbols)}"))
            out.append(marked or None)
        return out

    def mark(self, names: list, sig: tuple) -> str | None:
        """For a call with static signature ``sig`` that missed the cache: mark the dims
        whose size alone differs from the latest capture's (all else equal); what was
        marked, for ``explain()``, or None."""
        if not self.enabled or self.last is None:
            return None
        last_names, last = self.last
        if (names != last_names or sig[0] != last[0] or sig[2:] != last[2:]
                or len(sig[1]) != len(last[1])):
            return None
        new = []
        for name, a, b in zip(names, sig[1], last[1]):
            if a == b:
                continue
            if not (a[0] == b[0] == "tensor" and len(a[1]) == len(b[1]) and a[2:] == b[2:]):
                return None   # (another guard failed too: an ordinary retrace)
            new += [(name, d, y, x) for d, (x, y) in enumerate(zip(a[1], b[1]))
                    if x != y and d not in self.dims.get(name, ())]
        if not new:
            return None
        for name, d, _, _ in new:
            self.dims.setdefault(name, set()).add(d)
        changed = "; ".join(f"{name}.shape[{d}] changed from {old} to {now}"
                            for name, d, old, now in new)
        return (f"{changed}: traced again with that dim symbolic (automatic dynamic dims), "
                "so one graph serves its sizes")

    def give_up(self) -> None:
        """An op could not keep a marked dim symbolic: static shapes from now on."""
        self.enabled, self.dims = False, {}
        self.places.give_up()


class PlaceDims:
    """Dims of the tensors a graph reads from a place it stores a new one in at every call
    (``self.cache = cat([self.cache, k], 1)``: capture/compile.py's ``_stores``), marked
    when a call finds a tensor there whose size alone changed. The next trace binds the
    tensor there with those dims symbolic (a size shared with an argument's symbol shares
    it), so a cache grown at every call is one graph; a run checks the sizes it finds
    there against the graph's symbols and facts (:func:`symbol_sizes`)."""

    def __init__(self):
        self.marked: dict = {}   # (id(container), key) -> (name, container, key, dims)
        self.enabled = True

    def give_up(self) -> None:
        """A trace with them symbolic failed: static from now on."""
        self.marked.clear()
        self.enabled = False

    def mark(self, name: str, container, key, dims) -> str:
        """Mark ``dims`` of the place; what was marked, for ``explain()``."""
        if not self.enabled:
            return "(the places' dims stay static)"
        _, _, _, had = self.marked.get((id(container), key), (name, container, key, ()))
        self.marked[id(container), key] = (name, container, key, tuple(sorted({*had, *dims})))
        return (f"traced again with {name}'s dim {', '.join(map(str, dims))} symbolic "
                "(automatic dynamic dims), so one graph serves its sizes")

    def shapes(self, held, sizes: dict) -> list:
        """``[(name, tensor, shape)]``: the tensor in each marked place now and its shape
        with the marked dims of sizes above 1 symbolic, and its dims of the size of an
        argument's symbol in ``sizes`` (symbol name -> size, extended here) that symbol."""
        out = []
        arguments = set(sizes.values())   # (the arguments' symbols' sizes: an argument
        # of the batch's size, cat with the cache, has the batch's symbol)
        for name, container, key, dims in self.marked.values():
            t = held(container, key)
            if not isinstance(t, Tensor) or t.ndim <= max(dims):
                continue
            by_size = {n: s for s, n in sizes.items()}
            shape = list(t._data.shape)
            for d, n in enumerate(shape):
                if n > 1 and (d in dims or n in arguments):
                    symbol = by_size.setdefault(n, f"s{len(sizes)}")
                    sizes[symbol] = n
                    shape[d] = Sym(symbol)
            out.append((name, t, tuple(shape)))
        return out


def symbol_sizes(inputs, arrays) -> dict | str:
    """Symbol name -> size for a run of a graph with ``inputs`` (Values) on ``arrays``, or
    why those sizes can't run it (a symbol of two sizes, or of 0 or 1, two symbols of one
    size: automatic dynamic dims give equal sizes one symbol and keep 0 and 1 numbers)."""
    sizes = {}
    for v, a in zip(inputs, arrays):
        for d, n in zip(v.shape, a.shape):
            if isinstance(d, Sym) and sizes.setdefault(d.names[0], n) != n:
                return f"{d} is {sizes[d.names[0]]} and {n}"
    if any(n < 2 for n in sizes.values()) or len(set(sizes.values())) < len(sizes):
        return f"the symbolic sizes {sizes} include 0, 1 or one size twice"
    return sizes


class DimFacts:
    """What a graph whose dims include sums (``s0 + 1`` of a cat along a symbolic dim,
    ``s0 - 1`` of ``x[:-1]``) assumed of the sizes it was traced with, checked before each
    run. Its trace took a symbolic dim for a size other than 0 and 1 (broadcasting, a
    squeeze) and other than any other dim of the graph, as automatic dims guarantee of
    the symbols themselves (:meth:`AutoDims.leaf_dynamic`), and a slice bound such as
    ``s0 - 1`` for one inside the dim (``shapes.sym_slice``). So each symbol and each sum
    must be at least 2, a sum's size must differ from every other dim's, and a bound must
    not be negative; a call whose sizes break one runs a graph traced with static shapes
    instead (capture/compile.py)."""

    def __init__(self, dims: set, bounds: set, decided=frozenset()):
        self.sums = [d for d in dims if d.is_sum]
        self.others = [d for d in dims if not d.is_sum]
        self.bounds = [b for b in bounds if b not in dims]
        self.decided = list(decided)
        self.names = sorted({n for d in dims | bounds | set(decided) for n in d.names})

    @classmethod
    def of(cls, graphs, decided=frozenset()) -> "DimFacts | None":
        """The facts of ``graphs`` (a forward and its backward) and those its shape rules
        ``decided`` by the traced sizes (``shapes.SizeCases``: expressions at least 0, such
        as ``12 - s0`` of ``pos[:s0]``), or None when there are none of the latter and no
        dim or attribute of theirs is a sum (nothing beyond the automatic dims' rules)."""
        dims, bounds = set(), set()
        for graph in graphs:
            for v in list(graph.inputs) + [v for n in graph.nodes for v in n.outputs]:
                dims.update(d for d in v.shape if isinstance(d, Sym))
            for node in graph.nodes:
                _sums_in(node.attrs.values(), bounds)
        if not decided and not any(d.is_sum for d in dims | bounds):
            return None
        return cls(dims, bounds, decided)

    def fit(self, sizes: dict) -> bool:
        """Whether the symbols' sizes (name -> int) keep every fact."""
        return self.broken(sizes) is None

    def broken(self, sizes: dict) -> str | None:
        """The first fact the symbols' sizes (name -> int) break, in words, or None."""
        return self.broken_dims(sizes) or self.broken_case(sizes)

    def broken_case(self, sizes: dict) -> str | None:
        """The first clamp the trace decided (``12 - s0 >= 0``) that the sizes decide the
        other way, in words, or None: another case of the same slices."""
        for d in self.decided:
            v = d.evaluate(sizes)
            if type(v) is int and v < 0:
                return f"{d} is {v}, not at least 0 as in the traced call (a slice's clamp)"
        return None

    def broken_dims(self, sizes: dict) -> str | None:
        """The first fact of the dims themselves the sizes break, in words, or None."""
        for n in self.names:
            if sizes.get(n, 2) < 2:
                return f"{n} is {sizes[n]}"
        seen = {d.evaluate(sizes): d for d in self.others}
        for d in self.sums:
            v = d.evaluate(sizes)
            if type(v) is int and (v < 2 or v in seen):
                also = f", as {seen[v]} is" if v in seen else ""
                return f"the dim {d} is {v}{also}"
            seen[v] = d
        for b in self.bounds:
            v = b.evaluate(sizes)
            if type(v) is int and v < 0:
                return f"the slice bound {b} is {v}"
        return None

    @staticmethod
    def sizes(leaves: list, leaf_dynamic: list) -> dict:
        """Symbol name -> size in a call whose argument leaves have the symbolic dims
        ``leaf_dynamic`` (per leaf, ``{dim: Sym}`` or None)."""
        return {sym.names[0]: leaf._data.shape[d]
                for leaf, dyn in zip(leaves, leaf_dynamic) if dyn
                for d, sym in dyn.items() if isinstance(sym, Sym) and not sym.is_sum}


def _sums_in(values, out: set) -> None:
    for v in values:
        if isinstance(v, Sym) and v.is_sum:
            out.add(v)
        elif type(v) in (tuple, list):
            _sums_in(v, out)
