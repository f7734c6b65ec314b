/*
 * The trace limit (trace_limit.c): AUTOITT_TRACE_LIMIT bytes per file.
 *
 * Past the limit the timeline stops, the statistics do not: a buffer that
 * would take the file over the limit is not written but counted, by its
 * thread's own state (under its flush_lock, like the buffer), per task
 * (domain, string handle): count, summed duration, time inside (an instance
 * inside another of the same task counted once), self time, min, max, time
 * in outermost instances, and a histogram of durations in the reader's
 * buckets (instrumenter/builtin/aggregate.py; HIST_* in format.h).  Each flush of every buffer
 * (pause, detach, exit, a fatal signal) writes the counts since the last one
 * as K_STATS records.  What the file must still hold is written past the
 * limit, a few records each: the K_LIMIT mark, pause/resume/detach, and the
 * end of every task whose begin is in the file (with the time its children
 * spent uncounted by the file, F_CHILD_NS), so the reader pairs what it has.
 *
 * Signal context: drain and write_stats run in the fatal-signal handler (writer_flush_in_signal) with
 * in_signal / at_end set: then no allocation (a task met with no room in the thread's table is counted
 * in g_uncounted instead, and a thread with no counts yet counts nothing), write() only, no lock (the
 * caller holds the buffer's flush_lock, try-locked).  Anything added here must keep to that.
 */
#ifndef AUTOITT_TRACE_LIMIT_H
#define AUTOITT_TRACE_LIMIT_H

#include <stdatomic.h>
#include <stdint.h>

#include "writer.h"

#pragma GCC visibility push(hidden)

/* collector_load, before writer_load: AUTOITT_TRACE_LIMIT; registers drain and write_stats in writer.h's
   g_writer_above. */
void trace_limit_load(void);
/* A forked child's file starts under the limit again (process.c's fork_child). */
void trace_limit_fork_child(void);
/* drain and write_stats (static here) are reached through writer.h's g_writer_above only. */

#pragma GCC visibility pop

#endif
