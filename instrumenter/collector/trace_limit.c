/*
 * The trace limit: counting past AUTOITT_TRACE_LIMIT bytes per file.  See trace_limit.h.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trace_limit.h"
#include "writer.h"

static uint64_t g_limit;                    /* 0: none */
static _Atomic int g_capped;
static double g_ns_per_tick = 1.0;          /* measured when the limit is reached */

typedef struct agg_entry {
    uint64_t domain, name;                  /* the key; used: count > 0 or hist != NULL */
    uint64_t count, sum, inside, self, min, max, outer, unfinished;
    uint32_t *hist;
} agg_entry;

typedef struct agg_open { uint64_t domain, name, start, child; } agg_open;

typedef struct agg_state {
    agg_entry *table;
    size_t cap, len;
    agg_open open[AGG_DEPTH];
    int depth;                              /* open past the limit */
    uint64_t file_child;                    /* ns the innermost file-level open task spent in counted tasks */
    uint64_t last_ticks;
    int fd;
    unsigned char *out;                     /* records that must still be written: built here */
    size_t out_len;
} agg_state;

#define AGG_OUT_BYTES (CHDR + REC * 256)

static agg_entry *agg_find(agg_state *g, uint64_t domain, uint64_t name, int may_grow)
{
    if (2 * (g->len + 1) > g->cap) {
        if (!may_grow) return NULL;
        size_t cap = g->cap ? 2 * g->cap : 64;
        agg_entry *table = calloc(cap, sizeof *table);
        if (!table) return NULL;
        for (size_t j = 0; j < g->cap; j++) {
            agg_entry *old = &g->table[j];
            if (!old->hist && !old->count) continue;
            size_t i = (old->domain * 31 + old->name) * 0x9E3779B97F4A7C15ull >> 20 & (cap - 1);
            while (table[i].hist || table[i].count) i = (i + 1) & (cap - 1);
            table[i] = *old;
        }
        free(g->table);
        g->table = table;
        g->cap = cap;
    }
    size_t i = (domain * 31 + name) * 0x9E3779B97F4A7C15ull >> 20 & (g->cap - 1);
    for (;; i = (i + 1) & (g->cap - 1)) {
        agg_entry *e = &g->table[i];
        if (!e->hist && !e->count) break;
        if (e->domain == domain && e->name == name) return e;
    }
    if (!may_grow) return NULL;
    uint32_t *hist = calloc(HIST_BUCKETS, sizeof *hist);
    if (!hist) return NULL;
    agg_entry *e = &g->table[i];
    memset(e, 0, sizeof *e);
    e->domain = domain;
    e->name = name;
    e->min = UINT64_MAX;
    e->hist = hist;
    g->len++;
    return e;
}

static void agg_count(agg_state *g, const agg_open *task, uint64_t end_ticks, int outermost_of_thread,
                      int finished, int in_signal)
{
    uint64_t ticks = end_ticks > task->start ? end_ticks - task->start : 0;
    uint64_t ns = (uint64_t)((double)ticks * g_ns_per_tick + 0.5);
    agg_entry *e = agg_find(g, task->domain, task->name, !in_signal);
    if (!e) { atomic_fetch_add(&g_uncounted, 1); return; }
    int inside = 1;
    for (int i = 0; i < g->depth; i++)
        if (g->open[i].domain == task->domain && g->open[i].name == task->name) inside = 0;
    e->count++;
    e->sum += ns;
    e->inside += inside ? ns : 0;
    e->self += ns > task->child ? ns - task->child : 0;
    if (ns < e->min) e->min = ns;
    if (ns > e->max) e->max = ns;
    e->outer += outermost_of_thread ? ns : 0;
    e->unfinished += !finished;
    int bucket = ns ? (int)(log((double)ns) / log(HIST_RATIO)) + 1 : 0;
    if (bucket >= HIST_BUCKETS) bucket = HIST_BUCKETS - 1;
    e->hist[bucket]++;
    if (g->depth > 0) g->open[g->depth - 1].child += ns;
    else g->file_child += ns;
}

