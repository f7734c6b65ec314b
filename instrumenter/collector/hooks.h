/*
 * What the sampler must know before the program does it (hooks.c): the sampler's hooks on thread
 * creation, signal handlers, library unloading and exec.  See sampler.h's "Signal-handler audit" for
 * why each piece exists.
 *
 * How: when sampling starts, and when the scanner sees that objects were loaded since, the GOT slots
 * (R_X86_64_JUMP_SLOT and GLOB_DAT relocations against an undefined symbol) of every loaded object
 * but libc, the dynamic loader, the vDSO and this library are pointed at the wrappers below for:
 *  - pthread_create: the new thread first gives itself an alternate signal stack and says it is
 *    ready (h_thread_ready), then runs its start routine.  Only ready threads are ever sampled:
 *    the sampling signal is SA_ONSTACK, so its frame and our handler never touch the interrupted
 *    stack, which is not always a stack: oneDNN's x64 f32 GEMM kernels point rsp at a heap buffer
 *    (uxlfoundation/oneDNN#4845), and a signal frame written there corrupts the heap (a Keras fit
 *    sampled from its start aborted 8 times in 8 that way, and 0 in 8 with the altstack; see
 *    benchmarks/README.md).  Altstacks are per thread and not inherited.
 *  - sigaction, signal: the sampling signal's handler stays ours for good.  What the program
 *    installs for that signal is kept as its chained action: our handler takes the samples (only
 *    signals from our own events: si_fd of one of ours, or si_value of one of our timers) and
 *    passes every other signal of that number to the program's action, as if it were installed.
 *    sigaction() and signal() report the program's action back; Python's signal module keeps
 *    its own table.  Lightning's teardown that resets every handler, or a script's own SIGURG
 *    handler, thus changes nothing for sampling, and the program's handler never sees a sample.
 *  - not dlopen: the loader takes the caller's address for the library search path (RUNPATH) and the
 *    namespace, so a wrapper would change what the program loads.  New objects are found by the
 *    scanner instead (the loader's load count, every scan) and patched then: a thread that a library
 *    starts within 50 ms of being loaded is not sampled (it is counted, see the reason record).
 *  - execve, execv, execvp, execvpe, fexecve: a program that replaces itself (a restart wrapper,
 *    `os.execv`) ends its image without exit(), so nothing at exit runs: what the threads buffered
 *    and what the sampler holds is written first (h_before_exec), else every step recorded since the
 *    last pause would be lost with the image.  Never in a child between fork and exec
 *    (subprocess), where only async-signal-safe calls are allowed and nothing of it was recorded.
 *    These are patched without sampling too (h_install_exec_only).
 *  - dlclose: the unwinder reads libraries' .eh_frame from inside the handler.  A close waits
 *    until no handler is in a native walk (uw_readers), and while it runs handlers skip the
 *    walk; each close bumps uw_generation, which empties every thread's unwind caches at its
 *    next sample: no pointer into an unloaded library is ever followed.
 *
 * Limits: a call that does not go through a patched slot (a raw syscall, a dlsym'ed pointer, code
 * in a library loaded and run before its dlopen returns) is not seen.  The scanner covers that
 * after the fact: it re-arms a handler replaced behind our back (keeping the replacement as the
 * program's action, and saying so), and bumps uw_generation when the loader's unload count moved.
 * Threads created that way are never sampled unless they make an ITT call (writer.c's
 * attach_thread makes them ready).
 *
 * Signal context:
 *  - h_forward runs in the sampling signal's handler (s_handler) for every signal of that number that
 *    is not a sample: it reads the chained action from a static ring of write-once slots (a
 *    sigaction() from a handler never waits), then calls pthread_sigmask, sigaction and raise
 *    (async-signal-safe by POSIX) and the program's own handler, which the kernel would have run in
 *    this same context.  It must never lock or allocate.
 *  - h_still_ready (below) is read by the handler: atomic loads of a static table.
 *  - h_sigaction and h_signal may be called from the program's signal handlers: they only copy into
 *    the ring and never wait.
 *  - a handler in a native walk counts itself in uw_readers; h_guarded_dlclose waits for none to be
 *    left and sets uw_closing meanwhile, so no handler reads a library's .eh_frame while it unloads;
 *    uw_generation tells every thread to empty its unwind caches.
 *  - the exec wrappers run between fork and exec in a fork()ed child (subprocess): h_before_exec does
 *    nothing there unless that child recorded; it never runs in a vfork()ed child (a pid check).
 * The rest (h_thread_ready allocates an altstack; h_patch_all takes the loader's lock and h_patch_mutex)
 * never runs in a handler.
 */
