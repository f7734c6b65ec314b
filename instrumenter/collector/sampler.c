/*
 * CPU-time stack sampling.  See sampler.h (the mechanism, and the signal-handler audit).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "sampler.h"
#include "format.h"
#include "hooks.h"
#include "pyframes.h"
#include "tasks.h"
#include "unwind.h"
#include "writer.h"
#define S_RING 128                /* samples buffered per thread between two drains (128 ms at 1 kHz) */
#define S_FD_TABLE 65536
#define S_SCAN_NS 50000000ull      /* the scanner's period; in a forked child: */
#define S_SCAN_CHILD_NS 20000000ull /* (it usually ends with _exit: what it has not drained is lost) */
#define S_STATS_NS 1000000000ull  /* counts are rewritten at most once a second */

typedef struct s_sample {          /* a ring slot, written by the handler */
    uint64_t ticks;
    uint64_t task_domain, task_name, autoitt_domain, autoitt_name;
    uint32_t flags, weight;
    uint16_t n_native, n_py;
    uint32_t pad;
    uint64_t native[S_MAX_NATIVE]; /* innermost first */
    uint64_t py[S_MAX_PY];         /* innermost first, as pyframes_walk gives them */
} s_sample;


typedef struct sthread {
    uint32_t index;                /* in s_threads */
    uint32_t tid;
    uint32_t serial;               /* instance, for the counts */
    _Atomic int active;            /* the handler samples into it */
    int in_use;                    /* belongs to a thread (scanner) */
    int fd;                        /* perf event, -1 if none */
    int has_timer;
    timer_t timer;
    uint64_t freed_ns;             /* when it stopped being used (reused 1 s later) */
    _Atomic(tbuf *) tb;            /* the thread's trace buffer (scanner links it) */
    int ready;                     /* its slot in h_ready_threads (hooks.c): altstack and stack bounds */
    uint32_t cache_gen;            /* uw_generation when its unwind caches were last valid (handler) */
    _Atomic uint32_t head;         /* slots written (handler) */
    _Atomic uint32_t tail;         /* slots drained (scanner) */
    _Atomic uint64_t taken, dropped, handler_ticks;
    uint64_t due, due_taken;       /* perf: periods its event counted (user and kernel time) and samples taken,
                                      at the last scan (scanner) */
    uint64_t lost;                 /* estimated samples lost while the handler was not ours (scanner) */
    uint64_t stats_written;        /* taken + dropped at the last counts written */
    uint64_t off_seen_ns;          /* off-CPU samples (scanner): when this thread was last looked at, 0: never, */
    uint64_t off_carry_ns;         /* and the wall time looked at that no sample's weight holds yet */
    /* its name where the scanner shares the program's descriptor table: reading /proc/self/task/T/comm there
       would take the program's lowest free number for a moment, so the thread names itself (PR_GET_NAME, a
       system call) at its first sample, and the scanner writes it at its next drain */
    _Atomic int name_state;        /* S_NAME_* */
    char name[16];                 /* TASK_COMM_LEN, terminated */
    uw_thread_cache cache;
    s_sample ring[S_RING];
} sthread;

enum { S_NAME_WRITTEN, S_NAME_WANTED, S_NAME_READY };

static unsigned long s_hz = S_DEFAULT_HZ;
static uint64_t s_period_ns;
/* AUTOITT_SAMPLE_TIMER_HZ: the rate to sample at if perf is refused and timers take over (autoitt profile sets it
   where the user gave no rate, 50: a sample taken on a timer's signal costs a PyTorch step 0.07-0.14 ms in a VM,
   so timers sample slower than perf, formats.SAMPLE_HZ_TIMER and instrumenter/collector/mechanism.py); 0: the
   same rate as perf's */
static unsigned long s_timer_hz;
static int s_signal_wanted;        /* AUTOITT_SAMPLE_SIGNAL */
static int s_force;                /* AUTOITT_SAMPLE_MECHANISM */
static int s_signal;
static int s_mechanism = SM_PERF;
static int s_started;
static _Atomic int s_finished, s_stop;
static pthread_t s_scanner;
static int s_scanner_running;
static _Atomic uint32_t s_scanner_tid;
static pthread_mutex_t s_mutex = PTHREAD_MUTEX_INITIALIZER;  /* all but the handler; before g_mutex */
static pthread_mutex_t s_wait_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t s_wake;
static _Atomic(sthread *) s_by_fd[S_FD_TABLE];  /* by fd - s_fd_base (writer.c's fd_out_of_the_way) */
static sthread *_Atomic s_threads[S_MAX_THREADS];
static uint32_t s_nthreads, s_serial;
static int s_fd = -1;          /* the samples file, in the scanner's table (the same number in both until one moves) */
static int s_fd_shared = -1;   /* the samples file in the process's table: s_fd until the program closes it */
static dev_t s_fd_dev;
static ino_t s_fd_ino;
static int s_py;
static char s_py_reason[320];
static uint32_t s_py_version;
static uint64_t s_eval_start, s_eval_size;
static uint64_t s_eval_cold_start, s_eval_cold_size; /* its cold partition (s_eval_cold_part) */
static uint32_t s_codes_written = 1;  /* code ids below it are in the file */
static uint64_t s_maps_ns, s_stats_ns;
static uint32_t s_rearmed;
static _Atomic int s_patch_wanted;         /* new objects were loaded: the hooks go in (h_patch_all) */
/* threads never made ready (hooks.c): seen in two scans in a row; their CPU time as last seen */
#define S_UNREADY_MAX 64
#define S_UNREADY_NOTE_NS 10000000ull    /* said at the end when they ran at least this much CPU time, */
#define S_UNREADY_NOTE_SHARE 0.05        /* and this share of the CPU time sampled */
typedef struct s_unready_thread { uint32_t tid; uint64_t cpu_ns; char name[20]; } s_unready_thread;
static s_unready_thread s_unready[S_UNREADY_MAX];
static uint32_t s_nunready;
static unsigned long long s_dl_adds, s_dl_subs;
static uint64_t s_maps_hash;
static uint32_t s_maps_seq;
static int s_maps_fd = -1;                 /* /proc/self/maps, kept open out of the way (s_open_maps) */
static dev_t s_maps_dev;
static ino_t s_maps_ino;
/* The scanner's descriptor table (s_own_table): until it has one of its own (S_TABLE_OWN) or knows it
   cannot (S_TABLE_SHARED), a thread the hooks see start leaves its event to the scanner. */
enum { S_TABLE_UNSETTLED, S_TABLE_SHARED, S_TABLE_OWN };
static _Atomic int s_table;
static int s_table_shared_forced;          /* AUTOITT_SAMPLE_SHARED_FDS=1: as where unshare is refused */
static int s_off_cpu = 1;                  /* AUTOITT_SAMPLE_OFF_CPU=0: no off-CPU samples */
static DIR *s_task_dir;                    /* /proc/self/task, listed at each scan */
static uint32_t s_task_dir_pid;
static _Atomic int s_scan_now;             /* a thread started: scan without waiting out the period */
#define S_TIMER_MAGIC 0x41495454ull       /* "AITT": si_value of our timers, above the thread's index */

/* (the own domains, the current own task and the tasks' pause epoch are in tasks.h) */

/* ------------------------------------------------------------------------- */
/* The signal handler.                                                       */

/* The collection state's flags for a sample taken now. */
static uint32_t s_state_flags(void)
{
    int state = atomic_load_explicit(&g_state, memory_order_relaxed);
    return (state & ST_PAUSED ? SF_PAUSED : 0) | (state & ST_DETACHED ? SF_DETACHED : 0);
}

/* The sample's tasks: the thread's own (its trace buffer's task stack), else the process's current own task;
   returns the flags they add.  In the handler (the thread's own stack), and in the scanner for an off-CPU
   sample (another thread's, read while that thread does not run). */
static uint32_t s_tasks(sthread *st, s_sample *s)
{
    uint32_t flags = 0;
    s->task_domain = s->task_name = s->autoitt_domain = s->autoitt_name = 0;
    tbuf *tb = atomic_load_explicit(&st->tb, memory_order_acquire);
    int own = 0;
    if (tb && tb->tid == st->tid && tb->task_epoch == atomic_load_explicit(&g_task_epoch, memory_order_relaxed)) {
        uint32_t depth = tb->task_depth;
        uint32_t stored = depth < TASK_STACK ? depth : TASK_STACK;
        if (depth > TASK_STACK) flags |= SF_TASKS_OVERFLOW;
        if (stored) {
            s->task_domain = tb->tasks[stored - 1].domain;
            s->task_name = tb->tasks[stored - 1].name;
        }
        for (uint32_t i = stored; i-- > 0;) {
            if (own_domain_slow(tb->tasks[i].domain)) {
                s->autoitt_domain = tb->tasks[i].domain;
                s->autoitt_name = tb->tasks[i].name;
                own = 1;
                break;
            }
        }
    }
    if (!own) {
        uint64_t current = atomic_load_explicit(&g_own_current, memory_order_relaxed);
        if (current) {
            s->autoitt_domain = atomic_load_explicit(&g_own_current_domain, memory_order_relaxed);
            s->autoitt_name = current;
            flags |= SF_INHERITED;
        }
    }
    return flags;
}

static void s_take(sthread *st, const ucontext_t *uc, uint32_t weight)
{
    uint64_t t0 = now_ticks();
    uint32_t head = atomic_load_explicit(&st->head, memory_order_relaxed);
    if (head - atomic_load_explicit(&st->tail, memory_order_acquire) >= S_RING) {
        atomic_store_explicit(&st->dropped, atomic_load_explicit(&st->dropped, memory_order_relaxed) + 1,
                              memory_order_relaxed);
        return;
    }
    s_sample *s = &st->ring[head % S_RING];
    s->ticks = t0;
    uint32_t flags = s_state_flags() | s_tasks(st, s);

    /* native frames: never while a library is being unloaded (hooks.c), and only on the thread's own
       stack, whose bounds the thread gave itself (JIT code may point rsp anywhere) */
    uint32_t uwf = 0;
    int nn = 1;
    s->native[0] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    uintptr_t rsp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    const h_ready *r = &h_ready_threads[st->ready];
    atomic_fetch_add(&uw_readers, 1);
    if (atomic_load(&uw_closing) != 0) {
        flags |= SF_UNLOADING;
    } else if (rsp >= r->stack_lo && rsp < r->stack_hi) {
        uint32_t gen = atomic_load_explicit(&uw_generation, memory_order_relaxed);
        if (st->cache_gen != gen) { /* a library was unloaded since: nothing cached may point into it */
            memset(&st->cache, 0, sizeof st->cache);
            st->cache_gen = gen;
        }
        uw_bounds b = {rsp, r->stack_hi};
        nn = uw_backtrace(uc, &b, &st->cache, s->native, S_MAX_NATIVE, &uwf);
    } else {
        flags |= SF_NO_STACK_MAP;
    }
    atomic_fetch_sub(&uw_readers, 1);

    /* Python frames */
    uint32_t pyf = 0;
    int np = s_py == PYF_OK ? pyframes_walk(s->py, S_MAX_PY, &pyf) : 0;

    s->n_native = (uint16_t)nn;
    s->n_py = (uint16_t)np;
    s->flags = flags | uwf << SF_UW_SHIFT | pyf << SF_PY_SHIFT;
    s->weight = weight;
    atomic_store_explicit(&st->head, head + 1, memory_order_release);
    atomic_store_explicit(&st->taken, atomic_load_explicit(&st->taken, memory_order_relaxed) + 1, memory_order_relaxed);
    atomic_store_explicit(&st->handler_ticks,
                          atomic_load_explicit(&st->handler_ticks, memory_order_relaxed) + (now_ticks() - t0),
                          memory_order_relaxed);
}

