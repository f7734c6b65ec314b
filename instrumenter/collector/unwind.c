/*
 * The sampler's native stack walk: an x86-64 .eh_frame unwinder for the sampling signal's handler.
 * See unwind.h (what it does, and what it must never do in signal context).
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>

#include "unwind.h"
#include "format.h"

int (*uw_find_object)(void *pc, uw_dlfo *result);
_Atomic long uw_readers;

#define UW_NREGS 17            /* DWARF numbering: 0-15 the GPRs (6 rbp, 7 rsp), 16 the return address */
#define UW_RBP 6
#define UW_RSP 7
#define UW_RA 16
#define UW_STATE_STACK 8       /* DW_CFA_remember_state depth */
#define UW_EXPR_STACK 16
#define UW_SCAN_WORDS 4096     /* a restart scans at most 32 KiB of stack */
#define UW_MAX_RESTARTS 2

typedef struct uw_regs {
    uint64_t r[UW_NREGS];
    uint32_t valid;            /* bit per register */
} uw_regs;


static inline int uw_read(const uw_bounds *b, uintptr_t addr, uint64_t *out)
{
    if (addr < b->lo || addr > b->hi - 8 || (addr & 7)) return 0;
    *out = *(const uint64_t *)addr;
    return 1;
}

/* ---------------------------------------------------------------- decoding */

static uint64_t uw_uleb(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0;
    unsigned shift = 0;
    while (*p < end) {
        uint8_t byte = *(*p)++;
        if (shift < 64) v |= (uint64_t)(byte & 0x7f) << shift;
        shift += 7;
        if (!(byte & 0x80)) break;
    }
    return v;
}

static int64_t uw_sleb(const uint8_t **p, const uint8_t *end)
{
    int64_t v = 0;
    unsigned shift = 0;
    uint8_t byte = 0;
    while (*p < end) {
        byte = *(*p)++;
        if (shift < 64) v |= (int64_t)((uint64_t)(byte & 0x7f) << shift);
        shift += 7;
        if (!(byte & 0x80)) break;
    }
    if (shift < 64 && (byte & 0x40)) v |= -((int64_t)1 << shift);
    return v;
}

#define DW_EH_PE_omit 0xff
#define DW_EH_PE_absptr 0x00
#define DW_EH_PE_uleb128 0x01
#define DW_EH_PE_udata2 0x02
#define DW_EH_PE_udata4 0x03
#define DW_EH_PE_udata8 0x04
#define DW_EH_PE_sleb128 0x09
#define DW_EH_PE_sdata2 0x0a
#define DW_EH_PE_sdata4 0x0b
#define DW_EH_PE_sdata8 0x0c
#define DW_EH_PE_pcrel 0x10
#define DW_EH_PE_datarel 0x30
#define DW_EH_PE_indirect 0x80

/* A pointer in encoding enc at *p; 0 and failure for what eh_frame does not use. */
static int uw_encoded(uint8_t enc, const uint8_t **p, const uint8_t *end, uintptr_t datarel, uint64_t *out)
{
    if (enc == DW_EH_PE_omit) { *out = 0; return 1; }
    const uint8_t *start = *p;
    uint64_t v;
    switch (enc & 0x0f) {
    case DW_EH_PE_absptr: case DW_EH_PE_udata8: case DW_EH_PE_sdata8:
        if (end - *p < 8) return 0;
        memcpy(&v, *p, 8); *p += 8; break;
    case DW_EH_PE_udata4: { uint32_t x; if (end - *p < 4) return 0; memcpy(&x, *p, 4); *p += 4; v = x; break; }
    case DW_EH_PE_sdata4: { int32_t x; if (end - *p < 4) return 0; memcpy(&x, *p, 4); *p += 4; v = (uint64_t)(int64_t)x; break; }
    case DW_EH_PE_udata2: { uint16_t x; if (end - *p < 2) return 0; memcpy(&x, *p, 2); *p += 2; v = x; break; }
    case DW_EH_PE_sdata2: { int16_t x; if (end - *p < 2) return 0; memcpy(&x, *p, 2); *p += 2; v = (uint64_t)(int64_t)x; break; }
    case DW_EH_PE_uleb128: v = uw_uleb(p, end); break;
    case DW_EH_PE_sleb128: v = (uint64_t)uw_sleb(p, end); break;
    default: return 0;
    }
    if (v != 0 || (enc & 0x70) != 0) {
        switch (enc & 0x70) {
        case 0: break;
        case DW_EH_PE_pcrel: v += (uintptr_t)start; break;
        case DW_EH_PE_datarel: v += datarel; break;
        default: return 0;
        }
    }
    if (enc & DW_EH_PE_indirect) return 0; /* only personality pointers use it: never needed here */
    *out = v;
    return 1;
}

