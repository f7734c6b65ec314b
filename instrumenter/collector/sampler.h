/*
 * CPU-time stack sampling inside the collector (sampler.c).  It uses the writer's record clock,
 * directory, collection state and per-thread buffers (writer.h); the Python frames are in
 * pyframes.c, the native stack walk in unwind.c, the hooks that keep the sampler out of the
 * program's way in hooks.c.  It writes $AUTOITT_TRACE_DIR/samples-<pid>.bin,
 * whose format is documented in one place only: the docstring of
 * instrumenter/builtin/samplefile.py (the reader).  Keep the two in sync.
 *
 * Mechanism (measurements: /work/shared/research/sampling.md and benchmarks/README.md):
 *  - per thread, a perf_event_open software event PERF_COUNT_SW_CPU_CLOCK (an hrtimer on the
 *    thread's CPU time, so a real 1 kHz, where POSIX CPU-time timers fire at most at the kernel
 *    tick, 250/s here), exclude_kernel (allowed with perf_event_paranoid <= 2, no capability
 *    needed: the threads are our own), no mmap ring: the fd is O_ASYNC with F_SETSIG and
 *    F_SETOWN_EX(F_OWNER_TID), so each overflow sends the signal to the sampled thread itself,
 *    and its siginfo's si_fd says which thread state to fill.  The fd lives in the scanner's own
 *    descriptor table (s_own_table: unshare(CLONE_FILES)), which the program cannot see, number or
 *    close, and there too out of the low numbers (writer.c's fd_out_of_the_way: above its soft
 *    limit on open files where the hard limit allows, else in the top of a large limit), so that
 *    si_fd tells our events from any descriptor of the program's.  Where unshare is refused
 *    (Docker's default seccomp profile, which refuses perf_event_open too), the scanner opens in
 *    the process's table, each descriptor taking the lowest free number for a moment before it
 *    is moved (where perf is refused too, as there, timers take no descriptor, and the scanner opens
 *    nothing of a thread's: a sampled thread says its own name, an unready one's CPU time comes from
 *    its CPU-time clock);
 *  - per-thread POSIX timers on the thread's CPU-time clock (SIGEV_THREAD_ID), at most the kernel
 *    tick's rate, each sample weighted by the periods it stands for (1 + the timer's overrun),
 *    where perf_event_open is refused (perf_event_paranoid 3, a container's seccomp profile) or
 *    where the limit on open files is too small to keep our descriptors out of the program's way;
 *    the reason is recorded.  Their si_value carries S_TIMER_MAGIC, so a timer of the program's on
 *    the same signal is told apart;
 *  - the signal is SIGURG unless the program already handles it (then SIGPROF, then real-time
 *    signals), or AUTOITT_SAMPLE_SIGNAL.  From then on its handler is ours for good: hooks.c's
 *    sigaction/signal keep what the program installs as its chained action, which our handler
 *    runs for every signal of that number that is not a sample (a kill, a socket's SIGURG), so the
 *    program sees its own handler called exactly when it would be.  A replacement made behind
 *    those hooks is found by the scanner, kept as the chained action, and ours put back (said in a
 *    reason record).  SA_RESTART; with perf the signal only ever interrupts a thread running in user
 *    mode, so sleeps and blocking reads see no EINTR from it (POSIX CPU-time timers also count system
 *    time and may interrupt a system call: calls the kernel never restarts, such as epoll_wait, can
 *    then return EINTR, which is why perf is preferred);
 *  - SA_ONSTACK, and only threads that have an alternate signal stack are sampled: the signal's
 *    frame and our handler never touch the interrupted stack, which is not always a stack
 *    (oneDNN's GEMM kernels point rsp at a heap buffer).  A thread gets one as it starts (hooks.c's
 *    pthread_create), at its first ITT call (writer.c's attach_thread), or is the one that started sampling;
 *    others are counted and named in a reason record, never sampled;
 *  - a scanner thread ("autoitt-sampler"), started at the first ITT call (__itt_api_init), and
 *    in each forked child by the fork handler, lists /proc/self/task every 50 ms (20 ms in a
 *    forked child), and at once when a thread the hooks see start wakes it: it opens an event for
 *    each new ready thread (in its own table: threads never open their own there), closes those of threads gone,
 *    links each thread's state to its trace buffer (for task attribution), drains the per-thread
 *    sample rings into the file, patches the hooks into newly loaded objects and writes the
 *    memory map when it changed.  Threads that start and end between two scans are not sampled.
 *
 * The signal handler fills one slot of the thread's preallocated ring, or counts a drop when the
 * ring is full: the record clock's time (now_ticks(), as the trace), the collection state, the
 * thread's innermost open ITT task and innermost open task of an own domain (autoitt's markers':
 * AUTOITT_OWN_DOMAINS, default "autoitt.train"; from the task stack its trace buffer keeps, see
 * tasks.h), else the process's current own task flagged inherited, the native stack (unwind.c,
 * from the ucontext) and the Python frames (pyframes.c).
 *
 * Signal-handler audit: everything s_handler can reach, and why each is safe in a signal handler
 * that may interrupt any instruction of any sampled thread (malloc, the loader, a lock holder,
 * JIT code with rsp anywhere):
 *  - where it runs: our altstack (SA_ONSTACK; a sampled thread always has one, 64 KiB with a guard
 *    page below, or the program's own of at least 32 KiB); the handler needs under 8 KiB;
 *  - s_handler: reads siginfo; atomic loads of s_threads/s_by_fd (static arrays; sthread records are
 *    mmap'ed once and never unmapped, only reused a second after their thread ended); errno saved
 *    and restored.  Anything not from our own events goes to h_forward.  Where the scanner shares the
 *    program's descriptor table, a thread's first sample also asks its own name (prctl PR_GET_NAME through
 *    syscall(): a system call writing 16 bytes into its own sthread) and publishes it with a release store;
 *    the scanner writes it at its next drain;
 *  - h_forward (hooks.c): reads the chained action (a static double buffer: sigaction() never waits),
 *    pthread_sigmask and sigaction and raise (async-signal-safe by POSIX), then the program's handler,
 *    which the kernel would have run in this same context;
 *  - s_take: now_ticks (rdtsc, or clock_gettime through the vDSO); relaxed atomics; the thread's trace
 *    buffer (tbufs are never freed, only reused; the scanner links a thread to its own), read only
 *    when it is this thread's (tid and pause epoch checked); the own-domain table (allocated at load, never moved or freed: tasks.h); writes to
 *    the thread's own ring slot.  No lock, no allocation, no __thread variable (in a dlopen'ed
 *    library its first access from a thread may allocate): the thread state comes from si_fd or
 *    si_value;
 *  - the native walk (unwind.c): _dl_find_object (glibc 2.35+, documented async-signal-safe) and
 *    reads of the .eh_frame_hdr/.eh_frame it points to.  No object can be unloaded during a walk:
 *    hooks.c's dlclose waits until uw_readers is 0, and handlers skip the walk while a dlclose runs
 *    (uw_closing; the reader is flagged SF_UNLOADING); each close bumps uw_generation, and a thread's
 *    unwind caches (which hold pointers into .eh_frame) are emptied at its next sample after a
 *    change.  Stack words are read only within [rsp, top of the thread's own stack) (bounds the
 *    thread gave itself with pthread_getattr_np; an rsp outside them gives the interrupted
 *    instruction only, SF_NO_STACK_MAP), code bytes (the JIT restart's call check) only inside a
 *    function that a loaded object's FDE covers.  DWARF expressions are evaluated on a bounded
 *    stack; a wrong rule ends the walk, never reads outside those bounds.  No copy of
 *    /proc/self/maps is used (it could be seconds old);
 *  - the Python walk (pyframes.c): PyGILState_GetThisThreadState (a pthread_getspecific: a read of
 *    the thread's own key array, no lock) and _Py_IsFinalizing (a load); frames in the thread's own
 *    data-stack chunks are read directly, any other frame through a checked copy; the innermost
 *    frame's code object (the one frame whose reference may already be dropped) and every string
 *    and line table copied at a code object's first sight through checked copies
 *    (process_vm_readv, or rt_sigprocmask page probes where that is refused): system calls that
 *    fail instead of faulting.  Code ids: a lock-free table in preallocated memory;
 *  - not reachable: malloc/free, stdio, locks, dl_iterate_phdr, the dynamic loader (the library is
 *    linked with -z now (setup.py): no lazy binding inside the handler), /proc reads.
 * Known residual hazards: a dlclose through a path the hooks cannot see (a raw syscall-level unmap,
 * a dlsym'ed dlclose) concurrent with a walk of that library's frames; a foreign altstack smaller
 * than our handler's needs installed by the program after ours (we keep ours only if it is at
 * least 32 KiB when the thread becomes ready).  Outside the handler: lazy binding in a program's
 * library, resolving a slot at the moment we patch it, can write over the hook (threads created
 * through that slot are then not sampled); s_pick_signal and catch_fatal_signals read a handler
 * set with SA_SIGINFO as taken even when it is SIG_DFL (a signal is passed over, nothing more).
 *
 * The fatal-signal path (sampler_fatal, from process.c's handler for SIGTERM, SIGSEGV, ...) is
 * best effort: it try-locks s_mutex (a single compare-and-swap in glibc: it never waits; when the
 * scanner holds it, nothing is written), then writes with write() from a static buffer and reads
 * /proc/self/maps from the kept descriptor (fstat checks it is still ours, pread), else with
 * open/read, all async-signal-safe system calls.
 *
 * Writing: the scanner thread gives stacks ids (each distinct stack is written once) and writes
 * batches of fixed-size sample entries.  At a pause or detach the rings are drained at once; at
 * exit (atexit, the end of Python's finalization, the library's destructor) the events are
 * closed (by the scanner, whose table holds them) and what is left written, with the memory map
 * and the counts; on a fatal signal the same is done best effort without allocating (samples
 * written with their stacks inline).  The sample file and /proc/self/maps (kept open, read again
 * from its start) are opened before the scanner takes its own table, so the same numbers serve
 * every thread.  A forked child closes its copies of the parent's events (none where the parent's
 * scanner had its own table, which a fork does not copy) and starts its own scanner and
 * samples-<childpid>.bin (its first scan 10 ms after the fork, so a fork+exec child makes
 * nothing); it usually ends with _exit, which flushes nothing: its last 20 ms are lost.  The
 * scanner's period is a trade-off: each wakeup costs the program's threads a little (cache, and
 * in a VM, timer exits), and threads that live less than one period are not sampled.
 *
 * Cost (benchmarks/README.md): the handler takes 4-7 us a sample in a PyTorch loop (most of it
 * the native walk's cache misses); in this VM the timer interrupt and the signal around it cost
 * the sampled thread about 25 us more, which is most of the overhead at 1 kHz.
 *
 * Controls (read at load): AUTOITT_SAMPLE_HZ (default 1000, 0: off), AUTOITT_SAMPLE_TIMER_HZ (the rate
 * where perf is refused and timers take over; default: AUTOITT_SAMPLE_HZ's), AUTOITT_OWN_DOMAINS (the own
 * domains, comma-separated; default autoitt.train), AUTOITT_SAMPLE_SIGNAL (a signal number),
 * AUTOITT_SAMPLE_MECHANISM (perf|timer: force one, for comparisons), AUTOITT_SAMPLE_SHARED_FDS=1
 * (the scanner keeps the process's descriptor table, as where unshare is refused: for tests).
 *
 * Signal context, in short (the audit above is the full list): s_handler and everything it reaches
 * (s_take, h_forward, uw_backtrace, pyframes_walk, own_domain_slow) and sampler_fatal.  They must
 * never allocate, lock (sampler_fatal only try-locks), use stdio, touch a __thread variable, call
 * the dynamic loader, or follow a pointer that may be stale (sthreads and tbufs are never freed).
 */
