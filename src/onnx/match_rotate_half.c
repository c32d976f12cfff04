/* Half-split RoPE sites (GPT-NeoX / HF LLaMA "rotate_half"), full or partial width:
 *
 *   out = Add(Mul(xr, U(cos)), Mul(Concat(Neg(Slice(xr, h:)), Slice(xr, :h)), U(sin)))
 *   partial: xr = Slice(x, :R) and the site output is Concat(out, Slice(x, R:))
 *
 * U is an Unsqueeze over the heads axis (axis 1: x is (B, N, S, H); axis 2: (B, S, N, H)),
 * possibly with Casts around it. Operands of Add and Mul may come in either order. The slice
 * bounds may be constants or shape arithmetic (TorchScript) that evaluates to constants. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_internal.h"

/* Unsqueeze(term, axes=[a]) with Casts on either side: returns the inner term and a. */
static const char *strip_heads_unsqueeze(const rk_graph *ix, const char *v, int64_t *axis,
                                         int32_t *cast_to) {
    v = rk_skip_casts(ix, v, cast_to);
    Onnx__NodeProto *un = rk_producer_op(ix, v, "Unsqueeze");
    if (!un) return NULL;
    int64_t axes[2];
    size_t na;
    if (!rk_eval_i64(ix, rk_input(un, 1), axes, 2, &na) || na != 1) return NULL;
    *axis = axes[0];
    return rk_input(un, 0);
}

