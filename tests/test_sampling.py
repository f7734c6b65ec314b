"""CPU-time stack sampling in the collector, end to end: real Python targets, the real collector, real files.

Each test runs a script under the collector (``tests.test_collector``'s helpers) and reads the
``samples-<pid>.bin`` it wrote with :mod:`instrumenter.builtin.samples.samplefile` (format: its docstring),
naming native frames with :mod:`instrumenter.builtin.samples.symbols`.  Busy loops are pure Python
arithmetic: the samples count user-mode CPU time only, and a loop that asks for the time at each
turn (``time.thread_time()`` is a system call) would spend most of it in the kernel.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Dict

import numpy as np
import pytest

from instrumenter.builtin.trace.events import read_trace_dir
from instrumenter.collector import formats
from instrumenter.builtin.samples.samplefile import (F_NATIVE_FAILED, F_NATIVE_NO_INFO, F_NATIVE_TRUNCATED, F_PY_CUT,
                                                     F_OFF_CPU, F_PY_TRUNCATED, SampleFile, read_sample_dir,
                                                     read_sample_file)
from instrumenter.builtin.samples.symbols import Symbolizer
from tests.conftest import ROOT
from tests.cli_helpers import default_signals
from tests.test_collector import only_trace, run_target, target_env

#: a busy loop of about ``seconds`` of CPU time, calibrated once (no system call inside the loop)
BUSY = """
import time
def _calibrate():
    t0 = time.process_time()
    n = 0
    while time.process_time() - t0 < 0.05:
        for _ in range(10000):
            n += 1
    return n / (time.process_time() - t0)
_RATE = _calibrate()
def busy(seconds):
    total = 0
    for i in range(int(seconds * _RATE)):   # BUSY LOOP
        total += i
    return total
"""

#: a seccomp filter refusing some system calls with EACCES (as perf_event_paranoid=3 would), from Python
REFUSE = """
import ctypes, struct
def refuse(*numbers):
    program = [(0x20, 0, 0, 0)]  # load the system call number
    for number in numbers:
        program += [(0x15, 0, 1, number), (0x06, 0, 0, 0x00050000 | 13)]  # ==number: return EACCES
    program.append((0x06, 0, 0, 0x7FFF0000))  # allow
    code = ctypes.create_string_buffer(b"".join(struct.pack("<HBBI", *op) for op in program))
    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(Program(len(program), ctypes.addressof(code))), 0, 0) == 0
"""
PERF_EVENT_OPEN, TIMER_CREATE = 298, 222  # x86-64


def script(code: str) -> str:
    return BUSY + textwrap.dedent(code)


def only_samples(traces: Path, off_cpu: bool = False) -> SampleFile:
    """The one process's samples: its CPU-time samples only, unless ``off_cpu`` (tests/test_off_cpu.py)."""
    found = read_sample_dir(traces)
    assert len(found) == 1, [s.path for s in found]
    assert found[0].warnings == []
    return found[0] if off_cpu else cpu_time(found[0])


def cpu_time(sf: SampleFile) -> SampleFile:
    """``sf`` without its off-CPU samples (a thread waiting, even for a core on a loaded machine, gets those)."""
    keep = (sf.flags & F_OFF_CPU) == 0
    return replace(sf, **{name: getattr(sf, name)[keep] for name in (
        "ns", "tid", "stack", "flags", "weight", "task_domain", "task_name", "autoitt_domain", "autoitt_name")})


def line_of(code: str, marker: str) -> int:
    """The line number of the (first) line holding marker."""
    return next(i for i, line in enumerate(code.splitlines(), 1) if marker in line)


def python_leaves(sf: SampleFile, rows: np.ndarray) -> Counter:
    """(qualname, line) of the innermost Python frame of each sample in rows."""
    out: Counter = Counter()
    for i in rows:
        frames = [f for f in sf.stacks[sf.stack[i]] if f[0] == "py"]
        if frames:
            code = sf.codes[frames[-1][1]]
            out[(code.qualname, frames[-1][2])] += 1
    return out


