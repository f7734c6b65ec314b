/*
 * What every unit of the collector uses (common.c; the ground floor: it calls no other unit): branch hints,
 * the export marker, the record clock, the process's identity and two small utilities.
 *
 * The units stand on floors, each calling only units below it:
 *   common.c, unwind.c, pyframes.c        the ground: they call no other unit
 *   writer.c                              buffers and the trace file
 *   trace_limit.c, counters.c, hooks.c    above the writer (hooks.c also uses unwind.c)
 *   tasks.c                               above counters.c (tasks.h's task_push/task_pop)
 *   sampler.c                             hooks, tasks, writer, unwind, pyframes
 *   process.c, itt_binding.c              on top, calling down: load, fork, exit, fatal signals; ITT's entry points
 * Where a lower unit must reach an upper one, the upper one registers a small table of function
 * pointers at load (writer.h's g_writer_above, hooks.h's g_hooks_above); no unit names one above it.
 *
 * The library is built with -fvisibility=hidden: only what is marked EXPORT (the ITT entry points,
 * autoitt_start_sampling) leaves it.  Every header wraps its declarations in
 * `#pragma GCC visibility push(hidden)`, so that a unit reaching another's variable or function does so
 * directly (no GOT, no PLT; thread-local variables with the local-dynamic model), as when the collector
 * was one translation unit.
 *
 * The record clock is the TSC (rdtsc, ~15 ns in a VM, where clock_gettime takes ~35 ns) when the kernel
 * itself keeps time with it (its clocksource is "tsc": constant, synchronised across CPUs); each chunk
 * carries a (ticks, CLOCK_MONOTONIC) pair taken when it is written, from which the reader converts
 * ticks to nanoseconds.  Otherwise records hold CLOCK_MONOTONIC nanoseconds.  g_tsc is set at load
 * (identity_load) and never changes after.
 *
 * The process's identity in its files (pid, parent, rank, start clocks) is set at load (identity_load,
 * from collector_load) and again in a forked child (identity_fork_child, from process.c's fork_child).
 *
 * Signal context: now_ns and now_ticks are async-signal-safe (rdtsc, or clock_gettime through the vDSO);
 * the sampler's handler and the fatal-signal path call them, and read the identity's variables (plain
 * words, written only by identity_load and identity_fork_child).  identity_fork_child runs in a
 * forked child of a possibly multi-threaded parent: getpid, getppid and the clocks only.  hash_str is
 * pure (no lock, no allocation).  identity_load and env_number (getenv, /sys) never run in a handler.
 */
#ifndef AUTOITT_COMMON_H
#define AUTOITT_COMMON_H

#include <stdint.h>
#include <time.h>
#include <x86intrin.h>

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define PAD8(n) (((n) + 7u) & ~7u)

#pragma GCC visibility push(hidden)

extern int g_tsc;                           /* records hold TSC ticks, not CLOCK_MONOTONIC ns */
extern uint32_t g_pid, g_ppid;
extern uint64_t g_start_mono, g_start_real; /* CLOCK_MONOTONIC and CLOCK_REALTIME at load (or fork) */
extern uint64_t g_start_ticks;              /* the record clock then */
extern uint32_t g_rank_plus_one;            /* the rank a launcher gave this process + 1; 0: none */
extern int g_forked;                        /* this process is a forked child */

/* collector_load, first: pid, parent, the record clock (g_tsc), the start clocks, the rank. */
void identity_load(void);
/* A forked child (process.c's fork_child; async-signal-safe: getpid, getppid, clocks): its own pid, parent
   and start clocks; g_forked set. */
void identity_fork_child(void);

/* A variable holding a number below 2^32 - 1 (digits only: "", "-1", " 1" are not numbers): 1 and *out. */
int env_number(const char *variable, unsigned long *out);
/* FNV-1a of a string (itt_binding.c's names tables; hooks.c tells objects apart by it). */
uint64_t hash_str(const char *s);

static inline uint64_t now_ns(int clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The clock of records: see the top of this file. */
static inline uint64_t now_ticks(void) { return LIKELY(g_tsc) ? __rdtsc() : now_ns(CLOCK_MONOTONIC); }

#pragma GCC visibility pop

#endif
