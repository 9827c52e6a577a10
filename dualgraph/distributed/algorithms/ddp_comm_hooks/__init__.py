"""Communication hooks for ``DistributedDataParallel.register_comm_hook(state, hook)``.

A hook takes its ``state`` and a :class:`~dualgraph.distributed.GradBucket` and returns a
:class:`~dualgraph.distributed.Future` whose value is the bucket's flat gradient averaged
over the ranks (torch's contract). The built-ins, by module as in torch:

- ``default_hooks``: ``allreduce_hook`` (what DDP does without a hook),
  ``fp16_compress_hook`` and ``bf16_compress_hook`` (the bucket travels in 16 bits);
- ``topk_hook``: ``TopKState`` and ``topk_hook``, top-k sparsification with error feedback;
- ``powerSGD_hook``: ``PowerSGDState`` and ``powerSGD_hook``, low-rank compression.

>>> from dualgraph.distributed.algorithms.ddp_comm_hooks import default_hooks
>>> ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
"""
from . import default_hooks, powerSGD_hook, topk_hook  # noqa: F401
