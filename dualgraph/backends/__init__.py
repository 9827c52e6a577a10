"""``dg.backends``: the flags of torch.backends that programs set, for a CPU-only framework.

Programs written for GPUs set these at start-up (``dg.backends.cudnn.benchmark = True``,
``dg.backends.cuda.matmul.allow_tf32 = True``) and ask ``dg.backends.mps.is_available()``.
The flags hold what is assigned, with a CPU-only torch's defaults, and change nothing:
dualgraph has no cuDNN, CUDA or MPS backend.

>>> import dualgraph as dg
>>> dg.backends.cudnn.benchmark = True
>>> dg.backends.mps.is_available()
False
"""
from . import cuda, cudnn, mha, mps  # noqa: F401