void s_handler(int sig, siginfo_t *si, void *ucv)
{
    int saved_errno = errno;
    sthread *st = NULL;
    uint32_t weight = 1;
    int ours = 0;
    if (si->si_code == SI_TIMER && ((uint64_t)(uintptr_t)si->si_value.sival_ptr >> 32) == S_TIMER_MAGIC) {
        uint32_t i = (uint32_t)(uintptr_t)si->si_value.sival_ptr;
        ours = 1;
        if (i < S_MAX_THREADS) st = atomic_load_explicit(&s_threads[i], memory_order_acquire);
        if (st && si->si_overrun > 0) weight += (uint32_t)si->si_overrun;
    } else if (si->si_code >= POLL_IN && si->si_code <= POLL_HUP && s_fd_base >= 0) {
        /* any descriptor in our range is ours: a signal still on its way from an event just closed (its
           entry cleared, its number maybe taken again by another thread's) is dropped, never passed on */
        int i = si->si_fd - s_fd_base;
        if (i >= 0 && i < s_fd_room && i < S_FD_TABLE) {
            ours = 1;
            st = atomic_load_explicit(&s_by_fd[i], memory_order_acquire);
        }
    }
    if (!ours) {
        /* a kill, a socket's SIGURG, a timer of the program's: the program's action, as if it were installed */
        errno = saved_errno;
        h_forward(sig, si, ucv);
        return;
    }
    /* a thread past its key's destructor (h_thread_gone) may have no altstack: not sampled; and a state is
       written only by its own thread (a late signal may name another's) */
    if (st && atomic_load_explicit(&st->active, memory_order_acquire) && h_still_ready(st->ready, st->tid)
        && st->tid == (uint32_t)syscall(SYS_gettid)) {
        s_take(st, ucv, weight);
        /* the thread names itself (see sthread.name): a system call into its own state, at most once */
        if (atomic_load_explicit(&st->name_state, memory_order_acquire) == S_NAME_WANTED
            && syscall(SYS_prctl, PR_GET_NAME, (unsigned long)st->name, 0ul, 0ul, 0ul) == 0) {
            st->name[sizeof st->name - 1] = 0;
            atomic_store_explicit(&st->name_state, S_NAME_READY, memory_order_release);
        }
    }
    errno = saved_errno;
}

/* ------------------------------------------------------------------------- */
/* The file.                                                                 */

static unsigned char *s_out;
static size_t s_out_len, s_out_cap;

static unsigned char *s_reserve(size_t n)
{
    if (s_out_len + n > s_out_cap) {
        size_t cap = s_out_cap ? s_out_cap : 1u << 16;
        while (cap < s_out_len + n) cap *= 2;
        unsigned char *p = realloc(s_out, cap);
        if (!p) return NULL;
        s_out = p;
        s_out_cap = cap;
    }
    unsigned char *p = s_out + s_out_len;
    s_out_len += n;
    return p;
}

/* A record's header and room for len payload bytes (zero padding included); NULL: no memory. */
static unsigned char *s_record(uint32_t kind, size_t len)
{
    size_t padded = PAD8(len);
    s_record_head head = {kind, (uint32_t)len};
    unsigned char *p = s_reserve(sizeof head + padded);
    if (!p) return NULL;
    memcpy(p, &head, sizeof head);
    memset(p + sizeof head + len, 0, padded - len);
    return p + sizeof head;
}

/*
 * The samples file's descriptor in the calling thread's descriptor table (s_mutex held).  The scanner, with a table
 * of its own (s_own_table), keeps s_fd: the program cannot close it there.  Every other thread (a pause's drain, the
 * exit, a dlclose) writes through the process's table, where the program may have closed the number (closerange),
 * or taken it again, for a file of its own or, as the lowest number free out of the way, for the trace file that
 * writer.c opened again: there the file is checked (device and inode) before each write, and opened again by its
 * path where it is not ours.  A fatal signal's flush (in_signal) only checks: no open in a handler.  -1: nowhere.
 */
static int s_fd_here(int in_signal)
{
    if (s_fd < 0) return -1;
    if (atomic_load(&s_table) == S_TABLE_OWN && current_tid() == atomic_load(&s_scanner_tid)) return s_fd;
    if (fd_holds(s_fd_shared, s_fd_dev, s_fd_ino)) return s_fd_shared;
    if (in_signal) return -1;
    char path[sizeof g_dir + 40];
    snprintf(path, sizeof path, "%s/samples-%u.bin", g_dir, g_file_id);
    int fresh = fd_out_of_the_way(open(path, O_WRONLY | O_APPEND | O_CLOEXEC), 0);
    if (fresh >= 0 && !fd_holds(fresh, s_fd_dev, s_fd_ino)) { /* another file by that name now */
        close(fresh);
        fresh = -1;
    }
    s_fd_shared = fresh; /* the old number is left alone: it may be the program's now */
    if (atomic_load(&s_table) != S_TABLE_OWN) s_fd = fresh >= 0 ? fresh : s_fd; /* one table: one number */
    return fresh;
}

/*
 * On a disk that fills, the trace is worth more than the samples (its steps and tasks are what every figure stands
 * on), and the samples, some kilobytes each, would fill it first.  So the samples leave room for it: a flush is
 * not written where the disk holding the results would have less free than S_DISK_RESERVE after it (half the disk,
 * where that is less: a small tmpfs), and the reason says from when.  s_mutex held.
 */
#define S_DISK_RESERVE (16ull << 20)
static int s_disk_said;
static void s_write_record(int fd, uint32_t kind, const void *a, size_t alen, const void *b, size_t blen);

static int s_room_for(int fd, size_t len)
{
    struct statvfs v;
    if (fstatvfs(fd, &v) != 0 || v.f_blocks == 0) return 1; /* cannot tell: written, as before */
    uint64_t size = (uint64_t)v.f_blocks * v.f_frsize, avail = (uint64_t)v.f_bavail * v.f_frsize;
    uint64_t reserve = size / 2 < S_DISK_RESERVE ? size / 2 : S_DISK_RESERVE;
    if (avail >= reserve + len) return 1;
    if (!s_disk_said) {
        s_disk_said = 1;
        char reason[320];
        snprintf(reason, sizeof reason, "samples were no longer written from %.3f s into the run: the disk holding "
                 "the results had %llu KiB free, and the samples leave %llu KiB of it to the trace",
                 (double)(now_ns(CLOCK_MONOTONIC) - g_start_mono) / 1e9, (unsigned long long)(avail >> 10),
                 (unsigned long long)(reserve >> 10));
        s_write_record(fd, SR_REASON, reason, strlen(reason), NULL, 0);
    }
    return 0;
}

static void s_flush_out(void)
{
    int fd = s_out_len ? s_fd_here(0) : -1;
    if (fd >= 0 && s_room_for(fd, s_out_len)) write_all(fd, s_out, s_out_len);
    s_out_len = 0;
}

/* Writes one record straight to the file from a buffer of the caller's (no allocation). */
static void s_write_record(int fd, uint32_t kind, const void *a, size_t alen, const void *b, size_t blen)
{
    unsigned char pad[8] = {0};
    s_record_head head = {kind, (uint32_t)(alen + blen)};
    size_t padding = PAD8(alen + blen) - (alen + blen);
    struct { const void *p; size_t n; } parts[4] = {{&head, sizeof head}, {a, alen}, {b, blen}, {pad, padding}};
    for (int i = 0; i < 4; i++)
        if (parts[i].n) write_all(fd, parts[i].p, parts[i].n);
}

static void s_info_locked(void)
{
    if (s_fd < 0) return;
    s_info info = {(uint32_t)s_hz, (uint32_t)s_mechanism, (uint32_t)s_signal, (uint32_t)s_py, s_period_ns,
              s_eval_start, s_eval_size, s_py_version, S_MAX_NATIVE, S_MAX_PY, S_RING, s_eval_cold_start,
              s_eval_cold_size};
    int fd = s_fd_here(0);
    if (fd >= 0) s_write_record(fd, SR_INFO, &info, sizeof info, NULL, 0);
}

static void s_reason_locked(const char *text)
{
    int fd = s_fd_here(0);
    if (fd >= 0) s_write_record(fd, SR_REASON, text, strlen(text), NULL, 0);
}

/* _PyEval_EvalFrameDefault's cold partition, [*start, *start + *size) (0, 0: none found).  GCC splits a
 * function's rarely run blocks (by profile, in PGO builds: Debian's) into a part of its own, "f.cold",
 * with an FDE of its own and, in a stripped binary, no symbol: the dynamic symbol covers only the hot
 * part.  On Debian's 3.13 and 3.14 the cold part is most of the evaluator (77 KB against 2.4 KB), so a
 * sampled stack's evaluator frames lie there, and the reader would not know them for evaluator frames
 * (it matches Python frames to them).  The cold part is found as the FDE that the hot part's near jumps
 * (jcc rel32, jmp rel32: a function jumps only within itself, or to another function's start in a tail
 * call) land in most often, outside the hot part, in the same object, not at an exported symbol.  The
 * bytes are scanned without decoding instructions, so a rel32 may be read out of another instruction's
 * bytes: such a target lands at random, and an FDE needs three landings to count. */
