"""dualgraph: write dynamic, run static.

>>> import dualgraph as dg
>>> x = dg.tensor([1.0, 2.0], requires_grad=True)
>>> (x * x).sum().backward()
>>> x.grad
tensor([2., 4.])
"""
# first: where DUALGRAPH_CPU_TUNING asks for the malloc settings, before big allocations
from .kernels.tuning import configure as tune_cpu  # noqa: F401
from ._warnings import install as _silence_float_warnings
from ._gc import freeze_import_time_objects as _freeze_import_time_objects
from . import autograd, dtypes  # noqa: F401
from . import ops  # noqa: F401  (registers every op and binds Tensor methods)
from .autograd import (enable_grad, inference_mode, is_grad_enabled, no_grad,  # noqa: F401
                       set_grad_enabled)
from .dtypes import (bfloat16, bool_ as bool, double, float, float16, float32,  # noqa: F401
                     float64, get_default_dtype, half, int, int8, int16, int32, int64,
                     long, set_default_dtype, uint8, uint16, uint32, uint64)
from .dtypes import int16 as short  # noqa: F401
from .dtypes import DType as dtype  # noqa: F401
from .dtypes import (MemoryFormat as memory_format, channels_last,  # noqa: F401
                     channels_last_3d, contiguous_format, preserve_format, strided)
from .dtypes import Layout as layout  # noqa: F401
from .ops.control import cond, scan, while_loop  # noqa: F401
from .ops.arrange import *  # noqa: F401,F403
from .ops.conv import *  # noqa: F401,F403
from .ops.creation import *  # noqa: F401,F403
from .ops.elementwise import *  # noqa: F401,F403
from .ops.index import *  # noqa: F401,F403
from .ops.linalg import *  # noqa: F401,F403
from .ops.reduce import *  # noqa: F401,F403
from .ops.shape import *  # noqa: F401,F403
from .ops.signal import *  # noqa: F401,F403
from .ops.special import *  # noqa: F401,F403
from .ops.special_series import *  # noqa: F401,F403
from .ops.compose import *  # noqa: F401,F403
from .ops.elementwise_compose import *  # noqa: F401,F403
from .ops.float_bits import *  # noqa: F401,F403
from .ops.selection import *  # noqa: F401,F403
from .ops.foreach import *  # noqa: F401,F403
from .ops.windows import conv3d, conv_transpose3d, max_pool3d  # noqa: F401
from .ops.decompositions import det, logdet, matrix_exp, slogdet  # noqa: F401
from .ops.decompositions import METHODS as _matrix_methods
# torch's top-level forms: torch.svd returns V (some=True), torch.qr takes some=
inverse, pinverse, svd, qr, cholesky, triangular_solve = (_matrix_methods[k] for k in (
    "inverse", "pinverse", "svd", "qr", "cholesky", "triangular_solve"))
# torch.lu gives (LU, pivots) and torch.lu_solve takes the right-hand side first
from .ops.lu import _torch_lu as lu, _torch_lu_solve as lu_solve, lu_unpack  # noqa: F401
from . import distributed, distributions, graph, io, nn, optim, utils  # noqa: F401,E402
from . import func, jit, onnx, profiler, static  # noqa: F401,E402
from .func import vmap  # noqa: F401,E402
from . import accelerator, backends, cpu, cuda, linalg, sparse, special, version  # noqa: F401,E402
from .sparse import sparse_coo_tensor  # noqa: F401,E402
# torch's top-level forms of nn.functional's functions (the same arguments in the same order)
from .nn.functional import (alpha_dropout, bilinear, celu_, channel_shuffle,  # noqa: F401,E402
                            cosine_similarity, hardshrink, pairwise_distance, pixel_shuffle,
                            pixel_unshuffle, prelu, rrelu, selu_, threshold, threshold_)
from . import amp  # noqa: F401,E402
from .amp import (autocast, get_autocast_dtype, is_autocast_available,  # noqa: F401,E402
                  is_autocast_enabled)
from ._namespace import *  # noqa: F401,F403,E402
from ._aten_forms import *  # noqa: F401,F403,E402
from ._aten_forms import install_methods as _install_aten_methods  # noqa: E402
_install_aten_methods()
from .devices import device  # noqa: F401,E402
from .io import load, save  # noqa: F401,E402
from .capture import compile  # noqa: F401,E402
from .shapes import ShapeError  # noqa: F401
from .dispatch import (OpError, OpIndexError, OpShapeError, OpTypeError,  # noqa: F401
                       OpValueError)
from .errors import CaptureError  # noqa: F401
from .tensor import Size, Tensor  # noqa: F401
from ._version import __version__  # noqa: F401
# torch's float constants (``-torch.inf`` in a masked_fill, ``2 * torch.pi``)
from math import e, inf, nan, pi  # noqa: F401,E402

from .ops import numpy_names as _numpy_names  # noqa: E402
from .ops import out_argument as _out_argument  # noqa: E402
for _names in (globals(), vars(special), vars(linalg)):   # torch.max(a, b, out=a)
    _out_argument.install(_names)
del _names
_numpy_names.install(globals())                        # torch.sum(x, axis=0)
_numpy_names.install(dict(vars(Tensor)), owner=Tensor)   # x.sum(axis=0, keepdims=True)
_silence_float_warnings()
_freeze_import_time_objects()   # last: what importing dualgraph made is frozen too
