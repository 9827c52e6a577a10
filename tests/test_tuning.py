"""CPU tuning (``kernels/tuning.py``): the switch, and the two thread tricks under the
conditions they meet in real programs. Handing a loop's rows to OpenBLAS's worker
(``"blas"``) and the batch-1 product's spinning helper (``"matvec"``) give the bits of one
thread, do not deadlock or mix up results with several Python threads calling at once, in
a forked child of a process that used them, and in two processes running at once on the
same two cores (as two MPI ranks on one machine); they turn off with one core or the
switch, and back off when a shared job keeps waiting for a thread that is not running.
The malloc trick is tested in ``test_allocator.py``."""
import ctypes
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import dualgraph as dg
from dualgraph import kernels
from dualgraph.kernels import blas_threads, matvec, tuning
from dualgraph.ops.opdef import REGISTRY

needs_tricks = pytest.mark.skipif(
    not (kernels.numba_available() and kernels.native.enabled() and tuning.cores() > 1
         and tuning.openblas() is not None),
    reason="the tricks need Numba, native entries, two cores and NumPy's OpenBLAS")


def workload(seed: int = 0):
    """``run()`` -> results of every kernel a trick serves: a tanh-GELU and a softmax of
    2^18 elements (rows shared with OpenBLAS's worker), a stack of small products
    (slices shared with it), a 512 x 784 batch-1 product (the helper), and a compiled
    function of this thread's own (compiled code keeps its buffers per function)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1024, 256), dtype=np.float32)
    a = rng.standard_normal((64, 64, 32), dtype=np.float32)
    b = rng.standard_normal((64, 32, 64), dtype=np.float32)
    w = rng.standard_normal((512, 784), dtype=np.float32)
    v = rng.standard_normal((1, 784), dtype=np.float32)
    bias = rng.standard_normal(512, dtype=np.float32)
    weight = dg.tensor(rng.standard_normal((256, 256), dtype=np.float32))
    compiled = dg.compile(lambda t: dg.nn.functional.gelu(t @ weight, approximate="tanh")
                          .softmax(-1))
    gelu, softmax = REGISTRY["gelu_tanh"].kernel, REGISTRY["softmax"].kernel
    matmul = REGISTRY["matmul"].kernel

    def run():
        with dg.no_grad():
            return [gelu(x), softmax(x, dim=-1), matmul(a, b), matvec.matvec(v, w, bias),
                    compiled(dg.tensor(x)).numpy()]
    return run


def alone(run):
    """``run()`` with every trick off: the bits each must give."""
    before = tuning.configure(False)
    try:
        return run()
    finally:
        tuning.configure(before)


def same(got, want) -> bool:
    return all(np.array_equal(g, w) for g, w in zip(got, want))


@pytest.fixture
def counted(monkeypatch):
    """Counts of jobs handed to OpenBLAS (``blas_threads.run`` calls), with fresh back-off
    records (an earlier test on a busy machine may have left one backing off)."""
    counts = {"blas": 0}
    run = blas_threads.run

    def counting(address, blocks):
        counts["blas"] += 1
        return run(address, blocks)
    monkeypatch.setattr(blas_threads, "run", counting)
    monkeypatch.setattr(blas_threads, "backoff", tuning.Backoff())
    if matvec._helper is not None:
        monkeypatch.setattr(matvec._helper, "backoff", tuning.Backoff())
    return counts


def posted() -> int:
    """Products posted to the matvec helper so far (its board's sequence)."""
    helper = matvec._helper
    return 0 if helper is None else int(helper.board[matvec.TICKET] >> 32)


def test_the_switch_reads_names_and_rejects_typos():
    assert tuning.parse("") == tuning.parse("default") == {"blas", "matvec", "recycle"}
    assert tuning.parse("1") == tuning.parse("ON") == tuning.parse("all") == tuning.TRICKS
    assert tuning.parse("0") == tuning.parse("off") == frozenset()
    assert tuning.parse(" blas , malloc ") == {"blas", "malloc"}
    with pytest.raises(ValueError, match="unknown tricks"):
        tuning.parse("blas,spin")
    with pytest.raises(ValueError, match="unknown tricks"):
        tuning.configure({"mallocs"})


def test_a_typo_in_the_environment_warns_and_keeps_the_default():
    code = ("import warnings; warnings.simplefilter('error')\n"
            "try:\n    import dualgraph\nexcept UserWarning as e:\n    print('warned', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "DUALGRAPH_CPU_TUNING": "blsa"})
    assert "warned" in out.stdout and "blsa" in out.stdout, out.stderr


@needs_tricks
def test_the_switch_turns_both_thread_tricks_off_and_on(counted):
    run = workload()
    want = alone(run)
    before = tuning.configure("off")
    try:
        sequence = posted()
        assert same(run(), want)
        assert counted["blas"] == 0 and posted() == sequence
        assert tuning.report()["blas_jobs"] == 1 and not tuning.report()["matvec_helper"]
        tuning.configure("matvec")
        assert same(run(), want)
        assert counted["blas"] == 0 and posted() > sequence
        tuning.configure("default")
        assert same(run(), want)
        assert counted["blas"] >= 3         # gelu, softmax, the stack (and the compiled code)
    finally:
        tuning.configure(before)


@needs_tricks
def test_several_python_threads_at_once_get_their_own_bits(counted):
    """Four threads call every shared kernel at once, 30 times each: each gets the bits of
    its own inputs on one thread, and all finish (OpenBLAS's worker takes one thread's job
    after another's; the helper serves one poster at a time, the others run alone)."""
    runs = [workload(seed) for seed in range(4)]
    wants = [alone(run) for run in runs]
    wrong = []

    def caller(k):
        for _ in range(30):
            if not same(runs[k](), wants[k]):
                wrong.append(k)
                return
    threads = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    assert not wrong
    assert counted["blas"] > 0


@needs_tricks
def test_a_forked_child_of_a_process_that_used_the_tricks_gets_the_same_bits():
    """The parent runs every shared kernel on three threads, then forks: the child (which
    has neither OpenBLAS's workers nor the helper thread until they start again) runs them
    on two threads of its own and gets the same bits; it is killed if it hangs."""
    runs = [workload(seed) for seed in range(3)]
    wants = [alone(run) for run in runs]
    threads = [threading.Thread(target=run) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pid = os.fork()
    if pid == 0:
        import signal
        signal.alarm(60)
        results = {}

        def child(k):
            results[k] = all(same(runs[k](), wants[k]) for _ in range(10))
        mine = [threading.Thread(target=child, args=(k,)) for k in range(2)]
        for t in mine:
            t.start()
        for t in mine:
            t.join()
        ok = results == {0: True, 1: True} and same(runs[2](), wants[2])
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {tests!r})
cores = {cores!r}
if cores:
    os.sched_setaffinity(0, cores)
from test_tuning import alone, same, workload, posted
from dualgraph.kernels import blas_threads, matvec, tuning
run = workload()
want = alone(run)
calls = []
real = blas_threads.run
blas_threads.run = lambda address, blocks: calls.append(1) or real(address, blocks)
start = time.monotonic()
ok, rounds = True, 0
while ok and (rounds < 20 or time.monotonic() - start < {seconds!r}):
    ok = same(run(), want)
    rounds += 1
helper = matvec._helper
print(json.dumps({{"ok": ok, "rounds": rounds, "report": tuning.report(),
                  "blas_calls": len(calls), "matvec_posted": posted(),
                  "blas_stalls": blas_threads.backoff.stalls,
                  "blas_backed_off": blas_threads.backoff.backed_off,
                  "matvec_stalls": helper.backoff.stalls if helper else 0}}))
"""


def child(cores=None, seconds=0.0, **environ):
    code = CHILD.format(tests=os.path.dirname(__file__), cores=cores, seconds=seconds)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **environ})


def result(process) -> dict:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


@needs_tricks
def test_two_processes_on_the_same_two_cores_get_their_bits_and_finish():
    """Two processes (two MPI ranks on one machine, not bound to cores) run every shared
    kernel at once for two seconds on the same two cores: four busy threads on two cores.
    Each gets the bits of one thread; the stalls they meet feed their back-off, whose
    bookkeeping is checked without timing in ``test_a_job_that_starts_late_...``."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    ranks = [child(cores, seconds=2.0) for _ in range(2)]
    for rank in map(result, ranks):
        assert rank["ok"] and rank["rounds"] >= 20
        assert rank["report"]["blas_jobs"] == 2 and rank["report"]["matvec_helper"]
        assert rank["blas_calls"] > 0 and rank["matvec_posted"] > 0


@needs_tricks
@pytest.mark.parametrize("how", ["bound to one core", "DUALGRAPH_NUM_THREADS=1",
                                 "DUALGRAPH_CPU_TUNING=0"])
def test_a_process_with_one_core_or_the_switch_off_shares_nothing(how):
    """An MPI rank bound to its core (or capped, or switched off) hands nothing to
    OpenBLAS's worker and never starts the helper; the bits are the same."""
    if how == "bound to one core":
        rank = result(child(sorted(os.sched_getaffinity(0))[:1]))
    else:
        rank = result(child(**dict([how.split("=")])))
    assert rank["ok"]
    assert rank["report"]["blas_jobs"] == 1 and not rank["report"]["matvec_helper"]
    assert rank["blas_calls"] == 0 and rank["matvec_posted"] == 0


@needs_tricks
def test_a_job_that_starts_late_is_a_stall_and_the_calls_run_alone(monkeypatch, counted):
    """An OpenBLAS whose worker gets to a job only long after the caller finished its own
    (a worker the OS is not running) is played by a server that runs the jobs one after
    the other, 50 ms apart (a half of this gelu takes well under 1 ms): every shared call
    then stalls and waits far longer than the credit of time the sharing saved, so the
    first backs off and the next ``FIRST_BACKOFF`` calls run whole on the caller, with the
    same bits; the next stall backs off twice as long."""
    import time
    real = tuning.openblas()

    def one_after_another(jobs, function, args, stride):
        entry = ctypes.CFUNCTYPE(None, ctypes.c_int64)(function)
        for i in range(jobs):
            if i:
                time.sleep(0.05)
            entry(args + i * stride)
        return 0
    monkeypatch.setattr(tuning, "openblas", lambda: real._replace(run=one_after_another))
    x = np.random.default_rng(5).standard_normal(1 << 18).astype(np.float32)
    gelu = REGISTRY["gelu_tanh"].kernel
    want = alone(lambda: gelu(x))
    backoff = blas_threads.backoff
    np.testing.assert_array_equal(gelu(x), want)
    assert backoff.stalls == 1
    assert backoff.alone == tuning.FIRST_BACKOFF and backoff.backed_off == 1
    for _ in range(tuning.FIRST_BACKOFF):
        np.testing.assert_array_equal(gelu(x), want)
    assert backoff.alone == 0 and backoff.stalls == 1        # none was handed over
    np.testing.assert_array_equal(gelu(x), want)
    assert backoff.stalls == 2 and backoff.alone == 2 * tuning.FIRST_BACKOFF
    assert counted["blas"] == 2 + tuning.FIRST_BACKOFF


def test_the_relay_weighs_the_time_stalls_cost_against_the_time_sharing_saved():
    """``Backoff.weigh``: a stall of a time slice among calls that each save a few hundred
    microseconds (a batch-1 CNN on a busy host) is paid for and the calls share on; stalls
    that cost more than the calls save back off, twice as long each time, and a full
    credit makes the next back-off short again. The credit is capped, so a long good run
    does not pay for a later run of stalls."""
    us, policy = 1000, tuning.Backoff()
    for _ in range(3):
        for _ in range(20):                      # twenty calls saving 500 us each ...
            assert policy.share()
            policy.weigh(500 * us, 20 * us)
        policy.weigh(600 * us, 4000 * us)        # ... and one a slice late
    assert policy.stalls == 3 and policy.backed_off == 0 and policy.share()
    policy, shared = tuning.Backoff(), 0
    while policy.share():                        # a slice late every other call
        shared += 1
        policy.weigh(500 * us, 20 * us if shared % 2 else 4000 * us)
    assert shared == 4 and policy.backed_off == 1
    for _ in range(tuning.FIRST_BACKOFF - 1):
        assert not policy.share()
    while policy.share():
        shared += 1
        policy.weigh(500 * us, 20 * us if shared % 2 else 4000 * us)
    assert shared == 8 and policy.backed_off == 2
    assert policy.alone == 2 * tuning.FIRST_BACKOFF - 1
    policy.alone = 0
    for _ in range(10_000):                      # a long good run: the credit is capped
        policy.weigh(500 * us, 0)
    assert policy.credit == tuning.CREDIT_NS and policy.backoff == tuning.FIRST_BACKOFF
    stalls = 0
    while policy.share():                        # 4 ms stalls alone: backs off by the cap
        policy.weigh(100 * us, 4100 * us)
        stalls += 1
    assert stalls == tuning.CREDIT_NS // (4000 * us) + 1 and policy.backed_off == 3


def test_a_call_is_a_stall_when_its_last_job_finishes_too_long_after_the_first():
    """The relay's board (first start, first finish, last finish, ns): the time the first
    job took (what sharing saved, about) and the wait after it; a worker that started late
    or was preempted midway made the caller wait longer after its own job than that job
    took, which running the other range itself would have beaten; a worker that finished
    a little after the caller did not."""
    def board(first_start, first_end, last_end):
        words = np.zeros(blas_threads._RELAY_WORDS, np.int64)
        words[[blas_threads.FIRST_START, blas_threads.FIRST_END, blas_threads.LAST_END]] = \
            first_start, first_end, last_end
        return words

    def stalled(*times):
        saved, waited = blas_threads.balance(board(*times))
        return waited > saved
    assert blas_threads.balance(board(1000, 2000, 2100)) == (1000, 100)
    assert not stalled(1000, 2000, 2100)    # balanced halves
    assert not stalled(1000, 2000, 3000)    # at most twice as long
    assert stalled(1000, 2000, 3500)        # preempted, or started late
    assert stalled(1000, 1010, 900_000)     # a time slice away
