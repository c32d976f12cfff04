/* The shared correctness vectors (tests/cases/<op>.bin, written by scripts/make_shared_cases.py)
 * on every CPU variant this machine runs, bit for bit against the "ref" variant: whole output
 * buffers, pre-filled with the same pattern, so bytes an operator should not write are compared
 * too. Then the reader itself: truncated files, flipped bits (caught by the CRC-32 trailer), and
 * flipped bits in the structural fields of a two-case file whose CRC is recomputed (so the
 * parser's own checks must refuse it, or accept a well-formed file the library then judges);
 * none may crash (the ASan/UBSan build runs this too).
 *
 *   test_shared_cases [DIR]            all checks on DIR (default: RK_CASES_DIR, from CMake)
 *   test_shared_cases --load FILE...   load each file and say whether the reader accepts it
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"
#include "check.h"
#include "ropekit.h"

#ifndef RK_CASES_DIR
#error "RK_CASES_DIR must name the case directory (tests/CMakeLists.txt defines it)"
#endif

#define FILL_BYTE 0xA5 /* output pre-fill: compared like the written bytes */

static const char *const k_variants[] = {"ref", "avx2", "avx512", "neon"};
static const char *g_variants[4]; /* the ones this machine runs; [0] is "ref" */
static int g_nvariants;

/* ---- helpers ------------------------------------------------------------------------------- */

static unsigned char *slurp(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    unsigned char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, fp)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char *p = realloc(buf, cap *= 2);
            if (!p) free(buf);
            buf = p;
        }
    }
    fclose(fp);
    *size = n;
    return buf;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

/* Run a case on variant `name` into freshly allocated, pattern-filled outputs. */
static ropekit_status run_on(const char *name, const rk_case *c,
                             ropekit_tensor out[RK_CASE_MAX_OUTPUTS]) {
    ropekit_status st = ropekit_set_cpu_variant(name);
    if (st != ROPEKIT_OK) return st;
    for (int i = 0; i < c->n_outputs; ++i)
        memset(out[i].data, FILL_BYTE, rk_tensor_nbytes(&out[i]));
    return rk_case_run_cpu(c, out);
}

/* ---- every case on every variant ------------------------------------------------------------ */

static void check_file(const char *dir, rk_case_op op) {
    char path[1024], err[512], desc[1024];
    snprintf(path, sizeof path, "%s/%s.bin", dir, rk_case_op_name(op));
    rk_case_file f;
    int rc = rk_cases_load(path, &f, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc != 0) return;
    CHECK(f.op == op && f.count > 0, "%s: op %d, %zu cases", path, (int)f.op, f.count);
    size_t compared = 0;
    for (size_t i = 0; i < f.count; ++i) {
        const rk_case *c = &f.cases[i];
        ropekit_tensor want[RK_CASE_MAX_OUTPUTS], got[RK_CASE_MAX_OUTPUTS];
        if (rk_case_alloc_outputs(c, want) < 0) {
            CHECK(0, "out of memory");
            continue;
        }
        ropekit_status st = run_on("ref", c, want);
        CHECK(st == ROPEKIT_OK, "%s: ref: %s: %s", rk_case_describe(c, desc, sizeof desc),
              ropekit_status_str(st), ropekit_last_error());
        for (int v = 1; st == ROPEKIT_OK && v < g_nvariants; ++v) {
            if (rk_case_alloc_outputs(c, got) < 0) {
                CHECK(0, "out of memory");
                break;
            }
            ropekit_status sv = run_on(g_variants[v], c, got);
            CHECK(sv == ROPEKIT_OK, "%s: %s: %s: %s", rk_case_describe(c, desc, sizeof desc),
                  g_variants[v], ropekit_status_str(sv), ropekit_last_error());
            for (int k = 0; sv == ROPEKIT_OK && k < c->n_outputs; ++k) {
                size_t n = rk_tensor_nbytes(&want[k]), es = ropekit_dtype_size(want[k].dtype);
                const unsigned char *a = want[k].data, *b = got[k].data;
                size_t at = 0;
                while (at < n && a[at] == b[at]) ++at;
                CHECK(at == n, "%s: %s differs from ref in %s at element %zu",
                      rk_case_describe(c, desc, sizeof desc), g_variants[v],
                      rk_case_output_name(op, k), at / es);
                ++compared;
            }
            rk_case_free_outputs(c, got);
        }
        rk_case_free_outputs(c, want);
    }
    printf("%-28s %3zu cases, %zu outputs compared with ref\n", rk_case_op_name(op), f.count,
           compared);
    rk_cases_free(&f);
}

