/*
 * The writer: per-thread trace buffers, the trace file and its chunks, names.  See writer.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "writer.h"

/* the contract this library was built from, among its bytes (format.h; tests/test_formats.py looks for it) */
AUTOITT_FORMAT_DIGEST;

_Atomic int g_state;
_Atomic int g_fd = -1;
pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t g_key;
static int g_key_ok;
uint32_t g_file_id;
char g_dir[2 * PATH_MAX];
tbuf *g_buffers;
__thread tbuf *t_buf;
_Atomic int g_exiting;
uint32_t g_header_flags;
_Atomic uint32_t g_task_epoch;
_Atomic uint64_t g_uncounted;
writer_above g_writer_above;

/* name registry: every (kind, pointer, name) recorded, to repeat them in a forked child's file */
typedef struct reg_entry { uint8_t kind; const void *ptr; char *name; } reg_entry;
static reg_entry *g_reg;
static size_t g_reg_len, g_reg_cap;

/* ------------------------------------------------------------------------- */
/* Helpers.                                                                  */

/* A chunk header, with the clock pair taken now. */
chunk_header chunk_now(uint32_t tid, uint32_t length, uint32_t seq)
{
    chunk_header h = {CHUNK_MAGIC, tid, length, seq, 0, 0};
    h.ticks = now_ticks();
    h.mono_ns = now_ns(CLOCK_MONOTONIC);
    return h;
}

uint32_t current_tid(void) { return (uint32_t)syscall(SYS_gettid); }

int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}


/* The collector's descriptors (its files, the sampler's perf events) stay out of the low numbers that
 * the program's open() hands out (the lowest free one), so the program's descriptors are numbered as
 * without us and its limit on open files is not used up by ours:
 *  - where the hard limit on open files (RLIMIT_NOFILE) is above the soft one, at or above the soft
 *    limit, where the program's own open() never reaches, and which its limit does not count (it bounds
 *    fd numbers, not how many are open);
 *  - otherwise, when the limit is large (>= FD_LARGE), in its top eighth (at most FD_TOP of them, and
 *    below 65536): a program meets them only after opening that many files;
 *  - otherwise (a small limit, `ulimit -n 160`) perf events get none (the sampler uses timers), and the
 *    collector's two files go among the limit's top 16 numbers, counted against it.
 * Set at load, from the limits then. */
#define FD_LARGE 512
#define FD_TOP 1024
#define FD_ROOM_MAX 65536
int s_fd_base = -1;
int s_fd_room;

static void fd_room_init(void)
{
    struct rlimit rl;
    s_fd_base = -1;
    s_fd_room = 0;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    rlim_t soft = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1u << 30) ? (1u << 30) : rl.rlim_cur;
    rlim_t above = rl.rlim_max == RLIM_INFINITY ? FD_ROOM_MAX : rl.rlim_max > soft ? rl.rlim_max - soft : 0;
    if (above >= 64 && soft < (1u << 20)) {
        s_fd_base = (int)soft;
        s_fd_room = above > FD_ROOM_MAX ? FD_ROOM_MAX : (int)above;
    } else if (soft >= FD_LARGE) {
        rlim_t room = soft / 8 < FD_TOP ? soft / 8 : FD_TOP;
        rlim_t top = soft < 65536 ? soft : 65536;
        s_fd_base = (int)(top - room);
        s_fd_room = (int)room;
    }
}

/* Moves fd into that room: above the soft limit, the soft limit is raised for the moment of one fcntl
 * (the program could see it in that moment only), then put back.  Returns the new descriptor; where
 * there is no room, -1 when `must` (the low one closed), else fd itself. */
