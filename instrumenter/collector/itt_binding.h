/*
 * The ITT binding (itt_binding.c): how Intel's ITT "static parts" (compiled into the ittapi Python module,
 * libtorch_cpu.so, TensorFlow's oneDNN, ...) find the collector, and the ITT functions it implements.
 *
 * How the static part finds us: on its first non-create ITT call it dlopen()s $INTEL_LIBITTNOTIFY64
 * and, because we export __itt_api_init, calls __itt_api_init(&its_global, groups) with its own mutex
 * held.  We then set every pointer of its api list: ours for what we implement, the entry's null_func
 * for the rest.  Several static parts share this one library (one __itt_api_init call each); their
 * domains and string handles created before that call live in their own lists, which we walk and name
 * at each call.  The entry points are exported under their ITT names too (__itt_task_begin, ...), for
 * programs linking to us directly.
 *
 * Hot path (task begin/end, per PyTorch operator): one relaxed load of the collection state, then
 * writer.h's emit() and tasks.h's task_push/task_pop, all inlined into col_task_begin/col_task_end.
 * No lock.
 *
 * Signal context: none.  The ITT functions are called by the program's threads (a program calling one
 * from its own signal handler is outside the ITT contract); domains and string handles are never freed,
 * so a pointer names one thing for the life of the process (the sampler's handler stores them, never
 * follows them).
 */
#ifndef AUTOITT_ITT_BINDING_H
#define AUTOITT_ITT_BINDING_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

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

#define ITT_SCOPE_HOST 1

/* At exit: a PAUSED_BEGINS name record for each task name an own domain began while collection was paused. */
void note_paused_begins(void);
/* In a forked child (g_mutex held): its own count starts from zero, as its file does. */
void paused_begins_fork_child(void);

#endif
