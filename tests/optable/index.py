"""Rows for the indexing family: the primitives index, index_put, argsort and trilu, and
the composites built on them (getitem/setitem, gather/scatter, index_select/index_add,
take_along_dim, masked_*, sort/topk, one_hot)."""
import numpy as np

from . import In, OpCase
from .reduce import double

ALL_FLOATS = ("float32", "float64", "float16", "bfloat16")


def distinct(shape, dim, size):
    """An int64 index of ``shape`` whose entries along ``dim`` are distinct positions in
    [0, size): scatter without duplicate targets has one well-defined result."""
    def make(rng, float_dtype):
        moved = list(shape)
        n = moved.pop(dim)
        rows = [rng.permutation(size)[:n] for _ in range(int(np.prod(moved)))]
        return np.moveaxis(np.array(rows).reshape(moved + [n]), -1, dim).astype(np.int64)
    return In(tuple(shape), "custom", fn=make)


def setitem(key):
    """A row function doing ``c = a * 1; c[key(m, *rest)] = v`` (setitem out of place)."""
    def fn(m, a, v, *rest):
        c = a * 1
        c[key(m, *rest)] = v
        return c
    return fn


def idx(*shape, low=0, high=3):
    return In(shape, "int", low, high)


CASES = [
    # index: advanced getitem
    OpCase("index", lambda m, a, i: a[i], [In((3, 4)), idx(5)], "rows", dtypes=ALL_FLOATS),
    OpCase("index", lambda m, a, i: a[i], [In((4, 2)), idx(2, 3, low=-4, high=4)],
           "negative-2d"),
    OpCase("index", lambda m, a, i, j: a[:, i, j], [In((2, 3, 4)), idx(2, 1), idx(3)],
           "adjacent-broadcast"),
    OpCase("index", lambda m, a, i, j: a[i, :, j], [In((3, 2, 4)), idx(2), idx(2)],
           "separated"),
    OpCase("index", lambda m, a, i: a[0, :, i], [In((2, 3, 4)), idx(5)], "int-then-array"),
    OpCase("index", lambda m, a, i: a[1:, None, i], [In((3, 4)), idx(2, 2)], "slice-none"),
    OpCase("index", lambda m, a: a[[0, 2, 2], ..., [1, 0, 1]], [In((3, 2, 4))], "lists"),
    OpCase("index", lambda m, a, k: a[k], [In((3, 4)), In((3, 4), "bool")], "mask"),
    OpCase("index", lambda m, a, k: a[:, k], [In((2, 3, 4)), In((3,), "bool")], "mask-dim1"),
    OpCase("index", lambda m, a, i: a[i], [In((4, 3), "int"), idx(2)], "int", grad=False),
    OpCase("gather", lambda m, a, i: m.gather(a, 1, i), [In((3, 4)), idx(3, 5, high=4)],
           "gather", dtypes=ALL_FLOATS),
    OpCase("gather", lambda m, a, i: a.gather(0, i), [In((4, 5)), idx(2, 3, high=4)],
           "gather-smaller"),
    OpCase("gather", lambda m, a, i: a.gather(-1, i), [In((2, 3, 4)), idx(2, 3, 6, high=4)],
           "gather-3d"),
    # (kernels.along's loops: 32/64-bit inputs as large as the index outside dim)
    OpCase("gather", lambda m, a, i: a.gather(1, i), [In((3, 7, 5)), idx(3, 9, 5, high=7)],
           "loop", dtypes=("float32", "float64")),
    OpCase("gather", lambda m, a, i: a.mT.gather(0, i), [In((5, 4)), idx(6, 5, high=4)],
           "loop-strided"),
    OpCase("gather", lambda m, a, i: a.gather(0, i), [In((4, 3), "int"), idx(5, 3, high=4)],
           "loop-int", grad=False),
    OpCase("gather", double(lambda m, a, i: a.gather(1, i)), [In((3, 4)), idx(3, 6, high=4)],
           "double"),
    OpCase("scatter_add", lambda m, a, i, s: a.scatter_add(1, i, s),
           [In((3, 4, 5)), idx(3, 7, 5, high=4), In((3, 7, 5))], "loop-repeats",
           dtypes=("float32", "float64")),
    OpCase("scatter_add", lambda m, a, i, s: a.mT.scatter_add(0, i, s.mT),
           [In((2, 6)), idx(4, 2, high=6), In((2, 4))], "loop-strided"),
    OpCase("scatter_add", lambda m, a, i, s: a.scatter_add(0, i, s),
           [In((3, 4)), idx(5, 2, high=3), In((6, 3))], "smaller-index-larger-src",
           grad=False),   # (torch can't grad this)
    OpCase("scatter_add",
           double(lambda m, a, i: m.zeros(3, 4, dtype=a.dtype).scatter_add(1, i, a * a)),
           [In((3, 6)), idx(3, 6, high=4)], "double"),
    OpCase("index", lambda m, a, i: m.index_select(a, -1, i), [In((3, 4)), idx(6, high=4)],
           "index_select", dtypes=ALL_FLOATS),
    OpCase("gather", lambda m, a, i: m.take_along_dim(a, i, dim=1),
           [In((3, 4)), idx(1, 5, high=4)], "take_along_dim"),
    OpCase("gather", lambda m, a, i: m.take_along_dim(a, i), [In((3, 4)), idx(5, high=12)],
           "take_along_dim-flat"),
    OpCase("index", lambda m, a, k: m.masked_select(a, k), [In((3, 4)), In((4,), "bool")],
           "masked_select"),
    OpCase("index", lambda m, i: m.nn.functional.one_hot(i, 5), [idx(2, 3, high=5)],
           "one_hot", grad=False),
    OpCase("index", lambda m, i: m.nn.functional.one_hot(i), [idx(4, high=6)],
           "one_hot-infer", grad=False),
    # index_put: setitem with tensors, scatter family
    OpCase("index_put", setitem(lambda m, i: i), [In((4, 3)), In((2, 3)), distinct((2,), 0, 4)],
           "setitem-rows", dtypes=ALL_FLOATS),
    OpCase("index_put", setitem(lambda m, i: (slice(None), i)),
           [In((2, 5)), In((3,)), distinct((3,), 0, 5)], "setitem-broadcast"),
    OpCase("index_put", setitem(lambda m, i: (0, slice(1, None), i)),
           [In((2, 3, 4)), In(()), distinct((2,), 0, 4)], "setitem-mixed"),
    OpCase("index_put", setitem(lambda m, i: i), [In((3, 2), "int"), 7, idx(2)],
           "setitem-int", grad=False),
    OpCase("index_put", lambda m, a, i, s: m.scatter(a, 1, i, s),
           [In((3, 5)), distinct((3, 2), 1, 5), In((3, 2))], "scatter", dtypes=ALL_FLOATS),
    OpCase("index_put", lambda m, a, i, s: m.scatter(a, 1, i, s),   # torch can't grad this
           [In((3, 5)), distinct((2, 2), 1, 5), In((3, 4))], "scatter-larger-src", grad=False),
    OpCase("index_put", lambda m, a, i: a.scatter(0, i, 2.5),
           [In((4, 3)), distinct((2, 3), 0, 4)], "scatter-value"),
    OpCase("scatter_add", lambda m, a, i, s: m.scatter_add(a, -1, i, s),
           [In((2, 3)), idx(2, 5), In((2, 5))], "scatter_add", dtypes=ALL_FLOATS),
    OpCase("scatter_add", lambda m, a, i, s: a.scatter(0, i, s, reduce="add"),
           [In((3, 2)), idx(4, 2), In((4, 2))], "scatter-reduce-add", grad=False),
    OpCase("index_put", lambda m, a, i, s: m.index_add(a, 0, i, s, alpha=2.0),
           [In((3, 2)), idx(5), In((5, 2))], "index_add"),
    OpCase("index_put", lambda m, a, i, j, v: m.index_put(a, (i, j), v, accumulate=True),
           [In((3, 4)), idx(6), idx(6, high=4), In((6,))], "index_put-accumulate"),
    OpCase("scatter_add", lambda m, a, i, s: a.scatter_add(1, i, s),
           [In((2, 3), "int"), idx(2, 4), In((2, 4), "int")], "scatter_add-int", grad=False),
    # slice_update and where through setitem / masked_fill
    OpCase("slice_update", setitem(lambda m: (slice(None), slice(1, 3))),
           [In((3, 4)), In((3, 1))], "setitem-slice", dtypes=ALL_FLOATS),
    OpCase("slice_update", setitem(lambda m: (1, Ellipsis, None)), [In((3, 2, 4)), In((4, 1))],
           "setitem-int-ellipsis"),
    OpCase("slice_update", setitem(lambda m: slice(None, None, 2)), [In((5, 2)), 0.5],
           "setitem-scalar"),
    OpCase("where", setitem(lambda m, k: k), [In((3, 4)), In(()), In((3, 4), "bool")],
           "setitem-mask"),
    OpCase("where", setitem(lambda m, k: k), [In((3, 4)), In((4,)), In((3,), "bool")],
           "setitem-mask-rows"),
    OpCase("where", lambda m, a, k: m.masked_fill(a, k, -2.0), [In((3, 4)), In((4,), "bool")],
           "masked_fill", dtypes=ALL_FLOATS),
    OpCase("where", lambda m, a, k, v: a.masked_fill(k, v),
           [In((2, 3)), In((2, 3), "bool"), In(())], "masked_fill-tensor"),
    OpCase("where", lambda m, a, k: a.masked_fill(k, 2.7), [In((2, 3), "int"),
                                                            In((2, 3), "bool")],
           "masked_fill-int", grad=False),
    # argsort, sort, topk
    OpCase("argsort", lambda m, a: m.argsort(a), [In((3, 5), "distinct")], grad=False,
           dtypes=ALL_FLOATS),
    OpCase("argsort", lambda m, a: a.argsort(dim=0, descending=True), [In((4, 3), "distinct")],
           "descending", grad=False),
    OpCase("argsort", lambda m, a: m.sort(a, dim=-1, descending=True, stable=True),
           [In((3, 6), "int", 0, 3)], "stable-ties", grad=False),
    OpCase("argsort", lambda m, a: m.argsort(a, stable=True), [In((7,), "int", 0, 2)],
           "stable-ties-asc", grad=False),
    OpCase("argsort", lambda m, a: m.sort(a), [In((3, 4), "distinct")], "sort",
           dtypes=ALL_FLOATS),
    OpCase("argsort", lambda m, a: a.sort(0, descending=True), [In((4, 2, 3), "distinct")],
           "sort-desc"),
    OpCase("topk", lambda m, a: m.topk(a, 2), [In((3, 5), "distinct")], dtypes=ALL_FLOATS),
    OpCase("topk", lambda m, a: a.topk(3, dim=0, largest=False), [In((4, 3), "distinct")],
           "smallest"),
    OpCase("topk", lambda m, a: m.topk(a, 1, -1)[0] * 2, [In((2, 3, 4), "distinct")],
           "values"),
    OpCase("topk", lambda m, a: m.topk(a, 3, dim=1).values, [In((3, 6), "int", 0, 3)],
           "int-ties", grad=False),
    # trilu: tril / triu
    OpCase("trilu", lambda m, a: m.tril(a), [In((4, 3))], "tril", dtypes=ALL_FLOATS),
    OpCase("trilu", lambda m, a: m.triu(a), [In((3, 5))], "triu", dtypes=ALL_FLOATS),
    OpCase("trilu", lambda m, a: m.tril(a, -1), [In((2, 4, 4))], "tril-batched-strict"),
    OpCase("trilu", lambda m, a: a.triu(2), [In((2, 3, 5))], "triu-above"),
    OpCase("trilu", lambda m, a: m.triu(a, -7), [In((3, 4))], "triu-everything"),
    OpCase("trilu", lambda m, a: a.tril(diagonal=1), [In((3, 4), "int")], "tril-int",
           grad=False),
    OpCase("trilu", lambda m, a: m.triu(a, 1), [In((4, 4), "bool")], "triu-bool", grad=False),
]


