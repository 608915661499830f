#include "backend/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>

/* GCC/Clang vector extensions, not intrinsics: portable, and on the baseline
 * x86-64 target each becomes a pair of SSE operations. */
typedef float f32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef uint8_t u8x16 __attribute__((vector_size(16)));
typedef int8_t i8x16 __attribute__((vector_size(16)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef uint16_t u16x8 __attribute__((vector_size(16)));

static float f16_to_f32(uint16_t h) {
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

static float rd_f16(const uint8_t *p) { return f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

void cpu_dequantize(lpx_dtype t, const void *src, float *dst, int64_t n) {
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
                f32x16 f = __builtin_convertvector(q, f32x16) * d;
                memcpy(dst + 16 * h, &f, 64);
            }
        }
        return;
    case LPX_DT_Q4_0:
        /* Element j of a block is the low nibble of byte j, element j+16 the high one. */
        for (int64_t b = 0; b < n / 32; b++, s += 18, dst += 32) {
            float d = rd_f16(s);
            u8x16 q;
            memcpy(&q, s + 2, 16);
            f32x16 lo = (__builtin_convertvector(q & 0x0f, f32x16) - 8.0f) * d;
            f32x16 hi = (__builtin_convertvector(q >> 4, f32x16) - 8.0f) * d;
            memcpy(dst, &lo, 64);
            memcpy(dst + 16, &hi, 64);
        }
        return;
    case LPX_DT_Q4_1:
        for (int64_t b = 0; b < n / 32; b++, s += 20, dst += 32) {
            float d = rd_f16(s), m = rd_f16(s + 2);
            u8x16 q;
            memcpy(&q, s + 4, 16);
            f32x16 lo = __builtin_convertvector(q & 0x0f, f32x16) * d + m;
            f32x16 hi = __builtin_convertvector(q >> 4, f32x16) * d + m;
            memcpy(dst, &lo, 64);
            memcpy(dst + 16, &hi, 64);
        }
        return;
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

float cpu_dot(const float *a, const float *b, int64_t n) {
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

typedef struct matmul_ctx {
    const cpu_matmul_job *jobs;
    int n_jobs;
    const float *x;
    int64_t ldx, n_tok, cols;
    float *rowbuf;
    int64_t rowbuf_stride;
} matmul_ctx;

static void matmul_rows(void *arg, int64_t begin, int64_t end, int thread) {
    const matmul_ctx *c = arg;
    float *buf = c->rowbuf + (int64_t)thread * c->rowbuf_stride;
    int j = 0;
    int64_t first = 0; /* first global row of job j */
    for (int64_t r = begin; r < end; r++) {
        while (r - first >= lpx_tensor_rows(c->jobs[j].w)) first += lpx_tensor_rows(c->jobs[j++].w);
        const cpu_matmul_job *job = &c->jobs[j];
        int64_t lr = r - first;
        const float *w = cpu_weight_row(job->w, lr, buf); /* (cols) */
        float b = job->bias ? job->bias[lr] : 0.0f;
        for (int64_t t = 0; t < c->n_tok; t++) {
            float *y = &job->y[t * job->ldy + lr];
            float d = cpu_dot(w, c->x + t * c->ldx, c->cols) + b;
            *y = job->accumulate ? *y + d : d;
        }
    }
}

void cpu_matmul(lpx_threadpool *pool, const cpu_matmul_job *jobs, int n_jobs, const float *x,
                int64_t ldx, int64_t n_tok, float *rowbuf, int64_t rowbuf_stride) {
    int64_t rows = 0;
    for (int j = 0; j < n_jobs; j++) rows += lpx_tensor_rows(jobs[j].w);
    matmul_ctx c = {jobs, n_jobs, x, ldx, n_tok, lpx_tensor_cols(jobs[0].w), rowbuf, rowbuf_stride};
    /* ~16 chunks per thread balance the load; fewer than 4 rows a chunk costs
     * more in hand-out than it gains. */
    int64_t grain = rows / (16 * lpx_threadpool_size(pool));
    lpx_parallel_for(pool, rows, grain < 4 ? 4 : grain, matmul_rows, &c);
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

void cpu_axpy(float *y, float a, const float *x, int64_t n) {
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
