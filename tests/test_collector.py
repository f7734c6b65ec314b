"""autoitt's ITT collector, end to end: real targets, real ITT static parts, real files.

Every test runs a Python subprocess with the environment from
``instrumenter.collector.environment`` (so the ITT static parts of ittapi,
torch and TensorFlow load the collector built with the package) and reads what
it wrote with ``instrumenter.builtin.trace.tracefile``.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from instrumenter.collector import environment, library_path
from instrumenter.builtin.trace.events import Event, read_trace_dir, read_trace_file
from instrumenter.builtin.trace.tracefile import ProcessTrace, TraceFormatError
from tests.cli_helpers import default_signals

ITT_VARIABLES = ("INTEL_LIBITTNOTIFY64", "AUTOITT_TRACE_DIR", "AUTOITT_START_PAUSED")


def target_env(trace_dir: Path, start_paused: bool = False, **extra: Optional[str]) -> Dict[str, str]:
    """This process's environment with the collector's variables, and ``extra`` (``None``: taken out)."""
    env = {k: v for k, v in os.environ.items() if k not in ITT_VARIABLES}
    env.update(environment(trace_dir, start_paused=start_paused))
    for name, value in extra.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_target(tmp_path: Path, code: str, start_paused: bool = False, expect_rc: int = 0,
               timeout: float = 60, **extra: Optional[str]) -> Tuple[subprocess.CompletedProcess, Path]:
    script = tmp_path / "target.py"
    script.write_text(textwrap.dedent(code))
    traces = tmp_path / "traces"
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=target_env(traces, start_paused, **extra),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout,
                          preexec_fn=default_signals)
    assert done.returncode == expect_rc, done.stderr
    return done, traces


def only_trace(traces: Path) -> ProcessTrace:
    found = read_trace_dir(traces).traces
    assert len(found) == 1, [t.path for t in found]
    assert found[0].warnings == []
    return found[0]


def tasks(trace: ProcessTrace) -> List[Tuple[str, Optional[str], Optional[str]]]:
    return [(e.kind, e.domain, e.name) for e in trace.events]


def check_balanced(events: List[Event]) -> None:
    """Per thread, every end closes the innermost open task of the same domain; nothing stays open."""
    stacks: Dict[int, List[Event]] = {}
    for event in events:
        stack = stacks.setdefault(event.tid, [])
        if event.kind == "begin":
            stack.append(event)
        elif event.kind == "end":
            assert stack, f"end without begin: {event}"
            assert stack.pop().domain == event.domain
    assert all(not s for s in stacks.values()), stacks


def check_monotonic(events: List[Event]) -> None:
    last: Dict[int, int] = {}
    for event in events:
        assert event.ts >= last.get(event.tid, 0), event
        last[event.tid] = event.ts


# --------------------------------------------------------------------------- the library


def test_library_is_built_and_found_without_importing_it():
    path = library_path()
    assert path.is_file() and path.suffix == ".so"
    env = environment(Path("traces"), start_paused=True)
    assert env["INTEL_LIBITTNOTIFY64"] == str(path)
    assert Path(env["AUTOITT_TRACE_DIR"]).is_absolute()
    assert env["AUTOITT_START_PAUSED"] == "1"
    assert environment(Path("t"), start_paused=False)["AUTOITT_START_PAUSED"] == "0"
    probe = ("import sys, instrumenter.collector as c; c.library_path(); "
             "print(sorted(m for m in sys.modules if m.startswith(('ittapi', 'torch', 'instrumenter'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['instrumenter', 'instrumenter.collector']"


def test_exports_only_the_itt_entry_points():
    out = subprocess.run(["nm", "-D", "--defined-only", str(library_path())], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("no nm")
    names = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    assert "__itt_api_init" in names
    # and the one autoitt's launcher calls to sample start-up too
    assert {n for n in names if not n.startswith("__itt_")} <= {"_init", "_fini", "autoitt_start_sampling"}


def test_a_missing_library_says_how_to_build_it(monkeypatch):
    import importlib.util

    import instrumenter.collector as collector

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(collector.CollectorMissing, match="C compiler"):
        collector.library_path()


# --------------------------------------------------------------------------- ittapi targets


def test_names_nesting_and_timestamps(tmp_path):
    done, traces = run_target(tmp_path, """
        import os
        import ittapi.compat as itt
        outer = itt.domain_create("autoitt.test")
        other = itt.domain_create("other")
        itt.task_begin(outer, "epoch")
        for _ in range(3):
            itt.task_begin(outer, "step")
            itt.task_begin(other, "inner é")
            itt.task_end(other)
            itt.task_end(outer)
        itt.task_end(outer)
        print(os.getpid())
    """)
    trace = only_trace(traces)
    assert trace.path.name == f"itt-{trace.pid}.bin"
    assert trace.pid == int(done.stdout)
    assert trace.ppid == os.getpid()
    step = [("begin", "autoitt.test", "step"), ("begin", "other", "inner é"), ("end", "other", None),
            ("end", "autoitt.test", None)]
    assert tasks(trace) == [("begin", "autoitt.test", "epoch")] + step * 3 + [("end", "autoitt.test", None)]
    assert {e.pid for e in trace.events} == {trace.pid}
    assert len({e.tid for e in trace.events}) == 1
    check_monotonic(trace.events)
    assert trace.start_ns <= trace.events[0].ts
    assert trace.wall_start_ns > 1_600_000_000 * 10**9
    assert trace.thread_names[trace.events[0].tid]  # the prctl name, e.g. "python"


def test_start_paused_keeps_only_tasks_between_resume_and_pause(tmp_path):
    _, traces = run_target(tmp_path, """
        import ittapi.compat as itt
        d = itt.domain_create("w")
        itt.task_begin(d, "warmup"); itt.task_end(d)
        itt.resume()
        itt.task_begin(d, "kept1"); itt.task_end(d)
        itt.pause()
        itt.task_begin(d, "dropped"); itt.task_end(d)
        itt.resume()
        itt.task_begin(d, "kept2"); itt.task_end(d)
        itt.pause()
        itt.task_begin(d, "teardown"); itt.task_end(d)
    """, start_paused=True)
    trace = only_trace(traces)
    assert tasks(trace) == [
        ("resume", None, None), ("begin", "w", "kept1"), ("end", "w", None), ("pause", None, None),
        ("resume", None, None), ("begin", "w", "kept2"), ("end", "w", None), ("pause", None, None),
    ]


def test_collecting_from_the_start_without_start_paused(tmp_path):
    _, traces = run_target(tmp_path, """
        import ittapi.compat as itt
        d = itt.domain_create("w")
        itt.task_begin(d, "before"); itt.task_end(d)
        itt.pause()
        itt.task_begin(d, "paused"); itt.task_end(d)
        itt.resume()
        itt.task_begin(d, "after"); itt.task_end(d)
        itt.detach()
        itt.task_begin(d, "detached"); itt.task_end(d)
    """)
    names = [(e.kind, e.name) for e in only_trace(traces).events]
    assert names == [("begin", "before"), ("end", None), ("pause", None), ("resume", None),
                     ("begin", "after"), ("end", None), ("detach", None)]


def test_threads_record_concurrently_with_their_names(tmp_path):
    _, traces = run_target(tmp_path, """
        import threading
        import ittapi, ittapi.compat as itt
        d = itt.domain_create("threads")
        start = threading.Barrier(4)
        def work(i):
            ittapi.thread_set_name(f"worker-{i}")
            start.wait()
            for n in range(3000):
                itt.task_begin(d, f"outer-{i}")
                itt.task_begin(d, "inner")
                itt.task_end(d)
                itt.task_end(d)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        itt.task_begin(d, "main"); itt.task_end(d)
    """)
    trace = only_trace(traces)
    by_tid: Dict[int, List[Event]] = {}
    for event in trace.events:
        by_tid.setdefault(event.tid, []).append(event)
    assert len(by_tid) == 5
    workers = {tid: events for tid, events in by_tid.items() if len(events) > 2}
    assert len(workers) == 4
    for tid, events in workers.items():
        assert len(events) == 4 * 3000
        outer = {e.name for e in events if e.kind == "begin"} - {"inner"}
        assert len(outer) == 1
        i = outer.pop().split("-")[1]
        assert trace.thread_names[tid] == f"worker-{i}"
    check_balanced(trace.events)
    check_monotonic(trace.events)
    assert [e.ts for e in trace.events] == sorted(e.ts for e in trace.events)


@pytest.mark.slow
def test_more_events_than_a_buffer_holds_all_in_order(tmp_path):
    _, traces = run_target(tmp_path, """
        import ittapi.compat as itt
        d = itt.domain_create("many")
        names = [f"t{i}" for i in range(7)]
        for i in range(100_000):
            itt.task_begin(d, names[i % 7])
            itt.task_end(d)
    """)
    trace = only_trace(traces)
    assert trace.path.stat().st_size > 100_000 * 64
    assert len(trace.events) == 200_000
    assert [e.name for e in trace.events[0::2]] == [f"t{i % 7}" for i in range(100_000)]
    assert {e.kind for e in trace.events[1::2]} == {"end"}
    check_monotonic(trace.events)


def test_forked_child_writes_its_own_file(tmp_path):
    done, traces = run_target(tmp_path, """
        import os
        import ittapi.compat as itt
        d = itt.domain_create("fork")
        itt.task_begin(d, "parent-before")       # still buffered in the parent at the fork
        pid = os.fork()
        if pid == 0:
            child = itt.domain_create("child-domain")
            for i in range(5000):                # more than one buffer
                itt.task_begin(d, "child"); itt.task_begin(child, "child-inner")
                itt.task_end(child); itt.task_end(d)
            os._exit(0)                          # like multiprocessing: no exit handlers
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
        itt.task_end(d)
        itt.task_begin(d, "parent-after"); itt.task_end(d)
        print(os.getpid(), pid)
    """)
    parent_pid, child_pid = map(int, done.stdout.split())
    parent, child = read_trace_dir(traces).traces
    assert (parent.pid, child.pid) == (parent_pid, child_pid)
    assert child.ppid == parent_pid and child.path.name == f"itt-{child_pid}.bin"
    assert parent.warnings == [] and child.warnings == []
    assert tasks(parent) == [("begin", "fork", "parent-before"), ("end", "fork", None),
                             ("begin", "fork", "parent-after"), ("end", "fork", None)]
    assert {e.pid for e in parent.events} == {parent_pid}
    assert {e.pid for e in child.events} == {child_pid}
    assert tasks(child) == [("begin", "fork", "child"), ("begin", "child-domain", "child-inner"),
                            ("end", "child-domain", None), ("end", "fork", None)] * 5000
    assert child.start_ns > parent.start_ns


def test_no_file_until_attached_and_a_header_only_file_after(tmp_path):
    _, traces = run_target(tmp_path, """
        import ittapi.compat as itt
        itt.domain_create("only a domain")   # creating does not attach the collector
    """)
    assert not traces.exists() or list(traces.iterdir()) == []
    # attached (by the task calls) but started paused and never resumed: no events
    _, traces = run_target(tmp_path, """
        import ittapi.compat as itt
        d = itt.domain_create("never resumed")
        itt.task_begin(d, "dropped"); itt.task_end(d)
    """, start_paused=True)
    trace = only_trace(traces)
    assert trace.events == []


def test_uncaught_exception_still_flushes(tmp_path):
    done, traces = run_target(tmp_path, """
        import ittapi.compat as itt
        d = itt.domain_create("crash")
        itt.task_begin(d, "training")
        for i in range(10):
            itt.task_begin(d, "step"); itt.task_end(d)
        raise RuntimeError("boom")
    """, expect_rc=1)
    assert "boom" in done.stderr
    trace = only_trace(traces)
    assert len(trace.events) == 21
    assert trace.events[0].name == "training"


def test_sigint_keeps_what_was_recorded(tmp_path):
    script = tmp_path / "target.py"
    script.write_text(textwrap.dedent("""
        import ittapi.compat as itt
        d = itt.domain_create("sigint")
        itt.task_begin(d, "loop")
        for i in range(1000):
            itt.task_begin(d, "tick"); itt.task_end(d)
        print("ready", flush=True)
        while True:
            itt.task_begin(d, "tick"); itt.task_end(d)
    """))
    traces = tmp_path / "traces"
    target = subprocess.Popen([sys.executable, str(script)], env=target_env(traces), preexec_fn=default_signals,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert target.stdout.readline() == "ready\n"
    target.send_signal(signal.SIGINT)
    _, err = target.communicate(timeout=30)
    assert "KeyboardInterrupt" in err
    assert target.returncode == -signal.SIGINT  # Python re-raises SIGINT after finalizing
    trace = only_trace(traces)
    assert trace.events[0].name == "loop"
    assert len(trace.events) >= 2001
    ticks = trace.events[1:]
    # every pair up to the interrupt, with at most the interrupted pair's begin left open
    assert [e.kind for e in ticks[:len(ticks) // 2 * 2]] == ["begin", "end"] * (len(ticks) // 2)


@pytest.mark.parametrize("clock", ["auto", "monotonic"])
def test_timestamps_read_as_the_monotonic_clock_of_the_process(tmp_path, clock):
    """Whether records hold TSC ticks (the kernel's clocksource is the TSC) or monotonic ns, the reader
    gives CLOCK_MONOTONIC ns: each task lies between the monotonic readings the program took around it."""
    done, traces = run_target(tmp_path, """
        import time, ittapi.compat as itt
        d = itt.domain_create("clock")
        for pause in (0.0, 0.002, 0.15, 0.0, 0.3):
            before = time.monotonic_ns()
            itt.task_begin(d, "t"); time.sleep(pause); itt.task_end(d)
            print(before, time.monotonic_ns())
    """, AUTOITT_CLOCK=clock)
    trace = only_trace(traces)
    flags = struct.unpack_from("<I", trace.path.read_bytes(), 40)[0]
    assert bool(flags & 2) == (clock == "auto" and
                               Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
                               .read_text().strip() == "tsc")
    begins = [e.ts for e in trace.events if e.kind == "begin"]
    ends = [e.ts for e in trace.events if e.kind == "end"]
    for line, begin, end in zip(done.stdout.split("\n"), begins, ends):
        before, after = map(int, line.split())
        assert before - 20_000 <= begin <= end <= after + 20_000  # 20 µs: the conversion's slack, generously


# --------------------------------------------------------------------------- damaged files


def test_truncated_file_reads_up_to_the_damage(tmp_path):
    _, traces = run_target(tmp_path, """
        import ittapi.compat as itt
        d = itt.domain_create("cut")
        for i in range(10_000):
            itt.task_begin(d, "t"); itt.task_end(d)
    """)
    whole = only_trace(traces)
    data = whole.path.read_bytes()
    cut = tmp_path / "itt-1.bin"
    for size in (len(data) // 2 + 5, len(data) - 1, 56 + 32 + 7):
        cut.write_bytes(data[:size])
        trace = read_trace_file(cut)
        assert len(trace.warnings) == 1 and "itt-1.bin: truncated at byte" in trace.warnings[0], trace.warnings
        n = len(trace.events)
        assert f"read {n} events before the damage" in trace.warnings[0]
        assert trace.events == whole.events[:n]
        assert n <= len(whole.events) and (n > 0 or size < 200)
    # garbage over a chunk header in the middle: read up to it, nothing after it
    chunks, offset = [], 56
    while offset < len(data):
        chunks.append(offset)
        offset += 32 + struct.unpack_from("<I", data, offset + 8)[0]
    assert len(chunks) > 3
    middle = chunks[len(chunks) // 2]
    cut.write_bytes(data[:middle] + b"\xff" * 64 + data[middle + 64:])
    trace = read_trace_file(cut)
    assert trace.warnings[0].startswith(f"itt-1.bin: damaged at byte {middle}: bad chunk magic")
    assert 0 < len(trace.events) < len(whole.events)
    assert trace.events == whole.events[:len(trace.events)]


def test_a_file_that_is_not_a_trace(tmp_path):
    for content in (b"", b"AITTRACE", b"#!/usr/bin/env python\n" * 10):
        path = tmp_path / "itt-7.bin"
        path.write_bytes(content)
        with pytest.raises(TraceFormatError):
            read_trace_file(path)


# --------------------------------------------------------------------------- frameworks


def test_torch_operators_nest_inside_our_task(tmp_path):
    _, traces = run_target(tmp_path, """
        import ittapi.compat as itt
        import torch
        d = itt.domain_create("autoitt.torch")
        model = torch.nn.Linear(4, 2)
        itt.task_begin(d, "step")
        with torch.autograd.profiler.emit_itt():
            model(torch.ones(3, 4)).sum().backward()
        itt.task_end(d)
    """, timeout=120)
    trace = only_trace(traces)
    check_balanced(trace.events)
    main = [e for e in trace.events if e.tid == trace.events[0].tid]
    assert (main[0].domain, main[0].name) == ("autoitt.torch", "step")
    assert (main[-1].kind, main[-1].domain) == ("end", "autoitt.torch")
    depth, seen = 0, {}
    for event in main:
        if event.kind == "begin":
            depth += 1
            seen.setdefault(event.name, (event.domain, depth))
        elif event.kind == "end":
            depth -= 1
    assert seen["aten::linear"] == ("PyTorch", 2)
    assert seen["aten::addmm"][0] == "PyTorch" and seen["aten::addmm"][1] > 2
    assert any(name.startswith("autograd::engine::evaluate_function") for name in seen)
    assert all(e.domain == "PyTorch" for e in trace.events if e.kind == "begin" and e.name != "step")


@pytest.mark.slow
def test_tensorflow_onednn_tasks(tmp_path):
    # TF 2.21 turns oneDNN on by default only on some CPUs: ask for it
    _, traces = run_target(tmp_path, """
        import tensorflow as tf
        x = tf.random.uniform([2, 16, 16, 4])
        w = tf.random.uniform([3, 3, 4, 8])
        print(tf.nn.conv2d(x, w, 1, "SAME").shape)
    """, timeout=180, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="2")
    trace = only_trace(traces)
    check_balanced(trace.events)
    begun = {(e.domain, e.name) for e in trace.events if e.kind == "begin"}
    assert ("dnnl::primitive::execute", "convolution") in begun


# --------------------------------------------------------------------------- losing data


def test_a_file_of_the_same_pid_is_never_written_over(tmp_path):
    """A process given a pid whose file is already in the folder (the program it exec'd, a pid reused in a long
    run) writes its own under pid + 2**22; the one before stays as it was."""
    script = tmp_path / "target.py"
    script.write_text("import ittapi.compat as itt\nd = itt.domain_create('x')\n"
                      "for i in range(3):\n    itt.task_begin(d, 'step')\n    itt.task_end(d)\n")
    traces = tmp_path / "traces"
    traces.mkdir()
    done = subprocess.run(["bash", "-c", f'echo earlier > {traces}/itt-$$.bin && echo $$ && exec "$0" "$1"',
                           sys.executable, str(script)], env=target_env(traces), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[0])
    assert (traces / f"itt-{pid}.bin").read_text() == "earlier\n"
    trace = only_trace(traces)
    assert trace.pid == pid + 2 ** 22 and trace.path.name == f"itt-{pid + 2 ** 22}.bin"
    assert [name for kind, _, name in tasks(trace) if kind == "begin"] == ["step"] * 3


def _file_size_limit(size: int):
    """A preexec_fn: files this process writes stop at ``size`` bytes, and a write past it fails (EFBIG) instead
    of killing the process (SIGXFSZ ignored), as a full disk's writes fail (ENOSPC)."""
    import resource

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


def test_a_write_that_fails_is_said_on_stderr_with_what_was_lost(tmp_path):
    """The trace file cannot grow past its header: every write of records fails."""
    script = tmp_path / "target.py"
    script.write_text("import ittapi.compat as itt\nd = itt.domain_create('x')\n"
                      "for i in range(1000):\n    itt.task_begin(d, 'step')\n    itt.task_end(d)\n")
    traces = tmp_path / "traces"
    traces.mkdir()
    env = {**target_env(traces), "AUTOITT_SAMPLE_HZ": "0"}
    done = subprocess.run([sys.executable, "-B", str(script)], env=env, capture_output=True, text=True, timeout=60,
                          preexec_fn=_file_size_limit(4096))
    assert done.returncode == 0, done.stderr
    assert "autoitt collector: up to 2000 records of process" in done.stderr
    assert "(File too large): its trace ends early" in done.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGSEGV])
