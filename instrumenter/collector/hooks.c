/*
 * The sampler's hooks: thread creation, signal handlers, library unloading, exec.  See hooks.h.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "hooks.h"
#include "unwind.h"
#include "writer.h"

#define H_ALTSTACK_BYTES (256u << 10)       /* our handler needs < 8 KiB and the kernel's frame ~3 KiB with AVX-512;
                                               the program's own handlers run here too (h_forward): touched pages only */
#define H_FOREIGN_ALTSTACK_MIN (32u << 10)  /* a program's own altstack at least this big is kept */
#define H_PATCHED_MAX 4096

hooks_above g_hooks_above; /* the sampler's calls, set by sampler_load (hooks.h) */

/* ------------------------------------------------------------------------- */
/* Ready threads: an altstack installed, and their stack's bounds.          */

#define H_CLAIMED 0xFFFFFFFFu
h_ready h_ready_threads[S_MAX_THREADS];
static _Atomic int h_ready_top;    /* slots in use are below it */

typedef struct h_thread { void *alt; size_t alt_bytes; int slot; } h_thread;
static pthread_key_t h_key;
int h_key_ok;
#define H_EXITED ((h_thread *)1)    /* the key's value after its destructor: never made ready again */

/* Disables the calling thread's altstack and unmaps ours (a later signal runs on the thread's own stack). */
static void h_give_back_altstack(void *mem, size_t bytes)
{
    stack_t off;
    memset(&off, 0, sizeof off);
    off.ss_flags = SS_DISABLE;
    if (sigaltstack(&off, NULL) == 0) munmap(mem, bytes);
}

/* The key's destructor, on the exiting thread: not ready any more, then its altstack is given back
   (disabled first: a later signal of this thread runs on its own stack, which is a real stack by
   then, in glibc's exit path). */
static void h_thread_gone(void *arg)
{
    h_thread *h = arg;
    if (!h || h == H_EXITED) return;
    atomic_store(&h_ready_threads[h->slot].gone, 1);
    if (h->alt) h_give_back_altstack(h->alt, h->alt_bytes);
    free(h);
    /* an ITT call from another key's destructor, later in the thread's exit, makes it ready no more */
    pthread_setspecific(h_key, H_EXITED);
}

/* The calling thread gets an alternate signal stack (its own, when it has a big enough one) and is
 * listed as ready to be sampled.  Not for a signal handler: it allocates.  Idempotent. */
void h_thread_ready(void)
{
    if (!h_key_ok || pthread_getspecific(h_key)) return;
    pthread_attr_t attr;
    void *stack_addr = NULL;
    size_t stack_size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
    int got = pthread_attr_getstack(&attr, &stack_addr, &stack_size);
    pthread_attr_destroy(&attr);
    if (got != 0 || !stack_addr || !stack_size) return;
    h_thread *h = calloc(1, sizeof *h);
    if (!h) return;
    stack_t old;
    if (sigaltstack(NULL, &old) != 0) { free(h); return; }
    if ((old.ss_flags & SS_DISABLE) || old.ss_size < H_FOREIGN_ALTSTACK_MIN) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        void *mem = mmap(NULL, H_ALTSTACK_BYTES + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                         -1, 0);
        if (mem == MAP_FAILED) { free(h); return; }
        mprotect(mem, page, PROT_NONE); /* a guard: an overflow faults instead of writing below */
        stack_t ss;
        memset(&ss, 0, sizeof ss);
        ss.ss_sp = (char *)mem + page;
        ss.ss_size = H_ALTSTACK_BYTES;
        if (sigaltstack(&ss, NULL) != 0) { munmap(mem, H_ALTSTACK_BYTES + page); free(h); return; }
        h->alt = mem;
        h->alt_bytes = H_ALTSTACK_BYTES + page;
    }
    uint32_t tid = current_tid();
    int slot = -1;
    for (int i = 0; i < S_MAX_THREADS && slot < 0; i++) {
        uint32_t expected = 0;
        if (atomic_compare_exchange_strong(&h_ready_threads[i].tid, &expected, H_CLAIMED)) slot = i;
    }
    if (slot < 0) goto undo;
    h_ready_threads[slot].stack_lo = (uintptr_t)stack_addr;
    h_ready_threads[slot].stack_hi = (uintptr_t)stack_addr + stack_size;
    atomic_store(&h_ready_threads[slot].gone, 0);
    atomic_store(&h_ready_threads[slot].tid, tid);
    int top = atomic_load(&h_ready_top);
    while (top < slot + 1 && !atomic_compare_exchange_weak(&h_ready_top, &top, slot + 1)) {}
    h->slot = slot;
    if (pthread_setspecific(h_key, h) != 0) { h_thread_gone(h); return; }
    return;