def first_grad(pick):
    """d sum(pick(a, *rest) * v) / da, differentiable: a row for a gradient op, whose own
    gradient (with respect to v) is the gradient of the gradient."""
    def fn(m, a, v, *rest):
        with m.enable_grad():
            if not a.requires_grad:
                a.requires_grad_()
            return m.autograd.grad((pick(a, *rest) * v).sum(), a, create_graph=True)[0]
    return fn


CASES += [
    OpCase("index_backward", first_grad(lambda a, i: a[i]), [In((4, 3)), In((5, 3)),
                                                            idx(5, high=4)], "repeats"),
    OpCase("index_backward", first_grad(lambda a, i, j: a[i, j]),
           [In((3, 4)), In((2, 3)), idx(2, 3), idx(2, 3, high=4)], "points"),
    OpCase("index_backward", first_grad(lambda a, i: a[:, i]),
           [In((2, 4, 3)), In((2, 5, 3)), idx(5, high=4)], "dim1"),
]

# repeat_interleave (int counts: a view; tensor counts: an index) and Tensor.unfold
CASES += [
    OpCase("expand", lambda m, a: a.repeat_interleave(2, dim=1), [In((3, 4))],
           "repeat_interleave"),
    OpCase("expand", lambda m, a: m.repeat_interleave(a, 3), [In((2, 3))],
           "repeat_interleave-flat"),
    OpCase("index", lambda m, a: a.repeat_interleave(m.tensor([1, 0, 2]), dim=0),
           [In((3, 4))], "repeat_interleave-tensor"),
    OpCase("index", lambda m, a: a.unfold(1, 3, 2), [In((2, 7, 3))], "unfold"),
    OpCase("index", lambda m, a: a.unfold(-1, 2, 1), [In((3, 4))], "unfold-last"),
    OpCase("index", lambda m, a: a.unfold(0, 4, 4), [In((8,))], "unfold-chunks"),
]

