/* Assembly of a variant's WGSL: the op's body (ops/NAME.wgsl) after a prelude of constants,
 * binding declarations and per-tensor accessors made from the templates in shaders/. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "webgpu_internal.h"

static void sb_reserve(rk_sbuf *b, size_t more) {
    if (b->oom || b->n + more + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    b->p = p;
    b->cap = cap;
}

void rk_sb_add(rk_sbuf *b, const char *s) {
    if (!s) { /* a missing embedded file: fail the assembly */
        b->oom = 1;
        return;
    }
    size_t n = strlen(s);
    sb_reserve(b, n);
    if (b->oom) return;
    memcpy(b->p + b->n, s, n + 1);
    b->n += n;
}

void rk_sb_printf(rk_sbuf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    rk_sb_add(b, tmp);
}

void rk_sb_template(rk_sbuf *b, const char *file, const char *name, const char *var) {
    const char *s = rk_wgsl_file(file);
    if (!s) {
        b->oom = 1; /* a missing embedded file is a build error; fail the assembly */
        return;
    }
    for (; *s; ++s) {
        if (s[0] == '$' && s[1] == 'N') {
            rk_sb_add(b, name);
            ++s;
        } else if (s[0] == '$' && s[1] == 'B') {
            rk_sb_add(b, var);
            ++s;
        } else {
            char c[2] = {*s, 0};
            rk_sb_add(b, c);
        }
    }
}

static const char *elem_type(rk_wg_kind k) {
    return k == RK_WG_F32 ? "f32" : k == RK_WG_F16 ? "f16" : k >= RK_WG_F16A ? "atomic<u32>" : "u32";
}

void rk_sb_tensor(rk_sbuf *b, int binding, const char *name, rk_wg_kind kind, int load, int store) {
    char var[64], file[64];
    snprintf(var, sizeof var, "buf_%s", name);
    rk_sb_printf(b, "@group(0) @binding(%d) var<storage, %s> %s: array<%s>;\n", binding,
                 store ? "read_write" : "read", var, elem_type(kind));
    if (load) {
        snprintf(file, sizeof file, "load_%s.wgsl", rk_wg_kind_name(kind));
        rk_sb_template(b, file, name, var);
    }
    if (store) {
        snprintf(file, sizeof file, "store_%s.wgsl", rk_wg_kind_name(kind));
        rk_sb_template(b, file, name, var);
    }
}

void rk_sb_alias_loads(rk_sbuf *b, const char *name, const char *var_of, rk_wg_kind kind) {
    char var[64], file[64];
    snprintf(var, sizeof var, "buf_%s", var_of);
    snprintf(file, sizeof file, "load_%s.wgsl", rk_wg_kind_name(kind));
    rk_sb_template(b, file, name, var);
}

void rk_sb_unused(rk_sbuf *b, int binding, int writable) {
    /* Declared so that the explicit pipeline layout's binding is present; never read. */
    rk_sb_printf(b, "@group(0) @binding(%d) var<storage, %s> unused_%d: array<u32>;\n", binding,
                 writable ? "read_write" : "read", binding);
}
