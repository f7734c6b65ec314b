/*
 * The process's life (process.c): load (the library's constructor reads the variables and sets every
 * unit up, before any thread records), fork (a child gets a file of its own, none of the parent's
 * buffered data), exit (atexit, the end of Python's finalization, the library's destructor: every
 * buffer written) and fatal signals (what the threads buffered is written first).  It is the top
 * floor with itt_binding.c: it calls every unit's load and fork parts, and none calls it.  The
 * process's identity (pid, parent, rank, start clocks) is common.c's.
 *
 * Signal context:
 *  - flush_on_fatal_signal is a signal handler for SIGTERM, SIGHUP, SIGQUIT, SIGXCPU, SIGSEGV, SIGBUS,
 *    SIGFPE, SIGILL, SIGABRT, installed only where the program left the default action.  It is best
 *    effort and async-signal-safe: write() only, try-locks (an interrupted writer is skipped rather
 *    than waited for), no allocation, no stdio (writer_flush_in_signal, sampler_fatal), then the
 *    signal's default action: the process ends exactly as it would without us.  One thread writes; a
 *    fatal signal that reaches another thread meanwhile waits for it, bounded (5 s).
 *  - fork_child runs in a forked child of a possibly multi-threaded parent: only async-signal-safe work
 *    until the locks it re-initialises are fresh (no allocation, no stdio).
 * Nothing else here runs in a signal handler.
 */
#ifndef AUTOITT_PROCESS_H
#define AUTOITT_PROCESS_H

/* Nothing: no unit calls the process's life (it runs from the constructor, destructor, atexit, pthread_atfork
   and its own signal handler). */

#endif
