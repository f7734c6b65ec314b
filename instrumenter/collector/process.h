/*
 * The process's life (process.c): load (the library's constructor reads the variables and sets every
 * unit up, before any thread records), fork (a child gets a file of its own, none of the parent's
 * buffered data), exit (atexit, the end of Python's finalization, the library's destructor: every
 * buffer written), fatal signals (what the threads buffered is written first), and the process's
 * identity in its files (pid, parent, rank, start clocks).
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

#include <stdint.h>

#pragma GCC visibility push(hidden)

extern uint32_t g_pid, g_ppid;
extern uint64_t g_start_mono, g_start_real; /* CLOCK_MONOTONIC and CLOCK_REALTIME at load (or fork) */
extern uint64_t g_start_ticks;              /* the record clock then */
extern uint32_t g_header_flags;             /* the trace file's header flags (F_START_PAUSED, F_TSC) */
extern uint32_t g_rank_plus_one;            /* the rank a launcher gave this process + 1; 0: none */
extern int g_forked;                        /* this process is a forked child */

/* A variable holding a number below 2^32 - 1 (digits only: "", "-1", " 1" are not numbers): 1 and *out. */
int env_number(const char *variable, unsigned long *out);

#pragma GCC visibility pop

#endif
