/* CPU backend unit tests on a synthetic model whose weights use every dtype:
 * the row dequantization equals the model layer's lpx_dequantize_row; products
 * equal a float64 reference; a token's logits are bit-identical alone, batched
 * with other sequences, in prefill chunks or in decode; copy_block forks a
 * sequence; malformed batches are refused. The forward pass itself is checked
 * against transformers by tests/py/test_cpu_backend*.py. */
#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "base/threadpool.h"
#include "test.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) {
    return (float)(rnd() % 20001) / 10000.0f - 1.0f;
} /* [-1, 1] */

/* A finite f16 with magnitude in [2^-6, 2^-5): a plausible block scale. */
static uint16_t rnd_scale(void) {
    return (uint16_t)(0x2400 | (rnd() & 0x3ff) | (rnd() & 1) << 15);
}

/* Random bytes of rows x cols elements of type t (valid scales in block types). */
static uint8_t *rnd_tensor_data(lpx_dtype t, int64_t rows, int64_t cols, size_t *nbytes) {
    size_t row;
    lpx_dtype_row_bytes(t, cols, &row);
    *nbytes = row * (size_t)rows;
    uint8_t *p = malloc(*nbytes);
    for (size_t i = 0; i < *nbytes; i++)
        p[i] = (uint8_t)rnd();
    int be = lpx_dtype_block_bytes(t);
    for (size_t off = 0; off < *nbytes; off += (size_t)be) {
        uint16_t s;
        switch (t) {
        case LPX_DT_F32: {
            float f = rndf() * 0.3f;
            memcpy(p + off, &f, 4);
            break;
        }
        case LPX_DT_F16:
        case LPX_DT_BF16:
            /* exponents near 2^-2 keep values finite and O(0.1) */
            s = t == LPX_DT_F16 ? (uint16_t)(0x3000 | (rnd() & 0x3ff) | (rnd() & 1) << 15)
                                : (uint16_t)(0x3e00 | (rnd() & 0x7f) | (rnd() & 1) << 15);
            memcpy(p + off, &s, 2);
            break;
        case LPX_DT_Q4_1:
            s = rnd_scale();
            memcpy(p + off + 2, &s, 2);
            /* fall through */
        case LPX_DT_Q4_K:
        case LPX_DT_Q5_K:
            s = rnd_scale();
            memcpy(p + off + 2, &s, 2);
            /* fall through */
        case LPX_DT_Q8_0:
        case LPX_DT_Q4_0:
            s = rnd_scale();
            memcpy(p + off, &s, 2);
            break;
        case LPX_DT_Q6_K:
            s = rnd_scale();
            memcpy(p + off + 208, &s, 2);
            break;
        case LPX_DT_COUNT:
            break;
        }
    }
    return p;
}

static lpx_tensor *mk(lpx_tensor *t, const char *name, lpx_dtype type, int64_t rows, int64_t cols) {
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = rows ? 2 : 1;
    t->shape[0] = rows ? rows : cols;
    t->shape[1] = cols;
    t->data = rnd_tensor_data(type, rows ? rows : 1, cols, &t->nbytes);
    return t;
}

static void test_dequantize(void) {
    for (int t = 0; t < LPX_DT_COUNT; t++) {
        size_t n;
        uint8_t *src = rnd_tensor_data((lpx_dtype)t, 1, 256, &n);
        float a[256], b[256];
        cpu_dequantize((lpx_dtype)t, src, a, 256);
        lpx_dequantize_row((lpx_dtype)t, src, b, 256);
        CHECK(!memcmp(a, b, sizeof a));
        free(src);
    }
    /* f16 corner cases: zeros, a subnormal, the largest normal, infinity, one */
    uint16_t h[8] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x7bff, 0x7c00, 0xfc00, 0x3c00};
    float a[8], b[8];
    cpu_dequantize(LPX_DT_F16, h, a, 8);
    lpx_dequantize_row(LPX_DT_F16, h, b, 8);
    CHECK(!memcmp(a, b, sizeof a));
    CHECK(a[7] == 1.0f && a[2] == 0x1p-24f && isinf(a[5]) && a[6] < 0);
}

