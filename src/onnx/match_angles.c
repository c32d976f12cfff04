/* Angle sources: where a site's cos/sin come from.
 *
 * Recognized (exporters of transformers 4.x/5.x, dynamo and TorchScript):
 *   freqs  = Mul(Cast<float>(Unsqueeze(position_ids, -1)), inv_freq)             (dynamo, 5.x)
 *          | Transpose<0,2,1>(MatMul(Expand(inv_freq (1,h,1)), Unsqueeze(position_ids, 1)))
 *                                                                      (TorchScript and 4.x)
 *   emb    = Concat(freqs, freqs, axis=-1)            the HF full-width table
 *   term   = [Cast<T>] [Mul(., scaling)] Cos(emb) | Sin(emb)
 *   M-RoPE = Concat(M, M) with M = Concat(Gather(Split(Cos(freqs3))[i], i) for the 3 streams),
 *            freqs3 = Mul(Cast(Unsqueeze(position_ids (3,B,S), -1)), inv_freq)   (sectioned)
 *          | Concat(Gather(Split(term3, s + s)[i], i % 3) for i < 6), term3 the full-width term
 *            of freqs3 = Transpose<0,1,3,2>(MatMul(inv_freq (1,1,h,1), Unsqueeze(position_ids, 2)))
 *                                                             (sectioned, TorchScript and 4.x)
 *          | Concat(M, M), M = Gather(Cos(freqs3), 0) with columns o::3 of streams 1, 2 written
 *            in by ScatterElements/ScatterND          (Qwen3-VL interleaved, dynamo; Cos first)
 *          | Cos(Concat(M, M)), M = ScatterND steps on Gather(freqs3, 0)  (interleaved, 4.x)
 * inv_freq must be a constant of the graph (reached through Cast/Expand/Unsqueeze/Reshape);
 * anything computed at run time (a Where choosing long/short factors, a graph input, dynamic
 * NTK arithmetic) is refused with the reason. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_internal.h"

#define MAX_FREQ 65536

static int fail(char *reason, size_t n, const char *msg, const char *name) {
    snprintf(reason, n, msg, name ? name : "?");
    return 0;
}

/* Three M-RoPE section sizes, each in [0, half], summing to half (checked without overflow). */
static int sections_sum_to(const int64_t *sizes, int64_t half) {
    for (int i = 0; i < 3; ++i)
        if (sizes[i] < 0 || sizes[i] > half) return 0;
    return sizes[0] + sizes[1] + sizes[2] == half;
}

/* Follow an inv_freq operand back to its constant; fills a->inv_freq / a->half. */
static int trace_inv_freq(const rk_graph *ix, const char *name, rk_angles *a, char *reason,
                          size_t n) {
    for (int guard = 0; name && guard < 16; ++guard) {
        double *buf = malloc(MAX_FREQ * sizeof *buf);
        size_t count = 0;
        if (!buf) return fail(reason, n, "out of memory", NULL);
        ropekit_status cs = rk_graph_const_f64(ix, name, buf, MAX_FREQ, &count);
        if (cs == ROPEKIT_ERROR_IO || cs == ROPEKIT_ERROR_PARSE) { /* a constant it cannot read */
            free(buf);
            snprintf(reason, n, "inv_freq cannot be read: %s", ropekit_last_error());
            return 0;
        }
        if (cs == ROPEKIT_OK) {
            if (count == 0) {
                free(buf);
                return fail(reason, n, "inv_freq '%s' is empty", name);
            }
            a->inv_freq = malloc(count * sizeof *a->inv_freq);
            if (!a->inv_freq) {
                free(buf);
                return fail(reason, n, "out of memory", NULL);
            }
            for (size_t i = 0; i < count; ++i) a->inv_freq[i] = (float)buf[i];
            for (size_t i = 0; i < count; ++i)
                if (!isfinite(a->inv_freq[i])) { /* this site is skipped, the others go on */
                    snprintf(reason, n, "inv_freq '%s'[%zu] = %g is not finite", name, i,
                             (double)a->inv_freq[i]);
                    free(buf), free(a->inv_freq), a->inv_freq = NULL;
                    return 0;
                }
            a->half = (int64_t)count;
            free(buf);
            return 1;
        }
        free(buf);
        const rk_value *v = rk_graph_value(ix, name);
        if (v && (v->flags & RK_VALUE_INPUT))
            return fail(reason, n, "inv_freq comes from the graph input '%s' (computed at run "
                        "time); a static table cannot reproduce it", name);
        Onnx__NodeProto *p = rk_graph_producer(ix, name);
        if (!p) return fail(reason, n, "inv_freq '%s' has no constant source", name);
        if (!strcmp(p->op_type, "Where"))
            return fail(reason, n, "inv_freq is chosen at run time by a Where on '%s' (longrope "
                        "short/long factor switching): a static table would freeze one choice",
                        rk_input(p, 0));
        if (strcmp(p->op_type, "Cast") && strcmp(p->op_type, "Expand") &&
            strcmp(p->op_type, "Unsqueeze") && strcmp(p->op_type, "Reshape") &&
            strcmp(p->op_type, "Squeeze") && strcmp(p->op_type, "Identity")) {
            snprintf(reason, n, "inv_freq is computed at run time by %s '%s' (dynamic rope "
                     "scaling?): a static table cannot reproduce it", p->op_type, name);
            return 0;
        }
        name = rk_input(p, 0);
    }
    return fail(reason, n, "inv_freq chain too long at '%s'", name);
}

