#include "bench/bench_engine.h"

#include "backend/backend.h"
#include "base/host_bw.h"
#include "base/error.h"
#include "model/model.h"
#include "telemetry/telemetry.h"
#ifdef LPX_HAVE_CUDA
#include "backend/cuda/cuda_info.h"
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct result {
    char name[32];
    int batch;          /* sequences per step */
    int depth;          /* context before decoding (0: prefill) */
    int tokens_per_rep; /* tokens produced per repetition */
    int steps_per_rep;
    double ctx_avg;     /* mean context per sequence over the timed steps */
    double med_s, sd_s; /* per repetition */
    double floor_s;     /* per repetition */
} result;

typedef struct bench {
    const lpx_model *m;
    const lpx_backend_ops *ops;
    lpx_backend *be;
    int bs, max_blocks;
    int32_t *ids, *pos, *seq_start, *seq_len, *table, *rows;
    float *logits;
    lpx_sample_row *greedy; /* [max batch] decode steps sample greedily */
    int32_t *sampled;       /* [max batch] */
    bool device_sampling;   /* off with --no-device-sampling: logits to the host */
    bool ahead;             /* step N+1 begun before step N ends (off with --no-step-ahead) */
    int32_t *feed;          /* [max batch] row s feeds sequence s */
    double weight_bytes, kv_bytes_per_token, bandwidth;
    uint64_t rng;
} bench;

static int32_t next_id(bench *b) {
    b->rng = b->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int32_t)((b->rng >> 33) % (uint64_t)b->m->cfg.vocab_size);
}

/* Sequence s owns blocks [s*max_blocks, (s+1)*max_blocks). */
static void fill_tables(bench *b, int n_seqs) {
    for (int s = 0; s < n_seqs; s++)
        for (int i = 0; i < b->max_blocks; i++)
            b->table[(size_t)s * b->max_blocks + i] = s * b->max_blocks + i;
}

/* Prefills sequences [s0, s0+ns) with ctx tokens each in one step. */
static lpx_status prefill(bench *b, int s0, int ns, int ctx) {
    for (int s = 0; s < ns; s++) {
        b->seq_start[s] = s * ctx;
        b->seq_len[s] = ctx;
        for (int t = 0; t < ctx; t++) {
            b->ids[s * ctx + t] = next_id(b);
            b->pos[s * ctx + t] = t;
        }
        b->rows[s] = s * ctx + ctx - 1;
    }
    b->seq_start[ns] = ns * ctx;
    lpx_batch bt = {ns * ctx,
                    b->ids,
                    b->pos,
                    ns,
                    b->seq_start,
                    b->seq_len,
                    b->table + (size_t)s0 * b->max_blocks,
                    b->max_blocks,
                    ns,
                    b->rows};
    return lpx_backend_run(b->be, &(lpx_step){.batch = &bt, .logits = b->logits});
}

/* One decode step of B sequences at context length len (after the step); with
 * b->ahead only begun (ended by the caller), its tokens the previous step's when fed. */
static lpx_status decode_step(bench *b, int B, int len, bool fed) {
    for (int s = 0; s < B; s++) {
        b->ids[s] = next_id(b);
        b->pos[s] = len - 1;
        b->seq_start[s] = s;
        b->seq_len[s] = len;
        b->rows[s] = s;
    }
    b->seq_start[B] = B;
    lpx_batch bt = {B,          b->ids,   b->pos,        B, b->seq_start,
                    b->seq_len, b->table, b->max_blocks, B, b->rows};
    lpx_sample_batch sb = {.rows = b->greedy};
    lpx_step st = {.batch = &bt, .tokens = b->sampled, .logits = b->logits};
    if (b->device_sampling) st.sample = &sb;
    if (b->ahead) {
        st.feed = fed ? b->feed : NULL;
        return b->ops->step_begin(b->be, &st);
    }
    return lpx_backend_run(b->be, &st);
}

static void finish(result *r, double *t, int reps) {
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    r->med_s = t[reps / 2];
    double mean = 0, var = 0;
    for (int i = 0; i < reps; i++)
        mean += t[i] / reps;
    for (int i = 0; i < reps; i++)
        var += (t[i] - mean) * (t[i] - mean);
    r->sd_s = reps > 1 ? sqrt(var / (reps - 1)) : 0.0;
}