# diag / diagonal: a diagonal read as a view (diag's a copy of it), a vector laid on one
# with where
CASES += [
    OpCase("diagonal", lambda m, a: m.diag(a), [In((3, 4))], "diag-of-matrix"),
    OpCase("diagonal", lambda m, a: m.diag(a, -1), [In((4, 3))], "diag-below"),
    OpCase("diagonal", lambda m, a: a.diagonal(1, 1, 0), [In((3, 4))], "diagonal-swapped"),
    OpCase("diagonal", lambda m, a: a.t().diagonal(2), [In((5, 3))], "diagonal-of-a-transpose"),
    OpCase("diagonal", lambda m, a: a.diagonal(-4), [In((3, 4))], "diagonal-empty"),
    # (round 13: batched matrices, any two dims)
    OpCase("diagonal", lambda m, a: a.diagonal(1, -2, -1), [In((2, 3, 4))], "diagonal-batched"),
    OpCase("diagonal", lambda m, a: a.diagonal(-1, 2, 0), [In((3, 2, 4))], "diagonal-dims-2-0"),
    OpCase("where", lambda m, a: m.diag(a), [In((3,))], "diag-of-vector"),
    OpCase("where", lambda m, a: m.diag(a, 2), [In((3,))], "diag-of-vector-above"),
    OpCase("where", lambda m, a: a.diag(-1), [In((2,))], "diag-of-vector-below"),
]