/* position ids: skip casts; must be int64 when the type is known. */
static const char *trace_positions(const rk_graph *ix, const char *name) {
    name = rk_skip_casts(ix, name, NULL);
    rk_shape sh;
    rk_graph_shape(ix, name, &sh);
    if (sh.elem_type != 0 && sh.elem_type != RK_DT_INT64) return NULL;
    return name;
}

/* The constant behind an inv_freq MatMul operand (through Cast, Identity, Expand) has shape
 * (1, ..., 1, h, 1): every frequency on the row axis, nothing else broadcast. */
static int inv_column(const rk_graph *ix, const char *name, int64_t h) {
    for (int guard = 0; name && guard < 16; ++guard) {
        const char *next = rk_skip_casts(ix, name, NULL);
        Onnx__NodeProto *ex = rk_producer_op(ix, next, "Expand");
        if (!ex) {
            name = next;
            break;
        }
        name = rk_input(ex, 0);
    }
    rk_shape sh;
    rk_graph_shape(ix, name, &sh);
    if (sh.rank < 2 || sh.dims[sh.rank - 1] != 1 || sh.dims[sh.rank - 2] != h) return 0;
    for (int i = 0; i < sh.rank - 2; ++i)
        if (sh.dims[i] != 1) return 0;
    return 1;
}

/* freqs = Mul(Cast(Unsqueeze(pos, last)), inv) or Transpose(MatMul(inv (1,h,1), pos (B,1,S))). */
static int match_freqs(const rk_graph *ix, const char *f, int pos_rank, rk_angles *a,
                       char *reason, size_t n) {
    Onnx__NodeProto *mul = rk_producer_op(ix, f, "Mul");
    if (mul) {
        for (int side = 0; side < 2; ++side) {
            const char *p = rk_skip_casts(ix, rk_input(mul, (size_t)side), NULL);
            Onnx__NodeProto *un = rk_producer_op(ix, p, "Unsqueeze");
            if (!un) continue;
            int64_t axes[2];
            size_t na;
            if (!rk_eval_i64(ix, rk_input(un, 1), axes, 2, &na) || na != 1 ||
                (axes[0] != -1 && axes[0] != pos_rank))
                continue;
            const char *pos = trace_positions(ix, rk_input(un, 0));
            if (!pos) return fail(reason, n, "position ids '%s' are not int64", rk_input(un, 0));
            if (!trace_inv_freq(ix, rk_input(mul, (size_t)(1 - side)), a, reason, n)) return 0;
            a->positions = rk_strdup(pos);
            return a->positions != NULL;
        }
        return fail(reason, n, "angle Mul '%s' does not multiply unsqueezed position ids by "
                    "inv_freq", f);
    }
    Onnx__NodeProto *tr = rk_producer_op(ix, f, "Transpose");
    if (tr && (pos_rank == 2 || pos_rank == 3)) {
        /* rank pos_rank + 1, the last two axes swapped */
        const Onnx__AttributeProto *perm = rk_node_attr(tr, "perm");
        int perm_ok = perm && perm->n_ints == (size_t)pos_rank + 1;
        for (int i = 0; perm_ok && i < pos_rank + 1; ++i)
            perm_ok = perm->ints[i] ==
                      (i == pos_rank - 1 ? pos_rank : i == pos_rank ? pos_rank - 1 : i);
        if (!perm_ok)
            return fail(reason, n, "angle Transpose '%s' does not swap the last two axes", f);
        Onnx__NodeProto *mm = rk_producer_op(ix, rk_input(tr, 0), "MatMul");
        if (!mm) return fail(reason, n, "angle Transpose '%s' does not follow a MatMul", f);
        const char *inv = rk_skip_casts(ix, rk_input(mm, 0), NULL);
        const char *p = rk_skip_casts(ix, rk_input(mm, 1), NULL);
        Onnx__NodeProto *un = rk_producer_op(ix, p, "Unsqueeze");
        int64_t axes[2];
        size_t na;
        if (!un || !rk_eval_i64(ix, rk_input(un, 1), axes, 2, &na) || na != 1 ||
            axes[0] != pos_rank - 1)
            return fail(reason, n, "MatMul angle '%s' does not multiply by Unsqueeze(position_"
                        "ids, -2)", f);
        const char *pos = trace_positions(ix, rk_input(un, 0));
        if (!pos) return fail(reason, n, "position ids '%s' are not int64", rk_input(un, 0));
        if (!trace_inv_freq(ix, inv, a, reason, n)) return 0;
        if (!inv_column(ix, inv, a->half)) {
            rk_angles_free(a);
            return fail(reason, n, "the inv_freq operand of the MatMul angle '%s' is not a "
                        "(1, ..., h, 1) column", f);
        }
        a->positions = rk_strdup(pos);
        return a->positions != NULL;
    }
    return fail(reason, n, "angles '%s' are not position_ids * inv_freq", f);
}