int fd_out_of_the_way(int fd, int must)
{
    if (fd < 0 || (s_fd_base >= 0 && fd >= s_fd_base && fd - s_fd_base < s_fd_room)) return fd;
    int moved = -1;
    struct rlimit rl, raised;
    if (s_fd_base >= 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        raised = rl;
        rlim_t top = (rlim_t)s_fd_base + (rlim_t)s_fd_room;
        if (raised.rlim_cur <= (rlim_t)s_fd_base) raised.rlim_cur = top;
        if ((raised.rlim_max == RLIM_INFINITY || raised.rlim_cur <= raised.rlim_max)
            && (raised.rlim_cur == rl.rlim_cur || setrlimit(RLIMIT_NOFILE, &raised) == 0)) {
            moved = fcntl(fd, F_DUPFD_CLOEXEC, s_fd_base);
            /* put back, unless the program set a limit of its own meanwhile */
            struct rlimit now;
            if (raised.rlim_cur != rl.rlim_cur && getrlimit(RLIMIT_NOFILE, &now) == 0 && now.rlim_cur == raised.rlim_cur
                && now.rlim_max == raised.rlim_max)
                setrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    if (moved >= 0 && moved - s_fd_base >= s_fd_room) { close(moved); moved = -1; }
    if (moved < 0 && !must && getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur >= 64 && rl.rlim_cur <= INT_MAX)
        moved = fcntl(fd, F_DUPFD_CLOEXEC, (int)rl.rlim_cur - 16); /* a small limit: its top, counted against it */
    if (moved < 0 && !must) return fd;
    close(fd);
    return moved;
}

void mkdirs(const char *dir)
{
    char tmp[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof tmp) return;
    memcpy(tmp, dir, n + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(tmp, 0777);
        *p = '/';
    }
    mkdir(tmp, 0777);
}

/* ------------------------------------------------------------------------- */
/* A closed descriptor.                                                      */

/* The program may close the trace file's descriptor under the collector: daemonizing code and some launchers
 * run os.closerange(3, limit), which reaches the room above the soft limit the file sits in.  Every write to the
 * trace file checks first that its descriptor still holds the file opened (device and inode, one fstat): where
 * it is closed (EBADF) or its number was taken again for a file of the program's, the file is opened again by its
 * path, appended to and moved out of the way, and nothing buffered is lost.  The old number is never written to
 * nor closed: it may be the program's now.  Where the file is gone (removed, or replaced by another), the trace
 * ends there and the loss is said at exit.  Not covered: a number closed and taken again between the fstat and
 * the write (two system calls apart), and a flush from a fatal signal's handler, which takes no lock to reopen.
 * AUTOITT_TRACE_TRUST_FD=1 (for tests) writes to the descriptor whatever it holds: a test puts a full pipe there to
 * hold a fatal signal's flush in its write (tests/test_collector.py). */
static dev_t g_trace_dev;
static ino_t g_trace_ino;
static pthread_mutex_t g_reopen_mutex = PTHREAD_MUTEX_INITIALIZER; /* a leaf: no other lock is taken under it */
static _Atomic uint32_t g_trace_reopened;
static _Atomic int g_in_signal_flush;
static int g_trust_fd;

int fd_holds(int fd, dev_t dev, ino_t ino)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

static int trace_fd_is_ours(int fd) { return fd_holds(fd, g_trace_dev, g_trace_ino); }

static void remember_trace_file(int fd)
{
    struct stat st;
    if (fstat(fd, &st) == 0) {
        g_trace_dev = st.st_dev;
        g_trace_ino = st.st_ino;
    }
}

/* The trace file's descriptor after `stale` was found not to hold it: the one another thread reopened, or a new
   one; -1 where the file cannot be had again (then nothing more is written). */
static int trace_reopen(int stale)
{
    if (atomic_load(&g_in_signal_flush)) return -1;
    pthread_mutex_lock(&g_reopen_mutex);
    int fd = atomic_load(&g_fd);
    if (fd != stale && trace_fd_is_ours(fd)) {
        pthread_mutex_unlock(&g_reopen_mutex);
        return fd;
    }
    char path[sizeof g_dir + 32];
    snprintf(path, sizeof path, "%s/itt-%u.bin", g_dir, g_file_id);
    int fresh = fd_out_of_the_way(open(path, O_WRONLY | O_APPEND | O_CLOEXEC), 0);
    if (fresh >= 0 && !trace_fd_is_ours(fresh)) { /* another file by that name now: not ours to append to */
        close(fresh);
        fresh = -1;
    }
    if (fresh >= 0) atomic_fetch_add(&g_trace_reopened, 1);
    atomic_store(&g_fd, fresh >= 0 ? fresh : -2);
    pthread_mutex_unlock(&g_reopen_mutex);
    return fresh;
}

int trace_write(int fd, const void *data, size_t len)
{
    if (!g_trust_fd && !trace_fd_is_ours(fd) && (fd = trace_reopen(fd)) < 0) {
        errno = EBADF;
        return -1;
    }
    return write_all(fd, data, len);
}

/* ------------------------------------------------------------------------- */
/* Writing.                                                                  */

/* Appends one name record (fixed part + padded bytes) at out; returns its size. */
static size_t put_name_record(unsigned char *out, uint8_t kind, uint64_t ts, const void *ptr,
                              const char *name)
{
    size_t len = strlen(name);
    if (len > NAME_MAX_BYTES) len = NAME_MAX_BYTES;
    record r = {0};
    r.kind = kind;
    r.name_len = (uint16_t)len;
    r.ts = ts;
    r.a = (uint64_t)(uintptr_t)ptr;
    memcpy(out, &r, REC);
    memcpy(out + REC, name, len);
    memset(out + REC + len, 0, PAD8(len) - len);
    return REC + PAD8(len);
}

static size_t name_record_size(const char *name)
{
    size_t len = strlen(name);
    if (len > NAME_MAX_BYTES) len = NAME_MAX_BYTES;
    return REC + PAD8(len);
}

/* Writes the registry as name chunks (g_mutex held, fd open). */
static void write_registry_locked(int fd)
{
    size_t i = 0;
    uint32_t tid = current_tid();
    uint64_t ts = now_ticks();
    unsigned char *chunk = malloc(BUF_BYTES + NAME_MAX_BYTES + REC);
    if (!chunk) return;
    while (i < g_reg_len) {
        size_t used = CHDR;
        while (i < g_reg_len && (used == CHDR || used + name_record_size(g_reg[i].name) <= BUF_BYTES)) {
            used += put_name_record(chunk + used, g_reg[i].kind, ts, g_reg[i].ptr, g_reg[i].name);
            i++;
        }
        chunk_header h = chunk_now(tid, (uint32_t)(used - CHDR), 0);
        memcpy(chunk, &h, CHDR);
        trace_write(fd, chunk, used);
    }
    free(chunk);
}

/* g_file_id for this image: its pid, or, where a file of that pid is already in the folder, pid + n * 2^22
 * for the first n whose files are not (Linux pids are below 2^22, PID_MAX_LIMIT).  Such a file is from
 * an earlier image of this process, which exec'd this one (its steps were written before the exec: see
 * hooks.c), or from a process that had this pid before in a long run: either way it is kept, never
 * truncated, and the two are told apart.  No allocation, no lock: fork_child calls it. */
uint32_t pick_file_id(void)
{
    char path[sizeof g_dir + 40];
    for (uint32_t n = 0; n < 1024; n++) {
        uint32_t id = g_pid + (n << 22);
        snprintf(path, sizeof path, "%s/itt-%u.bin", g_dir, id);
        if (access(path, F_OK) == 0) continue;
        snprintf(path, sizeof path, "%s/samples-%u.bin", g_dir, id);
        if (access(path, F_OK) == 0) continue;
        return id;
    }
    return g_pid;
}

/* Opens itt-<file id>.bin and writes the header and the names known so far (g_mutex held). */
int open_file_locked(void)
{
    int fd = atomic_load(&g_fd);
    if (fd != -1) return fd;
    char path[sizeof g_dir + 32];
    mkdirs(g_dir);
    snprintf(path, sizeof path, "%s/itt-%u.bin", g_dir, g_file_id);
    fd = fd_out_of_the_way(open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644), 0);
    if (fd < 0) {
        fprintf(stderr, "autoitt collector: cannot write %s: %s; recording nothing\n", path,
                strerror(errno));
        atomic_store(&g_fd, -2);
        return -2;
    }
    remember_trace_file(fd);
    file_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, FILE_MAGIC, 8);
    h.version = FORMAT_VERSION;
    h.header_size = sizeof h;
    h.pid = g_file_id;
    h.ppid = g_ppid;
    h.start_mono_ns = g_start_mono;
    h.start_real_ns = g_start_real;
    h.flags = g_header_flags;
    h.rank_plus_one = g_rank_plus_one;
    h.start_ticks = g_start_ticks;
    write_all(fd, &h, sizeof h);
    write_registry_locked(fd);
    atomic_store(&g_fd, fd);
    return fd;
}

