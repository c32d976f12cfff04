/* C API tests: argument validation (status + message), "nothing written on error", and the
 * layout invariants — in place, strided views, rank 3 vs rank 4 — which must give the same bits.
 * Buffers are allocated at their exact size so the sanitizer build catches any stray access.
 * Numerical agreement with peers (onnx reference, onnxruntime, float64 oracles) is tested in
 * tests/python. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "internal.h"
#include "ropekit.h"

/* ---- a small rotary setup ------------------------------------------------------------------ */

enum { B = 2, S = 3, N = 2, H = 8, P = 6, HALF = H / 2 };
static float g_x[B][S][N * H], g_y[B][S][N * H], g_cos[P][HALF], g_sin[P][HALF];
static int64_t g_pos[B][S] = {{0, 1, 2}, {5, 4, 3}};
static ropekit_tensor tx, ty, tcos, tsin, tpos;

static void setup(void) {
    for (int i = 0; i < B * S * N * H; ++i) (&g_x[0][0][0])[i] = rng_normalish();
    for (int i = 0; i < P * HALF; ++i) {
        (&g_cos[0][0])[i] = cosf((float)i * 0.3f);
        (&g_sin[0][0])[i] = sinf((float)i * 0.3f);
    }
    int64_t xs[3] = {B, S, N * H}, ts[2] = {P, HALF}, ps[2] = {B, S};
    tx = ropekit_tensor_contiguous(g_x, ROPEKIT_FLOAT32, 3, xs);
    ty = ropekit_tensor_contiguous(g_y, ROPEKIT_FLOAT32, 3, xs);
    tcos = ropekit_tensor_contiguous(g_cos, ROPEKIT_FLOAT32, 2, ts);
    tsin = ropekit_tensor_contiguous(g_sin, ROPEKIT_FLOAT32, 2, ts);
    tpos = ropekit_tensor_contiguous(g_pos, ROPEKIT_INT64, 2, ps);
}

static ropekit_rotary_embedding_attrs attrs_n(void) {
    ropekit_rotary_embedding_attrs a = ROPEKIT_ROTARY_EMBEDDING_ATTRS_INIT;
    a.num_heads = N;
    return a;
}

