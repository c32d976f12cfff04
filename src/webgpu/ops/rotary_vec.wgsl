// rotary_vec.wgsl — the contiguous kernel (after rotary_common.wgsl): x and y have unit channel
// stride and every head, half-head and copied span starts on a 16-byte boundary, so they are
// bound as array<vec4<u32>> and each access moves a whole 16-byte vector of VE elements (4
// float32 or 8 16-bit values). The unit is one vector: half-split, the pairs (k, k + R/2) of
// vector u and of vector u + R/(2 VE); interleaved, the VE/2 pairs inside vector u; (out of
// place only) a vector of [R, H) copied. The prelude adds VE, EW (elements per 32-bit word),
// elem_to_f32 / f32_to_elem (the element's bits <-> float, exact, integer rounding),
// elem_words4 (four words of two elements each from two float vectors, the same rounding) and
// ld4_x / st4_y (vector index), word_f (the two 16-bit elements of a word as floats). Written
// word by word, without loops over elements or arrays of them: the first version (loops filling
// arrays of eight floats) ran slower than the element kernel on NVIDIA's Vulkan driver.
//
// The invocations come in two ranges: first the rotations (units_rot per token and head group),
// then the copies of [R, H) (units - units_rot), so that a SIMD group does one or the other: with
// both in one range (units per head group, rotations first) a group of Phi-2's heads (R = 32 of
// 80) ran the rotation path for 2 of every 8 lanes and the copy path for the other 6, one after
// the other.

// The columns of one 32-bit word of a vector: EW elements (1 float32 or 2 16-bit values), cos
// and sin of its columns k and k + 1 (the second unused for float32).
fn word_cs(b: u32, s: u32, k: u32) -> vec4<f32> {
    let c0 = cos_sin(b, s, k);
    if (EW == 1u) { return vec4<f32>(c0, 0.0, 0.0); }
    return vec4<f32>(c0, cos_sin(b, s, k + 1u));
}


// Half-split, 16-bit: words wa (columns k, k+1) and wb (their partners k + R/2) rotated with cs:
// the floats of (y at wa's word, y at wb's word) for the low (.xy) and high (.zw) halves.
fn rot_split16(wa: u32, wb: u32, cs: vec4<f32>) -> vec4<f32> {
    let fa = word_f(wa);
    let fb = word_f(wb);
    return vec4<f32>(rotate_nc(fa.x, fb.x, cs.xy), rotate_nc(fa.y, fb.y, cs.zw));
}

// Half-split, float32: one column, words wa and wb.
fn rot_split32(wa: u32, wb: u32, cs: vec4<f32>) -> vec2<u32> {
    let r = rotate_nc(bitcast<f32>(wa), bitcast<f32>(wb), cs.xy);
    return vec2<u32>(bitcast<u32>(r.x), bitcast<u32>(r.y));
}

// Interleaved, 16-bit: word w holds the pair (2k, 2k+1) of column k; the pair's floats rotated.
fn rot_pair16(w: u32, cs: vec2<f32>) -> vec2<f32> {
    let f = word_f(w);
    return rotate_nc(f.x, f.y, cs);
}

// Element e of a vector (its bits) and the vector with element e replaced; with selects, not a
// dynamic component index (which Chromium's shader translation turned into a compile that did
// not finish on SwiftShader).
fn word_at(v: vec4<u32>, i: u32) -> u32 { return select(select(v.x, v.y, i == 1u), select(v.z, v.w, i == 3u), i >= 2u); }
fn elem_get(v: vec4<u32>, e: u32) -> u32 {
    if (EW == 1u) { return word_at(v, e); }
    return (word_at(v, e >> 1u) >> ((e & 1u) * 16u)) & 0xffffu;
}
fn elem_set(v: vec4<u32>, e: u32, bits: u32) -> vec4<u32> {
    var i = e;
    var w = bits;
    if (EW != 1u) {
        i = e >> 1u;
        let sh = (e & 1u) * 16u;
        w = (word_at(v, i) & ~(0xffffu << sh)) | (bits << sh);
    }
    return vec4<u32>(select(v.x, w, i == 0u), select(v.y, w, i == 1u), select(v.z, w, i == 2u), select(v.w, w, i == 3u));
}

