"""What does autoitt's ITT collector cost per task, and per Python task call?

1. Per task begin+end pair, called from C the way the ITT static part's
   ``__itt_task_begin``/``__itt_task_end`` macros call (test the domain's
   flags, load the function pointer, call it), in a loop timed in C:

   * harness: a C program (compiled here with gcc) builds a fake
     ``__itt_global`` with an api list, ``dlopen``s the collector and calls its
     ``__itt_api_init``, as a static part does; it times the bound pointers
     (collecting, and paused so every task is dropped) against the same loop
     through empty functions and through NULL pointers (what a static part
     does with no collector).
   * ittapi: the real static part in ittapi's native module, attached to the
     collector by its own first call; a small C loop (compiled here, called
     once through ctypes) calls its exported ``__itt_task_begin_ptr__3_0``/
     ``__itt_task_end_ptr__3_0`` pointers.

   Every collecting run really writes its trace (64 bytes per pair) into a
   temporary directory, so the cost of the ``write()`` calls is included.

2. Python level: the wall time of a loop of ``itt.task_begin``/``itt.task_end``
   (``ittapi.compat``) with and without the collector attached (no collector:
   the calls go to ittapi's stubs and do nothing).

Prints ns per pair (best and median of ``--rounds`` rounds) and ratios; asserts
nothing. The targets: at most 50 ns per pair from C, 100 ns added per Python pair.

Usage:  .venv/bin/python benchmarks/bench_collector.py [--pairs N] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from instrumenter.collector import library_path  # noqa: E402

HARNESS_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* the ITT ABI a static part shows a collector (x86-64) */
typedef struct dom { volatile int flags; const char *nameA; void *nameW; int extra1; void *extra2; struct dom *next; } dom;
typedef struct sh { const char *strA; void *strW; int extra1; void *extra2; struct sh *next; } sh;
typedef struct id { unsigned long long d1, d2, d3; } id;
typedef struct api { const char *name; void **func_ptr; void *init_func; void *null_func; int group; } api;
typedef struct glob {
    unsigned char magic[8]; unsigned long vmaj, vmin, vbuild; long api_initialized, mutex_initialized, atomic_counter;
    pthread_mutex_t mutex; void *lib; void *error_handler; const char **dll_path_ptr; api *api_list_ptr; struct glob *next;
    void *thread_list; dom *domain_list; sh *string_list; int state; void *counter_list; unsigned ipt; void *hist; void *cm;
} glob;

typedef void begin_t(const dom *, id, id, sh *);
typedef void end_t(const dom *);
typedef dom *domain_create_t(const char *);
typedef sh *string_create_t(const char *);
typedef void void_t(void);

static begin_t *task_begin_ptr;
static end_t *task_end_ptr;
static domain_create_t *domain_create_ptr;
static string_create_t *string_create_ptr;
static void_t *pause_ptr, *resume_ptr;

__attribute__((noinline)) static void empty_begin(const dom *d, id a, id b, sh *n) { (void)d; (void)a; (void)b; (void)n; __asm__ volatile(""); }
__attribute__((noinline)) static void empty_end(const dom *d) { (void)d; __asm__ volatile(""); }

static api api_list[] = {
    {"__itt_domain_create", (void **)&domain_create_ptr, 0, 0, 0x1000},
    {"__itt_string_handle_create", (void **)&string_create_ptr, 0, 0, 0x1000},
    {"__itt_task_begin", (void **)&task_begin_ptr, 0, 0, 0x1000},
    {"__itt_task_end", (void **)&task_end_ptr, 0, 0, 0x1000},
    {"__itt_pause", (void **)&pause_ptr, 0, 0, 3},
    {"__itt_resume", (void **)&resume_ptr, 0, 0, 3},
    {0, 0, 0, 0, 0},
};

static glob global = {{0xED, 0xAB, 0xAB, 0xEC, 0x0D, 0xEE, 0xDA, 0x30}, 3, 0, 20250101};

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }

/* what __itt_task_begin(d, __itt_null, __itt_null, h); __itt_task_end(d); expand to */
static double run(const dom *d, sh *h, long pairs)
{
    static const id null_id = {0, 0, 0};
    double t0 = now();
    for (long i = 0; i < pairs; i++) {
        if (d->flags && task_begin_ptr) task_begin_ptr(d, null_id, null_id, h);
        if (d->flags && task_end_ptr) task_end_ptr(d);
    }
    return (now() - t0) / pairs;
}

int main(int argc, char **argv)
{
    /* argv: mode (collector|paused|empty|null) library pairs rounds */
    const char *mode = argv[1];
    long pairs = atol(argv[3]), rounds = atol(argv[4]);
    static dom own_domain = {1, "bench"};
    static sh own_name = {"task"};
    dom *d = &own_domain;
    sh *h = &own_name;
    if (!strcmp(mode, "collector") || !strcmp(mode, "paused")) {
        void *lib = dlopen(argv[2], RTLD_LAZY);
        if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 1; }
        void (*init)(glob *, int) = (void (*)(glob *, int))dlsym(lib, "__itt_api_init");
        global.lib = lib;
        global.api_list_ptr = api_list;
        init(&global, -1);
        d = domain_create_ptr("bench");
        h = string_create_ptr("task");
        if (!strcmp(mode, "paused")) pause_ptr();
    } else if (!strcmp(mode, "empty")) {
        task_begin_ptr = empty_begin;
        task_end_ptr = empty_end;
    } /* null: both pointers stay NULL, as a static part leaves them with no collector */
    run(d, h, pairs / 2 + 1); /* warm-up */
    printf("[");
    for (long r = 0; r < rounds; r++) printf("%s%.3f", r ? ", " : "", run(d, h, pairs));
    printf("]\n");
    return 0;
}
"""