static void test_rotary_errors(void) {
    ropekit_rotary_embedding_attrs a = attrs_n();
    CHECK(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &a, &ty) == ROPEKIT_OK, "valid: %s",
          ropekit_last_error());
    CHECK(ropekit_last_error()[0] == '\0', "no message after success");
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, NULL, &ty),
               ROPEKIT_ERROR_NULL_POINTER, "attrs");
    EXPECT_ERR(ropekit_rotary_embedding(NULL, &tcos, &tsin, &tpos, &a, &ty),
               ROPEKIT_ERROR_NULL_POINTER, "x");
    ropekit_tensor t = tx;
    t.data = NULL;
    EXPECT_ERR(ropekit_rotary_embedding(&t, &tcos, &tsin, &tpos, &a, &ty),
               ROPEKIT_ERROR_NULL_POINTER, "x: data is NULL");
    t = tx;
    t.rank = 5;
    EXPECT_ERR(ropekit_rotary_embedding(&t, &tcos, &tsin, &tpos, &a, &ty), ROPEKIT_ERROR_SHAPE,
               "rank 5");
    t = tx;
    t.shape[0] = -1;
    EXPECT_ERR(ropekit_rotary_embedding(&t, &tcos, &tsin, &tpos, &a, &ty), ROPEKIT_ERROR_SHAPE,
               "negative");
    t = tx;
    t.dtype = (ropekit_dtype)42;
    EXPECT_ERR(ropekit_rotary_embedding(&t, &tcos, &tsin, &tpos, &a, &ty), ROPEKIT_ERROR_DTYPE,
               "unknown dtype");
    t = tx;
    t.dtype = ROPEKIT_INT64;
    EXPECT_ERR(ropekit_rotary_embedding(&t, &tcos, &tsin, &tpos, &a, &ty), ROPEKIT_ERROR_DTYPE,
               "not float32");
    /* sizes that overflow int64 are errors, never wrapped arithmetic */
    t = tx;
    t.shape[0] = INT64_MAX / 2, t.strides[0] = 4;
    EXPECT_ERR(ropekit_rotary_embedding(&t, &tcos, &tsin, &tpos, &a, &ty), ROPEKIT_ERROR_OVERFLOW,
               "overflow");
    t = tx;
    t.shape[0] = INT64_MAX, t.shape[1] = 3;
    EXPECT_ERR(ropekit_rotary_embedding(&t, &tcos, &tsin, &tpos, &a, &ty), ROPEKIT_ERROR_OVERFLOW,
               "element count");
    /* attributes */
    ropekit_rotary_embedding_attrs b = a;
    b.num_heads = 0;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &b, &ty),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "num_heads is required");
    b = a, b.num_heads = 3;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &b, &ty), ROPEKIT_ERROR_SHAPE,
               "not a multiple of num_heads");
    b = a, b.interleaved = 2;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &b, &ty),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "interleaved = 2");
    b = a, b.rotary_embedding_dim = 5;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &b, &ty),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "odd");
    b = a, b.rotary_embedding_dim = 10;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &b, &ty),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "exceeds the head size");
    b = a, b.rotary_embedding_dim = -2;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &b, &ty),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "negative");
    b = a, b.rotary_embedding_dim = 4; /* table width 4 != R/2 = 2 */
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &b, &ty), ROPEKIT_ERROR_SHAPE,
               "cos_cache");
    b = a, b.inverse = 7;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &b, &ty),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "inverse");
    /* tables and ids */
    t = tsin;
    t.shape[0] = P - 1;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &t, &tpos, &a, &ty), ROPEKIT_ERROR_SHAPE,
               "sin_cache");
    t = tpos;
    t.dtype = ROPEKIT_FLOAT32;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &t, &a, &ty), ROPEKIT_ERROR_DTYPE,
               "position_ids");
    t = tpos;
    t.shape[1] = 2;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &t, &a, &ty), ROPEKIT_ERROR_SHAPE,
               "position_ids");
    /* an out-of-range id: error naming index and value; y untouched */
    memset(g_y, 0x5a, sizeof g_y);
    g_pos[1][2] = 70000;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &a, &ty),
               ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "position_ids[1][2] = 70000 is outside "
               "cos_cache rows [0, 6)");
    g_pos[1][2] = -1;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &a, &ty),
               ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "= -1 is outside");
    g_pos[1][2] = INT64_MIN;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &a, &ty),
               ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "is outside");
    g_pos[1][2] = 3;
    int untouched = 1;
    for (size_t i = 0; i < sizeof g_y; ++i) untouched &= ((unsigned char *)g_y)[i] == 0x5a;
    CHECK(untouched, "y was written by failing calls");
    /* aliasing: y a shifted view of x; y with a zero stride */
    ropekit_tensor y2 = tx;
    y2.data = &g_x[0][0][2];
    y2.shape[0] = 1;
    ropekit_tensor x2 = tx;
    x2.shape[0] = 1;
    EXPECT_ERR(ropekit_rotary_embedding(&x2, &tcos, &tsin, &(ropekit_tensor){.data = g_pos,
               .dtype = ROPEKIT_INT64, .rank = 2, .shape = {1, S}, .strides = {S, 1}}, &a, &y2),
               ROPEKIT_ERROR_ALIASING, "y overlaps x");
    y2 = ty;
    y2.strides[0] = 0;
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &a, &y2), ROPEKIT_ERROR_ALIASING,
               "overlap");
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, &tpos, &a, &tcos),
               ROPEKIT_ERROR_SHAPE, "y: shape (6, 4), expected (2, 3, 16)");
    /* y over the table: same dtype and shape as x, overlapping cos */
    float *big = malloc(sizeof g_x);
    memcpy(big, g_x, sizeof g_x);
    ropekit_tensor xb = tx, yb = tx, cb = tcos;
    xb.data = big, yb.data = big, cb.data = big;
    EXPECT_ERR(ropekit_rotary_embedding(&xb, &cb, &tsin, &tpos, &a, &yb), ROPEKIT_ERROR_ALIASING,
               "cos_cache");
    free(big);
    /* 3D tables without ids must be (B, S, R/2) */
    EXPECT_ERR(ropekit_rotary_embedding(&tx, &tcos, &tsin, NULL, &a, &ty), ROPEKIT_ERROR_SHAPE,
               "without position_ids");
}

static void test_ms_errors(void) {
    ropekit_ms_rotary_embedding_attrs a = ROPEKIT_MS_ROTARY_EMBEDDING_ATTRS_INIT;
    a.num_heads = N;
    int64_t off = 3;
    ropekit_tensor toff = ropekit_tensor_contiguous(&off, ROPEKIT_INT64, 1, (int64_t[]){1});
    CHECK(ropekit_ms_rotary_embedding(&tx, &toff, &tcos, &tsin, &a, &ty) == ROPEKIT_OK, "%s",
          ropekit_last_error());
    off = 4; /* 4 + S = 7 > 6 rows */
    EXPECT_ERR(ropekit_ms_rotary_embedding(&tx, &toff, &tcos, &tsin, &a, &ty),
               ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "offset 4");
    off = INT64_MAX;
    EXPECT_ERR(ropekit_ms_rotary_embedding(&tx, &toff, &tcos, &tsin, &a, &ty),
               ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "offset");
    off = -1;
    EXPECT_ERR(ropekit_ms_rotary_embedding(&tx, &toff, &tcos, &tsin, &a, &ty),
               ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "offset -1");
    off = 0;
    ropekit_ms_rotary_embedding_attrs b = a;
    b.is_packed_batching = 1;
    EXPECT_ERR(ropekit_ms_rotary_embedding(&tx, &toff, &tcos, &tsin, &b, &ty),
               ROPEKIT_ERROR_UNSUPPORTED, "is_packed_batching");
    b = a, b.scale = INFINITY;
    EXPECT_ERR(ropekit_ms_rotary_embedding(&tx, &toff, &tcos, &tsin, &b, &ty),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "scale");
    EXPECT_ERR(ropekit_ms_rotary_embedding(&tx, NULL, &tcos, &tsin, &a, &ty),
               ROPEKIT_ERROR_NULL_POINTER, "position_ids");
}