def test_a_signal_that_ends_the_process_writes_what_was_buffered_first(tmp_path, signum):
    done, traces = run_target(tmp_path, f"""
        import os, signal
        import ittapi.compat as itt
        d = itt.domain_create("x")
        for i in range(5):
            itt.task_begin(d, "step")
            itt.task_end(d)
        os.kill(os.getpid(), {int(signum)})
        """, expect_rc=-signum)
    assert [name for kind, _, name in tasks(only_trace(traces)) if kind == "begin"] == ["step"] * 5


#: Empties the pipe the target's trace descriptor was moved onto into the trace file (less the filler that
#: made the pipe full), but only after sending the target a second SIGTERM while its first one's handler
#: is blocked writing: a terminal's SIGHUP to the process group and autoitt passing it on do the same.
SECOND_SIGNAL_HELPER = """
import os, signal, sys, time
pid, pipe, filler, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
deadline = time.monotonic() + 30
while "pipe_write" not in open(f"/proc/{pid}/task/{pid}/wchan").read() and time.monotonic() < deadline:
    time.sleep(0.01)
os.kill(pid, signal.SIGTERM)  # for the process: its main thread blocks it while handling the first one
time.sleep(0.5)
with open(path, "ab") as trace:
    while chunk := os.read(pipe, 65536):
        dropped = min(filler, len(chunk))
        filler -= dropped
        trace.write(chunk[dropped:])
"""