/* ---------------------------------------------------------------- rules */

enum { RULE_SAME = 0, RULE_UNDEF, RULE_OFFSET, RULE_VAL_OFFSET, RULE_REG, RULE_EXPR, RULE_VAL_EXPR };

typedef struct uw_rule {
    uint8_t kind;
    uint8_t reg;
    uint32_t len;
    int64_t off;
    const uint8_t *expr;
} uw_rule;

typedef struct uw_state {
    uint8_t cfa_expr;          /* 0: CFA = cfa_reg + cfa_off; 1: CFA = the expression */
    uint8_t cfa_reg;
    uint32_t cfa_len;
    int64_t cfa_off;
    const uint8_t *cfa_ptr;
    uw_rule rbp, ra;           /* the rules walking needs; other registers are not tracked */
} uw_state;

static int uw_parse_cie(const uint8_t *cie, uw_cie *out)
{
    uint32_t len32;
    memcpy(&len32, cie, 4);
    const uint8_t *p = cie + 4;
    uint64_t len = len32;
    if (len32 == 0xffffffffu) { memcpy(&len, p, 8); p += 8; }
    if (len == 0) return 0;
    const uint8_t *end = p + len;
    uint32_t id;
    memcpy(&id, p, 4);
    p += 4;
    if (id != 0) return 0;
    uint8_t version = *p++;
    const char *aug = (const char *)p;
    size_t aug_len = strnlen(aug, (size_t)(end - p));
    p += aug_len + 1;
    if (aug_len >= 2 && aug[0] == 'e' && aug[1] == 'h') p += 8;
    out->code_align = uw_uleb(&p, end);
    out->data_align = uw_sleb(&p, end);
    out->ra_reg = version == 1 ? *p++ : uw_uleb(&p, end);
    out->fde_enc = DW_EH_PE_absptr;
    out->signal = 0;
    out->has_z = 0;
    const uint8_t *aug_end = NULL;
    for (size_t i = 0; i < aug_len; i++) {
        char c = aug[i];
        if (c == 'z') { uint64_t n = uw_uleb(&p, end); aug_end = p + n; out->has_z = 1; }
        else if (c == 'R') out->fde_enc = *p++;
        else if (c == 'L') p++;
        else if (c == 'P') {
            uint8_t enc = *p++;
            uint64_t ignored;
            const uint8_t *q = p;
            /* the personality pointer: indirect is fine here, only its size matters */
            if (!uw_encoded(enc & 0x7f, &q, end, 0, &ignored)) return 0;
            p = q;
        } else if (c == 'S') out->signal = 1;
        else if (c == 'e' || c == 'h' || c == 'B' || c == 'G') continue;
        else if (aug_end) { p = aug_end; break; } /* unknown, but 'z' says how long it all is */
        else return 0;
    }
    if (aug_end) p = aug_end;
    if (p > end) return 0;
    out->insns = p;
    out->end = end;
    return out->ra_reg == UW_RA;
}

