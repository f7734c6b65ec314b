/*
 * The sampler's Python frames: the interrupted thread's CPython frame chain, read from inside
 * the sampling signal's handler (see sampler.c).  Built against the running interpreter's
 * headers, internal ones included (Py_BUILD_CORE), on CPython 3.11 to 3.15, so every struct
 * layout is the build's own; what differs between versions is named once, in the PYF_* macros
 * below (the design note: README "Python versions"):
 *   3.11      tstate->cframe->current_frame; f_code, prev_instr; entry frames flagged is_entry
 *   3.12      the same chain, but a C call into the evaluator pushes a shim frame owned by
 *             FRAME_OWNED_BY_CSTACK (on the C stack) instead of flagging is_entry
 *   3.13      tstate->current_frame; f_executable (a code object, None for the shim), instr_ptr
 *   3.14-15   f_executable is a tagged _PyStackRef; the shim is FRAME_OWNED_BY_INTERPRETER and
 *             every owner from it up is no Python frame
 * A walk turns a shim into the is_entry flag of the Python frame above it, so the reader sees one
 * format.  On 3.13 and later the interpreter also publishes its own offsets (_Py_DebugOffsets, at
 * the start of _PyRuntime, for debuggers and profilers): pyframes_init compares them with the
 * compiled ones and refuses to walk where any differs (a collector built against other headers
 * than the running interpreter's).  A free-threaded build (Py_GIL_DISABLED) is refused too: its
 * frames run thread-local bytecode that this reader does not locate.
 *
 * Nothing here links to libpython: its symbols are looked up with dlsym at init (the collector
 * is also loaded into processes without Python), and only struct layouts and inline helpers of
 * the headers are used.
 *
 * Safety of a walk inside a signal handler:
 *  - the thread state comes from PyGILState_GetThisThreadState (a pthread_getspecific), which
 *    is NULL for threads without Python and before initialization; walks stop once
 *    _Py_IsFinalizing() says finalization began (the states of daemon threads are freed then);
 *  - a frame must lie in one of the thread's data-stack chunks (a popped chunk is unlinked
 *    before it is freed), or be a generator's frame (owned by a live generator while it runs);
 *    its code object must be a PyCode_Type object; the depth is capped;
 *  - frames that are incomplete (before their first instruction) are skipped; shim frames (3.12+)
 *    live on the C stack and are read through a checked copy.
 * Lines are not computed here: a frame is recorded as (code id, last instruction), and each
 * code object's line table is copied once, so the reader computes lines offline.
 *
 * Code ids: a lock-free open-addressing table keyed by the code object's address, filled by
 * whichever handler sees a code object first (a CAS claims a slot; the id is published once the
 * names are copied into a preallocated arena).  Against an address reused by a new code object
 * after the old one was freed, an entry also checks co_firstlineno and the addresses of
 * co_filename, co_qualname and co_linetable; a mismatch gets a new entry.
 */
#define NDEBUG 1
#define Py_BUILD_CORE 1
#define _GNU_SOURCE
#include <Python.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "pyframes.h"

#define PYF_FIRST 0x030B0000 /* 3.11 */
#define PYF_AFTER 0x03100000 /* 3.16: not read (its layout is not known yet) */
#if PY_VERSION_HEX >= PYF_FIRST && PY_VERSION_HEX < PYF_AFTER && !defined(Py_GIL_DISABLED)
#define PYF_BUILT 1
/* the internal headers are not written for -Wextra (3.15's have unused parameters) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_interpframe.h"
#else
#include "internal/pycore_frame.h"
#endif
#if PY_VERSION_HEX >= 0x030D0000
#include "internal/pycore_runtime.h"
#endif
#include "internal/pycore_interp.h" /* the interpreter's list of thread states (off-CPU samples) */
#pragma GCC diagnostic pop
#else
#define PYF_BUILT 0
#endif

#if PYF_BUILT
/* What differs between versions: the thread's innermost frame, a frame's code object and instruction
   pointer (the last instruction run up to 3.12, the one running from 3.13), and what marks an entry. */