/* Concat(X, X') of two equivalent halves along the last axis: returns X. */
static const char *doubled_half(const rk_graph *ix, const char *v) {
    Onnx__NodeProto *cat = rk_producer_op(ix, v, "Concat");
    if (!cat || cat->n_input != 2) return NULL;
    int64_t axis = rk_attr_i(cat, "axis", 0);
    rk_shape sh;
    rk_graph_shape(ix, v, &sh);
    if (!(axis == -1 || (sh.rank > 0 && axis == sh.rank - 1))) return NULL;
    if (!rk_equivalent(ix, rk_input(cat, 0), rk_input(cat, 1), 12)) return NULL;
    return rk_input(cat, 0);
}

/* M-RoPE, sectioned: M = Concat(Gather(Split(C3)[0], 0), Gather(Split(C3)[1], 1), ...) */
static int match_mrope_sections(const rk_graph *ix, const char *m, int want_sin, rk_angles *a,
                                char *reason, size_t n) {
    Onnx__NodeProto *cat = rk_producer_op(ix, m, "Concat");
    if (!cat || cat->n_input != 3) return 0;
    const char *trig_in = NULL;
    Onnx__NodeProto *split = NULL;
    for (size_t i = 0; i < 3; ++i) {
        Onnx__NodeProto *g = rk_producer_op(ix, rk_input(cat, i), "Gather");
        int64_t idx;
        if (!g || rk_attr_i(g, "axis", 0) != 0 || !rk_eval_i64_scalar(ix, rk_input(g, 1), &idx) ||
            idx != (int64_t)i)
            return fail(reason, n, "M-RoPE section %s does not gather its own stream", rk_input(cat, i));
        Onnx__NodeProto *sp = rk_producer_op(ix, rk_input(g, 0), "Split");
        if (!sp || (split && sp != split) || sp->n_output != 3 ||
            strcmp(sp->output[i], rk_input(g, 0)) != 0)
            return fail(reason, n, "M-RoPE section '%s' is not output i of one Split", rk_input(g, 0));
        split = sp;
    }
    int64_t sizes[4];
    size_t ns;
    if (!rk_eval_i64(ix, rk_input(split, 1), sizes, 4, &ns) || ns != 3)
        return fail(reason, n, "M-RoPE Split '%s' has no constant section sizes", split->output[0]);
    int64_t axis = rk_attr_i(split, "axis", 0);
    if (axis != -1 && axis != 3) return fail(reason, n, "M-RoPE Split on '%s' is not along the last axis", rk_input(split, 0));
    Onnx__NodeProto *trig = rk_producer_op(ix, rk_input(split, 0), want_sin ? "Sin" : "Cos");
    if (!trig) return fail(reason, n, "M-RoPE sections split '%s', not Cos/Sin", rk_input(split, 0));
    trig_in = rk_input(trig, 0);
    if (!match_freqs(ix, trig_in, 3, a, reason, n)) return 0;
    if (!sections_sum_to(sizes, a->half)) {
        rk_angles_free(a);
        return fail(reason, n, "M-RoPE sections of '%s' do not sum to the frequency count", split->output[0]);
    }
    a->mrope = 1;
    a->mrope_layout = 0;
    memcpy(a->mrope_section, sizes, sizeof a->mrope_section);
    return 1;
}

/* Transpose(v, perm [2, 1, 0]): returns v. */
static const char *untranspose_210(const rk_graph *ix, const char *v) {
    Onnx__NodeProto *t = rk_producer_op(ix, v, "Transpose");
    const Onnx__AttributeProto *perm = t ? rk_node_attr(t, "perm") : NULL;
    if (!perm || perm->n_ints != 3 || perm->ints[0] != 2 || perm->ints[1] != 1 || perm->ints[2] != 0)
        return NULL;
    return rk_input(t, 0);
}