def names(traces: Path) -> Dict[int, str]:
    trace, = read_trace_dir(traces).traces
    return {**trace.strings, **trace.domains}


# --------------------------------------------------------------------------- Python and native frames


def test_a_busy_python_function_is_the_innermost_python_frame_with_its_file_and_line(tmp_path):
    _, traces = run_target(tmp_path, script("""
        import ittapi.compat as itt
        itt.resume()
        def outer():
            return busy(0.4)   # CALL
        outer()
    """))
    sf = only_samples(traces)
    assert sf.mechanism == "perf" and sf.python == "frames" and sf.python_version == sys.version_info[:2]
    in_busy = [i for i in range(len(sf)) if any(f[0] == "py" and sf.codes[f[1]].qualname == "busy"
                                                for f in sf.stacks[sf.stack[i]])]
    assert len(in_busy) >= 200
    leaves = python_leaves(sf, np.array(in_busy))
    loop = line_of(BUSY, "BUSY LOOP")
    on_loop = leaves[("busy", loop)] + leaves[("busy", loop + 1)]
    assert on_loop >= 0.9 * len(in_busy), leaves.most_common(5)
    code = next(c for c in sf.codes.values() if c.qualname == "busy")
    assert Path(code.filename).name == "target.py"
    # and the callers above it, outermost first
    stack = [sf.codes[f[1]].qualname for f in sf.stacks[sf.stack[in_busy[0]]] if f[0] == "py"]
    assert stack[-3:] == ["<module>", "outer", "busy"]


def _collector_built_for_another_python():
    tag = f"cpython-{sys.version_info[0]}{sys.version_info[1]}-"
    others = [p for p in (ROOT / "instrumenter" / "collector").glob("_collector.cpython-*.so") if tag not in p.name]
    return others[0] if others else None


@pytest.mark.skipif(_collector_built_for_another_python() is None,
                    reason="no collector built for another Python in the tree (the version matrix builds them)")
def test_a_collector_built_for_another_python_says_so_and_samples_native_frames_only(tmp_path):
    other = _collector_built_for_another_python()
    built_for = other.name.split("-")[1]  # "_collector.cpython-311-x86_64-...": "311"
    _, traces = run_target(tmp_path, script("""
        import ittapi.compat as itt
        itt.resume()
        busy(0.2)
    """), INTEL_LIBITTNOTIFY64=str(other))
    sf = only_samples(traces)
    assert sf.python == "unsupported" and len(sf) >= 50
    assert all(f[0] == "native" for stack in sf.stacks for f in stack)
    running = "%d.%d" % sys.version_info[:2]
    assert f"built for CPython {built_for[0]}.{built_for[1:]} but this process runs Python {running}" in sf.reason, \
        sf.reasons