static void test_mrope_errors(void) {
    ropekit_mrotary_embedding_attrs a = ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
    a.num_heads = N;
    a.mrope_section[0] = 2, a.mrope_section[1] = 1, a.mrope_section[2] = 1;
    int64_t ids[3][B][S];
    for (int st = 0; st < 3; ++st)
        for (int b = 0; b < B; ++b)
            for (int s = 0; s < S; ++s) ids[st][b][s] = (st + b + s) % P;
    ropekit_tensor tid = ropekit_tensor_contiguous(ids, ROPEKIT_INT64, 3, (int64_t[]){3, B, S});
    CHECK(ropekit_mrotary_embedding(&tx, &tid, &tcos, &tsin, &a, &ty) == ROPEKIT_OK, "%s",
          ropekit_last_error());
    ids[2][1][0] = P;
    EXPECT_ERR(ropekit_mrotary_embedding(&tx, &tid, &tcos, &tsin, &a, &ty),
               ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "position_ids[2][1][0] = 6");
    /* a stream no column reads is not checked */
    a.mrope_section[1] = 2, a.mrope_section[2] = 0;
    CHECK(ropekit_mrotary_embedding(&tx, &tid, &tcos, &tsin, &a, &ty) == ROPEKIT_OK, "%s",
          ropekit_last_error());
    ids[2][1][0] = 0;
    a.mrope_section[2] = 1;
    EXPECT_ERR(ropekit_mrotary_embedding(&tx, &tid, &tcos, &tsin, &a, &ty),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "sum to rotary_embedding_dim/2 = 4");
    a.mrope_section[1] = 1, a.mrope_layout = 2;
    EXPECT_ERR(ropekit_mrotary_embedding(&tx, &tid, &tcos, &tsin, &a, &ty),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "mrope_layout = 2");
    a.mrope_layout = 1;
    EXPECT_ERR(ropekit_mrotary_embedding(&tx, &tpos, &tcos, &tsin, &a, &ty), ROPEKIT_ERROR_SHAPE,
               "3 streams");
    /* the attributes it shares with com.microsoft.RotaryEmbedding, checked the same way */
    ropekit_mrotary_embedding_attrs bad[6] = {a, a, a, a, a, a};
    bad[0].inverse = 2, bad[1].scale = NAN, bad[2].is_packed_batching = 1;
    bad[3].interleaved = 3, bad[4].rotary_embedding_dim = 5, bad[5].num_heads = -1;
    const struct {
        ropekit_status status;
        const char *text;
    } want[6] = {{ROPEKIT_ERROR_INVALID_ATTRIBUTE, "inverse = 2, must be 0 or 1"},
                 {ROPEKIT_ERROR_INVALID_ATTRIBUTE, "scale is not finite"},
                 {ROPEKIT_ERROR_UNSUPPORTED, "is_packed_batching = 1"},
                 {ROPEKIT_ERROR_INVALID_ATTRIBUTE, "interleaved = 3"},
                 {ROPEKIT_ERROR_INVALID_ATTRIBUTE, "rotary_embedding_dim = 5 is odd"},
                 {ROPEKIT_ERROR_INVALID_ATTRIBUTE, "num_heads = -1"}};
    for (int i = 0; i < 6; ++i)
        EXPECT_ERR(ropekit_mrotary_embedding(&tx, &tid, &tcos, &tsin, &bad[i], &ty), want[i].status,
                   want[i].text);
}

