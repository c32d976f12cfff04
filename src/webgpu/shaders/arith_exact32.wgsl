// arith_exact32.wgsl — no shader-f64: the CPU's double arithmetic reproduced with integer
// arithmetic on u32 pieces, which no shader compiler may contract or reassociate.
//   dot2(a, b, c, d) = f32(f64(a)*f64(b) + f64(c)*f64(d)) exactly as src/cpu/ref.c computes it:
//   two exact 24x24-bit products (48 bits, exact in double), their sum rounded to 53 bits
//   (round to nearest even), then that double rounded to float32 (nearest even, subnormals and
//   overflow included): the CPU's double rounding, step for step.
// Also the double accumulator of QKNorm's sums of squares (Acc) and, in round32.wgsl, correctly
// rounded float32 division and square root.

// ---- 64-bit unsigned integers as vec2<u32>(hi, lo) ----
fn u64_shl(x: vec2<u32>, n: u32) -> vec2<u32> { // n < 64
    if (n == 0u) { return x; }
    if (n >= 32u) { return vec2<u32>(x.y << (n - 32u), 0u); }
    return vec2<u32>((x.x << n) | (x.y >> (32u - n)), x.y << n);
}
fn u64_shr(x: vec2<u32>, n: u32) -> vec2<u32> { // n < 64
    if (n == 0u) { return x; }
    if (n >= 32u) { return vec2<u32>(0u, x.x >> (n - 32u)); }
    return vec2<u32>(x.x >> n, (x.y >> n) | (x.x << (32u - n)));
}
fn u64_add(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.y + b.y;
    return vec2<u32>(a.x + b.x + select(0u, 1u, lo < a.y), lo);
}
fn u64_sub(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { // a >= b
    return vec2<u32>(a.x - b.x - select(0u, 1u, a.y < b.y), a.y - b.y);
}
fn u64_lt(a: vec2<u32>, b: vec2<u32>) -> bool { return a.x < b.x || (a.x == b.x && a.y < b.y); }
fn u64_is0(a: vec2<u32>) -> bool { return (a.x | a.y) == 0u; }
fn u64_clz(x: vec2<u32>) -> u32 {
    if (x.x != 0u) { return countLeadingZeros(x.x); }
    return 32u + countLeadingZeros(x.y);
}
// round(m / 2^n) to nearest, ties to even; 1 <= n <= 63
fn u64_round_shr(m: vec2<u32>, n: u32) -> vec2<u32> {
    let q = u64_shr(m, n);
    let rem = u64_sub(m, u64_shl(q, n));
    let half = u64_shl(vec2<u32>(0u, 1u), n - 1u);
    if (u64_lt(half, rem) || (all(rem == half) && (q.y & 1u) == 1u)) {
        return u64_add(q, vec2<u32>(0u, 1u));
    }
    return q;
}
// the exact product of two integers below 2^24 (48 bits)
fn mul24(a: u32, b: u32) -> vec2<u32> {
    let al = a & 0xffffu;
    let ah = a >> 16u;
    let bl = b & 0xffffu;
    let bh = b >> 16u;
    let ll = al * bl;
    let mid = ah * bl + al * bh; // < 2^25
    let lo = ll + (mid << 16u);
    return vec2<u32>(ah * bh + (mid >> 16u) + select(0u, 1u, lo < ll), lo);
}

// The float32 nearest (ties to even) to (-1)^s * m * 2^e, m != 0 of any width (a sticky bit may
// be jammed into bit 0 when at least two bits lie below the rounding point).
fn pack_f32(m: vec2<u32>, e: i32, s: u32) -> f32 {
    let sign = s << 31u;
    let L = i32(63u - u64_clz(m)); // position of the leading bit
    let top = e + L;               // its binary exponent
    if (top > 127) { return bitcast<f32>(sign | 0x7f800000u); }
    var sh = L - 23;
    if (top < -126) { sh = -149 - e; } // subnormal: keep the bits down to 2^-149
    if (sh >= L + 2 || sh >= 64) { return bitcast<f32>(sign); } // below half the least subnormal
    var q: vec2<u32>;
    if (sh <= 0) { q = u64_shl(m, u32(-sh)); } else { q = u64_round_shr(m, u32(sh)); }
    if (top < -126) { return bitcast<f32>(sign | q.y); } // 2^23 (a carry) encodes the least normal
    // q in [2^23, 2^24]: a carry to 2^24 moves into the exponent field (up to infinity)
    return bitcast<f32>(sign | ((u32(top + 127) << 23u) + (q.y - 0x800000u)));
}

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

// NaN and infinity bit patterns as runtime values (a constant NaN or infinity is a
// shader-creation error in WGSL)
fn bits_f32(u: u32) -> f32 { return bitcast<f32>(u); }

fn is_finite32(x: f32) -> bool { return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u; }

// A finite float32 as m * 2^(e - 150) with m normalized to [2^23, 2^24) (subnormals too); m = 0
// for zeros.
struct Sig { m: u32, e: i32 }
fn sig32(u: u32) -> Sig {
    let be = (u >> 23u) & 0xffu;
    let m = (u & 0x7fffffu) | select(0u, 0x800000u, be != 0u);
    let z = countLeadingZeros(m) - 8u; // 0 for normals; 24 for zeros (m stays 0)
    return Sig(m << z, i32(max(be, 1u)) - i32(z));
}

// dot2 in one fixed frame, written without data-dependent branches (software adapters such as
// SwiftShader run both sides of every branch, taken or not): the two exact products P1, P2
// (48 bits, leading bit at 46 or 47) are ordered by exponent and both shifted to bit 62; the
// smaller one then right by the exponent difference with every bit shifted out ORed into bit 0
// (exact for differences up to 15; beyond, A >= 2^61 and B < 2^47, so the result keeps its
// leading bit at 60 or above and the jammed bit stays far below both rounding points).
// R = A +- B (64 bits, negated if the signs differ and B > A), normalized to bit 63, rounded to
// 53 bits (the double sum), then to 24 bits (the float32: fewer below the normal range), both to
// nearest even: the CPU's two roundings.
fn dot2_exact(ua: u32, ub: u32, uc: u32, ud: u32) -> f32 {
    let a = sig32(ua);
    let b = sig32(ub);
    let c = sig32(uc);
    let d = sig32(ud);
    let p = mul24(a.m, b.m);
    let q = mul24(c.m, d.m);
    // zero products get an exponent below any other, so they are the one shifted out
    let ep = select(-100000, a.e + b.e, p.x != 0u);
    let eq = select(-100000, c.e + d.e, q.x != 0u);
    let sp = (ua ^ ub) >> 31u;
    let sq = (uc ^ ud) >> 31u;
    let sw = eq > ep;
    let P1 = select(p, q, sw);
    let P2 = select(q, p, sw);
    let E1 = select(ep, eq, sw);
    let s1 = select(sp, sq, sw);
    let s2 = select(sq, sp, sw);
    let dd = u32(min(E1 - select(eq, ep, sw), 63)); // 0 .. 63
    let A = vec2<u32>((P1.x << 15u) | (P1.y >> 17u), P1.y << 15u);
    let C = vec2<u32>((P2.x << 15u) | (P2.y >> 17u), P2.y << 15u);
    // B = C >> dd with sticky; the shifts by 32 - k written as (x << 1) << (31 - k) (k may be 0)
    let k = dd & 31u;
    let hi_part = (C.x << 1u) << (31u - k); // C.x's bits below k, moved to the top
    let lo_lost = ((C.y << 1u) << (31u - k)) != 0u;
    let small = dd < 32u;
    let B_hi = select(0u, C.x >> k, small);
    let B_lo = select(C.x >> k, (C.y >> k) | hi_part, small);
    let lost = select(C.y != 0u || hi_part != 0u, lo_lost, small);
    let B = vec2<u32>(B_hi, B_lo | select(0u, 1u, lost));
    let sub = s1 != s2;
    let Bs = select(B, ~B, sub); // A - B = A + ~B + 1
    let c0 = select(0u, 1u, sub);
    let lo0 = A.y + Bs.y;
    let lo1 = lo0 + c0;
    var R = vec2<u32>(A.x + Bs.x + select(0u, 1u, lo0 < A.y) + select(0u, 1u, lo1 < c0), lo1);
    let neg = sub && (R.x >> 31u) != 0u; // B > A (exponents within 1): negate
    let m = select(0u, 0xffffffffu, neg);
    let nlo = (R.y ^ m) - m;
    R = vec2<u32>((R.x ^ m) + select(0u, 1u, neg && nlo == 0u), nlo);
    let s = select(s1, s2, neg);
    let z = select(32u + countLeadingZeros(R.y), countLeadingZeros(R.x), R.x != 0u); // 64: R = 0
    let zk = z & 31u; // N = R << z (z < 32: two words; z >= 32: the low word moves up)
    let zb = z >= 32u;
    let zh = select(R.x, R.y, zb);
    let zl = select(R.y, 0u, zb);
    let N = vec2<u32>((zh << zk) | ((zl >> 1u) >> (31u - zk)), zl << zk);
    let top = E1 - 252 - i32(z); // binary exponent of N's leading bit
    // round to 53 bits: keep bits 63..11 (nearest, ties to even)
    let up = select(0u, 1u, (N.y & 0x7ffu) + ((N.y >> 11u) & 1u) > 0x400u);
    let lo = ((N.y >> 11u) | (N.x << 21u)) + up;
    let hi = (N.x >> 11u) + select(0u, 1u, lo < up); // r53 in [2^52, 2^53] as (hi, lo)
    // round r53 to float32: drop sh bits (29 for normal results, more below 2^-126, 55: all)
    // t = r53 >> (sh - 1): the kept bits and the first dropped one; sticky: any bit below it
    let j = u32(clamp(-98 - top, 28, 54));
    let jk = j & 31u;
    let jb = j >= 32u;
    let t = select((lo >> jk) | ((hi << 1u) << (31u - jk)), hi >> jk, jb);
    let mask = (1u << jk) - 1u;
    let sticky = select((lo & mask) != 0u, lo != 0u || (hi & mask) != 0u, jb);
    let kept = t >> 1u;
    let up2 = select(0u, 1u, (t & 1u) == 1u && (sticky || (kept & 1u) == 1u));
    // kept includes the leading bit (2^23) for normal results: the field holds top + 126;
    // a carry moves into the exponent field (up to infinity); below 2^-126 the field is 0
    let field = select(u32(top + 126), 0u, top < -126);
    let mag = select((field << 23u) + kept + up2, 0x7f800000u, top > 127);
    let zero = (R.x | R.y) == 0u;
    return bitcast<f32>(select((s << 31u) | mag, (s1 & s2) << 31u, zero)); // exact 0: +0 unless both -0
}

fn dot2(a: f32, b: f32, c: f32, d: f32) -> f32 {
    if (!(is_finite32(a) && is_finite32(b) && is_finite32(c) && is_finite32(d))) {
        return a * b + c * d; // infinities and NaNs: the same non-finite result as the CPU's
    }
    return dot2_exact(bitcast<u32>(a), bitcast<u32>(b), bitcast<u32>(c), bitcast<u32>(d));
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
