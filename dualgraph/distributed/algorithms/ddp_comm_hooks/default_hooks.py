"""The plain hooks: an averaging allreduce, and the same on a 16-bit copy of the bucket.

A hook's ``graph_form(state, bucket) -> Tensor`` is what DDP traces for a bucket in a step
compiled by ``dg.compile``: here ``compressed_all_reduce(..., dtype)`` (which the lowering
rule ``compress_all_reduces`` makes a cast, an allreduce and a cast back), or a plain
``all_reduce``. A hook without one runs eagerly only.

>>> ddp.register_comm_hook(None, fp16_compress_hook)
"""
from __future__ import annotations

from ... import collectives as dist
from ....dtypes import bfloat16, float16
from ....ops import collective as _c
from ...groups import resolve


def group_of(process_group, bucket):
    """The group a hook reduces over: its state's ``process_group`` if given, else the
    DDP's (so that a hook registered with ``None`` on a DDP over a group stays in it)."""
    return process_group if process_group is not None else bucket.process_group


def allreduce_hook(process_group, bucket) -> dist.Future:
    """Average the bucket over the ranks (of ``process_group``, the state; None: the
    DDP's): divide by their number, allreduce (sum)."""
    return _allreduce_fut(bucket.buffer(), group_of(process_group, bucket))


def _allreduce_graph_form(process_group, bucket):
    group = group_of(process_group, bucket)
    return _c.all_reduce(bucket.buffer() / dist.get_world_size(group), "SUM", resolve(group))


allreduce_hook.graph_form = _allreduce_graph_form


def _allreduce_fut(tensor, process_group) -> dist.Future:
    tensor.div_(dist.get_world_size(process_group))
    return dist.all_reduce(tensor, group=process_group, async_op=True).get_future().then(
        lambda fut: fut.value()[0])


def _compress_hook(dtype):
    def hook(process_group, bucket) -> dist.Future:
        buffer, group = bucket.buffer(), group_of(process_group, bucket)
        compressed = (buffer / dist.get_world_size(group)).to(dtype)
        fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()

        def decompress(fut):
            buffer.copy_(fut.value()[0])
            return buffer
        return fut.then(decompress)
    def graph_form(process_group, bucket):   # (under dg.compile)
        group = group_of(process_group, bucket)
        return _c.compressed_all_reduce(bucket.buffer() / dist.get_world_size(group), "SUM",
                                        dtype, resolve(group))
    hook.graph_form = graph_form
    return hook


fp16_compress_hook = _compress_hook(float16)
fp16_compress_hook.__name__ = "fp16_compress_hook"
fp16_compress_hook.__doc__ = """Allreduce the bucket as float16 (half the bytes), then
write the average back in the gradients' dtype."""

bf16_compress_hook = _compress_hook(bfloat16)
bf16_compress_hook.__name__ = "bf16_compress_hook"
bf16_compress_hook.__doc__ = """Allreduce the bucket as bfloat16 (half the bytes, float32's
range), then write the average back in the gradients' dtype."""
