/* Edge views that C allows and hostile callers produce (issue 13, defect 8):
 *
 *   - zero-element tensors with data NULL (legal: a view with no elements needs no memory; the
 *     Python binding passes NULL for empty arrays) must work for every operator, the table
 *     builder and the on-the-fly form, with no pointer arithmetic on NULL;
 *   - views whose data is not aligned to the element size (a float32 array at an odd address,
 *     as numpy makes from a byte buffer) must be refused with ROPEKIT_ERROR_UNSUPPORTED and a
 *     message naming the tensor, before anything is read or written.
 *
 * Under the ASan/UBSan build both used to abort (pointer-overflow on NULL + offset in
 * validate.c, misaligned load in rk_load); in a release build the second returned OK. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ropekit.h"

#define EXPECT_OK(call)                                                                        \
    do {                                                                                       \
        ropekit_status st_ = (call);                                                           \
        CHECK(st_ == ROPEKIT_OK, "%s: got %s \"%s\"", #call, ropekit_status_str(st_),          \
              ropekit_last_error());                                                           \
    } while (0)

static ropekit_tensor view(void *data, ropekit_dtype dt, int rank, const int64_t *shape) {
    return ropekit_tensor_contiguous(data, dt, rank, shape);
}

/* ---- zero-element tensors, data NULL --------------------------------------------------------- */

static void test_empty_rotary(void) {
    static const ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    for (int d = 0; d < 3; ++d)
        for (int which = 0; which < 3; ++which) { /* empty batch, sequence, or (rank 4) heads */
            int64_t B = which == 0 ? 0 : 2, S = which == 1 ? 0 : 3, N = which == 2 ? 0 : 2, H = 8;
            int64_t x4[4] = {B, N, S, H}, x3[3] = {B, S, 2 * H}, ids[2] = {B, S};
            int64_t ids3[3] = {3, B, S}, tab[2] = {0, H / 2}, tab3[3] = {B, S, H / 2};
            /* ids have elements when only the heads are empty: give them memory then */
            const int tokens = B * S != 0;
            static int64_t pos[3 * 2 * 3];
            int64_t *pdata = tokens ? pos : NULL;
            static float rows[8 * 4];
            void *tdata = tokens ? rows : NULL;
            int64_t tabp[2] = {tokens ? 8 : 0, H / 2};
            ropekit_tensor x = view(NULL, dts[d], 4, x4), y = view(NULL, dts[d], 4, x4);
            ropekit_tensor xr3 = view(NULL, dts[d], 3, x3), yr3 = view(NULL, dts[d], 3, x3);
            ropekit_tensor c = view(tdata, ROPEKIT_FLOAT32, 2, tokens ? tabp : tab);
            ropekit_tensor s = view(tdata, ROPEKIT_FLOAT32, 2, tokens ? tabp : tab);
            ropekit_tensor c3 = view(NULL, ROPEKIT_FLOAT32, 3, tab3);
            ropekit_tensor p = view(pdata, ROPEKIT_INT64, 2, ids);
            ropekit_tensor p3 = view(pdata, ROPEKIT_INT64, 3, ids3);
            ropekit_rotary_embedding_attrs a = ROPEKIT_ROTARY_EMBEDDING_ATTRS_INIT;
            EXPECT_OK(ropekit_rotary_embedding(&x, &c, &s, &p, &a, &y));
            EXPECT_OK(ropekit_rotary_embedding(&x, &c, &s, &p, &a, &x)); /* in place */
            if (!tokens) EXPECT_OK(ropekit_rotary_embedding(&x, &c3, &c3, NULL, &a, &y));
            a.num_heads = 2;
            if (which != 2) EXPECT_OK(ropekit_rotary_embedding(&xr3, &c, &s, &p, &a, &yr3));
            ropekit_ms_rotary_embedding_attrs m = ROPEKIT_MS_ROTARY_EMBEDDING_ATTRS_INIT;
            EXPECT_OK(ropekit_ms_rotary_embedding(&x, &p, &c, &s, &m, &y));
            ropekit_mrotary_embedding_attrs r = ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
            r.mrope_section[0] = 2, r.mrope_section[1] = 1, r.mrope_section[2] = 1;
            for (r.mrope_layout = 0; r.mrope_layout <= 1; ++r.mrope_layout) /* all three streams */
                EXPECT_OK(ropekit_mrotary_embedding(&x, &p3, &c, &s, &r, &y));
            static float inv[4] = {1.0f, 0.1f, 0.01f, 0.001f};
            if (which != 2)
                EXPECT_OK(ropekit_rotary_embedding_on_the_fly(&x, inv, H / 2, 1.0f, &p, &a, &y));
        }
}