/* Runs call-frame instructions [p, end) until the location passes target. */
static int uw_run_cfa(const uw_cie *cie, const uint8_t *p, const uint8_t *end, uintptr_t loc, uintptr_t target,
                      uw_state *st, const uw_state *initial)
{
    uw_state saved[UW_STATE_STACK];
    int nsaved = 0;
    while (p < end) {
        uint8_t op = *p++;
        uint8_t hi = op & 0xc0, low = op & 0x3f;
        uint64_t reg = 0, a = 0;
        int64_t off = 0;
        uw_rule *rule = NULL;
        if (hi == 0x40) { /* advance_loc */
            loc += low * cie->code_align;
            if (loc > target) return 1;
            continue;
        }
        if (hi == 0x80) { /* offset */
            reg = low;
            off = (int64_t)uw_uleb(&p, end) * cie->data_align;
            rule = reg == UW_RBP ? &st->rbp : reg == UW_RA ? &st->ra : NULL;
            if (rule) *rule = (uw_rule){RULE_OFFSET, 0, 0, off, NULL};
            continue;
        }
        if (hi == 0xc0) { /* restore */
            reg = low;
            if (!initial) return 0;
            if (reg == UW_RBP) st->rbp = initial->rbp;
            else if (reg == UW_RA) st->ra = initial->ra;
            continue;
        }
        switch (op) {
        case 0x00: break; /* nop */
        case 0x01: { /* set_loc */
            uint64_t v;
            if (!uw_encoded(cie->fde_enc, &p, end, 0, &v)) return 0;
            loc = v;
            if (loc > target) return 1;
            break;
        }
        case 0x02: if (p + 1 > end) return 0; loc += p[0] * cie->code_align; p += 1; if (loc > target) return 1; break;
        case 0x03: { uint16_t d; if (p + 2 > end) return 0; memcpy(&d, p, 2); p += 2; loc += d * cie->code_align; if (loc > target) return 1; break; }
        case 0x04: { uint32_t d; if (p + 4 > end) return 0; memcpy(&d, p, 4); p += 4; loc += d * cie->code_align; if (loc > target) return 1; break; }
        case 0x05: /* offset_extended */
        case 0x11: /* offset_extended_sf */
        case 0x2f: /* GNU_negative_offset_extended */
        case 0x14: /* val_offset */
        case 0x15: /* val_offset_sf */
            reg = uw_uleb(&p, end);
            if (op == 0x11 || op == 0x15) off = uw_sleb(&p, end) * cie->data_align;
            else if (op == 0x2f) off = -(int64_t)uw_uleb(&p, end) * cie->data_align;
            else off = (int64_t)uw_uleb(&p, end) * cie->data_align;
            rule = reg == UW_RBP ? &st->rbp : reg == UW_RA ? &st->ra : NULL;
            if (rule) *rule = (uw_rule){(op == 0x14 || op == 0x15) ? RULE_VAL_OFFSET : RULE_OFFSET, 0, 0, off, NULL};
            break;
        case 0x06: /* restore_extended */
            reg = uw_uleb(&p, end);
            if (!initial) return 0;
            if (reg == UW_RBP) st->rbp = initial->rbp;
            else if (reg == UW_RA) st->ra = initial->ra;
            break;
        case 0x07: /* undefined */
        case 0x08: /* same_value */
            reg = uw_uleb(&p, end);
            rule = reg == UW_RBP ? &st->rbp : reg == UW_RA ? &st->ra : NULL;
            if (rule) *rule = (uw_rule){op == 0x07 ? RULE_UNDEF : RULE_SAME, 0, 0, 0, NULL};
            break;
        case 0x09: /* register */
            reg = uw_uleb(&p, end);
            a = uw_uleb(&p, end);
            rule = reg == UW_RBP ? &st->rbp : reg == UW_RA ? &st->ra : NULL;
            if (rule) *rule = (uw_rule){RULE_REG, (uint8_t)(a < UW_NREGS ? a : 0xff), 0, 0, NULL};
            break;
        case 0x0a: /* remember_state */
            if (nsaved == UW_STATE_STACK) return 0;
            saved[nsaved++] = *st;
            break;
        case 0x0b: /* restore_state */
            if (nsaved == 0) return 0;
            *st = saved[--nsaved];
            break;
        case 0x0c: /* def_cfa */
            st->cfa_reg = (uint8_t)uw_uleb(&p, end);
            st->cfa_off = (int64_t)uw_uleb(&p, end);
            st->cfa_expr = 0;
            break;
        case 0x12: /* def_cfa_sf */
            st->cfa_reg = (uint8_t)uw_uleb(&p, end);
            st->cfa_off = uw_sleb(&p, end) * cie->data_align;
            st->cfa_expr = 0;
            break;
        case 0x0d: /* def_cfa_register */
            st->cfa_reg = (uint8_t)uw_uleb(&p, end);
            st->cfa_expr = 0;
            break;
        case 0x0e: /* def_cfa_offset */
            st->cfa_off = (int64_t)uw_uleb(&p, end);
            break;
        case 0x13: /* def_cfa_offset_sf */
            st->cfa_off = uw_sleb(&p, end) * cie->data_align;
            break;
        case 0x0f: /* def_cfa_expression */
            a = uw_uleb(&p, end);
            if (a > (uint64_t)(end - p)) return 0;
            st->cfa_expr = 1;
            st->cfa_ptr = p;
            st->cfa_len = (uint32_t)a;
            p += a;
            break;
        case 0x10: /* expression */
        case 0x16: /* val_expression */
            reg = uw_uleb(&p, end);
            a = uw_uleb(&p, end);
            if (a > (uint64_t)(end - p)) return 0;
            rule = reg == UW_RBP ? &st->rbp : reg == UW_RA ? &st->ra : NULL;
            if (rule) *rule = (uw_rule){op == 0x10 ? RULE_EXPR : RULE_VAL_EXPR, 0, (uint32_t)a, 0, p};
            p += a;
            break;
        case 0x2e: /* GNU_args_size */
            uw_uleb(&p, end);
            break;
        default:
            return 0;
        }
    }
    return 1;
}