static void test_qknorm_regroup_errors(void) {
    enum { QB = 1, QS = 2, QN = 2, QD = 72, QR = 8 };
    static float q[QB][QS][QN * QD], kv[QB][QS][QD], w[QD], c[QB][QS][QR], s[QB][QS][QR];
    static float qo[QB][QS][QN][QD], ko[QB][QS][QD];
    ropekit_tensor tq = ropekit_tensor_contiguous(q, ROPEKIT_FLOAT32, 3, (int64_t[]){QB, QS, QN * QD});
    ropekit_tensor tk = ropekit_tensor_contiguous(kv, ROPEKIT_FLOAT32, 3, (int64_t[]){QB, QS, QD});
    ropekit_tensor tw = ropekit_tensor_contiguous(w, ROPEKIT_FLOAT32, 1, (int64_t[]){QD});
    ropekit_tensor tc = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT32, 3, (int64_t[]){QB, QS, QR});
    ropekit_tensor ts = ropekit_tensor_contiguous(s, ROPEKIT_FLOAT32, 3, (int64_t[]){QB, QS, QR});
    ropekit_tensor tqo = ropekit_tensor_contiguous(qo, ROPEKIT_FLOAT32, 4, (int64_t[]){QB, QS, QN, QD});
    ropekit_tensor tko = ropekit_tensor_contiguous(ko, ROPEKIT_FLOAT32, 3, (int64_t[]){QB, QS, QD});
    ropekit_qknorm_rotary_embedding_attrs a = ROPEKIT_QKNORM_ROTARY_EMBEDDING_ATTRS_INIT;
    a.num_heads = QN, a.head_dim = QD, a.rope_head_dim = QR;
    CHECK(ropekit_qknorm_rotary_embedding(&tq, &tk, &tw, &tc, &ts, &a, &tqo, &tko) == ROPEKIT_OK,
          "%s", ropekit_last_error());
    ropekit_qknorm_rotary_embedding_attrs b = a;
    b.rope_head_dim = 6;
    EXPECT_ERR(ropekit_qknorm_rotary_embedding(&tq, &tk, &tw, &tc, &ts, &b, &tqo, &tko),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "multiple of 64");
    b = a, b.rope_head_dim = 7;
    EXPECT_ERR(ropekit_qknorm_rotary_embedding(&tq, &tk, &tw, &tc, &ts, &b, &tqo, &tko),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "even");
    b = a, b.epsilon = NAN;
    EXPECT_ERR(ropekit_qknorm_rotary_embedding(&tq, &tk, &tw, &tc, &ts, &b, &tqo, &tko),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "epsilon");
    EXPECT_ERR(ropekit_qknorm_rotary_embedding(&tq, &tk, &tw, NULL, &ts, &a, &tqo, &tko),
               ROPEKIT_ERROR_NULL_POINTER, "cos is required");
    EXPECT_ERR(ropekit_qknorm_rotary_embedding(&tq, &tk, &tw, &tc, &ts, &a, &tqo, &tqo),
               ROPEKIT_ERROR_SHAPE, "kv_out");
    ropekit_tensor tw2 = tw;
    tw2.dtype = ROPEKIT_FLOAT16;
    EXPECT_ERR(ropekit_qknorm_rotary_embedding(&tq, &tk, &tw2, &tc, &ts, &a, &tqo, &tko),
               ROPEKIT_ERROR_DTYPE, "kv_norm_weight");
    /* kv_out on top of query: same dtype, wrong place */
    ropekit_tensor bad = tko;
    bad.data = q;
    EXPECT_ERR(ropekit_qknorm_rotary_embedding(&tq, &tk, &tw, &tc, &ts, &a, &tqo, &bad),
               ROPEKIT_ERROR_ALIASING, "kv_out overlaps query");

    ropekit_inverse_rotary_regroup_attrs r = ROPEKIT_INVERSE_ROTARY_REGROUP_ATTRS_INIT;
    r.num_heads = QN, r.head_dim = QD, r.rope_head_dim = QR, r.num_groups = 5;
    ropekit_tensor tin = ropekit_tensor_contiguous(q, ROPEKIT_FLOAT32, 2, (int64_t[]){QS, QN * QD});
    ropekit_tensor trc = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT32, 2, (int64_t[]){QS, QR});
    ropekit_tensor trs = ropekit_tensor_contiguous(s, ROPEKIT_FLOAT32, 2, (int64_t[]){QS, QR});
    ropekit_tensor tro = ropekit_tensor_contiguous(qo, ROPEKIT_FLOAT32, 3, (int64_t[]){2, QS, QD});
    EXPECT_ERR(ropekit_inverse_rotary_regroup(&tin, &trc, &trs, &r, &tro),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "num_groups = 5");
    r.num_groups = 2;
    CHECK(ropekit_inverse_rotary_regroup(&tin, &trc, &trs, &r, &tro) == ROPEKIT_OK, "%s",
          ropekit_last_error());
    EXPECT_ERR(ropekit_inverse_rotary_regroup(&tin, &trc, &trs, &r, &tin), ROPEKIT_ERROR_SHAPE, "out");
    ropekit_tensor inplace = tro;
    inplace.data = q;
    EXPECT_ERR(ropekit_inverse_rotary_regroup(&tin, &trc, &trs, &r, &inplace),
               ROPEKIT_ERROR_ALIASING, "out overlaps input");
}

