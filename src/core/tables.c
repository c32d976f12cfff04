/* cos/sin table builders: rope parameters -> inv_freq -> tables.
 *
 * Formulas follow Hugging Face transformers' rope init functions (modeling_rope_utils.py), which
 * are the de-facto definitions of the rope types; they are computed here in double and rounded
 * once to float32. With d = rotary_dim, e_i = 2i/d for i < d/2, base = rope_theta:
 *   default   inv_i = base^(-e_i)
 *   linear    inv_i = base^(-e_i) / factor
 *   yarn      inv_i = interp_i * (1 - m_i) + extrap_i * m_i, extrap_i = base^(-e_i),
 *             interp_i = extrap_i / factor, m_i = 1 - clamp((i - low) / (high - low), 0, 1) with
 *             low/high = corr(beta_fast)/corr(beta_slow), corr(r) = d*ln(O/(2*pi*r))/(2*ln base),
 *             floored/ceiled when truncate, clamped to [0, d-1]; attention factor
 *             0.1*ln(factor)+1 (or the mscale ratio) unless given.
 *   longrope  inv_i = 1 / (ext_i * base^(e_i)), ext = long or short factors by sequence length;
 *             attention factor sqrt(1 + ln(factor)/ln(O)) unless given.
 *   llama3    by wavelength w_i = 2*pi/inv_i: w > O/low -> inv/factor; w < O/high -> inv;
 *             between: (1 - t) * inv/factor + t * inv with t = (O/w - low)/(high - low).
 * O = original_max_position_embeddings. */
#include <math.h>

#include "internal.h"

#define RK_PI 3.14159265358979323846

static double yarn_mscale(double scale, double mscale) {
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_corr_dim(double rotations, double d, double base, double O) {
    return d * log(O / (rotations * 2.0 * RK_PI)) / (2.0 * log(base));
}

static ropekit_status need_positive(double v, const char *name, const char *type) {
    if (!(v > 0.0) || !isfinite(v))
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "%s rope: %s = %g must be finite and > 0",
                       type, name, v);
    return ROPEKIT_OK;
}


