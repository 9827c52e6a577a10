"""Learning-rate schedulers a trace may step.

``scheduler.step()`` inside a compiled training step (``loss.backward(); optimizer.step();
scheduler.step()``) is Python that changes Python state: the scheduler's epoch counter and
its last rates, and the optimiser's ``group["lr"]`` (or momentum) computed from them. A
graph can't stand for it: replayed, it would write the rates of the traced call at every
call while the counter stayed where the trace left it (the schedule froze, silently).
:class:`Steps` notes the schedulers reachable from the function and their state before a
trace; a trace that stepped one can't be one graph (``compile.py`` then runs the function's
Python at every call, which steps the scheduler as eager does), and an aborted trace puts
the schedulers and their optimisers' hyper-parameters back, so that the run that follows
steps from the same state.

>>> import dualgraph as dg
>>> opt = dg.optim.SGD([dg.zeros(1, requires_grad=True)], lr=0.1)
>>> sched = dg.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
>>> steps = Steps({"sched": sched})
>>> opt.step()
>>> sched.step()
>>> steps.stepped(), opt.param_groups[0]["lr"]
(True, 0.05)
>>> steps.restore()
>>> steps.stepped(), opt.param_groups[0]["lr"]
(False, 0.1)
"""
from __future__ import annotations

from ..errors import CaptureError
from .escape import reachable, user_code
from .pyrandom import defined_at
from .scope import is_scheduler


class Steps:
    """The schedulers reachable from ``roots`` (name -> object) and, before a trace, their
    attributes and their optimisers' group values (the parameter lists aside)."""

    def __init__(self, roots: dict):
        found = {id(s): s for _, s in reachable({**roots, **user_code(roots)}, is_scheduler)}
        self.schedulers = list(found.values())
        self.before = [_state(s) for s in self.schedulers]

    def stepped(self) -> bool:
        """Whether any of them was stepped since (its epoch or step count moved)."""
        return any(_counters(vars(s)) != _counters(attrs)
                   for s, (attrs, _) in zip(self.schedulers, self.before))

    def restore(self) -> None:
        """Put their attributes and their optimisers' hyper-parameters back."""
        for s, (attrs, groups) in zip(self.schedulers, self.before):
            vars(s).clear()
            vars(s).update(attrs)
            for group, saved in zip(s.optimizer.param_groups, groups):
                group.update(saved)


def _state(s) -> tuple:
    return (dict(vars(s)), [{k: v for k, v in g.items() if k != "params"}
                            for g in s.optimizer.param_groups])


def _counters(attrs: dict) -> tuple:
    return attrs.get("last_epoch"), attrs.get("_step_count")


class SchedulerStep(CaptureError):
    """A trace stepped a learning-rate scheduler (see the module docstring)."""

    why_every_call = "it steps a learning-rate scheduler"

    def __init__(self, fn):
        super().__init__(
            "a learning-rate scheduler was stepped while tracing: a graph would write the "
            "traced call's learning rates at every call and never advance the schedule",
            defined_at(fn),
            "Call scheduler.step() outside the compiled function (after it returns); the "
            "learning rates it sets then become graph inputs, one graph for the schedule.")
