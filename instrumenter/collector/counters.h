/*
 * Counters per own task (counters.c): when a task of one of autoitt's own domains (steps, epochs,
 * evaluations) begins, the thread keeps the process's CPU time, page faults and context switches (and,
 * where the PMU can be read, cycles, instructions, cache and branch misses) in its task stack; when it
 * ends, it writes what they grew by in a counters record right after the end record (trace format:
 * "Counters").  Own tasks are a handful per step, so the cost (a clock read and a getrusage at each begin
 * and end, a read() per hardware counter: ~20 µs a counted step of PyTorch in a VM, its kernel paths
 * cold) stays off the operators' hot path; and steps shorter than 10 ms are counted one per 10 ms
 * (COUNT_EVERY_NS).
 *
 * Hardware counters are opened once, at load, for the whole process (inherit: threads created later
 * count too, so load comes before the frameworks' thread pools).  In VMs without a virtual PMU and
 * with perf_event_paranoid 3 they cannot be opened: a note record says why, once per file.
 *
 * Signal context: none.  Everything here runs on the thread that begins or ends an own task (it may
 * take g_mutex for the note, and emit records), never in a handler.
 */
#ifndef AUTOITT_COUNTERS_H
#define AUTOITT_COUNTERS_H

#include <stdint.h>

#pragma GCC visibility push(hidden)

struct tbuf;

/* collector_load: the process's hardware counters, user mode, every thread (inherit). */
void counters_load(void);
/* An own task began at depth d of t's task stack / ended (tasks.h's task_push, task_pop: out of line). */
void own_counters_begin(struct tbuf *t, uint32_t d);
void own_counters_end(struct tbuf *t, uint32_t d);

#pragma GCC visibility pop

#endif
