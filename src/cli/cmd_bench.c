/* lpx bench -m MODEL: drives a backend directly (no engine) and prints llama-bench
 * style figures: prefill (pp), batch-1 decode (tg) and decode at B sequences, each
 * with ms per step, the bandwidth floor of that step (weight + KV bytes over the
 * read bandwidth measured at start) and the share of it reached. GPU clocks and
 * throttle reasons are read before and after; a throttled run is flagged. */
#include "backend/backend.h"
#include "base/error.h"
#include "bench/bench_engine_report.h"
#include "bench/bench_serve.h"
#include "cli/cli_num.h"
#include "cli/commands.h"
#include "lpx.h"
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

#define MAX_BATCHES 16

static void usage(FILE *f) {
    fprintf(f, "usage: lpx bench -m MODEL [-p 512] [-n 128] [-c 128] [-b 1,16,64,256] [-r 5]\n"
               "                 [-o md|json|csv] [--device cpu|cuda|cuda:N] [--report OUT.html]\n"
               "       lpx bench serve --url URL ...   (load generator for a server; see\n"
               "                                        lpx bench serve --help)\n\n"
               "Runs the backend directly on random token ids and prints, per test, tokens/s\n"
               "(median of r repetitions after one warm-up, ± standard deviation), ms per step\n"
               "(a decode step ends in greedy sampling on the device, as the engine's do, so\n"
               "only token ids come back) and the %% of the bandwidth floor: (weight bytes +\n"
               "KV bytes read per step) over the read bandwidth measured at start. Decode steps\n"
               "run one step ahead where the backend can (step N+1 queued before step N's\n"
               "tokens are read, its tokens the ones step N draws), as the engine's do.\n"
               "LPX_STEP_AHEAD=0 waits for each step first; LPX_DEVICE_SAMPLING=0 copies every\n"
               "decode step's logits to the host instead (and waits too).\n\n"
               "  -m, --model MODEL   .gguf file or Hugging Face model directory\n"
               "  -p N                prompt tokens of the prefill test ppN (0: skip)\n"
               "  -n N                decode steps per test (tg and batched)\n"
               "  -c N                context before decoding starts (default 128)\n"
               "  -b LIST             decode batch sizes; 1 is the tg test (default 1,16,64,256)\n"
               "  -r N                timed repetitions (default 5)\n"
               "  -o md|json|csv      output format (default md)\n"
               "  --device DEV        cpu, cuda or cuda:N (default cuda when a GPU is usable)\n"
               "  --report OUT.html   also write the table, clocks and charts of tok/s per test\n"
               "                      and batch size as one self-contained HTML file\n"
               "  -h, --help          this help\n");
}

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
    bool device_sampling;   /* off with LPX_DEVICE_SAMPLING=0: logits to the host */
    bool ahead;             /* step N+1 begun before step N ends (off with LPX_STEP_AHEAD=0) */
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

static lpx_status run_decode(bench *b, int B, int ctx, int n, int reps, int max_tokens, result *r) {
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
    if (B == 1)
        snprintf(r->name, sizeof r->name, "tg%d", n);
    else
        snprintf(r->name, sizeof r->name, "decode B=%d", B);
    r->batch = B;
    r->tokens_per_rep = B * n;
    r->steps_per_rep = n;
    r->ctx_avg = ctx + (n + 1) / 2.0;
    r->floor_s = n * (b->weight_bytes + b->kv_bytes_per_token * B * r->ctx_avg) / b->bandwidth;
    finish(r, t, reps);
    return LPX_OK;
}