static void s_eval_cold_part(uint64_t hot, uint64_t size, uint64_t *start, uint64_t *cold_size)
{
    *start = *cold_size = 0;
    if (!hot || size < 6 || size > (1u << 24) || !uw_find_object) return;
    Dl_info hot_info;
    if (!dladdr((void *)(uintptr_t)hot, &hot_info)) return;
    enum { CANDIDATES = 16 };
    struct { uintptr_t begin, end; int hits; } seen[CANDIDATES] = {{0, 0, 0}};
    const uint8_t *code = (const uint8_t *)(uintptr_t)hot;
    for (uint64_t i = 0; i + 5 <= size; i++) {
        uint64_t after;
        int32_t rel;
        if (code[i] == 0xe9) { memcpy(&rel, code + i + 1, 4); after = i + 5; }
        else if (code[i] == 0x0f && (code[i + 1] & 0xf0) == 0x80 && i + 6 <= size) { memcpy(&rel, code + i + 2, 4); after = i + 6; }
        else continue;
        uintptr_t target = (uintptr_t)(hot + after + (int64_t)rel);
        if (target >= hot && target < hot + size) continue;
        int k = 0;
        while (k < CANDIDATES && seen[k].hits && !(target >= seen[k].begin && target < seen[k].end)) k++;
        if (k == CANDIDATES) continue;
        if (!seen[k].hits) {
            uw_cie cie;
            uintptr_t begin, end;
            const uint8_t *insns, *insns_end;
            Dl_info info;
            if (!uw_find_fde(target, &cie, &begin, &insns, &insns_end, &end)) continue;
            if (!dladdr((void *)target, &info) || info.dli_fbase != hot_info.dli_fbase
                || (info.dli_saddr && (uintptr_t)info.dli_saddr == begin))
                continue;
            seen[k].begin = begin;
            seen[k].end = end;
        }
        seen[k].hits++;
    }
    int best = -1;
    for (int k = 0; k < CANDIDATES; k++)
        if (seen[k].hits >= 3 && (best < 0 || seen[k].hits > seen[best].hits)) best = k;
    if (best >= 0) {
        *start = seen[best].begin;
        *cold_size = seen[best].end - seen[best].begin;
    }
}

static void s_open_file_locked(void)
{
    if (s_fd >= 0) return;
    char path[sizeof g_dir + 40];
    mkdirs(g_dir);
    snprintf(path, sizeof path, "%s/samples-%u.bin", g_dir, g_file_id);
    s_fd = fd_out_of_the_way(open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644), 0);
    if (s_fd < 0) {
        fprintf(stderr, "autoitt collector: cannot write %s: %s; no samples\n", path, strerror(errno));
        return;
    }
    s_file_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, S_MAGIC, 8);
    h.version = S_VERSION;
    h.header_size = sizeof h;
    h.pid = g_file_id;
    h.ppid = g_ppid;
    h.flags = (g_tsc ? S_HEADER_TSC : 0u) | (g_forked ? S_HEADER_FORKED : 0u);
    h.ticks = now_ticks();
    h.mono_ns = now_ns(CLOCK_MONOTONIC);
    struct stat st;
    if (fstat(s_fd, &st) == 0) {
        s_fd_dev = st.st_dev;
        s_fd_ino = st.st_ino;
    }
    s_fd_shared = s_fd;
    write_all(s_fd, &h, sizeof h);
    s_info_locked();
    if (s_py_reason[0]) s_reason_locked(s_py_reason);
}

/* ------------------------------------------------------------------------- */
/* The memory map: the unwinder's copy, and the executable mappings in the file. */

/* Whether s_maps_fd is still the map we opened: the program may have closed it (closerange) and its
   number been taken again.  fstat: async-signal-safe. */
static int s_maps_fd_ours(void) { return fd_holds(s_maps_fd, s_maps_dev, s_maps_ino); }

/* Opens /proc/self/maps once, out of the program's low numbers, to be read again from its start (pread)
   each time: opening it each time took the lowest free number for a moment, which an open() of the
   program's in that moment could find taken.  Opened before the scanner's own table (s_own_table), so the
   same number serves the scanner and the threads that read it (a dlclose's, a fatal signal's).  Where there
   is no room out of the way, each read opens it. */
static void s_open_maps(void)
{
    if (s_maps_fd >= 0) return;
    int fd = fd_out_of_the_way(open("/proc/self/maps", O_RDONLY | O_CLOEXEC), 1);
    struct stat st;
    if (fd < 0) return;
    if (fstat(fd, &st) != 0) { close(fd); return; }
    s_maps_dev = st.st_dev;
    s_maps_ino = st.st_ino;
    s_maps_fd = fd;
}

/* Reads /proc/self/maps into a malloc'ed string. */
static char *s_read_maps(size_t *len)
{
    int kept = s_maps_fd_ours();
    int fd = kept ? s_maps_fd : open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    size_t cap = 1u << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 4096 > cap) {
            char *bigger = realloc(buf, cap *= 2);
            if (!bigger) { free(buf); buf = NULL; break; }
            buf = bigger;
        }
        ssize_t r = kept ? pread(fd, buf + n, cap - n - 1, (off_t)n) : read(fd, buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    if (!kept) close(fd);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

/* Whether a /proc/self/maps line is a well-formed executable mapping (the reader names addresses with them). */
static int s_exec_maps_line(const char *line)
{
    char *p;
    strtoull(line, &p, 16);
    if (*p != '-') return 0;
    strtoull(p + 1, &p, 16);
    return *p == ' ' && strlen(p) >= 6 && p[3] == 'x';
}

/* Reads the map again: a MAPS record when the executable mappings changed (for the reader: the
   handler uses no copy of the map). */
static void s_refresh_maps_locked(void)
{
    size_t len;
    char *text = s_read_maps(&len);
    if (!text) return;
    char *exec = malloc(len + 1);
    size_t exec_len = 0;
    if (exec) {
        for (char *line = text; *line;) {
            char *nl = strchr(line, '\n');
            size_t n = nl ? (size_t)(nl - line) + 1 : strlen(line);
            if (s_exec_maps_line(line)) {
                memcpy(exec + exec_len, line, n);
                exec_len += n;
            }
            line += n;
        }
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i < exec_len; i++) h = (h ^ (unsigned char)exec[i]) * 1099511628211ull;
        if (h != s_maps_hash || s_maps_seq == 0) {
            s_maps_hash = h;
            s_maps_head head = {++s_maps_seq, 1};
            unsigned char *p = s_record(SR_MAPS, sizeof head + exec_len);
            if (p) { memcpy(p, &head, sizeof head); memcpy(p + sizeof head, exec, exec_len); }
        }
    }
    free(exec);
    free(text);
    s_maps_ns = now_ns(CLOCK_MONOTONIC);
}

static int s_dl_counts(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    unsigned long long *out = data;
    out[0] = info->dlpi_adds;
    out[1] = info->dlpi_subs;
    return 1;
}

/* The executable mappings from a fatal signal's handler: no allocation, the caller's buffer. */
static void s_maps_in_signal(int fd, char *buf, size_t cap)
{
    int kept = s_maps_fd_ours();
    int in = kept ? s_maps_fd : open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (in < 0) return;
    char *out = buf + cap / 2;
    size_t have = 0, half = cap / 2, part_cap = cap / 2 - 16;
    off_t at = 0;
    uint32_t seq = ++s_maps_seq;
    for (;;) {
        ssize_t r = kept ? pread(in, buf + have, half - have, at) : read(in, buf + have, half - have);
        if (r < 0 && errno == EINTR) continue;
        if (r > 0) { have += (size_t)r; at += r; }
        size_t used = 0, out_len = 0;
        for (;;) {
            char *nl = memchr(buf + used, '\n', have - used);
            if (!nl) break;
            size_t n = (size_t)(nl - (buf + used)) + 1;
            char saved = buf[used + n - 1];
            buf[used + n - 1] = 0;
            int ok = s_exec_maps_line(buf + used);
            buf[used + n - 1] = saved;
            if (ok && out_len + n <= part_cap) { memcpy(out + out_len, buf + used, n); out_len += n; }
            used += n;
        }
        int last = r <= 0 || (used == 0 && have == half);
        if (out_len || last) {
            s_maps_head head = {seq, last ? 1u : 0u};
            s_write_record(fd, SR_MAPS, &head, sizeof head, out, out_len);
        }
        memmove(buf, buf + used, have - used);
        have -= used;
        if (last) break;
    }
    if (!kept) close(in);
}

/* ------------------------------------------------------------------------- */
/* Threads: opening and closing their events.                                */

/* A thread's name (comm), terminated; its length, 0 (and "") if it cannot be read.  Opens a file: only in the
   scanner's own descriptor table (where it shares the program's, the thread names itself: sthread.name). */
/* /proc/self/task/TID/<file>'s first size - 1 bytes, terminated, in text; how many (0: none).  It opens a
   descriptor: where the scanner shares the program's table, only for a moment and where that is accepted. */
static size_t s_task_file(uint32_t tid, const char *file, char *text, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%u/%s", tid, file);
    text[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, text, size - 1);
    close(fd);
    if (n <= 0) { text[0] = 0; return 0; }
    text[n] = 0;
    return (size_t)n;
}

static size_t s_thread_name(uint32_t tid, char *name, size_t size)
{
    size_t n = s_task_file(tid, "comm", name, size);
    if (n && name[n - 1] == '\n') name[--n] = 0;
    return n;
}

/* The sample file's record of thread tid's name (n bytes; none where n is 0). */
static void s_thread_named(uint32_t tid, const char *name, size_t n)
{
    s_thread_head head = {tid, 0};
    unsigned char *p = n ? s_record(SR_THREAD, sizeof head + n) : NULL;
    if (p) { memcpy(p, &head, sizeof head); memcpy(p + sizeof head, name, n); }
}

/* The name a thread said of itself (s_handler), into the file once: at a drain, or before its state is reused. */
static void s_write_said_name(sthread *st)
{
    if (atomic_load_explicit(&st->name_state, memory_order_acquire) != S_NAME_READY) return;
    s_thread_named(st->tid, st->name, strnlen(st->name, sizeof st->name));
    atomic_store(&st->name_state, S_NAME_WRITTEN);
}