/* Gather(v, k, axis 0) with a constant k: returns v and k. */
static const char *gather0(const rk_graph *ix, const char *v, int64_t *k) {
    Onnx__NodeProto *g = rk_producer_op(ix, v, "Gather");
    if (!g || rk_attr_i(g, "axis", 0) != 0 || !rk_eval_i64_scalar(ix, rk_input(g, 1), k)) return NULL;
    return rk_input(g, 0);
}

/* One step of Qwen3-VL's interleaving, as torch.onnx (dynamo) writes
 * `freqs_t[..., offset:length:3] = freqs[stream, ..., offset:length:3]`:
 *   P' = ScatterElements(P, zeros, Unsqueeze(SS, 0), axis 0)
 *   SS = Transpose(ScatterND(Transpose(Gather(P, 0)), Unsqueeze(Slice(Range(0, h, 1), o, e, 0, 3), -1),
 *                            Transpose(Slice(Gather(P, a), o, e, 2, 3))))      (perms [2, 1, 0])
 * Returns P and fills stream a (1 or 2) and the end e; NULL if v is not such a step. */
static const char *interleave_step(const rk_graph *ix, const char *v, int *stream, int64_t *end) {
    Onnx__NodeProto *se = rk_producer_op(ix, v, "ScatterElements");
    if (!se || rk_attr_i(se, "axis", 0) != 0) return NULL;
    const Onnx__AttributeProto *red = rk_node_attr(se, "reduction");
    if (red && red->has_s && !(red->s.len == 4 && !memcmp(red->s.data, "none", 4))) return NULL;
    const char *P = rk_input(se, 0);
    /* indices: Expand(0, ...) -> every update goes to stream 0 */
    Onnx__NodeProto *ex = rk_producer_op(ix, rk_input(se, 1), "Expand");
    int64_t zero;
    if (!ex || !rk_eval_i64_scalar(ix, rk_input(ex, 0), &zero) || zero != 0) return NULL;
    Onnx__NodeProto *un = rk_producer_op(ix, rk_input(se, 2), "Unsqueeze");
    int64_t axes[2];
    size_t na;
    if (!un || !rk_eval_i64(ix, rk_input(un, 1), axes, 2, &na) || na != 1 || axes[0] != 0) return NULL;
    const char *nd_out = untranspose_210(ix, rk_input(un, 0));
    Onnx__NodeProto *nd = rk_producer_op(ix, nd_out, "ScatterND");
    if (!nd) return NULL;
    const Onnx__AttributeProto *r2 = rk_node_attr(nd, "reduction");
    if (r2 && r2->has_s && !(r2->s.len == 4 && !memcmp(r2->s.data, "none", 4))) return NULL;
    int64_t k;
    const char *base = untranspose_210(ix, rk_input(nd, 0));
    if (!base || gather0(ix, base, &k) == NULL || k != 0 || strcmp(gather0(ix, base, &k), P)) return NULL;
    /* the columns: Unsqueeze(Slice(Range(0, h, 1), o, e, axis 0, step 3), -1) */
    Onnx__NodeProto *ui = rk_producer_op(ix, rk_input(nd, 1), "Unsqueeze");
    if (!ui || !rk_eval_i64(ix, rk_input(ui, 1), axes, 2, &na) || na != 1 || axes[0] != -1) return NULL;
    Onnx__NodeProto *si = rk_producer_op(ix, rk_input(ui, 0), "Slice");
    int64_t o, e, ax, st;
    if (!si || !rk_slice_params(ix, si, &o, &e, &ax, &st) || ax != 0 || st != 3) return NULL;
    Onnx__NodeProto *rg = rk_producer_op(ix, rk_input(si, 0), "Range");
    int64_t r0, r2v;
    if (!rg || !rk_eval_i64_scalar(ix, rk_input(rg, 0), &r0) || r0 != 0 ||
        !rk_eval_i64_scalar(ix, rk_input(rg, 2), &r2v) || r2v != 1)
        return NULL;
    /* the values: Slice(Gather(P, a), o, e, axis 2 (last), step 3) with the same o, e */
    const char *upd = untranspose_210(ix, rk_input(nd, 2));
    Onnx__NodeProto *su = rk_producer_op(ix, upd, "Slice");
    int64_t o2, e2, ax2, st2;
    if (!su || !rk_slice_params(ix, su, &o2, &e2, &ax2, &st2) || o2 != o || e2 != e ||
        st2 != 3 || (ax2 != 2 && ax2 != -1))
        return NULL;
    const char *src = gather0(ix, rk_input(su, 0), &k);
    if (!src || strcmp(src, P) || (k != 1 && k != 2) || o != k) return NULL;
    *stream = (int)k;
    *end = e;
    return P;
}