def test_a_second_fatal_signal_on_another_thread_waits_for_the_first_ones_writing(tmp_path):
    (tmp_path / "helper.py").write_text(SECOND_SIGNAL_HELPER)
    done, traces = run_target(tmp_path, """
        import fcntl, os, signal, subprocess, sys, threading, time
        import ittapi.compat as itt
        d = itt.domain_create("x")
        for i in range(5):
            itt.task_begin(d, "step")
            itt.task_end(d)
        # The collector's trace descriptor now writes into a full pipe: the handler's write blocks until
        # the helper has sent the second signal and starts emptying it.
        def target(fd):
            try:
                return os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return ""  # the listing's own descriptor, closed by now
        fd = next(int(fd) for fd in os.listdir("/proc/self/fd") if target(fd).endswith(f"itt-{os.getpid()}.bin"))
        path = target(fd)
        read_end, write_end = os.pipe()
        fcntl.fcntl(write_end, 1031, 4096)  # F_SETPIPE_SZ: one page
        os.set_blocking(write_end, False)
        filler = 0
        try:
            while True:
                filler += os.write(write_end, bytes(512))
        except BlockingIOError:
            pass
        os.set_blocking(write_end, True)
        subprocess.Popen([sys.executable, "helper.py", str(os.getpid()), str(read_end), str(filler), path],
                         pass_fds=[read_end])
        os.dup2(write_end, fd)
        os.close(write_end)
        os.close(read_end)
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # takes the second signal
        signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
        time.sleep(60)
        """, expect_rc=-signal.SIGTERM, AUTOITT_TRACE_TRUST_FD="1")  # the pipe written as the trace file would be
    assert [name for kind, _, name in tasks(only_trace(traces)) if kind == "begin"] == ["step"] * 5