/* Products of every dtype against float64: with fp32 activations (qk NULL)
 * to fp32 rounding; with the integer dots of `qk` the block types to fp32
 * rounding of the quantized activations, and within the quantization step of
 * the exact product. */
static void test_matmul(lpx_threadpool *pool, const cpu_qkernels *qk) {
    enum { ROWS = 37, COLS = 256, NT = 5 }; /* COLS: one K-quant super-block */
    float x[NT][COLS], y[NT][ROWS], bias[ROWS], rowbuf[2 * CPU_MATMUL_ROWBUF(COLS)], w[COLS];
    lpx_blk_q8 xq[NT][COLS / LPX_QK];
    const cpu_matmul_env env = {pool, qk, rowbuf, CPU_MATMUL_ROWBUF(COLS), &xq[0][0]};
    for (int t = 0; t < NT; t++)
        for (int c = 0; c < COLS; c++)
            x[t][c] = rndf();
    for (int r = 0; r < ROWS; r++)
        bias[r] = rndf();
    for (int type = 0; type < LPX_DT_COUNT; type++) {
        lpx_tensor W;
        mk(&W, "w", (lpx_dtype)type, ROWS, COLS);
        const bool integer = qk && qk->tile[type];
        for (int acc = 0; acc < 2; acc++) {
            for (int t = 0; t < NT; t++)
                for (int r = 0; r < ROWS; r++)
                    y[t][r] = acc ? 1.0f : NAN;
            cpu_matmul_job job = {&W, bias, &y[0][0], ROWS, acc};
            cpu_matmul(&env, &job, 1, &x[0][0], COLS, NT);
            double worst = 0, worst_exact = 0;
            size_t row_bytes = W.nbytes / ROWS;
            for (int r = 0; r < ROWS; r++) {
                lpx_dequantize_row(W.type, (const uint8_t *)W.data + r * row_bytes, w, COLS);
                for (int t = 0; t < NT; t++) {
                    double ref = bias[r] + (acc ? 1.0 : 0.0), mag = fabs(bias[r]), exact = ref;
                    for (int c = 0; c < COLS; c++) {
                        const lpx_blk_q8 *q = &xq[t][c / LPX_QK];
                        double xv = integer ? (double)q->d * q->q[c % LPX_QK] : x[t][c];
                        ref += (double)w[c] * xv;
                        exact += (double)w[c] * x[t][c];
                        mag += fabs((double)w[c] * x[t][c]);
                    }
                    double e = fabs(y[t][r] - ref) / (mag + 1e-30);
                    if (!(e <= worst)) worst = e; /* NaN makes it fail */
                    e = fabs(y[t][r] - exact) / (mag + 1e-30);
                    if (!(e <= worst_exact)) worst_exact = e;
                }
            }
            /* x in [-1, 1] quantizes with steps of at most 1/127 */
            CHECK(worst < 1e-6 && worst_exact < (integer ? 0.5 / 127 : 1e-6));
            if (!(worst < 1e-6))
                fprintf(stderr, "matmul %s (%s): relative error %g\n", lpx_dtype_name(W.type),
                        integer ? qk->isa : "fp32", worst);
        }
        if (type == LPX_DT_F32) {
            /* F32 weights at an odd address (a file may place them so) give the same result. */
            uint8_t *odd = malloc(W.nbytes + 1);
            memcpy(odd + 1, W.data, W.nbytes);
            float y2[NT][ROWS];
            lpx_tensor W2 = W;
            W2.data = odd + 1;
            cpu_matmul_job j1 = {&W, NULL, &y[0][0], ROWS, false},
                           j2 = {&W2, NULL, &y2[0][0], ROWS, false};
            cpu_matmul(&env, &j1, 1, &x[0][0], COLS, NT);
            cpu_matmul(&env, &j2, 1, &x[0][0], COLS, NT);
            CHECK(!memcmp(y, y2, sizeof y));
            free(odd);
        }
        free((void *)W.data);
    }
}

