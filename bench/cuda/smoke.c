/* Workshop check of the CUDA backend before the loader and CPU backend exist:
 * synthetic random-weight models built in memory, a naive float reference
 * forward, and timing of batch-1 decode at a real shape. Not part of the product
 * build; compiled by bench/cuda/build-smoke.sh. */
#include "backend/backend.h"
#include "backend/cuda/cuda_info.h"
#include "base/error.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Stand-ins for the loader's dtype helpers: the synthetic models are all bf16/f32. */
bool lpx_dtype_row_bytes(lpx_dtype t, int64_t n, size_t *out) {
    *out = (size_t)n * (t == LPX_DT_F32 ? 4 : 2);
    return true;
}
static float bf(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
void lpx_dequantize_row(lpx_dtype t, const void *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = t == LPX_DT_F32 ? ((const float *)src)[i] : bf(((const uint16_t *)src)[i]);
}

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

typedef struct synth {
    lpx_model m;
    lpx_tensor *ts;
    int nt;
} synth;

static lpx_tensor *mk(synth *s, const char *name, int64_t rows, int64_t cols, float scale,
                      float offset, bool f32) {
    lpx_tensor *t = &s->ts[s->nt++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = f32 ? LPX_DT_F32 : LPX_DT_BF16;
    t->n_dims = rows == 1 ? 1 : 2;
    if (rows == 1) t->shape[0] = cols;
    else { t->shape[0] = rows; t->shape[1] = cols; }
    const size_t n = (size_t)rows * cols;
    t->nbytes = n * (f32 ? 4 : 2);
    void *d = malloc(t->nbytes);
    for (size_t i = 0; i < n; i++) {
        const float v = offset + scale * frand();
        if (f32) ((float *)d)[i] = v;
        else { uint32_t u; memcpy(&u, &v, 4); ((uint16_t *)d)[i] = (uint16_t)(u >> 16); }
    }
    t->data = d;
    return t;
}

static void synth_model(synth *s, lpx_config c) {
    memset(s, 0, sizeof *s);
    s->ts = calloc(16 * (size_t)c.n_layers + 8, sizeof(lpx_tensor));
    s->m.cfg = c;
    const int d = c.d_model, hd = c.head_dim, qd = c.n_heads * hd, kvd = c.n_kv_heads * hd;
    const float sd = 1.0f / sqrtf((float)d);
    s->m.w.tok_embd = mk(s, "tok", c.vocab_size, d, 1.0f, 0, false);
    s->m.w.lm_head = c.tied_embeddings ? s->m.w.tok_embd : mk(s, "out", c.vocab_size, d, sd, 0, false);
    s->m.w.out_norm = mk(s, "out_norm", 1, d, 0.2f, 1.0f, true);
    s->m.w.layers = calloc((size_t)c.n_layers, sizeof(lpx_layer));
    for (int l = 0; l < c.n_layers; l++) {
        lpx_layer *L = &s->m.w.layers[l];
        L->attn_norm = mk(s, "an", 1, d, 0.2f, 1.0f, true);
        L->ffn_norm = mk(s, "fn", 1, d, 0.2f, 1.0f, false);
        L->wq = mk(s, "q", qd, d, sd, 0, false);
        L->wk = mk(s, "k", kvd, d, sd, 0, false);
        L->wv = mk(s, "v", kvd, d, sd, 0, false);
        L->wo = mk(s, "o", d, qd, 1.0f / sqrtf((float)qd), 0, false);
        L->w_gate = mk(s, "g", c.d_ff, d, sd, 0, false);
        L->w_up = mk(s, "u", c.d_ff, d, sd, 0, false);
        L->w_down = mk(s, "dn", d, c.d_ff, 1.0f / sqrtf((float)c.d_ff), 0, false);
        if (c.qkv_bias) {
            L->bq = mk(s, "bq", 1, qd, 0.5f, 0, false);
            L->bk = mk(s, "bk", 1, kvd, 0.5f, 0, false);
            L->bv = mk(s, "bv", 1, kvd, 0.5f, 0, false);
        }
        if (c.qk_norm) {
            L->q_norm = mk(s, "qn", 1, hd, 0.2f, 1.0f, false);
            L->k_norm = mk(s, "kn", 1, hd, 0.2f, 1.0f, false);
        }
    }
}

/* --- naive float reference (whole sequence, causal) --- */
static float *deq(const lpx_tensor *t) {
    const size_t n = (size_t)lpx_tensor_rows(t) * lpx_tensor_cols(t);
    float *f = malloc(n * 4);
    lpx_dequantize_row(t->type, t->data, f, (int64_t)n);
    return f;
}
static float rbf(float v) { uint32_t u; memcpy(&u, &v, 4); u += 0x7fff + ((u >> 16) & 1); u &= 0xffff0000u; memcpy(&v, &u, 4); return v; }
static void mv(float *y, const lpx_tensor *W, const float *x) {
    float *w = deq(W);
    const int64_t R = lpx_tensor_rows(W), C = lpx_tensor_cols(W);
    for (int64_t r = 0; r < R; r++) {
        double s = 0;
        for (int64_t c = 0; c < C; c++) s += (double)w[r * C + c] * x[c];
        y[r] = (float)s;
    }
    free(w);
}
static void norm(float *o, const float *x, const lpx_tensor *w, int n, float eps) {
    float *wf = deq(w);
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float inv = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) o[i] = x[i] * inv * wf[i];
    free(wf);
}
static void rope(float *v, int hd, int pos, const lpx_config *c) {
    float tmp[512];
    for (int i = 0; i < hd / 2; i++) {
        float inv = 1.0f / powf(c->rope_theta, (float)(2 * i) / hd);
        if (c->rope_scaling == LPX_ROPE_LLAMA3) {
            float old = c->rope_original_max_pos, lw = old / c->rope_low_freq_factor, hw = old / c->rope_high_freq_factor;
            float wl = 2 * (float)M_PI / inv;
            if (wl > lw) inv /= c->rope_factor;
            else if (wl >= hw) { float sm = (old / wl - c->rope_low_freq_factor) / (c->rope_high_freq_factor - c->rope_low_freq_factor); inv = (1 - sm) * inv / c->rope_factor + sm * inv; }
        }
        const float a = pos * inv, cs = cosf(a), sn = sinf(a);
        int i0 = c->rope_interleaved ? 2 * i : i, i1 = c->rope_interleaved ? 2 * i + 1 : i + hd / 2;
        tmp[i0] = v[i0] * cs - v[i1] * sn;
        tmp[i1] = v[i1] * cs + v[i0] * sn;
    }
    memcpy(v, tmp, sizeof(float) * hd);
}
/* logits (n, vocab) of every position of ids */
static void ref_forward(const lpx_model *m, const int *ids, int n, float *logits) {
    const lpx_config *c = &m->cfg;
    const int d = c->d_model, hd = c->head_dim, qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    const int G = c->n_heads / c->n_kv_heads;
    float *x = calloc((size_t)n * d, 4), *h = malloc(4 * (size_t)d), *qkv = malloc(4 * (size_t)(qd + 2 * kvd));
    float *K = malloc(4 * (size_t)n * kvd), *V = malloc(4 * (size_t)n * kvd), *Q = malloc(4 * (size_t)n * qd);
    float *att = malloc(4 * (size_t)qd), *g = malloc(4 * (size_t)c->d_ff), *u = malloc(4 * (size_t)c->d_ff), *o = malloc(4 * (size_t)d);
    float *emb = deq(m->w.tok_embd);
    for (int t = 0; t < n; t++) memcpy(x + (size_t)t * d, emb + (size_t)ids[t] * d, 4 * (size_t)d);
    free(emb);
    for (int l = 0; l < c->n_layers; l++) {
        const lpx_layer *L = &m->w.layers[l];
        for (int t = 0; t < n; t++) {
            norm(h, x + (size_t)t * d, L->attn_norm, d, c->rms_norm_eps);
            for (int i = 0; i < d; i++) h[i] = rbf(h[i]);
            mv(qkv, L->wq, h); mv(qkv + qd, L->wk, h); mv(qkv + qd + kvd, L->wv, h);
            if (c->qkv_bias) {
                float *bq = deq(L->bq), *bk = deq(L->bk), *bv = deq(L->bv);
                for (int i = 0; i < qd; i++) qkv[i] += bq[i];
                for (int i = 0; i < kvd; i++) { qkv[qd + i] += bk[i]; qkv[qd + kvd + i] += bv[i]; }
                free(bq); free(bk); free(bv);
            }
            for (int hh = 0; hh < c->n_heads + c->n_kv_heads; hh++) {
                float *v = qkv + hh * hd;
                if (c->qk_norm) norm(v, v, hh < c->n_heads ? L->q_norm : L->k_norm, hd, c->rms_norm_eps);
                rope(v, hd, t, c);
            }
            memcpy(Q + (size_t)t * qd, qkv, 4 * (size_t)qd);
            for (int i = 0; i < kvd; i++) { K[(size_t)t * kvd + i] = rbf(qkv[qd + i]); V[(size_t)t * kvd + i] = rbf(qkv[qd + kvd + i]); }
        }
        for (int t = 0; t < n; t++) {
            for (int hh = 0; hh < c->n_heads; hh++) {
                const int kh = hh / G;
                double mx = -1e30, sum = 0;
                double *sc = malloc(sizeof(double) * (t + 1));
                for (int j = 0; j <= t; j++) {
                    double s = 0;
                    for (int e = 0; e < hd; e++) s += (double)Q[(size_t)t * qd + hh * hd + e] * K[(size_t)j * kvd + kh * hd + e];
                    sc[j] = s / sqrt((double)hd);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j <= t; j++) { sc[j] = exp(sc[j] - mx); sum += sc[j]; }
                for (int e = 0; e < hd; e++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++) a += sc[j] * V[(size_t)j * kvd + kh * hd + e];
                    att[hh * hd + e] = rbf((float)(a / sum));
                }
                free(sc);
            }
            mv(o, L->wo, att);
            for (int i = 0; i < d; i++) x[(size_t)t * d + i] += o[i];
            norm(h, x + (size_t)t * d, L->ffn_norm, d, c->rms_norm_eps);
            for (int i = 0; i < d; i++) h[i] = rbf(h[i]);
            mv(g, L->w_gate, h); mv(u, L->w_up, h);
            for (int i = 0; i < c->d_ff; i++) g[i] = rbf(g[i] / (1 + expf(-g[i])) * u[i]);
            mv(o, L->w_down, g);
            for (int i = 0; i < d; i++) x[(size_t)t * d + i] += o[i];
        }
    }
    for (int t = 0; t < n; t++) {
        norm(h, x + (size_t)t * d, m->w.out_norm, d, c->rms_norm_eps);
        for (int i = 0; i < d; i++) h[i] = rbf(h[i]);
        mv(logits + (size_t)t * c->vocab_size, m->w.lm_head, h);
    }
    free(x); free(h); free(qkv); free(K); free(V); free(Q); free(att); free(g); free(u); free(o);
}

