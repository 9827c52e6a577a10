"""Eight-lane vectors for the loops: load, store, broadcast, arithmetic and shuffles of
``<8 x float>`` (or ``<8 x i32>``) values, each intrinsic a few LLVM instructions; and
sixteen-lane ones (``load_wide``, ``broadcast_wide``, ``broadcast_at_wide``, then the same
``store``, ``add`` and ``fma``), one ``zmm`` register each where the CPU has AVX-512F, for
the loops that issue nothing but multiply-adds (a product's register block: twice the work
an instruction of the eight-lane form does). ``load_like`` and ``broadcast_at_like`` take
the width of a vector they are given, for helpers written once for both widths.
:func:`wide_loops` asks LLVM to auto-vectorise a whole loop with sixteen lanes instead.

Numba compiles with LLVM's SLP vectoriser off, so eight scalar sums kept side by side (eight
channels of a depthwise conv, eight windows of a pool) stay eight scalar registers; only
whole loops vectorise. A loop that keeps eight channels in the lanes of one vector says so
here: a value of :func:`vector_type` is an LLVM vector in Numba's data model, so it lives
in one ``ymm`` register where the CPU has AVX (on SSE-only CPUs LLVM splits it into two
``xmm`` registers: same results, half the speed), ``fma`` becomes ``vfmadd`` where the CPU
has FMA (``llvm.fmuladd``: a multiply and an add where it has not, never a library call),
``maximum`` ``vmaxps``.

Loads and stores take a 1-D contiguous array and an element offset, unaligned and
unchecked: the caller keeps ``offset + 8`` (``+ 15`` for :func:`load_even`) within the
array. ``maximum``/``minimum`` are ``a > b ? a : b`` (``<``): where ``b`` is NaN they
return ``a``, as x86's ``maxps`` does; callers that must propagate NaN check for it.
"""
from __future__ import annotations

from functools import lru_cache

from . import Intrinsic

LANES = 8
WIDE = 16     # lanes of a wide vector


def vector_type(dtype, lanes: int = LANES):
    """The Numba type of a ``lanes``-lane vector of the Numba scalar type ``dtype`` (made
    and registered with Numba's data model once per process and kind)."""
    return _vector_type(dtype, lanes)


@lru_cache(maxsize=None)
def _vector_type(dtype, lanes: int):
    from llvmlite import ir
    from numba.core import types
    from numba.extending import models, register_model

    class Vector(types.Type):
        def __init__(self, dtype):
            self.dtype, self.lanes = dtype, lanes
            super().__init__(name=f"Vector{lanes}({dtype})")

    @register_model(Vector)
    class VectorModel(models.PrimitiveModel):
        def __init__(self, dmm, fe_type):
            element = dmm.lookup(fe_type.dtype).get_value_type()
            super().__init__(dmm, fe_type, ir.VectorType(element, lanes))

    return Vector(dtype)


def _is_vector(t) -> bool:
    return type(t).__name__ == "Vector" and getattr(t, "dtype", None) is not None


def _pointer(context, builder, array_type, array, offset, lanes: int = LANES):
    """The address of element ``offset`` of the 1-D contiguous ``array`` as a pointer to a
    vector of ``lanes`` of its elements."""
    from llvmlite import ir
    data = context.make_array(array_type)(context, builder, array).data
    element = builder.gep(data, [offset])
    return builder.bitcast(element, ir.VectorType(element.type.pointee, lanes).as_pointer())


def _check_array(array):
    from numba.core import types
    if not (isinstance(array, types.Array) and array.ndim == 1 and array.layout == "C"):
        raise TypeError(f"an eight-lane load or store needs a 1-D contiguous array, not {array}")


def _load_code(lanes: int, align: int):
    """The code of a load of ``lanes`` elements from ``array[offset]`` (the first two
    arguments)."""
    def codegen(context, builder, signature, args):
        pointer = _pointer(context, builder, signature.args[0], args[0], args[1], lanes)
        return builder.load(pointer, align=align)
    return codegen