/* A DWARF expression (the subset call-frame information uses); push_cfa: DW_CFA_*expression
 * register rules start with the CFA on the stack. */
static int uw_eval(const uint8_t *p, uint32_t len, const uw_regs *regs, const uw_bounds *b, int push_cfa, uint64_t cfa,
                   uint64_t *out)
{
    uint64_t s[UW_EXPR_STACK];
    int n = 0;
    const uint8_t *begin = p, *end = p + len;
    if (push_cfa) s[n++] = cfa;
#define NEED(k) do { if (n < (k)) return 0; } while (0)
#define PUSH(v) do { uint64_t pushed_ = (v); if (n == UW_EXPR_STACK) return 0; s[n++] = pushed_; } while (0)
    while (p < end) {
        uint8_t op = *p++;
        if (op >= 0x30 && op <= 0x4f) { PUSH(op - 0x30); continue; }          /* lit */
        if (op >= 0x70 && op <= 0x8f) {                                         /* breg */
            unsigned r = op - 0x70;
            int64_t off = uw_sleb(&p, end);
            if (r >= UW_NREGS || !(regs->valid & (1u << r))) return 0;
            PUSH(regs->r[r] + (uint64_t)off);
            continue;
        }
        if (op >= 0x50 && op <= 0x6f) {                                         /* reg */
            unsigned r = op - 0x50;
            if (r >= UW_NREGS || !(regs->valid & (1u << r))) return 0;
            PUSH(regs->r[r]);
            continue;
        }
        uint64_t x, y;
        switch (op) {
        case 0x08: if (p + 1 > end) return 0; PUSH(p[0]); p += 1; break;
        case 0x09: if (p + 1 > end) return 0; PUSH((uint64_t)(int64_t)(int8_t)p[0]); p += 1; break;
        case 0x0a: { uint16_t v; if (p + 2 > end) return 0; memcpy(&v, p, 2); p += 2; PUSH(v); break; }
        case 0x0b: { int16_t v; if (p + 2 > end) return 0; memcpy(&v, p, 2); p += 2; PUSH((uint64_t)(int64_t)v); break; }
        case 0x0c: { uint32_t v; if (p + 4 > end) return 0; memcpy(&v, p, 4); p += 4; PUSH(v); break; }
        case 0x0d: { int32_t v; if (p + 4 > end) return 0; memcpy(&v, p, 4); p += 4; PUSH((uint64_t)(int64_t)v); break; }
        case 0x0e: case 0x0f: { uint64_t v; if (p + 8 > end) return 0; memcpy(&v, p, 8); p += 8; PUSH(v); break; }
        case 0x10: PUSH(uw_uleb(&p, end)); break;
        case 0x11: PUSH((uint64_t)uw_sleb(&p, end)); break;
        case 0x12: NEED(1); PUSH(s[n - 1]); break;                                         /* dup */
        case 0x13: NEED(1); n--; break;                                                     /* drop */
        case 0x14: NEED(2); PUSH(s[n - 2]); break;                                         /* over */
        case 0x15: { uint8_t i; if (p + 1 > end) return 0; i = *p++; NEED(i + 1); PUSH(s[n - 1 - i]); break; }
        case 0x16: NEED(2); x = s[n - 1]; s[n - 1] = s[n - 2]; s[n - 2] = x; break;        /* swap */
        case 0x17: NEED(3); x = s[n - 1]; s[n - 1] = s[n - 2]; s[n - 2] = s[n - 3]; s[n - 3] = x; break;
        case 0x06: NEED(1); if (!uw_read(b, s[n - 1], &s[n - 1])) return 0; break;         /* deref */
        case 0x94: {                                                                        /* deref_size */
            uint8_t size;
            if (p + 1 > end) return 0;
            size = *p++;
            NEED(1);
            uint64_t addr = s[n - 1], word;
            if (size == 0 || size > 8 || !uw_read(b, addr & ~(uint64_t)7, &word) || (addr & 7) + size > 8) return 0;
            word >>= (addr & 7) * 8;
            s[n - 1] = size == 8 ? word : word & ((1ull << (size * 8)) - 1);
            break;
        }
        case 0x19: NEED(1); if ((int64_t)s[n - 1] < 0) s[n - 1] = -s[n - 1]; break;
        case 0x1f: NEED(1); s[n - 1] = -s[n - 1]; break;
        case 0x20: NEED(1); s[n - 1] = ~s[n - 1]; break;
        case 0x23: NEED(1); s[n - 1] += uw_uleb(&p, end); break;                          /* plus_uconst */
        case 0x1a: case 0x1b: case 0x1c: case 0x1d: case 0x1e: case 0x21: case 0x22: case 0x24: case 0x25:
        case 0x26: case 0x27: case 0x29: case 0x2a: case 0x2b: case 0x2c: case 0x2d: case 0x2e:
            NEED(2);
            y = s[--n];
            x = s[n - 1];
            switch (op) {
            case 0x1a: x &= y; break;
            case 0x1b: if (!y) return 0; x = (uint64_t)((int64_t)x / (int64_t)y); break;
            case 0x1c: x -= y; break;
            case 0x1d: if (!y) return 0; x %= y; break;
            case 0x1e: x *= y; break;
            case 0x21: x |= y; break;
            case 0x22: x += y; break;
            case 0x24: x = y < 64 ? x << y : 0; break;
            case 0x25: x = y < 64 ? x >> y : 0; break;
            case 0x26: x = y < 64 ? (uint64_t)((int64_t)x >> y) : 0; break;
            case 0x27: x ^= y; break;
            case 0x29: x = x == y; break;
            case 0x2a: x = (int64_t)x >= (int64_t)y; break;
            case 0x2b: x = (int64_t)x > (int64_t)y; break;
            case 0x2c: x = (int64_t)x <= (int64_t)y; break;
            case 0x2d: x = (int64_t)x < (int64_t)y; break;
            case 0x2e: x = x != y; break;
            }
            s[n - 1] = x;
            break;
        case 0x2f: case 0x28: { /* skip, bra */
            int16_t d;
            if (p + 2 > end) return 0;
            memcpy(&d, p, 2);
            p += 2;
            if (op == 0x28) { NEED(1); if (s[--n] == 0) break; }
            if (d < begin - p || d > end - p) return 0; /* stays inside the expression */
            p += d;
            break;
        }
        case 0x96: break; /* nop */
        default: return 0;
        }
    }
#undef NEED
#undef PUSH
    if (n == 0) return 0;
    *out = s[n - 1];
    return 1;
}