# issue 26's missing names: index_copy / index_fill / masked_scatter / diag_embed (composites
# of index_put and where), kthvalue (of a sort), cummax / cummin (cumulative_index + gather)
CASES += [
    OpCase("index_put", lambda m, a, i, s: a.index_copy(1, i, s),
           [In((3, 5)), distinct((3,), 0, 5), In((3, 3))], "index_copy"),
    OpCase("index_put", lambda m, a, i, s: m.index_copy(a, 0, i, s),
           [In((4, 2)), distinct((2,), 0, 4), In((2, 2))], "index_copy-rows",
           dtypes=ALL_FLOATS),
    OpCase("where", lambda m, a, i: a.index_fill(1, i, -1.5), [In((3, 5)), idx(4, high=5)],
           "index_fill", dtypes=ALL_FLOATS),
    # a tensor value: its gradient counts each filled entry once (index has repeats)
    OpCase("where", lambda m, a, v: a.index_fill(0, m.tensor([2, 0, 2]), v),
           [In((4, 3)), In(())], "index_fill-tensor"),
    OpCase("where", lambda m, a, k, s: a.masked_scatter(k, s),
           [In((3, 4)), In((3, 4), "bool"), In((12,))], "masked_scatter", dtypes=ALL_FLOATS),
    OpCase("where", lambda m, a, k, s: m.masked_scatter(a, k, s),
           [In((2, 3, 4)), In((3, 1), "bool"), In((5, 6))], "masked_scatter-broadcast"),
    OpCase("where", lambda m, a: m.diag_embed(a), [In((2, 3))], "diag_embed",
           dtypes=ALL_FLOATS),
    OpCase("where", lambda m, a: a.diag_embed(1, 0, 2), [In((2, 3))], "diag_embed-dims"),
    OpCase("where", lambda m, a: m.diag_embed(a, -2, dim1=-1, dim2=0), [In((2, 2, 3))],
           "diag_embed-below"),
    OpCase("argsort", lambda m, a: m.kthvalue(a, 2), [In((3, 5), "distinct")], "kthvalue",
           dtypes=ALL_FLOATS),
    OpCase("argsort", lambda m, a: a.kthvalue(3, 0, keepdim=True), [In((4, 3), "distinct")],
           "kthvalue-keepdim"),
    OpCase("cumulative_index", lambda m, a: m.cummax(a, 1), [In((3, 5), "distinct")],
           dtypes=ALL_FLOATS),
    OpCase("cumulative_index", lambda m, a: a.cummin(0), [In((4, 3), "distinct")], "cummin"),
    OpCase("cumulative_index", lambda m, a: a.cummax(-1), [In((3, 6), "int", 0, 3)], "ties",
           grad=False),
    OpCase("cumulative_index", lambda m, a: a.cummin(1),
           [In((2, 5), "custom", fn=lambda rng, dt: np.array(
               [[1.0, np.nan, 0.0, np.nan, -1.0], [2.0, 2.0, 1.0, 1.0, 3.0]], dt))],
           "nan", dtypes=("float32", "float64"), grad=False),
]

