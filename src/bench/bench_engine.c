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
#include <pthread.h>
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

/* A barrier of the engines of one run that a failing engine opens for all: each
 * repetition's timed part starts on every engine at once, and an engine that fails
 * does not leave the others waiting. */
typedef struct bsync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, count;
    uint64_t round;
    bool failed;
} bsync;

static bool bsync_wait(bsync *y) {
    pthread_mutex_lock(&y->mu);
    const uint64_t round = y->round;
    if (!y->failed && ++y->count == y->n) {
        y->count = 0;
        y->round++;
        pthread_cond_broadcast(&y->cv);
    }
    while (!y->failed && y->round == round)
        pthread_cond_wait(&y->cv, &y->mu);
    const bool ok = !y->failed;
    pthread_mutex_unlock(&y->mu);
    return ok;
}

static void bsync_fail(bsync *y) {
    pthread_mutex_lock(&y->mu);
    y->failed = true;
    pthread_cond_broadcast(&y->cv);
    pthread_mutex_unlock(&y->mu);
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
    bsync *sync; /* several engines at once: the start of each timed repetition */
} bench;

/* Before a timed repetition: with several engines, all of them start it together. */
static lpx_status start_rep(bench *b) {
    if (b->sync && !bsync_wait(b->sync))
        return lpx_errorf(LPX_ERR_INTERNAL, "another engine of the run failed");
    return LPX_OK;
}

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
        LPX_TRY(start_rep(b));
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
        LPX_TRY(start_rep(b));
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

/* One engine of a run: its backend and buffers, and the results of its tests. */
typedef struct engine_run {
    bench b;
    const bench_engine_opts *o;
    int max_tokens;
    bool cuda;
    int ordinal;
    result rs[BENCH_MAX_ROWS];
    int nr;
    lpx_status st;
    char err[512]; /* the message of st, copied off the engine's thread */
} engine_run;

/* The tests of o on one engine: the prefill test, then each decode test at each depth. */
static lpx_status run_tests(engine_run *e) {
    const bench_engine_opts *o = e->o;
    lpx_status st = LPX_OK;
    e->nr = 0;
    if (o->p > 0) st = run_pp(&e->b, o->p, o->reps, &e->rs[e->nr++]);
    for (int d = 0; d < o->n_depths; d++)
        for (int i = 0; st == LPX_OK && i < o->n_batches; i++)
            st = run_decode(&e->b, o->batches[i], o->depths[d], o->n, o->reps, e->max_tokens,
                            o->n_depths > 1, &e->rs[e->nr++]);
    return st;
}

static void *engine_thread(void *arg) {
    engine_run *e = arg;
    e->st = run_tests(e);
    if (e->st != LPX_OK) {
        snprintf(e->err, sizeof e->err, "%s", lpx_last_error());
        bsync_fail(e->b.sync);
    }
    return NULL;
}

/* Engine i's backend on device, its buffers and floor; gpu (cap) gets its name. */
static lpx_status engine_setup(engine_run *e, const bench_engine_opts *o, lpx_model *m,
                               const char *device, int32_t n_threads, char *gpu, size_t cap) {
    const lpx_backend_ops *ops = NULL;
    LPX_TRY(lpx_backend_select(device, &ops, &e->ordinal));
    e->o = o;
    e->cuda = strcmp(ops->name, "cpu") != 0;
    int ctx = 1; /* the deepest depth */
    for (int i = 0; i < o->n_depths; i++)
        if (o->depths[i] > ctx) ctx = o->depths[i];
    const lpx_kv_dtype kv = lpx_kv_dtype_resolve(ops, o->kv_dtype);
    bench *b = &e->b;
    b->m = m;
    b->ops = ops;
    b->rng = 12345;
    b->bs = 16;
    b->device_sampling = o->device_sampling >= 0;
    b->ahead = b->device_sampling && o->step_ahead >= 0;
    int maxB = 1;
    for (int i = 0; i < o->n_batches; i++)
        if (o->batches[i] > maxB) maxB = o->batches[i];
    const int longest = o->p > ctx + o->n ? o->p : ctx + o->n;
    b->max_blocks = (longest + b->bs - 1) / b->bs;
    e->max_tokens = o->p > ctx ? o->p : ctx;
    lpx_backend_opts bo = {.device = e->ordinal,
                           .n_threads = n_threads,
                           .block_size = b->bs,
                           .n_blocks = b->max_blocks * maxB,
                           .max_batch_tokens = e->max_tokens,
                           .max_seqs = maxB,
                           .tune = o->tune,
                           .trace = o->trace,
                           .kv_dtype = kv};
    snprintf(gpu, cap, "host CPU");
    LPX_TRY(alloc_bench(b, maxB, (size_t)(e->max_tokens > maxB ? e->max_tokens : maxB)));
    LPX_TRY(measure_floor(b, e->cuda, e->ordinal, kv, gpu, cap));
    return ops->create(m, &bo, &b->be);
}

