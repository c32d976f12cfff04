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
// float16: the common case (every magnitude a normal float16 after rounding, 2^-14 <= |v| <
// 65520) takes a short path for all eight values at once, in vector integer arithmetic on the
// signed bits (the sign stays in bit 31 of t); otherwise each value goes through the scalar
// function. bfloat16: the scalar rounding, branch-free (a NaN is quieted).
fn f16_words4(lo: vec4<f32>, hi: vec4<f32>) -> vec4<u32> {
    let ul = bitcast<vec4<u32>>(lo);
    let uh = bitcast<vec4<u32>>(hi);
    // 2|v| in [2^-13, 131040): (u << 1) drops the sign
    let dl = (ul << vec4<u32>(1u)) - vec4<u32>(0x71000000u);
    let dh = (uh << vec4<u32>(1u)) - vec4<u32>(0x71000000u);
    if (all(dl < vec4<u32>(0x1dffe000u)) && all(dh < vec4<u32>(0x1dffe000u))) {
        // t = u - (112 << 23) + 0xfff + lsb: the rebiased exponent and the rounded mantissa in
        // bits 13..27 (no carry into the sign: |v| >= 2^-14)
        let tl = ul + vec4<u32>(0xc8000fffu) + ((ul >> vec4<u32>(13u)) & vec4<u32>(1u));
        let th = uh + vec4<u32>(0xc8000fffu) + ((uh >> vec4<u32>(13u)) & vec4<u32>(1u));
        return ((tl >> vec4<u32>(13u)) & vec4<u32>(0x7fffu)) | ((tl >> vec4<u32>(16u)) & vec4<u32>(0x8000u)) |
               ((th << vec4<u32>(3u)) & vec4<u32>(0x7fff0000u)) | (th & vec4<u32>(0x80000000u));
    }
    var r: vec4<u32>;
    for (var i = 0u; i < 4u; i++) { r[i] = f32_to_f16_bits(lo[i]) | (f32_to_f16_bits(hi[i]) << 16u); }
    return r;
}

fn bf16_words4(lo: vec4<f32>, hi: vec4<f32>) -> vec4<u32> {
    let ul = bitcast<vec4<u32>>(lo);
    let uh = bitcast<vec4<u32>>(hi);
    let rl = select((ul + vec4<u32>(0x7fffu) + ((ul >> vec4<u32>(16u)) & vec4<u32>(1u))) >> vec4<u32>(16u),
                    (ul >> vec4<u32>(16u)) | vec4<u32>(0x40u), (ul & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u));
    let rh = select((uh + vec4<u32>(0x7fffu) + ((uh >> vec4<u32>(16u)) & vec4<u32>(1u))) & vec4<u32>(0xffff0000u),
                    (uh & vec4<u32>(0xffff0000u)) | vec4<u32>(0x400000u),
                    (uh & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u));
    return rl | rh;
}