def test_a_native_call_is_named_in_its_library_under_the_python_line_that_called_it(tmp_path):
    code = script("""
        import time, numpy as np
        import ittapi.compat as itt
        itt.resume()
        a = np.random.rand(300, 300)
        t0 = time.process_time()
        while time.process_time() - t0 < 0.4:
            a.dot(a)   # MATMUL
    """)
    _, traces = run_target(tmp_path, code, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    sf = only_samples(traces)
    symbols = Symbolizer.for_file(sf)
    matmul_line = line_of(code, "# MATMUL")
    blas = 0
    for i in range(len(sf)):
        frames = sf.stacks[sf.stack[i]]
        if frames[-1][0] != "native":
            continue
        leaf = symbols.lookup(frames[-1][1])
        if leaf.library and "openblas" in leaf.library:
            blas += 1
            py = [f for f in frames if f[0] == "py"]
            assert (sf.codes[py[-1][1]].qualname, py[-1][2]) == ("<module>", matmul_line)
            first_native = frames.index(py[-1]) + 1
            assert all(f[0] == "native" for f in frames[first_native:])  # no Python frame below the call
    assert blas >= 0.5 * len(sf), Counter(symbols.lookup(sf.stacks[s][-1][1]).library for s in sf.stack)


def test_stacks_run_from_the_thread_start_to_the_interrupted_instruction(tmp_path):
    _, traces = run_target(tmp_path, script("""
        import threading, ittapi.compat as itt
        itt.resume()
        worker = threading.Thread(target=busy, args=(0.3,))
        worker.start(); worker.join()
    """))
    sf = only_samples(traces)
    symbols = Symbolizer.for_file(sf)
    worker = np.flatnonzero(sf.tid != sf.pid)
    # enough stacks to judge their shape: 0.3 s is ~150 samples, but the loop's calibration is coarse on a
    # loaded machine (124 in one CI run); the count against CPU time is test_the_rate_is_the_configured_rate...
    assert len(worker) >= 75
    ended = F_NATIVE_TRUNCATED | F_NATIVE_FAILED | F_NATIVE_NO_INFO
    whole = [i for i in worker if not sf.flags[i] & ended]  # the walk met the outermost frame's end mark
    assert len(whole) >= 0.95 * len(worker)
    for i in whole[:20]:
        frames = sf.stacks[sf.stack[i]]
        assert symbols.lookup(frames[0][1]).library == "libc.so.6"  # clone3, start_thread
        assert [sf.codes[f[1]].qualname for f in frames if f[0] == "py"][-2:] == ["Thread.run", "busy"]


def _python_names(sf: SampleFile, i: int):
    return [sf.codes[f[1]].qualname if f[0] == "py" else f[0] for f in sf.stacks[sf.stack[i]] if f[0] != "native"]


DEEP = script("""
    import ittapi.compat as itt
    def deep(n):
        return deep(n - 1) if n else busy(0.4)
    def main():
        return deep(150)   # CALL
    itt.resume()
    main()
""")


def test_a_stack_deeper_than_a_sample_keeps_its_outermost_frames_and_marks_the_cut(tmp_path):
    """An ``import`` 30 modules deep is 180 frames of importlib under the script's line: the script's frames,
    the outermost, are the ones a user acts on. The innermost are kept too, and the cut between is marked."""
    _, traces = run_target(tmp_path, DEEP)
    sf = only_samples(traces)
    in_busy = [i for i in range(len(sf)) if "busy" in _python_names(sf, i)]
    assert len(in_busy) >= 200
    main = next(c for c, code in sf.codes.items() if code.qualname == "main")
    for i in in_busy:
        names = _python_names(sf, i)
        assert sf.flags[i] & F_PY_CUT and not sf.flags[i] & F_PY_TRUNCATED
        assert names[:2] == ["<module>", "main"] and names[-1] == "busy", names
        assert names.index("cut") == formats.PYTHON_OUTER_FRAMES and names.count("cut") == 1
        assert len(names) == formats.MAX_PYTHON_FRAMES + 1 and set(names[2:-1]) == {"deep", "cut"}
        assert ("py", main, line_of(DEEP, "# CALL")) in sf.stacks[sf.stack[i]]


def test_a_stack_deeper_than_the_walk_follows_keeps_its_innermost_frames_and_says_so(tmp_path):
    _, traces = run_target(tmp_path, script(f"""
        import sys, ittapi.compat as itt
        sys.setrecursionlimit(10000)
        def deep(n):
            return deep(n - 1) if n else busy(0.4)
        itt.resume()
        deep({formats.PYTHON_WALK_LIMIT + 100})
    """))
    sf = only_samples(traces)
    in_busy = [i for i in range(len(sf)) if "busy" in _python_names(sf, i)]
    assert len(in_busy) >= 200
    for i in in_busy:
        names = _python_names(sf, i)
        assert sf.flags[i] & F_PY_TRUNCATED and not sf.flags[i] & F_PY_CUT
        assert names == ["deep"] * (formats.MAX_PYTHON_FRAMES - 1) + ["busy"], names


# --------------------------------------------------------------------------- tasks


def test_a_sample_names_the_innermost_open_task_of_its_thread(tmp_path):
    _, traces = run_target(tmp_path, script("""
        import ittapi.compat as itt
        train, other = itt.domain_create("autoitt.train"), itt.domain_create("other")
        itt.task_begin(train, "step")
        itt.task_begin(other, "inner")
        busy(0.3)
        itt.task_end(other)
        busy(0.2)
        itt.task_end(train)
    """))
    sf, name = only_samples(traces), names(traces)
    rows = [(name.get(int(d)), name.get(int(n)), name.get(int(ad)), name.get(int(an)), bool(inh))
            for d, n, ad, an, inh in zip(sf.task_domain, sf.task_name, sf.autoitt_domain, sf.autoitt_name,
                                         sf.inherited)]
    seen = Counter(rows)
    assert seen[("other", "inner", "autoitt.train", "step", False)] >= 200
    assert seen[("autoitt.train", "step", "autoitt.train", "step", False)] >= 120
    assert not any(r[0] == "other" and r[3] != "step" for r in rows)


def test_a_task_ended_while_paused_is_not_left_open_in_later_samples(tmp_path):
    _, traces = run_target(tmp_path, script("""
        import ittapi.compat as itt
        other = itt.domain_create("other")
        itt.resume()
        itt.task_begin(other, "straddles")
        busy(0.1)
        itt.pause()
        itt.task_end(other)    # dropped, as in the trace
        itt.resume()
        itt.task_begin(other, "after"); busy(0.2); itt.task_end(other)
        busy(0.2)
    """))
    sf, name = only_samples(traces), names(traces)
    order = np.argsort(sf.ns, kind="stable")
    tasks = [name.get(int(n)) for n in sf.task_name[order]]
    last_after = max(i for i, t in enumerate(tasks) if t == "after")
    assert tasks.count("straddles") >= 50 and tasks.count("after") >= 100
    assert "straddles" not in tasks[last_after:] and tasks[-100:] == [None] * 100


def test_a_worker_thread_without_tasks_is_attributed_the_process_autoitt_task_as_inherited(tmp_path):
    _, traces = run_target(tmp_path, script("""
        import threading, ittapi.compat as itt
        train = itt.domain_create("autoitt.train")
        worker = threading.Thread(target=busy, args=(0.3,))
        itt.task_begin(train, "step")
        worker.start(); worker.join()
        itt.task_end(train)
    """))
    sf, name = only_samples(traces), names(traces)
    # the worker's own exit can be sampled after "step" ended (test_the_own_domains_are_the_ones_autoitt_names)
    ended = max(event.ts for event in only_trace(traces).events if event.kind == "end")
    worker = (sf.tid != sf.pid) & (sf.ns.astype(np.int64) <= ended)
    assert worker.sum() >= 150
    assert (sf.task_name[worker] == 0).all()  # no task of its own
    attributed = [name.get(int(n)) for n in sf.autoitt_name[worker]]
    assert attributed.count("step") >= 0.95 * worker.sum()
    assert sf.inherited[worker][np.array(attributed) == "step"].all()
    assert {name.get(int(d)) for d in sf.autoitt_domain[worker]} == {"autoitt.train"}


def test_the_own_domains_are_the_ones_autoitt_names(tmp_path):
    _, traces = run_target(tmp_path, script("""
        import threading, ittapi.compat as itt
        mine, default = itt.domain_create("mytrain"), itt.domain_create("autoitt.train")
        worker = threading.Thread(target=busy, args=(0.2,))
        itt.task_begin(mine, "epoch")
        itt.task_begin(default, "not own here")
        worker.start(); worker.join()
        itt.task_end(default)
        itt.task_end(mine)
    """), AUTOITT_OWN_DOMAINS="mytrain,other")
    sf, name = only_samples(traces), names(traces)
    # join() returns when the worker's Python code is done; the thread's own exit runs on, and on a busy
    # machine it can be sampled after the main thread ended "epoch" (seen once in a loaded suite): those
    # samples are in no task, rightly
    ended = max(event.ts for event in only_trace(traces).events if event.kind == "end")
    worker = (sf.tid != sf.pid) & (sf.ns.astype(np.int64) <= ended)
    assert worker.sum() >= 100
    assert {(name.get(int(d)), name.get(int(n))) for d, n in zip(sf.autoitt_domain[worker], sf.autoitt_name[worker])} \
        == {("mytrain", "epoch")}


def test_samples_say_whether_collection_was_paused(tmp_path):
    _, traces = run_target(tmp_path, script("""
        import ittapi.compat as itt
        itt.pause()        # the first ITT call attaches the collector; collection stays paused
        busy(0.4)          # long enough that the scanner's first listing (later under load) comes well inside it
        itt.resume()
        busy(0.2)
        itt.pause()
        busy(0.1)
    """), start_paused=True)
    sf = only_samples(traces)
    controls = [event for event in only_trace(traces).events if event.kind in ("resume", "pause")]
    resumed = next(event.ts for event in controls if event.kind == "resume")
    paused_again = controls[-1].ts
    assert controls[-1].kind == "pause" and paused_again > resumed
    # each sample says what collection was doing when it was taken: paused before the resume and after the
    # last pause, collecting between (a sample within a millisecond of either may say either); how many fall
    # in each part depends on the machine's load (the scanner's first listing), so only that each has some
    ns, paused = sf.ns.astype(np.int64), sf.paused.astype(bool)
    before, after = ns < resumed - 1_000_000, ns > paused_again + 1_000_000
    between = (ns > resumed + 1_000_000) & (ns < paused_again - 1_000_000)
    assert paused[before].all() and paused[after].all() and not paused[between].any()
    assert before.sum() >= 20 and between.sum() >= 20 and after.sum() >= 20, (before.sum(), between.sum(), after.sum())


# --------------------------------------------------------------------------- rate and controls


@pytest.mark.slow
def test_the_rate_is_the_configured_rate_of_cpu_time(tmp_path):
    for hz in (1000, 200):
        (tmp_path / str(hz)).mkdir()
        done, traces = run_target(tmp_path / str(hz), script("""
            import time, ittapi.compat as itt
            itt.resume()
            t0, cpu0 = time.monotonic_ns(), time.thread_time()
            busy(1.0)
            print(t0, time.monotonic_ns(), time.thread_time() - cpu0)
        """), AUTOITT_SAMPLE_HZ=str(hz))
        t0, t1, cpu = done.stdout.split()
        sf = only_samples(traces)
        assert sf.rate_hz == hz and sf.period_ns == 10**9 // hz
        during = (sf.tid == sf.pid) & (sf.ns >= int(t0)) & (sf.ns <= int(t1))
        taken = int(sf.weight[during].sum())
        assert 0.8 * float(cpu) * hz <= taken <= 1.1 * float(cpu) * hz, (taken, cpu)
        assert (sf.weight == 1).all()
        assert sf.dropped == 0


def test_a_rate_of_zero_turns_sampling_off_and_leaves_the_trace_alone(tmp_path):
    _, traces = run_target(tmp_path, script("""
        import ittapi.compat as itt
        d = itt.domain_create("autoitt.train")
        itt.task_begin(d, "step"); busy(0.1); itt.task_end(d)
    """), AUTOITT_SAMPLE_HZ="0")
    assert not list(traces.glob("samples-*.bin"))
    trace, = read_trace_dir(traces).traces
    assert [(e.kind, e.name) for e in trace.events] == [("begin", "step"), ("end", None)]


def test_the_collector_thread_is_not_sampled_and_every_program_thread_is(tmp_path):
    _, traces = run_target(tmp_path, script("""
        import threading, ittapi.compat as itt
        itt.resume()
        threads = [threading.Thread(target=busy, args=(0.15,), name=f"w{i}") for i in range(3)]
        for t in threads: t.start()
        for t in threads: t.join()
    """))
    sf = only_samples(traces)
    assert "autoitt-sampler" not in sf.thread_names.values()
    per_thread = Counter(int(t) for t in sf.tid if t != sf.pid)
    assert len(per_thread) == 3 and min(per_thread.values()) >= 60


# --------------------------------------------------------------------------- permissions and refusals


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to become uid 65534")
def test_sampling_works_for_an_unprivileged_user(request):
    work = Path(tempfile.mkdtemp(prefix="autoitt-nobody-", dir="/tmp"))  # pytest's own is root's alone
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    work.chmod(0o777)
    (work / "target.py").write_text(script("""
        import ittapi.compat as itt
        itt.resume()
        busy(0.3)
        print("done")
    """))
    (work / "target.py").chmod(0o644)
    traces = work / "traces"
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                           str(work / "target.py")], cwd=work, env=target_env(traces), capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0 and "Permission denied" in done.stderr and not traces.exists():
        pytest.skip(f"uid 65534 cannot run {sys.executable}: {done.stderr.strip()}")
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    sf = only_samples(traces)
    assert os.stat(sf.path).st_uid == 65534
    assert sf.mechanism == "perf" and sf.reason is None
    assert len(sf) >= 150
    assert any(f[0] == "py" and sf.codes[f[1]].qualname == "busy" for s in sf.stack[:50] for f in sf.stacks[s])


