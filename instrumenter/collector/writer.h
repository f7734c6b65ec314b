/*
 * The writer (writer.c): per-thread trace buffers, the trace file itt-<id>.bin, its chunks and names.
 *
 * Each thread records into its own buffer (tbuf) with no lock: emit() below, on the task begin/end hot
 * path: one thread-local pointer, one clock read, four 8-byte stores and a release store of the buffer
 * position.  A full buffer is written by its owner as one chunk (one write() on an O_APPEND
 * descriptor); pause, detach and exit write every thread's published records (flush_all).  The
 * collection state (g_state) is read with one relaxed load per ITT call.  Names (domains, string
 * handles, threads, notes) are written as soon as they are known and kept in a registry, to repeat them
 * at the top of a forked child's file.  Buffers go to the file through drain(), which past the trace
 * limit counts instead of writing (trace_limit.c, above the writer: registered in g_writer_above).
 *
 * Locks: g_mutex guards everything but the hot path (the buffer list, the registry, the file's opening);
 * each buffer's flush_lock is held while it is written out.  Lock order: the sampler's s_mutex, then
 * g_mutex, then a flush_lock.
 *
 * Signal context:
 *  - writer_flush_in_signal runs in the fatal-signal handler (process.c): it try-locks g_mutex and each
 *    buffer's flush_lock (an interrupted writer is skipped, never waited for), writes with write() only,
 *    and counts past the limit without allocating (drain's in_signal).  It must never take a lock that
 *    can wait, allocate, or use stdio.
 *  - the sampler's handler (sampler.c) reads the task stack of its own thread's tbuf: tbufs are never
 *    freed, only reused by a later thread, so the pointer it holds is never stale; it checks the tid.
 *  - pick_file_id runs in a forked child (fork_child) where only async-signal-safe calls are allowed:
 *    snprintf into a stack buffer and access(), no allocation, no lock.
 * Nothing else here may be called from a signal handler: emit() may allocate a buffer (attach_thread)
 * and take g_mutex (a full buffer's flush).
 */
#ifndef AUTOITT_WRITER_H
#define AUTOITT_WRITER_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "format.h"

#define REC ((uint32_t)sizeof(record))
#define CHDR ((uint32_t)sizeof(chunk_header))
#define BUF_BYTES (64u * 1024u)   /* per thread, chunk header included */
#define NAME_MAX_BYTES 4096u      /* longer names are cut */
#define TASK_STACK 64             /* open tasks a buffer keeps (tasks.h) */

enum { ST_PAUSED = 1, ST_DETACHED = 2 };

typedef struct tbuf {
    struct tbuf *next;               /* g_buffers, under g_mutex */
    pthread_mutex_t flush_lock;      /* held while writing this buffer out */
    int owned;                       /* a live thread records into it (g_mutex) */
    uint32_t tid;
    _Atomic uint32_t pos;            /* end of published records; written by the owner only */
    uint32_t start;                  /* start of records not yet written (flush_lock) */
    uint32_t seq;                    /* flush_lock */
    int depth;                       /* open tasks, counted in forked children only (owner) */
    int written_depth;               /* tasks whose begin is in the file and end is not (flush_lock) */
    struct agg_state *agg;           /* past the trace limit: the thread's counts (flush_lock; trace_limit.c) */
    /* sampler hook: the thread's open tasks, innermost last, for samples (sampler.c); the owner
       writes them, its own signal handler reads them.  Kept while collecting only, like the trace;
       after a pause the stack starts empty again (task_epoch), as an end dropped while paused would
       leave its task on it for good (tasks.h) */
    uint32_t task_depth;             /* open tasks; only the first TASK_STACK are stored */
    uint32_t task_epoch;             /* g_task_epoch when the stack was last valid */
    struct task_ref { uint64_t domain, name; } tasks[TASK_STACK];
    /* counters hook: at each open own task, what the process had counted when it began (counters.c) */
    struct own_counts { uint64_t cpu_ns, faults, switches, hw[4]; } counts[TASK_STACK];
    uint64_t counted_at[TASK_STACK]; /* counters.c: when an own task at each depth was last counted (ns) */
    uint64_t counted_ticks[TASK_STACK]; /* counters.c: the record clock when that count began */
    uint64_t counting;               /* counters.c: bit d: the open own task at depth d is counted */
    _Alignas(64) unsigned char data[BUF_BYTES]; /* data[0..CHDR) is room for a chunk header */
} tbuf;

#pragma GCC visibility push(hidden)

extern _Atomic int g_state;                 /* 0: collecting; else ST_* bits */
extern _Atomic uint32_t g_task_epoch;       /* pauses so far (tasks.c's forget_open_tasks counts them; tasks.h) */
extern uint32_t g_header_flags;             /* the trace file's header flags (F_START_PAUSED, F_TSC; process.c) */
extern _Atomic uint64_t g_uncounted;        /* past the trace limit: tasks too deep, or met with no room
                                               (trace_limit.c counts them, report_losses says so) */
extern _Atomic int g_fd;                    /* -1: not open yet, -2: disabled */
extern pthread_mutex_t g_mutex;             /* everything but the hot path */
/* The number in this process image's file names (itt-<id>.bin, samples-<id>.bin) and headers: its pid,
   unless the folder already holds a file of that pid (pick_file_id).  Readers tell processes apart by it. */