undo:
    if (h->alt) h_give_back_altstack(h->alt, h->alt_bytes);
    free(h);
}

/* The ready slot of tid (scanner): a live one, else one of a thread ending (*gone set); -1: never ready. */
int h_ready_slot(uint32_t tid, int *gone)
{
    int ending = -1, top = atomic_load(&h_ready_top);
    for (int i = 0; i < top; i++) {
        if (atomic_load_explicit(&h_ready_threads[i].tid, memory_order_acquire) != tid) continue;
        if (!atomic_load(&h_ready_threads[i].gone)) { *gone = 0; return i; }
        ending = i;
    }
    *gone = ending >= 0;
    return ending;
}

/* Slots of ended threads whose tid is listed no more are free again (scanner; tids sorted). */
void h_release_ended(const uint32_t *tids, size_t n, int (*cmp)(const void *, const void *))
{
    int top = atomic_load(&h_ready_top);
    for (int i = 0; i < top; i++) {
        uint32_t tid = atomic_load(&h_ready_threads[i].tid);
        if (tid == 0 || tid == H_CLAIMED || !atomic_load(&h_ready_threads[i].gone)) continue;
        if (!bsearch(&tid, tids, n, sizeof *tids, cmp)) atomic_store(&h_ready_threads[i].tid, 0);
    }
}

/* A forked child: the parent's other threads are not here; the forking thread, now with a new tid,
   keeps its altstack (fork copies it and its setting). */
void h_fork_child(void)
{
    h_thread *self = h_key_ok ? pthread_getspecific(h_key) : NULL;
    for (int i = 0; i < S_MAX_THREADS; i++)
        if (!self || i != self->slot) atomic_store(&h_ready_threads[i].tid, 0);
    if (self) atomic_store(&h_ready_threads[self->slot].tid, current_tid());
}

/* ------------------------------------------------------------------------- */
/* The wrappers.                                                             */

static int (*h_real_pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
int (*h_real_sigaction)(int, const struct sigaction *, struct sigaction *);
static __sighandler_t (*h_real_signal)(int, __sighandler_t);
static int (*h_real_dlclose)(void *);
static int (*h_real_execve)(const char *, char *const[], char *const[]);
static int (*h_real_execv)(const char *, char *const[]);
static int (*h_real_execvp)(const char *, char *const[]);
static int (*h_real_execvpe)(const char *, char *const[], char *const[]);
static int (*h_real_fexecve)(int, char *const[], char *const[]);

typedef struct h_start { void *(*fn)(void *); void *arg; } h_start;

static void *h_thread_main(void *p)
{
    h_start start = *(h_start *)p;
    free(p);
    h_thread_ready();
    g_hooks_above.thread_started();
    return start.fn(start.arg);
}

static int h_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    h_start *start = malloc(sizeof *start);
    if (!start) return h_real_pthread_create(thread, attr, fn, arg);
    start->fn = fn;
    start->arg = arg;
    int r = h_real_pthread_create(thread, attr, h_thread_main, start);
    if (r != 0) free(start);
    return r;
}

/* The program's action for the sampling signal: write-once slots of a ring, the latest published by
   index.  sigaction() is async-signal-safe (a handler may call it), so a writer never waits; a reader
   copies a slot no writer touches until H_CHAINED more writes have been made. */
#define H_CHAINED 16
static struct sigaction h_chained[H_CHAINED];
static _Atomic uint32_t h_chained_next, h_chained_index;
_Atomic int h_owned_signal;

static const struct sigaction h_default; /* all zero: SIG_DFL, no flags, empty mask */

/* Whether an action would run our own handler (a program that saved it behind our hooks and sets it
   back): never kept as the program's, it would call itself. */