/* The FDE covering pc in the object found by _dl_find_object, its CIE parsed. */
const uint8_t *uw_find_fde(uintptr_t pc, uw_cie *cie, uintptr_t *pc_begin, const uint8_t **insns,
                           const uint8_t **insns_end, uintptr_t *pc_end)
{
    uw_dlfo dlfo;
    if (!uw_find_object || uw_find_object((void *)pc, &dlfo) != 0 || !dlfo.eh_frame) return NULL;
    const uint8_t *hdr = dlfo.eh_frame;
    if (hdr[0] != 1 || hdr[3] != (DW_EH_PE_datarel | DW_EH_PE_sdata4)) return NULL;
    const uint8_t *p = hdr + 4, *far = hdr + 4 + 16;
    uint64_t ignored, count;
    if (!uw_encoded(hdr[1], &p, far, (uintptr_t)hdr, &ignored) || !uw_encoded(hdr[2], &p, far, (uintptr_t)hdr, &count)
        || count == 0)
        return NULL;
    const int32_t *table = (const int32_t *)p;
    int64_t rel = (int64_t)(pc - (uintptr_t)hdr);
    size_t lo = 0, hi = count;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (table[2 * mid] <= rel) lo = mid;
        else hi = mid;
    }
    if (table[2 * lo] > rel) return NULL;
    const uint8_t *fde = hdr + table[2 * lo + 1];
    uint32_t len32;
    memcpy(&len32, fde, 4);
    const uint8_t *q = fde + 4;
    uint64_t len = len32;
    if (len32 == 0xffffffffu) { memcpy(&len, q, 8); q += 8; }
    const uint8_t *end = q + len;
    uint32_t cie_off;
    memcpy(&cie_off, q, 4);
    if (cie_off == 0) return NULL;
    const uint8_t *cie_ptr = q - cie_off;
    q += 4;
    if (!uw_parse_cie(cie_ptr, cie)) return NULL;
    uint64_t begin, range;
    if (!uw_encoded(cie->fde_enc, &q, end, 0, &begin) || !uw_encoded(cie->fde_enc & 0x0f, &q, end, 0, &range)) return NULL;
    if (pc < begin || pc >= begin + range) return NULL;
    if (cie->has_z) {
        uint64_t n = uw_uleb(&q, end);
        q += n;
    }
    if (q > end) return NULL;
    *pc_begin = (uintptr_t)begin;
    *pc_end = (uintptr_t)(begin + range);
    *insns = q;
    *insns_end = end;
    return fde;
}

