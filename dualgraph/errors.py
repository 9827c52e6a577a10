"""Errors shared across layers (layer 0: no dualgraph imports)."""
from __future__ import annotations


class CaptureError(RuntimeError):
    """Code that can't become part of a static graph, named by the user's file and line.

    ``location`` is ``file:line``; ``reason`` a short phrase ("item() on a traced tensor");
    ``fix`` the one-line suggestion shown to the user.
    """

    def __init__(self, reason: str, location: str, fix: str):
        self.reason, self.location, self.fix = reason, location, fix
        super().__init__(f"{location}: {reason} can't be captured into a static graph. {fix}")


class EagerFirstCall(CaptureError):
    """Code whose first call must run eagerly and whose later calls trace (a lazy layer
    creating its parameters): compile runs that call's Python eagerly and traces the next
    call, instead of baking the first call's side effects into a graph."""


CONCRETE_FIX = ("Use dg.cond / dg.where for tensor-dependent choices (or dg.jit.to_static), "
                "or move this line out of the compiled function.")
