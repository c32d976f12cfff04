// rotary_common.wgsl — RotaryEmbedding (ai.onnx and com.microsoft) and MRotaryEmbedding: the
// parameters and table helpers shared by the two kernels (rotary.wgsl: any strides, one
// element per access; rotary_vec.wgsl: contiguous heads, 16-byte vectors), as the CPU plan
// (src/core/internal.h, rk_rotary_plan) describes all three operators.
//
// The host prepends the variant prelude (src/webgpu/ops.c, kernels.c): constants WG (workgroup
// size), SW (elements one store writes: 1, or 2 for 16-bit data packed in u32), HG (heads per
// invocation), ROWS (0: 2D table + position ids, 1: offset + s, 2: 3D table, 3: MRoPE ids and
// sections), the x and y accessors (element kernel: ld_x/raw_x, st2_y/st2raw_y; vector kernel:
// ld4_x, st4_y; x and y may be the same buffer: in place), ld_c/ld_s/rt_c (tables), the ids
// array and dot2 (the arithmetic mode: narrow, wide64 or exact32), rk_il() (interleaved: P.flags
// bit 0, or the variant's constant) and RK_COPY (false: the dispatch copies no [R, H) channels).
//
// Both kernels: one invocation = one "unit" of one (token, group of HG heads) — SW pairs or a
// 16-byte vector — for each head of the group. The group shares the index arithmetic, the id
// and the cos/sin loads, and its x loads are all issued before the first store. Its index is
// rebuilt from a 1-D/2-D/3-D grid.

struct Params {
    x_base: u32, y_base: u32, c_base: u32, s_base: u32, // element offsets in the bound ranges
    xs: vec4<u32>,                                       // strides of (b, s, n, channel)
    ys: vec4<u32>,
    B: u32, S: u32, N: u32, R: u32,
    units_rot: u32, units: u32, total: u32, flags: u32, // flags: 1 interleaved, 2 inverse, 4 scale; bit 31 always 0 (an opaque zero, common.wgsl)
    c_rs: u32, c_cs: u32, s_rs: u32, s_cs: u32,          // 2D tables: row and column strides
    c_bs: u32, c_ss: u32, s_bs: u32, s_ss: u32,          // 3D tables: batch and sequence strides
    offset: u32, sec0: u32, sec1: u32, mlayout: u32,     // offset form; MRoPE sections and layout
    scale: f32, NG: u32, divs: u32, nrot: u32,           // NG: head groups, ceil(N / HG)
    // divs: for the divisors units, NG and S (bytes 0, 1, 2) log2 + 1 where it is a power of two,
    // 0 otherwise (then unit_of divides); the vector kernel's byte 0 is for units_rot and byte 3
    // for units - units_rot (its two ranges, rotary_vec.wgsl); nrot: the vector kernel's rotation
    // invocations, B S NG units_rot (the element kernel does not read it)
}

@group(0) @binding(0) var<uniform> P: Params;

// MRoPE: the id stream (0 T, 1 H, 2 W) of table column k (ropekit.h, MRotaryEmbedding).
fn mrope_stream(k: u32) -> u32 {
    if (P.mlayout == 0u) {
        if (k < P.sec0) { return 0u; }
        if (k < P.sec0 + P.sec1) { return 1u; }
        return 2u;
    }
    let r = k % 3u;
    let sec2 = P.R / 2u - P.sec0 - P.sec1;
    if (r == 1u && k < 3u * P.sec1) { return 1u; }
    if (r == 2u && k < 3u * sec2) { return 2u; }
    return 0u;
}

