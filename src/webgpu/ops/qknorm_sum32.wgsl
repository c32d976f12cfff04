// qknorm_sum32.wgsl — the row kernel's fast sum of squares without shader-f64 (see
// qknorm_row.wgsl), in integers: no rounding, no subnormal or fused arithmetic involved.
// A partial sum is m * 2^(e - 304) (m a 64-bit integer; a square v*v = s*s * 2^(2x - 300) for
// v = s * 2^(x - 150), s < 2^24, enters as m = s*s << 4 < 2^52 with e = 2x): adding two aligns
// the one with the smaller e to the larger (a right shift), and every shift that drops a nonzero
// bit counts in k. The result T * 2^(e - 304) is never above the exact sum S and less than k units
// 2^(e - 304) below it (each drop is below one unit of a scale that only grows); with at most 2048
// squares of at most 2^52 units each, m stays below 2^63. Order-independent: the same T and k
// come from any order of the same aligned terms is NOT claimed; the bounds hold for every order.
struct Fs { m: vec2<u32>, e: i32, k: u32, fl: u32 } // fl: 2 an infinity seen, 4 a NaN seen

fn fs_zero() -> Fs { return Fs(vec2<u32>(0u, 0u), -100000, 0u, 0u); }

// x >> n (n >= 0, any size) and whether a nonzero bit was dropped
fn fs_shr(x: vec2<u32>, n: i32) -> vec3<u32> {
    if (n <= 0) { return vec3<u32>(x, 0u); }
    if (n >= 64) { return vec3<u32>(0u, 0u, select(0u, 1u, !u64_is0(x))); }
    let q = u64_shr(x, u32(n));
    return vec3<u32>(q, select(0u, 1u, any(u64_shl(q, u32(n)) != x)));
}

fn fs_add(a: Fs, b: Fs) -> Fs {
    let sw = b.e > a.e;
    let e = select(a.e, b.e, sw);
    let sh = fs_shr(select(b.m, a.m, sw), e - select(b.e, a.e, sw));
    return Fs(u64_add(select(a.m, b.m, sw), sh.xy), e, a.k + b.k + sh.z, a.fl | b.fl);
}

fn fs_add_sq(a: Fs, v: f32) -> Fs {
    let u = bitcast<u32>(v);
    if (!is_finite32(v)) { return Fs(a.m, a.e, a.k, a.fl | select(2u, 4u, is_nan32(v))); }
    if ((u & 0x7fffffffu) == 0u) { return a; }
    let g = sig32(u);
    let p = mul24(g.m, g.m);
    return fs_add(a, Fs(u64_shl(p, 4u), 2 * g.e, 0u, 0u));
}

// the RL partial sums part[o .. o + RL - 1] of a row (a loop: the integer addition is long, and
// software adapters compile every inlined copy)
fn fs_row(o: u32) -> Fs {
    var a = part[o];
    for (var i = 1u; i < RL; i++) { a = fs_add(a, part[o + i]); }
    return a;
}

// the factor 1 / sqrt(v) (qknorm_factor.wgsl: the adapter's float32 candidates proven in
// integers; round32.wgsl's bit-by-bit loops where they do not settle)
fn qk_factor(v: f32) -> f32 { return qf_recip(qf_sqrt(v)); }

// (float32 bits, 1) where every summation order the contract allows gives that float32, else
// (0, 0). none: every value zero (the sum is +0). g: every square is a multiple of 2^g.
//  - k = 0 and T < 2^(g + 53) (in value): T is the exact sum, and every partial sum of the
//    contract's order is a multiple of 2^g below 2^(g + 53), so exact in double: the float32 is T
//    rounded once;
//  - else the contract's sum lies within 131 * 2^-53 * S of S (all terms >= 0, at most
//    131 roundings on a path for head_dim <= 2048), so in [T - d, T + k + d] units with
//    d = (T + k) / 2^44 + 1; where both ends round to the same float32, every value between
//    does (rounding is monotone).
fn fs_f32(a: Fs, g: i32, none: bool) -> vec2<u32> {
    if (none) { return vec2<u32>(0u, 1u); }
    if (a.fl != 0u || u64_is0(a.m)) { return vec2<u32>(0u, 0u); }
    let U = a.e - 304;
    let top = i32(63u - u64_clz(a.m)) + U; // the exponent of T's leading bit
    let c = bitcast<u32>(pack_f32(a.m, U, 0u));
    if (a.k == 0u && top < g + 53) { return vec2<u32>(c, 1u); }
    let tk = u64_add(a.m, vec2<u32>(0u, a.k));
    let d = u64_add(u64_shr(tk, 44u), vec2<u32>(0u, 1u));
    let l = bitcast<u32>(pack_f32(u64_sub(a.m, d), U, 0u));
    let h = bitcast<u32>(pack_f32(u64_add(tk, d), U, 0u));
    return vec2<u32>(c, select(0u, 1u, l == c && h == c));
}