#if PY_VERSION_HEX < 0x030D0000
#define PYF_CURRENT(ts) ((ts)->cframe && !((uintptr_t)(ts)->cframe & 7) ? (ts)->cframe->current_frame : NULL)
#define PYF_CODE(f) ((f)->f_code)
#define PYF_INSTR(f) ((f)->prev_instr)
#else
#define PYF_CURRENT(ts) ((ts)->current_frame)
#define PYF_INSTR(f) ((f)->instr_ptr)
#if PY_VERSION_HEX < 0x030E0000
#define PYF_CODE(f) ((PyCodeObject *)(f)->f_executable)
#else
/* a _PyStackRef: the object's address with tag bits in the low two */
#define PYF_CODE(f) ((PyCodeObject *)((f)->f_executable.bits & ~(uintptr_t)3))
#endif
#endif
#if PY_VERSION_HEX < 0x030C0000
#define PYF_IS_SHIM(f) 0
#define PYF_IS_ENTRY(f) ((f)->is_entry)
#elif PY_VERSION_HEX < 0x030E0000
#define PYF_IS_SHIM(f) ((f)->owner == FRAME_OWNED_BY_CSTACK)
#define PYF_IS_ENTRY(f) 0
#else
#define PYF_IS_SHIM(f) ((f)->owner >= FRAME_OWNED_BY_INTERPRETER)
#define PYF_IS_ENTRY(f) 0
#endif
#endif

#define CODE_SLOTS PYFRAMES_MAX_CODES    /* code objects: the table's capacity */
#define ARENA_BYTES (64u << 20)         /* their names and line tables (reserved, touched as used) */
#define NAME_CAP 1024u                  /* bytes of a file name or qualified name kept */
#define LINETABLE_CAP (64u << 10)

typedef struct code_slot {
    _Atomic uintptr_t key;              /* the code object's address; 0: free */
    _Atomic uint32_t id;                /* 0 while being filled in */
    int32_t firstlineno;
    uintptr_t filename, qualname, linetable; /* the addresses checked against reuse */
    uint32_t offset;                    /* of the copied bytes in the arena */
    uint32_t filename_len, qualname_len, linetable_len;
} code_slot;

static int g_status;
static code_slot *g_slots;
static _Atomic uint32_t *g_id_slot;     /* id -> slot index + 1 */
static _Atomic uint32_t g_next_id = 1;
static _Atomic int g_filling;           /* handlers filling a slot in right now */
static unsigned char *g_arena;
static _Atomic size_t g_arena_used;
static _Atomic int g_vm_refused;        /* process_vm_readv refused: checked reads probe pages instead */
static _Atomic pid_t g_pid_now;         /* for process_vm_readv (0: look it up) */

#if PYF_BUILT
static PyThreadState *(*p_this_tstate)(void);
static PyInterpreterState *(*p_main_interp)(void);
static int (*p_is_finalizing)(void);
static PyTypeObject *p_code_type, *p_unicode_type, *p_bytes_type;
#endif

#if PYF_BUILT
/* What the running interpreter lays out otherwise than the compiled headers (NULL: nothing we read).  From
   3.13 the interpreter says itself, in _Py_DebugOffsets at the start of _PyRuntime (a data symbol,
   exported); before 3.13 there is nothing to compare with, and the version check is all. */