typedef struct toy {
    lpx_model m;
    lpx_layer layers[2];
    lpx_tensor t[64];
} toy;

static void toy_init(toy *y, bool features) {
    memset(y, 0, sizeof *y);
    lpx_config *c = &y->m.cfg;
    c->arch = features ? LPX_ARCH_QWEN3 : LPX_ARCH_LLAMA;
    c->n_layers = 2;
    c->d_model = 64;
    c->n_heads = 4;
    c->n_kv_heads = 2;
    c->head_dim = features ? 32 : 16;
    c->d_ff = 96;
    c->vocab_size = 160;
    c->max_position_embeddings = 256;
    c->rms_norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->rope_interleaved = features;
    if (features) {
        c->rope_scaling = LPX_ROPE_LLAMA3;
        c->rope_factor = 8;
        c->rope_low_freq_factor = 1;
        c->rope_high_freq_factor = 4;
        c->rope_original_max_pos = 64;
        c->qkv_bias = c->qk_norm = true;
        c->sliding_window = 6;
    }
    int64_t d = c->d_model, q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
    lpx_tensor *t = y->t;
    y->m.w.tok_embd = mk(t++, "tok_embd", LPX_DT_Q8_0, c->vocab_size, d);
    y->m.w.lm_head = mk(t++, "lm_head", features ? LPX_DT_Q4_1 : LPX_DT_F32, c->vocab_size, d);
    y->m.w.out_norm = mk(t++, "out_norm", LPX_DT_F32, 0, d);
    y->m.w.layers = y->layers;
    for (int l = 0; l < 2; l++) {
        lpx_layer *L = &y->layers[l];
        L->attn_norm = mk(t++, "attn_norm", LPX_DT_BF16, 0, d);
        L->ffn_norm = mk(t++, "ffn_norm", LPX_DT_F32, 0, d);
        L->wq = mk(t++, "wq", LPX_DT_Q4_1, q, d);
        L->wk = mk(t++, "wk", LPX_DT_Q8_0, kv, d);
        L->wv = mk(t++, "wv", LPX_DT_Q4_0, kv, d);
        L->wo = mk(t++, "wo", LPX_DT_F16, d, q);
        L->w_gate = mk(t++, "w_gate", LPX_DT_BF16, c->d_ff, d);
        L->w_up = mk(t++, "w_up", LPX_DT_F32, c->d_ff, d);
        L->w_down = mk(t++, "w_down", LPX_DT_Q4_1, d, c->d_ff);
        if (features) {
            L->bq = mk(t++, "bq", LPX_DT_F32, 0, q);
            L->bk = mk(t++, "bk", LPX_DT_F32, 0, kv);
            L->bv = mk(t++, "bv", LPX_DT_F32, 0, kv);
            L->q_norm = mk(t++, "q_norm", LPX_DT_F32, 0, c->head_dim);
            L->k_norm = mk(t++, "k_norm", LPX_DT_F16, 0, c->head_dim);
        }
    }
    y->m.tensors = y->t;
    y->m.n_tensors = t - y->t;
}

static void toy_free(toy *y) {
    for (int64_t i = 0; i < y->m.n_tensors; i++)
        free((void *)y->t[i].data);
}

enum { NSEQ = 3, BS = 4, MAXB = 8, NBLK = NSEQ * MAXB + 2, VOCAB = 160 };
static const int32_t seq_n[NSEQ] = {13, 7, 20};
static int32_t ids[NSEQ][20];

/* Feeds sequences through `b` in steps: seq s takes chunk[s] ids per step (0:
 * sits out). Logits of every position go to out[s][pos]. */
