// common.wgsl — bit-exact conversions shared by every ropekit kernel.
// 16-bit values are widened and narrowed with integer arithmetic (round to nearest even), never
// with the compiler's conversions, whose rounding WGSL leaves to the implementation.

fn f16_bits_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) { // zero or subnormal: m * 2^-24 (exact: an integer below 2^10 times a power of 2)
        return bitcast<f32>(s | bitcast<u32>(f32(m) * 5.9604644775390625e-8));
    }
    if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}

fn f32_to_f16_bits(f: f32) -> u32 {
    let u = bitcast<u32>(f);
    let sign = (u >> 16u) & 0x8000u;
    let a = u & 0x7fffffffu;
    if (a > 0x7f800000u) { return sign | 0x7e00u | ((a >> 13u) & 0x3ffu); } // NaN stays NaN
    if (a >= 0x477ff000u) { return sign | 0x7c00u; }                       // >= 65520: inf
    if (a < 0x38800000u) {                                                   // subnormal result
        let e = a >> 23u;
        if (e < 102u) { return sign; }
        let m = (a & 0x7fffffu) | 0x800000u;
        let shift = 126u - e; // 14 .. 24
        var r = m >> shift;
        let rem = m & ((1u << shift) - 1u);
        let half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u) == 1u)) { r = r + 1u; }
        return sign | r;
    }
    return sign | (((a - 0x38000000u) + 0xfffu + ((a >> 13u) & 1u)) >> 13u);
}

// Eight packed float16 values (two per word) all zero or normal (no infinity, NaN or subnormal):
// the halves' magnitudes a (15 bits, no carry between the halves in these sums): a >= 0x7c00
// sets bit 15 of a + 0x0400; 1 <= a < 0x400 (a subnormal) sets it in a + 0x7fff but not in
// a + 0x7c00.
fn f16_plain8(v: vec4<u32>) -> bool {
    let a = v & vec4<u32>(0x7fff7fffu);
    let sub = (a + vec4<u32>(0x7fff7fffu)) & ~(a + vec4<u32>(0x7c007c00u));
    return all((((a + vec4<u32>(0x04000400u)) | sub) & vec4<u32>(0x80008000u)) == vec4<u32>(0u));
}

fn bf16_bits_to_f32(h: u32) -> f32 { return bitcast<f32>(h << 16u); }

fn f32_to_bf16_bits(f: f32) -> u32 {
    let u = bitcast<u32>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 0x40u; } // quiet NaN
    return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;
}

// The next float32 above / below a finite positive x (used to correct a rounding by one step).
fn next_up_pos(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) + 1u); }
fn next_down_pos(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) - 1u); }

fn is_nan32(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }

