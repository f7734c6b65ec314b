/*
 * The sampler's native stack walk (unwind.c), for sampler.c's signal handler.
 *
 * An x86-64 .eh_frame unwinder that starts from the registers a signal handler gets in its
 * ucontext, for use inside that handler:
 *
 *  - the object containing a pc is found with glibc's _dl_find_object (glibc 2.35+; lock-free
 *    and async-signal-safe by design: it exists for unwinders), which gives the object's
 *    PT_GNU_EH_FRAME (.eh_frame_hdr) segment; its sorted table finds the FDE by binary search;
 *  - the CIE and FDE call-frame programs are run up to the pc (DW_CFA_*, with a small DWARF
 *    expression evaluator for DW_CFA_*expression: stack realignment and PLT entries use them);
 *  - only what walking needs is tracked: the CFA, the return address and rbp (for a caller
 *    frame every other register is unknown; the interrupted frame has all of them);
 *  - every memory read of the walk (saved registers, DW_OP_deref) is bounds-checked against
 *    [rsp, top of the interrupted thread's own stack) (bounds the thread gave itself, hooks.c),
 *    so a wrong rule or a garbage register ends the walk instead of faulting;
 *  - per thread, a cache maps a pc to its rule when the rule is the common simple kind (CFA =
 *    rsp|rbp + k, return address and rbp saved at CFA-relative slots), and another the FDEs of
 *    the functions it unwound (a cold search of libtorch_cpu.so's table costs 2-4 us in a VM);
 *    both are emptied after a library is unloaded (uw_generation, hooks.c's dlclose).
 *
 * Code without unwind information (JIT code: oneDNN's kernels, or anything _dl_find_object does
 * not know) ends a walk.  Then the walk looks for a way back into known code: it scans the
 * stack upwards from that frame for a word that is a return address into a loaded object (inside
 * a function an FDE covers, right after a call instruction) and resumes the
 * walk there as if that frame had just been returned to (rsp = the word's address + 8).  Such
 * a restart is a heuristic (a stale return address left in the JIT frame's stack space would
 * give wrong outer frames); samples that used it are flagged.
 *
 * libgcc's _Unwind_Backtrace was the other candidate: it must unwind through the handler and
 * the kernel's signal frame first, and it stops for good at the first frame without FDE.
 *
 * Signal context: uw_backtrace and uw_find_fde run in the sampling signal's handler.  They must never
 * allocate, lock, call the dynamic loader (but _dl_find_object) or read memory outside the bounds given
 * (the interrupted thread's own stack) and the .eh_frame_hdr/.eh_frame of loaded objects; a walk
 * counts itself in uw_readers so that hooks.c's dlclose waits for it, and skips when uw_closing is set
 * (hooks.h).  The per-thread caches belong to the sampled thread's state: only its own handler uses them.
 */
#ifndef AUTOITT_UNWIND_H
#define AUTOITT_UNWIND_H

#include <stdatomic.h>
#include <stdint.h>
#include <ucontext.h>

#define UW_CACHE 4096          /* per thread, direct mapped */

/* glibc's struct dl_find_object (2.35), looked up with dlsym so the library loads on older glibc */
typedef struct uw_dlfo {
    unsigned long long flags;
    void *map_start;
    void *map_end;
    void *link_map;
    void *eh_frame;
    unsigned long long reserved[7];
} uw_dlfo;

typedef struct uw_cache_entry {
    uintptr_t pc;              /* the lookup address (pc, or pc - 1 for a return address); 0: empty */
    int32_t cfa_off;
    int32_t ra_off;            /* return address at CFA + ra_off */
    int32_t rbp_off;           /* rbp saved at CFA + rbp_off, when rbp_saved */
    uint8_t cfa_reg;           /* UW_RSP or UW_RBP */
    uint8_t rbp_saved;
    uint8_t pad[2];
} uw_cache_entry;

typedef struct uw_bounds { uintptr_t lo, hi; } uw_bounds;  /* readable stack: [lo, hi) */

typedef struct uw_cie {
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    uint8_t signal;            /* 'S': a signal trampoline's frame */
    uint8_t has_z;
    const uint8_t *insns, *end;
} uw_cie;

/* The functions a thread unwound, with their FDE found and CIE parsed, by 64-byte piece of code
   (direct mapped): a hot function is not searched for again (a cold search of libtorch_cpu.so's
   2.7 MB table costs 2-4 us in a VM, mostly TLB and cache misses). */
#define UW_FDE_CACHE 1024
typedef struct uw_fde_entry {
    uintptr_t begin, end;      /* the function's [begin, end); end 0: empty */
    const uint8_t *insns, *insns_end;
    uw_cie cie;
} uw_fde_entry;
typedef struct uw_thread_cache {
    uw_cache_entry rules[UW_CACHE];
    uw_fde_entry fdes[UW_FDE_CACHE];
} uw_thread_cache;

#pragma GCC visibility push(hidden)

/* glibc's _dl_find_object, looked up at sampler_start (NULL before glibc 2.35: the interrupted instruction only) */
extern int (*uw_find_object)(void *pc, uw_dlfo *result);
extern _Atomic long uw_readers;                /* handlers in a native walk (hooks.c's dlclose waits for 0) */

/* The FDE covering pc in the object found by _dl_find_object, its CIE parsed. */
const uint8_t *uw_find_fde(uintptr_t pc, uw_cie *cie, uintptr_t *pc_begin, const uint8_t **insns,
                           const uint8_t **insns_end, uintptr_t *pc_end);
/* Walks the interrupted thread's stack: out[0] is the interrupted pc, out[i > 0] return addresses.
 * Returns the number of addresses; *flags gets UWF_* (format.h). */
int uw_backtrace(const ucontext_t *uc, const uw_bounds *b, uw_thread_cache *tc, uint64_t *out, int max, uint32_t *flags);

#pragma GCC visibility pop

#endif
