"""The sampler is a guest in the program: it never harms it and the program cannot tell it is there.

Each test runs a real Python program under the real collector (``tests.test_collector``'s helpers),
does what real programs do to signals, descriptors, threads and libraries, and checks both sides:
the program behaves as it does without autoitt, and the samples are still taken.  The design and the
hazards are in ``instrumenter/collector/hooks.h`` and ``sampler.h``'s signal-handler audit.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from instrumenter.builtin.samples.samplefile import F_NO_STACK_MAP, read_sample_dir
from tests.test_collector import only_trace, run_target, target_env, tasks
from tests.test_crash_hunt import hunt
from tests.test_sampling import BUSY, REFUSE, cpu_time, only_samples, python_leaves

PROCESS_VM_READV = 310  # x86-64

#: the program's own SIGURG handler counts its calls; the program sends itself a few, as a socket would
OWN_SIGURG = """
import os, signal, threading, ittapi.compat as itt
calls = []
def mine(sig, frame):
    calls.append(sig)
itt.resume()
busy(0.1)
signal.signal(signal.SIGURG, mine)
busy(0.3)
for _ in range(3):
    signal.pthread_kill(threading.get_ident(), signal.SIGURG)
print(len(calls), signal.getsignal(signal.SIGURG) is mine)
"""


def busy_script(code: str) -> str:
    return BUSY + textwrap.dedent(code)


def test_a_programs_own_handler_for_the_sampling_signal_gets_its_signals_and_no_samples(tmp_path):
    done, traces = run_target(tmp_path, busy_script(OWN_SIGURG))
    assert done.stdout.split() == ["3", "True"]
    sf = only_samples(traces)
    assert sf.signal == 23 and sf.mechanism == "perf"
    # about 0.4 s of CPU at 1 kHz, before and after the program's handler went in (busy() is calibrated in the
    # process: 282 on a loaded machine); none would be left after the handler if ours were dropped
    assert len(sf) >= 200
    assert sf.lost <= 0.02 * len(sf)  # none went to the program's handler


def test_a_program_that_resets_every_handler_to_its_default_keeps_being_sampled(tmp_path):
    # what Lightning's teardown does: every signal's handler put back to what Python's own table says
    done, traces = run_target(tmp_path, busy_script("""
        import signal, ittapi.compat as itt
        itt.resume()
        busy(0.1)
        for sig in signal.valid_signals():
            try:
                signal.signal(sig, signal.getsignal(sig) or signal.SIG_DFL)
            except (OSError, ValueError, TypeError):
                pass
        signal.signal(signal.SIGURG, signal.SIG_DFL)
        import time
        after_reset = time.process_time()
        busy(0.6)
        print("done", time.process_time() - after_reset)
    """))
    word, cpu_after_reset = done.stdout.split()
    assert word == "done"
    sf = only_samples(traces)
    # 1 sample per ms of CPU: more than 60 % of the CPU time spent after the reset is more than all the samples
    # before it (start-up and busy(0.1)) could make up, had ours been dropped. The bound is the process's own
    # CPU time, not a count: busy() calibrated on a loaded machine ran short (282 samples where 400 were meant)
    assert float(cpu_after_reset) > 0.3
    assert len(sf) >= 0.6 * 1000 * float(cpu_after_reset) and sf.reason is None


def test_a_handler_installed_behind_sigactions_back_is_kept_and_sampling_re_armed_with_a_reason(tmp_path):
    # a function pointer from dlsym is a call no hook sees: the collector finds out at its next scan
    done, traces = run_target(tmp_path, busy_script("""
        import ctypes, signal, ittapi.compat as itt
        libc = ctypes.CDLL(None)
        sigaction = ctypes.cast(libc.sigaction, ctypes.c_void_p).value  # the address, not the GOT slot
        act = (ctypes.c_char * 152)()
        ctypes.memmove(act, ctypes.byref(ctypes.c_void_p(1)), 8)  # SIG_IGN
        itt.resume()
        busy(0.1)
        assert ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(sigaction)(
            signal.SIGURG, act, None) == 0
        busy(0.3)
        print("done")
    """))
    assert done.stdout == "done\n"
    sf = only_samples(traces)
    assert len(sf) >= 250
    assert any("without sigaction() or signal()" in r for r in sf.reasons)
    assert 0 < sf.lost <= 60  # ignored until the next scan, at most 50 ms later


def test_a_default_action_set_with_sa_siginfo_is_the_default_action_for_the_programs_signals(tmp_path):
    # {SIG_DFL, SA_SIGINFO} set behind the hooks: the kernel reads it as the default action (SIGURG: ignore),
    # and so must the collector once it takes it as the program's
    done, _ = run_target(tmp_path, busy_script("""
        import ctypes, os, signal, time, ittapi.compat as itt
        libc = ctypes.CDLL(None)
        sigaction = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(
            ctypes.cast(libc.sigaction, ctypes.c_void_p).value)
        act = (ctypes.c_char * 152)()
        ctypes.memmove(ctypes.addressof(act) + 136, ctypes.byref(ctypes.c_int(4)), 4)  # sa_flags = SA_SIGINFO
        itt.resume()
        busy(0.05)
        assert sigaction(signal.SIGURG, act, None) == 0
        busy(0.15)  # the collector's scan finds it and puts its own handler back
        for _ in range(3):
            os.kill(os.getpid(), signal.SIGURG)
        time.sleep(0.01)
        print("survived")
    """))
    assert done.stdout == "survived\n"


def test_threads_the_program_starts_run_their_samples_on_an_alternate_stack_and_keep_their_own(tmp_path):
    done, traces = run_target(tmp_path, busy_script("""
        import ctypes, threading, ittapi.compat as itt
        class Stack(ctypes.Structure):
            _fields_ = [("sp", ctypes.c_void_p), ("flags", ctypes.c_int), ("size", ctypes.c_size_t)]
        libc = ctypes.CDLL(None)
        itt.resume()
        seen = {}
        def worker(name, own):
            if own:  # a thread with an altstack of its own (as faulthandler, Go or Rust threads have)
                buf = ctypes.create_string_buffer(1 << 16)
                libc.sigaltstack(ctypes.byref(Stack(ctypes.addressof(buf), 0, 1 << 16)), None)
            busy(0.1)
            ss = Stack()
            libc.sigaltstack(None, ctypes.byref(ss))
            seen[name] = (ss.flags & 2 == 0, ss.size, own and ss.sp == ctypes.addressof(buf))
        threads = [threading.Thread(target=worker, args=(f"w{i}", i == 1)) for i in range(2)]
        for t in threads: t.start()
        for t in threads: t.join()
        print(seen["w0"][0], seen["w0"][1], seen["w1"][2])
    """))
    assert done.stdout.split() == ["True", str(256 << 10), "True"]
    sf = only_samples(traces)
    assert len({int(t) for t in sf.tid}) == 3


@pytest.mark.skipif(resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 200, reason="needs a limit above 160 to lower")
def test_many_threads_under_a_small_limit_on_open_files_open_theirs_as_without_autoitt(tmp_path):
    code = busy_script("""
        import os, threading, ittapi.compat as itt
        itt.resume()
        stop = threading.Event()
        threads = [threading.Thread(target=stop.wait) for _ in range(120)]
        for t in threads: t.start()
        busy(0.05)
        files = [open(os.devnull) for _ in range(100)]
        print(sorted(f.fileno() for f in files)[-1])
        stop.set()
        for t in threads: t.join()
    """)
    limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (160, 160))  # noqa: E731 (as `ulimit -n 160`)
    script = tmp_path / "target.py"
    script.write_text(code)
    plain = subprocess.run([sys.executable, str(script)], cwd=tmp_path, preexec_fn=limit, capture_output=True,
                           text=True, timeout=60)
    profiled = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=target_env(tmp_path / "traces"),
                              preexec_fn=limit, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    assert profiled.returncode == 0, profiled.stderr
    assert profiled.stdout == plain.stdout  # the same descriptor numbers: none of them is autoitt's
    sf = only_samples(tmp_path / "traces")
    assert sf.mechanism == "timer" and any("limit on open files is small (160" in r for r in sf.reasons)


SAMPLER_EVENTS = """
    import os, threading, time

    def event_numbers(table):
        numbers = []
        for fd in os.listdir(table):
            try:
                if os.readlink(f"{table}/{fd}") == "anon_inode:[perf_event]":
                    numbers.append(int(fd))
            except OSError:  # the listing's own descriptor
                pass
        return numbers

    def perf_events(table):
        return len(event_numbers(table))

    def scanner_table():
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/comm") as comm:
                if comm.read().strip() == "autoitt-sampler":
                    return f"/proc/self/task/{tid}/fd"

    def set_up():
        with open("/proc/self/timers") as timers:
            return max(perf_events(scanner_table()), timers.read().count("ID:"))

    def opens_moved_while(start):
        # opens and closes a file in a loop while start() runs in a thread of its own: how many opens did not
        # get the number the first did, and whether the lowest free number is back there at the end (a number
        # held since would make every open "moved")
        before = os.open(os.devnull, os.O_RDONLY); os.close(before)
        s = threading.Thread(target=start); s.start()
        moved = 0
        while s.is_alive():
            fd = os.open(os.devnull, os.O_RDONLY); os.close(fd)
            moved += fd != before
        s.join()
        return moved, before == os.open(os.devnull, os.O_RDONLY)

    def four_busy_threads(table):
        # starts 4 threads busy 0.4 s each; waits (3 s at most) until table() holds 5 perf events
        threads = [threading.Thread(target=busy, args=(0.4,)) for _ in range(4)]
        for t in threads: t.start()
        deadline = time.monotonic() + 3
        while perf_events(table()) < 5 and time.monotonic() < deadline:
            time.sleep(0.005)
        return threads
