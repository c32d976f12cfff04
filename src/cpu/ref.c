/* The scalar reference: every operator's maths, written once, plainly. Every other variant
 * (SIMD, CUDA, WebGPU) is checked against this file. Plans arrive fully validated
 * (src/core/validate.c): no index formed here can leave its buffer.
 *
 * Lane pictures for a head of H = 8 channels, rotary width R = 6 (h = 3), last 2 copied:
 *   interleaved = 0 (half-split):  [x0 x1 x2 | x3 x4 x5 | x6 x7]  pairs (x0,x3) (x1,x4) (x2,x5)
 *   interleaved = 1 (adjacent):    [x0 x1 | x2 x3 | x4 x5 | x6 x7]  pairs (x0,x1) (x2,x3) (x4,x5)
 * Pair k uses table column k.
 */
#include <math.h>

#include "../core/internal.h"

/* Table columns are gathered per token in chunks of this many, then used by every head. */
#define RK_CHUNK 64

/* ---- the rotation of one pair (see "Arithmetic" in ropekit.h) ---------------------------- */

/* y0 = c*a - s*b, y1 = s*a + c*b. The products are exact in the wide type, so each result is
 * rounded once (to float, or to double and then float). */
static inline void rotate_pair(int wide, float a, float b, float c, float s, float *y0, float *y1) {
    if (wide) {
        *y0 = (float)((double)c * a - (double)s * b);
        *y1 = (float)((double)s * a + (double)c * b);
    } else {
        *y0 = c * a - s * b;
        *y1 = s * a + c * b;
    }
}

/* ---- RotaryEmbedding / MRotaryEmbedding -------------------------------------------------- */


/* cos/sin of columns [k0, k0+n) for token (b, s), as the rotation uses them: scaled by `scale`
 * and rounded back to the table type when scale != 1, sin negated for the inverse rotation. */
static void gather_columns(const rk_rotary_plan *p, int64_t b, int64_t s, int64_t k0, int64_t n,
                           float *c, float *sn) {
    for (int64_t i = 0; i < n; ++i) {
        float cv = rk_load(p->cos, p->table_dtype, rk_table_offset(p, 0, b, s, k0 + i));
        float sv = rk_load(p->sin, p->table_dtype, rk_table_offset(p, 1, b, s, k0 + i));
        if (p->apply_scale) {
            cv = rk_round_to(p->table_dtype, cv * p->scale);
            sv = rk_round_to(p->table_dtype, sv * p->scale);
        }
        c[i] = cv;
        sn[i] = p->inverse ? -sv : sv;
    }
}

void rk_ref_rotary(const rk_rotary_plan *p) {
    const int64_t h = p->R / 2;
    const size_t es = ropekit_dtype_size(p->dtype);
    const int wide = p->dtype == ROPEKIT_FLOAT32 || p->table_dtype == ROPEKIT_FLOAT32;
    float c[RK_CHUNK], sn[RK_CHUNK];
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t s = 0; s < p->S; ++s) {
            for (int64_t k0 = 0; k0 < h; k0 += RK_CHUNK) {
                int64_t n = h - k0 < RK_CHUNK ? h - k0 : RK_CHUNK;
                gather_columns(p, b, s, k0, n, c, sn);
                for (int64_t hd = 0; hd < p->N; ++hd) {
                    const char *x = p->x + (b * p->xs[0] + s * p->xs[1] + hd * p->xs[2]) * (int64_t)es;
                    char *y = p->y + (b * p->ys[0] + s * p->ys[1] + hd * p->ys[2]) * (int64_t)es;
                    for (int64_t i = 0; i < n; ++i) {
                        int64_t k = k0 + i;
                        int64_t i0 = p->interleaved ? 2 * k : k;
                        int64_t i1 = p->interleaved ? 2 * k + 1 : k + h;
                        float a = rk_load(x, p->dtype, i0 * p->xs[3]);
                        float bb = rk_load(x, p->dtype, i1 * p->xs[3]);
                        float y0, y1;
                        rotate_pair(wide, a, bb, c[i], sn[i], &y0, &y1);
                        rk_store(y, p->dtype, i0 * p->ys[3], y0);
                        rk_store(y, p->dtype, i1 * p->ys[3], y1);
                    }
                }
            }
            /* channels [R, H) are copied bit for bit (memmove: in place is a no-op) */
            for (int64_t hd = 0; hd < p->N && p->R < p->H; ++hd) {
                const char *x = p->x + (b * p->xs[0] + s * p->xs[1] + hd * p->xs[2]) * (int64_t)es;
                char *y = p->y + (b * p->ys[0] + s * p->ys[1] + hd * p->ys[2]) * (int64_t)es;
                for (int64_t ch = p->R; ch < p->H; ++ch)
                    memmove(y + ch * p->ys[3] * (int64_t)es, x + ch * p->xs[3] * (int64_t)es, es);
            }
        }
}