def test_a_signal_the_program_handles_itself_is_left_to_it(tmp_path):
    done, traces = run_target(tmp_path, """
        import os, signal, sys
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))
        import ittapi.compat as itt
        d = itt.domain_create("x")
        itt.task_begin(d, "step")
        itt.task_end(d)
        os.kill(os.getpid(), signal.SIGTERM)
        """, expect_rc=7)
    assert len([e for e in only_trace(traces).events if e.kind == "begin"]) == 1


# --------------------------------------------------------------------------- ranks

#: What launchers set; a test names the ones its process has, the others are taken out of its environment.
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "SLURM_NTASKS",
                      "SLURM_NPROCS")


def recorded_rank(tmp_path: Path, **variables: str) -> Optional[int]:
    """The rank the collector writes for a process started with exactly these launcher variables."""
    launcher = {name: variables.get(name) for name in LAUNCHER_VARIABLES}
    _, traces = run_target(tmp_path, """
        import ittapi.compat as itt
        d = itt.domain_create("ranked")
        itt.task_begin(d, "step"); itt.task_end(d)
    """, **launcher)
    return only_trace(traces).rank


@pytest.mark.parametrize("variables, rank", [
    ({}, None),
    ({"RANK": "3", "LOCAL_RANK": "1", "OMPI_COMM_WORLD_RANK": "5"}, 3),
    ({"LOCAL_RANK": "1"}, 1),
    ({"LOCAL_RANK": "1", "OMPI_COMM_WORLD_RANK": "5", "PMI_RANK": "4"}, 1),
    ({"OMPI_COMM_WORLD_RANK": "5", "PMI_RANK": "4"}, 5),
    ({"PMI_RANK": "4", "SLURM_PROCID": "6", "SLURM_NTASKS": "8"}, 4),
], ids=["none", "RANK first", "LOCAL_RANK alone", "LOCAL_RANK before MPI", "Open MPI before PMI", "PMI before Slurm"])
def test_the_rank_is_the_first_launcher_variable_set(tmp_path, variables, rank):
    assert recorded_rank(tmp_path, **variables) == rank


@pytest.mark.parametrize("variables", [{"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, {"SLURM_PROCID": "0"},
                                       {"SLURM_PROCID": "0", "SLURM_NPROCS": "1"}],
                         ids=["one task", "no task count", "one task (SLURM_NPROCS)"])
def test_slurm_procid_of_a_single_task_job_is_no_rank(tmp_path, variables):
    assert recorded_rank(tmp_path, **variables) is None


@pytest.mark.parametrize("variables", [{"SLURM_PROCID": "2", "SLURM_NTASKS": "4"},
                                       {"SLURM_PROCID": "2", "SLURM_NPROCS": "4"}], ids=["SLURM_NTASKS", "SLURM_NPROCS"])
def test_slurm_procid_is_the_rank_when_the_job_runs_several_tasks(tmp_path, variables):
    assert recorded_rank(tmp_path, **variables) == 2


@pytest.mark.parametrize("value", ["", "x", "-1", " 1", "1.0", "4294967295"])
def test_a_rank_variable_that_is_not_a_rank_is_passed_over(tmp_path, value):
    assert recorded_rank(tmp_path, RANK=value, LOCAL_RANK="2") == 2