static int ensure_file(void)
{
    int fd = atomic_load_explicit(&g_fd, memory_order_acquire);
    if (LIKELY(fd >= 0) || fd == -2) return fd;
    pthread_mutex_lock(&g_mutex);
    fd = open_file_locked();
    pthread_mutex_unlock(&g_mutex);
    return fd;
}

/* Bytes written to the file so far (for the trace limit: trace_limit.c). */
_Atomic uint64_t g_file_bytes;

/* Records that could not be written (a full disk, a quota): said at exit, once. */
static _Atomic uint64_t g_lost_records;
static _Atomic int g_lost_errno;

/* Writes records [s, e) of b as one chunk with one write(); flush_lock held. */
void write_chunk(int fd, tbuf *b, uint32_t s, uint32_t e)
{
    /* the bytes before s are either the reserved header room or records already written */
    chunk_header h = chunk_now(b->tid, e - s, b->seq++);
    memcpy(b->data + s - CHDR, &h, CHDR);
    atomic_fetch_add(&g_file_bytes, CHDR + (e - s));
    if (trace_write(fd, b->data + s - CHDR, CHDR + (e - s)) != 0) {
        atomic_store(&g_lost_errno, errno);
        atomic_fetch_add(&g_lost_records, (e - s) / REC); /* at most: name records are longer */
    }
}


