"""``dg.backends.mha``: torch's switch for the fast path of ``MultiheadAttention`` and
``TransformerEncoder`` in inference. dualgraph has one path; the switch decides only
whether ``TransformerEncoder`` zeroes its padded positions as torch's nested tensors do
(nn/encoder_fastpath.py). Compiled graphs are guarded on it (capture/guards.py)."""
from ..dispatch import mha_fastpath


def get_fastpath_enabled() -> bool:
    return mha_fastpath[0]


def set_fastpath_enabled(value: bool) -> None:
    mha_fastpath[0] = bool(value)
