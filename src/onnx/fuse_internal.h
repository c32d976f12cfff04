/* Internal interfaces of the RoPE fusion pass (src/onnx/fuse*.c, src/onnx/match_*.c).
 *
 * A fusion runs in two phases. Matching reads the graph and describes each RoPE site it finds
 * (an rk_site: which tensor is rotated, how, and where its angles come from), verifying the
 * structure and every constant, never names. Rewriting then builds one cos/sin table pair per
 * angle source, inserts the fused node for each site, points the site's consumers at it and
 * removes what became dead. Sites keep value NAMES (copied), not node pointers, because the
 * rewrite of one site frees nodes.
 *
 * Matching:
 *   match_linear.c        the sites, in any spelling: each candidate subgraph is evaluated as a
 *                         linear map of the rotated tensor x (term lists per element) and read
 *                         off as a RoPE (half-split or adjacent pairs, partial width, channel
 *                         order, layout); the per-call rows are the graph value holding cos/sin
 *   match_sincos_table.c  GPT-J's sincos table as an angle source (the fixed-table mode)
 *   match_angles.c        angle sources: on-the-fly inv_freq (Mul or MatMul), scaling, casts;
 *                         M-RoPE section / interleaving assembly (dynamo and TorchScript)
 */
#ifndef ROPEKIT_FUSE_INTERNAL_H
#define ROPEKIT_FUSE_INTERNAL_H

#include "onnx_internal.h"

#define RK_REASON 640

/* Where a site's cos/sin come from. */
typedef enum rk_angle_kind {
    RK_ANGLES_INV_FREQ = 1, /* angle = float(position) * inv_freq[k] (on the fly in the graph) */
    RK_ANGLES_TABLE = 2,    /* rows of a constant table in the graph, gathered by position */
    RK_ANGLES_ROWS = 3      /* the graph's own per-call cos/sin (site->cos_term, sin_term) */
} rk_angle_kind;

typedef struct rk_angles {
    rk_angle_kind kind;
    char *positions;   /* int64 ids: (B, S), or (3, B, S) for M-RoPE */
    int64_t half;      /* h = number of frequencies (table columns) */
    float *inv_freq;   /* RK_ANGLES_INV_FREQ: h values, as the graph holds them */
    float scale;       /* attention scaling multiplied onto cos and sin (1 if none) */
    float *cos_rows, *sin_rows; /* RK_ANGLES_TABLE: rows x h values from the graph */
    int64_t rows;
    int mrope;                  /* 1: M-RoPE */
    int64_t mrope_section[3];
    int mrope_layout;
} rk_angles;

typedef enum rk_layout {
    RK_LAYOUT_BNSH = 1, /* x is (B, N, S, H): the fused op takes it as is */
    RK_LAYOUT_BSNH = 2  /* x is (B, S, N, H): reshaped to (B, S, N*H) around the fused op */
} rk_layout;

