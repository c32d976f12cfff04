/* Assembly of a variant's WGSL: the op's body (ops/NAME.wgsl) after a prelude of constants,
 * binding declarations and per-tensor accessors made from the templates in shaders/. */
#include <stdio.h>
#include <string.h>

#include "webgpu_internal.h"

void rk_wgsl_add_file(rk_buf *b, const char *file) {
    const char *s = rk_wgsl_file(file);
    if (!s) b->oom = 1; /* a missing embedded file is a build error: fail the assembly */
    else rk_buf_puts(b, s);
}

/* Append a template with $N -> name, $B -> var and $F -> fmt (f16 or bf16) substituted. */
static void add_template(rk_buf *b, const char *file, const char *name, const char *var,
                         const char *fmt) {
    const char *s = rk_wgsl_file(file);
    if (!s) {
        b->oom = 1;
        return;
    }
    while (*s) {
        const char *d = strchr(s, '$');
        if (!d) {
            rk_buf_puts(b, s);
            return;
        }
        rk_buf_putn(b, s, (size_t)(d - s));
        const char *sub = d[1] == 'N' ? name : d[1] == 'B' ? var : d[1] == 'F' ? fmt : NULL;
        if (sub) rk_buf_puts(b, sub);
        else rk_buf_putn(b, d, d[1] ? 2 : 1);
        s = d + (d[1] ? 2 : 1);
    }
}

static const char *elem_type(rk_wg_kind k) {
    return k == RK_WG_F32 ? "f32" : k == RK_WG_F16 ? "f16" : k == RK_WG_V4 ? "vec4<u32>"
           : k >= RK_WG_F16A ? "atomic<u32>" : "u32";
}

/* Template stem ("load_<stem>.wgsl", "store_<stem>.wgsl") and 16-bit format of a kind. */
static const char *template_stem(rk_wg_kind k) {
    static const char *stems[] = {"f32", "f16", "packed", "packed", "atomic", "atomic", "v4"};
    return stems[k];
}
static const char *format_of(rk_wg_kind k) {
    return k == RK_WG_BF16P || k == RK_WG_BF16A ? "bf16" : "f16";
}

static void add_accessors(rk_buf *b, const char *name, const char *var, rk_wg_kind kind,
                          const char *what) {
    char file[64];
    snprintf(file, sizeof file, "%s_%s.wgsl", what, template_stem(kind));
    add_template(b, file, name, var, format_of(kind));
}

void rk_wgsl_tensor(rk_buf *b, int binding, const char *name, rk_wg_kind kind, int load, int store) {
    char var[64];
    snprintf(var, sizeof var, "buf_%s", name);
    rk_buf_printf(b, "@group(0) @binding(%d) var<storage, %s> %s: array<%s>;\n", binding,
                  store ? "read_write" : "read", var, elem_type(kind));
    if (load) add_accessors(b, name, var, kind, "load");
    if (store) add_accessors(b, name, var, kind, "store");
}

void rk_wgsl_alias_loads(rk_buf *b, const char *name, const char *var_of, rk_wg_kind kind) {
    char var[64];
    snprintf(var, sizeof var, "buf_%s", var_of);
    add_accessors(b, name, var, kind, "load");
}

void rk_wgsl_unused(rk_buf *b, int binding, int writable) {
    /* Declared so that the explicit pipeline layout's binding is present; never read. */
    rk_buf_printf(b, "@group(0) @binding(%d) var<storage, %s> unused_%d: array<u32>;\n", binding,
                  writable ? "read_write" : "read", binding);
}