/* ---- the reader on corrupt files ------------------------------------------------------------ */

/* Expect rk_cases_load_memory to refuse these bytes, with a message. */
static void expect_refused(const unsigned char *p, size_t n, const char *what, size_t where) {
    rk_case_file f;
    char err[512] = "";
    int rc = rk_cases_load_memory(p, n, &f, err, sizeof err);
    CHECK(rc != 0 && err[0] != '\0', "%s at %zu: accepted", what, where);
    if (rc == 0) rk_cases_free(&f);
}

/* Load bytes that may or may not be well formed; if accepted, run every case (whatever the
 * library answers, nothing may be read or written out of bounds). Returns 1 if accepted. */
static int load_and_run(const unsigned char *p, size_t n) {
    rk_case_file f;
    char err[512] = "";
    if (rk_cases_load_memory(p, n, &f, err, sizeof err) != 0) {
        CHECK(err[0] != '\0', "refused without a message");
        return 0;
    }
    for (size_t i = 0; i < f.count; ++i) {
        ropekit_tensor out[RK_CASE_MAX_OUTPUTS];
        if (rk_case_alloc_outputs(&f.cases[i], out) < 0) continue; /* a flipped huge shape */
        (void)rk_case_run_cpu(&f.cases[i], out);
        rk_case_free_outputs(&f.cases[i], out);
    }
    rk_cases_free(&f);
    return 1;
}

/* Flip every bit of p[lo, hi) (clamped to the body), fix the CRC trailer, load and run. */
static void flip_range(unsigned char *p, size_t n, size_t lo, size_t hi, int *accepted,
                       int *refused) {
    size_t body = n - 4;
    if (hi > body) hi = body;
    for (size_t i = lo; i < hi; ++i)
        for (int bit = 0; bit < 8; ++bit) {
            p[i] ^= (unsigned char)(1u << bit);
            put_u32(p + body, rk_cases_crc32(p, body));
            if (load_and_run(p, n))
                ++*accepted;
            else
                ++*refused;
            p[i] ^= (unsigned char)(1u << bit);
        }
    put_u32(p + body, rk_cases_crc32(p, body));
}

/* Cut the body of p (n bytes with its trailer) to `keep` bytes and append a valid CRC: the
 * checksum passes, so the parser itself must find the missing bytes. */
static void expect_cut_refused(const unsigned char *p, size_t keep) {
    unsigned char *q = malloc(keep + 4);
    if (!q) return;
    memcpy(q, p, keep);
    put_u32(q + keep, rk_cases_crc32(q, keep));
    expect_refused(q, keep + 4, "truncated file with a valid CRC", keep);
    free(q);
}

