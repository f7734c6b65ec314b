/*
 * Counters per own task.  See counters.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "counters.h"
#include "writer.h"

enum { HW_CYCLES, HW_INSTRUCTIONS, HW_CACHE_MISSES, HW_BRANCH_MISSES, HW_COUNT };
static int g_hw_fd[HW_COUNT] = {-1, -1, -1, -1};
static int g_hw_ok;                          /* every hardware counter opened */
static char g_hw_note[256];                  /* why not, for the note record */
static pthread_once_t g_hw_note_once = PTHREAD_ONCE_INIT;

void counters_load(void)
{
    static const uint64_t configs[HW_COUNT] = {PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_HW_INSTRUCTIONS,
                                               PERF_COUNT_HW_CACHE_MISSES, PERF_COUNT_HW_BRANCH_MISSES};
    static const char *names[HW_COUNT] = {"cycles", "instructions", "cache-misses", "branch-misses"};
    for (int i = 0; i < HW_COUNT; i++) {
        struct perf_event_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.size = sizeof attr;
        attr.type = PERF_TYPE_HARDWARE;
        attr.config = configs[i];
        attr.exclude_kernel = 1;
        attr.exclude_hv = 1;
        attr.inherit = 1;
        int fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
        if (fd < 0) {
            int error = errno;
            snprintf(g_hw_note, sizeof g_hw_note,
                     "hardware counters (cycles, instructions, cache and branch misses) are not read: "
                     "perf_event_open(%s) failed: %s%s", names[i], strerror(error),
                     error == ENOENT || error == EOPNOTSUPP ? " (no PMU: a VM without a virtual PMU)"
                     : error == EACCES || error == EPERM ? " (perf_event_paranoid is 3, or a container forbids it)"
                     : "");
            for (int k = 0; k < i; k++) { close(g_hw_fd[k]); g_hw_fd[k] = -1; }
            return;
        }
        g_hw_fd[i] = fd_out_of_the_way(fd, 0);
    }
    g_hw_ok = 1;
}

static void write_hw_note(void)
{
    pthread_mutex_lock(&g_mutex);
    register_name_locked(K_NOTE, NULL, g_hw_note);
    pthread_mutex_unlock(&g_mutex);
}

static void read_counts(struct own_counts *c)
{
    struct timespec ts;
    struct rusage usage;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    c->cpu_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    if (getrusage(RUSAGE_SELF, &usage) == 0) {
        c->faults = (uint64_t)(usage.ru_minflt + usage.ru_majflt);
        c->switches = (uint64_t)(usage.ru_nvcsw + usage.ru_nivcsw);
    }
    for (int i = 0; g_hw_ok && i < HW_COUNT; i++) {
        uint64_t value = 0;
        if (read(g_hw_fd[i], &value, sizeof value) == (ssize_t)sizeof value) c->hw[i] = value;
    }
}

/* Own tasks at one depth of a thread are counted at most once per this many ns.  Reading the counts costs
   ~1.4 µs in a loop that does nothing else (a getrusage and a clock read), but a real step pays more: after
   a millisecond of PyTorch the kernel's paths are out of the caches, and a counted step of the conv sample
   paid ~20 µs in all in this VM (measured in one process: benchmarks/bench_step_parts.py).  At once a millisecond
   that was 2 % of a 1 ms step and 1.6 % of the conv sample's 0.43 ms one (counted one in three); at once
   per 10 ms, a step of 10 ms or more is always counted and pays ≤ 0.2 %, a shorter one is counted one in
   10 ms. */
#define COUNT_EVERY_NS 10000000ull

/* An own task began: its counts so far, at its place in the thread's task stack (unless one at this
   depth was counted less than COUNT_EVERY_NS ago). */
__attribute__((noinline, cold)) void own_counters_begin(struct tbuf *t, uint32_t d)
{
    if (g_hw_note[0]) pthread_once(&g_hw_note_once, write_hw_note);
    if (d >= TASK_STACK) return;
    uint64_t now = now_ns(CLOCK_MONOTONIC);
    if (t->counted_at[d] && now - t->counted_at[d] < COUNT_EVERY_NS) {
        t->counting &= ~(1ull << d);
        return;
    }
    t->counted_at[d] = now;
    t->counting |= 1ull << d;
    t->counted_ticks[d] = now_ticks(); /* the counted span's start: the reader times it to the task's end */
    read_counts(&t->counts[d]);
}

static inline uint64_t grown(uint64_t now, uint64_t then) { return now > then ? now - then : 0; }

/* An own task (at depth d of the thread's stack) ended: what the process counted meanwhile. */
__attribute__((noinline, cold)) void own_counters_end(struct tbuf *t, uint32_t d)
{
    if (d >= TASK_STACK || !(t->counting & (1ull << d))) return;
    t->counting &= ~(1ull << d);
    struct own_counts now, *then = &t->counts[d];
    memset(&now, 0, sizeof now);
    read_counts(&now);
    uint64_t faults = grown(now.faults, then->faults), switches = grown(now.switches, then->switches);
    /* at the time its counting began (F_COUNTED_FROM): it follows the task's end record, whose time ends the
       span, so the reader has the wall time of exactly the instances counted (short steps are counted one per
       COUNT_EVERY_NS, and the first one always: the mean of every instance's would not do) */
    if (!emit_at(K_COUNTERS, F_COUNTED_FROM, switches > 0xFFFF ? 0xFFFF : (uint16_t)switches,
                 faults > UINT32_MAX ? UINT32_MAX : (uint32_t)faults, t->counted_ticks[d],
                 grown(now.cpu_ns, then->cpu_ns), t->tasks[d].name))
        return;
    if (g_hw_ok) {
        emit(K_HARDWARE, 0, 0, grown(now.hw[HW_CYCLES], then->hw[HW_CYCLES]),
             grown(now.hw[HW_INSTRUCTIONS], then->hw[HW_INSTRUCTIONS]));
        emit(K_HARDWARE2, 0, 0, grown(now.hw[HW_CACHE_MISSES], then->hw[HW_CACHE_MISSES]),
             grown(now.hw[HW_BRANCH_MISSES], then->hw[HW_BRANCH_MISSES]));
    }
}