#ifndef AUTOITT_HOOKS_H
#define AUTOITT_HOOKS_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define S_MAX_THREADS 4096         /* threads sampled at once (sampler.c's sthreads, the ready slots here) */

typedef struct h_ready {
    _Atomic uint32_t tid;          /* 0: free; H_CLAIMED: being filled in */
    _Atomic int gone;              /* the thread is ending (its altstack given back): kept until its tid is
                                      no longer listed, so that it is not taken for a thread never ready */
    uintptr_t stack_lo, stack_hi;  /* the thread's own stack (pthread_getattr_np) */
} h_ready;

#pragma GCC visibility push(hidden)

/* What the hooks call in the sampler above them (sampler.c), which registers it in sampler_load, its first
 * act: set once at load, before any hook is patched in (h_install, h_install_exec_only: from sampler_start
 * only) or any thread the hooks start runs, and never changed after.  Read in signal context: handler by
 * h_is_ours, which h_sigaction and h_signal call, maybe from the program's handlers; loading a pointer set
 * before any signal (and comparing or calling it) is async-signal-safe.
 *  - handler: the sampling signal's handler (s_handler): an action running it is ours, never the program's;
 *  - thread_started: a thread the hooks saw start, on the thread, before its start routine (h_thread_main);
 *  - before_unload: a dlclose is about to run (the map to the file first);
 *  - drain: an exec is about to replace the image (h_before_exec): what the sampler holds to the file. */
typedef struct hooks_above {
    void (*handler)(int sig, siginfo_t *si, void *ucv);
    void (*thread_started)(void);
    void (*before_unload)(void);
    void (*drain)(void);
} hooks_above;
extern hooks_above g_hooks_above;

/* Ready threads (an altstack installed, their stack's bounds), S_MAX_THREADS slots */
extern h_ready h_ready_threads[];
extern int h_key_ok;                        /* the key making threads ready exists */
extern pthread_mutex_t h_patch_mutex;       /* h_patch_all's (the sampler's fork handlers re-init it) */
extern int (*h_real_sigaction)(int, const struct sigaction *, struct sigaction *);
extern _Atomic int h_owned_signal;          /* the sampling signal once our handler is in place; 0: none */
/* dlclose against the unwinder: see the top of this file. */
extern _Atomic long uw_closing;             /* dlclose calls running */
extern _Atomic uint32_t uw_generation;      /* bumped by each: the unwind caches are emptied */

/* Sampling starts (sampler_start, s_mutex held): the real functions, the calling thread made ready,
 * every object patched.  0: the hooks cannot be set up (nothing is sampled then). */
int h_install(void);
/* No sampling (AUTOITT_SAMPLE_HZ=0): the exec hooks alone, so that an exec still keeps what was recorded. */
void h_install_exec_only(void);
/* Every loaded object not looked at yet gets the hooks (never under s_mutex: it takes the loader's lock). */
void h_patch_all(void);
/* The calling thread gets an alternate signal stack and is listed as ready (allocates: not in a handler). */
void h_thread_ready(void);
/* The ready slot of tid (scanner): a live one, else one of a thread ending (*gone set); -1: never ready. */
int h_ready_slot(uint32_t tid, int *gone);
/* Slots of ended threads whose tid is listed no more are free again (scanner; tids sorted). */
void h_release_ended(const uint32_t *tids, size_t n, int (*cmp)(const void *, const void *));
void h_fork_prepare(void);
void h_fork_parent(void);
void h_fork_child(void);
/* The program's action for the sampling signal, and whether an action is our own handler. */
void h_set_chained(const struct sigaction *act);
int h_is_ours(const struct sigaction *act);
/* From our handler: a signal of the sampling signal's number that is not a sample goes to the program's
   action, as the kernel would have delivered it. */
void h_forward(int sig, siginfo_t *si, void *uc);

/* Whether the thread in slot i is still ready (the handler and the scanner). */
static inline int h_still_ready(int i, uint32_t tid)
{
    return atomic_load_explicit(&h_ready_threads[i].tid, memory_order_relaxed) == tid
           && !atomic_load_explicit(&h_ready_threads[i].gone, memory_order_relaxed);
}

#pragma GCC visibility pop

#endif
