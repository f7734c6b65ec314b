/*
 * autoitt's ITT collector: a shared library that Intel's ITT "static part"
 * (compiled into the ittapi Python module, libtorch_cpu.so, TensorFlow's
 * oneDNN, ...) loads when INTEL_LIBITTNOTIFY64 names it.  It records task
 * begin/end, pause/resume/detach and names into per-thread buffers and writes
 * them to $AUTOITT_TRACE_DIR/itt-<pid>.bin.
 *
 * The file format is documented in one place only: the module docstring of
 * instrumenter/builtin/tracefile.py (the reader).  Keep the two in sync.
 *
 * How the static part finds us: on its first non-create ITT call it
 * dlopen()s $INTEL_LIBITTNOTIFY64 and, because we export __itt_api_init, calls
 * __itt_api_init(&its_global, groups) with its own mutex held.  We then set
 * every pointer of its api list: ours for what we implement, the entry's
 * null_func for the rest.  Several static parts share this one library (one
 * __itt_api_init call each); their domains and string handles created before
 * that call live in their own lists, which we walk and name at each call.
 *
 * Hot path (task begin/end): one relaxed load of the collection state, one
 * thread-local pointer, one clock read, four 8-byte stores and a release store
 * of the buffer position.  No lock.  The clock is the TSC (rdtsc, ~15 ns in a
 * VM, where clock_gettime takes ~35 ns) when the kernel itself keeps time with
 * it (its clocksource is "tsc": constant, synchronised across CPUs); each chunk
 * carries a (ticks, CLOCK_MONOTONIC) pair taken when it is written, from which
 * the reader converts ticks to nanoseconds.  Otherwise records hold
 * CLOCK_MONOTONIC nanoseconds.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
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
#include <x86intrin.h>

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ------------------------------------------------------------------------- */
/* The ITT ABI (x86-64 Linux, 8-byte packing = natural alignment).           */
/* Offsets checked against ittapi 3.28, libtorch_cpu 3.26 and TF's 3.24.      */

typedef struct itt_domain {
    volatile int flags;          /* non-zero: the static part's task macros call through */
    const char *nameA;
    void *nameW;
    int extra1;
    void *extra2;
    struct itt_domain *next;
} itt_domain;

typedef struct itt_string_handle {
    const char *strA;
    void *strW;
    int extra1;
    void *extra2;
    struct itt_string_handle *next;
} itt_string_handle;

typedef struct itt_id {
    unsigned long long d1, d2, d3;
} itt_id;

typedef struct itt_api_info {
    const char *name;            /* "__itt_task_begin", ... */
    void **func_ptr;             /* the static part's function pointer */
    void *init_func;
    void *null_func;             /* what to bind when we do not implement it */
    int group;
} itt_api_info;

typedef struct itt_global {
    unsigned char magic[8];
    unsigned long version_major;
    unsigned long version_minor;
    unsigned long version_build;
    volatile long api_initialized;
    volatile long mutex_initialized;
    volatile long atomic_counter;
    pthread_mutex_t mutex;
    void *lib;
    void *error_handler;
    const char **dll_path_ptr;
    itt_api_info *api_list_ptr;
    struct itt_global *next;
    void *thread_list;
    itt_domain *domain_list;
    itt_string_handle *string_list;
    /* state, counter_list, ... follow; we never touch them */
} itt_global;

_Static_assert(offsetof(itt_global, api_list_ptr) == 120, "itt_global.api_list_ptr");
_Static_assert(offsetof(itt_global, domain_list) == 144, "itt_global.domain_list");
_Static_assert(offsetof(itt_global, string_list) == 152, "itt_global.string_list");
_Static_assert(sizeof(itt_api_info) == 40, "itt_api_info");
_Static_assert(offsetof(itt_domain, nameA) == 8 && offsetof(itt_domain, next) == 40, "itt_domain");
_Static_assert(offsetof(itt_string_handle, next) == 32, "itt_string_handle");
_Static_assert(sizeof(itt_id) == 24, "itt_id");

static const unsigned char ITT_GLOBAL_MAGIC[8] = {0xED, 0xAB, 0xAB, 0xEC, 0x0D, 0xEE, 0xDA, 0x30};
#define ITT_SCOPE_HOST 1

/* ------------------------------------------------------------------------- */
/* File format (see instrumenter/builtin/tracefile.py).                              */

#define FILE_MAGIC "AITTRACE"
#define FORMAT_VERSION 2u
#define CHUNK_MAGIC 0x4B4E4843u /* "CHNK" little-endian */

