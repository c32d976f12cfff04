// arith_exact32.wgsl — no shader-f64: the CPU's double arithmetic reproduced with integer
// arithmetic on u32 pieces, which no shader compiler may contract or reassociate.
//   dot2(a, b, c, d) = f32(f64(a)*f64(b) + f64(c)*f64(d)) exactly as src/cpu/ref.c computes it
//   (dot2_wide_bits, exact_f32.wgsl): two exact 24x24-bit products (48 bits, exact in double),
//   their sum rounded to 53 bits (round to nearest even), then that double rounded to float32
//   (nearest even, subnormals and overflow included): the CPU's double rounding, step for step.
// Also the double accumulator of QKNorm's sums of squares (Acc) and, in round32.wgsl, correctly
// rounded float32 division and square root.

fn dot2(a: f32, b: f32, c: f32, d: f32) -> f32 {
    return dot2_wide_bits(bitcast<u32>(a), bitcast<u32>(b), bitcast<u32>(c), bitcast<u32>(d));
}
fn dot2_fast(a: f32, b: f32, c: f32, d: f32) -> f32 { return dot2(a, b, c, d); } // never slow_hit
fn dot2_slow(a: f32, b: f32, c: f32, d: f32) -> f32 { return dot2(a, b, c, d); }
// SLOW_PATH false: the fast arithmetic is already exact, so the element kernel (rotary.wgsl)
// leaves its slow path out and scales its tables with the exact mul32 (rotary_common.wgsl
// cos_sin). A second copy of the integer dot2 under a run-time `if (slow_hit)` made SwiftShader
// (through wgpu-native's naga) take minutes and over a gigabyte to compile the kernel; measured
// 2026-12-02 (bench/results-webgpu.md, "In the browser ... and on software adapters").
const SLOW_PATH: bool = false;
// ok4's window (common.wgsl): every finite value (rot_nc is exact; the window keeps NaN out of
// the vector kernel's fast narrowing, bf16_words4)
const WIN_LO: u32 = 0u;
const WIN_N: u32 = 255u;
fn rot_nc(a: f32, b: f32, c: f32, s: f32) -> vec2<f32> { return vec2<f32>(dot2(c, a, neg32(s), b), dot2(s, a, c, b)); }

// ---- doubles: (-1)^s * m * 2^e, m = 0 or 2^52 <= m < 2^53 ----
// s bit 0: sign; bit 1: +infinity seen; bit 2: NaN seen (QKNorm's sums of non-finite inputs)
struct Dx { m: vec2<u32>, e: i32, s: u32 }

fn dx_zero() -> Dx { return Dx(vec2<u32>(0u, 0u), 0, 0u); }

fn dx_to_f32(x: Dx) -> f32 {
    if ((x.s & 4u) != 0u) { return bits_f32(0x7fc00000u); }
    if ((x.s & 2u) != 0u) { return bits_f32(0x7f800000u); }
    if (u64_is0(x.m)) { return bitcast<f32>((x.s & 1u) << 31u); }
    return pack_f32(x.m, x.e, x.s & 1u);
}

// ---- QKNorm's sum-of-squares accumulator: a double, as the CPU's sixteen lanes ----
// Every term is a square (>= 0) and every sum of terms too, so the accumulator only adds
// nonnegative doubles: no cancellation, no signs. Branch-free like dot2.
alias Acc = Dx;
fn acc_zero() -> Acc { return dx_zero(); }

// x + y for nonnegative finite doubles (m = 0, or 2^52 <= m < 2^53), rounded to nearest even;
// the flags (bits 1, 2 of s) of both are kept
fn acc_sum(x: Dx, y: Dx, flags: u32) -> Dx {
    let xe = select(-100000, x.e, (x.m.x | x.m.y) != 0u);
    let ye = select(-100000, y.e, (y.m.x | y.m.y) != 0u);
    let sw = ye > xe;
    let M1 = select(x.m, y.m, sw);
    let M2 = select(y.m, x.m, sw);
    let E1 = select(xe, ye, sw);
    let dd = u32(min(E1 - select(ye, xe, sw), 63));
    // both to bit 62 (exact); the smaller right by dd with sticky (exact up to dd = 10)
    let A = vec2<u32>((M1.x << 10u) | (M1.y >> 22u), M1.y << 10u);
    let C = vec2<u32>((M2.x << 10u) | (M2.y >> 22u), M2.y << 10u);
    let k = dd & 31u;
    let hi_part = (C.x << 1u) << (31u - k);
    let small = dd < 32u;
    let lost = select(C.y != 0u || hi_part != 0u, ((C.y << 1u) << (31u - k)) != 0u, small);
    let B = vec2<u32>(select(0u, C.x >> k, small),
                      select(C.x >> k, (C.y >> k) | hi_part, small) | select(0u, 1u, lost));
    let R = u64_add(A, B); // leading bit at 62 or 63 (or R = 0: both zero)
    // round to 53 bits: drop sh = 10 or 11 bits (nearest, ties to even)
    let sh = 10u + (R.x >> 31u);
    let lo = (R.y >> sh) | (R.x << (32u - sh));
    let hi = R.x >> sh;
    let rb = (R.y >> (sh - 1u)) & 1u;
    let sticky = (R.y & ((1u << (sh - 1u)) - 1u)) != 0u;
    let up = select(0u, 1u, rb == 1u && (sticky || (lo & 1u) == 1u));
    let lo2 = lo + up;
    let hi2 = hi + select(0u, 1u, lo2 < up);
    let carry = hi2 >= 0x200000u; // rounded up to 2^53
    let m = select(vec2<u32>(hi2, lo2), vec2<u32>(0x100000u, 0u), carry);
    let e = E1 - 10 + i32(sh) + select(0, 1, carry);
    let zero = (R.x | R.y) == 0u;
    return Dx(select(m, vec2<u32>(0u, 0u), zero), select(e, 0, zero), flags);
}

fn acc_add_sq(acc: Acc, v: f32) -> Acc {
    let u = bitcast<u32>(v);
    let finite = is_finite32(v);
    let flags = (acc.s & 6u) | select(select(2u, 4u, is_nan32(v)), 0u, finite);
    // v*v exactly: 48 bits (leading bit at 46 or 47), moved to bit 52
    let g = sig32(select(0u, u, finite));
    let p = mul24(g.m, g.m);
    let sh = select(5u, 6u, p.x < 0x8000u);
    let sq = Dx(vec2<u32>((p.x << sh) | (p.y >> (32u - sh)), p.y << sh), 2 * g.e - 300 - i32(sh), 0u);
    return acc_sum(acc, sq, flags);
}
fn acc_add(a: Acc, b: Acc) -> Acc { return acc_sum(a, b, (a.s | b.s) & 6u); }
fn acc_f32(a: Acc) -> f32 { return dx_to_f32(a); }