extern uint32_t g_file_id;
extern char g_dir[2 * PATH_MAX];            /* $AUTOITT_TRACE_DIR, absolute */
extern tbuf *g_buffers;                     /* every buffer, under g_mutex */
extern __thread tbuf *t_buf;                /* the calling thread's */
extern _Atomic int g_exiting;               /* the last flush: tasks still open end, unfinished */
extern _Atomic uint64_t g_file_bytes;      /* bytes written to the file so far (for the trace limit) */
/* The room for the collector's descriptors, out of the program's low numbers (fd_out_of_the_way): */
extern int s_fd_base;                       /* our descriptors go at or above it (-1: no room) */
extern int s_fd_room;                       /* how many fit there */

/* What the writer calls in the units above it, which register it at load (the writer calls no unit above
 * it by name).  Each is set once, by a *_load that collector_load calls before any thread records or any
 * handler can run, and never changed after; writer_flush_in_signal reads drain and write_stats in the
 * fatal-signal handler: loading a pointer set before any signal and calling it is async-signal-safe (what
 * is called keeps to its own signal-context rules, trace_limit.h).
 *  - drain, write_stats: trace_limit.c (trace_limit_load, before writer_load: never null when a buffer is
 *    written).  drain writes records [s, e) of b, or past the limit counts them; write_stats writes the
 *    thread's counts since the last call as K_STATS records (b->agg set).  flush_lock held for both.
 *  - thread_attached: sampler.c (sampler_load; null until then: nothing to tell).  A thread's first ITT
 *    event, from attach_thread (not in a handler): it becomes ready to be sampled. */
typedef struct writer_above {
    void (*drain)(int fd, tbuf *b, uint32_t s, uint32_t e, int in_signal);
    void (*write_stats)(int fd, tbuf *b, int at_end);
    void (*thread_attached)(void);
} writer_above;
extern writer_above g_writer_above;

/* collector_load: the folder (AUTOITT_TRACE_DIR), the file id, the room for descriptors, the thread key. */
void writer_load(void);
/* The forked child (its g_mutex held since fork_prepare; released here): no buffered data of the parent's,
   a new file when needed. */
void writer_fork_child(void);
/* A fatal signal: what every thread published, best effort (see the top of this file). */
void writer_flush_in_signal(void);

uint32_t current_tid(void);
int write_all(int fd, const void *data, size_t len);
/* write_all to the trace file through `fd` (a load of g_fd): where the program closed that descriptor, or its number
   now holds a file of the program's, the trace file is reopened first (see writer.c, "A closed descriptor"). */
int trace_write(int fd, const void *data, size_t len);
/* Whether descriptor fd is open on the file (dev, ino): a number of ours the program may have closed or taken. */
int fd_holds(int fd, dev_t dev, ino_t ino);
void mkdirs(const char *dir);
int fd_out_of_the_way(int fd, int must);
chunk_header chunk_now(uint32_t tid, uint32_t length, uint32_t seq);
uint32_t pick_file_id(void);

int open_file_locked(void);
void write_chunk(int fd, tbuf *b, uint32_t s, uint32_t e);
void flush_own(tbuf *b);
void flush_all(void);
void report_losses(void);
void write_name_now_locked(uint8_t kind, const void *ptr, const char *name, uint32_t tid);
char *register_name_locked(uint8_t kind, const void *ptr, const char *name);
int registered_locked(const void *ptr);
tbuf *attach_thread(void);

/* A record in the thread's buffer, at record-clock time ``ts`` (0: now); ``small``: the name length field, which
   the counters record uses for a count (no payload follows).  The hot path: see the top of this file. */
static inline tbuf *emit_at(uint8_t kind, uint8_t flags, uint16_t small, uint32_t aux, uint64_t ts, uint64_t a,
                            uint64_t b)
{
    tbuf *t = t_buf;
    if (UNLIKELY(!t)) {
        t = attach_thread();
        if (!t) return NULL;
    }
    uint32_t pos = atomic_load_explicit(&t->pos, memory_order_relaxed);
    if (UNLIKELY(pos + REC > BUF_BYTES)) {
        flush_own(t);
        pos = CHDR;
        /* a time given from before the flush would come before the new chunk's clock pair: the record is
           timed now, and a counters record says it no longer carries its counting's start */
        ts = 0;
        flags &= (uint8_t)~F_COUNTED_FROM;
    }
    record *r = (record *)(t->data + pos);
    r->kind = kind;
    r->flags = flags;
    r->name_len = small;
    r->aux = aux;
    r->ts = ts ? ts : now_ticks(); /* now: after a flush, so never before its chunk's clock pair */
    r->a = a;
    r->b = b;
    atomic_store_explicit(&t->pos, pos + REC, memory_order_release);
    return t;
}

static inline tbuf *emit_with(uint8_t kind, uint8_t flags, uint16_t small, uint32_t aux, uint64_t a, uint64_t b)
{
    return emit_at(kind, flags, small, aux, 0, a, b);
}

static inline tbuf *emit(uint8_t kind, uint8_t flags, uint32_t aux, uint64_t a, uint64_t b)
{
    return emit_with(kind, flags, 0, aux, a, b);
}

#pragma GCC visibility pop

#endif