/* uw_find_fde through the thread's cache of functions. */
static int uw_find_fde_cached(uintptr_t pc, uw_thread_cache *tc, uw_cie *cie, uintptr_t *begin, const uint8_t **insns,
                              const uint8_t **insns_end)
{
    uw_fde_entry *e = tc ? &tc->fdes[((pc >> 6) ^ (pc >> 16)) & (UW_FDE_CACHE - 1)] : NULL;
    if (e && pc >= e->begin && pc < e->end) {
        *cie = e->cie;
        *begin = e->begin;
        *insns = e->insns;
        *insns_end = e->insns_end;
        return 1;
    }
    uintptr_t end;
    if (!uw_find_fde(pc, cie, begin, insns, insns_end, &end)) return 0;
    if (e) *e = (uw_fde_entry){*begin, end, *insns, *insns_end, *cie};
    return 1;
}

/* The value of a rule for rbp or the return address; 0: unknown. */
static int uw_apply(const uw_rule *rule, int reg, const uw_regs *regs, const uw_bounds *b, uint64_t cfa, uint64_t *out)
{
    uint64_t addr;
    switch (rule->kind) {
    case RULE_SAME:
        if (!(regs->valid & (1u << reg))) return 0;
        *out = regs->r[reg];
        return 1;
    case RULE_UNDEF: return 0;
    case RULE_OFFSET: return uw_read(b, cfa + (uint64_t)rule->off, out);
    case RULE_VAL_OFFSET: *out = cfa + (uint64_t)rule->off; return 1;
    case RULE_REG:
        if (rule->reg >= UW_NREGS || !(regs->valid & (1u << rule->reg))) return 0;
        *out = regs->r[rule->reg];
        return 1;
    case RULE_EXPR: return uw_eval(rule->expr, rule->len, regs, b, 1, cfa, &addr) && uw_read(b, addr, out);
    case RULE_VAL_EXPR: return uw_eval(rule->expr, rule->len, regs, b, 1, cfa, out);
    }
    return 0;
}

enum { UW_STEP_OK = 0, UW_STEP_END, UW_STEP_NOINFO, UW_STEP_FAIL };

/* One frame up: regs describe a frame whose pc is regs->r[UW_RA] (exact: the pc itself is
 * looked up, not pc - 1, as for the interrupted frame and the one a signal frame interrupted). */