static const char *layout_differs(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    const _Py_DebugOffsets *d = dlsym(RTLD_DEFAULT, "_PyRuntime");
    if (!d || memcmp(d->cookie, _Py_Debug_Cookie, sizeof d->cookie) != 0) return "_PyRuntime (no debug offsets' cookie)";
    if ((d->version >> 16) != ((uint64_t)PY_VERSION_HEX >> 16) || d->free_threaded) return "_PyRuntime (another version)";
    if (d->thread_state.current_frame != offsetof(PyThreadState, current_frame)
        || d->thread_state.datastack_chunk != offsetof(PyThreadState, datastack_chunk))
        return "its thread states";
    if (d->interpreter_frame.previous != offsetof(_PyInterpreterFrame, previous)
        || d->interpreter_frame.executable != offsetof(_PyInterpreterFrame, f_executable)
        || d->interpreter_frame.instr_ptr != offsetof(_PyInterpreterFrame, instr_ptr)
        || d->interpreter_frame.owner != offsetof(_PyInterpreterFrame, owner))
        return "its frames";
    if (d->code_object.filename != offsetof(PyCodeObject, co_filename)
        || d->code_object.qualname != offsetof(PyCodeObject, co_qualname)
        || d->code_object.linetable != offsetof(PyCodeObject, co_linetable)
        || d->code_object.firstlineno != offsetof(PyCodeObject, co_firstlineno)
        || d->code_object.co_code_adaptive != offsetof(PyCodeObject, co_code_adaptive))
        return "its code objects";
    if (d->unicode_object.length != offsetof(PyASCIIObject, length) || d->unicode_object.state != offsetof(PyASCIIObject, state)
        || d->unicode_object.asciiobject_size != sizeof(PyASCIIObject))
        return "its strings";
#endif
    return NULL;
}
#endif