static lpx_status run_pp(bench *b, int p, int reps, result *r) {
    double t[64];
    fill_tables(b, 1);
    for (int i = -1; i < reps; i++) {
        const double t0 = now_s();
        LPX_TRY(prefill(b, 0, 1, p));
        if (i >= 0) t[i] = now_s() - t0;
    }
    snprintf(r->name, sizeof r->name, "pp%d", p);
    r->batch = 1;
    r->tokens_per_rep = p;
    r->steps_per_rep = 1;
    r->ctx_avg = p / 2.0;
    /* Prefill reads the weights once and writes/reads the prompt's KV. */
    r->floor_s = (b->weight_bytes + b->kv_bytes_per_token * p) / b->bandwidth;
    finish(r, t, reps);
    return LPX_OK;
}

/* B sequences decoding n steps from depth ctx; several_depths: the name says which. */
static lpx_status run_decode(bench *b, int B, int ctx, int n, int reps, int max_tokens,
                             bool several_depths, result *r) {
    double t[64];
    fill_tables(b, B);
    const int per_step = max_tokens / ctx > 0 ? max_tokens / ctx : 1;
    for (int i = -1; i < reps; i++) {
        for (int s0 = 0; s0 < B; s0 += per_step)
            LPX_TRY(prefill(b, s0, B - s0 < per_step ? B - s0 : per_step, ctx));
        const double t0 = now_s();
        for (int k = 0; k < n; k++) {
            LPX_TRY(decode_step(b, B, ctx + k + 1, k > 0));
            if (b->ahead && k > 0) LPX_TRY(b->ops->step_end(b->be));
        }
        if (b->ahead) LPX_TRY(b->ops->step_end(b->be));
        if (i >= 0) t[i] = now_s() - t0;
    }
    char at[16] = "";
    if (several_depths) snprintf(at, sizeof at, " @ d%d", ctx);
    if (B == 1)
        snprintf(r->name, sizeof r->name, "tg%d%s", n, at);
    else
        snprintf(r->name, sizeof r->name, "decode B=%d%s", B, at);
    r->batch = B;
    r->depth = ctx;
    r->tokens_per_rep = B * n;
    r->steps_per_rep = n;
    r->ctx_avg = ctx + (n + 1) / 2.0;
    r->floor_s = n * (b->weight_bytes + b->kv_bytes_per_token * B * r->ctx_avg) / b->bandwidth;
    finish(r, t, reps);
    return LPX_OK;
}

/* Matrix parameters read per decode step (all layers plus the output head). */
static double matrix_params(const lpx_config *c) {
    const double hd = c->head_dim, d = c->d_model;
    const double per_layer =
        (c->n_heads + 2.0 * c->n_kv_heads) * hd * d + d * c->n_heads * hd + 3.0 * c->d_ff * d;
    return per_layer * c->n_layers + (double)c->vocab_size * d;
}

typedef struct clocks {
    bool ok;
    int sm, mem;
    int64_t throttle;
    char text[128];
} clocks;

static void read_clocks(lpx_telemetry *tel, int index, clocks *c) {
    memset(c, 0, sizeof *c);
    lpx_gpu_sample s;
    if (!tel || lpx_telemetry_sample(tel, index, &s) != LPX_OK) return;
    c->ok = true;
    c->sm = s.sm_clock_mhz;
    c->mem = s.mem_clock_mhz;
    c->throttle = s.throttle;
    if (s.throttle != LPX_TEL_NA) lpx_throttle_text(s.throttle, c->text, sizeof c->text);
}

/* Slowdowns that make a timing no result (power cap, thermal, hardware brake). */
static bool throttled(const clocks *c) {
    const int64_t bad = LPX_THR_SW_POWER_CAP | LPX_THR_HW_SLOWDOWN | LPX_THR_SW_THERMAL |
                        LPX_THR_HW_THERMAL | LPX_THR_HW_POWER_BRAKE;
    return c->ok && c->throttle != LPX_TEL_NA && (c->throttle & bad);
}

