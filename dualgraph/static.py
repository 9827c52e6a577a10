"""``dg.static``: define-then-run graphs with placeholders and a session (TF1 style)."""
from .capture.static import (Program, Session, TrainOp, gradients, minimize,  # noqa: F401
                             placeholder)