/* ---- QKNormRotaryEmbedding ---------------------------------------------------------------- */

/* Sum of squares of n values at stride st, in the fixed sixteen-lane order of ropekit.h. */
static float sum_of_squares(const char *x, ropekit_dtype dt, int64_t n, int64_t st) {
    double lane[16] = {0};
    for (int64_t c = 0; c < n; ++c) {
        double v = rk_load(x, dt, c * st);
        lane[c % 16] += v * v;
    }
    for (int width = 8; width >= 1; width /= 2)
        for (int j = 0; j < width; ++j) lane[j] += lane[j + width];
    return (float)lane[0];
}

/* Rotation of the pre-interleaved tail, pair (t, t+1) with t even:
 *   y[t] = x[t]*cos[t] - x[t+1]*sin[t],  y[t+1] = x[t+1]*cos[t+1] + x[t]*sin[t+1]
 * (forward); the inverse flips the sign of both sin terms. Wide (double) arithmetic. */
static inline void rotate_tail_pair(float x0, float x1, float c0, float s0, float c1, float s1,
                                    int inverse, float *y0, float *y1) {
    double sg = inverse ? -1.0 : 1.0;
    *y0 = (float)((double)x0 * c0 - sg * ((double)x1 * s0));
    *y1 = (float)((double)x1 * c1 + sg * ((double)x0 * s1));
}

/* 2^ceil(log2(ratio)) as the contract computes it (float log divided by float ln 2). */
static float fp8_block_scale(float amax) {
    if (!(amax > 0.0f)) return 1.0f;
    float ratio = fmaxf(amax / 448.0f, 1e-30f);
    return exp2f(ceilf(logf(ratio) / 0.69314718f));
}

static void qknorm_query(const rk_qknorm_plan *p, int64_t b, int64_t s, int64_t hd) {
    const ropekit_dtype T = p->dtype;
    const size_t es = ropekit_dtype_size(T);
    const char *x = p->q + (b * p->qs[0] + s * p->qs[1] + hd * p->qs[2]) * (int64_t)es;
    char *y = p->q_out + (b * p->qos[0] + s * p->qos[1] + hd * p->qos[2]) * (int64_t)es;
    const int64_t xs = p->qs[3], ys = p->qos[3];
    float ss = sum_of_squares(x, T, p->head_dim, xs);
    float r = rk_round_to(T, 1.0f / sqrtf(ss / (float)p->head_dim + p->epsilon));
    for (int64_t c = 0; c < p->nope; ++c) rk_store(y, T, c * ys, rk_load(x, T, c * xs) * r);
    if (p->rope_dim == 0) return; /* the tables may be absent */
    const float *cs = p->cos + b * p->cos_s[0] + s * p->cos_s[1];
    const float *sn = p->sin + b * p->sin_s[0] + s * p->sin_s[1];
    for (int64_t t = 0; t < p->rope_dim; t += 2) {
        int64_t c = p->nope + t;
        float x0 = rk_round_to(T, rk_load(x, T, c * xs) * r);
        float x1 = rk_round_to(T, rk_load(x, T, (c + 1) * xs) * r);
        float y0, y1;
        rotate_tail_pair(x0, x1, cs[t * p->cos_s[2]], sn[t * p->sin_s[2]],
                         cs[(t + 1) * p->cos_s[2]], sn[(t + 1) * p->sin_s[2]], 0, &y0, &y1);
        rk_store(y, T, c * ys, y0);
        rk_store(y, T, (c + 1) * ys, y1);
    }
}