static sthread *s_new_state_locked(uint32_t tid)
{
    uint64_t now = now_ns(CLOCK_MONOTONIC);
    sthread *st = NULL;
    for (uint32_t i = 0; i < s_nthreads; i++) {
        sthread *c = atomic_load(&s_threads[i]);
        if (!c->in_use && atomic_load(&c->head) == atomic_load(&c->tail) && now - c->freed_ns > 1000000000ull) {
            st = c;
            break;
        }
    }
    if (!st) {
        if (s_nthreads == S_MAX_THREADS) return NULL;
        void *mem = mmap(NULL, sizeof(sthread), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) return NULL;
        st = mem;
        st->index = s_nthreads;
        atomic_store(&s_threads[s_nthreads++], st);
    }
    s_write_said_name(st); /* its last thread's, not drained yet */
    st->tid = tid;
    st->serial = ++s_serial;
    st->in_use = 1;
    st->fd = -1;
    st->has_timer = 0;
    st->ready = 0;
    st->cache_gen = atomic_load(&uw_generation);
    atomic_store(&st->tb, NULL);
    atomic_store(&st->taken, 0);
    atomic_store(&st->dropped, 0);
    atomic_store(&st->handler_ticks, 0);
    st->stats_written = 0;
    st->due = st->due_taken = st->lost = 0;
    st->off_seen_ns = st->off_carry_ns = 0;
    memset(&st->cache, 0, sizeof st->cache);
    if (atomic_load(&s_table) == S_TABLE_OWN) {
        char name[32];
        size_t n = s_thread_name(tid, name, sizeof name);
        s_thread_named(tid, name, n);
        atomic_store(&st->name_state, S_NAME_WRITTEN);
    } else {
        atomic_store(&st->name_state, S_NAME_WANTED); /* the thread says it (s_handler) */
    }
    return st;
}

static int s_open_perf(sthread *st)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_CPU_CLOCK;
    a.sample_period = s_period_ns;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    a.disabled = 1;
    if (s_fd_base < 0) return -EMFILE;
    int low = (int)syscall(SYS_perf_event_open, &a, (pid_t)st->tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (low < 0) return -errno;
    int fd = fd_out_of_the_way(low, 1);
    if (fd < 0) return -EMFILE;
    atomic_store(&s_by_fd[fd - s_fd_base], st);
    struct f_owner_ex owner = {F_OWNER_TID, (pid_t)st->tid};
    int flags = fcntl(fd, F_GETFL);
    if (fcntl(fd, F_SETOWN_EX, &owner) != 0 || fcntl(fd, F_SETSIG, s_signal) != 0
        || fcntl(fd, F_SETFL, flags | O_ASYNC) != 0 || ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
        int e = errno;
        atomic_store(&s_by_fd[fd - s_fd_base], NULL);
        close(fd);
        return -e;
    }
    st->fd = fd;
    return 0;
}

static int s_open_timer(sthread *st)
{
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = s_signal;
    ev.sigev_value.sival_ptr = (void *)(uintptr_t)(S_TIMER_MAGIC << 32 | st->index);
    ev._sigev_un._tid = (pid_t)st->tid;
    clockid_t clock = (clockid_t)((~(unsigned)st->tid << 3) | 6); /* the thread's CPU-time clock (CPUCLOCK_SCHED) */
    timer_t timer;
    if (timer_create(clock, &ev, &timer) != 0) return -errno;
    struct itimerspec its;
    its.it_interval.tv_sec = (time_t)(s_period_ns / 1000000000ull);
    its.it_interval.tv_nsec = (long)(s_period_ns % 1000000000ull);
    its.it_value = its.it_interval;
    if (timer_settime(timer, 0, &its, NULL) != 0) {
        int e = errno;
        timer_delete(timer);
        return -e;
    }
    st->timer = timer;
    st->has_timer = 1;
    return 0;
}

static void s_close_events(sthread *st)
{
    atomic_store(&st->active, 0);
    if (st->fd >= 0) {
        atomic_store(&s_by_fd[st->fd - s_fd_base], NULL);
        if (atomic_load(&s_table) == S_TABLE_OWN) {
            /* in the scanner's own table, where the program cannot close it; another thread's number
               would be one of the program's (the scanner closes its events before it ends) */
            if (current_tid() == atomic_load(&s_scanner_tid)) close(st->fd);
        } else {
            /* the program may have closed our descriptor (and reused its number): close only ours */
            char link[64], path[40];
            snprintf(path, sizeof path, "/proc/self/fd/%d", st->fd);
            ssize_t n = readlink(path, link, sizeof link - 1);
            if (n > 0) {
                link[n] = 0;
                if (strstr(link, "perf_event")) close(st->fd);
            }
        }
        st->fd = -1;
    }
    if (st->has_timer) {
        timer_delete(st->timer);
        st->has_timer = 0;
    }
}

/* Every sampled thread's events: the scanner's own on its way out (they are in its table), then at the end
   what is left (timers; perf events where the scanner shares the process's table). */
static void s_close_all_events_locked(void)
{
    for (uint32_t i = 0; i < s_nthreads; i++) {
        sthread *st = atomic_load(&s_threads[i]);
        if (st->in_use) s_close_events(st);
    }
}

static void s_free_state(sthread *st)
{
    s_close_events(st);
    st->in_use = 0;
    st->freed_ns = now_ns(CLOCK_MONOTONIC);
}

static const char *s_paranoid(char *buf, size_t size)
{
    int fd = open("/proc/sys/kernel/perf_event_paranoid", O_RDONLY | O_CLOEXEC);
    snprintf(buf, size, "unknown");
    if (fd >= 0) {
        ssize_t n = read(fd, buf, size - 1);
        close(fd);
        if (n > 0) {
            buf[n] = 0;
            char *nl = strchr(buf, '\n');
            if (nl) *nl = 0;
        }
    }
    return buf;
}

/* Starts sampling thread st with the mechanism in use, falling back to timers, then to none; the
   first fallback writes why (one reason record). */
static void s_start_thread_locked(sthread *st)
{
    atomic_store(&st->active, 1);
    char reason[640], paranoid[16];
    int perf_error = 0;
    if (s_mechanism == SM_PERF) {
        int r = s_open_perf(st);
        if (r == 0) return;
        if (r == -EMFILE && s_open_timer(st) == 0) { /* the room above the program's fd limit is full */
            static int said;
            if (!said) {
                said = 1;
                snprintf(reason, sizeof reason, "more threads than the %d descriptors above the program's limit on "
                         "open files: the others are sampled with CPU-time timers (at most the kernel's tick rate)",
                         s_fd_room);
                s_reason_locked(reason);
            }
            return;
        }
        if (r == -ESRCH || r == -EMFILE || r == -ENFILE || r == -ENOMEM) { atomic_store(&st->active, 0); return; }
        perf_error = -r;
        s_mechanism = SM_TIMER;
        if (s_timer_hz) { /* before any timer is armed and before the info record below: no sample is at another */
            s_hz = s_timer_hz;
            s_period_ns = 1000000000ull / s_hz;
        }
        s_paranoid(paranoid, sizeof paranoid);
    }
    if (s_mechanism == SM_TIMER) {
        int r = s_open_timer(st);
        int transient = r == -EAGAIN || r == -ENOMEM || r == -EINVAL; /* EINVAL: the thread is gone */
        if (r != 0 && !transient) {
            if (perf_error)
                snprintf(reason, sizeof reason, "no CPU-time sampling: perf_event_open was refused (%s; "
                         "kernel.perf_event_paranoid is %s), and so was timer_create, the fallback (%s)",
                         strerror(perf_error), paranoid, strerror(-r));
            else
                snprintf(reason, sizeof reason, "no CPU-time sampling: timer_create was refused (%s)", strerror(-r));
            s_mechanism = SM_NONE;
        } else if (perf_error) {
            snprintf(reason, sizeof reason,
                     "perf_event_open was refused (%s; kernel.perf_event_paranoid is %s): sampling with per-thread "
                     "CPU-time timers instead, at most at the kernel's tick rate (often 250 per second), each sample "
                     "weighted by the periods it stands for", strerror(perf_error), paranoid);
        }
        if (perf_error || s_mechanism == SM_NONE) {
            s_flush_out();
            s_reason_locked(reason);
            s_info_locked();
        }
        if (r == 0) return;
    }
    atomic_store(&st->active, 0);
}