static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

#define CK(x) do { lpx_status s_ = (x); if (s_) { fprintf(stderr, "FAIL %s: %s\n", #x, lpx_last_error()); exit(1); } } while (0)

/* one sequence: prefill n0 tokens in one step, then decode the rest one by one;
 * returns logits of every position in out (n, vocab) */
static void run_seq(lpx_backend *b, const int *ids, int n, int n0, float *out, int V) {
    int table[256];
    for (int i = 0; i < 256; i++) table[i] = 255 - i; /* non-trivial block ids */
    int pos[1024], rows[1024];
    for (int i = 0; i < n; i++) { pos[i] = i; rows[i] = i; }
    int ss[2] = {0, n0}, len = n0;
    lpx_batch bt = {n0, ids, pos, 1, ss, &len, table, 256, n0, rows};
    CK(b->ops->step(b, &bt, out));
    for (int t = n0; t < n; t++) {
        int ss1[2] = {0, 1}, len1 = t + 1, r0 = 0;
        lpx_batch b1 = {1, ids + t, pos + t, 1, ss1, &len1, table, 256, 1, &r0};
        CK(b->ops->step(b, &b1, out + (size_t)t * V));
    }
}

static double relerr(const float *a, const float *r, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) { double e = (double)a[i] - r[i]; num += e * e; den += (double)r[i] * r[i]; if (a[i] != a[i]) return 1e9; }
    return sqrt(num / den);
}

