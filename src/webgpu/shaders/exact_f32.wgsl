// exact_f32.wgsl — float arithmetic on the bits, in integers, with IEEE 754's results (round to
// nearest even, subnormals, overflow to infinity, NaN for invalid operations) whatever the
// adapter does with subnormals (WGSL lets an implementation flush them: NVIDIA's Vulkan driver
// flushes float32 ones) and with a*b + c*d (which it may fuse). Included by every arithmetic
// (arith_*.wgsl): the exact32 one computes with these functions only; the narrow and wide64 ones
// take a float fast path where its operands and result are such that the hardware's result is
// the same whatever it does, and leave every other element to the slow path: these functions
// (slow_int.wgsl) or, with shader-f64, the same results through exact f64 products and sums
// (slow_f64.wgsl: much less code, which matters as it is inlined at every call). FAST (a prelude
// constant, false with ROPEKIT_WEBGPU_INTEGER_PATHS=1) turns the fast paths off,
// so that tests reach these functions on any adapter.

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
// the exact product of two integers below 2^24 (48 bits), as (hi, lo); exact for any a, b below
// 2^31 (mid stays below 2^32): QKNorm's factor (qknorm_factor.wgsl) multiplies values below 2^26
fn mul24(a: u32, b: u32) -> vec2<u32> {
    let al = a & 0xffffu;
    let ah = a >> 16u;
    let bl = b & 0xffffu;
    let bh = b >> 16u;
    let ll = al * bl;
    let mid = ah * bl + al * bh; // < 2^25 (a, b < 2^24); < 2^32 (a, b < 2^31)
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

// Set by the fast functions (dot2_fast, mul32_fast) when an element needs the slow path: the
// rotary kernels compute a unit with them, then compute it again with the exact functions in a
// loop when it is set, so that the slow code is inlined once per head rather than at every call.
var<private> slow_hit: bool = false;

// -x on the bits (a float negation may flush a subnormal)
fn neg32(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) ^ 0x80000000u); }

const QNAN: u32 = 0x7fc00000u; // the NaN these functions return (IEEE leaves sign and payload open)

// The float32 nearest (ties to even) to (-1)^s * m * 2^(e - 156): m < 2^30 with its leading bit
// at 29 (24 significand bits and 6 guard bits, bit 0 sticky) when e >= 1; e <= 0 (a subnormal
// result) is shifted into the subnormal frame here; e >= 255 (or a rounding carry) is infinity.
// All in u32 (the slow paths' code stays small: it is inlined at every call).
fn pack32(s: u32, e: i32, m: u32) -> u32 {
    var mm = m;
    var ee = e;
    if (ee < 1) {
        let sh = u32(1 - ee);
        mm = select(select(0u, 1u, m != 0u), (m >> sh) | select(0u, 1u, (m & ((1u << sh) - 1u)) != 0u), sh < 31u);
        ee = 1;
    }
    let r = mm >> 6u;
    let rem = mm & 63u;
    let up = select(0u, 1u, rem > 32u || (rem == 32u && (r & 1u) == 1u));
    var bits = u32(min(ee, 255) - 1) * 0x800000u + r + up;
    if (ee >= 255 || bits >= 0x7f800000u) { bits = 0x7f800000u; }
    return (s << 31u) | bits;
}

// a*b rounded to float32 (IEEE 754) on the bits: the 48-bit product's top 30 bits with a sticky
// bit, rounded once by pack32
fn mul_bits(ua: u32, ub: u32) -> u32 {
    let s = (ua ^ ub) & 0x80000000u;
    let aa = ua & 0x7fffffffu;
    let ab = ub & 0x7fffffffu;
    if (aa > 0x7f800000u || ab > 0x7f800000u) { return QNAN; }
    if (aa == 0x7f800000u || ab == 0x7f800000u) { return select(s | 0x7f800000u, QNAN, aa == 0u || ab == 0u); }
    if (aa == 0u || ab == 0u) { return s; }
    let A = sig32(aa);
    let B = sig32(ab);
    let p = mul24(A.m, B.m); // [2^46, 2^48)
    let k = select(17u, 18u, p.x >= 0x8000u);
    let m = (p.x << (32u - k)) | (p.y >> k) | select(0u, 1u, (p.y & ((1u << k) - 1u)) != 0u);
    return pack32(s >> 31u, A.e + B.e - 144 + i32(k), m);
}

