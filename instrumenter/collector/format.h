/*
 * The collector's file formats: every definition the Python readers mirror, and nothing else (plain
 * #defines, enums, structs and _Static_asserts).  The formats are documented in one place each: the
 * trace (itt-<id>.bin) in the module docstring of instrumenter/builtin/tracefile.py, the samples
 * (samples-<id>.bin) in that of instrumenter/builtin/samplefile.py.  Keep the three in sync.
 *
 * Signal context: definitions only; nothing here runs.
 */
#ifndef AUTOITT_FORMAT_H
#define AUTOITT_FORMAT_H

#include <stdint.h>

/* ------------------------------------------------------------------------- */
/* The trace: itt-<id>.bin (instrumenter/builtin/tracefile.py).              */

#define FILE_MAGIC "AITTRACE"
#define FORMAT_VERSION 2u
#define CHUNK_MAGIC 0x4B4E4843u /* "CHNK" little-endian */

/* record kinds */
enum {
    K_BEGIN = 1, K_END = 2, K_PAUSE = 3, K_RESUME = 4, K_DETACH = 5,
    K_LIMIT = 6, K_COUNTERS = 7, K_HARDWARE = 8, K_HARDWARE2 = 9,
    K_DOMAIN_NAME = 16, K_STRING_NAME = 17, K_THREAD_NAME = 18, K_STATS = 19, K_NOTE = 20,
};
/* record flags */
#define F_SCOPED 1u      /* pause/resume came from __itt_*_scoped; aux = scope */
#define F_CHILD_NS 2u    /* an end past the limit: b = ns its task spent in child tasks not in the file */
#define F_UNFINISHED 4u  /* an end written at exit for a task still open: it ends at the thread's last record */
/* file header flags */
#define F_START_PAUSED 1u
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

/* Past the trace limit: the durations' histogram, in the reader's buckets (instrumenter/builtin/aggregate.py). */
#define HIST_RATIO 1.02
#define HIST_BUCKETS 2242        /* int(log(2**64) / log(HIST_RATIO)) + 2, as the reader */
#define AGG_DEPTH 256            /* open tasks per thread past the limit; deeper ones are not counted */

/* ------------------------------------------------------------------------- */
/* The samples: samples-<id>.bin (instrumenter/builtin/samplefile.py).       */

#define S_MAGIC "AITSAMPL"
#define S_VERSION 2u
/* samples file header flags */
#define S_HEADER_TSC 1u            /* ticks are TSC ticks */
#define S_HEADER_FORKED 2u         /* the process is a forked child */

#define S_DEFAULT_HZ 1000          /* samples per second of each thread, unless AUTOITT_SAMPLE_HZ */
#define S_MAX_HZ 20000
#define S_MAX_NATIVE 128           /* native frames a sample keeps */
#define S_MAX_PY 64                /* Python frames a sample keeps */

/* record kinds */
enum { SR_INFO = 1, SR_REASON = 2, SR_CLOCK = 3, SR_THREAD = 4, SR_CODE = 5, SR_STACK = 6, SR_SAMPLES = 7,
       SR_RAW_SAMPLE = 8, SR_MAPS = 9, SR_STATS = 10, SR_END = 11, SR_LOST = 12 };
/* the info record's mechanism */
enum { SM_NONE = 0, SM_PERF = 1, SM_TIMER = 2 };

/* sample flags */
#define SF_PAUSED 1u
#define SF_DETACHED 2u
#define SF_INHERITED 4u
#define SF_TASKS_OVERFLOW 8u
#define SF_NO_STACK_MAP 16u    /* rsp was outside the thread's stack: the interrupted instruction only */
#define SF_UNLOADING 32u       /* a library was being unloaded: the interrupted instruction only */
#define SF_UW_SHIFT 8          /* the native walk's flags (UWF_*) from this bit */
#define SF_PY_SHIFT 12         /* the Python walk's flags (pyframes.h's PYW_*) from this bit */
/* the native walk's flags ("native walk" bits of a sample's flags, from SF_UW_SHIFT) */
#define UWF_TRUNCATED 1u       /* stopped at max frames */
#define UWF_RESTARTED 2u       /* resumed after code without unwind information */
#define UWF_NOINFO 4u          /* ended at code without unwind information */
#define UWF_FAILED 8u          /* ended at a frame whose rule could not be applied */

typedef struct s_file_header {
    char magic[8];
    uint32_t version, header_size, pid, ppid, flags, reserved;
    uint64_t ticks, mono_ns;
} s_file_header;
_Static_assert(sizeof(s_file_header) == 48, "samples file header");

typedef struct s_info {            /* SR_INFO */
    uint32_t hz, mechanism, signal, python;
    uint64_t period_ns, eval_start, eval_size;
    uint32_t py_version, max_native, max_py, ring;
    uint64_t eval_cold_start, eval_cold_size;
} s_info;
_Static_assert(sizeof(s_info) == 72, "info record");

typedef struct s_entry {           /* a sample in the file (SR_SAMPLES) */
    uint64_t ticks;
    uint32_t tid, stack;
    uint32_t flags, weight;
    uint64_t task_domain, task_name, autoitt_domain, autoitt_name;
} s_entry;
_Static_assert(sizeof(s_entry) == 56, "sample entry");

typedef struct s_counts {          /* SR_STATS */
    uint32_t tid, serial;
    uint64_t taken, dropped, handler_ticks;
} s_counts;
_Static_assert(sizeof(s_counts) == 32, "counts record");

typedef struct s_lost {            /* SR_LOST */
    uint32_t tid, serial;
    uint64_t lost;
} s_lost;
_Static_assert(sizeof(s_lost) == 16, "lost record");

#endif