enum {
    K_BEGIN = 1, K_END = 2, K_PAUSE = 3, K_RESUME = 4, K_DETACH = 5,
    K_LIMIT = 6, K_COUNTERS = 7, K_HARDWARE = 8, K_HARDWARE2 = 9,
    K_DOMAIN_NAME = 16, K_STRING_NAME = 17, K_THREAD_NAME = 18, K_STATS = 19, K_NOTE = 20,
};
#define F_SCOPED 1u      /* pause/resume came from __itt_*_scoped; aux = scope */
#define F_CHILD_NS 2u    /* an end past the limit: b = ns its task spent in child tasks not in the file */
#define F_UNFINISHED 4u  /* an end written at exit for a task still open: it ends at the thread's last record */
#define F_START_PAUSED 1u /* file header flags */
#define F_TSC 2u          /* timestamps are TSC ticks */

typedef struct file_header {
    char magic[8];
    uint32_t version;
    uint32_t header_size;
    uint32_t pid;
    uint32_t ppid;
    uint64_t start_mono_ns;
    uint64_t start_real_ns;
    uint32_t flags;
    uint32_t rank_plus_one;      /* the process's rank in a multi-process run + 1; 0: none */
    uint64_t start_ticks;        /* the record clock at start_mono_ns */
} file_header;
_Static_assert(sizeof(file_header) == 56, "file header");

typedef struct chunk_header {
    uint32_t magic;
    uint32_t tid;
    uint32_t length;             /* bytes of records after this header */
    uint32_t seq;                /* per-buffer chunk counter */
    uint64_t ticks;              /* the record clock when the chunk is written, */
    uint64_t mono_ns;            /* and CLOCK_MONOTONIC at the same moment */
} chunk_header;
_Static_assert(sizeof(chunk_header) == 32, "chunk header");

typedef struct record {
    uint8_t kind;
    uint8_t flags;
    uint16_t name_len;           /* name records: bytes after the record, padded to 8 */
    uint32_t aux;
    uint64_t ts;
    uint64_t a;                  /* domain / object pointer */
    uint64_t b;                  /* string handle pointer */
} record;
_Static_assert(sizeof(record) == 32, "record");

#define REC ((uint32_t)sizeof(record))
#define CHDR ((uint32_t)sizeof(chunk_header))
#define BUF_BYTES (64u * 1024u)   /* per thread, chunk header included */
#define NAME_MAX_BYTES 4096u      /* longer names are cut */
#define PAD8(n) (((n) + 7u) & ~7u)

/* ------------------------------------------------------------------------- */
/* State.                                                                    */

enum { ST_PAUSED = 1, ST_DETACHED = 2 };
static _Atomic int g_state;                 /* 0: collecting */
static _Atomic int g_fd = -1;               /* -1: not open yet, -2: disabled */
static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER; /* everything but the hot path */
static pthread_key_t g_key;
static int g_key_ok;
static uint32_t g_pid, g_ppid;
/* The number in this process image's file names (itt-<id>.bin, samples-<id>.bin) and headers: its pid,
   unless the folder already holds a file of that pid (pick_file_id).  Readers tell processes apart by it. */
static uint32_t g_file_id;
static uint64_t g_start_mono, g_start_real;
static uint32_t g_header_flags;
static int g_tsc;                           /* records hold TSC ticks, not CLOCK_MONOTONIC ns */
static uint64_t g_start_ticks;
static uint32_t g_rank_plus_one;
static int g_forked;                        /* this process is a forked child */
static char g_dir[2 * PATH_MAX];

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
    struct agg_state *agg;           /* past the trace limit: the thread's counts (flush_lock) */
    /* sampler hook: the thread's open tasks, innermost last, for samples (sampler.c); the owner
       writes them, its own signal handler reads them.  Kept while collecting only, like the trace;
       after a pause the stack starts empty again (task_epoch), as an end dropped while paused would
       leave its task on it for good */
    uint32_t task_depth;             /* open tasks; only the first TASK_STACK are stored */
    uint32_t task_epoch;             /* g_task_epoch when the stack was last valid */
    struct task_ref { uint64_t domain, name; } tasks[64];
    /* counters hook: at each open own task, what the process had counted when it began (counters.h) */
    struct own_counts { uint64_t cpu_ns, faults, switches, hw[4]; } counts[64];
    uint64_t counted_at[64];         /* counters.h: when an own task at each depth was last counted (ns) */
    uint64_t counting;               /* counters.h: bit d: the open own task at depth d is counted */
    _Alignas(64) unsigned char data[BUF_BYTES]; /* data[0..CHDR) is room for a chunk header */
} tbuf;
#define TASK_STACK 64

#include "tasks.h" /* sampler hook: the task stack's upkeep, and sampler.c's entry points */
#include "counters.h" /* counters per own task */

static tbuf *g_buffers;
static __thread tbuf *t_buf;

