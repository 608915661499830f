#include "backend/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>

/* GCC/Clang vector extensions, not intrinsics: portable, and on the baseline
 * x86-64 target each becomes a pair of SSE operations. */
typedef float f32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef uint8_t u8x16 __attribute__((vector_size(16)));
typedef int8_t i8x16 __attribute__((vector_size(16)));
typedef int16_t i16x16 __attribute__((vector_size(32)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef uint16_t u16x8 __attribute__((vector_size(16)));

/* The hot loops are compiled twice, for baseline x86-64 and for AVX2+FMA
 * (x86-64-v3), and the loader picks one per machine: the binary stays portable
 * and a given machine always runs the same code, so results are reproducible
 * there. GCC only: clang 14 (the fuzz and sanitizer builds) does not emit
 * these clones. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HOT
#endif

/* f16 to f32, exact. With GCC's _Float16 the AVX2 clone gets one F16C
 * instruction (block scales are converted twice per block, so this matters).
 * Elsewhere: shifting exponent and mantissa into place and multiplying by
 * 2^112 rebiases the exponent exactly, subnormals included; only inf/nan need
 * a select. Inlined into each clone: a call from AVX code into SSE code would
 * pay a transition penalty per call. */
static inline __attribute__((always_inline)) float rd_f16(const uint8_t *p) {
#if defined(__FLT16_MAX__) && !defined(__clang__)
    _Float16 h;
    memcpy(&h, p, 2);
    return (float)h;
#else
    uint16_t h = (uint16_t)(p[0] | p[1] << 8);
    uint32_t mag = (uint32_t)(h & 0x7fff) << 13, bits;
    float f;
    memcpy(&f, &mag, 4);
    f *= 0x1p112f;
    memcpy(&bits, &f, 4);
    if (mag >= 0x0f800000u) bits = 0x7f800000u | mag; /* inf, nan */
    bits |= (uint32_t)(h & 0x8000) << 16;
    memcpy(&f, &bits, 4);
    return f;
#endif
}

/* w[0], w[1] = (float)q[0..16) * d + m (m = -0.0 adds nothing, keeping the
 * sign of a zero product as d * q has it). The widening conversions are
 * written so GCC turns them into vector zero/sign extensions rather than byte
 * extracts; vectors go by pointer to keep the AVX calling convention out. */
static inline __attribute__((always_inline)) void scale16(f32x8 *w, const i16x16 *q, float d,
                                                          float m) {
    f32x16 f = __builtin_convertvector(__builtin_convertvector(*q, i32x16), f32x16);
    memcpy(&w[0], &f, 32);
    memcpy(&w[1], (const char *)&f + 32, 32);
    w[0] = w[0] * d + m;
    w[1] = w[1] * d + m;
}

/* One block of 32 weights of a block type (t a constant at every call site)
 * as four 8-lane vectors, elements in order. The one definition of block
 * dequantization here: the buffered and the fused products both use it, so
 * they compute identical values. In Q4 blocks element j is the low nibble of
 * byte j, element j+16 the high one; Q4_0 is d*(q-8), exact in float, as is
 * Q4_1's d*q before adding m, so this rounds like lpx_dequantize_row. */
static inline __attribute__((always_inline)) void unpack_block(lpx_dtype t, const uint8_t *s,
                                                               f32x8 w[4]) {
    float d = rd_f16(s), m = t == LPX_DT_Q4_1 ? rd_f16(s + 2) : -0.0f;
    i16x16 lo, hi;
    if (t == LPX_DT_Q8_0) {
        i8x16 q;
        memcpy(&q, s + 2, 16);
        lo = __builtin_convertvector(q, i16x16);
        memcpy(&q, s + 18, 16);
        hi = __builtin_convertvector(q, i16x16);
    } else {
        u8x16 q;
        memcpy(&q, s + (t == LPX_DT_Q4_1 ? 4 : 2), 16);
        i16x16 v = __builtin_convertvector(q, i16x16);
        const int16_t off = t == LPX_DT_Q4_1 ? 0 : 8;
        lo = (v & 15) - off;
        hi = (v >> 4) - off;
    }
    scale16(&w[0], &lo, d, m);
    scale16(&w[2], &hi, d, m);
}

static inline __attribute__((always_inline)) void dequantize_blocks(lpx_dtype t, const uint8_t *s,
                                                                    float *dst, int64_t n) {
    const int bytes = t == LPX_DT_Q8_0 ? 34 : t == LPX_DT_Q4_1 ? 20 : 18;
    for (int64_t b = 0; b < n / 32; b++, s += bytes, dst += 32) {
        f32x8 w[4];
        unpack_block(t, s, w);
        memcpy(dst, w, sizeof w);
    }
}

HOT void cpu_dequantize(lpx_dtype t, const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    switch (t) {
    case LPX_DT_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case LPX_DT_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = rd_f16(s + 2 * i);
        return;
    case LPX_DT_BF16: {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            u16x8 h;
            memcpy(&h, s + 2 * i, 16);
            u32x8 w = __builtin_convertvector(h, u32x8) << 16;
            memcpy(dst + i, &w, 32);
        }
        for (; i < n; i++) {
            uint32_t w = (uint32_t)(s[2 * i] | s[2 * i + 1] << 8) << 16;
            memcpy(dst + i, &w, 4);
        }
        return;
    }
    case LPX_DT_Q8_0:
        dequantize_blocks(LPX_DT_Q8_0, s, dst, n);
        return;
    case LPX_DT_Q4_0:
        dequantize_blocks(LPX_DT_Q4_0, s, dst, n);
        return;
    case LPX_DT_Q4_1:
        dequantize_blocks(LPX_DT_Q4_1, s, dst, n);
        return;
    case LPX_DT_Q4_K: /* the exact mode and embedding rows only: the scalar decoder */
    case LPX_DT_Q5_K:
    case LPX_DT_Q6_K:
        lpx_dequantize_row(t, src, dst, n);
        return;
    case LPX_DT_COUNT:
        break;
    }
}

const float *cpu_weight_row(const lpx_tensor *w, int64_t r, float *buf) {
    int64_t cols = lpx_tensor_cols(w);
    size_t row_bytes = w->nbytes / (size_t)lpx_tensor_rows(w);
    const uint8_t *src = (const uint8_t *)w->data + (size_t)r * row_bytes;
    /* F32 rows are used in place, unless the file left them misaligned. */
    if (w->type == LPX_DT_F32 && (uintptr_t)src % sizeof(float) == 0) return (const float *)src;
    cpu_dequantize(w->type, src, buf, cols);
    return buf;
}

HOT float cpu_dot(const float *a, const float *b, int64_t n) {
    f32x8 acc0 = {0}, acc1 = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        f32x8 a0, a1, b0, b1;
        memcpy(&a0, a + i, 32);
        memcpy(&a1, a + i + 8, 32);
        memcpy(&b0, b + i, 32);
        memcpy(&b1, b + i + 8, 32);
        acc0 += a0 * b0;
        acc1 += a1 * b1;
    }
    f32x8 acc = acc0 + acc1;
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* Register tile of the products: up to TILE_R weight rows times up to TILE_T
 * tokens. Every (row, token) dot product runs the same way whatever the tile:
 * one 8-lane accumulator over the columns in order, a fixed horizontal sum, a
 * scalar tail. So tiles of any shape give bit-identical results (batch
 * invariance), while a full tile reuses each load several times. */
#define TILE_R 4
#define TILE_T 3

static inline __attribute__((always_inline)) void dot_tile(const float *const *w, const int R,
                                                           const float *x, int64_t ldx,
                                                           const int NT, int64_t n,
                                                           float out[TILE_R][TILE_T]) {
    f32x8 acc[TILE_R][TILE_T];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++)
            acc[r][t] = (f32x8){0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        f32x8 xv[TILE_T];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++)
            memcpy(&xv[t], x + t * ldx + i, 32);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            f32x8 wv;
            memcpy(&wv, w[r] + i, 32);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++)
                acc[r][t] += wv * xv[t];
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < NT; t++) {
            f32x8 a = acc[r][t];
            float v = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
            for (int64_t j = i; j < n; j++)
                v += w[r][j] * x[t * ldx + j];
            out[r][t] = v;
        }
}