def refused_perf_run(tmp_path, seconds: float, **extra):
    """A step busy for ``seconds`` with perf_event_open refused (seccomp): (its samples file, the step's start and
    end in CLOCK_MONOTONIC ns, its CPU time in s)."""
    done, traces = run_target(tmp_path, REFUSE + script(f"""
        refuse({PERF_EVENT_OPEN})
        import time, ittapi.compat as itt
        d = itt.domain_create("autoitt.train")
        itt.task_begin(d, "step")
        t0, cpu0 = time.monotonic_ns(), time.thread_time()
        busy({seconds})
        print(t0, time.monotonic_ns(), time.thread_time() - cpu0)
        itt.task_end(d)
    """), **extra)
    t0, t1, cpu = done.stdout.split()
    return only_samples(traces), int(t0), int(t1), float(cpu), traces


def test_refused_perf_event_open_falls_back_to_cpu_timers_and_says_why(tmp_path):
    sf, t0, t1, cpu, traces = refused_perf_run(tmp_path, 0.4)
    assert sf.mechanism == "timer"
    assert sf.reason.startswith("perf_event_open was refused (Permission denied; kernel.perf_event_paranoid is")
    # at most one sample per kernel tick (250 per second here), each standing for the periods it covers
    during = (sf.ns >= t0) & (sf.ns <= t1)
    assert during.sum() <= 1.2 * 250 * cpu and (sf.weight[during] > 1).mean() > 0.5
    assert 0.7 * 1000 * cpu <= sf.weight[during].sum() <= 1.2 * 1000 * cpu
    trace, = read_trace_dir(traces).traces
    assert [(e.kind, e.name) for e in trace.events] == [("begin", "step"), ("end", None)]


