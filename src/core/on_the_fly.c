/* ai.onnx RotaryEmbedding with angles computed per token instead of read from a table: the
 * rows of the tokens are built (accurate angles, float32) into a (B, S, h) buffer, which the
 * operator then reads as its 3D-table form. One code path for the rotation, so every CPU
 * variant gives the bits of a float32 ROPEKIT_ANGLE_ACCURATE table. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

#define RK_MAX_EXACT_POSITION ((int64_t)1 << 53)

ropekit_status ropekit_rotary_embedding_on_the_fly(const ropekit_tensor *x, const float *inv_freq,
                                                   int64_t inv_freq_len, float attention_factor,
                                                   const ropekit_tensor *position_ids,
                                                   const ropekit_rotary_embedding_attrs *attrs,
                                                   const ropekit_tensor *y) {
    rk_clear_error();
    if (!inv_freq) return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "inv_freq is NULL");
    if (!position_ids)
        return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "position_ids is required (they give the angles)");
    if (!isfinite(attention_factor))
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "attention_factor is not finite");
    rk_span ps;
    RK_TRY(rk_check_view(position_ids, "position_ids", &ps));
    if (position_ids->dtype != ROPEKIT_INT64 || position_ids->rank != 2)
        return rk_fail(ROPEKIT_ERROR_SHAPE, "position_ids must be int64 (batch, sequence)");
    if (inv_freq_len <= 0 || inv_freq_len > ((int64_t)1 << 30))
        return rk_fail(ROPEKIT_ERROR_SHAPE, "inv_freq_len = %lld must be in (0, 2^30]",
                       (long long)inv_freq_len);
    for (int64_t k = 0; k < inv_freq_len; ++k)
        if (!isfinite(inv_freq[k]))
            return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "inv_freq[%lld] is not finite",
                           (long long)k);
    const int64_t B = position_ids->shape[0], S = position_ids->shape[1], h = inv_freq_len;
    const int64_t *ids = (const int64_t *)position_ids->data;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) {
            int64_t p = ids[b * position_ids->strides[0] + s * position_ids->strides[1]];
            if (p > RK_MAX_EXACT_POSITION || p < -RK_MAX_EXACT_POSITION)
                return rk_fail(ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "position_ids[%lld][%lld] = "
                               "%lld is beyond 2^53, where positions stop being exact in double",
                               (long long)b, (long long)s, (long long)p);
        }
    /* the width the operator will want, for a message that names inv_freq (the rest of x and
     * attrs is validated by the operator itself) */
    if (x && attrs && (x->rank == 3 || x->rank == 4)) {
        int64_t H = x->rank == 4 ? x->shape[3]
                    : (attrs->num_heads > 0 && x->shape[2] % attrs->num_heads == 0
                           ? x->shape[2] / attrs->num_heads
                           : -1);
        int64_t R = attrs->rotary_embedding_dim > 0 ? attrs->rotary_embedding_dim : H;
        if (H > 0 && R > 0 && R <= H && R % 2 == 0 && h != R / 2)
            return rk_fail(ROPEKIT_ERROR_SHAPE, "inv_freq_len = %lld, must be the rotary width / 2 = "
                           "%lld", (long long)h, (long long)(R / 2));
    }
    int64_t n;
    if (!rk_mul(B, S, &n) || !rk_mul(n, h, &n) || n > ((int64_t)1 << 40))
        return rk_fail(ROPEKIT_ERROR_OVERFLOW, "batch * sequence * inv_freq_len is too large");
    float *c = malloc((size_t)(n ? n : 1) * sizeof *c), *sn = malloc((size_t)(n ? n : 1) * sizeof *sn);
    if (!c || !sn) {
        free(c), free(sn);
        return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "out of memory for %lld angles", (long long)n);
    }
    for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) {
            double p = (double)ids[b * position_ids->strides[0] + s * position_ids->strides[1]];
            float *cr = c + (b * S + s) * h, *sr = sn + (b * S + s) * h;
            for (int64_t k = 0; k < h; ++k) {
                double angle = p * (double)inv_freq[k]; /* as ropekit_rope_cos_sin_table */
                cr[k] = (float)(cos(angle) * attention_factor);
                sr[k] = (float)(sin(angle) * attention_factor);
            }
        }
    int64_t shape[3] = {B, S, h};
    ropekit_tensor tc = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT32, 3, shape);
    ropekit_tensor ts = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT32, 3, shape);
    ropekit_status st = ropekit_rotary_embedding(x, &tc, &ts, NULL, attrs, y);
    free(c);
    free(sn);
    return st;
}
