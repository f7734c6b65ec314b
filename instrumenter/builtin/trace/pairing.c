/*
 * The reader's inner loop (instrumenter/builtin/statistics/aggregate.py): one thread's
 * begin and end records of one block, paired with a stack carried from block
 * to block, and counted per task.  A plain loop in C because it runs once per
 * event of runs of hundreds of millions of events; aggregate.py calls it
 * through ctypes with numpy arrays and documents the contract.
 *
 * Built by setup.py into instrumenter/builtin/trace/_pairing*.so (no Python API: a plain
 * shared library).
 */
#include <math.h>
#include <stdint.h>

#include "format.h" /* the trace record, its kinds and flags (generated from instrumenter/collector/formats.py) */

_Static_assert(sizeof(int64_t) == 8 && sizeof(void *) == 8, "64-bit");

#define EXPORT __attribute__((visibility("default")))

AUTOITT_FORMAT_DIGEST;

typedef struct {
    int64_t *ids, *starts, *child; /* the open tasks, bottom to top */
    int64_t *library_child;        /* of child: the time in child tasks that are a library's (oneDNN) */
    int64_t depth, capacity;       /* past capacity, deeper tasks are counted in `deep` only */
    int64_t deep;
} open_stack;

typedef struct {                  /* per task id */
    int64_t *count, *sum, *inside, *self, *min, *max, *histogram;
    int64_t *self_library;         /* self time with the library child tasks counted in */
    const uint8_t *library;        /* the task is a library's (its time is its caller's implementation) */
    int64_t buckets;
    double log_ratio;
} task_stats;

typedef struct {                  /* one row per closed instance, in the order they close */
    int64_t *ids, *starts, *ends, *self, *depth;
    uint8_t *outermost, *finished;
} closed_rows;

/* An instance's own time with its library child tasks counted in: its duration less its other children's. */
static int64_t self_with_library(int64_t duration, int64_t child, int64_t library_child)
{
    int64_t others = child - library_child;
    return duration > others ? duration - others : 0;
}

static void count(task_stats *s, int64_t id, int64_t duration, int64_t self, int64_t self_library,
                  int outermost)
{
    s->count[id]++;
    s->sum[id] += duration;
    s->self[id] += self;
    s->self_library[id] += self_library;
    if (outermost) s->inside[id] += duration;
    if (duration < s->min[id]) s->min[id] = duration;
    if (duration > s->max[id]) s->max[id] = duration;
    int64_t bucket = duration > 0 ? (int64_t)(log((double)duration) / s->log_ratio) + 1 : 0;
    if (bucket >= s->buckets) bucket = s->buckets - 1;
    s->histogram[id * s->buckets + bucket]++;
}

/* Ends the innermost open task at `end` (`extra_child`: its child time the records do not hold): counts it,
 * adds its time to its parent (or to the thread time at depth 0), and writes its row to out[row]. */
static void close_top(open_stack *stack, int32_t *open_count, task_stats *stats, closed_rows *out, int64_t row,
                      int64_t end, int64_t extra_child, int finished, int64_t *thread_time)
{
    int64_t d = --stack->depth;
    int64_t id = stack->ids[d];
    int64_t duration = end > stack->starts[d] ? end - stack->starts[d] : 0;
    int64_t child = stack->child[d] + extra_child;
    int64_t self = duration > child ? duration - child : 0;
    int outermost = --open_count[id] == 0;
    if (d > 0) {
        stack->child[d - 1] += duration;
        if (stats->library[id]) stack->library_child[d - 1] += duration;
    } else {
        *thread_time += duration;
    }
    count(stats, id, duration, self, self_with_library(duration, child, stack->library_child[d]), outermost);
    out->ids[row] = id;
    out->starts[row] = stack->starts[d];
    out->ends[row] = end;
    out->self[row] = self;
    out->depth[row] = d;
    out->outermost[row] = (uint8_t)outermost;
    out->finished[row] = (uint8_t)finished;
}

/* Pairs n records (ids: the task id of each begin) after the tasks open in `stack`; open_count[id] counts the
 * open instances of each task (for "outermost": an instance inside another of its own task is not).  Returns
 * the number of rows written to `out`; adds to *thread_time the duration of instances at depth 0, and to
 * *unfinished the ends flagged F_UNFINISHED. */
EXPORT int64_t autoitt_pair(int64_t n, const record *records, const int64_t *ids, open_stack *stack,
                            int32_t *open_count, task_stats *stats, closed_rows *out, int64_t *thread_time,
                            int64_t *unfinished)
{
    int64_t rows = 0;
    for (int64_t i = 0; i < n; i++) {
        const record *r = &records[i];
        if (r->kind == K_BEGIN) {
            if (stack->depth < stack->capacity) {
                int64_t d = stack->depth;
                stack->ids[d] = ids[i];
                stack->starts[d] = (int64_t)r->ts;
                stack->child[d] = 0;
                stack->library_child[d] = 0;
                open_count[ids[i]]++;
                stack->depth++;
            } else {
                stack->deep++;
            }
            continue;
        }
        if (stack->deep > 0) { stack->deep--; continue; }
        if (stack->depth == 0) continue; /* an end whose begin was dropped (collection was paused) */
        int finished = !(r->flags & F_UNFINISHED);
        *unfinished += !finished;
        close_top(stack, open_count, stats, out, rows++, (int64_t)r->ts, (r->flags & F_CHILD_NS) ? (int64_t)r->b : 0,
                  finished, thread_time);
    }
    return rows;
}

/* Ends every open task at `end` (the thread's last event), top first, as unfinished rows. */
EXPORT int64_t autoitt_close(int64_t end, open_stack *stack, int32_t *open_count, task_stats *stats,
                             closed_rows *out, int64_t *thread_time)
{
    int64_t rows = 0;
    stack->deep = 0;
    while (stack->depth > 0)
        close_top(stack, open_count, stats, out, rows++, end, 0, 0, thread_time);
    return rows;
}

/* The sizes of the structs pairing.py mirrors with ctypes (open_stack, task_stats, closed_rows) and of a
 * record: it checks its mirrors against them when it loads this library. */
EXPORT void autoitt_pairing_sizes(int64_t out[4])
{
    out[0] = (int64_t)sizeof(open_stack);
    out[1] = (int64_t)sizeof(task_stats);
    out[2] = (int64_t)sizeof(closed_rows);
    out[3] = (int64_t)sizeof(record);
}