int h_is_ours(const struct sigaction *act) { return (void *)act->sa_handler == (void *)g_hooks_above.handler; }

void h_set_chained(const struct sigaction *act)
{
    if (h_is_ours(act)) return;
    uint32_t slot = atomic_fetch_add(&h_chained_next, 1) % H_CHAINED;
    h_chained[slot] = *act;
    atomic_store(&h_chained_index, slot);
}

static struct sigaction h_get_chained(void) { return h_chained[atomic_load(&h_chained_index) % H_CHAINED]; }

static int h_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (sig == 0 || sig != atomic_load(&h_owned_signal)) return h_real_sigaction(sig, act, old);
    struct sigaction current = h_get_chained();
    if (act) h_set_chained(act);
    if (old) *old = current;
    return 0;
}

static __sighandler_t h_signal(int sig, __sighandler_t handler)
{
    if (sig == 0 || sig != atomic_load(&h_owned_signal)) return h_real_signal(sig, handler);
    /* as glibc's signal(): BSD semantics */
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    sigemptyset(&act.sa_mask);
    sigaddset(&act.sa_mask, sig);
    act.sa_flags = SA_RESTART;
    h_sigaction(sig, &act, &old);
    return old.sa_handler;
}

/* Whether sig's default action is to ignore it. */
static int h_ignored_by_default(int sig) { return sig == SIGURG || sig == SIGCHLD || sig == SIGWINCH || sig == SIGCONT; }

/* From our handler: a signal of the sampling signal's number that is not a sample goes to the
 * program's action, as the kernel would have delivered it (its mask applied; a default action
 * that ends the process ends it). */
void h_forward(int sig, siginfo_t *si, void *uc)
{
    struct sigaction a = h_get_chained();
    /* the kernel reads the handler field alike with or without SA_SIGINFO */
    if (a.sa_handler == SIG_IGN || h_is_ours(&a)) return;
    if (a.sa_handler == SIG_DFL) {
        if (h_ignored_by_default(sig)) return;
        h_real_sigaction(sig, &h_default, NULL);
        atomic_store(&h_owned_signal, 0);
        raise(sig); /* blocked while we run: delivered, with its default action, when we return */
        return;
    }
    if (a.sa_flags & SA_RESETHAND) h_set_chained(&h_default);
    /* the mask the kernel would have set: the interrupted one, the action's, and the signal itself
       unless SA_NODEFER (or SA_RESETHAND, which implies it) */
    sigset_t mask, saved;
    sigorset(&mask, &((ucontext_t *)uc)->uc_sigmask, &a.sa_mask);
    if (a.sa_flags & (SA_NODEFER | SA_RESETHAND)) sigdelset(&mask, sig);
    else sigaddset(&mask, sig);
    pthread_sigmask(SIG_SETMASK, &mask, &saved);
    if (a.sa_flags & SA_SIGINFO) a.sa_sigaction(sig, si, uc);
    else a.sa_handler(sig);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
}

/* dlclose against the unwinder: see the top of hooks.h. */
_Atomic long uw_closing;
_Atomic uint32_t uw_generation;

/* The real dlclose, with no native walk running meanwhile and the unwind caches emptied after. */
static int h_guarded_dlclose(void *handle)
{
    atomic_fetch_add(&uw_closing, 1);
    atomic_fetch_add(&uw_generation, 1);
    while (atomic_load(&uw_readers) != 0) sched_yield(); /* handlers in a walk: a few microseconds */
    int r = h_real_dlclose(handle);
    atomic_fetch_add(&uw_generation, 1);
    atomic_fetch_sub(&uw_closing, 1);
    return r;
}

static int h_dlclose(void *handle)
{
    g_hooks_above.before_unload(); /* the map as it is, in the file, for the samples taken in what goes away */
    return h_guarded_dlclose(handle);
}

/* ------------------------------------------------------------------------- */
/* exec: the image ends without exit().                                      */

/* What this image recorded, written before it is replaced.  Not in a vfork()ed child (subprocess's
   usual way): it shares our memory and runs no fork handlers, so its getpid() is not g_pid, and
   writing our buffers from it would race with our threads.  Not in a fork()ed child that has opened
   no file: it recorded nothing, and between fork and exec only async-signal-safe calls are allowed.
   A fork()ed child that recorded (a worker that execs) has its file open and is written like us. */