static void test_empty_qknorm_regroup(void) {
    for (int which = 0; which < 2; ++which) {
        int64_t B = which ? 1 : 0, S = which ? 0 : 2, nh = 2, hd = 72, rd = 8;
        int64_t q3[3] = {B, S, nh * hd}, k3[3] = {B, S, hd}, c3[3] = {B, S, rd};
        int64_t qo4[4] = {B, S, nh, hd}, w1[1] = {hd};
        static float w[72];
        ropekit_tensor q = view(NULL, ROPEKIT_BFLOAT16, 3, q3), kv = view(NULL, ROPEKIT_BFLOAT16, 3, k3);
        ropekit_tensor tw = view(w, ROPEKIT_FLOAT32, 1, w1);
        ropekit_tensor c = view(NULL, ROPEKIT_FLOAT32, 3, c3), s = view(NULL, ROPEKIT_FLOAT32, 3, c3);
        ropekit_tensor qo = view(NULL, ROPEKIT_BFLOAT16, 4, qo4), ko = view(NULL, ROPEKIT_BFLOAT16, 3, k3);
        ropekit_qknorm_rotary_embedding_attrs a = ROPEKIT_QKNORM_ROTARY_EMBEDDING_ATTRS_INIT;
        a.num_heads = nh, a.head_dim = hd, a.rope_head_dim = rd;
        EXPECT_OK(ropekit_qknorm_rotary_embedding(&q, &kv, &tw, &c, &s, &a, &qo, &ko));
    }
    int64_t in2[2] = {0, 16}, c2[2] = {0, 4}, o3[3] = {2, 0, 8};
    ropekit_tensor x = view(NULL, ROPEKIT_FLOAT16, 2, in2), o = view(NULL, ROPEKIT_FLOAT16, 3, o3);
    ropekit_tensor c = view(NULL, ROPEKIT_FLOAT32, 2, c2), s = view(NULL, ROPEKIT_FLOAT32, 2, c2);
    ropekit_inverse_rotary_regroup_attrs r = ROPEKIT_INVERSE_ROTARY_REGROUP_ATTRS_INIT;
    r.num_heads = 2, r.head_dim = 8, r.rope_head_dim = 4, r.num_groups = 2;
    EXPECT_OK(ropekit_inverse_rotary_regroup(&x, &c, &s, &r, &o));
}

static void test_empty_tables(void) {
    static const float inv[4] = {1.0f, 0.5f, 0.25f, 0.125f};
    int64_t shape[2] = {0, 4};
    for (int dt = ROPEKIT_FLOAT32; dt <= ROPEKIT_BFLOAT16; ++dt) {
        ropekit_tensor c = view(NULL, (ropekit_dtype)dt, 2, shape);
        ropekit_tensor s = view(NULL, (ropekit_dtype)dt, 2, shape);
        EXPECT_OK(ropekit_rope_cos_sin_table(inv, 4, 1.0f, ROPEKIT_ANGLE_GRAPH, &c, &s));
        EXPECT_OK(ropekit_rope_cos_sin_table(inv, 4, 1.0f, ROPEKIT_ANGLE_ACCURATE, &c, &s));
    }
}

/* ---- misaligned views ------------------------------------------------------------------------ */

enum { B = 1, S = 3, N = 2, H = 8, P = 6 };

/* Buffers with room to shift any tensor by a few bytes; 64-byte aligned bases. */
typedef struct bufs {
    unsigned char *x, *y, *c, *s, *p;
} bufs;

static unsigned char *block(size_t n) {
    unsigned char *b = aligned_alloc(64, (n + 64 + 63) / 64 * 64);
    if (b) memset(b, 0, n + 64);
    return b;
}

