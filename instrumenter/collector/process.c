/*
 * The process's life: load, fork, exit, fatal signals.  See process.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "process.h"
#include "common.h"
#include "counters.h"
#include "itt_binding.h"
#include "sampler.h"
#include "tasks.h"
#include "trace_limit.h"
#include "writer.h"

static void fork_prepare(void) { pthread_mutex_lock(&g_mutex); }
static void fork_parent(void) { pthread_mutex_unlock(&g_mutex); }

/* The child: a new file of its own, none of the parent's buffered data. */
static void fork_child(void)
{
    identity_fork_child();
    g_header_flags = ((atomic_load(&g_state) & ST_PAUSED) ? F_START_PAUSED : 0) | (g_tsc ? F_TSC : 0);
    trace_limit_fork_child(); /* the child's file starts under the limit again */
    paused_begins_fork_child();
    writer_fork_child(); /* releases g_mutex */
}

static void at_exit(void) { atomic_store(&g_exiting, 1); note_paused_begins(); flush_all(); report_losses(); sampler_finish(); /* sampler hook */ }

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
        writer_flush_in_signal();
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

__attribute__((constructor)) static void collector_load(void)
{
    identity_load();
    g_header_flags = g_tsc ? F_TSC : 0;
    const char *paused = getenv("AUTOITT_START_PAUSED");
    if (paused && paused[0] && strcmp(paused, "0") != 0) {
        atomic_store(&g_state, ST_PAUSED);
        g_header_flags |= F_START_PAUSED;
    }
    trace_limit_load(); /* registers the writer's drain: before anything is written */
    writer_load(); /* the folder, the file id (once g_pid is known), the room for descriptors, the thread key */
    tasks_load(); /* the own domains' table, before any thread records */
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