static bool feed(lpx_backend *b, const int32_t *chunk, const int32_t table[NSEQ][MAXB],
                 float out[NSEQ][20][VOCAB]) {
    int32_t done[NSEQ] = {0};
    static float logits[40][VOCAB];
    for (;;) {
        int32_t tok[40], pos[40], start[NSEQ + 1], len[NSEQ], tbl[NSEQ][MAXB], rows[40],
            which[NSEQ];
        int32_t n = 0, ns = 0;
        for (int s = 0; s < NSEQ; s++) {
            int32_t take = seq_n[s] - done[s] < chunk[s] ? seq_n[s] - done[s] : chunk[s];
            if (take <= 0) continue;
            start[ns] = n;
            for (int32_t i = 0; i < take; i++, n++) {
                tok[n] = ids[s][done[s] + i];
                pos[n] = done[s] + i;
                rows[n] = n;
            }
            len[ns] = done[s] + take;
            memcpy(tbl[ns], table[s], sizeof tbl[ns]);
            which[ns++] = s;
        }
        if (!n) return true;
        start[ns] = n;
        lpx_batch bt = {n, tok, pos, ns, start, len, &tbl[0][0], MAXB, n, rows};
        if (lpx_backend_run(b, &(lpx_step){.batch = &bt, .logits = &logits[0][0]}) != LPX_OK) {
            fprintf(stderr, "step: %s\n", lpx_last_error());
            return false;
        }
        for (int i = 0; i < ns; i++) {
            int s = which[i];
            for (int32_t p = len[i] - (start[i + 1] - start[i]), r = start[i]; p < len[i]; p++, r++)
                memcpy(out[s][p], logits[r], sizeof logits[r]);
            done[s] = len[i];
        }
    }
}

static float alone[NSEQ][20][VOCAB], other[NSEQ][20][VOCAB];

static bool same(int n_seqs_to_check) {
    for (int s = 0; s < n_seqs_to_check; s++)
        if (memcmp(alone[s], other[s], sizeof(float) * VOCAB * (size_t)seq_n[s])) return false;
    return true;
}