# scatter_reduce: "sum", "mean", "amax", "amin" one op (ties share an extremum's gradient,
# as torch's); "prod" a reduction over each target's candidates
CASES += [
    OpCase("scatter_reduce", lambda m, a, i, s: a.scatter_reduce(0, i, s, "sum",
                                                                 include_self=False),
           [In((4, 3)), idx(6, 3, high=4), In((6, 3))], "sum-alone"),
    OpCase("scatter_reduce", lambda m, a, i, s: a.scatter_reduce(1, i, s, "sum"),
           [In((3, 4)), idx(2, 5, high=4), In((2, 5))], "sum-smaller-index"),
    OpCase("scatter_reduce", lambda m, a, i, s: m.scatter_reduce(a, 1, i, s, "mean"),
           [In((3, 4)), idx(3, 5, high=4), In((3, 5))], "mean", dtypes=ALL_FLOATS),
    OpCase("scatter_reduce", lambda m, a, i, s: a.scatter_reduce(0, i, s, "mean",
                                                                 include_self=False),
           [In((4, 3)), idx(6, 3, high=4), In((6, 3))], "mean-alone"),
    OpCase("scatter_reduce", lambda m, a, i, s: a.scatter_reduce(0, i, s, "amax"),
           [In((4, 3), "distinct"), idx(6, 3, high=4), In((6, 3), "distinct")],
           "amax", dtypes=ALL_FLOATS),
    OpCase("scatter_reduce", lambda m, a, i, s: a.scatter_reduce(1, i, s, "amax",
                                                                 include_self=False),
           [In((3, 4)), idx(3, 6, high=4), In((3, 6), "distinct")], "amax-alone"),
    OpCase("scatter_reduce", lambda m, a, i, s: a.scatter_reduce(0, i, s, "amin",
                                                                 include_self=False),
           [In((4, 3)), idx(6, 3, high=4), In((6, 3), "distinct")], "amin-alone"),
    OpCase("scatter_reduce", lambda m, a, i, s: a.scatter_reduce(0, i, s, "amin"),
           [In((4, 3), "distinct"), idx(6, 3, high=4), In((6, 3), "distinct")], "amin"),
    OpCase("prod", lambda m, a, i, s: a.scatter_reduce(0, i, s, "prod"),
           [In((4, 3), "pos"), idx(5, 3, high=4), In((5, 3), "pos")], "scatter_reduce-prod"),
    OpCase("scatter_reduce", lambda m, a, i, s: a.scatter_reduce(0, i, s, "sum"),
           [In((4, 3), "int"), idx(5, 3, high=4), In((5, 3), "int")], "int", grad=False),
    OpCase("scatter_reduce", lambda m, a, i, s: a.scatter_reduce(0, i, s, "mean",
                                                                 include_self=False),
           [In((4, 3), "int", -9, 9), idx(5, 3, high=4), In((5, 3), "int", -9, 9)], "int-mean",
           grad=False),
    OpCase("scatter_reduce", lambda m, a, i, s: a.scatter_reduce(0, i, s, "amax",
                                                                 include_self=False),
           [In((4, 3), "int"), idx(5, 3, high=4), In((5, 3), "int")], "int-amax", grad=False),
]