/* M-RoPE, interleaved (Qwen3-VL): half = Gather(P_n, 0), P_n = step(... step(Cos(freqs3)) ...). */
static int match_mrope_interleaved(const rk_graph *ix, const char *half, int want_sin,
                                   rk_angles *a, char *reason, size_t n) {
    int64_t k;
    const char *P = gather0(ix, half, &k);
    if (!P || k != 0) return 0;
    int64_t ends[3] = {0, 0, 0};
    int steps = 0;
    for (;;) {
        int stream;
        int64_t e;
        const char *prev = interleave_step(ix, P, &stream, &e);
        if (!prev) break;
        if (ends[stream] || e < 0 || e % 3) {
            snprintf(reason, n, "M-RoPE interleaving step on '%s' repeats stream %d or has end %lld "
                     "(not 3 x section)", P, stream, (long long)e);
            return 0;
        }
        ends[stream] = e;
        P = prev;
        if (++steps > 2) break;
    }
    if (steps == 0) return 0;
    Onnx__NodeProto *trig = rk_producer_op(ix, P, want_sin ? "Sin" : "Cos");
    if (!trig) return fail(reason, n, "M-RoPE interleaving does not start from Cos/Sin at '%s'", P);
    if (!match_freqs(ix, rk_input(trig, 0), 3, a, reason, n)) return 0;
    int64_t s1 = ends[1] / 3, s2 = ends[2] / 3;
    if (s1 + s2 > a->half) {
        rk_angles_free(a);
        return fail(reason, n, "M-RoPE sections exceed the frequencies at '%s'", half);
    }
    a->mrope = 1;
    a->mrope_layout = 1;
    a->mrope_section[0] = a->half - s1 - s2;
    a->mrope_section[1] = s1;
    a->mrope_section[2] = s2;
    return 1;
}

/* Range(0, n, 1) with n = [Cast](Gather(Shape(data), k)), or a constant n (*limit, else -1). */
static int range_over_dim(const rk_graph *ix, const char *v, const char *data, int64_t k,
                          int64_t *limit) {
    Onnx__NodeProto *rg = rk_producer_op(ix, v, "Range");
    int64_t r0, r2;
    if (!rg || !rk_eval_i64_scalar(ix, rk_input(rg, 0), &r0) || r0 != 0 ||
        !rk_eval_i64_scalar(ix, rk_input(rg, 2), &r2) || r2 != 1)
        return 0;
    *limit = -1;
    Onnx__NodeProto *g = rk_producer_op(ix, rk_skip_casts(ix, rk_input(rg, 1), NULL), "Gather");
    Onnx__NodeProto *sh = g ? rk_producer_op(ix, rk_input(g, 0), "Shape") : NULL;
    int64_t gk;
    if (sh && rk_attr_i(g, "axis", 0) == 0 && rk_eval_i64_scalar(ix, rk_input(g, 1), &gk) &&
        gk == k && rk_attr_i(sh, "start", 0) == 0 && !rk_node_attr(sh, "end") && rk_input(sh, 0) &&
        !strcmp(sh->input[0], data))
        return 1;
    return rk_eval_i64_scalar(ix, rk_input(rg, 1), limit) && *limit >= 0;
}

/* Reshape(Range(0, data.shape[k], 1), [-1, 1, ..., 1] with `ones` ones). */
static int index_column(const rk_graph *ix, const char *v, const char *data, int64_t k,
                        size_t ones) {
    Onnx__NodeProto *rs = rk_producer_op(ix, v, "Reshape");
    int64_t t[4], lim;
    size_t nt;
    if (!rs || !rk_eval_i64(ix, rk_input(rs, 1), t, 4, &nt) || nt != ones + 1 || t[0] != -1)
        return 0;
    for (size_t i = 1; i < nt; ++i)
        if (t[i] != 1) return 0;
    return range_over_dim(ix, rk_input(rs, 0), data, k, &lim) && lim < 0;
}

/* Unsqueeze(Expand(c, ...), -1): returns c. */
static const char *index_piece(const rk_graph *ix, const char *v) {
    Onnx__NodeProto *un = rk_producer_op(ix, v, "Unsqueeze");
    int64_t axes[2];
    size_t na;
    if (!un || !rk_eval_i64(ix, rk_input(un, 1), axes, 2, &na) || na != 1 || axes[0] != -1)
        return NULL;
    Onnx__NodeProto *ex = rk_producer_op(ix, rk_input(un, 0), "Expand");
    return ex ? rk_input(ex, 0) : NULL;
}

