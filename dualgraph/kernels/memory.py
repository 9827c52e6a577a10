"""Raw memory for loops that find their arrays by address: 64-bit words (plain and atomic)
and float32 vectors at a data pointer; and for loops that run other loops' entries, an
indirect call and a clock.

Three kinds of loop need them: one that updates many parameters in one call, given a table
of their arrays (``optim.py``), the matrix-vector products whose rows two threads claim
from a job board in shared memory (``matvec.py``), and the relay that runs a job on
OpenBLAS's threads and notes when it started (``blas_threads.py``). Each intrinsic writes
its few LLVM instructions itself; llvmlite and Numba are imported inside them, only when a
loop that uses them compiles.

The atomics are sequentially consistent: a thread that sees a job's ticket also sees the
fields written before it.
"""
from __future__ import annotations

import os
import sys

from . import Intrinsic, helper
from .native import DATA_OFFSET, DIMS_OFFSET


def _word_pointer(builder, address):
    from llvmlite import ir
    return builder.inttoptr(address, ir.IntType(64).as_pointer())


@Intrinsic
def word(typingctx, address):
    """The int64 at ``address`` (a plain load)."""
    from numba.core import types

    def codegen(context, builder, signature, args):
        return builder.load(_word_pointer(builder, args[0]))
    return types.int64(types.int64), codegen


@Intrinsic
def load(typingctx, address):
    """The int64 at ``address``, read atomically (never hoisted out of a polling loop)."""
    from numba.core import types

    def codegen(context, builder, signature, args):
        return builder.load_atomic(_word_pointer(builder, args[0]), "seq_cst", 8)
    return types.int64(types.int64), codegen


@Intrinsic
def store(typingctx, address, value):
    """Write the int64 ``value`` at ``address`` atomically."""
    from numba.core import types

    def codegen(context, builder, signature, args):
        builder.store_atomic(args[1], _word_pointer(builder, args[0]), "seq_cst", 8)
        return context.get_dummy_value()
    return types.void(types.int64, types.int64), codegen


@Intrinsic
def add(typingctx, address, value):
    """Add ``value`` to the int64 at ``address`` atomically; returns the old value."""
    from numba.core import types

    def codegen(context, builder, signature, args):
        return builder.atomic_rmw("add", _word_pointer(builder, args[0]), args[1], "seq_cst")
    return types.int64(types.int64, types.int64), codegen


@Intrinsic
def compare_exchange(typingctx, address, expected, new):
    """Write ``new`` at ``address`` if it holds ``expected``, atomically; returns what it
    held (``expected`` when the write happened)."""
    from numba.core import types

    def codegen(context, builder, signature, args):
        pair = builder.cmpxchg(_word_pointer(builder, args[0]), args[1], args[2], "seq_cst",
                               "seq_cst")
        return builder.extract_value(pair, 0)
    return types.int64(types.int64, types.int64, types.int64), codegen


@Intrinsic
def call(typingctx, function, argument):
    """Call the C function ``void function(int64)`` at address ``function`` (a job entry,
    ``build.entry``) with ``argument``."""
    from llvmlite import ir
    from numba.core import types

    def codegen(context, builder, signature, args):
        kind = ir.FunctionType(ir.VoidType(), [ir.IntType(64)])
        builder.call(builder.inttoptr(args[0], kind.as_pointer()), [args[1]])
        return context.get_dummy_value()
    return types.void(types.int64, types.int64), codegen


@Intrinsic
def clock_ns(typingctx):
    """Linux's ``CLOCK_MONOTONIC`` in nanoseconds (``clock_gettime``, a vDSO call of tens of
    nanoseconds; the same clock on every core); 0 where the OS has no such call."""
    from llvmlite import ir
    from numba.core import cgutils, types

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        if not sys.platform.startswith("linux"):
            return i64(0)
        spec = builder.bitcast(cgutils.alloca_once(builder, ir.ArrayType(i64, 2)),
                               i64.as_pointer())      # (struct timespec: seconds, nanoseconds)
        clock = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i32, [i32, i64.as_pointer()]), "clock_gettime")
        builder.call(clock, [i32(1), spec])             # (1: CLOCK_MONOTONIC)
        seconds, nanoseconds = builder.load(spec), builder.load(builder.gep(spec, [i32(1)]))
        return builder.add(builder.mul(seconds, i64(1_000_000_000)), nanoseconds)
    return types.int64(), codegen


@Intrinsic
def pause(typingctx):
    """The CPU's spin-wait hint (x86 ``pause``, ARM ``yield``): a polling loop leaves the
    core's shared resources to other work and uses less power; nothing on other CPUs."""
    from llvmlite import ir
    from numba.core import cgutils, types

    def codegen(context, builder, signature, args):
        triple = builder.module.triple or ""
        if triple.startswith(("x86_64", "i686", "i386")):
            hint = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
            builder.call(hint, [])
        elif triple.startswith(("aarch64", "arm64")):
            hint = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(32)]),
                "llvm.aarch64.hint")
            builder.call(hint, [ir.IntType(32)(1)])
        return context.get_dummy_value()
    return types.void(), codegen


@Intrinsic
def yield_cpu(typingctx):
    """``sched_yield()``: a polling thread lets another runnable thread have its core (on
    a machine with more threads than cores the one it waits for may be among them);
    nothing where the OS has no such call."""
    from llvmlite import ir
    from numba.core import cgutils, types

    def codegen(context, builder, signature, args):
        if os.name == "posix":
            call = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield")
            builder.call(call, [])
        return context.get_dummy_value()
    return types.void(), codegen


@Intrinsic
def float32_array(typingctx, data, length):
    """The 1-D float32 array of ``length`` elements at the data pointer ``data`` (a view:
    whoever passed the address keeps the memory alive)."""
    from numba.core import cgutils, types
    from numba.np.arrayobj import make_array, populate_array
    vector = types.Array(types.float32, 1, "C")

    def codegen(context, builder, signature, args):
        array = make_array(vector)(context, builder)
        pointer = context.get_data_type(types.float32).as_pointer()
        populate_array(array, data=builder.inttoptr(args[0], pointer), shape=[args[1]],
                       strides=[cgutils.intp_t(4)], itemsize=cgutils.intp_t(4), meminfo=None)
        return array._getvalue()
    return vector(types.int64, types.int64), codegen


@helper(inline="always")
def float32_vector(address):
    """The 1-D float32 ndarray whose ``PyObject *`` is ``address`` (its ``id()``), as an
    array: data pointer and length read from NumPy's array struct, at the offsets
    ``native.py``'s entries read (checked against NumPy at run time there)."""
    return float32_array(word(address + DATA_OFFSET), word(word(address + DIMS_OFFSET)))