/* The figures of one test, as printed and as the HTML report shows them. */
static bench_engine_row to_row(const result *r) {
    bench_engine_row o = {.test = r->name, .batch = r->batch, .depth = r->depth};
    o.prefill = strncmp(r->name, "pp", 2) == 0; /* run_pp's name */
    o.tok_s = r->tokens_per_rep / r->med_s;
    o.tok_s_sd = o.tok_s * r->sd_s / r->med_s;
    o.ms_per_step = r->med_s * 1e3 / r->steps_per_rep;
    o.floor_ms_per_step = r->floor_s * 1e3 / r->steps_per_rep;
    o.pct_of_floor = 100.0 * r->floor_s / r->med_s;
    return o;
}

void bench_engine_opts_init(bench_engine_opts *o) {
    *o = (bench_engine_opts){.p = 512,
                             .n = 128,
                             .depths = {128},
                             .n_depths = 1,
                             .reps = 5,
                             .batches = {1, 16, 64, 256},
                             .n_batches = 4};
}

static bench_engine_clocks report_clocks(const clocks *c, char *text, size_t cap) {
    snprintf(text, cap, "%s", c->text);
    return (bench_engine_clocks){c->ok, c->sm, c->mem, text};
}

/* The buffers of one run; free_bench frees them. */
static lpx_status alloc_bench(bench *b, int maxB, size_t cap) {
    b->ids = malloc(cap * sizeof(int32_t));
    b->pos = malloc(cap * sizeof(int32_t));
    b->rows = malloc(cap * sizeof(int32_t));
    b->seq_start = malloc((cap + 1) * sizeof(int32_t));
    b->seq_len = malloc(cap * sizeof(int32_t));
    b->table = malloc((size_t)maxB * b->max_blocks * sizeof(int32_t));
    b->logits = malloc(cap * (size_t)b->m->cfg.vocab_size * sizeof(float));
    b->greedy = calloc((size_t)maxB, sizeof *b->greedy);
    b->sampled = malloc((size_t)maxB * sizeof *b->sampled);
    b->feed = malloc((size_t)maxB * sizeof *b->feed);
    if (!b->ids || !b->pos || !b->rows || !b->seq_start || !b->seq_len || !b->table || !b->logits ||
        !b->greedy || !b->sampled || !b->feed)
        return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < maxB; i++) {
        b->feed[i] = i;
        b->greedy[i].p = (lpx_sampling_params){.top_p = 1, .repetition_penalty = 1};
    }
    return LPX_OK;
}

static void free_bench(bench *b) {
    if (b->be) b->be->ops->destroy(b->be);
    free(b->ids);
    free(b->pos);
    free(b->rows);
    free(b->seq_start);
    free(b->seq_len);
    free(b->table);
    free(b->logits);
    free(b->greedy);
    free(b->sampled);
    free(b->feed);
}

/* The device's name and read bandwidth, and the bytes a step reads on it (KV at kv). */
static lpx_status measure_floor(bench *b, bool cuda, int ordinal, lpx_kv_dtype kv, char *gpu,
                                size_t cap) {
    lpx_model_info info;
    LPX_TRY(lpx_model_info_get(b->m, &info));
    if (cuda) {
#ifdef LPX_HAVE_CUDA
        lpx_cuda_device_info di;
        LPX_TRY(lpx_cuda_device_info_get(ordinal, &di));
        snprintf(gpu, cap, "%s, cc %d.%d, %d SMs, CUDA driver %d.%d", di.name, di.cc_major,
                 di.cc_minor, di.n_sms, di.driver_version / 1000, di.driver_version % 1000 / 10);
        LPX_TRY(lpx_cuda_read_bandwidth(ordinal, (size_t)2 << 30, 10, &b->bandwidth));
#endif
        /* The CUDA backend holds the weights in bf16. */
        b->weight_bytes = 2.0 * matrix_params(&b->m->cfg);
    } else {
        b->bandwidth = lpx_host_read_bandwidth();
        b->weight_bytes = (double)info.decode_bytes_per_step;
    }
    b->kv_bytes_per_token = (double)lpx_kv_bytes_per_token(&b->m->cfg, kv);
    return LPX_OK;
}