/* A thread that is still not ready at its second scan: its CPU time so far. */
static void s_note_unready(uint32_t tid)
{
    uint32_t i = 0;
    while (i < s_nunready && s_unready[i].tid != tid) i++;
    if (i == s_nunready) {
        if (s_nunready == S_UNREADY_MAX) return;
        s_unready[s_nunready].tid = tid;
        s_unready[s_nunready].cpu_ns = 0;
        /* never sampled, so it cannot name itself: its name where reading it takes no number of the program's */
        if (atomic_load(&s_table) != S_TABLE_OWN
            || !s_thread_name(tid, s_unready[s_nunready].name, sizeof s_unready[0].name))
            snprintf(s_unready[s_nunready].name, sizeof s_unready[0].name, "?");
        s_nunready++;
    }
    /* the thread's CPU-time clock (CPUCLOCK_SCHED, as s_open_timer's): no file, so no descriptor */
    struct timespec ts;
    if (clock_gettime((clockid_t)((~tid << 3) | 6), &ts) == 0)
        s_unready[i].cpu_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* At the end: the threads that could not be sampled, when they ran enough to matter. */
static void s_unready_reason_locked(void)
{
    uint32_t count = 0;
    uint64_t cpu = 0;
    char names[96] = "";
    for (uint32_t i = 0; i < s_nunready; i++) {
        if (s_unready[i].cpu_ns < S_UNREADY_NOTE_NS) continue;
        if (count < 3) {
            size_t used = strlen(names);
            snprintf(names + used, sizeof names - used, "%s%s", count ? ", " : "", s_unready[i].name);
        }
        count++;
        cpu += s_unready[i].cpu_ns;
    }
    uint64_t sampled = 0;
    for (uint32_t i = 0; i < s_nthreads; i++) sampled += atomic_load(&atomic_load(&s_threads[i])->taken);
    if (!count || (double)cpu < S_UNREADY_NOTE_SHARE * (double)sampled * (double)s_period_ns) return;
    char reason[600];
    snprintf(reason, sizeof reason, "%u thread(s) (%s%s) ran %.2f s of CPU time unsampled: started before sampling or "
             "by a library as it loaded, they have no alternate signal stack for the sampling signal",
             count, names, count > 3 ? ", ..." : "", (double)cpu / 1e9);
    s_reason_locked(reason);
}

/* The numeric entries of a /proc listing (tids, descriptors), in a malloc'ed array (the caller frees it), in
   listing order; *n their count.  NULL where there are none, or where memory ran out before the first. */
static uint32_t *s_numbers(DIR *dir, size_t *n)
{
    uint32_t *found = NULL;
    size_t cap = 0;
    struct dirent *e;
    *n = 0;
    while ((e = readdir(dir))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        if (*n == cap) {
            uint32_t *bigger = realloc(found, (cap = cap ? 2 * cap : 64) * sizeof *found);
            if (!bigger) break;
            found = bigger;
        }
        found[(*n)++] = (uint32_t)strtoul(e->d_name, NULL, 10);
    }
    return found;
}

static int s_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Lists the threads: new ones get an event, gone ones lose theirs. */
static void s_scan_locked(void)
{
    /* one listing descriptor for the process's life, out of the program's low numbers (each scan
       opening its own would take the lowest free number for a moment, which the program's own
       open() could find taken) */
    DIR *dir = s_task_dir;
    if (dir && s_task_dir_pid != g_pid) { closedir(dir); dir = NULL; } /* a forked child's copy lists its parent */
    if (!dir) {
        int fd = fd_out_of_the_way(open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC), 0);
        if (fd >= 0 && !(dir = fdopendir(fd))) close(fd);
        s_task_dir = dir;
        s_task_dir_pid = g_pid;
    } else {
        rewinddir(dir);
    }
    if (!dir) return;
    size_t n;
    uint32_t *tids = s_numbers(dir, &n);
    if (!tids) {
        /* the program closed our descriptor (closerange): open another at the next scan; the old DIR is
           left, never closed, since its number may be the program's by now */
        if (fcntl(dirfd(dir), F_GETFD) < 0) s_task_dir = NULL;
        return;
    }
    qsort(tids, n, sizeof *tids, s_cmp_u32);
    uint32_t self = atomic_load(&s_scanner_tid);

    /* gone: not listed any more (a tid taken again by a new thread within one listing, which needs the
       kernel's pids to wrap around, goes unnoticed; perf's poll cannot tell: without a ring buffer it
       always says POLLHUP), or the program closed our descriptor (POLLNVAL) */
    struct pollfd pfd;
    for (uint32_t i = 0; i < s_nthreads; i++) {
        sthread *st = atomic_load(&s_threads[i]);
        if (!st->in_use) continue;
        int gone = !bsearch(&st->tid, tids, n, sizeof *tids, s_cmp_u32);
        /* its ready slot freed (it ended, and maybe a new thread took its tid) */
        if (!h_still_ready(st->ready, st->tid)) gone = 1;
        if (!gone && st->fd >= 0) {
            pfd.fd = st->fd;
            pfd.events = 0;
            pfd.revents = 0;
            if (poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLNVAL)) {
                atomic_store(&s_by_fd[st->fd - s_fd_base], NULL);
                st->fd = -1; /* not ours any more: never closed by us */
                gone = 1;
            }
        }
        if (gone) s_free_state(st);
    }

    /* new: only threads that made themselves ready (an altstack of their own, hooks.c); the others
       are counted */
    static uint32_t unready_before[256];
    static uint32_t n_unready_before;
    uint32_t unready_now[256], n_unready_now = 0;
    h_release_ended(tids, n, s_cmp_u32);
    for (size_t k = 0; k < n; k++) {
        if (tids[k] == self) continue;
        int known = 0;
        for (uint32_t i = 0; i < s_nthreads && !known; i++) {
            sthread *st = atomic_load(&s_threads[i]);
            known = st->in_use && st->tid == tids[k];
        }
        if (known) continue;
        int ending;
        int slot = h_ready_slot(tids[k], &ending);
        if (ending) continue;
        if (slot < 0) {
            /* counted when still not ready at the next scan (a new thread makes itself ready as it starts) */
            for (uint32_t i = 0; i < n_unready_before; i++)
                if (unready_before[i] == tids[k]) s_note_unready(tids[k]);
            if (n_unready_now < 256) unready_now[n_unready_now++] = tids[k];
            continue;
        }
        sthread *st = s_new_state_locked(tids[k]);
        if (!st) continue;
        st->ready = slot;
        if (s_mechanism != SM_NONE) s_start_thread_locked(st);
    }
    free(tids);
    memcpy(unready_before, unready_now, n_unready_now * sizeof *unready_now);
    n_unready_before = n_unready_now;


    /* link each thread to its trace buffer, for the tasks it has open */
    pthread_mutex_lock(&g_mutex);
    for (uint32_t i = 0; i < s_nthreads; i++) {
        sthread *st = atomic_load(&s_threads[i]);
        if (!st->in_use) continue;
        tbuf *linked = atomic_load(&st->tb);
        if (linked && linked->owned && linked->tid == st->tid) continue;
        tbuf *found = NULL;
        for (tbuf *b = g_buffers; b && !found; b = b->next)
            if (b->owned && b->tid == st->tid) found = b;
        atomic_store(&st->tb, found);
    }
    pthread_mutex_unlock(&g_mutex);

    /* new objects get the hooks (hooks.c) and the map in the file is written again after a dlopen or
       dlclose (the loader's counts) and every 5 s; an unload the dlclose hook did not see also empties
       the unwind caches (uw_generation) */
    unsigned long long counts[2] = {s_dl_adds, s_dl_subs};
    dl_iterate_phdr(s_dl_counts, counts); /* the first object's call gives the counts: about a microsecond */
    if (counts[1] != s_dl_subs) atomic_fetch_add(&uw_generation, 2);
    if (counts[0] != s_dl_adds) atomic_store(&s_patch_wanted, 1); /* by the scanner, without s_mutex */
    if (counts[0] != s_dl_adds || counts[1] != s_dl_subs
        || now_ns(CLOCK_MONOTONIC) - s_maps_ns > 5000000000ull)
        s_refresh_maps_locked();
    s_dl_adds = counts[0];
    s_dl_subs = counts[1];
}

/* ------------------------------------------------------------------------- */
/* Draining the rings.                                                       */

typedef struct s_stack_slot { uint64_t hash; uint64_t offset; uint32_t id, length; } s_stack_slot;
static s_stack_slot *s_stacks;           /* open addressing, by hash */
static size_t s_stacks_cap, s_stacks_len;
static uint64_t *s_frames;               /* each stack: n_native << S_STACK_NATIVE_SHIFT | n_py, then the frames */
static size_t s_frames_len, s_frames_cap;
static uint32_t s_next_stack = 1;
#define S_FRAMES_LIMIT (16u << 20)       /* words kept for comparing; past it the table starts over */