static int check_tiny(const char *label, lpx_config c) {
    synth s; synth_model(&s, c);
    lpx_backend_opts o = {0, 0, 16, 256, 512, 16};
    lpx_backend *b;
    CK(lpx_cuda_backend_ops.create(&s.m, &o, &b));
    const int n = 40, V = c.vocab_size;
    int ids[64];
    for (int i = 0; i < n; i++) ids[i] = (int)((frand() + 1) * 0.5f * (V - 1));
    float *ref = malloc(sizeof(float) * n * V), *got = malloc(sizeof(float) * n * V), *got2 = malloc(sizeof(float) * n * V);
    ref_forward(&s.m, ids, n, ref);
    run_seq(b, ids, n, 20, got, V);   /* GEMM prefill (20 > 8 tokens) + graph decode */
    run_seq(b, ids, n, 5, got2, V);   /* matvec prefill + decode */
    const double e1 = relerr(got, ref, (size_t)n * V), e2 = relerr(got2, ref, (size_t)n * V);
    printf("%-28s rel-L2 vs float ref: prefill20+decode %.2e  prefill5+decode %.2e  %s\n", label, e1, e2,
           e1 < 1e-2 && e2 < 1e-2 ? "ok" : "FAIL");
    /* batch of 3 sequences decoding together must equal them alone */
    b->ops->destroy(b);
    return e1 < 1e-2 && e2 < 1e-2;
}

