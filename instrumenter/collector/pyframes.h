/*
 * The sampler's Python frames (pyframes.c): CPython internals, read from a signal handler.
 * Used by sampler.c; see sampler.h's signal-handler audit.
 *
 * Signal context: pyframes_walk runs in the sampling signal's handler (see pyframes.c's "Safety of a
 * walk inside a signal handler"): no lock, no allocation (code ids and their names go to a table and an
 * arena preallocated by pyframes_init), memory that may be freed meanwhile read only through checked
 * copies (process_vm_readv, or page probes).  pyframes_code_next/pyframes_code_get are also read by
 * sampler_fatal in signal context.  pyframes_init (dlsym, allocation) and pyframes_fork_child never run
 * in a handler.
 */
#ifndef AUTOITT_PYFRAMES_H
#define AUTOITT_PYFRAMES_H

#include <stddef.h>
#include <stdint.h>

#include "format.h" /* PYF_* (what pyframes_init found, in the samples' info record) and the walk flags PYW_* */

/* Looks up the interpreter (dlsym: the collector is loaded into non-Python processes too).
 * Returns PYF_OK when Python frames can be walked, PYF_NONE when this is no Python process, and
 * PYF_UNSUPPORTED, with why in reason, for a Python other than the one built for.  Also gives
 * the running version (Py_Version, 0 if unknown) and the address and size of
 * _PyEval_EvalFrameDefault (0 if unknown). */
int pyframes_init(char *reason, size_t reason_size, uint32_t *running_version, uint64_t *eval_start,
                  uint64_t *eval_size);

/* Walk flags (format.h): PYW_CUT, more frames than max: the innermost max - S_PY_OUTER kept, then the outermost
 * S_PY_OUTER (the middle cut); PYW_TRUNCATED, the outermost frame not reached within S_PY_WALK_LIMIT (or max, where
 * max <= S_PY_OUTER): the innermost max kept; PYW_INVALID, stopped at a frame that did not look valid;
 * PYW_UNKNOWN_CODE, a frame's code object could not be given an id (0 recorded). */

/* The calling thread's Python frames, innermost first, as
 *   code_id << 32 | (lasti + 1) << 1 | is_entry
 * (lasti: the index, in code units, of the frame's last instruction; -1 before the first).
 * Async-signal-safe (no locks, no allocation): meant for the sampling signal's handler. */
int pyframes_walk(uint64_t *out, int max, uint32_t *flags);

/* The main interpreter's Python threads, at most max: their native thread ids and thread states, read without
 * the GIL through checked copies (a thread may come or go meanwhile: a state is only a handle for
 * pyframes_walk_other).  Not for signal context; returns how many. */
int pyframes_threads(uint32_t *tids, uintptr_t *states, int max);

/* Another thread's Python frames, as pyframes_walk gives them, every frame and code object read through a
 * checked copy: never faults, but consistent only while that thread does not run, which the caller checks
 * (sampler.c's off-CPU samples: its CPU clock did not move during the walk).  Not for signal context. */
int pyframes_walk_other(uintptr_t state, uint64_t *out, int max, uint32_t *flags);

/* A code object seen by pyframes_walk, by id (1, 2, ... in order of first sight). */
typedef struct pyframes_code {
    int32_t firstlineno;
    uint32_t filename_len, qualname_len, linetable_len;
    const char *filename, *qualname;         /* UTF-8, not terminated */
    const unsigned char *linetable;          /* co_linetable's bytes */
} pyframes_code;

#define PYFRAMES_MAX_CODES (1u << 16) /* ids go from 1 to this */

/* The next id to be given (ids below it have been given, maybe not yet filled in). */
uint32_t pyframes_code_next(void);

/* 1 and *out when code id is filled in; 0 while its first walk is still copying it. */
int pyframes_code_get(uint32_t id, pyframes_code *out);

/* In a forked child, before any walk: forgets what threads that did not survive the fork left half done. */
void pyframes_fork_child(void);

#endif