static void check_reader(const char *dir, rk_case_op op) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s.bin", dir, rk_case_op_name(op));
    size_t size = 0;
    unsigned char *raw = slurp(path, &size);
    CHECK(raw != NULL && size > 20, "%s: cannot read", path);
    if (!raw) return;
    rk_case_file f;
    if (rk_cases_load_memory(raw, size, &f, err, sizeof err) != 0 || f.count < 3) {
        CHECK(0, "%s: %s", path, err);
        free(raw);
        return;
    }

    /* truncations: every length up to 64, then about 256 spread over the file, then the end */
    int before = g_failed;
    for (size_t n = 0; n < size; n += n < 64 ? 1 : size / 256 + 1)
        expect_refused(raw, n, "truncated file", n);
    for (size_t k = 1; k <= 8; ++k) expect_refused(raw, size - k, "truncated file", size - k);
    /* single flipped bits anywhere (about 512, deterministic): the CRC-32 catches every one */
    for (int k = 0; k < 512; ++k) {
        size_t i = (size_t)(rng_u64() % size);
        unsigned char bit = (unsigned char)(1u << (rng_u64() % 8));
        raw[i] ^= bit;
        expect_refused(raw, size, "flipped bit", i);
        raw[i] ^= bit;
    }
    /* truncated bodies with a recomputed CRC (about 256 spread cuts) */
    for (size_t keep = 0; keep < size - 4; keep += (size - 4) / 256 + 1)
        expect_cut_refused(raw, keep);
    /* appended bytes: the CRC no longer sits at the end */
    unsigned char *longer = malloc(size + 3);
    if (longer) {
        memcpy(longer, raw, size);
        memset(longer + size, 0, 3);
        expect_refused(longer, size + 3, "appended bytes", size);
        free(longer);
    }

    /* A two-case file (cases 0 and 1, CRC fixed), then every bit of its structural fields
     * flipped with the CRC recomputed: the file header, each case's counts and attributes up
     * to its first tensor record, and the first 48 bytes of each tensor record (present,
     * dtype, rank, shape, start of the data); and the file cut (CRC recomputed) at each of
     * those bytes. */
    size_t lo = f.cases[0].offset, hi = f.cases[2].offset, n = 16 + (hi - lo) + 4;
    unsigned char *mini = malloc(n);
    int accepted = 0, refused = 0;
    if (mini) {
        memcpy(mini, raw, 16);
        put_u32(mini + 12, 2);
        memcpy(mini + 16, raw + lo, hi - lo);
        put_u32(mini + n - 4, rk_cases_crc32(mini, n - 4));
        rk_case_file g;
        int rc = rk_cases_load_memory(mini, n, &g, err, sizeof err);
        CHECK(rc == 0 && g.count == 2, "two-case file: %s", err);
        if (rc == 0) rk_cases_free(&g);
        flip_range(mini, n, 0, 16, &accepted, &refused);
        for (int k = 0; k < 2; ++k) {
            const rk_case *c = &f.cases[k];
            /* offsets in the two-case file: 16 header bytes, then the records from lo on */
            size_t start = c->offset - lo + 16, first = c->input_offset[0] - lo + 16;
            flip_range(mini, n, start, first, &accepted, &refused);
            for (size_t keep = start; keep <= first; ++keep) expect_cut_refused(mini, keep);
            for (int i = 0; i < c->n_inputs; ++i) {
                size_t at = c->input_offset[i] - lo + 16;
                flip_range(mini, n, at, at + 48, &accepted, &refused);
                for (size_t keep = at; keep < at + 48 && keep < n - 4; ++keep)
                    expect_cut_refused(mini, keep);
            }
        }
        free(mini);
    }
    printf("%-28s reader: truncations and flipped bits refused%s; structural flips with the CRC "
           "recomputed: %d refused, %d accepted (well formed) and run\n", rk_case_op_name(op),
           g_failed == before ? "" : " (FAILURES)", refused, accepted);
    CHECK(refused > 0, "no structural flip was refused");
    rk_cases_free(&f);
    free(raw);
}

/* ---- main ----------------------------------------------------------------------------------- */

static int load_only(int argc, char **argv) {
    int bad = 0;
    for (int i = 2; i < argc; ++i) {
        rk_case_file f;
        char err[512];
        if (rk_cases_load(argv[i], &f, err, sizeof err) == 0) {
            printf("%s: accepted: %s, %zu cases\n", argv[i], rk_case_op_name(f.op), f.count);
            rk_cases_free(&f);
        } else {
            printf("refused: %s\n", err);
            bad = 1;
        }
    }
    return bad;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--load") == 0) return load_only(argc, argv);
    const char *dir = argc > 1 ? argv[1] : RK_CASES_DIR;

    printf("case directory: %s\nCPU variants run:", dir);
    for (int v = 0; v < 4; ++v) {
        ropekit_status st = ropekit_set_cpu_variant(k_variants[v]);
        if (st == ROPEKIT_OK) {
            g_variants[g_nvariants++] = k_variants[v];
            printf(" %s", k_variants[v]);
        }
    }
    printf("\nskipped (not built or not supported here):");
    for (int v = 0; v < 4; ++v)
        if (ropekit_set_cpu_variant(k_variants[v]) != ROPEKIT_OK) printf(" %s", k_variants[v]);
    printf("\n");
    CHECK(g_nvariants > 0 && strcmp(g_variants[0], "ref") == 0, "the ref variant must run");
    if (g_nvariants == 0) return REPORT();

    for (int op = 0; op < RK_OP_COUNT; ++op) check_file(dir, (rk_case_op)op);
    for (int op = 0; op < RK_OP_COUNT; ++op) check_reader(dir, (rk_case_op)op);
    ropekit_set_cpu_variant("auto");
    return REPORT();
}