/* Slice(v, o, e, last axis (2 or -1), step 3): returns v, fills o and e. */
static const char *third_slice(const rk_graph *ix, const char *v, int64_t *o, int64_t *e) {
    Onnx__NodeProto *sl = rk_producer_op(ix, v, "Slice");
    int64_t ax, st;
    if (!sl || !rk_slice_params(ix, sl, o, e, &ax, &st) || st != 3 || (ax != 2 && ax != -1))
        return NULL;
    return rk_input(sl, 0);
}

/* One step of Qwen3-VL's interleaving as TorchScript (transformers 4.x) writes
 * `freqs_t[..., offset:length:3] = freqs[stream, ..., offset:length:3]` on P (B, S, h):
 *   P' = ScatterND(P, I, U)
 *   I  = Concat(Unsqueeze(Expand(Reshape(Range(0, P.shape[0], 1), [-1, 1, 1])), -1),
 *               Unsqueeze(Expand(Reshape(Range(0, P.shape[1], 1), [-1, 1])), -1),
 *               Unsqueeze(Expand(Slice(Range(0, P.shape[2], 1), o, e, 0, 3)), -1), axis -1)
 *   U  = Reshape(Expand(Slice(Gather(F, a), o, e, 2, 3), Shape(Slice(P, o, e, 2, 3))), ...)
 * so that I[b, s, j] = (b, s, o + 3 j) and U[b, s, j] = F[a, b, s, o + 3 j]. Returns P and fills
 * the stream a (1 or 2, = o), the end e, F and the width limit (-1 when read from P's shape). */
static const char *scatter_step(const rk_graph *ix, const char *v, int *stream, int64_t *end,
                                const char **F, int64_t *width) {
    Onnx__NodeProto *nd = rk_producer_op(ix, v, "ScatterND");
    if (!nd) return NULL;
    const Onnx__AttributeProto *red = rk_node_attr(nd, "reduction");
    if (red && red->has_s && !(red->s.len == 4 && !memcmp(red->s.data, "none", 4))) return NULL;
    const char *P = rk_input(nd, 0);
    Onnx__NodeProto *ic = rk_producer_op(ix, rk_input(nd, 1), "Concat");
    if (!P || !ic || ic->n_input != 3 || rk_attr_i(ic, "axis", 0) != -1) return NULL;
    const char *c0 = index_piece(ix, rk_input(ic, 0)), *c1 = index_piece(ix, rk_input(ic, 1));
    const char *c2 = index_piece(ix, rk_input(ic, 2));
    if (!c0 || !c1 || !c2 || !index_column(ix, c0, P, 0, 2) || !index_column(ix, c1, P, 1, 1))
        return NULL;
    int64_t o, e, o2, e2, o3, e3, k, cax, cst;
    Onnx__NodeProto *cs = rk_producer_op(ix, c2, "Slice");
    if (!cs || !rk_slice_params(ix, cs, &o, &e, &cax, &cst) || cax != 0 || cst != 3 ||
        !range_over_dim(ix, rk_input(cs, 0), P, 2, width))
        return NULL;
    /* the values */
    const char *u = rk_input(nd, 2);
    Onnx__NodeProto *urs = rk_producer_op(ix, u, "Reshape");
    if (urs) u = rk_input(urs, 0);
    Onnx__NodeProto *uex = rk_producer_op(ix, u, "Expand");
    if (uex) {
        /* broadcast to the shape of the destination slice: the same (B, S, k) */
        Onnx__NodeProto *sh = rk_producer_op(ix, rk_input(uex, 1), "Shape");
        const char *dst = sh && rk_attr_i(sh, "start", 0) == 0 && !rk_node_attr(sh, "end")
                              ? third_slice(ix, rk_input(sh, 0), &o3, &e3) : NULL;
        if (!dst || strcmp(dst, P) || o3 != o || e3 != e) return NULL;
        u = rk_input(uex, 0);
    } else if (urs) {
        return NULL;
    }
    const char *src = third_slice(ix, u, &o2, &e2);
    if (!src || o2 != o || e2 != e) return NULL;
    const char *f = gather0(ix, src, &k);
    if (!f || (k != 1 && k != 2) || o != k) return NULL;
    *stream = (int)k;
    *end = e;
    *F = f;
    return P;
}

/* M-RoPE, interleaved (Qwen3-VL), TorchScript: the half is P_n = step(... step(Gather(F, 0))),
 * F the freqs of (3, B, S) positions; Cos/Sin come after (Concat(P_n, P_n)). */