def _load(lanes: int, name: str):
    """The intrinsic ``name(array, offset)``: ``array[offset:offset + lanes]`` as a vector
    (unaligned)."""
    def typer(typingctx, array, offset):
        _check_array(array)
        return (vector_type(array.dtype, lanes)(array, offset),
                _load_code(lanes, array.dtype.bitwidth // 8))
    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = f"``array[offset:offset + {lanes}]`` as a vector (unaligned)."
    return Intrinsic(typer)


def _check_like(array, like):
    if not (_is_vector(like) and like.dtype == array.dtype):
        raise TypeError(f"{like} is no vector of the elements of {array}")


@Intrinsic
def load_like(typingctx, array, offset, like):
    """``array[offset:offset + n]`` as a vector of ``like``'s ``n`` lanes, ``like``'s
    value unused: a loop written once for eight and sixteen lanes passes a vector of the
    width it runs (the zero its sums start from)."""
    _check_array(array)
    _check_like(array, like)
    return (vector_type(array.dtype, like.lanes)(array, offset, like),
            _load_code(like.lanes, array.dtype.bitwidth // 8))


def _lanes_inside(builder, first, size, lanes: int):
    """The ``<lanes x i1>`` mask of the lanes ``l`` with ``0 <= first + l < size``."""
    from llvmlite import ir
    i32 = ir.IntType(32)
    kind = ir.VectorType(i32, lanes)
    columns = builder.add(_splat(builder, builder.trunc(first, i32), kind, lanes),
                          ir.Constant(kind, list(range(lanes))))
    return builder.icmp_unsigned("<", columns,
                                 _splat(builder, builder.trunc(size, i32), kind, lanes))


def _masked(builder, name, result, args):
    """A call of the LLVM intrinsic ``name`` (``llvm.masked.*``) on ``args``."""
    from llvmlite import ir
    from numba.core import cgutils
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(result, [a.type for a in args]), name)
    return builder.call(fn, args)


@Intrinsic
def load_inside(typingctx, array, offset, first, size, fill):
    """``array[offset + l]`` in each lane ``l`` of ``fill``'s where ``0 <= first + l <
    size``, ``fill``'s lane elsewhere: a masked load (``llvm.masked.load``), which reads
    nothing of the lanes outside, so ``offset`` may lie before the array's start or its
    last lanes past its end (a row's columns ``first:first + n`` with those outside the
    row filled: a window's padding)."""
    from numba.core import types
    _check_array(array)
    _check_like(array, fill)

    def codegen(context, builder, signature, args):
        from llvmlite import ir
        n, bits = fill.lanes, array.dtype.bitwidth
        pointer = _pointer(context, builder, signature.args[0], args[0], args[1], n)
        return _masked(builder, f"llvm.masked.load.v{n}f{bits}.p0", args[4].type,
                       [pointer, ir.IntType(32)(bits // 8),
                        _lanes_inside(builder, args[2], args[3], n), args[4]])
    return fill(array, types.intp, types.intp, types.intp, fill), codegen


@Intrinsic
def lanes_of(typingctx, vector):
    """How many lanes ``vector`` has: a constant of its type."""
    from numba.core import types
    if not _is_vector(vector):
        raise TypeError(f"lanes_of needs a vector, not {vector}")

    def codegen(context, builder, signature, args):
        return context.get_constant(types.intp, vector.lanes)
    return types.intp(vector), codegen


load, load_wide = _load(LANES, "load"), _load(WIDE, "load_wide")


@Intrinsic
def store_runs(typingctx, array, offset, gap, value):
    """``value``'s lanes eight at a time into ``array`` at ``offset``, ``offset + gap``,
    ...: a sixteen-lane vector of two blocks of eight channels into their two planes of a
    channel-blocked layout (an eight-lane one is :func:`store`; ``gap = 8``: one
    contiguous store)."""
    from numba.core import types
    _check_array(array)
    if not (_is_vector(value) and value.dtype == array.dtype):
        raise TypeError(f"cannot store {value} into {array}")

    def codegen(context, builder, signature, args):
        from llvmlite import ir
        a_type, (target, at, step, v) = signature.args[0], args
        for k in range(value.lanes // LANES):
            run = v if value.lanes == LANES else builder.shuffle_vector(
                v, v, ir.Constant(ir.VectorType(ir.IntType(32), LANES),
                                  list(range(k * LANES, (k + 1) * LANES))))
            where = builder.add(at, builder.mul(step, at.type(k)))
            builder.store(run, _pointer(context, builder, a_type, target, where),
                          align=array.dtype.bitwidth // 8)
        return context.get_dummy_value()
    return types.void(array, types.intp, types.intp, value), codegen


@Intrinsic
def load_even(typingctx, array, offset):
    """``array[offset:offset + 16:2]`` as a vector: two loads (of elements ``offset`` to
    ``offset + 14``: nothing past the last one read) and a shuffle of their even lanes."""
    _check_array(array)

    def codegen(context, builder, signature, args):
        from llvmlite import ir
        i64, align = ir.IntType(64), array.dtype.bitwidth // 8
        low = builder.load(_pointer(context, builder, signature.args[0], args[0], args[1]),
                           align=align)
        high = builder.load(_pointer(context, builder, signature.args[0], args[0],
                                     builder.add(args[1], i64(LANES - 1))), align=align)
        mask = ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0, 2, 4, 6, 9, 11, 13, 15])
        return builder.shuffle_vector(low, high, mask)
    return vector_type(array.dtype)(array, offset), codegen


@Intrinsic
def prefetch(typingctx, array, offset):
    """A hint to bring the cache line of ``array[offset]`` into the second-level cache
    (``llvm.prefetch``, read, ``prefetcht1``): no load, no fault, no result."""
    from numba.core import types
    _check_array(array)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        _emit_prefetch(builder, builder.gep(data, [args[1]]))
        return context.get_dummy_value()
    return types.void(array, offset), codegen


def _emit_prefetch(builder, pointer):
    """``llvm.prefetch`` (read, into the second level cache: locality 2, data) of the line
    at ``pointer``, or at the address an integer ``pointer`` holds."""
    from llvmlite import ir
    from numba.core import cgutils
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    kind = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
    fn = cgutils.get_or_insert_function(builder.module, kind, "llvm.prefetch.p0")
    at = (builder.inttoptr(pointer, i8p) if isinstance(pointer.type, ir.IntType)
          else builder.bitcast(pointer, i8p))
    builder.call(fn, [at, i32(0), i32(2), i32(1)])


@Intrinsic
def prefetch_address(typingctx, address):
    """:func:`prefetch` of the cache line at the int64 byte ``address`` (a matrix a BLAS
    call reads by its pointer, ``kernels/attention.py``): a hint, no fault where the
    address is not mapped."""
    from numba.core import types

    def codegen(context, builder, signature, args):
        _emit_prefetch(builder, args[0])
        return context.get_dummy_value()
    return types.void(types.int64), codegen


@Intrinsic
def store(typingctx, array, offset, value):
    """``array[offset:offset + lanes] = value`` (unaligned; ``lanes`` the vector's)."""
    from numba.core import types
    _check_array(array)
    if not (_is_vector(value) and value.dtype == array.dtype):
        raise TypeError(f"cannot store {value} into {array}")

    def codegen(context, builder, signature, args):
        pointer = _pointer(context, builder, signature.args[0], args[0], args[1], value.lanes)
        builder.store(args[2], pointer, align=array.dtype.bitwidth // 8)
        return context.get_dummy_value()
    return types.void(array, offset, value), codegen


@Intrinsic
def store_first(typingctx, array, offset, count, value):
    """``array[offset:offset + count] = value[:count]``: the first ``count`` lanes (a
    masked store, ``llvm.masked.store``: nothing past them written, so the vector may
    reach past the array's end)."""
    from numba.core import types
    _check_array(array)
    if not (_is_vector(value) and value.dtype == array.dtype):
        raise TypeError(f"cannot store {value} into {array}")

    def codegen(context, builder, signature, args):
        from llvmlite import ir
        n, bits = value.lanes, array.dtype.bitwidth
        pointer = _pointer(context, builder, signature.args[0], args[0], args[1], n)
        mask = _lanes_inside(builder, context.get_constant(types.intp, 0), args[2], n)
        _masked(builder, f"llvm.masked.store.v{n}f{bits}.p0", ir.VoidType(),
                [args[3], pointer, ir.IntType(32)(bits // 8), mask])
        return context.get_dummy_value()
    return types.void(array, types.intp, types.intp, value), codegen


def _splat(builder, value, kind, lanes: int):
    """A vector of type ``kind`` with the scalar ``value`` in each of its ``lanes``."""
    from llvmlite import ir
    one = builder.insert_element(ir.Constant(kind, ir.Undefined), value, ir.IntType(32)(0))
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
    return builder.shuffle_vector(one, ir.Constant(kind, ir.Undefined), zeros)


def _broadcast(lanes: int, name: str):
    """The intrinsic ``name(scalar)``: a vector of ``lanes`` of ``scalar``."""
    def typer(typingctx, scalar):
        from numba.core import types
        if not isinstance(scalar, (types.Float, types.Integer)):
            raise TypeError(f"cannot broadcast {scalar}")

        def codegen(context, builder, signature, args):
            kind = context.get_value_type(signature.return_type)
            return _splat(builder, args[0], kind, lanes)
        return vector_type(scalar, lanes)(scalar), codegen
    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = f"A vector of ``scalar`` in each of its {lanes} lanes."
    return Intrinsic(typer)


broadcast, broadcast_wide = _broadcast(LANES, "broadcast"), _broadcast(WIDE, "broadcast_wide")


@Intrinsic
def tree_sum(typingctx, vector):
    """``((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7))`` of a float vector's lanes, in
    that order (NumPy's pairwise sum joins its eight running sums so): two shuffles and
    vector adds, then one scalar add."""
    from numba.core import types
    if not (_is_vector(vector) and isinstance(vector.dtype, types.Float)):
        raise TypeError(f"tree_sum needs a float vector, not {vector}")

    def codegen(context, builder, signature, args):
        from llvmlite import ir
        v = args[0]
        for lanes in ([1, 0, 3, 2, 5, 4, 7, 6], [2, 3, 0, 1, 6, 7, 4, 5]):
            mask = ir.Constant(ir.VectorType(ir.IntType(32), LANES), lanes)
            v = builder.fadd(v, builder.shuffle_vector(v, v, mask))
        i32 = ir.IntType(32)
        return builder.fadd(builder.extract_element(v, i32(0)),
                            builder.extract_element(v, i32(4)))
    return vector.dtype(vector), codegen


def _broadcast_at_code(lanes: int, align: int):
    """The code of a vector of ``lanes`` of ``array[offset]`` (the first two arguments)."""
    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        value = builder.load(builder.gep(data, [args[1]]), align=align)
        kind = context.get_value_type(signature.return_type)
        return _splat(builder, value, kind, lanes)
    return codegen


def _broadcast_at(lanes: int, name: str):
    """The intrinsic ``name(array, offset)``: a vector of ``lanes`` of ``array[offset]``."""
    def typer(typingctx, array, offset):
        _check_array(array)
        return (vector_type(array.dtype, lanes)(array, offset),
                _broadcast_at_code(lanes, array.dtype.bitwidth // 8))
    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = (f"A vector of ``array[offset]`` in each of its {lanes} lanes (one "
                     "``vbroadcastss`` from memory; the offset unchecked and never wrapped: "
                     "NumPy-style indexing with a signed offset costs three more "
                     "instructions a load).")
    return Intrinsic(typer)


@Intrinsic
def broadcast_at_like(typingctx, array, offset, like):
    """:func:`broadcast_at` as a vector of ``like``'s lanes (``like``'s value unused, as
    :func:`load_like`'s)."""
    _check_array(array)
    _check_like(array, like)
    return (vector_type(array.dtype, like.lanes)(array, offset, like),
            _broadcast_at_code(like.lanes, array.dtype.bitwidth // 8))


broadcast_at = _broadcast_at(LANES, "broadcast_at")
broadcast_at_wide = _broadcast_at(WIDE, "broadcast_at_wide")


def _same_vectors(*values):
    if not (all(_is_vector(v) for v in values)
            and len({(v.dtype, v.lanes) for v in values}) == 1):
        raise TypeError(f"vector arithmetic needs vectors of one type, not {values}")
    return values[0]


@Intrinsic
def joined(typingctx, low, high):
    """The ``WIDE`` vector of two eight-lane vectors' lanes, ``low``'s first."""
    kind = _same_vectors(low, high)

    def codegen(context, builder, signature, args):
        from llvmlite import ir
        mask = ir.Constant(ir.VectorType(ir.IntType(32), WIDE), list(range(WIDE)))
        return builder.shuffle_vector(args[0], args[1], mask)
    return vector_type(kind.dtype, WIDE)(low, high), codegen


def _half(name, first):
    """An intrinsic taking the eight lanes of a ``WIDE`` vector from lane ``first``."""
    def typer(typingctx, wide):
        if not (_is_vector(wide) and wide.lanes == WIDE):
            raise TypeError(f"{name} needs a {WIDE}-lane vector, not {wide}")

        def codegen(context, builder, signature, args):
            from llvmlite import ir
            mask = ir.Constant(ir.VectorType(ir.IntType(32), LANES),
                               list(range(first, first + LANES)))
            return builder.shuffle_vector(args[0], args[0], mask)
        return vector_type(wide.dtype)(wide), codegen
    typer.__name__ = typer.__qualname__ = name
    return Intrinsic(typer)


low_half = _half("low_half", 0)
high_half = _half("high_half", LANES)


def _shuffle_pair(name, lanes_of, doc):
    """An intrinsic ``name(a, b)``: lanes ``lanes_of(n)`` of ``a``'s and ``b``'s ``n``
    lanes side by side (``a``'s ``0 .. n - 1``, ``b``'s ``n .. 2n - 1``), ``n`` lanes."""
    def typer(typingctx, a, b):
        kind = _same_vectors(a, b)

        def codegen(context, builder, signature, args):
            from llvmlite import ir
            mask = ir.Constant(ir.VectorType(ir.IntType(32), kind.lanes),
                               lanes_of(kind.lanes))
            return builder.shuffle_vector(args[0], args[1], mask)
        return kind(a, b), codegen
    typer.__name__, typer.__qualname__, typer.__doc__ = name, name, doc
    return Intrinsic(typer)


even_lanes = _shuffle_pair("even_lanes", lambda n: list(range(0, 2 * n, 2)),
                           "The even lanes of ``a`` then ``b`` (a deinterleave).")
odd_lanes = _shuffle_pair("odd_lanes", lambda n: list(range(1, 2 * n, 2)),
                          "The odd lanes of ``a`` then ``b``.")
next_lane = _shuffle_pair("next_lane", lambda n: list(range(1, n + 1)),
                          "``a``'s lanes one on, ``b``'s first last (``a1 .. a(n-1) b0``).")
next_two_lanes = _shuffle_pair("next_two_lanes", lambda n: list(range(2, n + 2)),
                               "``a``'s lanes two on, ``b``'s first two last.")
zip_low = _shuffle_pair("zip_low", lambda n: [k // 2 + n * (k % 2) for k in range(n)],
                        "``a0 b0 a1 b1 ..``: the first halves of ``a`` and ``b`` interleaved.")
zip_high = _shuffle_pair("zip_high", lambda n: [n // 2 + k // 2 + n * (k % 2) for k in range(n)],
                         "The second halves of ``a`` and ``b`` interleaved.")


def _binary(name, float_op, int_op):
    """An intrinsic applying ``builder.<float_op>`` (floats) or ``<int_op>`` lane-wise."""
    def typer(typingctx, a, b):
        from numba.core import types
        kind = _same_vectors(a, b)
        op = float_op if isinstance(kind.dtype, types.Float) else int_op

        def codegen(context, builder, signature, args):
            return getattr(builder, op)(args[0], args[1])
        return kind(a, b), codegen
    typer.__name__ = typer.__qualname__ = name
    return Intrinsic(typer)


add = _binary("add", "fadd", "add")
subtract = _binary("subtract", "fsub", "sub")
multiply = _binary("multiply", "fmul", "mul")
divide = _binary("divide", "fdiv", "sdiv")


@Intrinsic
def fma(typingctx, a, b, c):
    """``a * b + c`` lane-wise, fused where the CPU has FMA (``llvm.fmuladd``)."""
    kind = _same_vectors(a, b, c)

    def codegen(context, builder, signature, args):
        return _call(builder, f"llvm.fmuladd.v{kind.lanes}f{kind.dtype.bitwidth}", args)
    return kind(a, b, c), codegen


def _call(builder, name, args):
    """A call of the LLVM intrinsic ``name`` on vectors of one type, returning one."""
    from llvmlite import ir
    from numba.core import cgutils
    vector = args[0].type
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vector, [vector] * len(args)), name)
    return builder.call(fn, list(args))


def _compare(context, builder, kind, op, a, b):
    from numba.core import types
    if isinstance(kind.dtype, types.Float):
        return builder.fcmp_ordered(op, a, b)
    return builder.icmp_signed(op, a, b)


def _choose(name, op, doc):
    """An intrinsic ``a <op> b ? a : b`` lane-wise."""
    def typer(typingctx, a, b):
        kind = _same_vectors(a, b)

        def codegen(context, builder, signature, args):
            return builder.select(_compare(context, builder, kind, op, *args), *args)
        return kind(a, b), codegen
    typer.__name__, typer.__qualname__, typer.__doc__ = name, name, doc
    return Intrinsic(typer)


maximum = _choose("maximum", ">", "``a > b ? a : b`` lane-wise (``vmaxps``).")
minimum = _choose("minimum", "<", "``a < b ? a : b`` lane-wise (``vminps``).")


@Intrinsic
def maximum_nan(typingctx, a, b):
    """The larger of ``a`` and ``b`` lane-wise, NaN where either is NaN (``llvm.maximum``:
    ``vmaxps`` and a blend of the unordered lanes on AVX)."""
    kind = _same_vectors(a, b)

    def codegen(context, builder, signature, args):
        return _call(builder, f"llvm.maximum.v{kind.lanes}f{kind.dtype.bitwidth}", args)
    return kind(a, b), codegen


@Intrinsic
def where_greater(typingctx, a, b, x, y):
    """``a > b ? x : y`` lane-wise (``x``, ``y`` may be of another element type: with
    ``x = a, y = b`` the maximum, with positions the place it came from)."""
    kind = _same_vectors(a, b)
    _same_vectors(x, y)

    def codegen(context, builder, signature, args):
        return builder.select(_compare(context, builder, kind, ">", args[0], args[1]),
                              args[2], args[3])
    return x(a, b, x, y), codegen


@Intrinsic
def transpose(typingctx, src, src_offset, src_stride, dst, dst_offset, dst_stride):
    """An 8x8 block transposed between arrays: ``dst[dst_offset + j * dst_stride + i] =
    src[src_offset + i * src_stride + j]`` for ``i, j < 8`` (sixteen half-row loads paired
    into eight vectors, sixteen in-lane shuffles, eight stores; ``src`` and ``dst`` must
    not overlap)."""
    from numba.core import types
    _check_array(src)
    _check_array(dst)
    if src.dtype != dst.dtype or src.dtype.bitwidth != 32:
        raise TypeError(f"an 8x8 transpose needs two arrays of one 32-bit type, not {src}, {dst}")

    def codegen(context, builder, signature, args):
        from llvmlite import ir
        s_type, _, _, d_type = signature.args[:4]
        source, s0, s_step, target, d0, d_step = args
        align = src.dtype.bitwidth // 8
        data = context.make_array(s_type)(context, builder, source).data
        quad = ir.VectorType(data.type.pointee, LANES // 2).as_pointer()

        def half(row, column):    # src row ``row``, columns ``column:column + 4``
            at = builder.add(s0, builder.add(builder.mul(s_step, s0.type(row)),
                                             s0.type(column)))
            return builder.load(builder.bitcast(builder.gep(data, [at]), quad), align=align)
        whole = ir.Constant(ir.VectorType(ir.IntType(32), LANES), list(range(LANES)))
        # row i's half k (k = 0: columns 0-3) beside row i + 4's: each 128-bit lane then
        # holds a 4x4 block, transposed in its lane
        rows = [builder.shuffle_vector(half(i, 4 * k), half(i + 4, 4 * k), whole)
                for k in (0, 1) for i in range(4)]
        for column, row in enumerate(_transposed(builder, rows, ir)):
            builder.store(row, _pointer(context, builder, d_type, target,
                                        builder.add(d0, builder.mul(d_step, d0.type(column)))),
                          align=align)
        return context.get_dummy_value()
    return types.void(src, src_offset, src_stride, dst, dst_offset, dst_stride), codegen


def _transposed(builder, rows, ir):
    """The columns of eight rows paired as :func:`transpose` loads them (``rows[k * 4 +
    i]`` holds columns ``4k:4k + 4`` of source rows ``i`` and ``i + 4``): a 4x4 transpose
    in each 128-bit lane (``unpcklps``/``unpckhps``, then ``shufps``), no shuffle across
    lanes."""
    def shuffle(a, b, lanes):
        return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), LANES),
                                                        lanes))
    low, high = [0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15]
    first, second = [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]
    columns = []
    for r0, r1, r2, r3 in (rows[:4], rows[4:]):
        t0, t1 = shuffle(r0, r1, low), shuffle(r0, r1, high)
        t2, t3 = shuffle(r2, r3, low), shuffle(r2, r3, high)
        columns += [shuffle(t0, t2, first), shuffle(t0, t2, second),
                    shuffle(t1, t3, first), shuffle(t1, t3, second)]
    return columns



@Intrinsic
def wide_loops(typingctx):
    """Called first in a loop: its plain ``for`` loops vectorise with sixteen lanes where
    the CPU runs them at full width (``isa.full_width``). LLVM prefers 256-bit vectors on
    every AVX-512 CPU (its ``prefer-256-bit`` tuning), so an auto-vectorised loop runs
    eight lanes even where one ``zmm`` instruction does sixteen in the same time; this sets
    the compiled function's ``"prefer-vector-width"="512"``, which LLVM's X86 backend
    reads per function. Only the width changes, not the arithmetic of an element: an
    elementwise loop gives the same bits (the GELU's, sigmoid's and LSTM cell's loops
    with transcendentals: 18-25% less time at 512K elements on an Intel Xeon). A no-op
    elsewhere (AVX2, or Zen 4's half-width units)."""
    from numba.core import types

    from . import isa

    def codegen(context, builder, signature, args):
        if isa.full_width():   # (llvmlite checks attribute names against a list of its
            # own, without the string attributes LLVM takes: added to the set directly)
            set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()
    return types.void(), codegen