"""


def test_descriptors_of_the_sampler_stay_out_of_the_programs_low_numbers(tmp_path):
    # (threads start while the program opens and closes a file in a loop: the sampler reads each new
    # thread's name and opens its perf event at the lowest free number, in its scanner's descriptor table,
    # never the program's; in the program's, as where that table cannot be had, 2 of 4 runs here saw some
    # of the program's opens get another number)
    done, traces = run_target(tmp_path, busy_script(textwrap.dedent(SAMPLER_EVENTS) + textwrap.dedent("""
        import threading, time, ittapi.compat as itt
        itt.resume()
        def settled(table):
            try:
                return os.readlink(f"{table}/1") == "/dev/null"
            except OSError:  # its table being made: the program's numbers closed in it a moment before /dev/null
                return False

        # the scanner has settled its table (its stdout is /dev/null); a loaded machine may take seconds
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            table = scanner_table()
            if table and settled(table):
                break
            time.sleep(0.005)
        else:
            raise SystemExit("the scanner's table did not settle in 15 s")
        threads = []

        def starter():
            for _ in range(16):
                t = threading.Thread(target=busy, args=(0.05,)); t.start(); threads.append(t)
                time.sleep(0.02)

        moved, back = opens_moved_while(starter)
        for t in threads: t.join()
        print(moved, back)
    """)))
    assert done.stdout == "0 True\n"
    # and the threads that started are sampled, from the scanner's wake-up, not its next listing
    assert len({int(t) for t in only_samples(traces).tid}) >= 12


def test_the_programs_descriptor_table_holds_none_of_the_samplers_events(tmp_path):
    done, _ = run_target(tmp_path, busy_script(textwrap.dedent(SAMPLER_EVENTS) + textwrap.dedent("""
        import ittapi.compat as itt
        itt.resume()
        threads = four_busy_threads(scanner_table)
        print(perf_events(scanner_table()), perf_events("/proc/self/fd"))
        for t in threads: t.join()
    """)), AUTOITT_SAMPLE_MECHANISM="perf")
    assert done.stdout == "5 0\n"


def test_where_the_sampler_cannot_have_a_table_of_its_own_its_events_sit_above_the_programs_limit(tmp_path):
    # (unshare(CLONE_FILES) is refused by Docker's default seccomp profile; AUTOITT_SAMPLE_SHARED_FDS=1 acts so)
    done, traces = run_target(tmp_path, busy_script(textwrap.dedent(SAMPLER_EVENTS) + textwrap.dedent("""
        import resource, ittapi.compat as itt
        itt.resume()
        threads = four_busy_threads(lambda: "/proc/self/fd")
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        events = event_numbers("/proc/self/fd")
        # above the soft limit, or in the top eighth of a large one (writer.c's fd_out_of_the_way)
        print(len(events), min(events) >= soft - soft // 8)
        for t in threads: t.join()
    """)), AUTOITT_SAMPLE_MECHANISM="perf", AUTOITT_SAMPLE_SHARED_FDS="1")
    assert done.stdout == "5 True\n"
    assert len({int(t) for t in only_samples(traces).tid}) == 5


#: threads that name themselves (as PyTorch's and TensorFlow's pools do) and start while the program opens and
#: closes a file in a loop, counting the opens that did not get the number they got before
NAMED_THREADS_STARTING = SAMPLER_EVENTS + """
    import ctypes, ittapi.compat as itt
    libc = ctypes.CDLL(None, use_errno=True)
    itt.resume()
    busy(0.2)  # the scanner has opened what it keeps (the sample file, the map, the thread listing)

    def named(i):
        libc.prctl(15, f"worker-{i}".encode(), 0, 0, 0)  # PR_SET_NAME
        busy(0.05)

    threads = []
    def starter():
        for i in range(64):
            t = threading.Thread(target=named, args=(i,)); t.start(); threads.append(t)
            time.sleep(0.005)

    moved, back = opens_moved_while(starter)
    for t in threads: t.join()
    print(moved, back)
"""


def test_where_the_sampler_shares_the_programs_table_threads_name_themselves_and_take_no_number(tmp_path):
    # (where unshare is refused, as under Docker's default seccomp profile, perf is refused too and timers
    # sample; the scanner then reads no /proc/self/task/T/comm, whose descriptor would take the program's lowest
    # free number for a moment: a sampled thread says its own name, PR_GET_NAME in the handler)
    done, traces = run_target(tmp_path, busy_script(textwrap.dedent(NAMED_THREADS_STARTING)),
                              AUTOITT_SAMPLE_MECHANISM="timer", AUTOITT_SAMPLE_SHARED_FDS="1")
    assert done.stdout == "0 True\n"
    sf = only_samples(traces)
    named = {name for tid, name in sf.thread_names.items() if tid in set(sf.tid.tolist())}
    assert len({n for n in named if n.startswith("worker-")}) >= 8, sf.thread_names


#: a thread busy from before the collector loaded (Python's first ITT call loads it): never ready to be sampled
EARLY_THREAD = """
    import ctypes, threading, time
    libc = ctypes.CDLL(None)

    def early():
        libc.prctl(15, b"early-worker", 0, 0, 0)  # PR_SET_NAME
        busy(0.6)

    t = threading.Thread(target=early); t.start()
    time.sleep(0.05)
    import ittapi.compat as itt
    itt.resume()
    busy(0.1)
    t.join()
"""


@pytest.mark.parametrize("shared", [False, True])
def test_a_thread_that_could_not_be_sampled_is_said_with_its_cpu_time(tmp_path, shared):
    # (its CPU time from its CPU-time clock, which takes no descriptor; its name where reading it takes none of
    # the program's numbers: in the scanner's own table, not where it shares the program's)
    extra = {"AUTOITT_SAMPLE_SHARED_FDS": "1"} if shared else {}
    _, traces = run_target(tmp_path, busy_script(textwrap.dedent(EARLY_THREAD)), AUTOITT_SAMPLE_MECHANISM="timer",
                           **extra)
    (reason,) = [r for r in only_samples(traces).reasons if "unsampled" in r]
    assert reason.startswith("1 thread(s) (" + ("?" if shared else "early-worker") + ") ran 0.")
    assert float(reason.split(" ran ")[1].split(" s ")[0]) >= 0.2


def test_a_program_that_closes_a_range_of_descriptors_keeps_being_sampled(tmp_path):
    # (os.closerange over every number, as a daemonizing library or a careful subprocess helper does,
    # reaches only the program's own table)
    done, traces = run_target(tmp_path, busy_script("""
        import os, ittapi.compat as itt
        itt.resume()
        busy(0.1)
        os.closerange(3, 1 << 20)
        mark = time.monotonic_ns()
        busy(0.3)
        print(mark)
    """), AUTOITT_SAMPLE_MECHANISM="perf")
    mark = int(done.stdout)
    samples = only_samples(traces)
    assert (samples.ns > mark).sum() >= 200


#: Tasks and busy work on both sides of a closerange over every descriptor (daemonizing code, a subprocess helper
#: of the program's own); then files of the program's, opened on the numbers the collector's files had.
CLOSES_EVERYTHING = """
    import os, resource, ittapi.compat as itt
    domain = itt.domain_create("closes")
    itt.resume()
    for step in range(200):
        itt.task_begin(domain, "step")
        busy(0.001)
        itt.task_end(domain)
        if step == 100:
            os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
            mark = time.monotonic_ns()
            # the program's own files, on the numbers just freed: written by the program alone
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            mine = [os.open("mine-%d" % n, os.O_WRONLY | os.O_CREAT, 0o644) for n in range(4)]
            high = [os.dup2(mine[0], n) for n in range(soft, min(soft + 64, hard))]
    busy(0.2)
    itt.pause()
    for fd in mine:
        os.close(fd)
    print(mark, max(os.path.getsize("mine-%d" % n) for n in range(4)))
"""


@pytest.mark.parametrize("mechanism", ["perf", "timer"])
def test_a_program_that_closes_every_descriptor_mid_run_loses_no_task_and_no_sample(tmp_path, mechanism):
    # the trace file is opened again, by its path, where its descriptor was closed or its number taken: nothing
    # buffered is lost, and nothing is written to the program's files (os.dup2 put them on our old numbers)
    done, traces = run_target(tmp_path, busy_script(CLOSES_EVERYTHING), AUTOITT_SAMPLE_MECHANISM=mechanism)
    mark, written = (int(word) for word in done.stdout.split())
    assert written == 0
    trace = only_trace(traces)  # no damage: a sample written into the trace file would be
    assert tasks(trace).count(("begin", "closes", "step")) == 200
    assert "opened again" in done.stderr
    samples = only_samples(traces)
    assert (samples.ns > mark).sum() >= 10, len(samples)


@pytest.mark.slow
def test_libraries_unloaded_and_loaded_again_are_unwound_from_their_own_tables(tmp_path):
    hunt.build_reload_libraries(tmp_path)
    done, traces = run_target(tmp_path, "import ittapi.compat as itt\nitt.resume()\n" + hunt.RELOAD,
                              AUTOITT_SAMPLE_HZ="5000")
    assert done.stdout.strip() == hunt.DONE
    sf = only_samples(traces)
    assert len(sf) >= 100


def test_a_forked_child_samples_its_thread_without_the_parents_altstack_bookkeeping_going_wrong(tmp_path):
    done, traces = run_target(tmp_path, busy_script("""
        import os, threading, ittapi.compat as itt
        itt.resume()
        def child():
            t = threading.Thread(target=busy, args=(0.2,)); t.start(); busy(0.2); t.join()
        pid = os.fork()
        if pid == 0:
            child()
            itt.pause()
            os._exit(0)
        os.waitpid(pid, 0)
        print("done")
    """))
    assert done.stdout == "done\n"
    files = {sf.pid: cpu_time(sf) for sf in read_sample_dir(traces)}
    child = next(sf for pid, sf in files.items() if sf.ppid != 0 and sf.forked)
    assert len({int(t) for t in child.tid}) == 2 and len(child) >= 200
    assert not (child.flags & F_NO_STACK_MAP).any()


def step_spans(folder: Path):
    """(pid, tid, begin ns, end ns) of every `step` task of autoitt's domain in a result folder's traces."""
    from instrumenter.builtin.trace.events import read_trace_dir

    spans = []
    for trace in read_trace_dir(folder / "itt").traces:
        open_by_thread = {}
        for e in trace.events:
            stack = open_by_thread.setdefault(e.tid, [])
            if e.kind == "begin":
                stack.append(e)
            elif e.kind == "end" and stack:
                begin = stack.pop()
                if begin.domain == "autoitt.train" and begin.name == "step":
                    spans.append((trace.pid, e.tid, begin.ts, e.ts))
    return spans


@pytest.mark.slow
def test_lightning_validate_then_fit_has_samples_in_every_step(tmp_path):
    from tests.test_profile import autoitt

    (tmp_path / "train.py").write_text(hunt.LIGHTNING_VALIDATE_FIT)
    # perf, whatever this machine's measure chooses: with tick-limited timers a step of 20 ms of CPU can get no
    # sample when the cores are contended (its expiries served late, a later sample carrying their weight), and
    # what this checks is that sampling goes on through Lightning's validate then fit
    done = autoitt("profile", "--backend", "builtin", "-r", "out", "train.py", cwd=tmp_path,
                   env={"AUTOITT_SAMPLE_MECHANISM": "perf"})
    assert done.returncode == 0, done.stderr[-3000:]
    spans = step_spans(tmp_path / "out")
    assert len(spans) == 6
    samples = {sf.pid: sf for sf in read_sample_dir(tmp_path / "out" / "itt")}
    for pid, tid, begin, end in spans:
        sf = samples[pid]
        inside = (sf.tid == tid) & (sf.ns >= begin) & (sf.ns <= end)
        # 20 ms of CPU each, at 1000 samples a second (counted in the CPU periods the samples stand for)
        assert int(sf.weight[inside].sum()) >= 5, (begin, end, int(inside.sum()), int(sf.weight[inside].sum()))
    assert not any("handler" in r for sf in samples.values() for r in sf.reasons)


def test_python_frames_are_read_through_page_probes_where_process_vm_readv_is_refused(tmp_path):
    # Docker's default seccomp profile refuses process_vm_readv to unprivileged containers on old kernels
    done, traces = run_target(tmp_path, REFUSE + busy_script(f"""
        refuse({PROCESS_VM_READV})
        import ittapi.compat as itt
        itt.resume()
        busy(0.3)
        print("done")
    """))
    assert done.stdout == "done\n"
    sf = only_samples(traces)
    leaves = python_leaves(sf, range(len(sf)))
    assert sum(count for (qualname, _), count in leaves.items() if qualname == "busy") >= 150  # of ~300