LOOP_C = r"""
#include <time.h>
typedef struct dom { volatile int flags; } dom;
typedef struct id { unsigned long long d1, d2, d3; } id;
typedef void begin_t(const void *, id, id, void *);
typedef void end_t(const void *);
/* one timed round of pairs through a static part's own pointer variables; returns ns per pair */
double loop(begin_t **begin_pp, end_t **end_pp, const dom *d, void *h, long pairs)
{
    static const id null_id = {0, 0, 0};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < pairs; i++) {
        if (d->flags && *begin_pp) (*begin_pp)(d, null_id, null_id, h);
        if (d->flags && *end_pp) (*end_pp)(d);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / pairs;
}
"""

# runs in a child process: the collector must be named before ittapi attaches it
ITTAPI_DRIVER = r"""
import ctypes, json, sys
import ittapi.compat as itt
import ittapi.native as native
loop_lib, pairs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
itt.task_begin(itt.domain_create("warm"), "warm"); itt.task_end(itt.domain_create("warm"))  # attaches
lib = ctypes.CDLL(native.__file__)
pointer = lambda name: ctypes.c_void_p.in_dll(lib, name)
begin_pp, end_pp = pointer("__itt_task_begin_ptr__3_0"), pointer("__itt_task_end_ptr__3_0")
create = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
domain = create(pointer("__itt_domain_create_ptr__3_0").value)(b"bench")
name = create(pointer("__itt_string_handle_create_ptr__3_0").value)(b"task")
if not domain:  # no collector: the pointers are NULL, the loop only tests them
    enabled = ctypes.c_int(1)
    domain, name = ctypes.addressof(enabled), None
loop = ctypes.CDLL(loop_lib).loop
loop.restype = ctypes.c_double
loop.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long]
args = (ctypes.addressof(begin_pp), ctypes.addressof(end_pp), domain, name)
loop(*args, pairs // 2 + 1)
print(json.dumps([loop(*args, pairs) for _ in range(rounds)]))
"""

PYTHON_DRIVER = r"""
import json, sys, time
import ittapi.compat as itt
pairs, rounds = int(sys.argv[1]), int(sys.argv[2])
d = itt.domain_create("bench")
begin, end = itt.task_begin, itt.task_end
def run(n):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        begin(d, "task")
        end(d)
    return (time.perf_counter_ns() - t0) / n
run(pairs // 2 + 1)
print(json.dumps([run(pairs) for _ in range(rounds)]))
"""