static uint64_t s_hash_words(const uint64_t *w, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) {
        h ^= w[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return h;
}

static void s_stacks_reset(void)
{
    free(s_stacks);
    free(s_frames);
    s_stacks = NULL;
    s_frames = NULL;
    s_stacks_cap = s_stacks_len = s_frames_len = s_frames_cap = 0;
}

/* A stack's counts word: its frames, and whether the Python walk cut its middle (the reader marks the cut). */
static uint32_t s_stack_counts(const s_sample *s)
{
    uint32_t cut = (s->flags >> SF_PY_SHIFT) & PYW_CUT ? S_STACK_PY_CUT : 0;
    return (uint32_t)s->n_native << S_STACK_NATIVE_SHIFT | s->n_py | cut;
}

/* The id of a sample's stack, written as a STACK record the first time; 0: no memory. */
static uint32_t s_stack_id(const s_sample *s)
{
    uint64_t key[1 + S_MAX_NATIVE + S_MAX_PY];
    size_t len = 1 + s->n_native + s->n_py;
    key[0] = s_stack_counts(s);
    memcpy(key + 1, s->native, s->n_native * 8u);
    memcpy(key + 1 + s->n_native, s->py, s->n_py * 8u);
    uint64_t h = s_hash_words(key, len);
    if (s_frames_len + len > S_FRAMES_LIMIT) s_stacks_reset();
    if (2 * (s_stacks_len + 1) > s_stacks_cap) {
        size_t cap = s_stacks_cap ? 2 * s_stacks_cap : 4096;
        s_stack_slot *table = calloc(cap, sizeof *table);
        if (!table) return 0;
        for (size_t i = 0; i < s_stacks_cap; i++) {
            if (!s_stacks[i].id) continue;
            size_t j = s_stacks[i].hash & (cap - 1);
            while (table[j].id) j = (j + 1) & (cap - 1);
            table[j] = s_stacks[i];
        }
        free(s_stacks);
        s_stacks = table;
        s_stacks_cap = cap;
    }
    size_t j = h & (s_stacks_cap - 1);
    for (; s_stacks[j].id; j = (j + 1) & (s_stacks_cap - 1))
        if (s_stacks[j].hash == h && s_stacks[j].length == len && memcmp(s_frames + s_stacks[j].offset, key, len * 8) == 0)
            return s_stacks[j].id;
    if (s_frames_len + len > s_frames_cap) {
        size_t cap = s_frames_cap ? 2 * s_frames_cap : 1u << 16;
        while (cap < s_frames_len + len) cap *= 2;
        uint64_t *frames = realloc(s_frames, cap * 8);
        if (!frames) return 0;
        s_frames = frames;
        s_frames_cap = cap;
    }
    unsigned char *p = s_record(SR_STACK, sizeof(s_stack_head) + (len - 1) * 8);
    if (!p) return 0;
    uint32_t id = s_next_stack++;
    memcpy(s_frames + s_frames_len, key, len * 8);
    s_stacks[j] = (s_stack_slot){h, s_frames_len, id, (uint32_t)len};
    s_frames_len += len;
    s_stacks_len++;
    s_stack_head head = {id, (uint32_t)key[0]};
    memcpy(p, &head, sizeof head);
    memcpy(p + sizeof head, key + 1, (len - 1) * 8);
    return id;
}

static s_entry s_entry_of(const sthread *st, const s_sample *s, uint32_t stack)
{
    s_entry e = {s->ticks, st->tid, stack, s->flags, s->weight, s->task_domain, s->task_name, s->autoitt_domain,
                 s->autoitt_name};
    return e;
}

/* ------------------------------------------------------------------------- */
/* Off-CPU samples: where a Python thread waits.                              */

/* A thread's CPU time (ns), from its CPU-time clock (the clock id of Linux's CPUCLOCK_SCHED, per thread: no
   descriptor, no /proc read); UINT64_MAX where it cannot be read (the thread is gone). */
static uint64_t s_thread_cpu_ns(uint32_t tid)
{
    struct timespec ts;
    clockid_t clock = (clockid_t)((~(unsigned)tid) << 3 | 6);
    if (clock_gettime(clock, &ts) != 0) return UINT64_MAX;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Whether thread tid is blocked (/proc/self/task/TID/stat's state: not R, running or waiting for a core):
   where the scanner shares the program's descriptor table, opening a file would take the program's lowest
   free number for a moment, so there a thread off the CPU counts as blocked. */
static int s_thread_blocked(uint32_t tid)
{
    if (atomic_load(&s_table) != S_TABLE_OWN) return 1;
    char text[256];
    if (!s_task_file(tid, "stat", text, sizeof text)) return 0;
    const char *end = strrchr(text, ')'); /* the name may hold spaces and parentheses: the state follows the last */
    return end && end[1] == ' ' && end[2] && end[2] != 'R';
}

/* At each scan, every sampled thread that has a Python thread state and is blocked right now gets an off-CPU
   sample: its Python frames (no native ones: they would need a signal, which could end the thread's blocking
   call with EINTR), its tasks, and as weight the wall time since the thread was last looked at, in sampling
   periods (the rest carried to the next).  Blocked: its CPU clock reads the same twice in a row, and again
   after its frames are read (a running thread's clock moves within a microsecond; one that woke during the
   read gets nothing), and its state is not runnable.  A thread waiting for a core is not counted: on a busy
   machine the scanner's own wakeup takes a core from a thread, which would then look off the CPU at every
   look.  So off-CPU time per line is estimated as py-spy's --idle and Austin's wall mode do, one look every
   scan; what the thread did between looks is not seen (a thread running at a look gets no weight for that
   interval's waits, one blocked at it gets the whole interval). */
static void s_off_cpu_locked(void)
{
    enum { MAX_PY_THREADS = 256 };
    if (!s_off_cpu || s_py != PYF_OK || !s_period_ns) return;
    uint32_t tids[MAX_PY_THREADS];
    uintptr_t states[MAX_PY_THREADS];
    int n = pyframes_threads(tids, states, MAX_PY_THREADS);
    uint64_t now = now_ns(CLOCK_MONOTONIC);
    s_entry batch[64];
    size_t taken = 0;
    s_sample s;
    for (uint32_t i = 0; i < s_nthreads && taken < sizeof batch / sizeof *batch; i++) {
        sthread *st = atomic_load(&s_threads[i]);
        if (!st->in_use || st->tid == atomic_load(&s_scanner_tid)) continue;
        int k = 0;
        while (k < n && tids[k] != st->tid) k++;
        if (k == n) continue;
        uint64_t elapsed = st->off_seen_ns ? now - st->off_seen_ns + st->off_carry_ns : 0;
        st->off_seen_ns = now;
        st->off_carry_ns = 0;
        uint64_t before = s_thread_cpu_ns(st->tid);
        if (!elapsed || before == UINT64_MAX || s_thread_cpu_ns(st->tid) != before || !s_thread_blocked(st->tid))
            continue;
        s.ticks = now_ticks();
        uint32_t flags = SF_OFF_CPU | s_state_flags() | s_tasks(st, &s);
        uint32_t pyf = 0;
        int np = pyframes_walk_other(states[k], s.py, S_MAX_PY, &pyf);
        if (s_thread_cpu_ns(st->tid) != before || np == 0) continue;
        st->off_carry_ns = elapsed % s_period_ns;
        uint64_t weight = elapsed / s_period_ns;
        if (!weight) continue;
        s.weight = weight > UINT32_MAX ? UINT32_MAX : (uint32_t)weight;
        s.flags = flags | pyf << SF_PY_SHIFT;
        s.n_native = 0;
        s.n_py = (uint16_t)np;
        batch[taken++] = s_entry_of(st, &s, s_stack_id(&s));
    }
    unsigned char *p;
    if (taken && (p = s_record(SR_SAMPLES, taken * sizeof *batch))) memcpy(p, batch, taken * sizeof *batch);
}

static uint8_t *s_code_done;             /* per code id: in the file */

/* The code objects filled in since the last call (an id still being filled by a handler on another
   thread, or never filled for want of room, is passed over and looked at again next time). */
static void s_codes_locked(void)
{
    uint32_t next = pyframes_code_next();
    if (next > PYFRAMES_MAX_CODES + 1) next = PYFRAMES_MAX_CODES + 1;
    if (!s_code_done && !(s_code_done = calloc(PYFRAMES_MAX_CODES + 2, 1))) return;
    pyframes_code c;
    for (uint32_t id = s_codes_written; id < next; id++) {
        if (s_code_done[id] || !pyframes_code_get(id, &c)) continue;
        s_code_head head = {id, c.firstlineno, c.filename_len, c.qualname_len, c.linetable_len, 0};
        size_t len = sizeof head + c.filename_len + c.qualname_len + c.linetable_len;
        unsigned char *p = s_record(SR_CODE, len);
        if (!p) return;
        memcpy(p, &head, sizeof head);
        memcpy(p + sizeof head, c.filename, (size_t)c.filename_len + c.qualname_len + c.linetable_len);
        s_code_done[id] = 1;
        if (id == s_codes_written) s_codes_written++;
    }
}

/* Each scan: the periods each perf event counted since the last one.  The count takes in the thread's
 * kernel time, which is never sampled, so it is not what the samples add up to; but when the handler is
 * found replaced (s_check_signal_locked), the samples lost in between are estimated from it: the periods
 * of the window times the share of periods that gave a sample before. */
static void s_read_due_locked(int handler_was_replaced)
{
    for (uint32_t i = 0; i < s_nthreads; i++) {
        sthread *st = atomic_load(&s_threads[i]);
        uint64_t count;
        if (!st->in_use || st->fd < 0 || !s_period_ns || read(st->fd, &count, sizeof count) != (ssize_t)sizeof count)
            continue;
        uint64_t due = count / s_period_ns, taken = atomic_load(&st->taken) + atomic_load(&st->dropped);
        if (handler_was_replaced && st->due && due > st->due) {
            double share = (double)st->due_taken / (double)st->due;
            st->lost += (uint64_t)((double)(due - st->due) * (share > 1 ? 1 : share) + 0.5);
        }
        st->due = due;
        st->due_taken = taken;
    }
}

static void s_stats_locked(int all)
{
    for (uint32_t i = 0; i < s_nthreads; i++) {
        sthread *st = atomic_load(&s_threads[i]);
        uint64_t taken = atomic_load(&st->taken), dropped = atomic_load(&st->dropped);
        if (st->serial == 0 || (!all && taken + dropped == st->stats_written)) continue;
        if (taken + dropped == 0 && !all) continue;
        s_counts r = {st->tid, st->serial, taken, dropped, atomic_load(&st->handler_ticks)};
        unsigned char *p = s_record(SR_STATS, sizeof r);
        if (p) memcpy(p, &r, sizeof r);
        st->stats_written = taken + dropped;
        if (st->lost) {
            s_lost d = {st->tid, st->serial, st->lost};
            if ((p = s_record(SR_LOST, sizeof d))) memcpy(p, &d, sizeof d);
        }
    }
}

/* Drains every ring into the file (s_mutex held). */
static void s_drain_locked(int final)
{
    if (s_fd < 0) return;
    s_entry *batch = NULL;
    size_t n = 0, cap = 0;
    size_t before = s_out_len;                /* records already waiting (thread names, maps) */
    s_clock clock_pair = {now_ticks(), now_ns(CLOCK_MONOTONIC)};
    unsigned char *p = s_record(SR_CLOCK, sizeof clock_pair);
    if (p) memcpy(p, &clock_pair, sizeof clock_pair);
    size_t clock_only = s_out_len;
    for (uint32_t i = 0; i < s_nthreads; i++) {
        sthread *st = atomic_load(&s_threads[i]);
        s_write_said_name(st);
        uint32_t tail = atomic_load_explicit(&st->tail, memory_order_relaxed);
        uint32_t head = atomic_load_explicit(&st->head, memory_order_acquire);
        for (; tail != head; tail++) {
            const s_sample *s = &st->ring[tail % S_RING];
            if (n == cap) {
                s_entry *bigger = realloc(batch, (cap = cap ? 2 * cap : 256) * sizeof *batch);
                if (!bigger) break;
                batch = bigger;
            }
            batch[n++] = s_entry_of(st, s, s_stack_id(s));
        }
        atomic_store_explicit(&st->tail, tail, memory_order_release);
    }
    s_codes_locked(); /* after the stacks: every code a drained sample names is filled in by now */
    if (n && (p = s_record(SR_SAMPLES, n * sizeof *batch))) memcpy(p, batch, n * sizeof *batch);
    free(batch);
    uint64_t now = now_ns(CLOCK_MONOTONIC);
    if (final || now - s_stats_ns > S_STATS_NS) {
        s_stats_locked(final);
        s_stats_ns = now;
    }
    if (final) {
        s_unready_reason_locked();
        s_refresh_maps_locked();
        s_record(SR_END, 0);
    }
    if (s_out_len == clock_only && before == 0) s_out_len = 0; /* nothing new: no write at all */
    s_flush_out();
}

/* ------------------------------------------------------------------------- */
/* The scanner thread and the process's life.                                */

static void s_wait(uint64_t ns)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += (long)ns;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&s_wait_mutex);
    while (!atomic_load(&s_stop) && !atomic_exchange(&s_scan_now, 0)) {
        if (pthread_cond_timedwait(&s_wake, &s_wait_mutex, &until) == ETIMEDOUT) break;
    }
    pthread_mutex_unlock(&s_wait_mutex);
}

/* A thread started: the scanner scans now, not at the end of its period.  s_wait_mutex is held only
   around the scanner's check of the flag, never across a scan: the caller waits microseconds at most. */
static void s_wake_scanner(void)
{
    atomic_store(&s_scan_now, 1);
    pthread_mutex_lock(&s_wait_mutex);
    pthread_cond_broadcast(&s_wake);
    pthread_mutex_unlock(&s_wait_mutex);
}

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* Closes every descriptor of the calling thread's table but the `n` in `keep` (ascending). */
static void s_close_all_but(const int *keep, int n)
{
    unsigned lo = 0;
    int ranged = 1;
    for (int i = 0; i <= n && ranged; i++) {
        unsigned hi = i < n ? (unsigned)keep[i] : ~0u;
        if (i < n && hi < lo) continue;
        if (hi > lo && syscall(SYS_close_range, lo, i < n ? hi - 1 : hi, 0) != 0) ranged = 0;
        lo = i < n ? hi + 1 : lo;
    }
    if (ranged) return;
    /* before Linux 5.9: the table's own listing */
    DIR *dir = opendir("/proc/thread-self/fd");
    if (!dir) return;
    size_t count;
    uint32_t *fds = s_numbers(dir, &count);
    closedir(dir);
    for (size_t i = 0; i < count; i++) {
        int kept = 0;
        for (int k = 0; k < n && !kept; k++) kept = (int)fds[i] == keep[k];
        if (!kept) close((int)fds[i]);
    }
    free(fds);
}

/*
 * Gives the scanner a descriptor table of its own (unshare(CLONE_FILES)).  What it opens then (a thread's
 * perf event, its name, its CPU time, /proc/self/task) never takes one of the program's numbers, even for
 * the moment before it is moved out of the way, and the program closing a range of descriptors
 * (os.closerange, a daemonizing library) cannot close our events.  The new table starts as a copy of the
 * process's: the copies of the program's descriptors are closed at once (a copy held open would keep a
 * pipe's write end open, and its reader waiting for the end of file; for the microseconds until they are
 * closed, it does), all but the collector's two files that other threads use too under the same number
 * (the sample file, the kept map), and 0-2 become /dev/null.  Its events are closed by the scanner before
 * it ends (a table goes with the last thread that uses it).
 *
 * Where unshare is refused (Docker's default seccomp profile allows it only with CAP_SYS_ADMIN; there
 * perf_event_open is refused too, and threads are sampled with timers, which take no descriptor), or
 * AUTOITT_SAMPLE_SHARED_FDS=1 asks (for tests), the scanner opens in the process's table, each
 * descriptor moved out of the way at once, as before.  Called by the scanner, s_mutex held.
 */
static void s_own_table(void)
{
    if (s_table_shared_forced || unshare(CLONE_FILES) != 0) {
        atomic_store(&s_table, S_TABLE_SHARED);
        return;
    }
    int keep[2], n = 0;
    if (s_fd >= 0) keep[n++] = s_fd;
    if (s_maps_fd >= 0) keep[n++] = s_maps_fd;
    if (n == 2 && keep[0] > keep[1]) { int t = keep[0]; keep[0] = keep[1]; keep[1] = t; }
    s_close_all_but(keep, n);
    int null = open("/dev/null", O_RDWR);
    for (int fd = 0; null >= 0 && fd < 3; fd++)
        if (fd != null) dup2(null, fd);
    if (null > 2) close(null);
    atomic_store(&s_table, S_TABLE_OWN);
}

/* Our handler, for the sampling signal (s_signal): on its own stack, the signal itself blocked while it runs. */
static int s_install_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = s_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    return h_real_sigaction ? h_real_sigaction(s_signal, &sa, NULL) : sigaction(s_signal, &sa, NULL);
}