/* Host read bandwidth: one pass over 256 MiB, best of 3 (the CPU backend's floor). */
static double host_bandwidth(void) {
    const size_t n = (size_t)32 << 20; /* uint64 words */
    uint64_t *buf = malloc(n * sizeof(uint64_t));
    if (!buf) return 1e10;
    for (size_t i = 0; i < n; i++)
        buf[i] = i * 0x9e3779b97f4a7c15ull;
    double best = 1e30;
    volatile uint64_t sink = 0;
    for (int r = 0; r < 3; r++) {
        const double t0 = now_s();
        uint64_t a = 0, c = 0, d = 0, e = 0;
        for (size_t i = 0; i < n; i += 4) {
            a ^= buf[i];
            c ^= buf[i + 1];
            d ^= buf[i + 2];
            e ^= buf[i + 3];
        }
        sink ^= a ^ c ^ d ^ e;
        const double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    (void)sink;
    free(buf);
    return (double)n * sizeof(uint64_t) / best;
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
    bench_engine_row o = {.test = r->name, .batch = r->batch};
    o.prefill = strncmp(r->name, "pp", 2) == 0; /* run_pp's name */
    o.tok_s = r->tokens_per_rep / r->med_s;
    o.tok_s_sd = o.tok_s * r->sd_s / r->med_s;
    o.ms_per_step = r->med_s * 1e3 / r->steps_per_rep;
    o.floor_ms_per_step = r->floor_s * 1e3 / r->steps_per_rep;
    o.pct_of_floor = 100.0 * r->floor_s / r->med_s;
    return o;
}

static bench_engine_clocks report_clocks(const clocks *c) {
    return (bench_engine_clocks){c->ok, c->sm, c->mem, c->text};
}

static void print_results(const char *fmt, const bench_engine_meta *m, const bench_engine_row *rs,
                          int n) {
    if (!strcmp(fmt, "json")) {
        printf("{\"model\": \"%s\", \"device\": \"%s\", \"gpu\": \"%s\", "
               "\"read_bandwidth_GBps\": %.1f, \"decode\": \"%s\", \"sm_mhz_before\": %d, "
               "\"sm_mhz_after\": %d, \"mem_mhz_before\": %d, \"mem_mhz_after\": %d, "
               "\"throttled\": %s, \"tests\": [",
               m->model, m->device, m->gpu, m->read_bandwidth / 1e9, m->decode, m->before.sm_mhz,
               m->after.sm_mhz, m->before.mem_mhz, m->after.mem_mhz,
               m->throttled ? "true" : "false");
        for (int i = 0; i < n; i++) {
            const bench_engine_row *r = &rs[i];
            printf("%s{\"test\": \"%s\", \"batch\": %d, \"tok_s\": %.2f, \"tok_s_sd\": %.2f, "
                   "\"ms_per_step\": %.4f, \"floor_ms_per_step\": %.4f, \"pct_of_floor\": %.1f}",
                   i ? ", " : "", r->test, r->batch, r->tok_s, r->tok_s_sd, r->ms_per_step,
                   r->floor_ms_per_step, r->pct_of_floor);
        }
        printf("]}\n");
        return;
    }
    const bool csv = !strcmp(fmt, "csv");
    if (csv)
        printf("test,batch,tok_s,tok_s_sd,ms_per_step,floor_ms_per_step,pct_of_floor\n");
    else
        printf("model: %s\ndevice: %s (%s), read bandwidth %.1f GB/s; decode steps: %s\n\n"
               "| test | tok/s | ± sd | ms/step | floor ms/step | %% of floor |\n"
               "| --- | ---: | ---: | ---: | ---: | ---: |\n",
               m->model, m->device, m->gpu, m->read_bandwidth / 1e9, m->decode);
    for (int i = 0; i < n; i++) {
        const bench_engine_row *r = &rs[i];
        if (csv)
            printf("%s,%d,%.2f,%.2f,%.4f,%.4f,%.1f\n", r->test, r->batch, r->tok_s, r->tok_s_sd,
                   r->ms_per_step, r->floor_ms_per_step, r->pct_of_floor);
        else
            printf("| %s | %.1f | %.1f | %.3f | %.3f | %.1f |\n", r->test, r->tok_s, r->tok_s_sd,
                   r->ms_per_step, r->floor_ms_per_step, r->pct_of_floor);
    }
    if (!csv) {
        if (m->before.ok)
            printf("\nclocks SM/mem MHz: before %d/%d [%s], after %d/%d [%s]%s\n", m->before.sm_mhz,
                   m->before.mem_mhz, m->before.throttle, m->after.sm_mhz, m->after.mem_mhz,
                   m->after.throttle, m->throttled ? "  ** THROTTLED: not a result **" : "");
        else
            printf("\nclocks: not available (no NVML)\n");
    }
}

int cmd_bench(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "serve") == 0) return bench_serve_main(argc - 1, argv + 1);
    const char *model = NULL, *fmt = "md", *device = NULL, *report = NULL;
    int32_t p = 512, n = 128, ctx = 128, reps = 5, batches[MAX_BATCHES] = {1, 16, 64, 256}, nb = 4;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has) {
            model = argv[++i];
        } else if (!strcmp(a, "-p") && has) {
            if (!lpx_cli_opt_i32("bench", a, argv[++i], 0, 65536, &p)) return 2;
        } else if (!strcmp(a, "-n") && has) {
            if (!lpx_cli_opt_i32("bench", a, argv[++i], 1, 65536, &n)) return 2;
        } else if (!strcmp(a, "-c") && has) {
            if (!lpx_cli_opt_i32("bench", a, argv[++i], 1, 65536, &ctx)) return 2;
        } else if (!strcmp(a, "-r") && has) {
            if (!lpx_cli_opt_i32("bench", a, argv[++i], 1, 64, &reps)) return 2;
        } else if (!strcmp(a, "-b") && has) {
            if (!lpx_cli_opt_i32_list("bench", a, argv[++i], 1, 4096, batches, MAX_BATCHES, &nb))
                return 2;
        } else if (!strcmp(a, "-o") && has) {
            fmt = argv[++i];
        } else if (!strcmp(a, "--device") && has) {
            device = argv[++i];
        } else if (!strcmp(a, "--report") && has) {
            report = argv[++i];
        } else {
            static const char *const with_value[] = {
                "-m", "--model", "-p", "-n", "-c", "-r", "-b", "-o", "--device", "--report", NULL};
            return lpx_cli_opt_reject("bench", a, with_value), 2;
        }
    }
    if (!model) {
        fprintf(stderr, "lpx bench: -m MODEL is required (see --help)\n");
        return 2;
    }
    if (strcmp(fmt, "md") && strcmp(fmt, "json") && strcmp(fmt, "csv")) {
        fprintf(stderr, "lpx bench: -o: expected md, json or csv (got '%s')\n", fmt);
        return 2;
    }
    char gpu[512] = "host CPU";
    int ordinal = 0;
    const lpx_backend_ops *ops = NULL;
    if (!device) {
        device = "cpu";
#ifdef LPX_HAVE_CUDA
        lpx_cuda_device_info di;
        if (lpx_cuda_device_info_get(0, &di) == LPX_OK) device = "cuda";
#endif
    }
    if (lpx_backend_select(device, &ops, &ordinal) != LPX_OK) {
        fprintf(stderr, "lpx bench: %s\n", lpx_last_error());
        return 2;
    }
    const bool cuda = strcmp(ops->name, "cpu") != 0;
    lpx_model *m = NULL;
    if (lpx_model_open(model, &m) != LPX_OK) {
        fprintf(stderr, "lpx bench: %s\n", lpx_last_error());
        return 1;
    }
    bench b = {0};
    b.m = m;
    b.ops = ops;
    b.rng = 12345;
    b.bs = 16;
    int maxB = 1;
    for (int i = 0; i < nb; i++)
        if (batches[i] > maxB) maxB = batches[i];
    const int longest = p > ctx + n ? p : ctx + n;
    b.max_blocks = (longest + b.bs - 1) / b.bs;
    const int max_tokens = p > ctx ? p : ctx;
    lpx_backend_opts o = {.device = ordinal, .block_size = b.bs, .n_blocks = b.max_blocks * maxB,
                          .max_batch_tokens = max_tokens, .max_seqs = maxB};
    lpx_model_info info;
    int rc = 1;
    lpx_telemetry *tel = NULL;
    clocks before, after;
    result rs[MAX_BATCHES + 1];
    int nr = 0;
    const size_t cap = (size_t)(max_tokens > maxB ? max_tokens : maxB);
    b.ids = malloc(cap * sizeof(int32_t));
    b.pos = malloc(cap * sizeof(int32_t));
    b.rows = malloc(cap * sizeof(int32_t));
    b.seq_start = malloc((cap + 1) * sizeof(int32_t));
    b.seq_len = malloc(cap * sizeof(int32_t));
    b.table = malloc((size_t)maxB * b.max_blocks * sizeof(int32_t));
    b.logits = malloc(cap * (size_t)m->cfg.vocab_size * sizeof(float));
    b.greedy = calloc((size_t)maxB, sizeof *b.greedy);
    b.sampled = malloc((size_t)maxB * sizeof *b.sampled);
    b.feed = malloc((size_t)maxB * sizeof *b.feed);
    if (!b.ids || !b.pos || !b.rows || !b.seq_start || !b.seq_len || !b.table || !b.logits ||
        !b.greedy || !b.sampled || !b.feed) {
        fprintf(stderr, "lpx bench: out of memory\n");
        goto done;
    }
    const char *env = getenv("LPX_DEVICE_SAMPLING");
    b.device_sampling = !(env && !strcmp(env, "0"));
    env = getenv("LPX_STEP_AHEAD");
    b.ahead = b.device_sampling && !(env && !strcmp(env, "0"));
    for (int i = 0; i < maxB; i++) b.feed[i] = i;
    for (int i = 0; i < maxB; i++)
        b.greedy[i].p = (lpx_sampling_params){.top_p = 1, .repetition_penalty = 1};
    if (lpx_model_info_get(m, &info) != LPX_OK) goto fail;
    if (cuda) {
#ifdef LPX_HAVE_CUDA
        lpx_cuda_device_info di;
        if (lpx_cuda_device_info_get(ordinal, &di) != LPX_OK) goto fail;
        snprintf(gpu, sizeof gpu, "%s, cc %d.%d, %d SMs, CUDA driver %d.%d", di.name, di.cc_major,
                 di.cc_minor, di.n_sms, di.driver_version / 1000, di.driver_version % 1000 / 10);
        if (lpx_cuda_read_bandwidth(ordinal, (size_t)2 << 30, 10, &b.bandwidth) != LPX_OK)
            goto fail;
#endif
        /* The CUDA backend holds weights and KV cache in bf16. */
        b.weight_bytes = 2.0 * matrix_params(&m->cfg);
        b.kv_bytes_per_token = (double)lpx_kv_bytes_per_token(&m->cfg, 2);
    } else {
        b.bandwidth = host_bandwidth();
        b.weight_bytes = (double)info.decode_bytes_per_step;
        b.kv_bytes_per_token = (double)lpx_kv_bytes_per_token(&m->cfg, sizeof(float));
    }
    if (ops->create(m, &o, &b.be) != LPX_OK) goto fail;
    if (lpx_telemetry_open(0, &tel) != LPX_OK) tel = NULL;
    read_clocks(cuda ? tel : NULL, ordinal, &before);
    if (p > 0 && run_pp(&b, p, reps, &rs[nr++]) != LPX_OK) goto fail;
    for (int i = 0; i < nb; i++)
        if (run_decode(&b, batches[i], ctx, n, reps, max_tokens, &rs[nr++]) != LPX_OK) goto fail;
    read_clocks(cuda ? tel : NULL, ordinal, &after);
    bench_engine_row rows[MAX_BATCHES + 1];
    for (int i = 0; i < nr; i++)
        rows[i] = to_row(&rs[i]);
    const bench_engine_meta meta = {.model = model,
                                    .decode = b.ahead              ? "ahead"
                                              : b.device_sampling ? "waited"
                                                                  : "host_logits",
                                    .device = ops->name,
                                    .gpu = gpu,
                                    .read_bandwidth = b.bandwidth,
                                    .p = p,
                                    .n = n,
                                    .ctx = ctx,
                                    .reps = reps,
                                    .before = report_clocks(&before),
                                    .after = report_clocks(&after),
                                    .throttled = throttled(&before) || throttled(&after)};
    print_results(fmt, &meta, rows, nr);
    if (report && bench_engine_write_html(report, &meta, rows, nr) != LPX_OK) goto fail;
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "lpx bench: %s\n", lpx_last_error());
done:
    if (b.be) b.be->ops->destroy(b.be);
    if (tel) lpx_telemetry_close(tel);
    free(b.ids);
    free(b.pos);
    free(b.rows);
    free(b.seq_start);
    free(b.seq_len);
    free(b.table);
    free(b.logits);
    free(b.greedy);
    free(b.sampled);
    free(b.feed);
    lpx_model_close(m);
    return rc;
}