// A head's unit again with the exact arithmetic (dot2_slow, cos_sin_exact), taken when its fast
// results met an operand or result the fast path cannot promise (slow_hit): element by element in
// a loop whose count the compiler does not know, so the slow code is inlined once. va: x's vector
// u; vc: its partner u + hv (half-split). Returns y's vector u and (half-split) u + hv, the same
// bits as the fast code's (f32_to_elem rounds as elem_words4).
fn slow_vec(b: u32, s: u32, k0: u32, il: bool, va: vec4<u32>, vc: vec4<u32>) -> array<vec4<u32>, 2> {
    var o0 = vec4<u32>(0u);
    var o1 = vec4<u32>(0u);
    for (var i = 0u; i < select(VE, VE / 2u, il); i = i + 1u) {
        let ea = select(i, 2u * i, il);
        let xa = elem_to_f32(elem_get(va, ea));
        let xb = elem_to_f32(elem_get(select(vc, va, il), select(i, ea + 1u, il)));
        let y = rotate_slow(xa, xb, cos_sin_exact(b, s, k0 + i));
        o0 = elem_set(o0, ea, f32_to_elem(y.x));
        if (il) { o0 = elem_set(o0, ea + 1u, f32_to_elem(y.y)); } else { o1 = elem_set(o1, i, f32_to_elem(y.y)); }
    }
    return array<vec4<u32>, 2>(o0, o1);
}

