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

/* Inlined into each clone: a call from AVX code into SSE code would pay a
 * transition penalty per call. */
static inline __attribute__((always_inline)) float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | man << 13; /* inf, nan */
    } else if (exp != 0) {
        bits = sign | (exp + 112) << 23 | man << 13;
    } else {
        float f = (float)man * 0x1p-24f; /* zero or subnormal: exact */
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline __attribute__((always_inline)) float rd_f16(const uint8_t *p) { return f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* dst[0..16) = (float)q[i] * d + m (m = -0.0 adds nothing, keeping the sign of
 * a zero product as d * q has it). The widening conversions are written so
 * GCC turns them into vector zero/sign extensions rather than byte extracts. */
static inline __attribute__((always_inline)) void scale16(float *dst, const i16x16 *q, float d,
                                                          float m) {
    f32x16 f = __builtin_convertvector(__builtin_convertvector(*q, i32x16), f32x16);
    f32x8 a, b;
    memcpy(&a, &f, 32);
    memcpy(&b, (const char *)&f + 32, 32);
    a = a * d + m;
    b = b * d + m;
    memcpy(dst, &a, 32);
    memcpy(dst + 8, &b, 32);
}

HOT void cpu_dequantize(lpx_dtype t, const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    switch (t) {
    case LPX_DT_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case LPX_DT_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = rd_f16(s + 2 * i);
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
        for (int64_t b = 0; b < n / 32; b++, s += 34, dst += 32) {
            float d = rd_f16(s);
            for (int h = 0; h < 2; h++) {
                i8x16 q;
                memcpy(&q, s + 2 + 16 * h, 16);
                i16x16 w = __builtin_convertvector(q, i16x16);
                scale16(dst + 16 * h, &w, d, -0.0f);
            }
        }
        return;
    case LPX_DT_Q4_0:
    case LPX_DT_Q4_1: {
        /* Element j of a block is the low nibble of byte j, element j+16 the
         * high one. Q4_0 is d*(q-8): exact in float, as is Q4_1's d*q before
         * adding m, so every path rounds like the model's dequantizer. */
        const bool q41 = t == LPX_DT_Q4_1;
        const int bytes = q41 ? 20 : 18, qoff = q41 ? 4 : 2;
        const int16_t off = q41 ? 0 : 8;
        for (int64_t b = 0; b < n / 32; b++, s += bytes, dst += 32) {
            float d = rd_f16(s), m = q41 ? rd_f16(s + 2) : -0.0f;
            u8x16 q;
            memcpy(&q, s + qoff, 16);
            i16x16 w = __builtin_convertvector(q, i16x16);
            i16x16 lo = (w & 15) - off, hi = (w >> 4) - off;
            scale16(dst, &lo, d, m);
            scale16(dst + 16, &hi, d, m);
        }
        return;
    }
    case LPX_DT_COUNT: break;
    }
}

const float *cpu_weight_row(const lpx_tensor *w, int64_t r, float *buf) {
    int64_t cols = lpx_tensor_cols(w);
    size_t row_bytes = w->nbytes / (size_t)lpx_tensor_rows(w);
    const uint8_t *src = (const uint8_t *)w->data + (size_t)r * row_bytes;
    if (w->type == LPX_DT_F32) return (const float *)src;
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
    for (; i < n; i++) s += a[i] * b[i];
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
        for (int t = 0; t < NT; t++) acc[r][t] = (f32x8){0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        f32x8 xv[TILE_T];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) memcpy(&xv[t], x + t * ldx + i, 32);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            f32x8 wv;
            memcpy(&wv, w[r] + i, 32);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) acc[r][t] += wv * xv[t];
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < NT; t++) {
            f32x8 a = acc[r][t];
            float v = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
            for (int64_t j = i; j < n; j++) v += w[r][j] * x[t * ldx + j];
            out[r][t] = v;
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
        const float *w[TILE_R];               /* (cols) each */
        const cpu_matmul_job *job[TILE_R];
        int64_t lr[TILE_R];
        for (int k = 0; k < R; k++) {
            while (r0 + k - first >= lpx_tensor_rows(c->jobs[j].w))
                first += lpx_tensor_rows(c->jobs[j++].w);
            job[k] = &c->jobs[j];
            lr[k] = r0 + k - first;
            w[k] = cpu_weight_row(job[k]->w, lr[k], buf + k * c->cols);
        }
        for (int64_t t0 = 0; t0 < c->n_tok; t0 += TILE_T) {
            int NT = c->n_tok - t0 < TILE_T ? (int)(c->n_tok - t0) : TILE_T;
            const float *x = c->x + t0 * c->ldx;
            float out[TILE_R][TILE_T];
            switch (R * 4 + NT) { /* constant shapes, so each tile is fully unrolled */
            case 4 * 4 + 3: dot_tile(w, 4, x, c->ldx, 3, c->cols, out); break;
            case 4 * 4 + 2: dot_tile(w, 4, x, c->ldx, 2, c->cols, out); break;
            case 4 * 4 + 1: dot_tile(w, 4, x, c->ldx, 1, c->cols, out); break;
            case 3 * 4 + 3: dot_tile(w, 3, x, c->ldx, 3, c->cols, out); break;
            case 3 * 4 + 2: dot_tile(w, 3, x, c->ldx, 2, c->cols, out); break;
            case 3 * 4 + 1: dot_tile(w, 3, x, c->ldx, 1, c->cols, out); break;
            case 2 * 4 + 3: dot_tile(w, 2, x, c->ldx, 3, c->cols, out); break;
            case 2 * 4 + 2: dot_tile(w, 2, x, c->ldx, 2, c->cols, out); break;
            case 2 * 4 + 1: dot_tile(w, 2, x, c->ldx, 1, c->cols, out); break;
            case 1 * 4 + 3: dot_tile(w, 1, x, c->ldx, 3, c->cols, out); break;
            case 1 * 4 + 2: dot_tile(w, 1, x, c->ldx, 2, c->cols, out); break;
            default: dot_tile(w, 1, x, c->ldx, 1, c->cols, out); break;
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

void cpu_matmul(lpx_threadpool *pool, const cpu_matmul_job *jobs, int n_jobs, const float *x,
                int64_t ldx, int64_t n_tok, float *rowbuf, int64_t rowbuf_stride) {
    int64_t rows = 0;
    for (int j = 0; j < n_jobs; j++) rows += lpx_tensor_rows(jobs[j].w);
    matmul_ctx c = {jobs, n_jobs, x, ldx, n_tok, lpx_tensor_cols(jobs[0].w), rowbuf, rowbuf_stride};
    /* ~16 chunks per thread balance the load; chunks are whole tiles. */
    int64_t grain = rows / (16 * lpx_threadpool_size(pool)) / TILE_R * TILE_R;
    lpx_parallel_for(pool, rows, grain < TILE_R ? TILE_R : grain, matmul_rows, &c);
}

void cpu_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    float ss = cpu_dot(x, x, n);
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
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
    for (; i < n; i++) y[i] += a * x[i];
}

void cpu_swiglu(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