static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

static void bench_shape(const char *label, lpx_config c, double bw, int B) {
    synth s; synth_model(&s, c);
    lpx_backend_opts o = {0, 0, 16, 4096, 512, 256};
    lpx_backend *b;
    CK(lpx_cuda_backend_ops.create(&s.m, &o, &b));
    const int V = c.vocab_size, ctx = 128, steps = getenv("SMOKE_STEPS") ? atoi(getenv("SMOKE_STEPS")) : 128;
    int *table = malloc(sizeof(int) * B * 32);
    for (int i = 0; i < B * 32; i++) table[i] = i;
    int ids[512], pos[512], rows[512];
    for (int i = 0; i < 512; i++) { ids[i] = (i * 7919) % V; pos[i] = i; rows[i] = 0; }
    float *lg = malloc(sizeof(float) * (size_t)V * (B > 1 ? B : 1) * 1);
    /* prefill each sequence with ctx tokens */
    for (int sq = 0; sq < B; sq++) {
        int ss[2] = {0, ctx}, len = ctx, r = ctx - 1;
        lpx_batch bt = {ctx, ids, pos, 1, ss, &len, table + sq * 32, 32, 1, &r};
        CK(b->ops->step(b, &bt, lg));
    }
    /* pp512 timing */
    double pp[5];
    const int nrep = getenv("SMOKE_STEPS") ? 2 : 6;
    for (int rep = 0; rep < 6; rep++) {
        if (rep >= nrep) { pp[rep - 1] = pp[0]; continue; }
        int ss[2] = {0, 512}, len = 512, r = 511;
        lpx_batch bt = {512, ids, pos, 1, ss, &len, table, 32, 1, &r};
        double t0 = now();
        CK(b->ops->step(b, &bt, lg));
        if (rep) pp[rep - 1] = now() - t0;
    }
    qsort(pp, 5, sizeof(double), cmpd);
    int *tk = malloc(sizeof(int) * B), *ps = malloc(sizeof(int) * B), *sst = malloc(sizeof(int) * (B + 1)), *ln = malloc(sizeof(int) * B), *rw = malloc(sizeof(int) * B);
    double reps[5];
    for (int rep = 0; rep < 6; rep++) {
        if (rep >= nrep) { reps[rep - 1] = reps[0]; continue; }
        double t0 = now();
        for (int st = 0; st < steps; st++) {
            for (int i = 0; i < B; i++) { tk[i] = (st + i) % V; ps[i] = ctx + st; sst[i] = i; ln[i] = ctx + st + 1; rw[i] = i; }
            sst[B] = B;
            lpx_batch bt = {B, tk, ps, B, sst, ln, table, 32, B, rw};
            CK(b->ops->step(b, &bt, lg));
        }
        if (rep) reps[rep - 1] = (now() - t0) / steps;
        for (int sq = 0; sq < B && rep < 5; sq++) {} /* context grows 128->256 each rep: positions rewritten */
    }
    qsort(reps, 5, sizeof(double), cmpd);
    const double ms = reps[2] * 1e3;
    const double wbytes = 2.0 * ((double)c.n_layers * ((double)(c.n_heads + 2 * c.n_kv_heads) * c.head_dim * c.d_model + (double)c.d_model * c.n_heads * c.head_dim + 3.0 * c.d_ff * c.d_model) + (double)c.vocab_size * c.d_model);
    const double kvb = (double)B * (ctx + steps / 2) * c.n_layers * 2 * c.n_kv_heads * c.head_dim * 2;
    const double floor_ms = (wbytes + kvb) / bw * 1e3;
    printf("%-14s B=%-3d decode %.3f ms/step = %8.0f tok/s  floor %.3f ms  (%.0f%% of floor)  pp512 %.2f ms = %.0f tok/s\n",
           label, B, ms, B / reps[2], floor_ms, 100 * floor_ms / ms, pp[2] * 1e3, 512 / pp[2]);
    b->ops->destroy(b);
}