// After the fast stores of an invocation whose fast arithmetic met such a value: every head's
// unit again from the loaded vectors (a: x's vector u per head, c: the partners), stored over the
// fast results. One call per path keeps the slow code inlined twice per kernel.
fn redo_unit(w: Unit, yo: u32, yn: u32, il: bool, k0: u32, hv: u32, a: array<vec4<u32>, HG>,
             c: array<vec4<u32>, HG>) {
    for (var j = 0u; j < w.nh; j = j + 1u) {
        let o = slow_vec(w.b, w.s, k0, il, a[j], c[j]);
        st4_y(yo + j * yn + w.u, o[0]);
        if (!il) { st4_y(yo + j * yn + w.u + hv, o[1]); }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = linear_index(wid, nwg, lid);
    if (g >= P.total) { return; }
    let xn = P.xs.z / VE; // head strides in vectors (the host checked every offset and stride)
    let yn = P.ys.z / VE;
    let nrot = P.nrot; // invocations of the rotation range: B S NG units_rot
    if (RK_COPY && g >= nrot) { // channels [R, H) are copied bit for bit (out of place only)
        let w = unit_in(g - nrot, P.units - P.units_rot, (P.divs >> 24u) & 0xffu);
        let q = P.R / VE + w.u;
        let xo = w.xo / VE;
        let yo = w.yo / VE;
        var r: array<vec4<u32>, HG>;
        for (var j = 0u; j < HG; j = j + 1u) {
            if (j < w.nh) { r[j] = ld4_x(xo + j * xn + q); }
        }
        for (var j = 0u; j < HG; j = j + 1u) {
            if (j < w.nh) { st4_y(yo + j * yn + q, r[j]); }
        }
        return;
    }
    let w = unit_in(g, P.units_rot, P.divs & 0xffu);
    let xo = w.xo / VE;
    let yo = w.yo / VE;
    if (rk_il()) { // interleaved: vector u holds VE/2 pairs (2k, 2k+1), k from k0
        let k0 = w.u * (VE / 2u);
        var a: array<vec4<u32>, HG>;
        for (var j = 0u; j < HG; j = j + 1u) {
            if (j < w.nh) { a[j] = ld4_x(xo + j * xn + w.u); }
        }
        if (EW == 1u) { // float32: pairs (x, y) and (z, w)
            let c0 = vec4<f32>(cos_sin(w.b, w.s, k0), 0.0, 0.0);
            let c1 = vec4<f32>(cos_sin(w.b, w.s, k0 + 1u), 0.0, 0.0);
            slow_hit = slow_hit | !t_ok(bitcast<vec4<u32>>(vec4<f32>(c0.xy, c1.xy)));
            for (var j = 0u; j < HG; j = j + 1u) {
                if (j < w.nh) {
                    let v = a[j];
                    slow_hit = slow_hit | !x_ok(v);
                    let p0 = rot_split32(v.x, v.y, c0);
                    let p1 = rot_split32(v.z, v.w, c1);
                    st4_y(yo + j * yn + w.u, vec4<u32>(p0.x, p0.y, p1.x, p1.y));
                }
            }
        } else { // 16-bit: one pair per word
            let c0 = cos_sin(w.b, w.s, k0);
            let c1 = cos_sin(w.b, w.s, k0 + 1u);
            let c2 = cos_sin(w.b, w.s, k0 + 2u);
            let c3 = cos_sin(w.b, w.s, k0 + 3u);
            slow_hit = slow_hit | !t_ok(bitcast<vec4<u32>>(vec4<f32>(c0, c1))) | !t_ok(bitcast<vec4<u32>>(vec4<f32>(c2, c3)));
            for (var j = 0u; j < HG; j = j + 1u) {
                if (j < w.nh) {
                    let v = a[j];
                    slow_hit = slow_hit | !x_ok(v);
                    let r0 = rot_pair16(v.x, c0);
                    let r1 = rot_pair16(v.y, c1);
                    let r2 = rot_pair16(v.z, c2);
                    let r3 = rot_pair16(v.w, c3);
                    st4_y(yo + j * yn + w.u, elem_words4(vec4<f32>(r0.x, r1.x, r2.x, r3.x),
                                                         vec4<f32>(r0.y, r1.y, r2.y, r3.y)));
                }
            }
        }
        if (slow_hit) { redo_unit(w, yo, yn, true, k0, 0u, a, a); }
        return;
    }
    // half-split: vector u holds columns k0 .. k0 + VE - 1, vector u + hv their partners
    let k0 = w.u * VE;
    let hv = P.R / (2u * VE);
    let cs = half_cs(w.b, w.s, k0); // rotary_vec_cs.wgsl or rotary_vec_tv.wgsl
    let cs0 = cs[0];
    let cs1 = cs[1];
    let cs2 = cs[2];
    let cs3 = cs[3];
    var a: array<vec4<u32>, HG>;
    var c: array<vec4<u32>, HG>;
    for (var j = 0u; j < HG; j = j + 1u) {
        if (j < w.nh) {
            a[j] = ld4_x(xo + j * xn + w.u);
            c[j] = ld4_x(xo + j * xn + w.u + hv);
        }
    }
    // the operand checks after every load is issued (checks between the loads of the heads of a
    // group made the float32 kernel slower on the H200)
    if (EW == 1u) {
        slow_hit = slow_hit | !t_ok(bitcast<vec4<u32>>(vec4<f32>(cs0.xy, cs1.xy))) |
                   !t_ok(bitcast<vec4<u32>>(vec4<f32>(cs2.xy, cs3.xy)));
    } else {
        slow_hit = slow_hit | !t_ok(bitcast<vec4<u32>>(cs0)) | !t_ok(bitcast<vec4<u32>>(cs1)) |
                   !t_ok(bitcast<vec4<u32>>(cs2)) | !t_ok(bitcast<vec4<u32>>(cs3));
    }
    for (var j = 0u; j < HG; j = j + 1u) {
        if (j < w.nh) {
            let va = a[j];
            let vc = c[j];
            slow_hit = slow_hit | !x_ok(va) | !x_ok(vc);
            if (EW == 1u) {
                let w0 = rot_split32(va.x, vc.x, cs0);
                let w1 = rot_split32(va.y, vc.y, cs1);
                let w2 = rot_split32(va.z, vc.z, cs2);
                let w3 = rot_split32(va.w, vc.w, cs3);
                st4_y(yo + j * yn + w.u, vec4<u32>(w0.x, w1.x, w2.x, w3.x));
                st4_y(yo + j * yn + w.u + hv, vec4<u32>(w0.y, w1.y, w2.y, w3.y));
            } else { // r.x, r.y: the low halves of y's words at u and u + hv; r.z, r.w: the high
                let r0 = rot_split16(va.x, vc.x, cs0);
                let r1 = rot_split16(va.y, vc.y, cs1);
                let r2 = rot_split16(va.z, vc.z, cs2);
                let r3 = rot_split16(va.w, vc.w, cs3);
                st4_y(yo + j * yn + w.u, elem_words4(vec4<f32>(r0.x, r1.x, r2.x, r3.x),
                                                     vec4<f32>(r0.z, r1.z, r2.z, r3.z)));
                st4_y(yo + j * yn + w.u + hv, elem_words4(vec4<f32>(r0.y, r1.y, r2.y, r3.y),
                                                          vec4<f32>(r0.w, r1.w, r2.w, r3.w)));
            }
        }
    }
    if (slow_hit) { redo_unit(w, yo, yn, false, k0, hv, a, c); }
}