typedef struct rk_site {
    const char *variant; /* "rotate_half", "rotate_half_partial", "interleaved", ... (static) */
    char *x;             /* the full-head tensor being rotated */
    char *output;        /* the value the fused node replaces */
    char *anchor;        /* a value inside the site, for reports (the Neg output) */
    rk_layout layout;
    int interleaved;
    int64_t rotary_dim; /* R */
    int64_t head_size;  /* H, -1 if unknown */
    int64_t num_heads;  /* N, -1 if unknown */
    int64_t xdims[4];   /* x's inferred dims (-1 unknown; static exports: all known) */
    int32_t elem_type;  /* T of x and of the tables (ONNX data type), 0 if unknown */
    rk_angles angles;
    int angles_ok;            /* the angle source was verified */
    int verified;             /* checked numerically (match_verify.c) */
    /* the tensors that multiply x and rot(x), before the broadcast over heads: (B', S, W) or
     * (S, W) with B' 1 or B; W = R with duplicated halves / pairs (term_full) or R/2 */
    char *cos_term, *sin_term;
    int term_full;
    int sin_second; /* term_full: sin is read from the second member of each pair (the second
                     * half, or the odd columns): the graph's sin factor is e.g. Concat(-s, s) */
    int sin_negated; /* the rotation is by -angle (rotate_half written cat(x2, -x1), NanoChat):
                      * the fused node's sin rows are -sin_term */
    int probe_mrope; /* per-call rows of an M-RoPE site: its positions are (3, B, S) */
    int64_t probe_limit; /* per-call rows: probe positions below this (a graph table's rows), 0 */
    int64_t *x_perm; /* head_size channel indices: the fused node reads x[..., x_perm] (channels
                      * interleaved before a rotate_half, MLA); NULL: x as it is */
    int64_t *y_perm; /* head_size: the site's result is fused[..., y_perm] (a rotation of trailing
                      * or middle channels; the fused node rotates leading ones); NULL: as is */
    char angle_reason[RK_REASON]; /* why the angle source is not a known table (table mode) */
    char reason[RK_REASON];   /* why it cannot be fused ("" when it can) */
    /* results */
    int fused;
    char *fused_node;
    int64_t layer; /* order of appearance / 2, a reporting aid */
} rk_site;

void rk_site_free(rk_site *s);
/* The last check of every matcher: the rotated type must be float, float16 or bfloat16; sets
 * site->angles_ok, or the reason. */
void rk_site_accept(rk_site *site);
void rk_angles_free(rk_angles *a);

/* ---- matcher helpers (match_common.c) ---------------------------------------------------- */

/* Memoize the analyses below for the graph ix (per thread): between begin and end, shape
 * inference and rk_eval_i64 compute each value once, in node order, so every question costs
 * O(1) lookups after a linear warm-up. The graph must not change in between (call end before
 * any edit). Without begin the helpers still work, uncached and depth-capped. */
ropekit_status rk_match_begin(const rk_graph *ix);
void rk_match_end(void);

/* The node producing `name` if its op_type (default domain) is `op`, else NULL. */
Onnx__NodeProto *rk_producer_op(const rk_graph *ix, const char *name, const char *op);
/* Input i of n, or NULL if absent or empty. */
const char *rk_input(const Onnx__NodeProto *n, size_t i);
/* Integer attribute `name` of n, or `def`. */
int64_t rk_attr_i(const Onnx__NodeProto *n, const char *name, int64_t def);
/* Number of consumers of a value (0 if unknown). */
uint32_t rk_consumer_count(const rk_graph *ix, const char *name);
/* The only consumer of `name`, or NULL when there are several or none. */
Onnx__NodeProto *rk_single_consumer(const rk_graph *ix, const char *name);

/* Dims of values that do not depend on the graph inputs' symbolic dims, where the graph does
 * not declare them (TorchScript exports carry no value_info): the shape inference of
 * rk_value_rank run twice, with two different concrete values for every symbolic dim of the
 * declared shapes (graph inputs); dims that agree are kept, the others are -1 (rank -1: not
 * known). shapes[i] for names[i]. Ends any match memo (call it after matching). 0 on out of
 * memory. */
#define RK_PROBE_PARAMS 32
int rk_probe_dims(const rk_graph *ix, const char *const *names, size_t n, rk_shape *shapes);

/* The only consumer of `name` that is not a Shape node (exporters read shapes of intermediate
 * values for later reshapes; those readers die with the site), or NULL. */
Onnx__NodeProto *rk_main_consumer(const rk_graph *ix, const char *name);

/* Evaluate a small int64 vector `name` (at most cap elements): constants, and the shape
 * arithmetic exporters put in index paths (Shape with known dims, Gather, Cast, Unsqueeze,
 * Squeeze, Concat, Reshape, Add, Sub, Mul, Div). 1 on success. */
