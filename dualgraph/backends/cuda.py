"""``dg.backends.cuda``: settable flags with torch's defaults; there is no CUDA backend."""
from types import SimpleNamespace

# dg.backends.cuda.matmul.allow_tf32 = True and the like: kept, without effect
matmul = SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
                         allow_bf16_reduced_precision_reduction=True)
_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def is_built() -> bool:
    """False: dualgraph was not built with CUDA."""
    return False


def enable_flash_sdp(enabled: bool) -> None:
    _sdp["flash"] = bool(enabled)


def enable_mem_efficient_sdp(enabled: bool) -> None:
    _sdp["mem_efficient"] = bool(enabled)


def enable_math_sdp(enabled: bool) -> None:
    _sdp["math"] = bool(enabled)


def flash_sdp_enabled() -> bool:
    return _sdp["flash"]


def mem_efficient_sdp_enabled() -> bool:
    return _sdp["mem_efficient"]


def math_sdp_enabled() -> bool:
    return _sdp["math"]