/* tune: the kernels (docs/dev.md, LPX_CPU_TUNE): each keeps every bit invariant. */
static void test_invariance(bool features, const char *tune) {
    toy y;
    toy_init(&y, features);
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < seq_n[s]; i++)
            ids[s][i] = (int32_t)(rnd() % VOCAB);
    lpx_backend_opts o = {.n_threads = 2,
                          .block_size = BS,
                          .n_blocks = NBLK,
                          .max_batch_tokens = 40,
                          .max_seqs = NSEQ,
                          .tune = tune};
    lpx_backend *b = NULL;
    CHECK(lpx_cpu_backend_ops.create(&y.m, &o, &b) == LPX_OK);
    if (!b) {
        fprintf(stderr, "create: %s\n", lpx_last_error());
        toy_free(&y);
        return;
    }
    CHECK(b->ops->memory_used(b) > (size_t)NBLK * BS * 2 * 2 * 64 * sizeof(float));
    int32_t table[NSEQ][MAXB], table2[NSEQ][MAXB];
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < MAXB; i++) {
            table[s][i] = NBLK - 1 - (i * NSEQ + s); /* interleaved, descending */
            table2[s][i] = i * NSEQ + s;
        }

    /* Reference: each sequence alone, one prefill step. */
    for (int s = 0; s < NSEQ; s++) {
        int32_t chunk[NSEQ] = {0};
        chunk[s] = 64;
        CHECK(feed(b, chunk, table, alone));
    }
    float mx = 0;
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < seq_n[s]; i++)
            for (int v = 0; v < VOCAB; v++)
                mx = fmaxf(mx, fabsf(alone[s][i][v]));
    CHECK(mx > 0.1f && isfinite(mx)); /* logits neither flat nor broken */

    /* All together: mixed prefill chunks and decode, other blocks; then all decode. */
    int32_t mixed[NSEQ] = {5, 1, 64}, decode[NSEQ] = {1, 1, 1}, chunks3[NSEQ] = {3, 3, 3};
    memset(other, 0, sizeof other);
    CHECK(feed(b, mixed, table2, other) && same(NSEQ));
    memset(other, 0, sizeof other);
    CHECK(feed(b, decode, table, other) && same(NSEQ));
    memset(other, 0, sizeof other);
    CHECK(feed(b, chunks3, table2, other) && same(NSEQ));
    /* One token per step and nothing else in the batch: the fused single-token
     * products must give the same bits as the buffered ones. */
    int32_t solo[NSEQ] = {0, 0, 1};
    memset(other, 0, sizeof other);
    CHECK(feed(b, solo, table2, other) &&
          !memcmp(alone[2], other[2], sizeof(float) * VOCAB * (size_t)seq_n[2]));

    /* A different position of the same tokens must change the logits (the
     * comparison above is not vacuous): sequence 0 shifted by one. */
    int32_t chunk0[NSEQ] = {64, 0, 0};
    int32_t save = ids[0][0];
    ids[0][0] = (save + 1) % VOCAB;
    memset(other, 0, sizeof other);
    CHECK(feed(b, chunk0, table, other) && !same(1));
    ids[0][0] = save;

    /* copy_block: fork sequence 2's cache after its first 8 positions (2 blocks)
     * into fresh blocks and continue there; logits must match. */
    CHECK(feed(b, (int32_t[NSEQ]){0, 0, 64}, table, alone));
    int32_t fork[NSEQ][MAXB];
    memcpy(fork, table, sizeof fork);
    for (int i = 0; i < 2; i++) {
        fork[2][i] = table2[0][i];
        CHECK(b->ops->copy_block(b, table[2][i], fork[2][i]) == LPX_OK);
    }
    {
        int32_t tok[12], pos[12], rows[12], start[2] = {0, 12}, len[1] = {20};
        for (int i = 0; i < 12; i++) {
            tok[i] = ids[2][8 + i];
            pos[i] = 8 + i;
            rows[i] = i;
        }
        static float lg[12][VOCAB];
        lpx_batch bt = {12, tok, pos, 1, start, len, fork[2], MAXB, 12, rows};
        CHECK(lpx_backend_run(b, &(lpx_step){.batch = &bt, .logits = &lg[0][0]}) == LPX_OK);
        CHECK(!memcmp(lg, alone[2][8], sizeof lg));
    }
    CHECK(b->ops->copy_block(b, 0, NBLK) == LPX_ERR_INVALID_ARG);

    /* Malformed batches are refused, not run. */
    {
        int32_t tok[2] = {1, 2}, pos[2] = {0, 1}, start[2] = {0, 2}, len[1] = {2}, rows[1] = {1};
        int32_t tbl[MAXB] = {0};
        float lg[VOCAB];
        lpx_batch ok = {2, tok, pos, 1, start, len, tbl, MAXB, 1, rows};
        CHECK(lpx_backend_run(b, &(lpx_step){.batch = &ok, .logits = lg}) == LPX_OK);
        lpx_batch bad = ok;
        int32_t badtok[2] = {1, VOCAB};
        bad.tokens = badtok;
        CHECK(lpx_backend_run(b, &(lpx_step){.batch = &bad, .logits = lg}) == LPX_ERR_INVALID_ARG);
        bad = ok;
        int32_t badpos[2] = {0, 2};
        bad.positions = badpos;
        CHECK(lpx_backend_run(b, &(lpx_step){.batch = &bad, .logits = lg}) == LPX_ERR_INVALID_ARG);
        bad = ok;
        int32_t badtbl[MAXB] = {NBLK};
        bad.block_table = badtbl;
        CHECK(lpx_backend_run(b, &(lpx_step){.batch = &bad, .logits = lg}) == LPX_ERR_INVALID_ARG);
        bad = ok;
        int32_t badrow[1] = {2};
        bad.logit_rows = badrow;
        CHECK(lpx_backend_run(b, &(lpx_step){.batch = &bad, .logits = lg}) == LPX_ERR_INVALID_ARG);
        bad = ok;
        int32_t badlen[1] = {MAXB * BS + 1};
        bad.seq_len = badlen;
        CHECK(lpx_backend_run(b, &(lpx_step){.batch = &bad, .logits = lg}) == LPX_ERR_INVALID_ARG);
    }
    b->ops->destroy(b);

    /* The thread count does not change a bit of the result. */
    o.n_threads = 1;
    CHECK(lpx_cpu_backend_ops.create(&y.m, &o, &b) == LPX_OK);
    if (b) {
        memset(other, 0, sizeof other);
        CHECK(feed(b, mixed, table, other) && same(NSEQ));
        b->ops->destroy(b);
    }
    /* A bad shape is an error at creation. */
    int64_t saved = y.layers[1].wk->shape[0];
    ((lpx_tensor *)y.layers[1].wk)->shape[0] = saved + 1;
    CHECK(lpx_cpu_backend_ops.create(&y.m, &o, &b) == LPX_ERR_FORMAT && b == NULL);
    ((lpx_tensor *)y.layers[1].wk)->shape[0] = saved;
    toy_free(&y);
}