// Linear invocation index of a 1-D, 2-D or 3-D grid of WG-wide workgroups.
fn linear_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return ((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * WG + lid;
}

// Four words of two 16-bit values each (element lo[i] in the low half of word i, hi[i] in the
// high half), rounded to nearest even with the same bits as f32_to_f16_bits / f32_to_bf16_bits.
// z is a zero the shader compiler cannot see (the kernel passes a uniform that is always 0).
// float16: the common case (FAST, every magnitude a normal float16 after rounding, 2^-14 <= |v| <
// 65520, checked on the bits) is rounded in float32 arithmetic (f16_round_common) and converted
// by pack2x16float, which is exact there (the rounded values are normal float16s); otherwise each
// value goes through the scalar function. bfloat16: the scalar rounding, branch-free (a NaN is
// quieted).
//
// f16_round_common: r = (v + M) - M with M = +-1.5 * 2^(e + 13) of v's sign and binary exponent
// e is RN16(v). It relies on float32 addition and subtraction rounding to nearest even (as
// arith_narrow.wgsl already does) and on nothing else: no multiplication (nothing a fused
// multiply-add could contract), no subnormal operand or result (v, M, v + M and r are normal),
// and v + M passes through an integer xor with z, so that no compiler can fold (v + M) - M to v
// (Mesa's llvmpipe does: measured). With 2^e <= |v| < 2^(e+1), -14 <= e <= 15, and u = 2^(e-10)
// the float16 spacing there: M = 3 * 2^22 * u is a multiple of u, and v + M has M's sign with
// 2^(e+13) < |v + M| < 2^(e+14), where float32's spacing is u; so float32's v + M is M + k u, k u
// the nearest multiple of u to v, ties to the even k (3 * 2^22 + k even: the last bit of the
// float32 significand). r = k u is exact (a multiple of u, |r| <= 2^(e+1): at most 12 bits);
// 2^-14 <= |r| <= 65504 (|v| < 65520): a normal float16.
fn f16_round_common(v: vec4<f32>, z: u32) -> vec4<f32> {
    let m = bitcast<vec4<f32>>((bitcast<vec4<u32>>(v) & vec4<u32>(0xff800000u)) + vec4<u32>(0x06c00000u));
    return bitcast<vec4<f32>>(bitcast<vec4<u32>>(v + m) ^ vec4<u32>(z)) - m;
}
fn f16_words4(lo: vec4<f32>, hi: vec4<f32>, z: u32) -> vec4<u32> {
    let ul = bitcast<vec4<u32>>(lo);
    let uh = bitcast<vec4<u32>>(hi);
    // 2|v| in [2^-13, 131040): (u << 1) drops the sign
    let dl = (ul << vec4<u32>(1u)) - vec4<u32>(0x71000000u);
    let dh = (uh << vec4<u32>(1u)) - vec4<u32>(0x71000000u);
    if (FAST && all(dl < vec4<u32>(0x1dffe000u)) && all(dh < vec4<u32>(0x1dffe000u))) {
        let rl = f16_round_common(lo, z);
        let rh = f16_round_common(hi, z);
        return vec4<u32>(pack2x16float(vec2<f32>(rl.x, rh.x)), pack2x16float(vec2<f32>(rl.y, rh.y)),
                         pack2x16float(vec2<f32>(rl.z, rh.z)), pack2x16float(vec2<f32>(rl.w, rh.w)));
    }
    var r: vec4<u32>;
    for (var i = 0u; i < 4u; i++) { r[i] = f32_to_f16_bits(lo[i]) | (f32_to_f16_bits(hi[i]) << 16u); }
    return r;
}

// bfloat16 narrowing of the vector kernel's fast results, which are never NaN: its operands are
// finite (ok4's windows), products and sums of such values cannot be NaN (narrow: both below 2^63,
// no overflow; wide64 and exact32: the exact double products of float32 values are finite) — an
// overflow to infinity rounds to the infinity here. z: unused (the same signature as f16_words4).
fn bf16_words4(lo: vec4<f32>, hi: vec4<f32>, z: u32) -> vec4<u32> {
    let ul = bitcast<vec4<u32>>(lo);
    let uh = bitcast<vec4<u32>>(hi);
    let rl = (ul + vec4<u32>(0x7fffu) + ((ul >> vec4<u32>(16u)) & vec4<u32>(1u))) >> vec4<u32>(16u);
    let rh = (uh + vec4<u32>(0x7fffu) + ((uh >> vec4<u32>(16u)) & vec4<u32>(1u))) & vec4<u32>(0xffff0000u);
    return rl | rh;
}

// The vector kernel's operand checks (ok4 of float32 bits, bf16_ok8 of eight packed bfloat16
// values): every value zero or with a biased exponent in WIN_LO .. WIN_LO + WIN_N - 1, the window
// of the arithmetic (arith_*.wgsl; WIN_LO + WIN_N <= 256). bf16_ok8 on both halves of a word at
// once: the 15-bit magnitude a of a half is at least k << 7 exactly when a + 0x8000 - (k << 7)
// sets bit 15 (no carry between the halves: a <= 0x7fff), nonzero when a + 0x7fff does.
fn ok4(u: vec4<u32>) -> bool {
    let a = u & vec4<u32>(0x7fffffffu);
    return FAST & all(((a - vec4<u32>(WIN_LO << 23u)) < vec4<u32>(WIN_N << 23u)) | (a == vec4<u32>(0u)));
}
fn bf16_ok8(v: vec4<u32>) -> bool {
    let k1 = 0x8000u - (WIN_LO << 7u);
    let k2 = 0x8000u - ((WIN_LO + WIN_N) << 7u);
    let a = v & vec4<u32>(0x7fff7fffu);
    let g1 = a + vec4<u32>(k1 | (k1 << 16u));
    let g2 = a + vec4<u32>(k2 | (k2 << 16u));
    let nz = a + vec4<u32>(0x7fff7fffu);
    return FAST & all(((~g1 | g2) & nz & vec4<u32>(0x80008000u)) == vec4<u32>(0u));
}
