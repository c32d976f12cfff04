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

/* An input tensor and the output written from it: two bindings, or in place only the output's
 * (the input's binding declared unused, its loads aliased to the output). */
static void in_out(rk_buf *s, int in_binding, const char *in, rk_wg_kind in_kind, int out_binding,
                   const char *out, rk_wg_kind out_kind, int inplace) {
    if (inplace) {
        rk_wgsl_unused(s, in_binding, 0);
        rk_wgsl_tensor(s, out_binding, out, out_kind, 0, 1);
        rk_wgsl_alias_loads(s, in, out, out_kind);
    } else {
        rk_wgsl_tensor(s, in_binding, in, in_kind, 1, 0);
        rk_wgsl_tensor(s, out_binding, out, out_kind, 0, 1);
    }
}

/* ---- whole variants -------------------------------------------------------------------------- */

/* FAST false (ROPEKIT_WEBGPU_INTEGER_PATHS=1, tests): the float fast paths off, every element on
 * the integer paths of exact_f32.wgsl (tests) */
static void prelude(rk_buf *sb, int f16, uint32_t wg, uint32_t sw, const char *arith, int integer_paths,
                    int f64) {
    if (f16) rk_buf_puts(sb, "enable f16;\n");
    rk_buf_printf(sb, "const WG: u32 = %uu;\nconst SW: u32 = %uu;\nconst FAST: bool = %s;\n", wg, sw,
                  integer_paths ? "false" : "true");
    rk_wgsl_add_file(sb, "common.wgsl");
    rk_wgsl_add_file(sb, "exact_f32.wgsl");
    rk_wgsl_add_file(sb, f64 ? "slow_f64.wgsl" : "slow_int.wgsl"); /* the fast paths' slow paths */
    rk_wgsl_add_file(sb, arith);
}

/* QKNorm's correctly rounded division and square root: in integers (round32.wgsl), with f64
 * for the normal range under shader-f64 (round64.wgsl) */
static void rounding(rk_buf *s, rk_wg_arith ar) {
    rk_wgsl_add_file(s, "round32.wgsl");
    if (ar == RK_ARITH_WIDE64) rk_wgsl_add_file(s, "round64.wgsl");
    else
        rk_buf_puts(s, "fn div_rn(a: f32, b: f32) -> f32 { return div_rn_int(a, b); }\n"
                       "fn sqrt_rn(x: f32) -> f32 { return sqrt_rn_int(x); }\n");
}

static const char *arith_file(rk_wg_arith a) {
    return a == RK_ARITH_NARROW ? "arith_narrow.wgsl"
           : a == RK_ARITH_WIDE64 ? "arith_wide64.wgsl" : "arith_exact32.wgsl";
}
const char *rk_wg_arith_name(rk_wg_arith a) {
    return a == RK_ARITH_NARROW ? "narrow" : a == RK_ARITH_WIDE64 ? "wide64" : "exact32";
}
const char *rk_wg_rows_name(uint32_t rows_mode) {
    static const char *names[] = {"ids2d", "offset", "table3d", "mrope"};
    return rows_mode < 4 ? names[rows_mode] : "?";
}