#ifndef AUTOITT_SAMPLER_H
#define AUTOITT_SAMPLER_H

#include <signal.h>

#pragma GCC visibility push(hidden)

/* collector_load: the variables; registers what the hooks and the writer call up here (hooks.h's
   g_hooks_above, writer.h's g_writer_above.thread_attached). */
void sampler_load(void);
/* The first ITT call (__itt_api_init), or autoitt_start_sampling: starts sampling this process, once. */
void sampler_start(void);
/* A pause or detach (and an exec, hooks.c through g_hooks_above): what the rings hold goes to the file now. */
void sampler_drain(void);
/* A normal exit: the events closed, the rest written with the map and the counts. */
void sampler_finish(void);
/* A fatal signal (process.c's flush_on_fatal_signal): best effort, async-signal-safe. */
void sampler_fatal(void);
/* A thread's first ITT event (writer.c's attach_thread, through g_writer_above): it becomes ready to be sampled. */
void sampler_thread_attached(void);
/* A thread the hooks saw start (hooks.c's h_thread_main, on the thread, before its start routine; g_hooks_above). */
void sampler_thread_started(void);
/* A dlclose is about to run (hooks.c, through g_hooks_above): the map goes to the file first. */
void sampler_before_unload(void);
/* The sampling signal's handler (hooks.c tells its own handler from the program's with it: g_hooks_above). */
void s_handler(int sig, siginfo_t *si, void *ucv);

#pragma GCC visibility pop

#endif