static void test_table_errors(void) {
    ropekit_rope_config cfg = {0};
    float inv[4], af;
    cfg.rotary_dim = 8, cfg.rope_theta = 10000;
    CHECK(ropekit_rope_inv_freq(&cfg, 0, inv, 4, &af) == ROPEKIT_OK && inv[0] == 1.0f && af == 1.0f,
          "default inv_freq");
    EXPECT_ERR(ropekit_rope_inv_freq(&cfg, 0, inv, 3, &af), ROPEKIT_ERROR_SHAPE, "inv_freq_len");
    cfg.rotary_dim = 7;
    EXPECT_ERR(ropekit_rope_inv_freq(&cfg, 0, inv, 3, &af), ROPEKIT_ERROR_INVALID_ATTRIBUTE, "even");
    cfg.rotary_dim = 8, cfg.rope_type = ROPEKIT_ROPE_DYNAMIC;
    EXPECT_ERR(ropekit_rope_inv_freq(&cfg, 0, inv, 4, &af), ROPEKIT_ERROR_UNSUPPORTED, "dynamic");
    cfg.rope_type = ROPEKIT_ROPE_YARN, cfg.factor = 4;
    EXPECT_ERR(ropekit_rope_inv_freq(&cfg, 0, inv, 4, &af), ROPEKIT_ERROR_INVALID_ATTRIBUTE,
               "original_max_position_embeddings");
    cfg.rope_type = ROPEKIT_ROPE_LONGROPE, cfg.original_max_position_embeddings = 4096;
    EXPECT_ERR(ropekit_rope_inv_freq(&cfg, 0, inv, 4, &af), ROPEKIT_ERROR_NULL_POINTER, "long_factor");
    cfg.rope_type = (ropekit_rope_type)99;
    EXPECT_ERR(ropekit_rope_inv_freq(&cfg, 0, inv, 4, &af), ROPEKIT_ERROR_INVALID_ATTRIBUTE, "unknown");
    float tc[3][4], ts[3][4];
    ropekit_tensor c = ropekit_tensor_contiguous(tc, ROPEKIT_FLOAT32, 2, (int64_t[]){3, 4});
    ropekit_tensor s = ropekit_tensor_contiguous(ts, ROPEKIT_FLOAT32, 2, (int64_t[]){3, 4});
    EXPECT_ERR(ropekit_rope_cos_sin_table(inv, 4, 1.0f, ROPEKIT_ANGLE_GRAPH, &c, &c),
               ROPEKIT_ERROR_ALIASING, "overlap");
    EXPECT_ERR(ropekit_rope_cos_sin_table(inv, 3, 1.0f, ROPEKIT_ANGLE_GRAPH, &c, &s),
               ROPEKIT_ERROR_SHAPE, "cos_table");
    EXPECT_ERR(ropekit_rope_cos_sin_table(inv, 4, 1.0f, (ropekit_angle_mode)5, &c, &s),
               ROPEKIT_ERROR_INVALID_ATTRIBUTE, "angle mode");
    CHECK(ropekit_rope_cos_sin_table(inv, 4, 1.0f, ROPEKIT_ANGLE_ACCURATE, &c, &s) == ROPEKIT_OK &&
              tc[0][0] == 1.0f && ts[0][0] == 0.0f && tc[2][0] == (float)cos(2.0),
          "accurate table values");
}