void rk_wg_rotary_wgsl(rk_buf *s, const rk_wg_rotary_cfg *c) {
    prelude(s, c->xk == RK_WG_F16 || c->tk == RK_WG_F16, c->wg, c->sw, arith_file(c->ar), c->integer_paths,
            c->ar == RK_ARITH_WIDE64 || c->f64);
    rk_buf_printf(s, "const ROWS: u32 = %uu;\nconst HG: u32 = %uu;\n", c->rows_mode, c->hg);
    if (c->il < 0) /* kernel packages: pipeline-overridable constants, set by the runner */
        rk_buf_puts(s, "override RK_IL: u32 = 2u; // 0 half-split, 1 interleaved, 2: read P.flags\n"
                       "fn rk_il() -> bool {\n"
                       "    if (RK_IL > 1u) { return (P.flags & 1u) != 0u; }\n"
                       "    return RK_IL == 1u;\n}\n"
                       "override RK_COPY: bool = true;\n");
    else
        rk_buf_printf(s, "fn rk_il() -> bool { return %s; }\nconst RK_COPY: bool = %s;\n",
                      c->il ? "true" : "false", c->copy ? "true" : "false");
    const rk_wg_kind xv = c->vec ? RK_WG_V4 : c->xk, yv = c->vec ? RK_WG_V4 : c->yk;
    if (c->vec) {
        static const char *conv[] = {
            "fn elem_to_f32(b: u32) -> f32 { return bitcast<f32>(b); }\n"
            "fn f32_to_elem(f: f32) -> u32 { return bitcast<u32>(f); }\n"
            "fn elem_words4(lo: vec4<f32>, hi: vec4<f32>) -> vec4<u32> { return bitcast<vec4<u32>>(lo); }\n"
            "fn x_ok(v: vec4<u32>) -> bool { return ok4(v); }\n",
            "fn elem_to_f32(b: u32) -> f32 { return f16_bits_to_f32(b); }\n"
            "fn f32_to_elem(f: f32) -> u32 { return f32_to_f16_bits(f); }\n"
            "fn elem_words4(lo: vec4<f32>, hi: vec4<f32>) -> vec4<u32> { return f16_words4(lo, hi, P.flags >> 31u); }\n"
            "fn x_ok(v: vec4<u32>) -> bool { return FAST & f16_plain8(v); }\n",
            "fn elem_to_f32(b: u32) -> f32 { return bf16_bits_to_f32(b); }\n"
            "fn f32_to_elem(f: f32) -> u32 { return f32_to_bf16_bits(f); }\n"
            "fn elem_words4(lo: vec4<f32>, hi: vec4<f32>) -> vec4<u32> { return bf16_words4(lo, hi, P.flags >> 31u); }\n"
            "fn x_ok(v: vec4<u32>) -> bool { return bf16_ok8(v); }\n"};
        const unsigned ve = 16u / (unsigned)ropekit_dtype_size(c->dtype);
        rk_buf_printf(s, "const VE: u32 = %uu;\nconst EW: u32 = %uu;\n%s", ve, ve / 4,
                      conv[c->dtype == ROPEKIT_FLOAT32 ? 0 : c->dtype == ROPEKIT_FLOAT16 ? 1 : 2]);
        /* x_ok / t_ok: the vector kernel's operand checks, once per loaded x vector and per set of
         * cos/sin values (arith_*.wgsl, ok4). A finite float16 (subnormals included) widens to a
         * zero or a normal float32 in [2^-24, 65504], inside every fast window: float16 x and
         * float16 tables need no range check, only finiteness (t_ok; x_ok also refuses
         * subnormal halves, for word_f). */
        const int t16 = c->tk == RK_WG_F16 || c->tk == RK_WG_F16P;
        rk_buf_puts(s, t16 && c->tv /* the table words were checked as loaded (w16_ok) */
                           ? "fn t_ok(u: vec4<u32>) -> bool { return FAST; }\n"
                       : t16 ? "fn t_ok(u: vec4<u32>) -> bool { return FAST & all((u & vec4<u32>(0x7f800000u)) != vec4<u32>(0x7f800000u)); }\n"
                             : "fn t_ok(u: vec4<u32>) -> bool { return ok4(u); }\n");
        /* word_f: both 16-bit halves of a word as floats. float16: unpack2x16float, exact for
         * zero and normal halves (WGSL lets an implementation flush subnormal ones): the kernel
         * checks every word it widens this way (x vectors: x_ok, tv table vectors: w16_ok, both
         * f16_plain8) and redoes a unit with a subnormal, infinite or NaN half exactly (a guarded
         * unpack per word made Chromium's translation for SwiftShader take minutes to compile the
         * vector kernel; a flag per vector does not branch). bfloat16: the integer widening. */
        rk_buf_puts(s, c->dtype == ROPEKIT_FLOAT16
                           ? "fn word_f(w: u32) -> vec2<f32> { return unpack2x16float(w); }\n"
                             "fn w16_ok(v: vec4<u32>) -> bool { return FAST & f16_plain8(v); }\n"
                           : "fn word_f(w: u32) -> vec2<f32> {\n"
                             "    return vec2<f32>(elem_to_f32(w & 0xffffu), elem_to_f32(w >> 16u));\n}\n"
                             "fn w16_ok(v: vec4<u32>) -> bool { return true; }\n");
    }
    in_out(s, 1, "x", xv, 2, "y", yv, c->inplace);
    if (c->vec && c->tv) { /* tables as 16-byte vectors, VT columns each */
        const char *tmpl = c->tk == RK_WG_F32 ? "load_tv32.wgsl" : "load_tv16.wgsl";
        const char *fmt = c->tk == RK_WG_BF16P ? "bf16" : "f16";
        rk_buf_printf(s, "const VT: u32 = %uu;\n", c->tk == RK_WG_F32 ? 4u : 8u);
        rk_buf_puts(s, "@group(0) @binding(3) var<storage, read> buf_c: array<vec4<u32>>;\n");
        add_template(s, tmpl, "c", "buf_c", fmt);
        rk_buf_puts(s, "@group(0) @binding(4) var<storage, read> buf_s: array<vec4<u32>>;\n");
        add_template(s, tmpl, "s", "buf_s", fmt);
    } else {
        rk_wgsl_tensor(s, 3, "c", c->tk, 1, 0);
        rk_wgsl_tensor(s, 4, "s", c->tk, 1, 0);
    }
    rk_buf_puts(s, "@group(0) @binding(5) var<storage, read> ids: array<u32>;\n");
    rk_wgsl_add_file(s, "rotary_common.wgsl");
    if (c->vec) rk_wgsl_add_file(s, c->tv ? "rotary_vec_tv.wgsl" : "rotary_vec_cs.wgsl");
    rk_wgsl_add_file(s, c->vec ? "rotary_vec.wgsl" : "rotary.wgsl");
}