static int uw_step(uw_regs *regs, int *exact, const uw_bounds *b, uw_thread_cache *tc)
{
    uintptr_t pc = regs->r[UW_RA];
    uintptr_t lookup = *exact ? pc : pc - 1;
    uw_cache_entry *ce = tc ? &tc->rules[(lookup ^ (lookup >> 12)) & (UW_CACHE - 1)] : NULL;
    uint64_t cfa, ra, rbp = 0;
    int rbp_ok;
    if (ce && ce->pc == lookup) {
        if (!(regs->valid & (1u << ce->cfa_reg))) return UW_STEP_FAIL;
        cfa = regs->r[ce->cfa_reg] + (uint64_t)(int64_t)ce->cfa_off;
        if (!uw_read(b, cfa + (uint64_t)(int64_t)ce->ra_off, &ra)) return UW_STEP_FAIL;
        if (ce->rbp_saved) rbp_ok = uw_read(b, cfa + (uint64_t)(int64_t)ce->rbp_off, &rbp);
        else { rbp_ok = (regs->valid >> UW_RBP) & 1; rbp = regs->r[UW_RBP]; }
        *exact = 0;
    } else {
        uw_cie cie;
        uintptr_t begin;
        const uint8_t *insns, *insns_end;
        if (!uw_find_fde_cached(lookup, tc, &cie, &begin, &insns, &insns_end)) return UW_STEP_NOINFO;
        uw_state initial;
        memset(&initial, 0, sizeof initial);
        initial.cfa_reg = UW_RSP;
        initial.cfa_off = 8;
        initial.ra = (uw_rule){RULE_OFFSET, 0, 0, -8, NULL};
        if (!uw_run_cfa(&cie, cie.insns, cie.end, 0, UINTPTR_MAX, &initial, NULL)) return UW_STEP_FAIL;
        uw_state st = initial;
        if (!uw_run_cfa(&cie, insns, insns_end, begin, lookup, &st, &initial)) return UW_STEP_FAIL;
        if (st.cfa_expr) {
            if (!uw_eval(st.cfa_ptr, st.cfa_len, regs, b, 0, 0, &cfa)) return UW_STEP_FAIL;
        } else {
            if (st.cfa_reg >= UW_NREGS || !(regs->valid & (1u << st.cfa_reg))) return UW_STEP_FAIL;
            cfa = regs->r[st.cfa_reg] + (uint64_t)st.cfa_off;
        }
        if (st.ra.kind == RULE_UNDEF) return UW_STEP_END; /* _start, clone: the outermost frame */
        if (!uw_apply(&st.ra, UW_RA, regs, b, cfa, &ra)) return UW_STEP_FAIL;
        rbp_ok = uw_apply(&st.rbp, UW_RBP, regs, b, cfa, &rbp);
        if (ce && !cie.signal && !st.cfa_expr && (st.cfa_reg == UW_RSP || st.cfa_reg == UW_RBP)
            && st.ra.kind == RULE_OFFSET && (st.rbp.kind == RULE_SAME || st.rbp.kind == RULE_OFFSET)
            && st.cfa_off == (int32_t)st.cfa_off && st.ra.off == (int32_t)st.ra.off && st.rbp.off == (int32_t)st.rbp.off) {
            ce->pc = lookup;
            ce->cfa_reg = st.cfa_reg;
            ce->cfa_off = (int32_t)st.cfa_off;
            ce->ra_off = (int32_t)st.ra.off;
            ce->rbp_saved = st.rbp.kind == RULE_OFFSET;
            ce->rbp_off = (int32_t)st.rbp.off;
        }
        *exact = cie.signal; /* the frame a signal interrupted: its pc is exact */
    }
    if (ra == 0) return UW_STEP_END;
    if (cfa <= regs->r[UW_RSP] && !*exact) return UW_STEP_FAIL; /* stacks grow down: callers are above */
    regs->r[UW_RSP] = cfa;
    regs->r[UW_RA] = ra;
    regs->r[UW_RBP] = rbp;
    regs->valid = (1u << UW_RSP) | (1u << UW_RA) | (rbp_ok ? 1u << UW_RBP : 0);
    return UW_STEP_OK;
}

/* Whether the bytes before ret are a call instruction (rel32, or FF /2 through a register or memory);
 * [lo, ret) must be code of one function (its FDE's range): only those bytes are read. */