/* On the fly == rotating with a float32 ROPEKIT_ANGLE_ACCURATE table, bit for bit. */
static void test_on_the_fly(void) {
    enum { OB = 2, OS = 3, ON = 2, OH = 12, OR = 8, OP = 4000 };
    static float x[OB][OS][ON * OH], y1[OB][OS][ON * OH], y2[OB][OS][ON * OH];
    static float ct[OP][OR / 2], st[OP][OR / 2];
    int64_t pos[OB][OS] = {{0, 1, 3999}, {17, 2048, 5}};
    for (int i = 0; i < OB * OS * ON * OH; ++i) (&x[0][0][0])[i] = rng_normalish();
    ropekit_rope_config cfg = {0};
    cfg.rotary_dim = OR, cfg.rope_theta = 10000;
    float inv[OR / 2], af;
    CHECK(ropekit_rope_inv_freq(&cfg, 0, inv, OR / 2, &af) == ROPEKIT_OK, "inv_freq");
    af = 1.25f; /* an attention factor too */
    ropekit_tensor oc = ropekit_tensor_contiguous(ct, ROPEKIT_FLOAT32, 2, (int64_t[]){OP, OR / 2});
    ropekit_tensor os = ropekit_tensor_contiguous(st, ROPEKIT_FLOAT32, 2, (int64_t[]){OP, OR / 2});
    CHECK(ropekit_rope_cos_sin_table(inv, OR / 2, af, ROPEKIT_ANGLE_ACCURATE, &oc, &os) == ROPEKIT_OK,
          "table");
    ropekit_tensor ox = ropekit_tensor_contiguous(x, ROPEKIT_FLOAT32, 3, (int64_t[]){OB, OS, ON * OH});
    ropekit_tensor t1 = ropekit_tensor_contiguous(y1, ROPEKIT_FLOAT32, 3, (int64_t[]){OB, OS, ON * OH});
    ropekit_tensor t2 = ropekit_tensor_contiguous(y2, ROPEKIT_FLOAT32, 3, (int64_t[]){OB, OS, ON * OH});
    ropekit_tensor op = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, (int64_t[]){OB, OS});
    ropekit_rotary_embedding_attrs a = ROPEKIT_ROTARY_EMBEDDING_ATTRS_INIT;
    a.num_heads = ON, a.rotary_embedding_dim = OR, a.interleaved = 1;
    CHECK(ropekit_rotary_embedding(&ox, &oc, &os, &op, &a, &t1) == ROPEKIT_OK, "%s", ropekit_last_error());
    CHECK(ropekit_rotary_embedding_on_the_fly(&ox, inv, OR / 2, af, &op, &a, &t2) == ROPEKIT_OK,
          "%s", ropekit_last_error());
    CHECK(memcmp(y1, y2, sizeof y1) == 0, "on the fly differs from the accurate float32 table");
    /* no table length: a position far past any table is fine; 2^53 + 1 is not exact */
    pos[0][0] = (int64_t)1 << 40;
    CHECK(ropekit_rotary_embedding_on_the_fly(&ox, inv, OR / 2, af, &op, &a, &t2) == ROPEKIT_OK,
          "%s", ropekit_last_error());
    pos[0][0] = ((int64_t)1 << 53) + 1;
    EXPECT_ERR(ropekit_rotary_embedding_on_the_fly(&ox, inv, OR / 2, af, &op, &a, &t2),
               ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, "2^53");
    pos[0][0] = 0;
    EXPECT_ERR(ropekit_rotary_embedding_on_the_fly(&ox, inv, 3, af, &op, &a, &t2), ROPEKIT_ERROR_SHAPE,
               "inv_freq_len = 3");
    EXPECT_ERR(ropekit_rotary_embedding_on_the_fly(&ox, inv, OR / 2, af, NULL, &a, &t2),
               ROPEKIT_ERROR_NULL_POINTER, "position_ids");
    EXPECT_ERR(ropekit_rotary_embedding_on_the_fly(&ox, NULL, OR / 2, af, &op, &a, &t2),
               ROPEKIT_ERROR_NULL_POINTER, "inv_freq");
}

/* ---- layout invariants on random shapes (exact-size buffers) -------------------------------- */

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

static void fill_random(void *p, ropekit_dtype dt, int64_t n) {
    for (int64_t i = 0; i < n; ++i) rk_store(p, dt, i, rng_normalish());
}

static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(rng_u64() % (uint64_t)(hi - lo + 1)); }

static const ropekit_dtype kTypes[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};

/* One random rotary case: contiguous out of place vs in place vs strided views inside a packed
 * buffer vs the rank-4 layout. All must give identical bits. */
static void rotary_layout_case(int which_op) {
    ropekit_dtype T = kTypes[rng_u64() % 3];
    ropekit_dtype TT = (rng_u64() % 4 == 0) ? ROPEKIT_FLOAT32 : T;
    size_t es = ropekit_dtype_size(T), tes = ropekit_dtype_size(TT);
    int64_t b = rnd(0, 3), s = rnd(0, 5), n = rnd(1, 4), h = rnd(1, 40);
    int64_t R = 2 * rnd(1, h / 2 > 0 ? h / 2 : 1);
    if (R > h) h = R;
    int64_t half = R / 2, rows = rnd(1, 9);
    int inter = (int)(rng_u64() % 2), inverse = (int)(rng_u64() % 2);
    int64_t numel = b * s * n * h;
    /* x (B, S, N*H) contiguous */
    void *x = xmalloc((size_t)numel * es), *y0 = xmalloc((size_t)numel * es);
    void *y1 = xmalloc((size_t)numel * es), *y2 = xmalloc((size_t)numel * es);
    fill_random(x, T, numel);
    void *ct = xmalloc((size_t)(rows * half) * tes), *st = xmalloc((size_t)(rows * half) * tes);
    fill_random(ct, TT, rows * half);
    fill_random(st, TT, rows * half);
    int64_t *pos = xmalloc((size_t)(3 * b * s) * sizeof(int64_t));
    for (int64_t i = 0; i < 3 * b * s; ++i) pos[i] = rnd(0, rows - 1);
    ropekit_tensor tx3 = ropekit_tensor_contiguous(x, T, 3, (int64_t[]){b, s, n * h});
    ropekit_tensor tc2 = ropekit_tensor_contiguous(ct, TT, 2, (int64_t[]){rows, half});
    ropekit_tensor ts2 = ropekit_tensor_contiguous(st, TT, 2, (int64_t[]){rows, half});
    ropekit_tensor tp = which_op == 2 ? ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 3, (int64_t[]){3, b, s})
                                      : ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, (int64_t[]){b, s});
    int64_t sec[3] = {rnd(0, half), 0, 0};
    sec[1] = rnd(0, half - sec[0]);
    sec[2] = half - sec[0] - sec[1];
    int layout = (int)(rng_u64() % 2);
    float scale = (rng_u64() % 2) ? 1.0f : 0.75f;