void report_losses(void)
{
    static atomic_flag said_uncounted = ATOMIC_FLAG_INIT;
    uint64_t uncounted = atomic_load(&g_uncounted);
    if (uncounted && !atomic_flag_test_and_set(&said_uncounted))
        fprintf(stderr, "autoitt collector: past its trace limit, process %u could not count %llu records (tasks "
                "nested over 256 deep, or memory)\n", g_pid, (unsigned long long)uncounted);
    static atomic_flag said_reopened = ATOMIC_FLAG_INIT;
    uint32_t reopened = atomic_load(&g_trace_reopened);
    if (reopened && !atomic_flag_test_and_set(&said_reopened))
        fprintf(stderr, "autoitt collector: process %u closed the trace file's descriptor (or took its number) %u "
                "time(s); the file was opened again each time, nothing lost\n", g_pid, reopened);
    static atomic_flag said = ATOMIC_FLAG_INIT;
    uint64_t lost = atomic_load(&g_lost_records);
    if (lost == 0 || atomic_flag_test_and_set(&said)) return;
    fprintf(stderr, "autoitt collector: up to %llu records of process %u could not be written to %s/itt-%u.bin "
            "(%s): its trace ends early\n", (unsigned long long)lost, g_pid, g_dir, g_file_id,
            strerror(atomic_load(&g_lost_errno)));
}

/* The owner empties its own buffer. */
void flush_own(tbuf *b)
{
    int fd = ensure_file(); /* before flush_lock: lock order is g_mutex, then flush_lock */
    pthread_mutex_lock(&b->flush_lock);
    uint32_t e = atomic_load_explicit(&b->pos, memory_order_relaxed);
    if (fd >= 0 && e > b->start) g_writer_above.drain(fd, b, b->start, e, 0);
    b->start = CHDR;
    atomic_store_explicit(&b->pos, CHDR, memory_order_release);
    pthread_mutex_unlock(&b->flush_lock);
}

/* Writes out what b's owner has published so far, from any thread (g_mutex held). */
static void flush_published_locked(tbuf *b)
{
    pthread_mutex_lock(&b->flush_lock);
    uint32_t e = atomic_load_explicit(&b->pos, memory_order_acquire);
    if (e > b->start) {
        int fd = open_file_locked();
        if (fd >= 0) g_writer_above.drain(fd, b, b->start, e, 0);
        b->start = e;
    }
    int fd = atomic_load(&g_fd);
    if (fd >= 0 && b->agg) g_writer_above.write_stats(fd, b, atomic_load(&g_exiting));
    pthread_mutex_unlock(&b->flush_lock);
}

/* Every thread's buffer: at pause, detach and exit. */
void flush_all(void)
{
    pthread_mutex_lock(&g_mutex);
    for (tbuf *b = g_buffers; b; b = b->next) flush_published_locked(b);
    pthread_mutex_unlock(&g_mutex);
}

/* Writes one name record straight to the file as its own chunk (g_mutex held). */
void write_name_now_locked(uint8_t kind, const void *ptr, const char *name, uint32_t tid)
{
    int fd = open_file_locked();
    if (fd < 0) return;
    unsigned char buf[CHDR + REC + NAME_MAX_BYTES + 8];
    size_t used = CHDR + put_name_record(buf + CHDR, kind, now_ticks(), ptr, name);
    chunk_header h = chunk_now(tid, (uint32_t)(used - CHDR), 0);
    memcpy(buf, &h, CHDR);
    trace_write(fd, buf, used);
}

/* Remembers a name and writes it (g_mutex held). Returns the stored copy. */
char *register_name_locked(uint8_t kind, const void *ptr, const char *name)
{
    if (g_reg_len == g_reg_cap) {
        size_t cap = g_reg_cap ? 2 * g_reg_cap : 256;
        reg_entry *r = realloc(g_reg, cap * sizeof *r);
        if (!r) return NULL;
        g_reg = r;
        g_reg_cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) return NULL;
    g_reg[g_reg_len++] = (reg_entry){kind, ptr, copy};
    if (atomic_load(&g_fd) == -1) open_file_locked(); /* the open writes the registry, this one included */
    else write_name_now_locked(kind, ptr, name, current_tid());
    return copy;
}