static int uw_after_call(uintptr_t ret, uintptr_t lo)
{
    if (ret < lo + 7) return 0;
    const uint8_t *c = (const uint8_t *)ret;
    if (c[-5] == 0xe8) return 1;                                                    /* call rel32 */
    if (c[-2] == 0xff && (c[-1] & 0xf8) == 0xd0) return 1;                          /* call reg */
    if (c[-3] == 0xff && ((c[-2] >> 3) & 7) == 2 && (c[-2] >> 6) == 1 && (c[-2] & 7) != 4) return 1; /* [reg+d8] */
    if (c[-4] == 0xff && ((c[-3] >> 3) & 7) == 2 && (c[-3] >> 6) == 1 && (c[-3] & 7) == 4) return 1; /* [sib+d8] */
    if (c[-6] == 0xff && ((c[-5] >> 3) & 7) == 2 && (((c[-5] >> 6) == 2 && (c[-5] & 7) != 4) || c[-5] == 0x15)) return 1;
    if (c[-7] == 0xff && ((c[-6] >> 3) & 7) == 2 && (c[-6] >> 6) == 2 && (c[-6] & 7) == 4) return 1; /* [sib+d32] */
    if (c[-3] == 0xff && (c[-2] >> 6) == 0 && ((c[-2] >> 3) & 7) == 2 && (c[-2] & 7) == 4) return 1; /* [sib] */
    if (c[-2] == 0xff && (c[-1] >> 6) == 0 && ((c[-1] >> 3) & 7) == 2 && (c[-1] & 7) != 4 && (c[-1] & 7) != 5) return 1;
    return 0;
}

/* From a frame without unwind information (JIT code), the first word up the stack that is a
 * return address into a loaded object's code: resumes the walk there.  1: found.  A candidate must
 * first be inside a function that a loaded object's .eh_frame_hdr lists (found through
 * _dl_find_object, which knows only what is loaded now), and only then are the code bytes before
 * it read, within that function. */
static int uw_restart(uw_regs *regs, const uw_bounds *b, uw_thread_cache *tc)
{
    uintptr_t a = (regs->r[UW_RSP] + 7) & ~(uintptr_t)7;
    for (int i = 0; i < UW_SCAN_WORDS && a + 8 <= b->hi; i++, a += 8) {
        if (a < b->lo) continue;
        uintptr_t w = *(const uintptr_t *)a;
        if (w < 4096 || w >= ((uintptr_t)1 << 47)) continue;
        uw_cie cie;
        uintptr_t begin;
        const uint8_t *insns, *insns_end;
        if (!uw_find_fde_cached(w - 1, tc, &cie, &begin, &insns, &insns_end)) continue;
        if (!uw_after_call(w, begin)) continue;
        regs->r[UW_RSP] = a + 8;
        regs->r[UW_RA] = w;
        regs->valid &= (1u << UW_RSP) | (1u << UW_RA) | (1u << UW_RBP);
        return 1;
    }
    return 0;
}

/* Walks the interrupted thread's stack: out[0] is the interrupted pc, out[i > 0] return addresses.
 * Returns the number of addresses; *flags gets UWF_* (format.h). */
int uw_backtrace(const ucontext_t *uc, const uw_bounds *b, uw_thread_cache *tc,
                 uint64_t *out, int max, uint32_t *flags)
{
    const greg_t *g = uc->uc_mcontext.gregs;
    uw_regs regs;
    static const int from_greg[16] = {REG_RAX, REG_RDX, REG_RCX, REG_RBX, REG_RSI, REG_RDI, REG_RBP, REG_RSP,
                                      REG_R8, REG_R9, REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15};
    for (int i = 0; i < 16; i++) regs.r[i] = (uint64_t)g[from_greg[i]];
    regs.r[UW_RA] = (uint64_t)g[REG_RIP];
    regs.valid = (1u << UW_NREGS) - 1;
    int n = 0, exact = 1, restarts = 0;
    *flags = 0;
    out[n++] = regs.r[UW_RA];
    while (n < max) {
        int r = uw_step(&regs, &exact, b, tc);
        if (r == UW_STEP_OK) { out[n++] = regs.r[UW_RA]; continue; }
        if (r == UW_STEP_END) return n;
        if (r == UW_STEP_NOINFO && restarts < UW_MAX_RESTARTS && uw_restart(&regs, b, tc)) {
            restarts++;
            *flags |= UWF_RESTARTED;
            exact = 0;
            out[n++] = regs.r[UW_RA];
            continue;
        }
        *flags |= r == UW_STEP_NOINFO ? UWF_NOINFO : UWF_FAILED;
        return n;
    }
    *flags |= UWF_TRUNCATED;
    return n;
}