static atomic_int visits[1000];
static void visit(void *ctx, int64_t b, int64_t e, int thread) {
    (void)ctx;
    for (int64_t i = b; i < e; i++)
        atomic_fetch_add(&visits[i], 1);
    CHECK(thread >= 0 && thread < 2);
}

static void test_threadpool(lpx_threadpool *pool) {
    CHECK(lpx_threadpool_size(pool) == 2);
    int64_t ns[] = {0, 1, 7, 999, 1000};
    for (int k = 0; k < 5; k++)
        for (int64_t grain = 1; grain <= 64; grain *= 4) {
            for (int i = 0; i < 1000; i++)
                visits[i] = 0;
            lpx_parallel_for(pool, ns[k], grain, visit, NULL);
            bool ok = true;
            for (int i = 0; i < 1000; i++)
                ok &= visits[i] == (i < ns[k] ? 1 : 0);
            CHECK(ok);
        }
}

/* Back-to-back jobs on more threads than there may be free cores, so workers
 * come late to a job or straight into the next: every item of every job runs
 * once, with that job's ctx (the two alternate, so an old one shows), and
 * lpx_parallel_for returns only after all of them (workers' chunks made slow). */
static atomic_int job_sum[300];
static void visit_job(void *ctx, int64_t b, int64_t e, int thread) {
    const int id = *(const int *)ctx;
    if (thread != 0 && b % 3 == 0) sched_yield(); /* a worker's chunk ends late */
    for (int64_t i = b; i < e; i++)
        atomic_fetch_add(&job_sum[i], id);
    CHECK(thread >= 0 && thread < 3);
}

static void test_threadpool_jobs(void) {
    lpx_threadpool *p;
    CHECK(lpx_threadpool_create(3, &p) == LPX_OK);
    if (!p) return;
    static int ids[2];
    bool ok = true;
    for (int j = 1; j <= 20000; j++) {
        const int64_t n = 1 + j % 300;
        for (int64_t i = 0; i < n; i++)
            job_sum[i] = 0;
        ids[j & 1] = j;
        lpx_parallel_for(p, n, 1 + j % 7, visit_job, &ids[j & 1]);
        for (int64_t i = 0; i < n; i++)
            ok &= job_sum[i] == j;
    }
    CHECK(ok);
    lpx_threadpool_destroy(p);
}

