/* A small tour of the C API: build Llama-3 style cos/sin tables, rotate a query in place, undo
 * the rotation, and show what a bad position id gets you. Build: see README.md. */
#include <math.h>
#include <stdio.h>

#include "ropekit.h"

#define B 1
#define S 4
#define N 2
#define H 8
#define P 16

static int check(ropekit_status st, const char *what) {
    if (st == ROPEKIT_OK) return 0;
    fprintf(stderr, "%s failed: %s: %s\n", what, ropekit_status_str(st), ropekit_last_error());
    return 1;
}

int main(void) {
    /* 1. tables: rope parameters -> inv_freq -> cos/sin (P positions, H/2 columns) */
    ropekit_rope_config cfg = {0};
    cfg.rope_type = ROPEKIT_ROPE_LLAMA3;
    cfg.rotary_dim = H;
    cfg.rope_theta = 500000.0;
    cfg.factor = 8.0;
    cfg.low_freq_factor = 1.0;
    cfg.high_freq_factor = 4.0;
    cfg.original_max_position_embeddings = 8192;
    float inv_freq[H / 2], attention_factor;
    if (check(ropekit_rope_inv_freq(&cfg, 0, inv_freq, H / 2, &attention_factor), "inv_freq"))
        return 1;
    float cos_data[P][H / 2], sin_data[P][H / 2];
    int64_t tshape[2] = {P, H / 2};
    ropekit_tensor cos_t = ropekit_tensor_contiguous(cos_data, ROPEKIT_FLOAT32, 2, tshape);
    ropekit_tensor sin_t = ropekit_tensor_contiguous(sin_data, ROPEKIT_FLOAT32, 2, tshape);
    if (check(ropekit_rope_cos_sin_table(inv_freq, H / 2, attention_factor, ROPEKIT_ANGLE_ACCURATE,
                                         &cos_t, &sin_t), "table"))
        return 1;

    /* 2. a query (B, S, N*H) rotated in place at positions 3, 4, 5, 6 */
    float q[B][S][N * H], orig[B][S][N * H];
    for (int s = 0; s < S; ++s)
        for (int c = 0; c < N * H; ++c) q[0][s][c] = orig[0][s][c] = (float)sin(1.0 + s * 31 + c);
    int64_t pos[B][S] = {{3, 4, 5, 6}};
    int64_t xshape[3] = {B, S, N * H}, pshape[2] = {B, S};
    ropekit_tensor x = ropekit_tensor_contiguous(q, ROPEKIT_FLOAT32, 3, xshape);
    ropekit_tensor ids = ropekit_tensor_contiguous(pos, ROPEKIT_INT64, 2, pshape);
    ropekit_rotary_embedding_attrs attrs = ROPEKIT_ROTARY_EMBEDDING_ATTRS_INIT;
    attrs.num_heads = N;
    if (check(ropekit_rotary_embedding(&x, &cos_t, &sin_t, &ids, &attrs, &x), "rotate")) return 1;
    printf("token 0, head 0 before: ");
    for (int c = 0; c < H; ++c) printf("%+.4f ", orig[0][0][c]);
    printf("\ntoken 0, head 0 after:  ");
    for (int c = 0; c < H; ++c) printf("%+.4f ", q[0][0][c]);

    /* 3. the inverse rotation brings it back (to rounding) */
    attrs.inverse = 1;
    if (check(ropekit_rotary_embedding(&x, &cos_t, &sin_t, &ids, &attrs, &x), "inverse")) return 1;
    double err = 0;
    for (int s = 0; s < S; ++s)
        for (int c = 0; c < N * H; ++c) err = fmax(err, fabs(q[0][s][c] - orig[0][s][c]));
    printf("\nround trip max |error| = %.3g\n", err);

    /* 4. a position past the table is an error, with the index and value */
    pos[0][2] = 70000;
    ropekit_status st = ropekit_rotary_embedding(&x, &cos_t, &sin_t, &ids, &attrs, &x);
    printf("position 70000: %s: %s\n", ropekit_status_str(st), ropekit_last_error());
    return st == ROPEKIT_ERROR_POSITION_OUT_OF_RANGE ? 0 : 1;
}