static void h_before_exec(void)
{
    if ((uint32_t)syscall(SYS_getpid) != g_pid) return;
    if (g_forked && atomic_load(&g_fd) < 0) return;
    flush_all();
    g_hooks_above.drain();
}

/* If exec fails (execvp tries each folder of PATH), the program goes on: nothing was ended or closed,
   only written early. */
static int h_execve(const char *path, char *const argv[], char *const envp[])
{
    h_before_exec();
    return h_real_execve(path, argv, envp);
}

static int h_execv(const char *path, char *const argv[])
{
    h_before_exec();
    return h_real_execv(path, argv);
}

static int h_execvp(const char *file, char *const argv[])
{
    h_before_exec();
    return h_real_execvp(file, argv);
}

static int h_execvpe(const char *file, char *const argv[], char *const envp[])
{
    h_before_exec();
    return h_real_execvpe(file, argv, envp);
}

static int h_fexecve(int fd, char *const argv[], char *const envp[])
{
    h_before_exec();
    return h_real_fexecve(fd, argv, envp);
}

/* ------------------------------------------------------------------------- */
/* Patching GOT slots.                                                       */

/* The exec hooks first: without sampling they are the only ones (h_install_exec_only). */
static const struct { const char *name; void *hook; } H_HOOKS[] = {
    {"execve", (void *)h_execve},
    {"execv", (void *)h_execv},
    {"execvp", (void *)h_execvp},
    {"execvpe", (void *)h_execvpe},
    {"fexecve", (void *)h_fexecve},
    {"pthread_create", (void *)h_pthread_create},
    {"sigaction", (void *)h_sigaction},
    {"signal", (void *)h_signal},
    {"dlclose", (void *)h_dlclose},
};
#define H_EXEC_HOOKS 5
static size_t h_nhooks = sizeof H_HOOKS / sizeof H_HOOKS[0]; /* the hooks in use: all, or the exec ones */

/* Objects already looked at: their dynamic section, a hash of their name and one slot patched (0: none
   to patch), so that a library loaded where an unloaded one was is looked at again. */
typedef struct h_patched { uintptr_t dynamic; uint64_t name_hash; uintptr_t slot; } h_patched;
static h_patched h_done[H_PATCHED_MAX];
static size_t h_ndone;
static uintptr_t h_self_base;
pthread_mutex_t h_patch_mutex = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t h_slots_patched;

static uintptr_t h_fix(uintptr_t value, uintptr_t base) { return value && value < base ? value + base : value; }

/* Points slot at hook, making its page writable for the moment when it is not (RELRO). */
static int h_write_slot(uintptr_t slot, void *hook, uintptr_t relro_lo, uintptr_t relro_hi)
{
    if (*(void **)slot == hook) return 1;
    uintptr_t page = slot & ~(uintptr_t)4095;
    int relro = slot >= relro_lo && slot < relro_hi;
    if (relro && mprotect((void *)page, 4096, PROT_READ | PROT_WRITE) != 0) return 0;
    atomic_store((_Atomic(void *) *)slot, hook);
    if (relro) mprotect((void *)page, 4096, PROT_READ);
    atomic_fetch_add(&h_slots_patched, 1);
    return 1;
}

static uintptr_t h_patch_relocs(const ElfW(Rela) *rel, size_t count, const ElfW(Sym) *symtab, const char *strtab,
                                size_t strsz, uintptr_t base, uintptr_t relro_lo, uintptr_t relro_hi)
{
    uintptr_t first = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t type = ELF64_R_TYPE(rel[i].r_info), sym = ELF64_R_SYM(rel[i].r_info);
        if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) || sym == 0) continue;
        const ElfW(Sym) *s = &symtab[sym];
        if (s->st_shndx != SHN_UNDEF || s->st_name >= strsz) continue; /* its own definition: not ours to take */
        const char *name = strtab + s->st_name;
        for (size_t h = 0; h < h_nhooks; h++) {
            if (strcmp(name, H_HOOKS[h].name) != 0) continue;
            uintptr_t slot = base + rel[i].r_offset;
            if (h_write_slot(slot, H_HOOKS[h].hook, relro_lo, relro_hi) && !first) first = slot;
            break;
        }
    }
    return first;
}

