// rotary.wgsl — the general kernel (after rotary_common.wgsl): any strides, one element per
// access; the unit is the rotation of SW pairs, or (out of place only) the copy of SW channels
// of [R, H). SW is 1, or 2 for 16-bit data packed in u32 words.

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = linear_index(wid, nwg, lid);
    if (g >= P.total) { return; }
    let w = unit_of(g);
    let xo = w.xo;
    let yo = w.yo;
    let xc = P.xs.w;
    let yc = P.ys.w;
    let xn = P.xs.z;
    let yn = P.ys.z;
    if (RK_COPY && w.u >= P.units_rot) { // channels [R, H) are copied bit for bit (out of place only)
        let ch = P.R + (w.u - P.units_rot) * SW;
        var r0: array<u32, HG>;
        var r1: array<u32, HG>;
        for (var j = 0u; j < HG; j = j + 1u) {
            if (j < w.nh) {
                r0[j] = raw_x(xo + j * xn + ch * xc);
                if (SW == 2u) { r1[j] = raw_x(xo + j * xn + (ch + 1u) * xc); }
            }
        }
        for (var j = 0u; j < HG; j = j + 1u) {
            if (j < w.nh) {
                if (SW == 2u) {
                    st2raw_y(yo + j * yn + ch * yc, yc, r0[j], r1[j]);
                } else { // one channel: st2 writes e and e + step, here the same element twice
                    st2raw_y(yo + j * yn + ch * yc, 0u, r0[j], r0[j]);
                }
            }
        }
        return;
    }
    let h = P.R / 2u;
    // the unit's pairs: interleaved (2k, 2k+1), one pair; half-split (k, k + h), SW pairs
    let il = rk_il();
    let k0 = select(w.u * SW, w.u, il);
    let ia = select(k0, 2u * k0, il) * xc;       // x offsets of the first pair's two elements
    let ib = select(k0 + h, 2u * k0 + 1u, il) * xc;
    let cs0 = cos_sin(w.b, w.s, k0);
    var cs1 = cs0;
    if (SW == 2u && !il) { cs1 = cos_sin(w.b, w.s, k0 + 1u); }
    var a0: array<f32, HG>;
    var b0: array<f32, HG>;
    var a1: array<f32, HG>;
    var b1: array<f32, HG>;
    for (var j = 0u; j < HG; j = j + 1u) {
        if (j < w.nh) {
            let e = xo + j * xn;
            a0[j] = ld_x(e + ia);
            b0[j] = ld_x(e + ib);
            if (SW == 2u && !il) {
                a1[j] = ld_x(e + ia + xc);
                b1[j] = ld_x(e + ib + xc);
            }
        }
    }
    for (var j = 0u; j < HG; j = j + 1u) {
        if (j < w.nh) {
            let e = yo + j * yn;
            var r0 = rotate(a0[j], b0[j], cs0);
            var r1 = vec2<f32>(0.0, 0.0);
            if (SW == 2u && !il) { r1 = rotate(a1[j], b1[j], cs1); }
            if (SLOW_PATH && slow_hit) { // the exact arithmetic for this head's pairs (arith_*.wgsl): one call site
                for (var q = 0u; q < select(1u, 2u, SW == 2u && !il); q = q + 1u) {
                    let r = rotate_slow(select(a0[j], a1[j], q == 1u), select(b0[j], b1[j], q == 1u),
                                        cos_sin_exact(w.b, w.s, k0 + q));
                    if (q == 0u) { r0 = r; } else { r1 = r; }
                }
            }
            if (il) {
                st2_y(e + 2u * k0 * yc, yc, r0.x, r0.y);
            } else if (SW == 2u) {
                st2_y(e + k0 * yc, yc, r0.x, r1.x);
                st2_y(e + (k0 + h) * yc, yc, r0.y, r1.y);
            } else {
                st2_y(e + k0 * yc, h * yc, r0.x, r0.y);
            }
        }
    }
}