// Table element offsets (cos, sin) of column k for token (b, s).
fn table_index(b: u32, s: u32, k: u32) -> vec2<u32> {
    if (ROWS == 2u) {
        return vec2<u32>(P.c_base + b * P.c_bs + s * P.c_ss + k * P.c_cs,
                         P.s_base + b * P.s_bs + s * P.s_ss + k * P.s_cs);
    }
    var row: u32;
    if (ROWS == 1u) {
        row = P.offset + s;
    } else if (ROWS == 3u) {
        row = ids[(mrope_stream(k) * P.B + b) * P.S + s];
    } else {
        row = ids[b * P.S + s];
    }
    return vec2<u32>(P.c_base + row * P.c_rs + k * P.c_cs, P.s_base + row * P.s_rs + k * P.s_cs);
}

// cos and sin of column k as the rotation uses them: scaled (and rounded back to the table type)
// when scale != 1, sin negated for the inverse rotation. cos_sin: the scaling's fast path
// (mul32_fast: slow_hit where it does not apply); cos_sin_exact: mul32 (the kernels' slow loops).
fn cos_sin_m(b: u32, s: u32, k: u32, fast: bool) -> vec2<f32> {
    let i = table_index(b, s, k);
    var c = ld_c(i.x);
    var sn = ld_s(i.y);
    if ((P.flags & 4u) != 0u) { // the CPU's float product, rounded to the table type
        if (fast) {
            c = rt_c(mul32_fast(c, P.scale));
            sn = rt_c(mul32_fast(sn, P.scale));
        } else {
            c = rt_c(mul32(c, P.scale));
            sn = rt_c(mul32(sn, P.scale));
        }
    }
    if ((P.flags & 2u) != 0u) { sn = neg32(sn); } // on the bits (a float negation may flush)
    return vec2<f32>(c, sn);
}
fn cos_sin(b: u32, s: u32, k: u32) -> vec2<f32> { return cos_sin_m(b, s, k, SLOW_PATH); }
fn cos_sin_exact(b: u32, s: u32, k: u32) -> vec2<f32> { return cos_sin_m(b, s, k, false); }

// y0 = c*a - s*b, y1 = s*a + c*b, rounded as the Arithmetic section of ropekit.h says: rotate
// with the fast arithmetic (slow_hit set where it does not apply), rotate_slow with the exact one.
fn rotate(a: f32, b: f32, cs: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(dot2_fast(cs.x, a, neg32(cs.y), b), dot2_fast(cs.y, a, cs.x, b));
}
// rotate_nc: rotate for operands already checked (the vector kernel: x_ok on each x vector,
// t_ok on its cos/sin; rot_nc, arith_*.wgsl)
fn rotate_nc(a: f32, b: f32, cs: vec2<f32>) -> vec2<f32> { return rot_nc(a, b, cs.x, cs.y); }
fn rotate_slow(a: f32, b: f32, cs: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(dot2_slow(cs.x, a, neg32(cs.y), b), dot2_slow(cs.y, a, cs.x, b));
}

// Invocation g (g < P.total): its unit u, token (b, s), the heads in its group (nh <= HG) and
// the element offsets of the group's first head in x and y (channel 0).
struct Unit { u: u32, b: u32, s: u32, nh: u32, xo: u32, yo: u32 }
fn div_by(n: u32, d: u32, k: u32) -> u32 {
    if (k != 0u) { return n >> (k - 1u); } // uniform: the same branch for the whole dispatch
    return n / d;
}
// units: the units per (token, head group) of g's range; ku: its shift (log2 + 1, 0: divide).
fn unit_in(g: u32, units: u32, ku: u32) -> Unit {
    let th = div_by(g, units, ku);
    let tok = div_by(th, P.NG, (P.divs >> 8u) & 0xffu);
    let n0 = (th - tok * P.NG) * HG;
    let b = div_by(tok, P.S, (P.divs >> 16u) & 0xffu);
    let s = tok - b * P.S;
    return Unit(g - th * units, b, s, min(HG, P.N - n0),
                P.x_base + b * P.xs.x + s * P.xs.y + n0 * P.xs.z,
                P.y_base + b * P.ys.x + s * P.ys.y + n0 * P.ys.z);
}
fn unit_of(g: u32) -> Unit { return unit_in(g, P.units, P.divs & 0xffu); }
