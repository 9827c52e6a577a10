"""``dg.profiler``: where the time goes, eager and compiled, shaped like ``torch.profiler``.

>>> import dualgraph as dg
>>> with dg.profiler.profile(record_shapes=True, profile_memory=True) as prof:
...     y = dg.ones(64, 64) @ dg.ones(64, 64)
>>> print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=5))
... # doctest: +SKIP
>>> prof.export_chrome_trace("trace.json")   # doctest: +SKIP

docs/profiler.md has the whole story: schedules, ``record_function``, compiled programs
node by node, the Chrome trace.
"""
from .events import EventList, FunctionEvent, FunctionEventAvg
from .profile import (ProfilerAction, ProfilerActivity, profile, record_function, schedule,
                      tensorboard_trace_handler)

__all__ = ["EventList", "FunctionEvent", "FunctionEventAvg", "ProfilerAction",
           "ProfilerActivity", "profile", "record_function", "schedule",
           "tensorboard_trace_handler"]