int main(int argc, char **argv) {
    lpx_cuda_device_info di;
    CK(lpx_cuda_device_info_get(0, &di));
    printf("%s cc %d.%d, %d SMs, driver %d, runtime %d, archs %s\n", di.name, di.cc_major, di.cc_minor, di.n_sms, di.driver_version, di.runtime_version, di.archs);
    double bw;
    CK(lpx_cuda_read_bandwidth(0, (size_t)4 << 30, 10, &bw));
    printf("read bandwidth %.3f TB/s\n", bw / 1e12);
    int ok = 1;
    const bool b1 = argc > 1 && !strcmp(argv[1], "--b1");
    lpx_config qwen3t = {LPX_ARCH_QWEN3, 2, 256, 4, 2, 64, 512, 1000, 4096, 1e-6f, 1e6f, false, LPX_ROPE_NONE, 1, 1, 1, 0, false, true, true, 0};
    if (!b1) ok &= check_tiny("tiny qwen3 (qk-norm, tied)", qwen3t);
    lpx_config qwen2t = {LPX_ARCH_QWEN2, 2, 448, 7, 1, 64, 480, 999, 4096, 1e-6f, 1e6f, false, LPX_ROPE_NONE, 1, 1, 1, 0, true, false, false, 0};
    if (!b1) ok &= check_tiny("tiny qwen2 (bias, G=7)", qwen2t);
    lpx_config llamat = {LPX_ARCH_LLAMA, 2, 256, 8, 2, 128, 512, 1000, 4096, 1e-5f, 5e5f, true, LPX_ROPE_LLAMA3, 32, 1, 4, 64, false, false, true, 0};
    if (!b1) ok &= check_tiny("tiny llama (interleaved, l3)", llamat);
    if (argc > 1 && !strcmp(argv[1], "--no-bench")) return !ok;
    lpx_config qwen3 = {LPX_ARCH_QWEN3, 28, 1024, 16, 8, 128, 3072, 151936, 40960, 1e-6f, 1e6f, false, LPX_ROPE_NONE, 1, 1, 1, 0, false, true, true, 0};
    if (b1) { bench_shape("qwen3-0.6b", qwen3, bw, 1); return !ok; }
    bench_shape("qwen3-0.6b", qwen3, bw, 1);
    bench_shape("qwen3-0.6b", qwen3, bw, 4);
    bench_shape("qwen3-0.6b", qwen3, bw, 16);
    bench_shape("qwen3-0.6b", qwen3, bw, 64);
    return !ok;
}