/* The single-token case of dot_tile for block types, without the row buffer:
 * each block is unpacked into registers and used at once. Per (row, token) it
 * performs the same operations in the same order as dequantizing the row and
 * running dot_tile, so results stay bit-identical to batched steps. */
static inline __attribute__((always_inline)) void qdot_rows(lpx_dtype t, const uint8_t *const *rows,
                                                            const int R, const float *x, int64_t n,
                                                            float out[][TILE_T]) {
    const int bytes = t == LPX_DT_Q8_0 ? 34 : t == LPX_DT_Q4_1 ? 20 : 18;
    f32x8 acc[TILE_R] = {{0}};
    for (int64_t b = 0; b < n / 32; b++) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            f32x8 w[4];
            unpack_block(t, rows[r] + b * bytes, w);
            /* x is reloaded per row (from L1): keeping it in registers
             * spills the accumulators */
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                f32x8 xv;
                memcpy(&xv, x + 32 * b + 8 * k, 32);
                acc[r] += w[k] * xv;
            }
        }
    }
    for (int r = 0; r < R; r++) {
        f32x8 a = acc[r];
        out[r][0] = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
    }
}

typedef struct matmul_ctx {
    const cpu_matmul_job *jobs;
    int n_jobs;
    const float *x;
    int64_t ldx, n_tok, cols;
    float *rowbuf;
    int64_t rowbuf_stride;
} matmul_ctx;