/* The sampling signal's handler was replaced without going through sigaction()/signal() (hooks.c sees
 * those): the replacement becomes the program's action, and ours goes back in place.  The samples in
 * between went to the program's action (or nowhere): said once, with the count of re-arms. */
static void s_check_signal_locked(void)
{
    struct sigaction current;
    if (s_mechanism == SM_NONE || sigaction(s_signal, NULL, &current) != 0) return;
    if (h_is_ours(&current)) {
        s_read_due_locked(0);
        return;
    }
    s_read_due_locked(1);
    h_set_chained(&current);
    if (s_install_handler() != 0) return;
    s_rearmed++;
    char reason[400];
    snprintf(reason, sizeof reason, "the program replaced the handler of the sampling signal %d (%s) without "
             "sigaction() or signal() (%u time(s)): autoitt put its own back within 50 ms and passes the signal "
             "on to the program's handler; samples in between were lost", s_signal, strsignal(s_signal), s_rearmed);
    s_reason_locked(reason);
}

static void *s_scanner_main(void *arg)
{
    (void)arg;
    prctl(PR_SET_NAME, "autoitt-sampler", 0, 0, 0);
    atomic_store(&s_scanner_tid, current_tid());
    if (g_forked) s_wait(10000000ull); /* a fork followed by an exec: nothing at all */
    pthread_mutex_lock(&s_mutex);
    if (!atomic_load(&s_stop)) {
        /* the files the other threads write or read too, first: in the process's table */
        s_open_file_locked();
        s_open_maps();
        s_own_table();
    }
    pthread_mutex_unlock(&s_mutex);
    while (!atomic_load(&s_stop)) {
        pthread_mutex_lock(&s_mutex);
        int none = 0;
        if (!atomic_load(&s_stop)) {
            if (atomic_load(&s_table) != S_TABLE_OWN) s_open_file_locked(); /* opened here it would be ours only */
            s_check_signal_locked();
            if (s_mechanism != SM_NONE) s_scan_locked();
            if (s_mechanism != SM_NONE) s_off_cpu_locked();
            s_drain_locked(0);
            none = s_mechanism == SM_NONE; /* nothing to sample with: the reason is written, the end follows at exit */
        }
        pthread_mutex_unlock(&s_mutex);
        /* not under s_mutex: patching pins objects with dlopen, which takes the loader's lock, and a library's
           constructor or destructor, run under that lock, may need s_mutex (an ITT pause, a dlclose) */
        if (atomic_exchange(&s_patch_wanted, 0)) h_patch_all();
        if (none) break;
        s_wait(g_forked ? S_SCAN_CHILD_NS : S_SCAN_NS);
    }
    if (atomic_load(&s_table) == S_TABLE_OWN) {
        /* its events are in its own table: closed here (sampler_finish joins this thread first) */
        pthread_mutex_lock(&s_mutex);
        s_close_all_events_locked();
        if (s_task_dir) closedir(s_task_dir);
        s_task_dir = NULL;
        pthread_mutex_unlock(&s_mutex);
    }
    return NULL;
}

static void s_start_scanner(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the scanner gets no signal: the program's threads do */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256u << 10);
    atomic_store(&s_stop, 0);
    s_scanner_running = pthread_create(&s_scanner, &attr, s_scanner_main, NULL) == 0;
    if (!s_scanner_running) atomic_store(&s_table, S_TABLE_SHARED); /* new threads open their own events */
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* The first free signal of the candidates: one whose action is the default. */
static int s_pick_signal(void)
{
    int candidates[8] = {SIGURG, SIGPROF, SIGRTMIN + 6, SIGRTMIN + 7, SIGRTMIN + 8, 0};
    if (s_signal_wanted) { candidates[0] = s_signal_wanted; candidates[1] = 0; }
    for (int i = 0; candidates[i]; i++) {
        struct sigaction current;
        if (sigaction(candidates[i], NULL, &current) != 0) continue;
        if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL) return candidates[i];
    }
    return 0;
}

static void s_fork_prepare(void) { pthread_mutex_lock(&s_mutex); h_fork_prepare(); }
static void s_fork_parent(void) { h_fork_parent(); pthread_mutex_unlock(&s_mutex); }

/* The child: its own events, scanner and file; the parent's buffered samples stay the parent's. */
static void s_fork_child(void)
{
    pthread_mutex_init(&s_mutex, NULL);
    pthread_mutex_init(&s_wait_mutex, NULL);
    pthread_mutex_init(&h_patch_mutex, NULL);
    if (!s_started) return;
    h_fork_child();
    atomic_store(&uw_closing, 0); /* a dlclose of another thread's, cut short by the fork */
    s_nunready = 0;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&s_wake, &attr);
    pthread_condattr_destroy(&attr);
    /* the parent's events: in the parent scanner's own table (not copied: nothing to close), else in
       the process's, copied */
    int own = atomic_load(&s_table) == S_TABLE_OWN;
    for (uint32_t i = 0; i < s_nthreads; i++) {
        sthread *st = atomic_load(&s_threads[i]);
        atomic_store(&st->active, 0);
        if (st->fd >= 0) {
            atomic_store(&s_by_fd[st->fd - s_fd_base], NULL);
            if (!own) close(st->fd);
            st->fd = -1;
        }
        st->has_timer = 0; /* POSIX timers are not inherited */
        st->in_use = 0;
        st->serial = 0;
        st->freed_ns = 0;
        atomic_store(&st->tail, atomic_load(&st->head));
    }
    /* the child's table is a copy of the forking thread's (the process's): the parent's samples file and map are
       closed there only where the numbers still hold them (the program may have taken them since) */
    if (fd_holds(s_fd_shared, s_fd_dev, s_fd_ino)) close(s_fd_shared);
    s_fd = s_fd_shared = -1;
    if (s_maps_fd_ours()) close(s_maps_fd); /* the parent's map */
    s_maps_fd = -1;
    if (own) s_task_dir = NULL; /* its descriptor was the parent scanner's alone: the DIR is left, not closed */
    atomic_store(&s_table, S_TABLE_UNSETTLED);
    atomic_store(&s_scan_now, 0);
    s_out_len = 0;
    s_stacks_reset();
    s_codes_written = 1;
    if (s_code_done) memset(s_code_done, 0, PYFRAMES_MAX_CODES + 2);
    s_maps_seq = 0;
    s_maps_hash = 0;
    atomic_store(&uw_readers, 0);
    pyframes_fork_child();
    atomic_store(&s_finished, 0);
    s_scanner_running = 0;
    atomic_store(&s_scanner_tid, 0);
    if (s_mechanism != SM_NONE && !atomic_load(&g_exiting)) s_start_scanner();
}

void sampler_load(void)
{
    /* first: what the hooks and the writer call up here (hooks.h, writer.h), before any hook is patched in or
       any thread attaches */
    g_hooks_above = (hooks_above){s_handler, sampler_thread_started, sampler_before_unload, sampler_drain};
    g_writer_above.thread_attached = sampler_thread_attached;
    unsigned long value;
    const char *hz = getenv("AUTOITT_SAMPLE_HZ");
    if (hz && hz[0]) s_hz = env_number("AUTOITT_SAMPLE_HZ", &value) ? value : S_DEFAULT_HZ;
    if (s_hz > S_MAX_HZ) s_hz = S_MAX_HZ;
    if (s_hz) s_period_ns = 1000000000ull / s_hz;
    if (s_hz && env_number("AUTOITT_SAMPLE_TIMER_HZ", &value) && value > 0)
        s_timer_hz = value > S_MAX_HZ ? S_MAX_HZ : value;
    if (env_number("AUTOITT_SAMPLE_SIGNAL", &value) && value > 0 && value < 65) s_signal_wanted = (int)value;
    s_table_shared_forced = env_number("AUTOITT_SAMPLE_SHARED_FDS", &value) && value == 1;
    if (env_number("AUTOITT_SAMPLE_OFF_CPU", &value) && value == 0) s_off_cpu = 0;
    const char *mechanism = getenv("AUTOITT_SAMPLE_MECHANISM");
    if (mechanism && strcmp(mechanism, "timer") == 0) s_force = SM_TIMER;
    else if (mechanism && strcmp(mechanism, "perf") == 0) s_force = SM_PERF;
    /* the own domains (AUTOITT_OWN_DOMAINS) are read by tasks_load */
    pthread_atfork(s_fork_prepare, s_fork_parent, s_fork_child); /* after the collector's: its lock is taken after ours */
}