static int match_mrope_scatter(const rk_graph *ix, const char *half, rk_angles *a, char *reason,
                               size_t n) {
    const char *P = half, *F = NULL;
    int64_t ends[3] = {0, 0, 0}, width = -1;
    for (int steps = 0; steps < 2; ++steps) {
        int stream;
        int64_t e, w;
        const char *f;
        const char *prev = scatter_step(ix, P, &stream, &e, &f, &w);
        if (!prev) {
            if (steps == 0 || rk_producer_op(ix, P, "ScatterND"))
                return fail(reason, n, "the ScatterND '%s' is not an M-RoPE interleaving step", P);
            break;
        }
        if (ends[stream] || e <= 0 || e % 3 || (F && strcmp(F, f)) ||
            (w >= 0 && width >= 0 && w != width)) {
            snprintf(reason, n, "M-RoPE interleaving step on '%s' repeats stream %d, has end %lld "
                     "(not 3 x section) or reads other freqs", P, stream, (long long)e);
            return 0;
        }
        if (w >= 0) width = w;
        ends[stream] = e;
        F = f;
        P = prev;
    }
    int64_t k;
    const char *base = gather0(ix, P, &k);
    if (!base || k != 0 || strcmp(base, F))
        return fail(reason, n, "M-RoPE interleaving does not start from the first stream of "
                    "the freqs at '%s'", P);
    if (!match_freqs(ix, F, 3, a, reason, n)) return 0;
    int64_t s1 = ends[1] / 3, s2 = ends[2] / 3;
    if (s1 + s2 > a->half || ends[1] > a->half || ends[2] > a->half ||
        (width >= 0 && width != a->half)) {
        rk_angles_free(a);
        return fail(reason, n, "M-RoPE sections exceed the frequencies at '%s'", half);
    }
    a->mrope = 1;
    a->mrope_layout = 1;
    a->mrope_section[0] = a->half - s1 - s2;
    a->mrope_section[1] = s1;
    a->mrope_section[2] = s2;
    return 1;
}

/* Strip [Cast] [Mul(., constant scalar)] [Cast] from a table term: multiplies the scale into
 * a->scale. Returns what is left, or NULL (with the reason) for a non-constant multiplier. */
static const char *strip_scale(const rk_graph *ix, const char *term, rk_angles *a, int32_t *cast_to,
                               char *reason, size_t n) {
    const char *v = rk_skip_casts(ix, term, cast_to);
    Onnx__NodeProto *mul = rk_producer_op(ix, v, "Mul");
    if (mul) {
        float f;
        if (rk_const_scalar_f(ix, rk_input(mul, 1), &f))
            v = rk_input(mul, 0);
        else if (rk_const_scalar_f(ix, rk_input(mul, 0), &f))
            v = rk_input(mul, 1);
        else {
            fail(reason, n, "the table '%s' is multiplied by something that is not a "
                 "constant scalar", v);
            return NULL;
        }
        a->scale *= f;
        v = rk_skip_casts(ix, v, cast_to);
    }
    return v;
}

/* M-RoPE, sectioned, as TorchScript (transformers 4.x) writes it on the full-width table:
 *   term = Concat(Gather(Split(T, s + s)[i], i % 3, axis 0) for i in 0..5, axis -1)
 *   T    = [Cast] [Mul(., scaling)] Cos|Sin(Concat(F, F)), F the freqs of (3, B, S) positions:
 *          Transpose<0,1,3,2>(MatMul(Expand(inv_freq (1,1,h,1)), Unsqueeze(position_ids, 2)))
 * Section i of each half takes stream i: Concat(M, M) of the sectioned half M. */