ropekit_status ropekit_rope_inv_freq(const ropekit_rope_config *cfg, int64_t seq_len,
                                     float *inv_freq, int64_t inv_freq_len,
                                     float *attention_factor) {
    rk_clear_error();
    if (!cfg || !inv_freq || !attention_factor)
        return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "config, inv_freq and attention_factor are "
                       "required");
    const int64_t d = cfg->rotary_dim;
    if (d <= 0 || d % 2 != 0 || d > (int64_t)1 << 30)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "rotary_dim = %lld must be even and in "
                       "(0, 2^30]", (long long)d);
    if (inv_freq_len != d / 2)
        return rk_fail(ROPEKIT_ERROR_SHAPE, "inv_freq_len = %lld, must be rotary_dim/2 = %lld",
                       (long long)inv_freq_len, (long long)(d / 2));
    const double base = cfg->rope_theta;
    RK_TRY(need_positive(base, "rope_theta", "any"));
    if (base == 1.0)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "rope_theta = 1 gives no frequencies");
    if (cfg->attention_factor < 0 || !isfinite(cfg->attention_factor))
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "attention_factor = %g must be finite "
                       "and >= 0 (0: the type's default)", cfg->attention_factor);
    const int64_t h = d / 2;
    double af = 1.0;
    const char *type = "default";
    switch (cfg->rope_type) {
    case ROPEKIT_ROPE_DEFAULT:
        for (int64_t i = 0; i < h; ++i) inv_freq[i] = (float)pow(base, -(2.0 * i) / d);
        break;
    case ROPEKIT_ROPE_LINEAR:
        type = "linear";
        RK_TRY(need_positive(cfg->factor, "factor", type));
        for (int64_t i = 0; i < h; ++i) inv_freq[i] = (float)(pow(base, -(2.0 * i) / d) / cfg->factor);
        break;
    case ROPEKIT_ROPE_DYNAMIC:
        return rk_fail(ROPEKIT_ERROR_UNSUPPORTED, "dynamic (NTK) rope changes its frequencies "
                       "with the sequence length: no static table exists");
    case ROPEKIT_ROPE_YARN: {
        type = "yarn";
        RK_TRY(need_positive(cfg->factor, "factor", type));
        double O = (double)cfg->original_max_position_embeddings;
        RK_TRY(need_positive(O, "original_max_position_embeddings", type));
        double bf = cfg->beta_fast > 0 ? cfg->beta_fast : 32.0;
        double bs = cfg->beta_slow > 0 ? cfg->beta_slow : 1.0;
        double low = yarn_corr_dim(bf, (double)d, base, O);
        double high = yarn_corr_dim(bs, (double)d, base, O);
        if (cfg->truncate) low = floor(low), high = ceil(high);
        if (low < 0) low = 0;
        if (high > d - 1) high = (double)(d - 1);
        if (low == high) high += 0.001; /* as HF: avoid a zero-width ramp */
        for (int64_t i = 0; i < h; ++i) {
            double extrap = pow(base, -(2.0 * i) / d), interp = extrap / cfg->factor;
            double ramp = ((double)i - low) / (high - low);
            ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
            double m = 1.0 - ramp; /* extrapolation weight */
            inv_freq[i] = (float)(interp * (1.0 - m) + extrap * m);
        }
        if (cfg->mscale > 0 && cfg->mscale_all_dim > 0)
            af = yarn_mscale(cfg->factor, cfg->mscale) / yarn_mscale(cfg->factor, cfg->mscale_all_dim);
        else
            af = yarn_mscale(cfg->factor, 1.0);
        break;
    }
    case ROPEKIT_ROPE_LONGROPE: {
        type = "longrope";
        double O = (double)cfg->original_max_position_embeddings;
        RK_TRY(need_positive(O, "original_max_position_embeddings", type));
        if (!cfg->long_factor || !cfg->short_factor)
            return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "longrope needs long_factor and "
                           "short_factor (rotary_dim/2 values each)");
        const double *ext = seq_len > cfg->original_max_position_embeddings ? cfg->long_factor
                                                                            : cfg->short_factor;
        for (int64_t i = 0; i < h; ++i) {
            if (!(ext[i] > 0) || !isfinite(ext[i]))
                return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "longrope %s_factor[%lld] = %g "
                               "must be finite and > 0", ext == cfg->long_factor ? "long" : "short",
                               (long long)i, ext[i]);
            inv_freq[i] = (float)(1.0 / (ext[i] * pow(base, (2.0 * i) / d)));
        }
        double factor = cfg->factor;
        if (cfg->max_position_embeddings > 0)
            factor = (double)cfg->max_position_embeddings / O;
        af = factor <= 1.0 ? 1.0 : sqrt(1.0 + log(factor) / log(O));
        break;
    }
    case ROPEKIT_ROPE_LLAMA3: {
        type = "llama3";
        RK_TRY(need_positive(cfg->factor, "factor", type));
        double O = (double)cfg->original_max_position_embeddings;
        RK_TRY(need_positive(O, "original_max_position_embeddings", type));
        RK_TRY(need_positive(cfg->low_freq_factor, "low_freq_factor", type));
        RK_TRY(need_positive(cfg->high_freq_factor, "high_freq_factor", type));
        if (!(cfg->high_freq_factor > cfg->low_freq_factor))
            return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "llama3 rope: high_freq_factor must "
                           "exceed low_freq_factor");
        double low_wl = O / cfg->low_freq_factor, high_wl = O / cfg->high_freq_factor;
        for (int64_t i = 0; i < h; ++i) {
            double inv = pow(base, -(2.0 * i) / d), wl = 2.0 * RK_PI / inv, v;
            if (wl > low_wl)
                v = inv / cfg->factor;
            else if (wl < high_wl)
                v = inv;
            else {
                double t = (O / wl - cfg->low_freq_factor) /
                           (cfg->high_freq_factor - cfg->low_freq_factor);
                v = (1.0 - t) * inv / cfg->factor + t * inv;
            }
            inv_freq[i] = (float)v;
        }
        break;
    }
    default:
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "rope_type = %d is unknown",
                       (int)cfg->rope_type);
    }
    (void)type;
    if (cfg->attention_factor > 0) af = cfg->attention_factor;
    *attention_factor = (float)af;
    return ROPEKIT_OK;
}