static void write_out(tbuf *b);

static void agg_put(tbuf *t, const record *r, uint8_t flags, uint64_t b)
{
    agg_state *g = t->agg;
    if (g->out_len + REC > AGG_OUT_BYTES) write_out(t);
    record copy = *r;
    copy.flags |= flags;
    copy.b = b;
    memcpy(g->out + g->out_len, &copy, REC);
    g->out_len += REC;
}

/* Counts records [s, e) of b instead of writing them; what must still be written goes to g->out. */
static void agg_records(tbuf *b, uint32_t s, uint32_t e, int in_signal)
{
    agg_state *g = b->agg;
    for (uint32_t pos = s; pos + REC <= e; pos += REC) {
        const record *r = (const record *)(b->data + pos);
        g->last_ticks = r->ts;
        if (r->kind == K_BEGIN) {
            if (g->depth < AGG_DEPTH) g->open[g->depth] = (agg_open){r->a, r->b, r->ts, 0};
            else atomic_fetch_add(&g_uncounted, 1);
            g->depth++;
        } else if (r->kind == K_END) {
            if (g->depth > 0) {
                g->depth--;
                if (g->depth < AGG_DEPTH)
                    agg_count(g, &g->open[g->depth], r->ts, g->depth == 0 && b->written_depth == 0, 1, in_signal);
            } else if (b->written_depth > 0) { /* ends a task whose begin is in the file */
                agg_put(b, r, F_CHILD_NS, g->file_child);
                g->file_child = 0;
                b->written_depth--;
            } /* else: an end whose begin was dropped (a pause): dropped too */
        } else if (r->kind >= K_COUNTERS && r->kind <= K_HARDWARE2) {
            /* past the limit the counters per own task are dropped: they cover the tasks before it */
        } else {
            agg_put(b, r, 0, r->b);  /* pause, resume, detach */
        }
    }
}

static void write_out(tbuf *b)
{
    agg_state *g = b->agg;
    if (g->out_len == CHDR) return;
    chunk_header h = chunk_now(b->tid, (uint32_t)(g->out_len - CHDR), b->seq++);
    memcpy(g->out, &h, CHDR);
    trace_write(g->fd, g->out, g->out_len);
    g->out_len = CHDR;
}

/* Tracks which tasks of a chunk about to be written stay open, for the ends past the limit. */
static void track_written_depth(tbuf *b, uint32_t s, uint32_t e)
{
    for (uint32_t pos = s; pos + REC <= e; pos += REC) {
        uint8_t kind = b->data[pos];
        if (kind == K_BEGIN) b->written_depth++;
        else if (kind == K_END && b->written_depth > 0) b->written_depth--;
    }
}

static void reach_limit(int fd, uint32_t tid)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&g_capped, &expected, 1)) return;
    uint64_t ticks = now_ticks(), mono = now_ns(CLOCK_MONOTONIC);
    if (g_tsc && ticks > g_start_ticks) g_ns_per_tick = (double)(mono - g_start_mono) / (double)(ticks - g_start_ticks);
    unsigned char buf[CHDR + REC];
    record r = {0};
    r.kind = K_LIMIT;
    r.ts = ticks;
    r.a = g_limit;
    chunk_header h = chunk_now(tid, REC, 0);
    memcpy(buf, &h, CHDR);
    memcpy(buf + CHDR, &r, REC);
    trace_write(fd, buf, sizeof buf);
}