def test_timers_that_take_over_from_a_refused_perf_sample_at_the_timer_rate_given(tmp_path):
    # autoitt profile hands down AUTOITT_SAMPLE_TIMER_HZ (mechanism.choose) where the user gave no rate: perf at
    # 1000 a second where it works, timers at theirs (given here as 100) where a container refuses perf inside the run
    sf, t0, t1, cpu, _ = refused_perf_run(tmp_path, 0.5, AUTOITT_SAMPLE_TIMER_HZ="100")
    assert sf.mechanism == "timer" and sf.rate_hz == 100 and sf.period_ns == 10_000_000
    during = (sf.ns >= t0) & (sf.ns <= t1)
    # 10 ms a period: about 50 periods in half a second of CPU, one sample each at most
    assert 0.7 * 100 * cpu <= sf.weight[during].sum() <= 1.2 * 100 * cpu and during.sum() <= 1.2 * 100 * cpu


def test_with_no_way_to_sample_the_reason_is_recorded_and_the_trace_is_unaffected(tmp_path):
    done, traces = run_target(tmp_path, REFUSE + script(f"""
        refuse({PERF_EVENT_OPEN}, {TIMER_CREATE})
        import ittapi.compat as itt
        d = itt.domain_create("autoitt.train")
        itt.task_begin(d, "step"); busy(0.1); itt.task_end(d)
        print("done")
    """))
    assert done.stdout == "done\n" and done.stderr == ""
    sf = only_samples(traces)
    assert sf.mechanism == "none" and len(sf) == 0 and sf.complete
    assert sf.reason == ("no CPU-time sampling: perf_event_open was refused (Permission denied; "
                         f"kernel.perf_event_paranoid is {Path('/proc/sys/kernel/perf_event_paranoid').read_text().strip()}), "
                         "and so was timer_create, the fallback (Permission denied)")
    trace, = read_trace_dir(traces).traces
    assert [(e.kind, e.name) for e in trace.events] == [("begin", "step"), ("end", None)]


