"""What the fuzzers share: the loader fuzzers' settings, outcome statistics, a hang check
and mutations of JSON documents; the program generators' long campaigns (``campaign``).

``DG_FUZZ_EXAMPLES`` sets the examples per fuzz test (CI runs a few, different each run);
``--hypothesis-show-statistics`` lists the outcomes each test saw, e.g.::

    DG_FUZZ_EXAMPLES=20000 PYTHONPATH=$PWD python -m pytest -p no:benchmark \\
        tests/test_io_fuzz.py tests/test_graph_fuzz.py --hypothesis-show-statistics
"""
import argparse
import collections
import contextlib
import os
import signal
import traceback

import pytest

from hypothesis import HealthCheck, event, settings
from hypothesis.errors import InvalidArgument

EXAMPLES = int(os.environ.get("DG_FUZZ_EXAMPLES", "0"))
HANG_SECONDS = 20   # one load of a file of a few hundred bytes takes milliseconds


def fuzz_settings(ci_examples: int) -> settings:
    """Settings for a fuzz test: ``ci_examples`` examples, or ``DG_FUZZ_EXAMPLES``."""
    return settings(max_examples=EXAMPLES or ci_examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def record(outcome: str) -> None:
    """Count ``outcome`` (e.g. "loaded" or the start of an error) in the statistics."""
    try:
        event(outcome)
    except InvalidArgument:
        pass   # called outside a Hypothesis test


def _on_alarm(signum, frame):
    raise TimeoutError(f"a load took over {HANG_SECONDS} s: a hang")


@contextlib.contextmanager
def no_hang():
    """Fail (TimeoutError) instead of hanging when the body runs over HANG_SECONDS."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(HANG_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def json_paths(node, prefix=()):
    """Every path into a JSON document (keys and indices)."""
    yield prefix
    items = node.items() if isinstance(node, dict) else (
        enumerate(node) if isinstance(node, list) else ())
    for key, child in items:
        yield from json_paths(child, prefix + (key,))


def replace_paths(doc, replacements):
    """``doc`` (changed in place where it can be) with each (path, value) replacement."""
    for path, value in replacements:
        if not path:
            doc = value
            continue
        node = doc
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            pass   # an earlier replacement removed this path
    return doc


def campaign(seeds, check, unsupported: type) -> int:
    """A generator's long campaign: ``check(seed)`` (the calls it compared) for each seed;
    prints each failing seed with its traceback, then how often each ``unsupported``
    message came and a summary. The exit status: 1 where a seed failed."""
    failed, lacking, compared = [], collections.Counter(), 0
    for seed in seeds:
        try:
            compared += check(seed)
        except unsupported as error:
            lacking[str(error).splitlines()[0][:160]] += 1
        except Exception:
            failed.append(seed)
            print(f"--- seed {seed} failed\n{traceback.format_exc()}", flush=True)
    for message, count in lacking.most_common():
        print(f"unsupported ({count}): {message}")
    print(f"{len(failed)} of {len(seeds)} failed: {failed}; {sum(lacking.values())} "
          f"unsupported; {compared} calls compared")
    return 1 if failed else 0


def campaign_parser(description: str, examples: int) -> argparse.ArgumentParser:
    """The arguments of a generator's campaign: ``--seeds 0:3000`` or ``--seed 17``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", default=f"0:{examples}")
    parser.add_argument("--seed", type=int)
    return parser


def chosen_seeds(args, write_program) -> range:
    """The seeds ``args`` name; one ``--seed``'s program is printed first."""
    if args.seed is None:
        return range(*map(int, args.seeds.split(":")))
    print(write_program(args.seed)[0])
    return range(args.seed, args.seed + 1)


def check_or_xfail(check, seed: int, unsupported: type) -> None:
    """A generator's test of one seed: ``check(seed)``; dualgraph's error naming what it
    lacks (``unsupported``) is an expected failure, listed, never a pass."""
    try:
        check(seed)
    except unsupported as error:
        pytest.xfail(f"unsupported in dualgraph: {error}")