#define RUN(X, Y)                                                                              \
    (which_op == 0   ? ropekit_rotary_embedding(X, &tc2, &ts2, &tp, &(ropekit_rotary_embedding_attrs){inter, R, n, inverse}, Y) \
     : which_op == 1 ? ropekit_ms_rotary_embedding(X, &tp, &tc2, &ts2, &(ropekit_ms_rotary_embedding_attrs){inter, R, n, scale, 0, inverse}, Y) \
                     : ropekit_mrotary_embedding(X, &tp, &tc2, &ts2, &(ropekit_mrotary_embedding_attrs){{sec[0], sec[1], sec[2]}, layout, inter, R, n, scale, 0, inverse}, Y))
    ropekit_tensor ty0 = ropekit_tensor_contiguous(y0, T, 3, (int64_t[]){b, s, n * h});
    ropekit_status st0 = RUN(&tx3, &ty0);
    CHECK(st0 == ROPEKIT_OK, "op %d: %s", which_op, ropekit_last_error());
    /* in place */
    memcpy(y1, x, (size_t)numel * es);
    ropekit_tensor ty1 = ropekit_tensor_contiguous(y1, T, 3, (int64_t[]){b, s, n * h});
    CHECK(RUN(&ty1, &ty1) == ROPEKIT_OK && memcmp(y0, y1, (size_t)numel * es) == 0,
          "op %d: in place differs (%s)", which_op, ropekit_last_error());
    /* strided: x is the middle third of a packed (B, S, 3*N*H) QKV buffer, y likewise */
    int64_t pk = 3 * n * h;
    void *packed = xmalloc((size_t)(b * s * pk) * es);
    fill_random(packed, T, b * s * pk);
    for (int64_t i = 0; i < b * s; ++i)
        memcpy((char *)packed + (size_t)(i * pk + n * h) * es, (char *)x + (size_t)(i * n * h) * es,
               (size_t)(n * h) * es);
    void *before = xmalloc((size_t)(b * s * pk) * es);
    memcpy(before, packed, (size_t)(b * s * pk) * es);
    ropekit_tensor tv = {(char *)packed + (size_t)(n * h) * es, T, 3, {b, s, n * h, 0}, {s * pk, pk, 1, 0}};
    CHECK(RUN(&tv, &tv) == ROPEKIT_OK, "op %d strided: %s", which_op, ropekit_last_error());
    int same = 1, others = 1;
    for (int64_t i = 0; i < b * s; ++i) {
        same &= memcmp((char *)packed + (size_t)(i * pk + n * h) * es, (char *)y0 + (size_t)(i * n * h) * es,
                       (size_t)(n * h) * es) == 0;
        others &= memcmp((char *)packed + (size_t)(i * pk) * es, (char *)before + (size_t)(i * pk) * es,
                         (size_t)(n * h) * es) == 0;
        others &= memcmp((char *)packed + (size_t)(i * pk + 2 * n * h) * es,
                         (char *)before + (size_t)(i * pk + 2 * n * h) * es, (size_t)(n * h) * es) == 0;
    }
    CHECK(same, "op %d: strided view in place differs", which_op);
    CHECK(others, "op %d: strided call wrote outside its view", which_op);
    /* rank 4 (B, N, S, H): a transposed copy in, a transposed result out */
    void *x4 = xmalloc((size_t)numel * es);
    for (int64_t i0 = 0; i0 < b; ++i0)
        for (int64_t i1 = 0; i1 < s; ++i1)
            for (int64_t i2 = 0; i2 < n; ++i2)
                memcpy((char *)x4 + (size_t)(((i0 * n + i2) * s + i1) * h) * es,
                       (char *)x + (size_t)(((i0 * s + i1) * n + i2) * h) * es, (size_t)h * es);
    ropekit_tensor t4 = ropekit_tensor_contiguous(x4, T, 4, (int64_t[]){b, n, s, h});
    /* y2 as a rank-4 view over (B, S, N, H) memory: strides permuted */
    ropekit_tensor t4y = {y2, T, 4, {b, n, s, h}, {s * n * h, h, n * h, 1}};
    CHECK(RUN(&t4, &t4y) == ROPEKIT_OK && memcmp(y0, y2, (size_t)numel * es) == 0,
          "op %d: rank 4 differs (%s)", which_op, ropekit_last_error());
#undef RUN
    free(x), free(y0), free(y1), free(y2), free(ct), free(st), free(pos), free(packed), free(before), free(x4);
}