# --------------------------------------------------------------------------- processes


def test_a_forked_child_writes_its_own_samples_file(tmp_path):
    done, traces = run_target(tmp_path, script("""
        import os, multiprocessing, ittapi.compat as itt
        itt.resume()
        def child():
            busy(0.3)
        process = multiprocessing.get_context("fork").Process(target=child)
        process.start(); process.join()
        print(os.getpid(), process.pid)
    """))
    parent_pid, child_pid = map(int, done.stdout.split())
    files = {sf.pid: cpu_time(sf) for sf in read_sample_dir(traces)}
    assert set(files) == {parent_pid, child_pid}
    child = files[child_pid]
    assert child.forked and child.ppid == parent_pid and not files[parent_pid].forked
    assert set(child.tid.tolist()) == {child_pid}
    assert len(child) >= 150  # its last 20 ms are lost: multiprocessing ends it with os._exit
    leaves = python_leaves(child, np.arange(len(child)))
    assert sum(n for (name, _), n in leaves.items() if name == "busy") >= 0.9 * len(child)


@pytest.mark.slow
def test_sleeping_reading_a_pipe_and_waiting_for_a_subprocess_behave_the_same_with_sampling(tmp_path):
    code = script("""
        import os, queue, subprocess, sys, threading, time
        import ittapi.compat as itt
        itt.resume()
        def writer(fd):
            busy(0.1)
            os.write(fd, b"through the pipe")
        r, w = os.pipe()
        threading.Thread(target=writer, args=(w,)).start()
        t0 = time.monotonic(); time.sleep(0.15); slept = time.monotonic() - t0
        print(os.read(r, 100).decode())
        q = queue.Queue()
        threading.Timer(0.05, q.put, args=("queued",)).start()
        print(q.get(timeout=5))
        out = subprocess.run([sys.executable, "-c", "print('child says hi')"], capture_output=True, text=True)
        print(out.stdout.strip(), out.returncode)
        print(slept >= 0.15)
        busy(0.1)
        sys.exit(3)
    """)
    runs = {}
    for hz in ("0", "1000"):
        (tmp_path / hz).mkdir()
        done, traces = run_target(tmp_path / hz, code, expect_rc=3, AUTOITT_SAMPLE_HZ=hz)
        runs[hz] = (done.stdout, done.stderr)
    assert runs["0"] == runs["1000"] == ("through the pipe\nqueued\nchild says hi 0\nTrue\n", "")
    assert len(read_sample_file(next((tmp_path / "1000" / "traces").glob("samples-*.bin")))) >= 100