/* The element conversions of a dtype's stored bits (16-bit: one half-word) to float and back. */
static const char *elem_conversions(ropekit_dtype dt) {
    static const char *conv[] = {"fn elem_to_f32(b: u32) -> f32 { return bitcast<f32>(b); }\n"
                                 "fn f32_to_elem(f: f32) -> u32 { return bitcast<u32>(f); }\n",
                                 "fn elem_to_f32(b: u32) -> f32 { return f16_bits_to_f32(b); }\n"
                                 "fn f32_to_elem(f: f32) -> u32 { return f32_to_f16_bits(f); }\n",
                                 "fn elem_to_f32(b: u32) -> f32 { return bf16_bits_to_f32(b); }\n"
                                 "fn f32_to_elem(f: f32) -> u32 { return f32_to_bf16_bits(f); }\n"};
    return conv[dt == ROPEKIT_FLOAT32 ? 0 : dt == ROPEKIT_FLOAT16 ? 1 : 2];
}

void rk_wg_qknorm_wgsl(rk_buf *s, const rk_wg_qknorm_cfg *c) {
    if (c->vpt) { /* the row kernel: 16-byte vectors, rl (32 or 64) invocations per row */
        const unsigned rl = c->rl ? c->rl : 64u;
        prelude(s, 0, rl * c->qr, 1, arith_file(c->ar), c->integer_paths,
            c->ar == RK_ARITH_WIDE64);
        rounding(s, c->ar);
        const unsigned ve = 16u / (unsigned)ropekit_dtype_size(c->dtype);
        rk_buf_printf(s, "const VE: u32 = %uu;\nconst VPT: u32 = %uu;\nconst QR: u32 = %uu;\n"
                      "const RS: u32 = %uu;\nconst RL: u32 = %uu;\n%s",
                      ve, c->vpt, c->qr, c->rs ? c->rs : 1u, rl, elem_conversions(c->dtype));
        rk_buf_puts(s, c->dtype == ROPEKIT_FLOAT32
                           ? "fn rt_q(v: f32) -> f32 { return v; }\n"
                           : "fn rt_q(v: f32) -> f32 { return elem_to_f32(f32_to_elem(v)); }\n");
        /* the exponent of the unit a nonzero value is a multiple of, from its magnitude bits
         * (16-bit elements: the half-word in the top half) */
        static const char *unit[] = {
            "fn unit_exp(u: u32) -> i32 { return max(i32(u >> 23u), 1) - 150; }\n",
            "fn unit_exp(u: u32) -> i32 { return max(i32(u >> 26u), 1) - 25; }\n",
            "fn unit_exp(u: u32) -> i32 { return max(i32(u >> 23u), 1) - 134; }\n"};
        rk_buf_puts(s, unit[c->dtype == ROPEKIT_FLOAT32 ? 0 : c->dtype == ROPEKIT_FLOAT16 ? 1 : 2]);
        /* a vector's even and odd elements as float, and back into words (16-bit; unused for
         * float32); P.zero is always 0: common.wgsl's opaque zero for the float16 rounding */
        static const char *eo[] = {
            "fn elem_even4(r: vec4<u32>) -> vec4<f32> { return bitcast<vec4<f32>>(r); }\n"
            "fn elem_odd4(r: vec4<u32>) -> vec4<f32> { return bitcast<vec4<f32>>(r); }\n"
            "fn elem_words4(lo: vec4<f32>, hi: vec4<f32>) -> vec4<u32> { return bitcast<vec4<u32>>(lo); }\n",
            "fn elem_even4(r: vec4<u32>) -> vec4<f32> { return f16x4(r & vec4<u32>(0xffffu)); }\n"
            "fn elem_odd4(r: vec4<u32>) -> vec4<f32> { return f16x4(r >> vec4<u32>(16u)); }\n"
            "fn elem_words4(lo: vec4<f32>, hi: vec4<f32>) -> vec4<u32> { return f16_words4(lo, hi, P.zero); }\n",
            "fn elem_even4(r: vec4<u32>) -> vec4<f32> { return bitcast<vec4<f32>>(r << vec4<u32>(16u)); }\n"
            "fn elem_odd4(r: vec4<u32>) -> vec4<f32> { return bitcast<vec4<f32>>(r & vec4<u32>(0xffff0000u)); }\n"
            "fn elem_words4(lo: vec4<f32>, hi: vec4<f32>) -> vec4<u32> { return bf16_words4(lo, hi, P.zero); }\n"};
        rk_buf_puts(s, eo[c->dtype == ROPEKIT_FLOAT32 ? 0 : c->dtype == ROPEKIT_FLOAT16 ? 1 : 2]);
        rk_wgsl_add_file(s, c->ar == RK_ARITH_WIDE64 ? "qknorm_sum64.wgsl" : "qknorm_sum32.wgsl");
        rk_wgsl_add_file(s, "qknorm_factor.wgsl");
        in_out(s, 1, "q", RK_WG_V4, 6, "qo", RK_WG_V4, c->q_inplace);
        in_out(s, 2, "kv", RK_WG_V4, 7, "kvo", RK_WG_V4, c->kv_inplace);
        rk_wgsl_tensor(s, 3, "w", RK_WG_F32, 1, 0);
        rk_wgsl_tensor(s, 4, "c", RK_WG_F32, 1, 0);
        rk_wgsl_tensor(s, 5, "s", RK_WG_F32, 1, 0);
        rk_wgsl_add_file(s, "qknorm_fp8.wgsl");
        rk_wgsl_add_file(s, "qknorm_row.wgsl");
        return;
    }
    prelude(s, c->k == RK_WG_F16, 64, c->ok == RK_WG_F16P || c->ok == RK_WG_BF16P ? 2 : 1,
            arith_file(c->ar), c->integer_paths,
            c->ar == RK_ARITH_WIDE64);
    rounding(s, c->ar);
    in_out(s, 1, "q", c->k, 6, "qo", c->ok, c->q_inplace);
    in_out(s, 2, "kv", c->k, 7, "kvo", c->ok, c->kv_inplace);
    rk_wgsl_tensor(s, 3, "w", RK_WG_F32, 1, 0);
    rk_wgsl_tensor(s, 4, "c", RK_WG_F32, 1, 0);
    rk_wgsl_tensor(s, 5, "s", RK_WG_F32, 1, 0);
    rk_wgsl_add_file(s, "qknorm_fp8.wgsl");
    rk_wgsl_add_file(s, "qknorm.wgsl");
}

void rk_wg_regroup_wgsl(rk_buf *s, const rk_wg_regroup_cfg *c) {
    prelude(s, c->k == RK_WG_F16, c->wg, c->ok == RK_WG_F16P || c->ok == RK_WG_BF16P ? 2 : 1,
            arith_file(c->ar), c->integer_paths,
            c->ar == RK_ARITH_WIDE64);
    rk_buf_printf(s, "const UE: u32 = %uu;\n", c->ue);
    rk_wgsl_tensor(s, 1, "x", c->k, 1, 0);
    rk_wgsl_tensor(s, 2, "o", c->ok, 0, 1);
    rk_wgsl_tensor(s, 3, "c", RK_WG_F32, 1, 0);
    rk_wgsl_tensor(s, 4, "s", RK_WG_F32, 1, 0);
    rk_wgsl_add_file(s, "regroup.wgsl");
}

const char *rk_wg_kind_name(rk_wg_kind k) {
    static const char *names[] = {"f32", "f16", "f16p", "bf16p", "f16a", "bf16a", "v4"};
    return names[k];
}