def _compile(work: Path) -> Dict[str, Path]:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        sys.exit("bench_collector: needs gcc")
    (work / "harness.c").write_text(HARNESS_C)
    (work / "loop.c").write_text(LOOP_C)
    subprocess.run([gcc, "-O2", "-o", str(work / "harness"), str(work / "harness.c"), "-ldl", "-lpthread"], check=True)
    subprocess.run([gcc, "-O2", "-fPIC", "-shared", "-o", str(work / "loop.so"), str(work / "loop.c")], check=True)
    return {"harness": work / "harness", "loop": work / "loop.so"}


def _run_json(command: List[str], env: Dict[str, str]) -> List[float]:
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_collector: {' '.join(command[:2])} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _env(trace_dir: Path, collector: bool, paused: bool = False) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("INTEL_LIBITTNOTIFY64", "AUTOITT_TRACE_DIR", "AUTOITT_START_PAUSED")}
    if collector:
        env.update(INTEL_LIBITTNOTIFY64=str(library_path()), AUTOITT_TRACE_DIR=str(trace_dir),
                   AUTOITT_START_PAUSED="1" if paused else "0")
    return env


def _row(label: str, values: List[float], base: float = 0.0) -> str:
    best, median = min(values), statistics.median(values)
    ratio = f"  x{median / base:6.1f}" if base else ""
    return f"  {label:<44} best {best:8.1f}  median {median:8.1f} ns/pair{ratio}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200_000, help="task pairs per C round (default 2e5)")
    parser.add_argument("--python-pairs", type=int, default=200_000, help="pairs per Python round (default 2e5)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(f"collector: {library_path()}")
    with tempfile.TemporaryDirectory(prefix="autoitt-bench-") as tmp:
        work = Path(tmp)
        binaries = _compile(work)
        traces = work / "traces"
        harness = [str(binaries["harness"]), "", str(library_path()), str(args.pairs), str(args.rounds)]

        def harness_run(mode: str) -> List[float]:
            harness[1] = mode
            return _run_json(harness, _env(traces, collector=True))

        print(f"\n1. From C, {args.pairs} begin+end pairs per round, {args.rounds} rounds")
        print(" harness (fake static part; the collector writes its trace):")
        empty = harness_run("empty")
        collecting = harness_run("collector")
        print(_row("collector, collecting", collecting, statistics.median(empty)))
        print(_row("collector, paused (tasks dropped)", harness_run("paused"), statistics.median(empty)))
        print(_row("empty functions (baseline for ratios)", empty))
        print(_row("NULL pointers (a static part, no collector)", harness_run("null")))
        written = sum(p.stat().st_size for p in traces.glob("itt-*.bin"))
        print(f"  trace bytes written: {written}")
        shutil.rmtree(traces, ignore_errors=True)

        print(" ittapi's static part (real __itt_task_*_ptr__3_0 pointers):")
        driver = work / "ittapi_driver.py"
        driver.write_text(ITTAPI_DRIVER)
        command = [sys.executable, str(driver), str(binaries["loop"]), str(args.pairs), str(args.rounds)]
        real = _run_json(command, _env(traces, collector=True))
        real_none = _run_json(command, _env(traces, collector=False))
        print(_row("collector, collecting", real, statistics.median(empty)))
        print(_row("no collector (pointers NULL)", real_none))
        shutil.rmtree(traces, ignore_errors=True)

        print(f"\n2. From Python (ittapi.compat), {args.python_pairs} pairs per round, {args.rounds} rounds")
        driver = work / "python_driver.py"
        driver.write_text(PYTHON_DRIVER)
        command = [sys.executable, str(driver), str(args.python_pairs), str(args.rounds)]
        without = _run_json(command, _env(traces, collector=False))
        with_collector = _run_json(command, _env(traces, collector=True))
        print(_row("without collector", without))
        print(_row("with collector", with_collector, statistics.median(without)))
        overhead = statistics.median(with_collector) - statistics.median(without)
        print(f"  collector overhead per Python pair: {overhead:.1f} ns (median)")
        print(textwrap.dedent("""
            Ratios are against the row marked as baseline in each part. From C the
            target is at most 50 ns per pair while collecting (100 ns added per Python pair)."""))


if __name__ == "__main__":
    main()