ropekit_status ropekit_rope_cos_sin_table(const float *inv_freq, int64_t inv_freq_len,
                                          float attention_factor, ropekit_angle_mode mode,
                                          const ropekit_tensor *cos_table,
                                          const ropekit_tensor *sin_table) {
    rk_clear_error();
    if (!inv_freq || !cos_table || !sin_table)
        return rk_fail(ROPEKIT_ERROR_NULL_POINTER, "inv_freq, cos_table and sin_table are required");
    if (mode != ROPEKIT_ANGLE_GRAPH && mode != ROPEKIT_ANGLE_ACCURATE)
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "angle mode %d is unknown", (int)mode);
    if (!isfinite(attention_factor))
        return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "attention_factor is not finite");
    const ropekit_tensor *tabs[2] = {cos_table, sin_table};
    const char *names[2] = {"cos_table", "sin_table"};
    rk_span spans[2];
    for (int w = 0; w < 2; ++w) {
        const ropekit_tensor *t = tabs[w];
        RK_TRY(rk_check_view(t, names[w], &spans[w]));
        if (t->rank != 2 || t->shape[1] != inv_freq_len)
            return rk_fail(ROPEKIT_ERROR_SHAPE, "%s: must be 2D (positions, %lld)", names[w],
                           (long long)inv_freq_len);
        if (t->dtype != ROPEKIT_FLOAT32 && t->dtype != ROPEKIT_FLOAT16 &&
            t->dtype != ROPEKIT_BFLOAT16)
            return rk_fail(ROPEKIT_ERROR_DTYPE, "%s: dtype %s is not float32, float16 or bfloat16",
                           names[w], ropekit_dtype_name(t->dtype));
        RK_TRY(rk_check_no_self_overlap(t, names[w]));
    }
    if (spans[0].lo < spans[0].hi && spans[1].lo < spans[1].hi && spans[0].lo < spans[1].hi &&
        spans[1].lo < spans[0].hi)
        return rk_fail(ROPEKIT_ERROR_ALIASING, "cos_table and sin_table overlap");
    if (sin_table->dtype != cos_table->dtype || sin_table->shape[0] != cos_table->shape[0])
        return rk_fail(ROPEKIT_ERROR_SHAPE, "sin_table must have the dtype and shape of cos_table");
    for (int64_t k = 0; k < inv_freq_len; ++k)
        if (!isfinite(inv_freq[k]))
            return rk_fail(ROPEKIT_ERROR_INVALID_ATTRIBUTE, "inv_freq[%lld] is not finite",
                           (long long)k);
    const ropekit_dtype T = cos_table->dtype;
    const size_t es = ropekit_dtype_size(T);
    for (int64_t p = 0; p < cos_table->shape[0]; ++p)
        for (int64_t k = 0; k < inv_freq_len; ++k) {
            char *cd = (char *)cos_table->data + (p * cos_table->strides[0] + k * cos_table->strides[1]) * (int64_t)es;
            char *sd = (char *)sin_table->data + (p * sin_table->strides[0] + k * sin_table->strides[1]) * (int64_t)es;
            if (mode == ROPEKIT_ANGLE_GRAPH) {
                float angle = (float)p * inv_freq[k];
                float c = (float)cos((double)angle) * attention_factor;
                float s = (float)sin((double)angle) * attention_factor;
                rk_store(cd, T, 0, c);
                rk_store(sd, T, 0, s);
            } else {
                double angle = (double)p * (double)inv_freq[k];
                double c = cos(angle) * attention_factor, s = sin(angle) * attention_factor;
                if (T == ROPEKIT_FLOAT32) {
                    *(float *)cd = (float)c;
                    *(float *)sd = (float)s;
                } else if (T == ROPEKIT_FLOAT16) {
                    *(uint16_t *)cd = rk_f64_to_f16(c);
                    *(uint16_t *)sd = rk_f64_to_f16(s);
                } else {
                    *(uint16_t *)cd = rk_f64_to_bf16(c);
                    *(uint16_t *)sd = rk_f64_to_bf16(s);
                }
            }
        }
    return ROPEKIT_OK;
}
