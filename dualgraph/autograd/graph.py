"""``torch.autograd.graph``'s saved tensor hooks: ``saved_tensors_hooks(pack, unpack)``,
``save_on_cpu`` and ``disable_saved_tensors_hooks``.

Inside a ``saved_tensors_hooks`` block, each op recorded for autograd hands the tensors its
VJP reads (``OpDef.saves``) to ``pack_hook`` and keeps what that returns; the VJP gets
``unpack_hook(packed)`` when backward reaches it (tape.pack_saved and unpacked_inputs).
Offloading and compression code stores activations elsewhere this way. Blocks nest, the
innermost pair applies. Not covered: a custom ``autograd.Function``'s
``ctx.save_for_backward`` tensors and a checkpoint's are kept as they are (the hooks do
not see them), and a ``create_graph=True`` backward through a packed node is an error
(the unpacked tensors have no history).

Under ``dg.compile`` the hooks are Python that runs at each backward, which a compiled
graph does not: entering the block, or recording an op under a block entered outside the
compiled function, is a graph break (the call runs eagerly). ``save_on_cpu``'s hooks are
the identity on the CPU: it is no break.
"""
from __future__ import annotations

from .._helpers import format_site, user_site
from ..dispatch import modes
from ..errors import CaptureError
from .tape import _departures_lock, departures, grad_mode


class saved_tensors_hooks:
    """``with torch.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook):`` the ops
    recorded inside pass the tensors saved for their backward through ``pack_hook``, and
    their backward reads ``unpack_hook`` of what it returned."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self):
        entry = None if self.pack_hook is None else (self.pack_hook, self.unpack_hook)
        if entry is not None and modes.building_graph():
            raise CaptureError(
                "saved_tensors_hooks", format_site(user_site()),
                "Its pack and unpack hooks run Python for each saved tensor: the call runs "
                "eagerly (a graph break). Leave the block out of the compiled function.")
        if grad_mode.saved_hooks_off is not None:
            raise RuntimeError(grad_mode.saved_hooks_off)
        grad_mode.saved_hooks = grad_mode.saved_hooks + (entry,)
        with _departures_lock:
            departures["saved_hooks"] += 1
        return self

    def __exit__(self, *exc):
        grad_mode.saved_hooks = grad_mode.saved_hooks[:-1]
        with _departures_lock:
            departures["saved_hooks"] -= 1
        return False


class save_on_cpu(saved_tensors_hooks):
    """Saved tensors kept on the CPU and moved back to their device for backward, as
    torch's: dualgraph's tensors are all on the CPU, so its hooks are the identity (None:
    nothing packed), and the block only keeps an outer ``saved_tensors_hooks`` from
    applying inside it. No graph break under ``dg.compile``; ``pin_memory`` is accepted
    and has no effect."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda"):
        super().__init__(None, None)


class disable_saved_tensors_hooks:
    """Inside the block, entering ``saved_tensors_hooks`` raises ``RuntimeError(
    error_message)`` (for code whose saved tensors must not be moved)."""

    def __init__(self, error_message: str):
        self.error_message = error_message

    def __enter__(self):
        self.prev = grad_mode.saved_hooks_off
        grad_mode.saved_hooks_off = self.error_message
        return self

    def __exit__(self, *exc):
        grad_mode.saved_hooks_off = self.prev
        return False