HOT static void matmul_rows(void *arg, int64_t begin, int64_t end, int thread) {
    const matmul_ctx *c = arg;
    float *buf = c->rowbuf + (int64_t)thread * c->rowbuf_stride;
    int j = 0;
    int64_t first = 0; /* first global row of job j */
    for (int64_t r0 = begin; r0 < end; r0 += TILE_R) {
        int R = end - r0 < TILE_R ? (int)(end - r0) : TILE_R;
        const float *w[TILE_R]; /* (cols) each */
        const cpu_matmul_job *job[TILE_R];
        int64_t lr[TILE_R];
        for (int k = 0; k < R; k++) {
            while (r0 + k - first >= lpx_tensor_rows(c->jobs[j].w))
                first += lpx_tensor_rows(c->jobs[j++].w);
            job[k] = &c->jobs[j];
            lr[k] = r0 + k - first;
        }
        lpx_dtype type = job[0]->w->type;
        bool fused =
            c->n_tok == 1 && (type == LPX_DT_Q8_0 || type == LPX_DT_Q4_0 || type == LPX_DT_Q4_1);
        for (int k = 1; k < R; k++)
            fused &= job[k]->w->type == type;
        if (fused) {
            const uint8_t *q[TILE_R]; /* (row bytes) each */
            float out[TILE_R][TILE_T];
            for (int k = 0; k < R; k++)
                q[k] = (const uint8_t *)job[k]->w->data +
                       (size_t)lr[k] * (job[k]->w->nbytes / (size_t)lpx_tensor_rows(job[k]->w));
            /* constant row counts (a full tile, or one row at a time at the
             * end), so the accumulators stay in registers */
            for (int k = 0; k < R; k += R == TILE_R ? TILE_R : 1) {
                int n = R == TILE_R ? TILE_R : 1;
                if (type == LPX_DT_Q8_0 && n == TILE_R)
                    qdot_rows(LPX_DT_Q8_0, q, TILE_R, c->x, c->cols, out);
                else if (type == LPX_DT_Q8_0)
                    qdot_rows(LPX_DT_Q8_0, q + k, 1, c->x, c->cols, out + k);
                else if (type == LPX_DT_Q4_0 && n == TILE_R)
                    qdot_rows(LPX_DT_Q4_0, q, TILE_R, c->x, c->cols, out);
                else if (type == LPX_DT_Q4_0)
                    qdot_rows(LPX_DT_Q4_0, q + k, 1, c->x, c->cols, out + k);
                else if (n == TILE_R)
                    qdot_rows(LPX_DT_Q4_1, q, TILE_R, c->x, c->cols, out);
                else
                    qdot_rows(LPX_DT_Q4_1, q + k, 1, c->x, c->cols, out + k);
            }
            for (int k = 0; k < R; k++) {
                float *y = &job[k]->y[lr[k]];
                float d = out[k][0] + (job[k]->bias ? job[k]->bias[lr[k]] : 0.0f);
                *y = job[k]->accumulate ? *y + d : d;
            }
            continue;
        }
        for (int k = 0; k < R; k++)
            w[k] = cpu_weight_row(job[k]->w, lr[k], buf + k * c->cols);
        for (int64_t t0 = 0; t0 < c->n_tok; t0 += TILE_T) {
            int NT = c->n_tok - t0 < TILE_T ? (int)(c->n_tok - t0) : TILE_T;
            const float *x = c->x + t0 * c->ldx;
            float out[TILE_R][TILE_T];
            switch (R * 4 + NT) { /* constant shapes, so each tile is fully unrolled */
            case 4 * 4 + 3:
                dot_tile(w, 4, x, c->ldx, 3, c->cols, out);
                break;
            case 4 * 4 + 2:
                dot_tile(w, 4, x, c->ldx, 2, c->cols, out);
                break;
            case 4 * 4 + 1:
                dot_tile(w, 4, x, c->ldx, 1, c->cols, out);
                break;
            case 3 * 4 + 3:
                dot_tile(w, 3, x, c->ldx, 3, c->cols, out);
                break;
            case 3 * 4 + 2:
                dot_tile(w, 3, x, c->ldx, 2, c->cols, out);
                break;
            case 3 * 4 + 1:
                dot_tile(w, 3, x, c->ldx, 1, c->cols, out);
                break;
            case 2 * 4 + 3:
                dot_tile(w, 2, x, c->ldx, 3, c->cols, out);
                break;
            case 2 * 4 + 2:
                dot_tile(w, 2, x, c->ldx, 2, c->cols, out);
                break;
            case 2 * 4 + 1:
                dot_tile(w, 2, x, c->ldx, 1, c->cols, out);
                break;
            case 1 * 4 + 3:
                dot_tile(w, 1, x, c->ldx, 3, c->cols, out);
                break;
            case 1 * 4 + 2:
                dot_tile(w, 1, x, c->ldx, 2, c->cols, out);
                break;
            default:
                dot_tile(w, 1, x, c->ldx, 1, c->cols, out);
                break;
            }
            for (int k = 0; k < R; k++) {
                float b = job[k]->bias ? job[k]->bias[lr[k]] : 0.0f;
                for (int t = 0; t < NT; t++) {
                    float *y = &job[k]->y[(t0 + t) * job[k]->ldy + lr[k]];
                    float d = out[k][t] + b;
                    *y = job[k]->accumulate ? *y + d : d;
                }
            }
        }
    }
}