int pyframes_init(char *reason, size_t reason_size, uint32_t *running_version, uint64_t *eval_start,
                  uint64_t *eval_size)
{
    reason[0] = 0;
    *running_version = 0;
    *eval_start = *eval_size = 0;
    void *this_tstate = dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
    if (!this_tstate) return g_status = PYF_NONE;
    const unsigned long *version = dlsym(RTLD_DEFAULT, "Py_Version"); /* 3.11+ */
    *running_version = version ? (uint32_t)*version : 0;
    void *eval = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (eval && dladdr1(eval, &info, (void **)&sym, RTLD_DL_SYMENT) && sym) {
        *eval_start = (uint64_t)(uintptr_t)eval;
        *eval_size = sym->st_size;
    }
    char running[32] = "before 3.11";
    if (version) snprintf(running, sizeof running, "%lu.%lu", *version >> 24, (*version >> 16) & 0xff);
#if !PYF_BUILT
    snprintf(reason, reason_size,
             "Python frames are read on CPython 3.11 to 3.15 without free threading; this process runs Python %s%s: "
             "samples have native frames only", running,
#ifdef Py_GIL_DISABLED
             " (free-threaded)"
#else
             ""
#endif
    );
    return g_status = PYF_UNSUPPORTED;
#else
    if (!version || (*version >> 16) != ((unsigned long)PY_VERSION_HEX >> 16)) {
        snprintf(reason, reason_size,
                 "Python frames: autoitt's collector was built for CPython %d.%d but this process runs Python %s "
                 "(install autoitt with the interpreter that runs the script): samples have native frames only",
                 PY_MAJOR_VERSION, PY_MINOR_VERSION, running);
        return g_status = PYF_UNSUPPORTED;
    }
    p_this_tstate = (PyThreadState * (*)(void)) this_tstate;
    *(void **)&p_main_interp = dlsym(RTLD_DEFAULT, "PyInterpreterState_Main"); /* off-CPU samples only */
    /* public from 3.13; the private name before (and gone since) */
    *(void **)&p_is_finalizing = dlsym(RTLD_DEFAULT, PY_VERSION_HEX >= 0x030D0000 ? "Py_IsFinalizing" : "_Py_IsFinalizing");
    p_code_type = dlsym(RTLD_DEFAULT, "PyCode_Type");
    p_unicode_type = dlsym(RTLD_DEFAULT, "PyUnicode_Type");
    p_bytes_type = dlsym(RTLD_DEFAULT, "PyBytes_Type");
    if (!p_code_type || !p_unicode_type || !p_bytes_type || !p_is_finalizing) {
        snprintf(reason, reason_size, "Python frames: the interpreter does not export what they need "
                 "(PyCode_Type, Py_IsFinalizing): samples have native frames only");
        return g_status = PYF_UNSUPPORTED;
    }
    const char *differs = layout_differs();
    if (differs) {
        snprintf(reason, reason_size, "Python frames: the running CPython %s lays out %s otherwise than the headers "
                 "autoitt's collector was built with (reinstall autoitt with this interpreter): samples have native "
                 "frames only", running, differs);
        return g_status = PYF_UNSUPPORTED;
    }
    if (!g_slots) {
        void *slots = mmap(NULL, CODE_SLOTS * sizeof(code_slot), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        void *ids = mmap(NULL, (CODE_SLOTS + 1) * sizeof(uint32_t), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        void *arena = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (slots == MAP_FAILED || ids == MAP_FAILED || arena == MAP_FAILED) {
            snprintf(reason, reason_size, "Python frames: no memory for the code table: samples have native frames only");
            return g_status = PYF_UNSUPPORTED;
        }
        g_slots = slots;
        g_id_slot = ids;
        g_arena = arena;
    }
    return g_status = PYF_OK;
#endif
}

uint32_t pyframes_code_next(void) { return atomic_load(&g_next_id); }

int pyframes_code_get(uint32_t id, pyframes_code *out)
{
    if (!g_id_slot || id == 0 || id > CODE_SLOTS) return 0;
    uint32_t index = atomic_load_explicit(&g_id_slot[id], memory_order_acquire);
    if (index == 0) return 0;
    const code_slot *s = &g_slots[index - 1];
    out->firstlineno = s->firstlineno;
    out->filename_len = s->filename_len;
    out->qualname_len = s->qualname_len;
    out->linetable_len = s->linetable_len;
    out->filename = (const char *)g_arena + s->offset;
    out->qualname = out->filename + s->filename_len;
    out->linetable = (const unsigned char *)out->qualname + s->qualname_len;
    return 1;
}

#if PYF_BUILT

static int probe_read(const void *src, void *dst, size_t n);

/* A str's characters as UTF-8 into out (at most cap bytes, whole characters); its length.  Every byte
   is read through checked copies: the string may belong to a code object being freed. */
static uint32_t copy_str(PyObject *o, unsigned char *out, uint32_t cap)
{
    PyUnicodeObject head;
    if (!o || ((uintptr_t)o & 7) || !probe_read(o, &head, sizeof head) || Py_TYPE(&head) != p_unicode_type) return 0;
    PyASCIIObject *a = (PyASCIIObject *)&head;
    Py_ssize_t len = a->length;
    unsigned kind = a->state.kind;
    const void *where;
    if (a->state.compact && a->state.ascii) where = (PyASCIIObject *)o + 1;
    else if (a->state.compact) where = (PyCompactUnicodeObject *)o + 1;
#if PY_VERSION_HEX < 0x030C0000
    else if (a->state.ready) where = head.data.any;
    else return 0;
#else
    else where = head.data.any; /* 3.12 dropped the not-ready (legacy) strings */
#endif
    if (!where || len < 0 || (kind != 1 && kind != 2 && kind != 4)) return 0;
    if (len > (Py_ssize_t)cap) len = cap; /* a character is at least one byte of out */
    /* in pieces of 256 characters: a small buffer on the signal stack (which may be a program's own
       altstack of 16 KiB, faulthandler's) */
    uint32_t raw[256];
    uint32_t n = 0;
    for (Py_ssize_t done = 0; done < len;) {
        Py_ssize_t piece = len - done < 256 ? len - done : 256;
        if (!probe_read((const char *)where + done * kind, raw, (size_t)piece * kind)) return n;
        for (Py_ssize_t i = 0; i < piece; i++) {
            uint32_t c = kind == 1 ? ((const uint8_t *)raw)[i] : kind == 2 ? ((const uint16_t *)raw)[i] : raw[i];
            unsigned char buf[4];
            uint32_t k;
            if (c < 0x80) { buf[0] = (unsigned char)c; k = 1; }
            else if (c < 0x800) { buf[0] = 0xc0 | (c >> 6); buf[1] = 0x80 | (c & 0x3f); k = 2; }
            else if (c < 0x10000) { buf[0] = 0xe0 | (c >> 12); buf[1] = 0x80 | ((c >> 6) & 0x3f); buf[2] = 0x80 | (c & 0x3f); k = 3; }
            else { buf[0] = 0xf0 | (c >> 18); buf[1] = 0x80 | ((c >> 12) & 0x3f); buf[2] = 0x80 | ((c >> 6) & 0x3f); buf[3] = 0x80 | (c & 0x3f); k = 4; }
            if (n + k > cap) return n;
            memcpy(out + n, buf, k);
            n += k;
        }
        done += piece;
    }
    return n;
}

/* Fills a claimed slot: copies the names and line table, then gives the id (0: no room). */
static uint32_t code_fill(code_slot *s, const PyCodeObject *co, int32_t firstlineno, uintptr_t filename, uintptr_t qualname,
                          uintptr_t linetable)
{
    s->firstlineno = firstlineno;
    s->filename = filename;
    s->qualname = qualname;
    s->linetable = linetable;
    /* the copies: names, then the line table, in one piece of the arena */
    uint32_t lt_len = 0;
    PyObject *lt = co->co_linetable;
    PyBytesObject lt_head;
    if (lt && !((uintptr_t)lt & 7) && probe_read(lt, &lt_head, offsetof(PyBytesObject, ob_sval))
        && Py_TYPE(&lt_head) == p_bytes_type && Py_SIZE(&lt_head) >= 0)
        lt_len = Py_SIZE(&lt_head) > (Py_ssize_t)LINETABLE_CAP ? 0 : (uint32_t)Py_SIZE(&lt_head);
    size_t need = 2 * NAME_CAP + lt_len;
    size_t offset = atomic_fetch_add(&g_arena_used, need);
    if (offset + need > ARENA_BYTES) return 0; /* the slot stays claimed, without id: never matched */
    unsigned char *dst = g_arena + offset;
    s->offset = (uint32_t)offset;
    s->filename_len = copy_str(co->co_filename, dst, NAME_CAP);
    s->qualname_len = copy_str(co->co_qualname, dst + s->filename_len, NAME_CAP);
    if (lt_len && !probe_read(((PyBytesObject *)lt)->ob_sval, dst + s->filename_len + s->qualname_len, lt_len))
        lt_len = 0;
    s->linetable_len = lt_len;
    uint32_t id = atomic_fetch_add(&g_next_id, 1);
    if (id > CODE_SLOTS) return 0;
    atomic_store_explicit(&g_id_slot[id], (uint32_t)((s - g_slots) + 1), memory_order_release);
    atomic_store_explicit(&s->id, id, memory_order_release);
    return id;
}

/* The code object's id; 0 when it cannot have one now (being filled in by another thread, or no room).
   Its fields are read from view (co itself, or a checked copy of it). */
static uint32_t code_id(PyCodeObject *co, const PyCodeObject *view)
{
    uintptr_t key = (uintptr_t)co;
    uintptr_t filename = (uintptr_t)view->co_filename, qualname = (uintptr_t)view->co_qualname;
    uintptr_t linetable = (uintptr_t)view->co_linetable;
    int32_t firstlineno = view->co_firstlineno;
    uint32_t h = (uint32_t)((key >> 4) * 0x9E3779B97F4A7C15ull >> 40);
    for (uint32_t probe = 0; probe < 64; probe++) {
        code_slot *s = &g_slots[(h + probe) & (CODE_SLOTS - 1)];
        uintptr_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == 0) {
            uintptr_t expected = 0;
            atomic_fetch_add(&g_filling, 1);
            if (!atomic_compare_exchange_strong(&s->key, &expected, key)) {
                atomic_fetch_sub(&g_filling, 1);
                if (expected != key) continue;
                return 0; /* another thread claimed it for this code object just now */
            }
            uint32_t id = code_fill(s, view, firstlineno, filename, qualname, linetable);
            atomic_fetch_sub(&g_filling, 1);
            return id;
        }
        if (k != key) continue;
        uint32_t id = atomic_load_explicit(&s->id, memory_order_acquire);
        if (id == 0) return 0;
        if (s->firstlineno == firstlineno && s->filename == filename && s->qualname == qualname
            && s->linetable == linetable)
            return id;
        /* the address of a freed code object, reused: look further */
    }
    return 0;
}

void pyframes_fork_child(void)
{
    atomic_store(&g_pid_now, 0);
    /* a slot another thread was filling when the process forked stays claimed without id for good:
       the child has that thread no more, so free it */
    if (!g_slots || atomic_load(&g_filling) == 0) return;
    for (uint32_t i = 0; i < CODE_SLOTS; i++)
        if (atomic_load(&g_slots[i].key) && !atomic_load(&g_slots[i].id)) atomic_store(&g_slots[i].key, 0);
    atomic_store(&g_filling, 0);
}

/* Checked reads: a copy that fails instead of faulting where src is not mapped.  process_vm_readv on
 * ourselves (one system call, EFAULT or a short count where unmapped); where it is refused (Docker's
 * default seccomp profile refuses it without CAP_SYS_PTRACE before kernel 4.8, ptrace policies), each
 * page is probed with rt_sigprocmask given a bad `how`, which copies 8 bytes from its `set` argument
 * first (EFAULT: unreadable) and then refuses (EINVAL) without changing the mask, and the bytes are
 * copied.  Both are system calls: async-signal-safe, no descriptor. */
static int page_readable(uintptr_t page)
{
    return syscall(SYS_rt_sigprocmask, 0x7fffffff, (void *)page, NULL, (size_t)8) != 0 && errno == EINVAL;
}

static int probe_read(const void *src, void *dst, size_t n)
{
    uintptr_t a = (uintptr_t)src;
    if (n == 0) return 1;
    if (a < 4096 || a >= ((uintptr_t)1 << 47) || n > ((uintptr_t)1 << 47) - a) return 0;
    if (!atomic_load_explicit(&g_vm_refused, memory_order_relaxed)) {
        pid_t pid = atomic_load_explicit(&g_pid_now, memory_order_relaxed);
        if (!pid) atomic_store(&g_pid_now, pid = (pid_t)syscall(SYS_getpid));
        struct iovec local = {dst, n}, remote = {(void *)a, n};
        int saved = errno;
        ssize_t r = syscall(SYS_process_vm_readv, pid, &local, 1, &remote, 1, 0);
        int e = errno;
        errno = saved;
        if (r == (ssize_t)n) return 1;
        if (r >= 0 || (e != EPERM && e != ENOSYS && e != EACCES)) return 0;
        atomic_store(&g_vm_refused, 1);
    }
    int saved = errno;
    int ok = 1;
    for (uintptr_t page = a & ~(uintptr_t)4095; ok && page < a + n; page += 4096) ok = page_readable(page);
    errno = saved;
    if (ok) memcpy(dst, src, n);
    return ok;
}

/* f as it can be read: f itself when it lies in one of the thread's data-stack chunks, else a checked copy
   of it in *copy when it is a generator's frame or a shim (3.12+: on the C stack of a running
   _PyEval_EvalFrameDefault), else NULL.  A frame outside the chunks is probed before it is read: the
   frame the thread is popping can be in a chunk _PyThreadState_PopFrame has just unlinked and unmapped,
   while the current frame still points at it (ceval updates it after the pop).  Reading it directly
   crashed 1 run in 16 on 3.11. */
static const _PyInterpreterFrame *frame_view(PyThreadState *ts, _PyInterpreterFrame *f, _PyInterpreterFrame *copy)
{
    uintptr_t a = (uintptr_t)f;
    if (a < 4096 || (a & 7) || a >= ((uintptr_t)1 << 47)) return NULL;
    if (!ts) return probe_read(f, copy, sizeof *copy) ? copy : NULL; /* another thread's: every frame copied */
    int n = 0;
    for (_PyStackChunk *c = ts->datastack_chunk; c && n < 256; c = c->previous, n++)
        if (a >= (uintptr_t)c && a + sizeof(_PyInterpreterFrame) <= (uintptr_t)c + c->size) return f;
    if (!probe_read(f, copy, sizeof *copy)) return NULL;
    return copy->owner == FRAME_OWNED_BY_GENERATOR || PYF_IS_SHIM(copy) ? copy : NULL;
}

/* A frame past the first max, kept until the walk knows whether it is among the outermost S_PY_OUTER. */
typedef struct outer_frame {
    PyCodeObject *co; /* alive: held by its frame, which the interrupted thread cannot pop meanwhile */
    uint32_t low;     /* (lasti + 1) << 1 | is_entry */
} outer_frame;

/* The walk from frame `current`: of the calling thread (ts, its state), or of another thread (ts NULL: every
   frame and code object read through a checked copy). */
static int walk(PyThreadState *ts, _PyInterpreterFrame *current, uint64_t *out, int max, uint32_t *flags)
{
    /* Past max frames the walk goes on to the outermost, the last S_PY_OUTER in a ring: the stack keeps its
       innermost max - S_PY_OUTER frames and its outermost S_PY_OUTER (PYW_CUT), since the program's own
       frames are the outer ones.  Only S_PY_WALK_LIMIT frames are followed: past them the innermost max are
       kept (PYW_TRUNCATED). */
    int keeps_outer = max > S_PY_OUTER;
    int n = 0, run = 0, first = 1, steps = 0, beyond = 0, reached = 0;
    outer_frame ring[S_PY_OUTER];
    _PyInterpreterFrame frame_copy;
    for (_PyInterpreterFrame *f = current, *next;; f = next) {
        if (!f) { reached = 1; break; }
        if (n == max && (!keeps_outer || n + beyond == S_PY_WALK_LIMIT)) { *flags |= PYW_TRUNCATED; break; }
        /* shims do not count in n: a chain that loops through them must still end */
        if (++steps > 2 * S_PY_WALK_LIMIT + 16) { *flags |= PYW_INVALID; break; }
        const _PyInterpreterFrame *v = frame_view(ts, f, &frame_copy);
        if (!v) { *flags |= PYW_INVALID; break; }
        next = v->previous;
        if (PYF_IS_SHIM(v)) {
            /* the Python frame above it began this C call of the evaluator: 3.11's is_entry */
            if (run && beyond) ring[(beyond - 1) % S_PY_OUTER].low |= 1u;
            else if (run) out[n - 1] |= 1u;
            run = 0;
            continue;
        }
        PyCodeObject *co = PYF_CODE(v);
        if (!co || ((uintptr_t)co & 7)) { *flags |= PYW_INVALID; break; }
        /* Every frame holds a reference to its code object but the innermost one, which may be in
           _PyFrame_Clear: its code object released (maybe freed) before the current frame moves on.  So its
           code object is read through a checked copy; the outer ones are alive. */
        PyCodeObject copy;
        const PyCodeObject *view = co;
        if (first || !ts) {
            if (!probe_read(co, &copy, offsetof(PyCodeObject, co_code_adaptive))) { *flags |= PYW_INVALID; break; }
            view = &copy;
        }
        first = 0;
        if (Py_TYPE(view) != p_code_type) { *flags |= PYW_INVALID; break; }
        /* _PyFrame_IsIncomplete, with the code object's field from view */
        const _Py_CODEUNIT *instr = PYF_INSTR(v);
        if (v->owner != FRAME_OWNED_BY_GENERATOR && instr < _PyCode_CODE(co) + view->_co_firsttraceable)
            continue;
        intptr_t lasti = instr - _PyCode_CODE(co);
        if (lasti < -1 || lasti >= Py_SIZE(view)) lasti = -1;
        uint32_t low = (uint32_t)((lasti + 1) << 1) | (PYF_IS_ENTRY(v) ? 1u : 0u);
        if (n < max) {
            uint32_t id = code_id(co, view);
            if (!id) *flags |= PYW_UNKNOWN_CODE;
            out[n++] = (uint64_t)id << 32 | low;
        } else {
            /* ids only for the frames kept: a deep recursion costs a pointer chase a frame */
            ring[beyond++ % S_PY_OUTER] = (outer_frame){co, low};
        }
        run++;
    }
    if (beyond && reached) {
        /* the outermost S_PY_OUTER: the last out[] ones the ring does not replace, then the ring's, in order */
        int k = beyond < S_PY_OUTER ? beyond : S_PY_OUTER, inner = max - S_PY_OUTER;
        memmove(out + inner, out + inner + k, (size_t)(S_PY_OUTER - k) * sizeof *out);
        for (int i = 0; i < k; i++) {
            const outer_frame *o = &ring[(beyond - k + i) % S_PY_OUTER];
            PyCodeObject copy;
            const PyCodeObject *view = o->co;
            if (!ts) view = probe_read(o->co, &copy, offsetof(PyCodeObject, co_code_adaptive)) ? &copy : NULL;
            uint32_t id = view ? code_id(o->co, view) : 0;
            if (!id) *flags |= PYW_UNKNOWN_CODE;
            out[inner + S_PY_OUTER - k + i] = (uint64_t)id << 32 | o->low;
        }
        *flags |= PYW_CUT;
    } else if (beyond) {
        *flags |= PYW_TRUNCATED;
    }
    return n;
}

int pyframes_walk(uint64_t *out, int max, uint32_t *flags)
{
    *flags = 0;
    if (g_status != PYF_OK || p_is_finalizing()) return 0;
    PyThreadState *ts = p_this_tstate();
    if (!ts || ((uintptr_t)ts & 7)) return 0;
    return walk(ts, PYF_CURRENT(ts), out, max, flags);
}

/* Whether checked reads are process_vm_readv's: where it is refused, a read probes the pages first and then
   copies, and another thread (not the one read, which is not running) could unmap a page in between.  In a
   signal handler that race is the thread's own; reading other threads, it is not: they are not read there. */
static int vm_reads(void)
{
    uint64_t probe = 1, copy = 0;
    return probe_read(&probe, &copy, sizeof copy) && !atomic_load(&g_vm_refused);
}

int pyframes_threads(uint32_t *tids, uintptr_t *states, int max)
{
    if (g_status != PYF_OK || !p_main_interp || p_is_finalizing() || !vm_reads()) return 0;
    PyInterpreterState *interp = p_main_interp();
    PyThreadState *ts = NULL;
    if (!interp || !probe_read(&interp->threads.head, &ts, sizeof ts)) return 0;
    int n = 0;
    for (int seen = 0; ts && n < max && seen < 4 * max; seen++) {
        PyThreadState copy;
        if (((uintptr_t)ts & 7) || !probe_read(ts, &copy, sizeof copy)) break;
        if (copy.native_thread_id > 0) {
            tids[n] = (uint32_t)copy.native_thread_id;
            states[n++] = (uintptr_t)ts;
        }
        ts = copy.next;
    }
    return n;
}

int pyframes_walk_other(uintptr_t state, uint64_t *out, int max, uint32_t *flags)
{
    *flags = 0;
    if (g_status != PYF_OK || p_is_finalizing() || !state || (state & 7) || !vm_reads()) return 0;
    PyThreadState copy;
    if (!probe_read((const void *)state, &copy, sizeof copy)) return 0;
    _PyInterpreterFrame *current = NULL;
#if PY_VERSION_HEX < 0x030D0000
    _PyCFrame cframe;
    if (!copy.cframe || ((uintptr_t)copy.cframe & 7) || !probe_read(copy.cframe, &cframe, sizeof cframe)) return 0;
    current = cframe.current_frame;
#else
    current = copy.current_frame;
#endif
    return walk(NULL, current, out, max, flags);
}

#else

void pyframes_fork_child(void) {}

int pyframes_walk(uint64_t *out, int max, uint32_t *flags)
{
    (void)out;
    (void)max;
    *flags = 0;
    return 0;
}

int pyframes_threads(uint32_t *tids, uintptr_t *states, int max)
{
    (void)tids;
    (void)states;
    (void)max;
    return 0;
}

int pyframes_walk_other(uintptr_t state, uint64_t *out, int max, uint32_t *flags)
{
    (void)state;
    return pyframes_walk(out, max, flags);
}

#endif