/* An object seen by dl_iterate_phdr that may need patching (it cannot be patched from inside the
   iteration: see h_patch_all). */
typedef struct h_candidate {
    char *name;
    uintptr_t base;
    const ElfW(Dyn) *dyn;
    uintptr_t relro_lo, relro_hi;
    uint64_t name_hash;
} h_candidate;
typedef struct h_candidates { h_candidate *list; size_t n, cap; } h_candidates;

/* Whether the object was looked at already (and is still the one looked at). */
static int h_known(const ElfW(Dyn) *dyn, uint64_t name_hash)
{
    for (size_t i = 0; i < h_ndone; i++) {
        h_patched *p = &h_done[i];
        if (p->dynamic != (uintptr_t)dyn || p->name_hash != name_hash) continue;
        /* the same object, unless it was unloaded and another loaded there: its slot tells */
        int hooked = 0;
        for (size_t h = 0; h < h_nhooks && p->slot; h++) hooked |= *(void **)p->slot == H_HOOKS[h].hook;
        if (!p->slot || hooked) return 1;
        p->dynamic = 0;
    }
    return 0;
}

static int h_collect(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    h_candidates *c = data;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    uintptr_t base = info->dlpi_addr;
    if (base == h_self_base && base) return 0;
    if (strstr(name, "linux-vdso") || strstr(name, "/libc.so") || strstr(name, "/ld-linux")
        || strncmp(name, "libc.so", 7) == 0)
        return 0;
    h_candidate k;
    memset(&k, 0, sizeof k);
    k.base = base;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC) k.dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
        if (ph->p_type == PT_GNU_RELRO) {
            k.relro_lo = (base + ph->p_vaddr) & ~(uintptr_t)4095;
            k.relro_hi = (base + ph->p_vaddr + ph->p_memsz) & ~(uintptr_t)4095; /* as the loader: its last partial page stays writable */
        }
    }
    k.name_hash = hash_str(name);
    if (!k.dyn || h_known(k.dyn, k.name_hash)) return 0;
    if (c->n == c->cap) {
        h_candidate *bigger = realloc(c->list, (c->cap = c->cap ? 2 * c->cap : 64) * sizeof *bigger);
        if (!bigger) return 1;
        c->list = bigger;
    }
    if (!(k.name = strdup(name))) return 1;
    c->list[c->n++] = k;
    return 0;
}

/* Patches one object, pinned and known to be loaded and relocated. */
static void h_patch_object(const h_candidate *k)
{
    uintptr_t base = k->base;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    size_t strsz = 0, pltrelsz = 0, relasz = 0, relacount = 0;
    const ElfW(Rela) *jmprel = NULL, *rela = NULL;
    for (const ElfW(Dyn) *d = k->dyn; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)h_fix(d->d_un.d_ptr, base); break;
        case DT_STRTAB: strtab = (const char *)h_fix(d->d_un.d_ptr, base); break;
        case DT_STRSZ: strsz = d->d_un.d_val; break;
        case DT_JMPREL: jmprel = (const ElfW(Rela) *)h_fix(d->d_un.d_ptr, base); break;
        case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
        case DT_RELA: rela = (const ElfW(Rela) *)h_fix(d->d_un.d_ptr, base); break;
        case DT_RELASZ: relasz = d->d_un.d_val; break;
        case DT_RELACOUNT: relacount = d->d_un.d_val; break; /* the R_X86_64_RELATIVE ones, first */
        }
    }
    uintptr_t first = 0;
    if (symtab && strtab) {
        if (jmprel)
            first = h_patch_relocs(jmprel, pltrelsz / sizeof(ElfW(Rela)), symtab, strtab, strsz, base, k->relro_lo,
                                   k->relro_hi);
        size_t n = relasz / sizeof(ElfW(Rela));
        if (rela && relacount <= n) {
            uintptr_t got = h_patch_relocs(rela + relacount, n - relacount, symtab, strtab, strsz, base, k->relro_lo,
                                           k->relro_hi);
            if (!first) first = got;
        }
    }
    size_t i = 0;
    while (i < h_ndone && h_done[i].dynamic) i++;
    if (i < H_PATCHED_MAX) {
        h_done[i] = (h_patched){(uintptr_t)k->dyn, k->name_hash, first};
        if (i == h_ndone) h_ndone++;
    }
}