/* The integer path: x quantized per token, then register tiles of up to
 * CPU_QT_ROWS rows times CPU_QT_TOKENS tokens (cpu_qdot.h). Token tiles inside
 * row tiles, so a row is read from memory once per product and from L1 for
 * the other tokens. */
typedef struct qmatmul_ctx {
    const cpu_matmul_job *jobs;
    const cpu_qkernels *qk;
    const float *x;
    int64_t ldx, n_tok, cols;
    lpx_blk_q8 *xq; /* [n_tok][cols / 32] */
} qmatmul_ctx;

static void quantize_tokens(void *arg, int64_t begin, int64_t end, int thread) {
    const qmatmul_ctx *c = arg;
    for (int64_t t = begin; t < end; t++)
        c->qk->quantize(c->x + t * c->ldx, c->xq + t * (c->cols / LPX_QK), c->cols);
}

/* y[k] (+)= v[k] + bias[k], k < n: one token's part of a tile. */
static inline void store_rows(float *restrict y, const float *restrict v, const float *bias,
                              bool accumulate, int n) {
    for (int k = 0; k < n; k++) {
        const float d = v[k] + (bias ? bias[k] : 0.0f);
        y[k] = accumulate ? y[k] + d : d;
    }
}

static void qmatmul_rows(void *arg, int64_t begin, int64_t end, int thread) {
    const qmatmul_ctx *c = arg;
    const int64_t nb = c->cols / LPX_QK;
    int64_t first = 0; /* first global row of *job */
    for (const cpu_matmul_job *job = c->jobs; begin < end;
         first += lpx_tensor_rows(job->w), job++) {
        const int64_t rows = lpx_tensor_rows(job->w);
        if (begin >= first + rows) continue;
        const size_t row_bytes = job->w->nbytes / (size_t)rows;
        const cpu_qtile_fn tile = c->qk->tile[job->w->type];
        const int64_t n_tok = c->n_tok, ldy = job->ldy,
                      stop = (end < first + rows ? end : first + rows) - first;
        for (int64_t r = begin - first; r < stop; r += CPU_QT_ROWS) {
            const int R = stop - r < CPU_QT_ROWS ? (int)(stop - r) : CPU_QT_ROWS;
            const uint8_t *w = (const uint8_t *)job->w->data + (size_t)r * row_bytes;
            for (int64_t t = 0; t < n_tok; t += CPU_QT_TOKENS) {
                const int T = n_tok - t < CPU_QT_TOKENS ? (int)(n_tok - t) : CPU_QT_TOKENS;
                float out[CPU_QT_TOKENS][CPU_QT_ROWS];
                tile(w, row_bytes, R, c->xq + t * nb, nb, T, out);
                for (int i = 0; i < T; i++)
                    store_rows(job->y + (t + i) * ldy + r, out[i], job->bias ? job->bias + r : NULL,
                               job->accumulate, R);
            }
        }
        begin = stop + first;
    }
}