int rk_match_rotate_half(const rk_graph *ix, const Onnx__NodeProto *neg, rk_site *site) {
    memset(site, 0, sizeof *site);
    Onnx__NodeProto *s_hi = rk_producer_op(ix, rk_input(neg, 0), "Slice");
    Onnx__NodeProto *cat = rk_single_consumer(ix, neg->output[0]);
    if (!s_hi || !cat || strcmp(cat->op_type, "Concat") != 0 || cat->n_input != 2 ||
        strcmp(rk_input(cat, 0) ? cat->input[0] : "", neg->output[0]) != 0)
        return 0;
    Onnx__NodeProto *s_lo = rk_producer_op(ix, rk_input(cat, 1), "Slice");
    if (!s_lo || !rk_input(s_lo, 0) || !rk_input(s_hi, 0) || strcmp(s_lo->input[0], s_hi->input[0]))
        return 0;
    const char *xr = s_lo->input[0];
    /* the sin product and the Add; rotate_half(x) may be widened first (x float16 or bfloat16,
     * the rotation computed in float32 against float32 cos/sin: OLMo 2), then x must be too */
    Onnx__NodeProto *mul_s = rk_single_consumer(ix, cat->output[0]);
    const char *rot = cat->output[0];
    int32_t widen = 0;
    if (mul_s && !strcmp(mul_s->op_type, "Cast") && (!mul_s->domain || !mul_s->domain[0])) {
        rk_shape src;
        rk_value_rank(ix, xr, &src);
        widen = (int32_t)rk_attr_i(mul_s, "to", 0);
        if (widen != RK_DT_FLOAT ||
            (src.elem_type != RK_DT_FLOAT16 && src.elem_type != RK_DT_BFLOAT16))
            return 0; /* only an exact widening keeps rotate_half what it is */
        rot = mul_s->output[0];
        mul_s = rk_single_consumer(ix, rot);
    }
    if (!mul_s || strcmp(mul_s->op_type, "Mul") != 0) return 0;
    const char *s_term = rk_other_operand(mul_s, rot);
    Onnx__NodeProto *add = rk_single_consumer(ix, mul_s->output[0]);
    if (!s_term || !add || strcmp(add->op_type, "Add") != 0) return 0;
    const char *c_prod = rk_other_operand(add, mul_s->output[0]);
    Onnx__NodeProto *mul_c = rk_producer_op(ix, c_prod, "Mul");
    if (!mul_c) return 0;
    const char *xsite = xr; /* what the fused op rotates: x, or x widened like rotate_half(x) */
    const char *c_term = widen ? NULL : rk_other_operand(mul_c, xr);
    for (size_t i = 0; widen && !c_term && i < 2; ++i) {
        Onnx__NodeProto *cx = rk_producer_op(ix, rk_input(mul_c, i), "Cast");
        if (cx && rk_input(cx, 0) && !strcmp(cx->input[0], xr) && rk_attr_i(cx, "to", 0) == widen)
            xsite = mul_c->input[i], c_term = rk_input(mul_c, 1 - i);
    }
    if (!c_term) return 0;
    /* the shape of rotate_half is there; its slice constants must verify */
    rk_shape xs;
    rk_value_rank(ix, xr, &xs);
    int64_t a0, b0 = 0, ax0, st0, a1, b1, ax1, st1;
    int rank = xs.rank > 0 ? xs.rank : 4;
    int evaluated = rk_slice_params(ix, s_lo, &a0, &b0, &ax0, &st0) &&
                    rk_slice_params(ix, s_hi, &a1, &b1, &ax1, &st1);
    int64_t h = b0;
    if (evaluated) {
        /* (a head wider than 2^30 channels is not a head: it also keeps 2 * h in range) */
        if (a0 != 0 || st0 != 1 || st1 != 1 || a1 != h || h <= 0 || h > ((int64_t)1 << 30) ||
            !rk_is_last_axis(ax0, rank) ||
            !rk_is_last_axis(ax1, rank) || !rk_is_last_axis(rk_attr_i(cat, "axis", 0), rank))
            return 0; /* not rotate_half after all */
        if (xs.rank > 0 && xs.dims[xs.rank - 1] >= 0 ? xs.dims[xs.rank - 1] != 2 * h : b1 < 2 * h)
            return 0; /* the two halves do not make up the tensor */
    }

    /* it is a rotate_half site: from here on, failures are reasons, not "no match" */
    site->variant = "rotate_half";
    site->interleaved = 0;
    site->anchor = rk_strdup(neg->output[0]);
    site->output = rk_strdup(add->output[0]);
    site->x = rk_strdup(xsite);
    site->rotary_dim = evaluated ? 2 * h : 0; /* unevaluated: h is not a checked width */
    site->xdims[0] = site->xdims[1] = site->xdims[2] = site->xdims[3] = -1;
    site->head_size = -1;
    site->num_heads = -1;
    if (!site->anchor || !site->output || !site->x) {
        snprintf(site->reason, RK_REASON, "out of memory");
        return 1;
    }
    if (!evaluated) {
        snprintf(site->reason, RK_REASON, "the rotate_half slice bounds of '%s' could not be "
                 "evaluated to constants (the graph lacks the shape information)", xr);
        return 1;
    }

    if (widen) /* x as the fused op sees it (a partial width then stays a slice before it) */
        xs.elem_type = widen;
    else if (rk_match_partial(ix, xr, add->output[0], 2 * h, rank, site, &xs))
        site->variant = "rotate_half_partial";
    if (xs.rank > 0 && xs.rank != 4) {
        snprintf(site->reason, RK_REASON, "rotated tensor '%s' has rank %d, expected 4", site->x,
                 xs.rank);
        return 1;
    }

    /* tables: the same heads Unsqueeze on both, then the angle source */
    int64_t c_axis, s_axis;
    int32_t cast_c = 0, cast_s = 0;
    const char *c_in = strip_heads_unsqueeze(ix, c_term, &c_axis, &cast_c);
    const char *s_in = strip_heads_unsqueeze(ix, s_term, &s_axis, &cast_s);
    if (!c_in || !s_in || c_axis != s_axis || (c_axis != 1 && c_axis != 2)) {
        snprintf(site->reason, RK_REASON, "cos/sin are not broadcast over the heads axis by "
                 "Unsqueeze(axis 1 or 2)");
        return 1;
    }
    site->layout = c_axis == 1 ? RK_LAYOUT_BNSH : RK_LAYOUT_BSNH;
    if (xs.rank == 4) {
        memcpy(site->xdims, xs.dims, sizeof site->xdims);
        site->head_size = xs.dims[3];
        site->num_heads = site->layout == RK_LAYOUT_BNSH ? xs.dims[1] : xs.dims[2];
    }
    /* the per-call rows: what the fused node reads in the default mode */
    site->cos_term = rk_strdup(c_in);
    site->sin_term = rk_strdup(s_in);
    site->term_full = 1;
    if (!site->cos_term || !site->sin_term) {
        snprintf(site->reason, RK_REASON, "out of memory");
        return 1;
    }
    /* element type: the tensor's, else the cast applied to the tables, else float */
    site->elem_type = xs.elem_type ? xs.elem_type : (cast_c ? cast_c : RK_DT_FLOAT);
    /* the angle source, for the fixed-table mode: a failure here is not a reason in the
     * default mode, which uses the graph's own rows */
    rk_angles sa;
    char why[RK_REASON] = "";
    int have = rk_match_angle_term(ix, c_in, 0, &site->angles, &cast_c, site->angle_reason,
                                   RK_REASON);
    if (have && !rk_match_angle_term(ix, s_in, 1, &sa, &cast_s, why, sizeof why)) {
        snprintf(site->angle_reason, RK_REASON, "%s", why);
        have = 0;
    } else if (have) {
        int same = rk_angles_same(&site->angles, &sa);
        rk_angles_free(&sa);
        if (!same) {
            snprintf(site->angle_reason, RK_REASON, "cos and sin come from different angle sources");
            have = 0;
        } else if (site->angles.half != h) {
            snprintf(site->angle_reason, RK_REASON, "rotate_half splits at %lld but the tables have "
                     "%lld frequencies", (long long)h, (long long)site->angles.half);
            have = 0;
        } else if (cast_c && cast_c != site->elem_type) {
            snprintf(site->angle_reason, RK_REASON, "tables are cast to %s but '%s' is %s",
                     rk_dtype_name(cast_c), site->x, rk_dtype_name(site->elem_type));
            have = 0;
        }
    }
    if (!have) rk_angles_free(&site->angles);
    if (have && site->angles.mrope)
        site->variant = site->angles.mrope_layout ? "mrope_interleaved" : "mrope_sectioned";
    rk_site_accept(site);
    return 1;
}