// a+b rounded to float32 (IEEE 754) on the bits: both significands with 6 guard bits, the
// smaller shifted right with its lost bits ORed into bit 0 (bits are lost only for shifts of 2
// or more, when the result keeps its leading bit at 28 or above), normalized, rounded once.
fn add_bits(ua: u32, ub: u32) -> u32 {
    let aa = ua & 0x7fffffffu;
    let ab = ub & 0x7fffffffu;
    if (aa > 0x7f800000u || ab > 0x7f800000u) { return QNAN; }
    if (aa == 0x7f800000u) { return select(ua, QNAN, ab == 0x7f800000u && ua != ub); }
    if (ab == 0x7f800000u) { return ub; }
    if (aa == 0u) { return select(ub, ua & ub, ab == 0u); } // -0 + -0 = -0; +0 + -0 = +0
    if (ab == 0u) { return ua; }
    let sw = ab > aa;
    let ux = select(ua, ub, sw); // the larger magnitude
    let uy = select(ub, ua, sw);
    let X = sig32(ux & 0x7fffffffu);
    let Y = sig32(uy & 0x7fffffffu);
    let d = u32(X.e - Y.e);
    let my0 = Y.m << 6u;
    let my = select(1u, (my0 >> d) | select(0u, 1u, (my0 & ((1u << d) - 1u)) != 0u), d < 31u);
    var m = X.m << 6u;
    if (((ux ^ uy) >> 31u) != 0u) { m = m - my; } else { m = m + my; }
    if (m == 0u) { return 0u; } // exact cancellation: +0
    var e = X.e;
    if (m >= 0x40000000u) {
        m = (m >> 1u) | (m & 1u);
        e = e + 1;
    } else {
        let z = countLeadingZeros(m) - 2u; // to bit 29 (exact: no bits were lost when z > 1)
        m = m << z;
        e = e - i32(z);
    }
    return pack32(ux >> 31u, e, m);
}

// a*b + c*d as the CPU computes it in float (x and tables both 16-bit): each product rounded to
// float32, then their sum
fn dot2_float_bits(ua: u32, ub: u32, uc: u32, ud: u32) -> f32 {
    return bitcast<f32>(add_bits(mul_bits(ua, ub), mul_bits(uc, ud)));
}

// A product in double with an infinite or NaN operand: NaN (NaN operand, or infinity times
// zero), a signed infinity; 0 when both operands are finite (a finite double: float32 products
// never overflow it).
fn prod_special(ua: u32, ub: u32) -> u32 {
    let aa = ua & 0x7fffffffu;
    let ab = ub & 0x7fffffffu;
    if (aa > 0x7f800000u || ab > 0x7f800000u) { return QNAN; }
    if (aa == 0x7f800000u || ab == 0x7f800000u) {
        return select(((ua ^ ub) & 0x80000000u) | 0x7f800000u, QNAN, aa == 0u || ab == 0u);
    }
    return 0u;
}

// a*b + c*d in double with an infinite or NaN operand: NaN or an infinity
fn dot2_wide_special(ua: u32, ub: u32, uc: u32, ud: u32) -> f32 {
    let p = prod_special(ua, ub);
    let q = prod_special(uc, ud);
    if (p == QNAN || q == QNAN || (p != 0u && q != 0u && p != q)) { return bits_f32(QNAN); } // inf - inf
    return bits_f32(select(q, p, p != 0u));
}
fn any_nonfinite(ua: u32, ub: u32, uc: u32, ud: u32) -> bool {
    return ((ua & 0x7f800000u) == 0x7f800000u) || ((ub & 0x7f800000u) == 0x7f800000u) ||
           ((uc & 0x7f800000u) == 0x7f800000u) || ((ud & 0x7f800000u) == 0x7f800000u);
}

// a*b + c*d as the CPU computes it in double, rounded to float32 (x or tables float32)
fn dot2_wide_bits(ua: u32, ub: u32, uc: u32, ud: u32) -> f32 {
    if (any_nonfinite(ua, ub, uc, ud)) { return dot2_wide_special(ua, ub, uc, ud); }
    return dot2_exact(ua, ub, uc, ud);
}

// mul32's fast path applies: both zero or normal and the product's exponent keeps it normal
// (exponent fields summing to 128 .. 379: at least 2^-126, below 2^127)
fn mul32_ok(ua: u32, ub: u32) -> bool {
    let ea = (ua >> 23u) & 0xffu;
    let eb = (ub >> 23u) & 0xffu;
    let za = (ua & 0x7fffffffu) == 0u;
    let zb = (ub & 0x7fffffffu) == 0u;
    return FAST & ((ea - 1u < 254u) | za) & ((eb - 1u < 254u) | zb) & (za | zb | (ea + eb - 128u < 252u));
}

// a*b in float32: the hardware's product where mul32_ok, else on the bits
fn mul32(a: f32, b: f32) -> f32 {
    if (mul32_ok(bitcast<u32>(a), bitcast<u32>(b))) { return a * b; }
    return bitcast<f32>(mul_slow(bitcast<u32>(a), bitcast<u32>(b)));
}

// mul32's fast path alone (slow_hit set where it does not apply)
fn mul32_fast(a: f32, b: f32) -> f32 {
    slow_hit = slow_hit | !mul32_ok(bitcast<u32>(a), bitcast<u32>(b));
    return a * b;
}

// a+b in float32: the hardware's sum when both are zero or in [2^-103, 2^126) (exponent fields
// 24 .. 252: the sum of such values is zero or at least 2^-126 in magnitude, and finite), else on
// the bits
fn add32(a: f32, b: f32) -> f32 {
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    let oka = (((ua >> 23u) & 0xffu) - 24u < 229u) | ((ua & 0x7fffffffu) == 0u);
    let okb = (((ub >> 23u) & 0xffu) - 24u < 229u) | ((ub & 0x7fffffffu) == 0u);
    if (FAST & oka & okb) { return a + b; }
    return bitcast<f32>(add_slow(ua, ub));
}