static void test_misaligned(void) {
    bufs b = {block(B * N * S * H * 4), block(B * N * S * H * 4), block(P * H / 2 * 4),
              block(P * H / 2 * 4), block(B * S * 8)};
    if (!b.x || !b.y || !b.c || !b.s || !b.p) {
        CHECK(0, "out of memory");
        return;
    }
    int64_t x4[4] = {B, N, S, H}, tab[2] = {P, H / 2}, ids[2] = {B, S}, ids3[3] = {3, B, S};
    static const ropekit_dtype dts[3] = {ROPEKIT_FLOAT32, ROPEKIT_FLOAT16, ROPEKIT_BFLOAT16};
    for (int d = 0; d < 3; ++d) {
        const ropekit_dtype T = dts[d];
        const int es = (int)ropekit_dtype_size(T);
        /* a correctly aligned call works (baseline) */
        ropekit_tensor x = view(b.x, T, 4, x4), y = view(b.y, T, 4, x4);
        ropekit_tensor c = view(b.c, ROPEKIT_FLOAT32, 2, tab), s = view(b.s, ROPEKIT_FLOAT32, 2, tab);
        ropekit_tensor p = view(b.p, ROPEKIT_INT64, 2, ids);
        ropekit_rotary_embedding_attrs a = ROPEKIT_ROTARY_EMBEDDING_ATTRS_INIT;
        EXPECT_OK(ropekit_rotary_embedding(&x, &c, &s, &p, &a, &y));
        /* each tensor in turn shifted by 1..7 bytes: misaligned unless a multiple of its size */
        for (int shift = 1; shift < 8; ++shift) {
            ropekit_tensor bx = view(b.x + shift, T, 4, x4), by = view(b.y + shift, T, 4, x4);
            ropekit_tensor bc = view(b.c + shift, ROPEKIT_FLOAT32, 2, tab);
            ropekit_tensor bs = view(b.s + shift, ROPEKIT_FLOAT32, 2, tab);
            ropekit_tensor bp = view(b.p + shift, ROPEKIT_INT64, 2, ids);
            memset(b.y, 0x5a, B * N * S * H * 4 + 64);
            if (shift % es) {
                EXPECT_ERR(ropekit_rotary_embedding(&bx, &c, &s, &p, &a, &y),
                           ROPEKIT_ERROR_UNSUPPORTED, "x: data address");
                EXPECT_ERR(ropekit_rotary_embedding(&x, &c, &s, &p, &a, &by),
                           ROPEKIT_ERROR_UNSUPPORTED, "y: data address");
                EXPECT_ERR(ropekit_rotary_embedding(&bx, &c, &s, &p, &a, &bx), /* in place */
                           ROPEKIT_ERROR_UNSUPPORTED, "aligned");
            }
            if (shift % 4) {
                EXPECT_ERR(ropekit_rotary_embedding(&x, &bc, &s, &p, &a, &y),
                           ROPEKIT_ERROR_UNSUPPORTED, "cos_cache: data address");
                ropekit_ms_rotary_embedding_attrs m = ROPEKIT_MS_ROTARY_EMBEDDING_ATTRS_INIT;
                EXPECT_ERR(ropekit_ms_rotary_embedding(&x, &p, &c, &bs, &m, &y),
                           ROPEKIT_ERROR_UNSUPPORTED, "sin_cache: data address");
            }
            EXPECT_ERR(ropekit_rotary_embedding(&x, &c, &s, &bp, &a, &y), ROPEKIT_ERROR_UNSUPPORTED,
                       "position_ids: data address");
            ropekit_mrotary_embedding_attrs r = ROPEKIT_MROTARY_EMBEDDING_ATTRS_INIT;
            r.mrope_section[0] = 2, r.mrope_section[1] = 1, r.mrope_section[2] = 1;
            unsigned char *p3 = block(3 * B * S * 8);
            if (p3) {
                ropekit_tensor t3 = view(p3 + shift, ROPEKIT_INT64, 3, ids3);
                EXPECT_ERR(ropekit_mrotary_embedding(&x, &t3, &c, &s, &r, &y),
                           ROPEKIT_ERROR_UNSUPPORTED, "position_ids: data address");
                free(p3);
            }
            /* nothing written by the refused calls */
            int untouched = 1;
            for (size_t i = 0; i < B * N * S * H * 4 + 64; ++i) untouched &= b.y[i] == 0x5a;
            CHECK(untouched, "shift %d dtype %s: y written by a refused call", shift,
                  ropekit_dtype_name(T));
        }
        /* the table builder and the on-the-fly form */
        static const float inv[4] = {1.0f, 0.5f, 0.25f, 0.125f};
        ropekit_tensor tc = view(b.c + 2, T, 2, tab), ts = view(b.s, T, 2, tab);
        if (es == 4)
            EXPECT_ERR(ropekit_rope_cos_sin_table(inv, 4, 1.0f, ROPEKIT_ANGLE_GRAPH, &tc, &ts),
                       ROPEKIT_ERROR_UNSUPPORTED, "cos_table: data address");
        tc = view(b.c + 1, T, 2, tab);
        EXPECT_ERR(ropekit_rope_cos_sin_table(inv, 4, 1.0f, ROPEKIT_ANGLE_ACCURATE, &tc, &ts),
                   ROPEKIT_ERROR_UNSUPPORTED, "cos_table: data address");
        ropekit_tensor bx = view(b.x + 1, T, 4, x4);
        EXPECT_ERR(ropekit_rotary_embedding_on_the_fly(&bx, inv, 4, 1.0f, &p, &a, &y),
                   ROPEKIT_ERROR_UNSUPPORTED, "x: data address");
        ropekit_tensor bp = view(b.p + 4, ROPEKIT_INT64, 2, ids);
        EXPECT_ERR(ropekit_rotary_embedding_on_the_fly(&x, inv, 4, 1.0f, &bp, &a, &y),
                   ROPEKIT_ERROR_UNSUPPORTED, "position_ids: data address");
    }
    /* QKNorm and the regroup: kv_norm_weight, cos, query_out misaligned */
    {
        enum { QD = 72, QR = 8 };
        unsigned char *q = block(2 * QD * 4), *kv = block(QD * 4), *w = block(QD * 4),
                      *c = block(QR * 4), *s = block(QR * 4), *qo = block(2 * QD * 4),
                      *ko = block(QD * 4);
        if (q && kv && w && c && s && qo && ko) {
            int64_t q3[3] = {1, 1, 2 * QD}, k3[3] = {1, 1, QD}, c3[3] = {1, 1, QR};
            int64_t qo4[4] = {1, 1, 2, QD}, w1[1] = {QD};
            ropekit_tensor tq = view(q, ROPEKIT_FLOAT32, 3, q3), tk = view(kv, ROPEKIT_FLOAT32, 3, k3);
            ropekit_tensor tw = view(w, ROPEKIT_FLOAT32, 1, w1), tc = view(c, ROPEKIT_FLOAT32, 3, c3);
            ropekit_tensor ts = view(s, ROPEKIT_FLOAT32, 3, c3);
            ropekit_tensor tqo = view(qo, ROPEKIT_FLOAT32, 4, qo4), tko = view(ko, ROPEKIT_FLOAT32, 3, k3);
            ropekit_qknorm_rotary_embedding_attrs a = ROPEKIT_QKNORM_ROTARY_EMBEDDING_ATTRS_INIT;
            a.num_heads = 2, a.head_dim = QD, a.rope_head_dim = QR;
            EXPECT_OK(ropekit_qknorm_rotary_embedding(&tq, &tk, &tw, &tc, &ts, &a, &tqo, &tko));
            ropekit_tensor bw = view(w + 2, ROPEKIT_FLOAT32, 1, w1);
            EXPECT_ERR(ropekit_qknorm_rotary_embedding(&tq, &tk, &bw, &tc, &ts, &a, &tqo, &tko),
                       ROPEKIT_ERROR_UNSUPPORTED, "kv_norm_weight: data address");
            ropekit_tensor bc = view(c + 1, ROPEKIT_FLOAT32, 3, c3);
            EXPECT_ERR(ropekit_qknorm_rotary_embedding(&tq, &tk, &tw, &bc, &ts, &a, &tqo, &tko),
                       ROPEKIT_ERROR_UNSUPPORTED, "cos: data address");
            ropekit_tensor bqo = view(qo + 3, ROPEKIT_FLOAT32, 4, qo4);
            EXPECT_ERR(ropekit_qknorm_rotary_embedding(&tq, &tk, &tw, &tc, &ts, &a, &bqo, &tko),
                       ROPEKIT_ERROR_UNSUPPORTED, "query_out: data address");
            int64_t in2[2] = {1, 2 * QD}, r2[2] = {1, QR}, o3[3] = {1, 1, 2 * QD};
            ropekit_tensor rx = view(q + 1, ROPEKIT_FLOAT32, 2, in2), ro = view(qo, ROPEKIT_FLOAT32, 3, o3);
            ropekit_tensor rc = view(c, ROPEKIT_FLOAT32, 2, r2), rs = view(s, ROPEKIT_FLOAT32, 2, r2);
            ropekit_inverse_rotary_regroup_attrs r = ROPEKIT_INVERSE_ROTARY_REGROUP_ATTRS_INIT;
            r.num_heads = 2, r.head_dim = QD, r.rope_head_dim = QR;
            EXPECT_ERR(ropekit_inverse_rotary_regroup(&rx, &rc, &rs, &r, &ro),
                       ROPEKIT_ERROR_UNSUPPORTED, "input: data address");
        } else {
            CHECK(0, "out of memory");
        }
        free(q), free(kv), free(w), free(c), free(s), free(qo), free(ko);
    }
    /* an empty view may sit at any address (nothing is read through it) */
    {
        int64_t e4[4] = {0, N, S, H}, e2[2] = {0, S};
        ropekit_tensor x = view(b.x + 1, ROPEKIT_FLOAT32, 4, e4), y = view(b.y + 3, ROPEKIT_FLOAT32, 4, e4);
        ropekit_tensor c = view(b.c, ROPEKIT_FLOAT32, 2, tab), s = view(b.s, ROPEKIT_FLOAT32, 2, tab);
        ropekit_tensor p = view(b.p + 1, ROPEKIT_INT64, 2, e2);
        ropekit_rotary_embedding_attrs a = ROPEKIT_ROTARY_EMBEDDING_ATTRS_INIT;
        EXPECT_OK(ropekit_rotary_embedding(&x, &c, &s, &p, &a, &y));
    }
    free(b.x), free(b.y), free(b.c), free(b.s), free(b.p);
}

int main(void) {
    test_empty_rotary();
    test_empty_qknorm_regroup();
    test_empty_tables();
    test_misaligned();
    return REPORT();
}
