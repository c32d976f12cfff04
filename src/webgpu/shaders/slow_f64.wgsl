// slow_f64.wgsl — the slow paths of the fast float arithmetic with shader-f64: the same results as
// the integer functions of exact_f32.wgsl, through f64. Every float32 converts to f64 exactly
// (f64_of: a subnormal from its bits), products of two float32 values are exact in f64 and never
// subnormal there, and f32_of rounds an f64 to float32 as IEEE 754 does (subnormals and overflow
// included), without the hardware conversion where that may flush or is unspecified. A sum of
// two float32 values rounded to f64 and then to float32 is the correctly rounded sum (53 >= 2*24
// + 2: double rounding is innocuous), and a dot2 with f64 products is the CPU's double
// arithmetic itself. Infinities and NaNs take the integer rules of prod_special.

// v as a double, exactly: a subnormal (which f64(v) may flush) as its integer significand times
// 2^-149 (2^-75 * 2^-74, both normal; the products are exact in f64). Branch-free (selects): it
// is inlined at every call.
fn f64_of(v: f32) -> f64 {
    let u = bitcast<u32>(v);
    let m = f64(u & 0x7fffffu) * (f64(bits_f32(0x1a000000u)) * f64(bits_f32(0x1a800000u)));
    return select(f64(v), select(m, -m, (u >> 31u) != 0u), (u & 0x7f800000u) == 0u);
}

// the bits of the float32 nearest to a finite r (ties to even): f32() in the normal range (and
// for zeros, keeping the sign); above it FLT_MAX below FLT_MAX + 2^103, infinity from there;
// below it the multiple of 2^-149 nearest to r (round() of the exactly scaled value, at most
// 2^23: the least normal). Branch-free.
fn f32_of(r: f64) -> u32 {
    let m = abs(r);
    let fmax = f64(bits_f32(0x7f7fffffu));
    let s = select(0u, 0x80000000u, r < 0.0);
    let normal = r == 0.0 || (m >= f64(bits_f32(0x00800000u)) && m <= fmax);
    let big = s | select(0x7f7fffffu, 0x7f800000u, m >= fmax + f64(bits_f32(0x73000000u)));
    let tiny = s | u32(round(min(m, f64(bits_f32(0x00800000u))) * (f64(bits_f32(0x64800000u)) * f64(bits_f32(0x65000000u))))); // 2^74 2^75
    return select(select(tiny, big, m > fmax), bitcast<u32>(f32(select(0.0, r, normal))), normal);
}

fn nonfinite(u: u32) -> bool { return (u & 0x7f800000u) == 0x7f800000u; }

// a*b rounded to float32 (the exact f64 product, rounded once)
fn mul_slow(ua: u32, ub: u32) -> u32 {
    let sp = prod_special(ua, ub);
    return select(f32_of(f64_of(bits_f32(ua)) * f64_of(bits_f32(ub))), sp, sp != 0u);
}
// a+b rounded to float32 (rounded to f64, then to float32: innocuous)
fn add_slow(ua: u32, ub: u32) -> u32 {
    let fa = nonfinite(ua);
    let fb = nonfinite(ub);
    let nan = (ua & 0x7fffffffu) > 0x7f800000u || (ub & 0x7fffffffu) > 0x7f800000u || (fa && fb && ua != ub);
    let inf = select(ub, ua, fa);
    let fin = f32_of(f64_of(bits_f32(select(ua, 0u, fa))) + f64_of(bits_f32(select(ub, 0u, fb))));
    return select(select(fin, inf, fa || fb), QNAN, nan);
}
// the CPU's float arithmetic: each product rounded to float32, then the sum
fn dot2_float_slow(ua: u32, ub: u32, uc: u32, ud: u32) -> f32 {
    return bits_f32(add_slow(mul_slow(ua, ub), mul_slow(uc, ud)));
}
// the CPU's double arithmetic: exact products, the sum rounded to double, then to float32
fn dot2_wide_slow(ua: u32, ub: u32, uc: u32, ud: u32) -> f32 {
    let r = f32_of(f64_of(bits_f32(ua)) * f64_of(bits_f32(ub)) + f64_of(bits_f32(uc)) * f64_of(bits_f32(ud)));
    return select(bits_f32(r), dot2_wide_special(ua, ub, uc, ud), any_nonfinite(ua, ub, uc, ud));
}
