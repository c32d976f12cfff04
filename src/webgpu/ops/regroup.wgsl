// regroup.wgsl — InverseRotaryRegroup (DeepSeek-V4): undo the rotation of each head's trailing
// rope_head_dim pre-interleaved channels and regroup the (tokens, num_heads*head_dim) input into
// (num_groups, tokens, group_dim). Contract: ropekit.h 3.5; reference: src/cpu/ref.c.
//
// Prelude: WG, UE (feature elements per invocation: 2 when pairs of features never straddle a
// group, the nope/rope boundary or a word; else 1), accessors ld_x/raw_x, st2_o/st2raw_o,
// ld_c/ld_s (float32 tables) and dot2 (wide64 or exact32: the tables are float32).

struct Params {
    x_base: u32, o_base: u32, c_base: u32, s_base: u32,
    xs: vec4<u32>,  // input strides (n, f, -, -)
    os: vec4<u32>,  // output strides (g, n, c, -)
    cs: vec4<u32>,  // cos strides (n, t, -, -)
    ss: vec4<u32>,
    N: u32, F: u32, hd: u32, nope: u32,
    gdim: u32, units: u32, total: u32, pad0: u32,
}

@group(0) @binding(0) var<uniform> P: Params;

// Value of feature f of token n: copied channels as raw bits (is_raw), rope channels rotated back.
struct Elem { raw: u32, val: f32, is_raw: bool }

fn element(n: u32, f: u32) -> Elem {
    let xrow = P.x_base + n * P.xs.x;
    let c = f % P.hd;
    if (c < P.nope) { return Elem(raw_x(xrow + f * P.xs.y), 0.0, true); }
    let t = c - P.nope;
    let t0 = t & ~1u;
    let f0 = f - (t - t0);
    let x0 = ld_x(xrow + f0 * P.xs.y);
    let x1 = ld_x(xrow + (f0 + 1u) * P.xs.y);
    let cb = P.c_base + n * P.cs.x;
    let sb = P.s_base + n * P.ss.x;
    if (t == t0) { // y0 = x0*c0 + x1*s0 (the inverse rotation)
        return Elem(0u, dot2(x0, ld_c(cb + t0 * P.cs.y), x1, ld_s(sb + t0 * P.ss.y)), false);
    }
    // y1 = x1*c1 - x0*s1
    return Elem(0u, dot2(x1, ld_c(cb + (t0 + 1u) * P.cs.y), neg32(x0), ld_s(sb + (t0 + 1u) * P.ss.y)), false);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = linear_index(wid, nwg, lid);
    if (g >= P.total) { return; }
    let n = g / P.units;
    let f = (g % P.units) * UE;
    let grp = f / P.gdim;
    let gc = f % P.gdim;
    let o = P.o_base + grp * P.os.x + n * P.os.y + gc * P.os.z;
    let a = element(n, f);
    if (UE == 2u) { // f and f+1: both copied or one rope pair, same group, adjacent outputs
        let b = element(n, f + 1u);
        if (a.is_raw) { st2raw_o(o, P.os.z, a.raw, b.raw); } else { st2_o(o, P.os.z, a.val, b.val); }
    } else {
        if (a.is_raw) { st2raw_o(o, 0u, a.raw, a.raw); } else { st2_o(o, 0u, a.val, a.val); }
    }
}