/* name registry: every (kind, pointer, name) recorded, to repeat them in a forked child's file */
typedef struct reg_entry { uint8_t kind; const void *ptr; char *name; } reg_entry;
static reg_entry *g_reg;
static size_t g_reg_len, g_reg_cap;

/* name -> object, for our create functions */
typedef struct str_table { char **keys; void **vals; size_t cap, len; } str_table;
static str_table g_domains, g_strings;

/* ------------------------------------------------------------------------- */
/* Helpers.                                                                  */

static inline uint64_t now_ns(int clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The clock of records: see the top of this file. */
static inline uint64_t now_ticks(void) { return LIKELY(g_tsc) ? __rdtsc() : now_ns(CLOCK_MONOTONIC); }

/* A chunk header, with the clock pair taken now. */
static chunk_header chunk_now(uint32_t tid, uint32_t length, uint32_t seq)
{
    chunk_header h = {CHUNK_MAGIC, tid, length, seq, 0, 0};
    h.ticks = now_ticks();
    h.mono_ns = now_ns(CLOCK_MONOTONIC);
    return h;
}

static uint32_t current_tid(void) { return (uint32_t)syscall(SYS_gettid); }

static int write_all(int fd, const void *data, size_t len)
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

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void *table_get(str_table *t, const char *key)
{
    if (t->cap == 0) return NULL;
    for (size_t i = hash_str(key) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        if (!t->keys[i]) return NULL;
        if (strcmp(t->keys[i], key) == 0) return t->vals[i];
    }
}

/* key must stay alive (we store the pointer); returns 0 on allocation failure */
static int table_put(str_table *t, char *key, void *val)
{
    if (2 * (t->len + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        char **keys = calloc(cap, sizeof *keys);
        void **vals = calloc(cap, sizeof *vals);
        if (!keys || !vals) { free(keys); free(vals); return 0; }
        for (size_t j = 0; j < t->cap; j++) {
            if (!t->keys[j]) continue;
            size_t i = hash_str(t->keys[j]) & (cap - 1);
            while (keys[i]) i = (i + 1) & (cap - 1);
            keys[i] = t->keys[j];
            vals[i] = t->vals[j];
        }
        free(t->keys);
        free(t->vals);
        t->keys = keys;
        t->vals = vals;
        t->cap = cap;
    }
    size_t i = hash_str(key) & (t->cap - 1);
    while (t->keys[i]) i = (i + 1) & (t->cap - 1);
    t->keys[i] = key;
    t->vals[i] = val;
    t->len++;
    return 1;
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
static int s_fd_base = -1;                  /* our descriptors go at or above it */
static int s_fd_room;                       /* how many fit there */

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
static int fd_out_of_the_way(int fd, int must)
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

static void mkdirs(const char *dir)
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
        write_all(fd, chunk, used);
    }
    free(chunk);
}

/* g_file_id for this image: its pid, or, where a file of that pid is already in the folder, pid + n * 2^22
 * for the first n whose files are not (Linux pids are below 2^22, PID_MAX_LIMIT).  Such a file is from
 * an earlier image of this process, which exec'd this one (its steps were written before the exec: see
 * hooks.c), or from a process that had this pid before in a long run: either way it is kept, never
 * truncated, and the two are told apart.  No allocation, no lock: fork_child calls it. */
static uint32_t pick_file_id(void)
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
static int open_file_locked(void)
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

/* Bytes written to the file so far (for the trace limit, below). */
static _Atomic uint64_t g_file_bytes;

/* Records that could not be written (a full disk, a quota): said at exit, once. */
static _Atomic uint64_t g_lost_records;
static _Atomic int g_lost_errno;

/* Writes records [s, e) of b as one chunk with one write(); flush_lock held. */
static void write_chunk(int fd, tbuf *b, uint32_t s, uint32_t e)
{
    /* the bytes before s are either the reserved header room or records already written */
    chunk_header h = chunk_now(b->tid, e - s, b->seq++);
    memcpy(b->data + s - CHDR, &h, CHDR);
    atomic_fetch_add(&g_file_bytes, CHDR + (e - s));
    if (write_all(fd, b->data + s - CHDR, CHDR + (e - s)) != 0) {
        atomic_store(&g_lost_errno, errno);
        atomic_fetch_add(&g_lost_records, (e - s) / REC); /* at most: name records are longer */
    }
}

static _Atomic uint64_t g_uncounted;        /* past the trace limit: tasks too deep, or met with no room */

static void report_losses(void)
{
    static atomic_flag said_uncounted = ATOMIC_FLAG_INIT;
    uint64_t uncounted = atomic_load(&g_uncounted);
    if (uncounted && !atomic_flag_test_and_set(&said_uncounted))
        fprintf(stderr, "autoitt collector: past its trace limit, process %u could not count %llu records (tasks "
                "nested over 256 deep, or memory)\n", g_pid, (unsigned long long)uncounted);
    static atomic_flag said = ATOMIC_FLAG_INIT;
    uint64_t lost = atomic_load(&g_lost_records);
    if (lost == 0 || atomic_flag_test_and_set(&said)) return;
    fprintf(stderr, "autoitt collector: up to %llu records of process %u could not be written to %s/itt-%u.bin "
            "(%s): its trace ends early\n", (unsigned long long)lost, g_pid, g_dir, g_file_id,
            strerror(atomic_load(&g_lost_errno)));
}

/* ------------------------------------------------------------------------- */
/* The trace limit (AUTOITT_TRACE_LIMIT bytes per file).                      */
/*
 * Past the limit the timeline stops, the statistics do not: a buffer that
 * would take the file over the limit is not written but counted, by its
 * thread's own state (under its flush_lock, like the buffer), per task
 * (domain, string handle): count, summed duration, time inside (an instance
 * inside another of the same task counted once), self time, min, max, time
 * in outermost instances, and a histogram of durations in the reader's
 * buckets (instrumenter/builtin/aggregate.py).  Each flush of every buffer
 * (pause, detach, exit, a fatal signal) writes the counts since the last one
 * as K_STATS records.  What the file must still hold is written past the
 * limit, a few records each: the K_LIMIT mark, pause/resume/detach, and the
 * end of every task whose begin is in the file (with the time its children
 * spent uncounted by the file, F_CHILD_NS), so the reader pairs what it has.
 */

#define HIST_RATIO 1.02
#define HIST_BUCKETS 2242        /* int(log(2**64) / log(HIST_RATIO)) + 2, as the reader */
#define AGG_DEPTH 256            /* open tasks per thread past the limit; deeper ones are not counted */

static uint64_t g_limit;                    /* 0: none */
static _Atomic int g_exiting;               /* the last flush: tasks still open end, unfinished */
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
    write_all(g->fd, g->out, g->out_len);
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
    write_all(fd, buf, sizeof buf);
}