def _cpu_s(pid: int) -> float:
    """The CPU time a process has used so far (user and system, all its threads), from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_sigterm_leaves_a_readable_samples_file(tmp_path):
    path = tmp_path / "target.py"
    path.write_text(script("""
        import sys, ittapi.compat as itt
        itt.resume()
        busy(0.05)
        print("ready", flush=True)
        while True:
            busy(0.1)
    """))
    traces = tmp_path / "traces"
    process = subprocess.Popen([sys.executable, str(path)], env=target_env(traces), stdout=subprocess.PIPE, text=True,
                               preexec_fn=default_signals)
    assert process.stdout.readline() == "ready\n"
    # CPU time, not wall time, is what is sampled: wait for 0.4 s of it, however loaded the machine
    ready = _cpu_s(process.pid)
    deadline = time.monotonic() + 60
    while _cpu_s(process.pid) - ready < 0.4 and time.monotonic() < deadline:
        time.sleep(0.05)
    ran = _cpu_s(process.pid) - ready
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == -signal.SIGTERM
    sf = only_samples(traces)
    assert not sf.complete
    # at 1000 a second of CPU time: the samples of that CPU time at least, within a generous half
    assert len(sf) >= 0.5 * 1000 * ran >= 200 and (sf.stack >= 0).all(), (len(sf), ran)
    assert sf.maps and any(m.path.endswith(".so") or "python" in m.path for m in sf.maps[-1])
    assert any(c.qualname == "busy" for c in sf.codes.values())


def test_an_uncaught_exception_leaves_a_complete_samples_file(tmp_path):
    done, traces = run_target(tmp_path, script("""
        import ittapi.compat as itt
        itt.resume()
        busy(0.2)
        raise SystemError("boom")
    """), expect_rc=1)
    assert "SystemError: boom" in done.stderr
    sf = only_samples(traces)
    assert sf.complete and len(sf) >= 100 and sf.counts[sf.pid].samples == len(sf)



def _always_paused(pid: int, ppid: int, ns, forked: bool = False) -> SampleFile:
    """A process's samples as its collector flags them when it never resumed collection itself."""
    from instrumenter.builtin.samples.samplefile import F_PAUSED

    ns = np.array(ns, np.uint64)
    return SampleFile(path=Path(f"samples-{pid}.bin"), pid=pid, ppid=ppid, forked=forked, ns=ns,
                      flags=np.full(len(ns), F_PAUSED, np.uint32))


def test_a_spawned_workers_samples_are_collected_while_the_training_process_above_it_collects():
    from instrumenter.builtin.samples.sampling import _outside_collection

    windows = {10: [(100, 200), (300, 400)]}
    worker = _always_paused(12, 11, [50, 150, 250, 350, 450])  # started by 11 (a spawned resource tracker, say)
    outside = _outside_collection(worker, windows, {12: 11, 11: 10})
    assert outside.tolist() == [True, False, True, False, True]


def test_a_forked_worker_or_a_process_with_its_own_windows_keeps_its_own_flags():
    from instrumenter.builtin.samples.sampling import _outside_collection

    windows = {10: [(100, 200)], 12: [(500, 600)]}
    assert _outside_collection(_always_paused(12, 10, [150]), windows, {12: 10}).tolist() == [True]
    assert _outside_collection(_always_paused(13, 10, [150], forked=True), windows, {13: 10}).tolist() == [True]
    # no process above it collected: its own flags
    assert _outside_collection(_always_paused(14, 99, [150]), windows, {14: 99}).tolist() == [True]