static lpx_status run(const bench_engine_opts *o, lpx_model *m, bench_engine_result *r) {
    const char *device = o->device;
    if (!device) {
        device = "cpu";
#ifdef LPX_HAVE_CUDA
        lpx_cuda_device_info di;
        if (lpx_cuda_device_info_get(0, &di) == LPX_OK) device = "cuda";
#endif
    }
    int ordinal = 0;
    const lpx_backend_ops *ops = NULL;
    LPX_TRY(lpx_backend_select(device, &ops, &ordinal));
    const bool cuda = strcmp(ops->name, "cpu") != 0;
    const int p = o->p, n = o->n, reps = o->reps;
    int ctx = 1; /* the deepest depth */
    for (int i = 0; i < o->n_depths; i++)
        if (o->depths[i] > ctx) ctx = o->depths[i];
    const lpx_kv_dtype kv = lpx_kv_dtype_resolve(ops, o->kv_dtype);
    bench b = {0};
    b.m = m;
    b.ops = ops;
    b.rng = 12345;
    b.bs = 16;
    b.device_sampling = o->device_sampling >= 0;
    b.ahead = b.device_sampling && o->step_ahead >= 0;
    int maxB = 1;
    for (int i = 0; i < o->n_batches; i++)
        if (o->batches[i] > maxB) maxB = o->batches[i];
    const int longest = p > ctx + n ? p : ctx + n;
    b.max_blocks = (longest + b.bs - 1) / b.bs;
    const int max_tokens = p > ctx ? p : ctx;
    lpx_backend_opts bo = {.device = ordinal,
                           .n_threads = o->n_threads,
                           .block_size = b.bs,
                           .n_blocks = b.max_blocks * maxB,
                           .max_batch_tokens = max_tokens,
                           .max_seqs = maxB,
                           .tune = o->tune,
                           .trace = o->trace,
                           .kv_dtype = kv};
    snprintf(r->gpu, sizeof r->gpu, "host CPU");
    lpx_telemetry *tel = NULL;
    clocks before, after;
    result rs[BENCH_MAX_ROWS];
    int nr = 0;
    lpx_status st = alloc_bench(&b, maxB, (size_t)(max_tokens > maxB ? max_tokens : maxB));
    if (st == LPX_OK) st = measure_floor(&b, cuda, ordinal, kv, r->gpu, sizeof r->gpu);
    if (st == LPX_OK) st = ops->create(m, &bo, &b.be);
    if (st == LPX_OK && lpx_telemetry_open(0, &tel) != LPX_OK) tel = NULL;
    read_clocks(cuda ? tel : NULL, ordinal, &before);
    if (st == LPX_OK && p > 0) st = run_pp(&b, p, reps, &rs[nr++]);
    for (int d = 0; d < o->n_depths; d++)
        for (int i = 0; st == LPX_OK && i < o->n_batches; i++)
            st = run_decode(&b, o->batches[i], o->depths[d], n, reps, max_tokens, o->n_depths > 1,
                            &rs[nr++]);
    read_clocks(cuda ? tel : NULL, ordinal, &after);
    if (tel) lpx_telemetry_close(tel);
    free_bench(&b);
    if (st != LPX_OK) return st;
    for (int i = 0; i < nr; i++) {
        memcpy(r->names[i], rs[i].name, sizeof r->names[i]);
        r->rows[i] = to_row(&rs[i]);
        r->rows[i].test = r->names[i];
    }
    r->n_rows = nr;
    for (int d = 0; d < o->n_depths; d++) {
        size_t at = strlen(r->depths);
        snprintf(r->depths + at, sizeof r->depths - at, "%s%d", d ? "," : "", o->depths[d]);
    }
    r->meta = (bench_engine_meta){
        .model = o->model,
        .decode = b.ahead             ? "ahead"
                  : b.device_sampling ? "waited"
                                      : "host_logits",
        .device = ops->name,
        .gpu = r->gpu,
        .read_bandwidth = b.bandwidth,
        .p = p,
        .n = n,
        .depths = r->depths,
        .kv_dtype = lpx_kv_dtype_name(kv),
        .reps = reps,
        .before = report_clocks(&before, r->throttle_before, sizeof r->throttle_before),
        .after = report_clocks(&after, r->throttle_after, sizeof r->throttle_after),
        .throttled = throttled(&before) || throttled(&after)};
    return LPX_OK;
}

lpx_status bench_engine_run(const bench_engine_opts *o, bench_engine_result *r) {
    memset(r, 0, sizeof *r);
    lpx_model *m = NULL;
    LPX_TRY(lpx_model_open(o->model, &m));
    lpx_status st = run(o, m, r);
    lpx_model_close(m);
    return st;
}