void cpu_matmul(const cpu_matmul_env *e, const cpu_matmul_job *jobs, int n_jobs, const float *x,
                int64_t ldx, int64_t n_tok) {
    int64_t rows = 0;
    bool integer = e->qk != NULL;
    for (int j = 0; j < n_jobs; j++) {
        rows += lpx_tensor_rows(jobs[j].w);
        integer = integer && e->qk->tile[jobs[j].w->type];
    }
    const int64_t cols = lpx_tensor_cols(jobs[0].w);
    const int threads = lpx_threadpool_size(e->pool);
    if (integer) {
        qmatmul_ctx c = {jobs, e->qk, x, ldx, n_tok, cols, e->xq};
        lpx_parallel_for(e->pool, n_tok, 1, quantize_tokens, &c);
        /* ~8 chunks per thread balance the load at one atomic per chunk;
         * chunks are whole row tiles */
        int64_t grain = rows / (8 * threads) / CPU_QT_ROWS * CPU_QT_ROWS;
        lpx_parallel_for(e->pool, rows, grain < CPU_QT_ROWS ? CPU_QT_ROWS : grain, qmatmul_rows,
                         &c);
        return;
    }
    matmul_ctx c = {jobs, n_jobs, x, ldx, n_tok, cols, e->rowbuf, e->rowbuf_stride};
    /* ~16 chunks per thread balance the load; chunks are whole tiles. */
    int64_t grain = rows / (16 * threads) / TILE_R * TILE_R;
    lpx_parallel_for(e->pool, rows, grain < TILE_R ? TILE_R : grain, matmul_rows, &c);
}

void cpu_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    float ss = cpu_dot(x, x, n);
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

void cpu_rope(float *v, const float *cos_, const float *sin_, int64_t n, bool interleaved) {
    int64_t half = n / 2;
    for (int64_t i = 0; i < half; i++) {
        int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * cos_[i] - x1 * sin_[i];
        v[b] = x1 * cos_[i] + x0 * sin_[i];
    }
}

HOT void cpu_axpy(float *y, float a, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        f32x8 xv, yv;
        memcpy(&xv, x + i, 32);
        memcpy(&yv, y + i, 32);
        yv += a * xv;
        memcpy(y + i, &yv, 32);
    }
    for (; i < n; i++)
        y[i] += a * x[i];
}

void cpu_swiglu(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