/* A test's row over n engines run at once: tok/s summed (sd: the root of the summed
 * variances), ms per step, floor and % of floor the engines' mean. */
static bench_engine_row aggregate(const engine_run *e, int n, int t) {
    bench_engine_row a = to_row(&e[0].rs[t]);
    double var = a.tok_s_sd * a.tok_s_sd;
    for (int i = 1; i < n; i++) {
        const bench_engine_row x = to_row(&e[i].rs[t]);
        a.tok_s += x.tok_s;
        var += x.tok_s_sd * x.tok_s_sd;
        a.ms_per_step += x.ms_per_step;
        a.floor_ms_per_step += x.floor_ms_per_step;
        a.pct_of_floor += x.pct_of_floor;
    }
    a.tok_s_sd = sqrt(var);
    a.ms_per_step /= n;
    a.floor_ms_per_step /= n;
    a.pct_of_floor /= n;
    return a;
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
    const int n = o->dp && o->dp->n > 1 ? o->dp->n : 1;
    engine_run *e = calloc((size_t)n, sizeof *e);
    r->engine_rows = n > 1 ? calloc((size_t)n * BENCH_MAX_ROWS, sizeof *r->engine_rows) : NULL;
    if (!e || (n > 1 && !r->engine_rows)) {
        free(e);
        return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    }
    bsync sync = {.n = n};
    pthread_mutex_init(&sync.mu, NULL);
    pthread_cond_init(&sync.cv, NULL);
    char other_gpu[512];
    lpx_status st = LPX_OK;
    for (int i = 0; st == LPX_OK && i < n; i++) {
        const char *dev = n > 1 ? o->dp->device[i] : device;
        st = engine_setup(&e[i], o, m, dev, n > 1 ? o->dp->n_threads : o->n_threads,
                          i ? other_gpu : r->gpu, i ? sizeof other_gpu : sizeof r->gpu);
        if (st != LPX_OK && n > 1) {
            char why[512];
            snprintf(why, sizeof why, "%s", lpx_last_error());
            st = lpx_errorf(st, "engine %d of %d (%s): %s", i, n, dev, why);
        }
        size_t at = strlen(r->engines);
        snprintf(r->engines + at, sizeof r->engines - at, "%s%s", i ? "," : "", dev);
    }
    lpx_telemetry *tel = NULL;
    clocks before, after;
    if (st == LPX_OK && lpx_telemetry_open(0, &tel) != LPX_OK) tel = NULL;
    bool any_throttled = false; /* on any engine's GPU; the clocks shown are engine 0's */
    for (int i = n - 1; i >= 0; i--) {
        read_clocks(e[i].cuda ? tel : NULL, e[i].ordinal, &before);
        any_throttled |= throttled(&before);
    }
    engine_run base = {0}; /* --dp-baseline: engine 0's figures alone */
    if (st == LPX_OK && n > 1 && o->dp_baseline) {
        st = run_tests(&e[0]);
        memcpy(base.rs, e[0].rs, sizeof base.rs);
    }
    if (st == LPX_OK && n == 1) st = run_tests(&e[0]);
    if (st == LPX_OK && n > 1) {
        pthread_t th[LPX_DP_MAX];
        int started = 0;
        for (int i = 0; i < n; i++) {
            e[i].b.sync = &sync;
            if (pthread_create(&th[i], NULL, engine_thread, &e[i]) != 0) {
                bsync_fail(&sync);
                st = lpx_errorf(LPX_ERR_NOMEM, "cannot start engine %d's thread", i);
                break;
            }
            started++;
        }
        for (int i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; st == LPX_OK && i < n; i++) /* the first failure, not its echo */
            if (e[i].st != LPX_OK && strcmp(e[i].err, "another engine of the run failed"))
                st = lpx_errorf(e[i].st, "engine %d of %d (%s): %s", i, n, o->dp->device[i],
                                e[i].err);
        for (int i = 0; st == LPX_OK && i < n; i++)
            if (e[i].st != LPX_OK) st = lpx_errorf(e[i].st, "engine %d: %s", i, e[i].err);
    }
    for (int i = n - 1; i >= 0; i--) {
        read_clocks(e[i].cuda ? tel : NULL, e[i].ordinal, &after);
        any_throttled |= throttled(&after);
    }
    if (tel) lpx_telemetry_close(tel);
    const bench *b = &e[0].b;
    const double bandwidth = b->bandwidth;
    const bool ahead = b->ahead, device_sampling = b->device_sampling;
    const char *ops_name = b->ops ? b->ops->name : "cpu";
    const lpx_kv_dtype kv = b->ops ? lpx_kv_dtype_resolve(b->ops, o->kv_dtype) : o->kv_dtype;
    const int nr = e[0].nr;
    for (int i = 0; i < n; i++)
        free_bench(&e[i].b);
    pthread_mutex_destroy(&sync.mu);
    pthread_cond_destroy(&sync.cv);
    if (st != LPX_OK) {
        free(e);
        return st;
    }
    for (int t = 0; t < nr; t++) {
        memcpy(r->names[t], e[0].rs[t].name, sizeof r->names[t]);
        r->rows[t] = n > 1 ? aggregate(e, n, t) : to_row(&e[0].rs[t]);
        r->rows[t].test = r->names[t];
        r->rows[t].engine = -1;
        if (n > 1 && o->dp_baseline) {
            r->rows[t].one_tok_s = to_row(&base.rs[t]).tok_s;
            r->rows[t].vs_one = r->rows[t].tok_s / (n * r->rows[t].one_tok_s);
        }
        for (int i = 0; n > 1 && i < n; i++) {
            bench_engine_row *x = &r->engine_rows[(size_t)i * BENCH_MAX_ROWS + (size_t)t];
            *x = to_row(&e[i].rs[t]);
            x->test = r->names[t];
            x->engine = i;
        }
    }
    free(e);
    r->n_rows = nr;
    r->n_engines = n;
    for (int d = 0; d < o->n_depths; d++) {
        size_t at = strlen(r->depths);
        snprintf(r->depths + at, sizeof r->depths - at, "%s%d", d ? "," : "", o->depths[d]);
    }
    r->meta = (bench_engine_meta){
        .model = o->model,
        .decode = ahead             ? "ahead"
                  : device_sampling ? "waited"
                                    : "host_logits",
        .device = ops_name,
        .gpu = r->gpu,
        .read_bandwidth = bandwidth,
        .p = o->p,
        .n = o->n,
        .depths = r->depths,
        .kv_dtype = lpx_kv_dtype_name(kv),
        .reps = o->reps,
        .n_engines = n,
        .engines = r->engines,
        .before = report_clocks(&before, r->throttle_before, sizeof r->throttle_before),
        .after = report_clocks(&after, r->throttle_after, sizeof r->throttle_after),
        .throttled = any_throttled};
    return LPX_OK;
}

void bench_engine_result_free(bench_engine_result *r) {
    free(r->engine_rows);
    r->engine_rows = NULL;
}

lpx_status bench_engine_run(const bench_engine_opts *o, bench_engine_result *r) {
    memset(r, 0, sizeof *r);
    lpx_model *m = NULL;
    LPX_TRY(lpx_model_open(o->model, &m));
    lpx_status st = run(o, m, r);
    lpx_model_close(m);
    if (st != LPX_OK) bench_engine_result_free(r);
    return st;
}
