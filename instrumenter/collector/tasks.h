/*
 * The sampler's hooks in collector.c (included there right after struct tbuf): each thread's stack of
 * open ITT tasks, kept in its trace buffer on the task begin/end hot path, and the domains of
 * autoitt's own markers, for the tasks a sample is attributed to (sampler.c).
 *
 * Cost on the hot path (collecting): one load and compare for the pause epoch, two 8-byte stores and
 * the depth, and one compare against the first own domain (a second one only when there are several
 * own domain objects); begins and ends of own tasks also update the process's current own task, out
 * of line.  Paused, nothing: as in the trace, tasks begun or ended while paused are not seen, and a
 * pause forgets every thread's open tasks (g_task_epoch: each stack restarts empty at its thread's
 * next begin or end), since an end dropped while paused would otherwise leave its task open for good.
 */

/* sampler hook: the domains of autoitt's own markers (AUTOITT_OWN_DOMAINS, comma-separated, read by
   sampler_load; default "autoitt.train"), as objects once created, and the process's current own task
   (the innermost one open in the thread that last began or ended one), for samples of threads that
   have none of their own (sampler.c) */
#define OWN_DOMAINS_MAX 8

/* counters.h (included right after this file): counters per own task */
static void own_counters_begin(tbuf *t, uint32_t d);
static void own_counters_end(tbuf *t, uint32_t d);
static char g_own_names[OWN_DOMAINS_MAX][128];
static int g_own_names_n;
static _Atomic uint64_t g_own_domains[OWN_DOMAINS_MAX];  /* domain pointers; 0: not created yet */
static _Atomic int g_own_many;              /* more than one own domain object */
static _Atomic uint64_t g_own_current, g_own_current_domain;
static _Atomic uint32_t g_task_epoch;       /* pauses so far */

static int own_domain_slow(uint64_t domain)
{
    for (int i = 0; i < OWN_DOMAINS_MAX; i++)
        if (domain && atomic_load_explicit(&g_own_domains[i], memory_order_relaxed) == domain) return 1;
    return 0;
}

/* Whether domain is one of the own domains: one compare when there is one. */
static inline int own_domain(uint64_t domain)
{
    if (LIKELY(domain != atomic_load_explicit(&g_own_domains[0], memory_order_relaxed))
        && LIKELY(!atomic_load_explicit(&g_own_many, memory_order_relaxed)))
        return 0;
    return own_domain_slow(domain);
}

static __attribute__((noinline, cold)) uint32_t task_stack_restart(tbuf *t, uint32_t epoch)
{
    t->task_epoch = epoch;
    t->task_depth = 0;
    return 0;
}

static inline uint32_t task_depth_now(tbuf *t)
{
    uint32_t epoch = atomic_load_explicit(&g_task_epoch, memory_order_relaxed);
    if (UNLIKELY(t->task_epoch != epoch)) return task_stack_restart(t, epoch);
    return t->task_depth;
}

/* The thread's innermost open own task is now the process's current one (begins and ends of own
   tasks only: rare, kept out of the hot path's code). */
static __attribute__((noinline, cold)) void own_task_changed(tbuf *t)
{
    uint64_t current = 0, domain = 0;
    uint32_t d = t->task_depth;
    for (uint32_t i = d < TASK_STACK ? d : TASK_STACK; i-- > 0;)
        if (own_domain_slow(t->tasks[i].domain)) { current = t->tasks[i].name; domain = t->tasks[i].domain; break; }
    atomic_store_explicit(&g_own_current_domain, domain, memory_order_relaxed);
    atomic_store_explicit(&g_own_current, current, memory_order_relaxed);
}

static inline void task_push(tbuf *t, const void *domain, const void *name)
{
    uint32_t d = task_depth_now(t);
    if (LIKELY(d < TASK_STACK)) t->tasks[d] = (struct task_ref){(uint64_t)(uintptr_t)domain, (uint64_t)(uintptr_t)name};
    atomic_signal_fence(memory_order_release); /* the entry before the depth, for the thread's own handler */
    t->task_depth = d + 1;
    if (UNLIKELY(own_domain((uint64_t)(uintptr_t)domain))) {
        own_task_changed(t);
        own_counters_begin(t, d);
    }
}

static inline void task_pop(tbuf *t, const void *domain)
{
    uint32_t d = task_depth_now(t);
    if (LIKELY(d > 0)) t->task_depth = d - 1;
    if (UNLIKELY(own_domain((uint64_t)(uintptr_t)domain))) {
        own_task_changed(t);
        if (d > 0) own_counters_end(t, d - 1);
    }
}

/* A pause: every thread's open tasks are forgotten (their stacks restart empty), and so is the current
   own task. */
static void forget_open_tasks(void)
{
    atomic_fetch_add(&g_task_epoch, 1);
    atomic_store(&g_own_current, 0);
}

/* A domain was created (or met, from a static part): one of the own ones? */
static void note_own_domain(const void *domain, const char *name)
{
    for (int i = 0; i < g_own_names_n; i++) {
        if (strcmp(name, g_own_names[i]) != 0) continue;
        for (int k = 0; k < OWN_DOMAINS_MAX; k++) {
            uint64_t expected = 0;
            if (atomic_compare_exchange_strong(&g_own_domains[k], &expected, (uint64_t)(uintptr_t)domain)) {
                if (k > 0) atomic_store(&g_own_many, 1);
                return;
            }
            if (expected == (uint64_t)(uintptr_t)domain) return;
        }
        return;
    }
}

/* sampler hook: sampler.c (included at the end of this file) */
static void sampler_load(void);
static void sampler_start(void);
static void sampler_drain(void);
static void sampler_finish(void);
static void sampler_fatal(void);
static void sampler_thread_attached(void);