int rk_eval_i64(const rk_graph *ix, const char *name, int64_t *out, size_t cap, size_t *count);
/* A scalar (or one-element) int64 expression. */
int rk_eval_i64_scalar(const rk_graph *ix, const char *name, int64_t *out);
/* A one-element float constant. */
int rk_const_scalar_f(const rk_graph *ix, const char *name, float *out);

/* Slice(data, starts, ends, axes, steps) with one axis: fills start/end/axis/step (the
 * defaults when absent). 1 when n is such a Slice with constant (or evaluable) parameters. */
int rk_slice_params(const rk_graph *ix, const Onnx__NodeProto *n, int64_t *start, int64_t *end,
                    int64_t *axis, int64_t *step);

/* Are two values the same computation? Same name, or produced by nodes of the same op type,
 * attributes and (recursively) equivalent inputs, or equal constants. Bounded depth. */
int rk_equivalent(const rk_graph *ix, const char *a, const char *b, int depth);

/* Follow value-preserving producers (Cast when `casts`, Identity) back from name. */
const char *rk_skip_casts(const rk_graph *ix, const char *name, int32_t *last_cast_to);

/* Rank and last dims of a value from the graph's type information; 0 if unknown. */
int rk_value_rank(const rk_graph *ix, const char *name, rk_shape *shape);

/* The other operand of a binary node, given one; NULL if `one` is not an operand. */
const char *rk_other_operand(const Onnx__NodeProto *n, const char *one);
int rk_is_last_axis(int64_t axis, int rank);

/* ---- angle sources (match_angles.c) ------------------------------------------------------- */

/* From a full-width table term (what multiplies x or rotate_half(x), before any Unsqueeze over
 * heads) describe the angle source: strips Cast (recording the target type) and a constant
 * scaling Mul, requires Cos (want_sin = 0) or Sin, then analyses the angle. On success fills a
 * (owned) and returns 1; on a recognized but refused source returns 0 with `reason` set; on an
 * unrecognized one returns 0 with reason describing what was found. */
int rk_match_angle_term(const rk_graph *ix, const char *term, int want_sin, rk_angles *a,
                        int32_t *cast_to, char *reason, size_t n);
/* GPT-J's sincos table (match_sincos_table.c): sin_v, cos_v = the two halves of a Split of rows
 * gathered from a constant (positions, 2h) table by position ids; fills a (RK_ANGLES_TABLE). */
int rk_match_sincos_table(const rk_graph *ix, const char *cos_v, const char *sin_v, rk_angles *a,
                          char *reason, size_t n);
/* Two angle sources describe the same tables (cos and sin halves of one site). */
int rk_angles_same(const rk_angles *a, const rk_angles *b);

/* ---- numeric evaluation (eval.c) ------------------------------------------------------------
 * A memoized interpreter of ONNX nodes on small concrete tensors, for proving what a subgraph
 * computes (site verification; reusable by any matcher that wants to evaluate a candidate).
 *
 *   rk_eval *e = rk_eval_new(ix, max_elems, budget);   per-tensor and total element limits
 *   rk_eval_set_dim(e, "batch", 2);                     symbolic dims of graph inputs, by name
 *                                                        ("" or NULL: the value for unnamed dims)
 *   rk_eval_bind(e, "q", RK_DT_FLOAT, 4, dims, vals);   a value taken as given (a cut: what
 *                                                        produces it is never evaluated)
 *   const rk_ten *t = rk_eval_get(e, "y");              NULL on failure: rk_eval_error(e) says
 *                                                        why (first failure, e.g. an unknown op)
 *   rk_eval_free(e);
 * Values are doubles rounded to the value's element type after every op (float32 / float16 /
 * bfloat16 arithmetic as a runtime does it; integers exact below 2^53). Each value is computed
 * once per evaluator; depth, tensor size and total work are bounded. Unbound graph inputs get
 * their declared shape (dims by name) and deterministic contents (floats in [-1, 1], integers 1).
 * Ops: Identity Dropout Cast CastLike Neg Abs Cos Sin Sqrt Reciprocal Exp Log Floor Ceil Not Sign
 * Erf Tanh Sigmoid Add Sub Mul Div Pow Max Min Mod Equal Greater Less GreaterOrEqual LessOrEqual
 * And Or Xor Where Shape Size Reshape Flatten Unsqueeze Squeeze Transpose Slice Concat Split
 * Expand Tile Gather GatherElements GatherND MatMul Einsum (explicit output, no ellipsis)
 * LayerNormalization (Y only) Softmax (last axis) ReduceMax/Min/Sum/Mean Range ConstantOfShape
 * ScatterND ScatterElements Constant (default domain only). */