int registered_locked(const void *ptr)
{
    for (size_t i = 0; i < g_reg_len; i++)
        if (g_reg[i].ptr == ptr) return 1;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Threads.                                                                  */

static void thread_exit(void *arg)
{
    tbuf *b = arg;
    if (!b) return;
    flush_own(b);
    pthread_mutex_lock(&g_mutex);
    b->owned = 0;
    pthread_mutex_unlock(&g_mutex);
    t_buf = NULL;
}

__attribute__((noinline)) tbuf *attach_thread(void)
{
    pthread_mutex_lock(&g_mutex);
    tbuf *b = g_buffers;
    while (b && b->owned) b = b->next;
    if (!b) {
        b = aligned_alloc(64, sizeof *b);
        if (!b) { pthread_mutex_unlock(&g_mutex); return NULL; }
        memset(b, 0, offsetof(tbuf, data));
        pthread_mutex_init(&b->flush_lock, NULL);
        b->next = g_buffers;
        g_buffers = b;
    }
    b->owned = 1;
    b->tid = current_tid();
    b->start = CHDR;
    b->seq = 0;
    b->depth = 0;
    b->task_depth = 0; /* sampler hook */
    b->task_epoch = atomic_load(&g_task_epoch);
    b->counting = 0; /* counters.c: a reused buffer's open tasks are not this thread's */
    atomic_store(&b->pos, CHDR);
    char name[17] = {0};
    if (prctl(PR_GET_NAME, name, 0, 0, 0) == 0 && name[0])
        write_name_now_locked(K_THREAD_NAME, NULL, name, b->tid);
    pthread_mutex_unlock(&g_mutex);
    t_buf = b;
    if (g_key_ok) pthread_setspecific(g_key, b);
    if (g_writer_above.thread_attached) g_writer_above.thread_attached(); /* sampler hook */
    return b;
}


/* ------------------------------------------------------------------------- */
/* Process life's part (process.c calls these).                              */

void writer_load(void)
{
    const char *dir = getenv("AUTOITT_TRACE_DIR");
    if (!dir || !dir[0]) dir = ".";
    if (dir[0] == '/') {
        snprintf(g_dir, sizeof g_dir, "%s", dir);
    } else {
        char cwd[PATH_MAX];
        if (getcwd(cwd, sizeof cwd)) snprintf(g_dir, sizeof g_dir, "%s/%s", cwd, dir);
        else snprintf(g_dir, sizeof g_dir, "%s", dir);
    }
    g_file_id = pick_file_id(); /* once g_dir is known */
    const char *trust = getenv("AUTOITT_TRACE_TRUST_FD");
    g_trust_fd = trust && trust[0] == '1';
    fd_room_init();
    g_key_ok = pthread_key_create(&g_key, thread_exit) == 0;
}

void writer_fork_child(void)
{
    g_file_id = pick_file_id();
    atomic_store(&g_file_bytes, 0);
    int fd = atomic_load(&g_fd);
    if (fd >= 0) close(fd); /* our copy of the parent's descriptor */
    atomic_store(&g_fd, fd == -2 ? -2 : -1); /* opened again (as itt-<childpid>.bin) when needed */
    for (tbuf *b = g_buffers; b; b = b->next) {
        pthread_mutex_init(&b->flush_lock, NULL); /* its holder, if any, did not survive the fork */
        b->owned = 0;
        b->depth = 0;
        b->written_depth = 0;
        b->agg = NULL; /* the parent's counts stay the parent's (the copy is left, not freed, here) */
        b->start = CHDR;
        b->task_depth = 0; /* sampler hook: the child's file has none of the parent's begins */
        b->counting = 0;
        atomic_store(&b->pos, CHDR);
    }
    t_buf = NULL; /* this thread attaches again, with its new tid, at its next event */
    if (g_key_ok) pthread_setspecific(g_key, NULL);
    pthread_mutex_unlock(&g_mutex);
}

void writer_flush_in_signal(void)
{
    atomic_store(&g_in_signal_flush, 1); /* no lock to reopen a closed file with: trace_reopen gives up */
    int fd = atomic_load(&g_fd);
    int locked = pthread_mutex_trylock(&g_mutex) == 0;
    for (tbuf *b = fd >= 0 ? g_buffers : NULL; b; b = b->next) {
        if (pthread_mutex_trylock(&b->flush_lock) != 0) continue;
        uint32_t e = atomic_load_explicit(&b->pos, memory_order_acquire);
        if (e > b->start) g_writer_above.drain(fd, b, b->start, e, 1);
        b->start = e;
        if (b->agg) g_writer_above.write_stats(fd, b, 1);
        pthread_mutex_unlock(&b->flush_lock);
    }
    if (locked) pthread_mutex_unlock(&g_mutex);
}