static void test_tune(void) {
    toy y;
    toy_init(&y, false);
    lpx_backend_opts o = {.n_threads = 1, .n_blocks = 4, .max_batch_tokens = 4, .max_seqs = 1};
    const char *bad[] = {"isa=sse9", "act=f16", "isa=c,,act=q8", "x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lpx_backend *b = NULL;
        o.tune = bad[i];
        CHECK(lpx_cpu_backend_ops.create(&y.m, &o, &b) == LPX_ERR_INVALID_ARG && !b);
    }
    lpx_backend *b = NULL;
    o.tune = "isa=c,act=q8";
    CHECK(lpx_cpu_backend_ops.create(&y.m, &o, &b) == LPX_OK);
    if (b) b->ops->destroy(b);
    o.tune = NULL;
    o.trace = "timing";
    CHECK(lpx_cpu_backend_ops.create(&y.m, &o, &b) == LPX_ERR_INVALID_ARG);
    toy_free(&y);
}

static void test_select(void) {
    const lpx_backend_ops *ops;
    int ord;
    CHECK(lpx_backend_select("cpu", &ops, &ord) == LPX_OK && ops == &lpx_cpu_backend_ops);
    CHECK(lpx_backend_select(NULL, &ops, &ord) == LPX_OK && ops == &lpx_cpu_backend_ops);
    CHECK(lpx_backend_select("gpu", &ops, &ord) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_backend_select("cuda:x", &ops, &ord) == LPX_ERR_INVALID_ARG);
    lpx_status s = lpx_backend_select("cuda:1", &ops, &ord);
    CHECK(s == LPX_OK ? ord == 1 && ops != NULL : s == LPX_ERR_UNSUPPORTED);
    lpx_config c = {.n_layers = 30, .n_kv_heads = 3, .head_dim = 64};
    CHECK(lpx_kv_bytes_per_token(&c, LPX_KV_F32) == 30 * 2 * 3 * 64 * 4);
    CHECK(lpx_kv_bytes_per_token(&c, LPX_KV_BF16) == 30 * 2 * 3 * 64 * 2);
    CHECK(lpx_kv_bytes_per_token(&c, LPX_KV_AUTO) == 30 * 2 * 3 * 64 * 2);
    CHECK(lpx_kv_bytes_per_token(&c, LPX_KV_FP8) == 30 * 2 * 3 * (64 + 4));
    CHECK(lpx_kv_dtype_resolve(&lpx_cpu_backend_ops, LPX_KV_AUTO) == LPX_KV_F32);
    CHECK(lpx_kv_dtype_resolve(&lpx_cpu_backend_ops, LPX_KV_FP8) == LPX_KV_FP8);
    lpx_kv_dtype d;
    CHECK(lpx_kv_dtype_parse("fp8_e4m3", &d) == LPX_OK && d == LPX_KV_FP8);
    CHECK(lpx_kv_dtype_parse("bf16", &d) == LPX_OK && d == LPX_KV_BF16);
    CHECK(lpx_kv_dtype_parse("auto", &d) == LPX_OK && d == LPX_KV_AUTO);
    CHECK(lpx_kv_dtype_parse("f32", &d) == LPX_ERR_INVALID_ARG);
    CHECK(strstr(lpx_last_error(), "expected auto, bf16 or fp8") != NULL);
}

int main(void) {
    lpx_threadpool *pool;
    CHECK(lpx_threadpool_create(2, &pool) == LPX_OK);
    test_threadpool(pool);
    test_threadpool_jobs();
    test_dequantize();
    test_matmul(pool, NULL);
    const char *isas[] = {"c", "avx2"};
    for (int i = 0; i < 2; i++) {
        cpu_qkernels qk;
        if (cpu_qkernels_init(&qk, isas[i])) test_matmul(pool, &qk);
    }
    lpx_threadpool_destroy(pool);
    test_invariance(false, NULL);
    test_invariance(true, NULL);
    test_invariance(true, "isa=c");
    test_invariance(true, "act=f32");
    test_tune();
    test_select();
    TEST_DONE();
}