/* Writes records [s, e) of b, or past the limit counts them; flush_lock held (g_writer_above.drain). */
static void drain(int fd, tbuf *b, uint32_t s, uint32_t e, int in_signal)
{
    if (!atomic_load(&g_capped)) {
        if (!g_limit || atomic_load(&g_file_bytes) + CHDR + (e - s) <= g_limit) {
            if (g_limit) track_written_depth(b, s, e);
            write_chunk(fd, b, s, e);
            return;
        }
        reach_limit(fd, b->tid);
    }
    if (!b->agg) {
        if (in_signal || !(b->agg = calloc(1, sizeof *b->agg))) { atomic_fetch_add(&g_uncounted, (e - s) / REC); return; }
        if (!(b->agg->out = malloc(AGG_OUT_BYTES))) { free(b->agg); b->agg = NULL; return; }
        b->agg->out_len = CHDR;
    }
    b->agg->fd = fd;
    agg_records(b, s, e, in_signal);
    write_out(b);
}

/* The thread's counts since the last call, as K_STATS records (flush_lock held; g_writer_above.write_stats).
   at_end: the tasks still open end at the thread's last record, unfinished. */
static void write_stats(int fd, tbuf *b, int at_end)
{
    agg_state *g = b->agg;
    g->fd = fd;
    if (at_end) {
        while (g->depth > 0) {
            g->depth--;
            if (g->depth < AGG_DEPTH)
                agg_count(g, &g->open[g->depth], g->last_ticks, g->depth == 0 && b->written_depth == 0, 0, 1);
        }
        record r = {0};
        r.kind = K_END;
        r.ts = g->last_ticks;
        for (; b->written_depth > 0; b->written_depth--) { /* open tasks whose begin is in the file */
            agg_put(b, &r, F_CHILD_NS | F_UNFINISHED, g->file_child);
            g->file_child = 0;
        }
        write_out(b);
    }
    /* payload: count, sum, inside, self, min, max, outer, unfinished (u64), then (bucket, count) u32 pairs */
    unsigned char buf[CHDR + REC + 64 + 8 * 256];
    for (size_t i = 0; i < g->cap; i++) {
        agg_entry *e = &g->table[i];
        if (!e->hist || !e->count) continue;
        stats_head head = {e->count, e->sum, e->inside, e->self, e->min, e->max, e->outer, e->unfinished};
        int bucket = 0;
        do { /* a task's buckets over as many records as it takes, the totals in the first */
            size_t used = CHDR + REC;
            if (bucket == 0) { memcpy(buf + used, &head, sizeof head); used += sizeof head; }
            else { memset(buf + used, 0, sizeof head); used += sizeof head; }
            for (; bucket < HIST_BUCKETS && used + 8 <= sizeof buf; bucket++) {
                if (!e->hist[bucket]) continue;
                uint32_t pair[2] = {(uint32_t)bucket, e->hist[bucket]};
                memcpy(buf + used, pair, 8);
                used += 8;
                e->hist[bucket] = 0;
            }
            record r = {0};
            r.kind = K_STATS;
            r.name_len = (uint16_t)(used - CHDR - REC);
            r.ts = g->last_ticks;
            r.a = e->domain;
            r.b = e->name;
            memcpy(buf + CHDR, &r, REC);
            chunk_header h = chunk_now(b->tid, (uint32_t)(used - CHDR), b->seq++);
            memcpy(buf, &h, CHDR);
            trace_write(fd, buf, used);
        } while (bucket < HIST_BUCKETS);
        e->count = e->sum = e->inside = e->self = e->max = e->outer = e->unfinished = 0;
        e->min = UINT64_MAX;
    }
}

void trace_limit_load(void)
{
    const char *limit = getenv("AUTOITT_TRACE_LIMIT");
    if (limit && limit[0] >= '0' && limit[0] <= '9') {
        char *end;
        unsigned long long bytes = strtoull(limit, &end, 10);
        if (*end == 0 && bytes != ULLONG_MAX) g_limit = bytes;
    }
    g_writer_above.drain = drain;
    g_writer_above.write_stats = write_stats;
}

void trace_limit_fork_child(void) { atomic_store(&g_capped, 0); }
