/*
 * The task stack and the own domains (tasks.c): each thread's stack of open ITT tasks, kept in its trace
 * buffer on the task begin/end hot path, and the domains of autoitt's own markers, for the tasks a
 * sample is attributed to (sampler.c) and the counters per own task (counters.c).
 *
 * Cost on the hot path (collecting): one load and compare for the pause epoch, two 8-byte stores and
 * the depth, and one compare against the first own domain (a second one only when there are several
 * own domain objects); begins and ends of own tasks also update the process's current own task, out
 * of line.  Paused, nothing: as in the trace, tasks begun or ended while paused are not seen, and a
 * pause forgets every thread's open tasks (writer.h's g_task_epoch: each stack restarts empty at its thread's
 * next begin or end), since an end dropped while paused would otherwise leave its task open for good.
 *
 * The own domains: AUTOITT_OWN_DOMAINS (comma-separated, any number; default "autoitt.train"), read at
 * load by tasks_load, which sizes the set of their domain objects then, once, before any thread
 * records: at least two slots per name (a name gets at most one object: the collector's create functions
 * return the same object for the same name), so that a search ends within a probe or two however many
 * modules a project instruments.  No allocation after that, none in signal context.  Should the set
 * ever hold half its slots (it cannot, short of an allocation failure making two objects of one name),
 * a further domain is not counted as own and a note record says so, once.  The process's current own task (the
 * innermost one open in the thread that last began or ended one) is for samples of threads that have
 * none of their own (sampler.c).
 *
 * Signal context: the sampler's handler reads a thread's own task stack (task_depth, tasks[],
 * task_epoch: written by that thread only, the entry before the depth behind a signal fence), the own
 * domains' table (allocated at load, never freed or moved; slots filled once with an atomic
 * compare-and-swap) through own_domain_slow, and the current own task (relaxed atomics).  Those reads
 * must stay lock-free and allocation-free; nothing here may make the table move after load.
 */
#ifndef AUTOITT_TASKS_H
#define AUTOITT_TASKS_H

#include <stdatomic.h>
#include <stdint.h>

#include "common.h"
#include "counters.h"
#include "writer.h"

#pragma GCC visibility push(hidden)

extern _Atomic uint64_t g_own_first;        /* the first own domain object; 0: not created yet */
extern _Atomic int g_own_many;              /* more than one own domain object */
extern _Atomic uint64_t *g_own_domains;     /* the own domain objects, a hash set (0: free slot), set at load */
extern uint64_t g_own_mask;                 /* its slots - 1 (a power of two, at least twice the names) */
extern _Atomic uint64_t g_own_current, g_own_current_domain;

/* collector_load: the own domains' names, and their table. */
void tasks_load(void);
/* A domain was created (or met, from a static part): one of the own ones?  g_mutex held. */
void note_own_domain(const void *domain, const char *name);
/* A pause: every thread's open tasks are forgotten (their stacks restart empty), and so is the current
   own task. */
void forget_open_tasks(void);
uint32_t task_stack_restart(tbuf *t, uint32_t epoch);
void own_task_changed(tbuf *t);

/* Where domain's search starts in the own domains' set. */
static inline uint64_t own_slot(uint64_t domain) { return (domain * 0x9E3779B97F4A7C15ull >> 32) & g_own_mask; }

/* Whether domain is one of the own domains (the handler too: lock-free reads of a table that never moves).
   The set is at most half full, so a search ends at a free slot within a probe or two. */
static inline int own_domain_slow(uint64_t domain)
{
    if (!domain || !g_own_domains) return 0;
    for (uint64_t i = own_slot(domain);; i = (i + 1) & g_own_mask) {
        uint64_t slot = atomic_load_explicit(&g_own_domains[i], memory_order_relaxed);
        if (slot == domain) return 1;
        if (!slot) return 0;
    }
}

/* Whether domain is one of the own domains: one compare when there is one. */
static inline int own_domain(uint64_t domain)
{
    if (LIKELY(domain != atomic_load_explicit(&g_own_first, memory_order_relaxed))
        && LIKELY(!atomic_load_explicit(&g_own_many, memory_order_relaxed)))
        return 0;
    return own_domain_slow(domain);
}

static inline uint32_t task_depth_now(tbuf *t)
{
    uint32_t epoch = atomic_load_explicit(&g_task_epoch, memory_order_relaxed);
    if (UNLIKELY(t->task_epoch != epoch)) return task_stack_restart(t, epoch);
    return t->task_depth;
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

#pragma GCC visibility pop

#endif