/* Writes records [s, e) of b, or past the limit counts them; flush_lock held. */
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

/* The thread's counts since the last call, as K_STATS records (flush_lock held). at_end: the tasks still
   open end at the thread's last record, unfinished. */
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
        uint64_t head[8] = {e->count, e->sum, e->inside, e->self, e->min, e->max, e->outer, e->unfinished};
        int bucket = 0;
        do { /* a task's buckets over as many records as it takes, the totals in the first */
            size_t used = CHDR + REC;
            if (bucket == 0) { memcpy(buf + used, head, sizeof head); used += sizeof head; }
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
            write_all(fd, buf, used);
        } while (bucket < HIST_BUCKETS);
        e->count = e->sum = e->inside = e->self = e->max = e->outer = e->unfinished = 0;
        e->min = UINT64_MAX;
    }
}

/* The owner empties its own buffer. */
static void flush_own(tbuf *b)
{
    int fd = ensure_file(); /* before flush_lock: lock order is g_mutex, then flush_lock */
    pthread_mutex_lock(&b->flush_lock);
    uint32_t e = atomic_load_explicit(&b->pos, memory_order_relaxed);
    if (fd >= 0 && e > b->start) drain(fd, b, b->start, e, 0);
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
        if (fd >= 0) drain(fd, b, b->start, e, 0);
        b->start = e;
    }
    int fd = atomic_load(&g_fd);
    if (fd >= 0 && b->agg) write_stats(fd, b, atomic_load(&g_exiting));
    pthread_mutex_unlock(&b->flush_lock);
}

/* Every thread's buffer: at pause, detach and exit. */
static void flush_all(void)
{
    pthread_mutex_lock(&g_mutex);
    for (tbuf *b = g_buffers; b; b = b->next) flush_published_locked(b);
    pthread_mutex_unlock(&g_mutex);
}

/* Writes one name record straight to the file as its own chunk (g_mutex held). */
static void write_name_now_locked(uint8_t kind, const void *ptr, const char *name, uint32_t tid)
{
    int fd = open_file_locked();
    if (fd < 0) return;
    unsigned char buf[CHDR + REC + NAME_MAX_BYTES + 8];
    size_t used = CHDR + put_name_record(buf + CHDR, kind, now_ticks(), ptr, name);
    chunk_header h = chunk_now(tid, (uint32_t)(used - CHDR), 0);
    memcpy(buf, &h, CHDR);
    write_all(fd, buf, used);
}

/* Remembers a name and writes it (g_mutex held). Returns the stored copy. */
static char *register_name_locked(uint8_t kind, const void *ptr, const char *name)
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

static int registered_locked(const void *ptr)
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

