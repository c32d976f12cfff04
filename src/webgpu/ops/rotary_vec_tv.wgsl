// rotary_vec_tv.wgsl — half_cs for the vector kernel with 16-byte table loads (variant "tv": both
// tables with unit column stride, every row start and offset on a 16-byte boundary, no scale, rows
// not per column as MRoPE's): one or two vector loads per table instead of a load per column.
// Same values as word_cs: the table's bits converted exactly, sin negated for the inverse.
fn neg_if_inverse(v: f32) -> f32 {
    if ((P.flags & 2u) != 0u) { return neg32(v); }
    return v;
}
fn cs_f32(c: u32, s: u32) -> vec2<f32> { return vec2<f32>(bitcast<f32>(c), neg_if_inverse(bitcast<f32>(s))); }
fn half_cs(b: u32, s: u32, k0: u32) -> array<vec4<f32>, 4> {
    let i = table_index(b, s, k0); // element offsets of column k0 (multiples of VT)
    let c0 = ld4_c(i.x / VT);
    let s0 = ld4_s(i.y / VT);
    if (VT == 4u && EW == 1u) { // float32 x and tables: columns k0 .. k0 + 3
        return array<vec4<f32>, 4>(vec4<f32>(cs_f32(c0.x, s0.x), 0.0, 0.0), vec4<f32>(cs_f32(c0.y, s0.y), 0.0, 0.0),
                                   vec4<f32>(cs_f32(c0.z, s0.z), 0.0, 0.0), vec4<f32>(cs_f32(c0.w, s0.w), 0.0, 0.0));
    }
    if (VT == 4u) { // 16-bit x, float32 tables: columns k0 .. k0 + 7 in two vectors
        let c1 = ld4_c(i.x / VT + 1u);
        let s1 = ld4_s(i.y / VT + 1u);
        return array<vec4<f32>, 4>(vec4<f32>(cs_f32(c0.x, s0.x), cs_f32(c0.y, s0.y)),
                                   vec4<f32>(cs_f32(c0.z, s0.z), cs_f32(c0.w, s0.w)),
                                   vec4<f32>(cs_f32(c1.x, s1.x), cs_f32(c1.y, s1.y)),
                                   vec4<f32>(cs_f32(c1.z, s1.z), cs_f32(c1.w, s1.w)));
    }
    // 16-bit x and tables of its type: word j holds columns k0 + 2j, k0 + 2j + 1
    // (float16: word_f assumes finite halves, w16_ok checks them; t_ok checks the widened values)
    slow_hit = slow_hit | !w16_ok(c0) | !w16_ok(s0);
    var r: array<vec4<f32>, 4>;
    for (var j = 0u; j < 4u; j++) {
        let c = word_f(c0[j]);
        let sn = word_f(s0[j]);
        r[j] = vec4<f32>(c.x, neg_if_inverse(sn.x), c.y, neg_if_inverse(sn.y));
    }
    return r;
}
