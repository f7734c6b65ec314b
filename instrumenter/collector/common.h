/*
 * What every unit of the collector uses: branch hints, the export marker, and the record clock.
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
 * (process.c) and never changes after.
 *
 * Signal context: now_ns and now_ticks are async-signal-safe (rdtsc, or clock_gettime through the vDSO);
 * the sampler's handler and the fatal-signal path call them.
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

extern int g_tsc;                           /* records hold TSC ticks, not CLOCK_MONOTONIC ns (process.c) */

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
