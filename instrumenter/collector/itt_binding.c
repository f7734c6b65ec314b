/*
 * The ITT binding: __itt_api_init, the ITT functions we implement, names.  See itt_binding.h.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "itt_binding.h"
#include "sampler.h"
#include "tasks.h"
#include "writer.h"

static const unsigned char ITT_GLOBAL_MAGIC[8] = {0xED, 0xAB, 0xAB, 0xEC, 0x0D, 0xEE, 0xDA, 0x30};

/* name -> object, for our create functions */
typedef struct str_table { char **keys; void **vals; size_t cap, len; } str_table;
static str_table g_domains, g_strings;

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

/* A task of an own domain begun while collection is paused (outside every training region, as after the last
   one ended) is in no figure: counted on its string handle, whose extra1 ITT reserves for the collector,
   and told at exit (note_paused_begins), so the summary can say what ran outside collection. */
static void count_paused_begin(const itt_domain *domain, itt_string_handle *name)
{
    if (name && own_domain((uint64_t)(uintptr_t)domain)) __atomic_fetch_add(&name->extra1, 1, __ATOMIC_RELAXED);
}

void note_paused_begins(void)
{
    static atomic_flag told = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&told)) return;
    if (pthread_mutex_trylock(&g_mutex) != 0) return; /* at exit, a thread stopped holding it: nothing to wait for */
    for (size_t i = 0; i < g_strings.cap; i++) {
        itt_string_handle *h = g_strings.keys[i] ? g_strings.vals[i] : NULL;
        int count = h ? __atomic_load_n(&h->extra1, __ATOMIC_RELAXED) : 0;
        if (count > 0) write_name_now_locked(K_PAUSED_BEGINS, (const void *)(uintptr_t)count, h->strA, current_tid());
    }
    pthread_mutex_unlock(&g_mutex);
}

void paused_begins_fork_child(void)
{
    for (size_t i = 0; i < g_strings.cap; i++)
        if (g_strings.keys[i]) ((itt_string_handle *)g_strings.vals[i])->extra1 = 0;
}

static void col_task_begin(const itt_domain *domain, itt_id id, itt_id parentid,
                           itt_string_handle *name)
{
    (void)id;
    (void)parentid;
    int state = atomic_load_explicit(&g_state, memory_order_relaxed);
    if (UNLIKELY(state)) {
        if (state == ST_PAUSED) count_paused_begin(domain, name);
        return;
    }
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

static void flush_at_python_exit(void) { atomic_store(&g_exiting, 1); note_paused_begins(); flush_all(); report_losses(); sampler_finish(); /* sampler hook */ }

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