void sampler_start(void)
{
    static atomic_flag once = ATOMIC_FLAG_INIT;
    if (atomic_load(&g_exiting) || atomic_flag_test_and_set(&once)) return;
    if (s_hz == 0) {
        h_install_exec_only(); /* no sampling: an exec still keeps what was recorded */
        return;
    }
    /* what looks symbols up (dlsym takes the loader's lock) before s_mutex: see s_scanner_main */
    *(void **)&uw_find_object = dlsym(RTLD_DEFAULT, "_dl_find_object");
    if (uw_find_object) { uw_dlfo warm; uw_find_object((void *)(uintptr_t)sampler_start, &warm); }
    uint32_t py_version;
    uint64_t eval_start, eval_size;
    char py_reason[sizeof s_py_reason];
    int py = pyframes_init(py_reason, sizeof py_reason, &py_version, &eval_start, &eval_size);
    uint64_t eval_cold_start, eval_cold_size;
    s_eval_cold_part(eval_start, eval_size, &eval_cold_start, &eval_cold_size);
    int hooked = h_install();
    pthread_mutex_lock(&s_mutex);
    s_started = 1;
    s_py = py;
    s_py_version = py_version;
    s_eval_start = eval_start;
    s_eval_size = eval_size;
    s_eval_cold_start = eval_cold_start;
    s_eval_cold_size = eval_cold_size;
    memcpy(s_py_reason, py_reason, sizeof s_py_reason);
    s_mechanism = s_force ? s_force : SM_PERF;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&s_wake, &attr);
    pthread_condattr_destroy(&attr);
    s_signal = s_pick_signal();
    const char *no_sampling = NULL;
    if (!s_signal)
        no_sampling = "no CPU-time sampling: the program handles every signal the sampler could use "
                      "(SIGURG, SIGPROF, SIGRTMIN+6..8; AUTOITT_SAMPLE_SIGNAL names another)";
    else if (!hooked) /* the hooks, then the handler before any event: a signal never meets the default action */
        no_sampling = "no CPU-time sampling: the hooks that keep sampling safe (pthread_create, sigaction, "
                      "dlclose) could not be set up";
    if (no_sampling) {
        s_open_file_locked();
        s_reason_locked(no_sampling);
        s_mechanism = SM_NONE;
        s_info_locked();
        pthread_mutex_unlock(&s_mutex);
        return;
    }
    struct sigaction before;
    sigaction(s_signal, NULL, &before);
    h_set_chained(&before);
    s_install_handler();
    atomic_store(&h_owned_signal, s_signal);
    if (s_mechanism == SM_PERF && s_fd_base < 0) {
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        char reason[400];
        snprintf(reason, sizeof reason, "the program's limit on open files is small (%llu, and so is the hard "
                 "limit): sampling with per-thread CPU-time timers, which take none of its descriptors, at most at "
                 "the kernel's tick rate (often 250 per second), each sample weighted by the periods it stands for",
                 (unsigned long long)rl.rlim_cur);
        s_open_file_locked();
        s_reason_locked(reason);
        s_mechanism = SM_TIMER;
        s_info_locked();
    }
    if (!uw_find_object) {
        s_open_file_locked();
        s_reason_locked("native frames: glibc before 2.35 has no _dl_find_object: samples keep the "
                        "interrupted instruction only");
    }
    pthread_mutex_unlock(&s_mutex);
    h_patch_all();
    s_start_scanner();
}

/* A dlclose is about to run (hooks.c): the map goes to the file first, so the reader can name what the
   samples saw in the library that goes away. */
void sampler_before_unload(void)
{
    int cancel;
    if (!s_started || atomic_load(&s_finished)) return;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel); /* never cancelled holding s_mutex */
    if (pthread_mutex_trylock(&s_mutex) == 0) { /* a dlclose never waits for the scanner (see s_scanner_main) */
        if (s_fd >= 0) s_refresh_maps_locked();
        pthread_mutex_unlock(&s_mutex);
    }
    pthread_setcancelstate(cancel, NULL);
}

/* A thread the hooks saw start (hooks.c's h_thread_main, on the thread, before its start routine): sampled
   from its first instructions, not from the scanner's next listing (up to 50 ms later: short threads were
   missed).  Where the scanner has a table of its own, the thread wakes it to open its event there;
   otherwise it opens its own, only when s_mutex is free: a thread never waits for the scanner. */
void sampler_thread_started(void)
{
    int cancel;
    if (!s_started || atomic_load(&s_finished)) return;
    if (atomic_load(&s_table) != S_TABLE_SHARED) {
        /* the scanner opens its event, in its own table, within microseconds (or, before it has settled
           its table, at its first scan) */
        s_wake_scanner();
        return;
    }
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel); /* never cancelled holding s_mutex */
    if (pthread_mutex_trylock(&s_mutex) != 0) {
        pthread_setcancelstate(cancel, NULL);
        return;
    }
    uint32_t tid = current_tid();
    int known = 0, gone;
    for (uint32_t i = 0; i < s_nthreads && !known; i++) {
        sthread *st = atomic_load(&s_threads[i]);
        known = st->in_use && st->tid == tid;
    }
    int slot = h_ready_slot(tid, &gone);
    if (!known && slot >= 0 && !gone && s_mechanism != SM_NONE && !atomic_load(&s_finished)) {
        sthread *st = s_new_state_locked(tid);
        if (st) {
            st->ready = slot;
            s_start_thread_locked(st);
        }
    }
    pthread_mutex_unlock(&s_mutex);
    pthread_setcancelstate(cancel, NULL);
}

/* A thread that was running before sampling started, or that the hooks did not see start, becomes ready
   to be sampled at its first ITT event. */
void sampler_thread_attached(void)
{
    if (s_started && h_key_ok) h_thread_ready();
}

void sampler_drain(void)
{
    int cancel;
    if (!s_started || atomic_load(&s_finished)) return;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel); /* never cancelled holding s_mutex */
    /* a pause from a library's constructor runs under the loader's lock: never wait for the scanner
       (s_scanner_main); what it holds is drained at its next scan */
    if (pthread_mutex_trylock(&s_mutex) == 0) {
        s_drain_locked(0);
        pthread_mutex_unlock(&s_mutex);
    }
    pthread_setcancelstate(cancel, NULL);
}

void sampler_finish(void)
{
    if (!s_started) return;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&s_finished, &expected, 1)) return;
    atomic_store(&s_stop, 1);
    pthread_mutex_lock(&s_wait_mutex);
    pthread_cond_broadcast(&s_wake);
    pthread_mutex_unlock(&s_wait_mutex);
    if (s_scanner_running && !pthread_equal(pthread_self(), s_scanner)) pthread_join(s_scanner, NULL);
    s_scanner_running = 0;
    pthread_mutex_lock(&s_mutex);
    s_close_all_events_locked();
    if (s_fd < 0 && s_mechanism != SM_NONE) s_open_file_locked();
    s_drain_locked(1);
    pthread_mutex_unlock(&s_mutex);
}

/* A fatal signal: best effort, async-signal-safe (a static buffer). */
static unsigned char s_fatal_buf[1u << 17];

void sampler_fatal(void)
{
    if (!s_started || atomic_load(&s_finished) || pthread_mutex_trylock(&s_mutex) != 0) return;
    int fd = s_fd_here(1);
    if (fd >= 0) {
        for (uint32_t i = 0; i < s_nthreads; i++) atomic_store(&atomic_load(&s_threads[i])->active, 0);
        s_clock clock_pair = {now_ticks(), now_ns(CLOCK_MONOTONIC)};
        s_write_record(fd, SR_CLOCK, &clock_pair, sizeof clock_pair, NULL, 0);
        for (uint32_t i = 0; i < s_nthreads; i++) {
            sthread *st = atomic_load(&s_threads[i]);
            uint32_t tail = atomic_load(&st->tail), head = atomic_load(&st->head);
            for (; tail != head; tail++) {
                const s_sample *s = &st->ring[tail % S_RING];
                s_entry e = s_entry_of(st, s, 0);
                s_raw_tail counts = {s_stack_counts(s), 0};
                unsigned char *b = s_fatal_buf;
                size_t at = sizeof e + sizeof counts;
                memcpy(b, &e, sizeof e);
                memcpy(b + sizeof e, &counts, sizeof counts);
                memcpy(b + at, s->native, s->n_native * 8u);
                memcpy(b + at + s->n_native * 8u, s->py, s->n_py * 8u);
                s_write_record(fd, SR_RAW_SAMPLE, b, at + (s->n_native + s->n_py) * 8u, NULL, 0);
            }
            atomic_store(&st->tail, tail);
        }
        uint32_t next = pyframes_code_next();
        if (next > PYFRAMES_MAX_CODES + 1) next = PYFRAMES_MAX_CODES + 1;
        pyframes_code c;
        for (uint32_t id = s_codes_written; s_code_done && id < next; id++) {
            if (s_code_done[id] || !pyframes_code_get(id, &c)) continue;
            s_code_head head = {id, c.firstlineno, c.filename_len, c.qualname_len, c.linetable_len, 0};
            s_write_record(fd, SR_CODE, &head, sizeof head, c.filename, (size_t)c.filename_len + c.qualname_len + c.linetable_len);
            s_code_done[id] = 1;
        }
        for (uint32_t i = 0; i < s_nthreads; i++) {
            sthread *st = atomic_load(&s_threads[i]);
            if (!st->serial) continue;
            s_counts r = {st->tid, st->serial, atomic_load(&st->taken), atomic_load(&st->dropped),
                          atomic_load(&st->handler_ticks)};
            s_write_record(fd, SR_STATS, &r, sizeof r, NULL, 0);
        }
        s_maps_in_signal(fd, (char *)s_fatal_buf, sizeof s_fatal_buf);
    }
    pthread_mutex_unlock(&s_mutex);
}

/* autoitt's launcher calls this first thing (through ctypes), so that start-up, imports and data
 * preparation are sampled too: otherwise sampling starts at the process's first ITT call. */
EXPORT void autoitt_start_sampling(void) { sampler_start(); }