static __attribute__((noinline)) tbuf *attach_thread(void)
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
    b->counting = 0; /* counters.h: a reused buffer's open tasks are not this thread's */
    atomic_store(&b->pos, CHDR);
    char name[17] = {0};
    if (prctl(PR_GET_NAME, name, 0, 0, 0) == 0 && name[0])
        write_name_now_locked(K_THREAD_NAME, NULL, name, b->tid);
    pthread_mutex_unlock(&g_mutex);
    t_buf = b;
    if (g_key_ok) pthread_setspecific(g_key, b);
    sampler_thread_attached(); /* sampler hook */
    return b;
}

/* A record in the thread's buffer; ``small``: the name length field, which the counters record uses for
   a count (no payload follows). */
static inline tbuf *emit_with(uint8_t kind, uint8_t flags, uint16_t small, uint32_t aux, uint64_t a, uint64_t b)
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
    }
    record *r = (record *)(t->data + pos);
    r->kind = kind;
    r->flags = flags;
    r->name_len = small;
    r->aux = aux;
    r->ts = now_ticks();
    r->a = a;
    r->b = b;
    atomic_store_explicit(&t->pos, pos + REC, memory_order_release);
    return t;
}

static inline tbuf *emit(uint8_t kind, uint8_t flags, uint32_t aux, uint64_t a, uint64_t b)
{
    return emit_with(kind, flags, 0, aux, a, b);
}

/* ------------------------------------------------------------------------- */
/* The ITT functions we implement.                                           */

/* The object named `name` in `table`; when there is none, a new zeroed one of `size` bytes whose
 * name is recorded, and `*name_copy` is its interned name (NULL for an existing object). Domains and
 * string handles are never freed, so a pointer names one thing for the life of the process.
 * Called with g_mutex held. */
static void *named_object_locked(str_table *table, uint8_t kind, size_t size, const char *name,
                                 char **name_copy)
{
    *name_copy = NULL;
    void *object = table_get(table, name);
    if (object) return object;
    object = calloc(1, size);
    if (!object) return NULL;
    char *copy = register_name_locked(kind, object, name);
    if (!copy) { free(object); return NULL; }
    table_put(table, copy, object);
    *name_copy = copy;
    return object;
}

static itt_domain *col_domain_create(const char *name)
{
    if (!name) return NULL;
    char *copy;
    pthread_mutex_lock(&g_mutex);
    itt_domain *d = named_object_locked(&g_domains, K_DOMAIN_NAME, sizeof *d, name, &copy);
    if (copy) {
        d->flags = 1;  /* ITT's task macros skip a domain whose flags are 0 */
        d->nameA = copy;
        note_own_domain(d, copy); /* sampler hook */
    }
    pthread_mutex_unlock(&g_mutex);
    return d;
}

static itt_string_handle *col_string_handle_create(const char *name)
{
    if (!name) return NULL;
    char *copy;
    pthread_mutex_lock(&g_mutex);
    itt_string_handle *h = named_object_locked(&g_strings, K_STRING_NAME, sizeof *h, name, &copy);
    if (copy) h->strA = copy;
    pthread_mutex_unlock(&g_mutex);
    return h;
}

static void col_task_begin(const itt_domain *domain, itt_id id, itt_id parentid,
                           itt_string_handle *name)
{
    (void)id;
    (void)parentid;
    if (UNLIKELY(atomic_load_explicit(&g_state, memory_order_relaxed))) return;
    tbuf *t = emit(K_BEGIN, 0, 0, (uint64_t)(uintptr_t)domain, (uint64_t)(uintptr_t)name);
    if (LIKELY(t != NULL)) task_push(t, domain, name); /* sampler hook */
    if (UNLIKELY(g_forked) && t) t->depth++;
}

static void col_task_end(const itt_domain *domain)
{
    if (UNLIKELY(atomic_load_explicit(&g_state, memory_order_relaxed))) return;
    tbuf *t = emit(K_END, 0, 0, (uint64_t)(uintptr_t)domain, 0);
    if (LIKELY(t != NULL)) task_pop(t, domain); /* sampler hook */
    /* forked children usually end with _exit() (multiprocessing, DataLoader workers), which
       flushes nothing: there, a thread's buffer is written whenever its outermost task ends */
    if (UNLIKELY(g_forked) && t && --t->depth <= 0) {
        t->depth = 0;
        flush_own(t);
    }
}

static void col_pause(void)
{
    emit(K_PAUSE, 0, 0, 0, 0);
    atomic_fetch_or(&g_state, ST_PAUSED);
    forget_open_tasks(); /* sampler hook */
    flush_all(); /* what was collected so far is on disk */
    sampler_drain(); /* sampler hook */
}

static void col_resume(void)
{
    atomic_fetch_and(&g_state, ~ST_PAUSED);
    emit(K_RESUME, 0, 0, 0, 0);
}

