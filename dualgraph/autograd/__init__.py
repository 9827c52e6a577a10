"""Eager autograd: the tape (recorded by dispatch), the backward engine and utilities."""
from .engine import backward, grad  # noqa: F401
from .gradcheck import GradcheckError, gradcheck  # noqa: F401
from .tape import (detect_anomaly, enable_grad, inference_mode,  # noqa: F401
                   is_grad_enabled, no_grad, set_detect_anomaly, set_grad_enabled)
from .function import Function, FunctionCtx, once_differentiable  # noqa: F401
from . import functional  # noqa: F401,E402
from . import graph  # noqa: F401,E402