static int match_mrope_sections_full(const rk_graph *ix, const Onnx__NodeProto *cat, int want_sin,
                                     rk_angles *a, int32_t *cast_to, char *reason, size_t n) {
    Onnx__NodeProto *split = NULL;
    int64_t axis = rk_attr_i(cat, "axis", 0);
    if (axis != -1 && axis != 2)
        return fail(reason, n, "M-RoPE sections '%s' are not concatenated along the last axis",
                    cat->output[0]);
    for (size_t i = 0; i < 6; ++i) {
        Onnx__NodeProto *g = rk_producer_op(ix, rk_input(cat, i), "Gather");
        int64_t idx;
        if (!g || rk_attr_i(g, "axis", 0) != 0 || !rk_eval_i64_scalar(ix, rk_input(g, 1), &idx) ||
            idx != (int64_t)(i % 3))
            return fail(reason, n, "M-RoPE section %s does not gather its own stream",
                        rk_input(cat, i));
        Onnx__NodeProto *sp = rk_producer_op(ix, rk_input(g, 0), "Split");
        if (!sp || (split && sp != split) || sp->n_output != 6 ||
            strcmp(sp->output[i], rk_input(g, 0)) != 0)
            return fail(reason, n, "M-RoPE section '%s' is not output i of one Split",
                        rk_input(g, 0));
        split = sp;
    }
    int64_t sizes[8];
    size_t ns;
    if (!rk_eval_i64(ix, rk_input(split, 1), sizes, 8, &ns) || ns != 6)
        return fail(reason, n, "M-RoPE Split '%s' has no constant section sizes", split->output[0]);
    int64_t sax = rk_attr_i(split, "axis", 0);
    if (sax != -1 && sax != 3)
        return fail(reason, n, "M-RoPE Split on '%s' is not along the last axis",
                    rk_input(split, 0));
    for (int i = 0; i < 3; ++i)
        if (sizes[i] < 0 || sizes[i] != sizes[i + 3])
            return fail(reason, n, "M-RoPE Split '%s' does not cut both halves alike",
                        split->output[0]);
    const char *v = strip_scale(ix, rk_input(split, 0), a, cast_to, reason, n);
    if (!v) return 0;
    Onnx__NodeProto *trig = rk_producer_op(ix, v, want_sin ? "Sin" : "Cos");
    if (!trig) return fail(reason, n, "M-RoPE sections split '%s', not Cos/Sin", v);
    const char *freqs = doubled_half(ix, rk_input(trig, 0));
    if (!freqs)
        return fail(reason, n, "the angles '%s' are not Concat(freqs, freqs) along the last "
                    "axis", rk_input(trig, 0));
    if (!match_freqs(ix, freqs, 3, a, reason, n)) return 0;
    if (!sections_sum_to(sizes, a->half)) {
        rk_angles_free(a);
        return fail(reason, n, "M-RoPE sections of '%s' do not sum to the frequency count",
                    split->output[0]);
    }
    a->mrope = 1;
    a->mrope_layout = 0;
    memcpy(a->mrope_section, sizes, sizeof a->mrope_section);
    return 1;
}

int rk_match_angle_term(const rk_graph *ix, const char *term, int want_sin, rk_angles *a,
                        int32_t *cast_to, char *reason, size_t n) {
    memset(a, 0, sizeof *a);
    a->kind = RK_ANGLES_INV_FREQ;
    a->scale = 1.0f;
    const char *v = strip_scale(ix, term, a, cast_to, reason, n);
    if (!v) return 0;
    Onnx__NodeProto *trig = rk_producer_op(ix, v, want_sin ? "Sin" : "Cos");
    if (trig) {
        const char *freqs = doubled_half(ix, rk_input(trig, 0));
        if (!freqs)
            return fail(reason, n, "the angles '%s' are not Concat(freqs, freqs) along the last "
                        "axis", rk_input(trig, 0));
        if (rk_producer_op(ix, freqs, "ScatterND"))
            return match_mrope_scatter(ix, freqs, a, reason, n);
        return match_freqs(ix, freqs, 2, a, reason, n);
    }
    Onnx__NodeProto *cat6 = rk_producer_op(ix, v, "Concat");
    if (cat6 && cat6->n_input == 6)
        return match_mrope_sections_full(ix, cat6, want_sin, a, cast_to, reason, n);
    const char *half = doubled_half(ix, v);
    if (half) {
        float keep = a->scale;
        int ok = rk_producer_op(ix, half, "Concat")
                     ? match_mrope_sections(ix, half, want_sin, a, reason, n)
                     : match_mrope_interleaved(ix, half, want_sin, a, reason, n);
        a->scale = keep;
        if (ok) return 1;
        if (reason[0]) return 0;
    }
    return fail(reason, n, "the table '%s' is not Cos/Sin of position_ids * inv_freq", v);
}

int rk_angles_same(const rk_angles *a, const rk_angles *b) {
    if (a->kind != b->kind || a->kind == RK_ANGLES_ROWS || a->half != b->half ||
        a->scale != b->scale || a->mrope != b->mrope || !a->positions != !b->positions ||
        (a->positions && strcmp(a->positions, b->positions)))
        return 0; /* per-call rows are compared by their terms, not here; positions may be NULL
                     (a source whose ids are not known) */
    if (a->mrope && (memcmp(a->mrope_section, b->mrope_section, sizeof a->mrope_section) ||
                     a->mrope_layout != b->mrope_layout))
        return 0;
    if (a->kind == RK_ANGLES_INV_FREQ)
        return memcmp(a->inv_freq, b->inv_freq, (size_t)a->half * sizeof *a->inv_freq) == 0;
    return a->rows == b->rows &&
           memcmp(a->cos_rows, b->cos_rows, (size_t)(a->rows * a->half) * sizeof(float)) == 0 &&
           memcmp(a->sin_rows, b->sin_rows, (size_t)(a->rows * a->half) * sizeof(float)) == 0;
}