typedef struct rk_ten {
    int32_t type; /* ONNX element type */
    int32_t rank;
    int64_t dims[RK_SHAPE_MAX_RANK];
    int64_t n;
    double *v; /* row-major */
} rk_ten;
typedef struct rk_eval rk_eval;
rk_eval *rk_eval_new(const rk_graph *ix, int64_t max_elems, int64_t budget);
void rk_eval_free(rk_eval *e);
int rk_eval_set_dim(rk_eval *e, const char *param, int64_t value);
int rk_eval_bind(rk_eval *e, const char *name, int32_t type, int rank, const int64_t *dims,
                 const double *values);
const rk_ten *rk_eval_get(rk_eval *e, const char *name);
const char *rk_eval_error(const rk_eval *e);

/* ---- verification (match_verify.c) --------------------------------------------------------- */

/* The cos/sin tables the fused node gets for an angle source, as elem_type bytes (malloc'd):
 * rows = the source's own rows (a graph table) or P (inv_freq). fuse.c writes these. */
ropekit_status rk_angles_tables(const rk_angles *a, int32_t elem_type, int64_t P, char **cos_buf,
                                char **sin_buf, int64_t *rows);
/* Never a wrong fusion: evaluate every acceptable site's original subgraph on probe inputs (one
 * evaluator: random x per site, probe positions within the table) and the fused operator
 * (ropekit's CPU operators, bit-identical to the scalar reference) on the same inputs; a site
 * whose results disagree, or whose subgraph cannot be evaluated, gets a reason. table_rows: the
 * fixed table length for inv_freq sources. */
void rk_sites_verify(const rk_graph *ix, rk_site *sites, size_t n, int64_t table_rows);

/* ---- site matching (match_linear.c) ------------------------------------------------------- */
/* Every site of the graph, appended to *sites (grown with realloc; *cap its capacity), in graph
 * order: each Add/Sub of products with Cos/Sin-derived factors (or rows of a sinusoid table)
 * whose subgraph is a linear map of one rotated tensor; site->reason says why one that is not a
 * RoPE the fused operator computes is left alone. */
ropekit_status rk_match_linear_all(const rk_graph *ix, rk_site **sites, size_t *n, size_t *cap);
/* The site at one Add/Sub node: 1 with *site filled (owned; maybe with a reason), 0 when the
 * node is not a candidate. */
int rk_match_linear_at(const rk_graph *ix, const Onnx__NodeProto *add, rk_site *site);

/* ---- DeepSeek-V4 attention (match_qknorm.c) ----------------------------------------------- */
/* Find each layer's q/kv norm + RoPE and output inverse rotation + regroup, verify them
 * numerically, and (unless dry_run) replace them with QKNormRotaryEmbedding /
 * InverseRotaryRegroup of `domain`. One report line per site into log. Ends the match memo
 * (rk_match_end) before changing the graph. */
ropekit_status rk_fuse_qknorm(rk_graph *ix, const char *domain, int dry_run, rk_buf *log,
                              int64_t *n_found, int64_t *n_fused);
/* Set (or add) a metadata_props entry of the model. */
ropekit_status rk_model_set_metadata(Onnx__ModelProto *m, const char *key, const char *value);

#endif