/* Every loaded object not looked at yet gets the hooks.  dl_iterate_phdr lists an object as soon as the
 * loader maps it, before it is relocated (its relocations then write into the pages we would have
 * patched and protected again: a crash), so each new object is first pinned with
 * dlopen(RTLD_NOLOAD), which waits for any dlopen in progress and gives nothing for an object being
 * unloaded or that failed to load; its link map must still be the one listed.  Not from inside the
 * iteration: it holds a lock the loader takes after its own. */
void h_patch_all(void)
{
    pthread_mutex_lock(&h_patch_mutex);
    h_candidates c = {NULL, 0, 0};
    dl_iterate_phdr(h_collect, &c);
    for (size_t i = 0; i < c.n; i++) {
        h_candidate *k = &c.list[i];
        void *handle = dlopen(k->name[0] ? k->name : NULL, RTLD_LAZY | RTLD_NOLOAD);
        struct link_map *map = NULL;
        if (handle && dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_ld == k->dyn
            && map->l_addr == k->base)
            h_patch_object(k);
        if (handle) h_guarded_dlclose(handle); /* the program may have let go of it meanwhile: ours is the last */
        free(k->name);
    }
    free(c.list);
    pthread_mutex_unlock(&h_patch_mutex);
}

void h_fork_prepare(void) { pthread_mutex_lock(&h_patch_mutex); }
void h_fork_parent(void) { pthread_mutex_unlock(&h_patch_mutex); }

static int h_real_exec_found(void)
{
    *(void **)&h_real_execve = dlsym(RTLD_DEFAULT, "execve");
    *(void **)&h_real_execv = dlsym(RTLD_DEFAULT, "execv");
    *(void **)&h_real_execvp = dlsym(RTLD_DEFAULT, "execvp");
    *(void **)&h_real_execvpe = dlsym(RTLD_DEFAULT, "execvpe");
    *(void **)&h_real_fexecve = dlsym(RTLD_DEFAULT, "fexecve");
    return h_real_execve && h_real_execv && h_real_execvp && h_real_execvpe && h_real_fexecve;
}

/* This library's load address, which h_collect passes over (its own calls are not hooked). */
static void h_find_self_base(void)
{
    Dl_info info;
    struct link_map *self = NULL;
    if (dladdr1((void *)h_find_self_base, &info, (void **)&self, RTLD_DL_LINKMAP) && self) h_self_base = self->l_addr;
}

/* No sampling (AUTOITT_SAMPLE_HZ=0): the exec hooks alone, so that an exec still keeps what was recorded.
   Once, at the first ITT call: objects loaded later are not patched (there is no scanner to find them). */
void h_install_exec_only(void)
{
    *(void **)&h_real_dlclose = dlsym(RTLD_DEFAULT, "dlclose"); /* h_patch_all unpins what it pinned */
    if (!h_real_dlclose || !h_real_exec_found()) return;
    h_find_self_base();
    h_nhooks = H_EXEC_HOOKS;
    h_patch_all();
}

/* Sampling starts: see hooks.h. */
int h_install(void)
{
    *(void **)&h_real_pthread_create = dlsym(RTLD_DEFAULT, "pthread_create");
    *(void **)&h_real_sigaction = dlsym(RTLD_DEFAULT, "sigaction");
    *(void **)&h_real_signal = dlsym(RTLD_DEFAULT, "signal");
    *(void **)&h_real_dlclose = dlsym(RTLD_DEFAULT, "dlclose");
    if (!h_real_pthread_create || !h_real_sigaction || !h_real_signal || !h_real_dlclose || !h_real_exec_found())
        return 0;
    h_find_self_base();
    if (!h_key_ok) h_key_ok = pthread_key_create(&h_key, h_thread_gone) == 0;
    if (!h_key_ok) return 0;
    h_thread_ready();
    h_patch_all();
    return 1;
}