static void qknorm_kv(const rk_qknorm_plan *p, int64_t b, int64_t s) {
    const ropekit_dtype T = p->dtype;
    const size_t es = ropekit_dtype_size(T);
    const char *x = p->kv + (b * p->kvs[0] + s * p->kvs[1]) * (int64_t)es;
    char *y = p->kv_out + (b * p->kvos[0] + s * p->kvos[1]) * (int64_t)es;
    const int64_t xs = p->kvs[2], ys = p->kvos[2];
    float ss = sum_of_squares(x, T, p->head_dim, xs);
    float r = 1.0f / sqrtf(ss / (float)p->head_dim + p->epsilon);
#define NORMED(c) rk_round_to(T, (rk_load(x, T, (c) * xs) * r) * p->w[(c) * p->ws])
    /* leading nope channels, in blocks of 64 when fp8 is simulated */
    const int64_t block = p->simulate_fp8 ? 64 : 1;
    for (int64_t c0 = 0; c0 < p->nope; c0 += block) {
        float v[64];
        float amax = 0.0f;
        for (int64_t i = 0; i < block; ++i) {
            v[i] = NORMED(c0 + i);
            amax = fmaxf(amax, fabsf(v[i]));
        }
        if (p->simulate_fp8) {
            float scale = fp8_block_scale(amax);
            for (int64_t i = 0; i < block; ++i) {
                float q = fminf(fmaxf(v[i] / scale, -448.0f), 448.0f);
                v[i] = rk_e4m3_round(q) * scale;
            }
        }
        for (int64_t i = 0; i < block; ++i) rk_store(y, T, (c0 + i) * ys, v[i]);
    }
    if (p->rope_dim == 0) return; /* the tables may be absent */
    const float *cs = p->cos + b * p->cos_s[0] + s * p->cos_s[1];
    const float *sn = p->sin + b * p->sin_s[0] + s * p->sin_s[1];
    for (int64_t t = 0; t < p->rope_dim; t += 2) {
        int64_t c = p->nope + t;
        float x0 = NORMED(c), x1 = NORMED(c + 1);
        float y0, y1;
        rotate_tail_pair(x0, x1, cs[t * p->cos_s[2]], sn[t * p->sin_s[2]],
                         cs[(t + 1) * p->cos_s[2]], sn[(t + 1) * p->sin_s[2]], 0, &y0, &y1);
        rk_store(y, T, c * ys, y0);
        rk_store(y, T, (c + 1) * ys, y1);
    }
#undef NORMED
}

void rk_ref_qknorm(const rk_qknorm_plan *p) {
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t s = 0; s < p->S; ++s) {
            for (int64_t hd = 0; hd < p->num_heads; ++hd) qknorm_query(p, b, s, hd);
            qknorm_kv(p, b, s);
        }
}

/* ---- InverseRotaryRegroup ---------------------------------------------------------------- */

void rk_ref_regroup(const rk_regroup_plan *p) {
    const ropekit_dtype T = p->dtype;
    const size_t es = ropekit_dtype_size(T);
    const int64_t F = p->num_heads * p->head_dim;
    for (int64_t n = 0; n < p->N; ++n) {
        const char *x = p->x + n * p->xs[0] * (int64_t)es;
        const float *cs = p->cos ? p->cos + n * p->cos_s[0] : NULL;
        const float *sn = p->sin ? p->sin + n * p->sin_s[0] : NULL;
        for (int64_t f = 0; f < F; ++f) {
            int64_t g = f / p->group_dim, gc = f % p->group_dim;
            char *dst = p->out + (g * p->os[0] + n * p->os[1] + gc * p->os[2]) * (int64_t)es;
            int64_t c = f % p->head_dim;
            if (c < p->nope) { /* copied bit for bit */
                memcpy(dst, x + f * p->xs[1] * (int64_t)es, es);
                continue;
            }
            int64_t t = c - p->nope;
            int64_t t0 = t & ~(int64_t)1; /* the pair (t0, t0+1) */
            float x0 = rk_load(x, T, (f - (t - t0)) * p->xs[1]);
            float x1 = rk_load(x, T, (f - (t - t0) + 1) * p->xs[1]);
            float y0, y1;
            rotate_tail_pair(x0, x1, cs[t0 * p->cos_s[1]], sn[t0 * p->sin_s[1]],
                             cs[(t0 + 1) * p->cos_s[1]], sn[(t0 + 1) * p->sin_s[1]], 1, &y0, &y1);
            rk_store(dst, T, 0, t == t0 ? y0 : y1);
        }
    }
}