static void col_pause_scoped(int scope)
{
    emit(K_PAUSE, F_SCOPED, (uint32_t)scope, 0, 0);
    if (scope & ITT_SCOPE_HOST) {
        atomic_fetch_or(&g_state, ST_PAUSED);
        forget_open_tasks(); /* sampler hook */
        flush_all();
    }
}

static void col_resume_scoped(int scope)
{
    if (scope & ITT_SCOPE_HOST) atomic_fetch_and(&g_state, ~ST_PAUSED);
    emit(K_RESUME, F_SCOPED, (uint32_t)scope, 0, 0);
}

static void col_detach(void)
{
    emit(K_DETACH, 0, 0, 0, 0);
    atomic_fetch_or(&g_state, ST_DETACHED); /* for good: no task is recorded after a detach */
    flush_all();
    sampler_drain(); /* sampler hook */
}

static void col_thread_set_name(const char *name)
{
    if (!name) return;
    if (!t_buf) attach_thread(); /* its prctl name first, so that this one is the latest */
    pthread_mutex_lock(&g_mutex);
    write_name_now_locked(K_THREAD_NAME, NULL, name, current_tid());
    pthread_mutex_unlock(&g_mutex);
}

/* ------------------------------------------------------------------------- */
/* Binding.                                                                  */

static const struct { const char *name; void *func; } IMPLEMENTED[] = {
    {"__itt_domain_create", (void *)col_domain_create},
    {"__itt_string_handle_create", (void *)col_string_handle_create},
    {"__itt_task_begin", (void *)col_task_begin},
    {"__itt_task_end", (void *)col_task_end},
    {"__itt_pause", (void *)col_pause},
    {"__itt_resume", (void *)col_resume},
    {"__itt_pause_scoped", (void *)col_pause_scoped},
    {"__itt_resume_scoped", (void *)col_resume_scoped},
    {"__itt_detach", (void *)col_detach},
    {"__itt_thread_set_name", (void *)col_thread_set_name},
};

static void flush_at_python_exit(void) { atomic_store(&g_exiting, 1); flush_all(); report_losses(); sampler_finish(); /* sampler hook */ }

/* In a Python process, flush at the end of Py_FinalizeEx too: a run stopped by an unhandled
   KeyboardInterrupt finalizes Python, then kills itself with SIGINT, so neither atexit()
   handlers nor library destructors run.  Looked up, not linked: no Python, no hook. */
static void hook_python_exit_locked(void)
{
    static int done;
    if (done) return;
    done = 1;
    int (*py_at_exit)(void (*)(void));
    *(void **)&py_at_exit = dlsym(RTLD_DEFAULT, "Py_AtExit");
    if (py_at_exit) py_at_exit(flush_at_python_exit);
}

/* Called by each static part, once, with its own mutex held. */
EXPORT void __itt_api_init(itt_global *p, int init_groups)
{
    (void)init_groups;
    if (!p || memcmp(p->magic, ITT_GLOBAL_MAGIC, sizeof ITT_GLOBAL_MAGIC) != 0 || !p->api_list_ptr)
        return;
    pthread_mutex_lock(&g_mutex);
    hook_python_exit_locked();
    open_file_locked();
    /* names of what this static part created before it loaded us; seed our tables so a
       later create of the same name (from any static part) returns the same object */
    for (itt_domain *d = p->domain_list; d; d = d->next) {
        if (!d->nameA || registered_locked(d)) continue;
        register_name_locked(K_DOMAIN_NAME, d, d->nameA);
        if (!table_get(&g_domains, d->nameA)) {
            char *key = strdup(d->nameA);
            if (key && !table_put(&g_domains, key, d)) free(key);
            else if (key) note_own_domain(d, key); /* sampler hook */
        }
    }
    for (itt_string_handle *h = p->string_list; h; h = h->next) {
        if (!h->strA || registered_locked(h)) continue;
        register_name_locked(K_STRING_NAME, h, h->strA);
        if (!table_get(&g_strings, h->strA)) {
            char *key = strdup(h->strA);
            if (key && !table_put(&g_strings, key, h)) free(key);
        }
    }
    pthread_mutex_unlock(&g_mutex);
    for (itt_api_info *a = p->api_list_ptr; a->name; a++) {
        void *f = a->null_func;
        for (size_t i = 0; i < sizeof IMPLEMENTED / sizeof IMPLEMENTED[0]; i++)
            if (strcmp(a->name, IMPLEMENTED[i].name) == 0) { f = IMPLEMENTED[i].func; break; }
        *a->func_ptr = f;
    }
    sampler_start(); /* sampler hook: once per process */
}

/* Called by a static part's __itt_fini_ittlib, if ever. */
EXPORT void __itt_api_fini(itt_global *p)
{
    (void)p;
    flush_all();
}