static void qknorm_layout_case(void) {
    ropekit_dtype T = kTypes[rng_u64() % 3];
    size_t es = ropekit_dtype_size(T);
    int64_t b = rnd(0, 2), s = rnd(0, 3), nh = rnd(1, 3);
    int fp8 = (int)(rng_u64() % 2);
    int64_t rd = 2 * rnd(0, 8), hd = fp8 ? rd + 64 * rnd(0, 2) : rd + rnd(0, 20);
    if (hd == 0) hd = 2, rd = 2;
    int64_t nq = b * s * nh * hd, nk = b * s * hd, nt = b * s * rd;
    void *q = xmalloc((size_t)nq * es), *k = xmalloc((size_t)nk * es);
    void *qo = xmalloc((size_t)nq * es), *ko = xmalloc((size_t)nk * es);
    float *w = xmalloc((size_t)hd * 4), *c = xmalloc((size_t)nt * 4), *sn = xmalloc((size_t)nt * 4);
    fill_random(q, T, nq), fill_random(k, T, nk);
    fill_random(w, ROPEKIT_FLOAT32, hd), fill_random(c, ROPEKIT_FLOAT32, nt), fill_random(sn, ROPEKIT_FLOAT32, nt);
    ropekit_qknorm_rotary_embedding_attrs a = {nh, hd, rd, 1e-6f, fp8};
    ropekit_tensor tq = ropekit_tensor_contiguous(q, T, 3, (int64_t[]){b, s, nh * hd});
    ropekit_tensor tk = ropekit_tensor_contiguous(k, T, 3, (int64_t[]){b, s, hd});
    ropekit_tensor tw = ropekit_tensor_contiguous(w, ROPEKIT_FLOAT32, 1, (int64_t[]){hd});
    ropekit_tensor tc = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT32, 3, (int64_t[]){b, s, rd});
    ropekit_tensor ts = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT32, 3, (int64_t[]){b, s, rd});
    ropekit_tensor tqo = ropekit_tensor_contiguous(qo, T, 4, (int64_t[]){b, s, nh, hd});
    ropekit_tensor tko = ropekit_tensor_contiguous(ko, T, 3, (int64_t[]){b, s, hd});
    CHECK(ropekit_qknorm_rotary_embedding(&tq, &tk, &tw, &tc, &ts, &a, &tqo, &tko) == ROPEKIT_OK,
          "qknorm: %s", ropekit_last_error());
    /* in place: query_out over query's memory, kv_out over kv's */
    ropekit_tensor tqi = ropekit_tensor_contiguous(q, T, 4, (int64_t[]){b, s, nh, hd});
    CHECK(ropekit_qknorm_rotary_embedding(&tq, &tk, &tw, &tc, &ts, &a, &tqi, &tk) == ROPEKIT_OK &&
              memcmp(q, qo, (size_t)nq * es) == 0 && memcmp(k, ko, (size_t)nk * es) == 0,
          "qknorm in place differs (%s)", ropekit_last_error());
    /* regroup of the result back, groups dividing nh*hd */
    int64_t G = (nh * hd) % 2 == 0 && rng_u64() % 2 ? 2 : 1;
    void *out = xmalloc((size_t)nq * es);
    ropekit_inverse_rotary_regroup_attrs r = {nh, hd, rd, G};
    ropekit_tensor ti = ropekit_tensor_contiguous(qo, T, 2, (int64_t[]){b * s, nh * hd});
    ropekit_tensor tc2 = ropekit_tensor_contiguous(c, ROPEKIT_FLOAT32, 2, (int64_t[]){b * s, rd});
    ropekit_tensor ts2 = ropekit_tensor_contiguous(sn, ROPEKIT_FLOAT32, 2, (int64_t[]){b * s, rd});
    ropekit_tensor to = ropekit_tensor_contiguous(out, T, 3, (int64_t[]){G, b * s, nh * hd / G});
    CHECK(ropekit_inverse_rotary_regroup(&ti, &tc2, &ts2, &r, &to) == ROPEKIT_OK, "regroup: %s",
          ropekit_last_error());
    free(q), free(k), free(qo), free(ko), free(w), free(c), free(sn), free(out);
}

static void test_status_names(void) {
    for (int st = ROPEKIT_OK; st <= ROPEKIT_ERROR_DEVICE; ++st)
        CHECK(strstr(ropekit_status_str((ropekit_status)st), "UNKNOWN") == NULL, "status %d unnamed", st);
    CHECK(!strcmp(ropekit_status_str((ropekit_status)999), "ROPEKIT_ERROR_UNKNOWN"), "unknown status");
    CHECK(!strcmp(ropekit_dtype_name((ropekit_dtype)0), "invalid") && ropekit_dtype_size((ropekit_dtype)0) == 0,
          "invalid dtype");
}

int main(void) {
    test_status_names();
    setup();
    test_rotary_errors();
    test_ms_errors();
    test_mrope_errors();
    test_qknorm_regroup_errors();
    test_table_errors();
    test_on_the_fly();
    for (int i = 0; i < 300; ++i) rotary_layout_case(i % 3);
    for (int i = 0; i < 100; ++i) qknorm_layout_case();
    return REPORT();
}
