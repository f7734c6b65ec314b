/*
 * The task stack's upkeep and the own domains.  See tasks.h.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tasks.h"
#include "writer.h"

_Atomic uint64_t g_own_first;
_Atomic int g_own_many;
_Atomic uint64_t *g_own_domains;
uint64_t g_own_mask;
_Atomic uint64_t g_own_current, g_own_current_domain;

static char **g_own_names;                  /* AUTOITT_OWN_DOMAINS, split */
static int g_own_names_n;
static uint64_t g_own_count;                /* objects in the set (g_mutex) */

void tasks_load(void)
{
    const char *own = getenv("AUTOITT_OWN_DOMAINS");
    if (!own || !own[0]) own = "autoitt.train";
    int names = 1;
    for (const char *p = own; *p; p++) names += *p == ',';
    uint64_t slots = 2;
    while (slots < 2 * (uint64_t)names) slots *= 2;
    char *copy = strdup(own);
    g_own_names = calloc((size_t)names, sizeof *g_own_names);
    g_own_domains = calloc(slots, sizeof *g_own_domains);
    if (!copy || !g_own_names || !g_own_domains) {
        fprintf(stderr, "autoitt collector: no memory for the %d own domain(s) of AUTOITT_OWN_DOMAINS: steps get "
                "no counters and samples no step\n", names);
        free(copy);
        free(g_own_names);
        free((void *)g_own_domains);
        g_own_names = NULL;
        g_own_domains = NULL;
        return;
    }
    int n = 0;
    for (char *p = copy; *p;) { /* empty names are skipped */
        size_t len = strcspn(p, ",");
        int last = p[len] == 0;
        p[len] = 0;
        if (len > 0) g_own_names[n++] = p;
        if (last) break;
        p += len + 1;
    }
    g_own_names_n = n;
    g_own_mask = slots - 1;
}

__attribute__((noinline, cold)) uint32_t task_stack_restart(tbuf *t, uint32_t epoch)
{
    t->task_epoch = epoch;
    t->task_depth = 0;
    return 0;
}

/* The thread's innermost open own task is now the process's current one (begins and ends of own
   tasks only: rare, kept out of the hot path's code). */
__attribute__((noinline, cold)) void own_task_changed(tbuf *t)
{
    uint64_t current = 0, domain = 0;
    uint32_t d = t->task_depth;
    for (uint32_t i = d < TASK_STACK ? d : TASK_STACK; i-- > 0;)
        if (own_domain_slow(t->tasks[i].domain)) { current = t->tasks[i].name; domain = t->tasks[i].domain; break; }
    atomic_store_explicit(&g_own_current_domain, domain, memory_order_relaxed);
    atomic_store_explicit(&g_own_current, current, memory_order_relaxed);
}

void forget_open_tasks(void)
{
    atomic_fetch_add(&g_task_epoch, 1);
    atomic_store(&g_own_current, 0);
}

void note_own_domain(const void *domain, const char *name)
{
    uint64_t d = (uint64_t)(uintptr_t)domain;
    for (int i = 0; i < g_own_names_n; i++) {
        if (strcmp(name, g_own_names[i]) != 0) continue;
        if (!d || own_domain_slow(d)) return;
        if (g_own_count >= (g_own_mask + 1) / 2) { /* full: see tasks.h; never silent */
            static int said;
            if (!said) {
                said = 1;
                char note[400];
                snprintf(note, sizeof note, "the collector's set of own domains (%llu) is full: the tasks of domain "
                         "%.200s get no counters and are not the steps of samples",
                         (unsigned long long)g_own_count, name);
                register_name_locked(K_NOTE, NULL, note);
            }
            return;
        }
        uint64_t k = own_slot(d);
        while (atomic_load_explicit(&g_own_domains[k], memory_order_relaxed)) k = (k + 1) & g_own_mask;
        atomic_store(&g_own_domains[k], d); /* writers hold g_mutex: the slot is ours */
        if (g_own_count++ == 0) atomic_store(&g_own_first, d);
        else atomic_store(&g_own_many, 1);
        return;
    }
}