/* The entry points under their ITT names too, for programs linking to us directly.  The
   static parts are bound to the internal functions above, so nothing can interpose them. */
#define ALIAS(name, internal) EXPORT extern __typeof__(internal) name __attribute__((alias(#internal)))
ALIAS(__itt_domain_create, col_domain_create);
ALIAS(__itt_string_handle_create, col_string_handle_create);
ALIAS(__itt_task_begin, col_task_begin);
ALIAS(__itt_task_end, col_task_end);
ALIAS(__itt_pause, col_pause);
ALIAS(__itt_resume, col_resume);
ALIAS(__itt_pause_scoped, col_pause_scoped);
ALIAS(__itt_resume_scoped, col_resume_scoped);
ALIAS(__itt_detach, col_detach);
ALIAS(__itt_thread_set_name, col_thread_set_name);

/* ------------------------------------------------------------------------- */
/* Process life.                                                             */

static void fork_prepare(void) { pthread_mutex_lock(&g_mutex); }
static void fork_parent(void) { pthread_mutex_unlock(&g_mutex); }

/* The child: a new file of its own, none of the parent's buffered data. */
static void fork_child(void)
{
    g_forked = 1;
    g_pid = (uint32_t)getpid();
    g_ppid = (uint32_t)getppid();
    g_file_id = pick_file_id();
    g_start_ticks = now_ticks();
    g_start_mono = now_ns(CLOCK_MONOTONIC);
    g_start_real = now_ns(CLOCK_REALTIME);
    g_header_flags = ((atomic_load(&g_state) & ST_PAUSED) ? F_START_PAUSED : 0) | (g_tsc ? F_TSC : 0);
    atomic_store(&g_file_bytes, 0);
    atomic_store(&g_capped, 0);
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

static void at_exit(void) { atomic_store(&g_exiting, 1); flush_all(); report_losses(); sampler_finish(); /* sampler hook */ }

/* A signal that ends the process (SIGTERM from a scheduler, a crash) skips exit(): what the
   threads buffered is written out first, best effort and with async-signal-safe calls only
   (write; try-locks, so an interrupted writer is skipped rather than waited for), then the
   signal takes its default course: the process ends exactly as it would without us.
   One thread writes; a fatal signal that reaches another thread meanwhile waits for it (see
   flush_on_fatal_signal). */
static const int FATAL_SIGNALS[] = {SIGTERM, SIGHUP, SIGQUIT, SIGXCPU, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

/* The thread writing the buffers out for a fatal signal (0: none yet); it ends the process when done. */
static _Atomic uint32_t g_fatal_writer;

static void flush_on_fatal_signal(int sig)
{
    int saved_errno = errno;
    uint32_t me = current_tid(), writer = 0;
    if (atomic_compare_exchange_strong(&g_fatal_writer, &writer, me)) {
        int fd = atomic_load(&g_fd);
        int locked = pthread_mutex_trylock(&g_mutex) == 0;
        for (tbuf *b = fd >= 0 ? g_buffers : NULL; b; b = b->next) {
            if (pthread_mutex_trylock(&b->flush_lock) != 0) continue;
            uint32_t e = atomic_load_explicit(&b->pos, memory_order_acquire);
            if (e > b->start) drain(fd, b, b->start, e, 1);
            b->start = e;
            if (b->agg) write_stats(fd, b, 1);
            pthread_mutex_unlock(&b->flush_lock);
        }
        if (locked) pthread_mutex_unlock(&g_mutex);
        sampler_fatal(); /* sampler hook */
    } else if (writer != me) {
        /* A second fatal signal on another thread: a process group's SIGHUP and the copy autoitt passes
           on, say, the first one blocked in the writing thread only.  Its default action now would end
           the process halfway through the write; the writer ends it when done.  Bounded (5 s), in case
           the writer is stuck: then the default action after all.  The writer itself, met again (a crash
           while writing), goes straight to the default action. */
        struct timespec pause = {0, 10 * 1000 * 1000};
        for (int i = 0; i < 500; i++) nanosleep(&pause, NULL);
    }
    struct sigaction default_action;
    memset(&default_action, 0, sizeof default_action);
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    sigaction(sig, &default_action, NULL);
    errno = saved_errno;
    raise(sig); /* blocked in this handler: the default action runs once we return (a crash's fault
                   instruction, run again, would do the same) */
}

/* Only where the program left the default action: a handler of its own decides for itself.  No
   SA_RESETHAND: the action stays ours until the writer is done, so that a second signal of the same
   number on another thread waits too instead of ending the process (the handler resets it itself). */
static void catch_fatal_signals(void)
{
    for (size_t i = 0; i < sizeof FATAL_SIGNALS / sizeof FATAL_SIGNALS[0]; i++) {
        struct sigaction current;
        if (sigaction(FATAL_SIGNALS[i], NULL, &current) != 0 || current.sa_handler != SIG_DFL
            || (current.sa_flags & SA_SIGINFO))
            continue;
        struct sigaction ours;
        memset(&ours, 0, sizeof ours);
        ours.sa_handler = flush_on_fatal_signal;
        sigemptyset(&ours.sa_mask);
        sigaction(FATAL_SIGNALS[i], &ours, NULL);
    }
}

/* A variable holding a number below 2^32 - 1 (digits only: "", "-1", " 1" are not numbers): 1 and *out. */
static int env_number(const char *variable, unsigned long *out)
{
    const char *value = getenv(variable);
    if (!value || value[0] < '0' || value[0] > '9') return 0;
    char *end;
    unsigned long number = strtoul(value, &end, 10); /* an overflow gives ULONG_MAX: refused below */
    if (*end != 0 || number >= 0xFFFFFFFFul) return 0;
    *out = number;
    return 1;
}

/* Slurm sets SLURM_PROCID=0 in every job step, a single-task sbatch job included: it is a rank only when
 * the step runs more than one task. */
static int slurm_has_ranks(void)
{
    unsigned long tasks;
    if (env_number("SLURM_NTASKS", &tasks)) return tasks > 1;
    return env_number("SLURM_NPROCS", &tasks) && tasks > 1;
}

/* The rank a launcher gave this process, + 1 (0: none), from the first variable set to a number: RANK
 * (torchrun), LOCAL_RANK (launchers that set only it), OMPI_COMM_WORLD_RANK (Open MPI), PMI_RANK (MPICH,
 * Intel MPI), SLURM_PROCID (srun, see slurm_has_ranks). */
static uint32_t launcher_rank_plus_one(void)
{
    static const char *const RANK_VARIABLES[] = {"RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
    unsigned long rank;
    for (size_t i = 0; i < sizeof RANK_VARIABLES / sizeof RANK_VARIABLES[0]; i++)
        if (env_number(RANK_VARIABLES[i], &rank)) return (uint32_t)rank + 1;
    if (slurm_has_ranks() && env_number("SLURM_PROCID", &rank)) return (uint32_t)rank + 1;
    return 0;
}

/* The TSC is the record clock when the kernel keeps time with it (it checked it is constant and
 * synchronised across CPUs), unless AUTOITT_CLOCK=monotonic. */
static int tsc_usable(void)
{
    const char *clock = getenv("AUTOITT_CLOCK");
    if (clock && strcmp(clock, "monotonic") == 0) return 0;
    int tsc_allowed = PR_TSC_ENABLE; /* a process may forbid rdtsc (prctl PR_SET_TSC): then it would crash */
    if (prctl(PR_GET_TSC, &tsc_allowed, 0, 0, 0) == 0 && tsc_allowed != PR_TSC_ENABLE) return 0;
    char source[32] = {0};
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, source, sizeof source - 1);
    close(fd);
    return n >= 3 && strncmp(source, "tsc", 3) == 0 && (n == 3 || source[3] == '\n');
}

__attribute__((constructor)) static void collector_load(void)
{
    g_pid = (uint32_t)getpid();
    g_ppid = (uint32_t)getppid();
    g_tsc = tsc_usable();
    g_start_ticks = now_ticks();
    g_start_mono = now_ns(CLOCK_MONOTONIC);
    g_start_real = now_ns(CLOCK_REALTIME);
    g_header_flags = g_tsc ? F_TSC : 0;
    const char *paused = getenv("AUTOITT_START_PAUSED");
    if (paused && paused[0] && strcmp(paused, "0") != 0) {
        atomic_store(&g_state, ST_PAUSED);
        g_header_flags |= F_START_PAUSED;
    }
    g_rank_plus_one = launcher_rank_plus_one();
    const char *limit = getenv("AUTOITT_TRACE_LIMIT");
    if (limit && limit[0] >= '0' && limit[0] <= '9') {
        char *end;
        unsigned long long bytes = strtoull(limit, &end, 10);
        if (*end == 0 && bytes != ULLONG_MAX) g_limit = bytes;
    }
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
    fd_room_init();
    g_key_ok = pthread_key_create(&g_key, thread_exit) == 0;
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(at_exit);
    catch_fatal_signals();
    sampler_load(); /* sampler hook */
    counters_load();
}

__attribute__((destructor)) static void collector_unload(void)
{
    atomic_store(&g_exiting, 1);
    flush_all();
    report_losses();
    sampler_finish(); /* sampler hook */
}

/* ------------------------------------------------------------------------- */
/* sampler hook: CPU-time stack sampling (its own file, sharing this one's statics). */
#include "sampler.c"
