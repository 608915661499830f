/* lpx plan: bandwidth floor and memory plan of a model on a GPU, before running it. */
#include "cli/commands.h"
#include "cli/opts.h"
#include "doctor/plan.h"
#include "telemetry/telemetry.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GB 1e9
#define GIB (1024.0 * 1024.0 * 1024.0)

static void usage(FILE *f) {
    fprintf(f, "usage: lpx plan -m MODEL [--gpu auto|NAME|list] [--max-model-len L] [--context T]\n"
               "                [--batch B,...] [--gpu-memory-utilization U] [--bandwidth TB/s]\n"
               "                [--memory GB] [--kv-cache-dtype bf16|fp8] [--json]\n\n"
               "Weight bytes read per decode step, KV bytes per token, the bandwidth floor\n"
               "(ms/step and tok/s) at each batch size, and how many sequences fit in memory.\n"
               "Traffic is decimal (1 GB = 1e9 bytes, 1 TB/s = 1e12 bytes/s); memory sizes are\n"
               "binary (1 GiB = 2^30 bytes), as nvidia-smi shows them.\n\n"
               "  -m, --model MODEL   the model (a .gguf file or a Hugging Face directory)\n"
               "  --gpu auto|NAME     the GPU here (auto, default; none: the CPU backend on this\n"
               "                      host, its RAM and measured read bandwidth, f32 KV) or one\n"
               "                      of the table (list)\n"
               "  --bandwidth TB/s    memory bandwidth to use instead, 0.001 to 1000\n"
               "  --memory GiB        GPU memory to use instead, 0.001 to 1e+06\n"
               "  --max-model-len L   tokens per sequence for the memory plan, 1 to 2147483647\n"
               "                      (default: model's; also -c, --ctx-size)\n"
               "  --context T         tokens per sequence for the floor table, 0 to 2147483647\n"
               "                      (default L/2)\n"
               "  --batch B,...       batch sizes of the table, up to 16 sizes of 1 to 1000000\n"
               "                      (default 1,16,64,256)\n"
               "  --gpu-memory-utilization U  share of GPU memory lpx may use, 0.01 to 1\n"
               "                      (default 0.9)\n"
               "  --kv-cache-dtype D  the KV cache of the plan: bf16 (auto, default) or fp8;\n"
               "                      the KV lines show both (no GPU: f32 or fp8)\n"
               "  --json              print the plan as JSON\n");
}

static void list_gpus(void) {
    int n;
    const lpx_gpu_spec *s = lpx_gpu_specs(&n);
    printf("%-16s %-36s %10s %12s %12s\n", "name", "GPU", "memory GiB", "datasheet", "measured");
    for (int i = 0; i < n; i++) {
        char meas[32] = "-";
        if (s[i].measured > 0) snprintf(meas, sizeof meas, "%.2f TB/s", s[i].measured / 1e12);
        printf("%-16s %-36s %10.1f %7.2f TB/s %12s\n", s[i].key, s[i].name, s[i].mem_bytes / GIB,
               s[i].bandwidth / 1e12, meas);
    }
}

static void from_spec(const lpx_gpu_spec *s, lpx_plan_gpu *g) {
    snprintf(g->name, sizeof g->name, "%s", s->name);
    g->mem_bytes = s->mem_bytes;
    if (s->measured > 0) {
        g->bandwidth = s->measured;
        snprintf(g->bandwidth_source, sizeof g->bandwidth_source,
                 "read bandwidth lpx measured on this GPU model (PERF.md); datasheet %.2f TB/s",
                 s->bandwidth / 1e12);
    } else {
        g->bandwidth = s->bandwidth;
        snprintf(g->bandwidth_source, sizeof g->bandwidth_source,
                 "datasheet peak, not measured by lpx (on an H200, measured reads reached 85%% of "
                 "the datasheet)");
    }
}

/* --gpu auto: the first GPU NVML sees, its memory as reported, bandwidth from the table
 * or, for a GPU not in it, max memory clock x bus width x 2 (double data rate); no GPU:
 * the CPU backend on this host (lpx_plan_host). */
static int detect_gpu(lpx_plan_gpu *g) {
    lpx_telemetry *t;
    if (lpx_telemetry_open(0, &t) != LPX_OK) return 1;
    const lpx_telemetry_state *st = lpx_telemetry_get_state(t);
    lpx_gpu_facts f;
    if (!st->nvml_ready || st->nvml_device_count < 1 || lpx_telemetry_facts(t, 0, &f) != LPX_OK) {
        fprintf(stderr,
                "lpx plan: --gpu auto: no NVIDIA GPU detected (%s): the plan is the CPU "
                "backend's on this host; --gpu NAME plans for a GPU (lpx plan --gpu list)\n",
                st->nvml_ready ? "the driver reports none" : st->nvml_error);
        lpx_telemetry_close(t);
        lpx_plan_host(g);
        return 0;
    }
    lpx_telemetry_close(t);
    const lpx_gpu_spec *s = lpx_gpu_spec_match(f.name);
    if (s) from_spec(s, g);
    snprintf(g->name, sizeof g->name, "%s (GPU 0)", f.name);
    if (f.mem_total > 0) g->mem_bytes = f.mem_total;
    if (!s) {
        if (f.mem_clock_max_mhz <= 0 || f.mem_bus_width <= 0) {
            fprintf(stderr,
                    "lpx plan: %s is not in the table and NVML gives no memory clock "
                    "or bus width: give --bandwidth\n",
                    f.name);
            return 1;
        }
        g->bandwidth = f.mem_clock_max_mhz * 1e6 * 2.0 * f.mem_bus_width / 8.0;
        snprintf(g->bandwidth_source, sizeof g->bandwidth_source,
                 "theoretical: max memory clock %d MHz x %d-bit bus x 2 (not in lpx's table)",
                 f.mem_clock_max_mhz, f.mem_bus_width);
    }
    return 0;
}

/* "1.192 GB", "96.6 MB": traffic in decimal units, readable for any model size. */
static void decimal_bytes(int64_t b, char *buf, size_t cap) {
    double v = (double)b;
    if (v >= 1e9)
        snprintf(buf, cap, "%.3f GB", v / 1e9);
    else if (v >= 1e6)
        snprintf(buf, cap, "%.1f MB", v / 1e6);
    else
        snprintf(buf, cap, "%.1f kB", v / 1e3);
}

static void print_text(const char *model, const lpx_model_info *mi, const lpx_plan_model *m,
                       const lpx_plan_gpu *g, const lpx_plan_params *p, const lpx_plan *r) {
    printf("lpx plan: %s\n", model);
    printf("  model        %s (%s), %lld parameters, %d layers, %d KV heads x %d\n", mi->arch,
           mi->format, (long long)mi->n_params, mi->n_layers, mi->n_kv_heads, mi->head_dim);
    printf(g->host ? "  GPU          %s: %.1f GiB, %.1f GB/s\n"
                   : "  GPU          %s: %.1f GiB, "
                     "%.2f TB/s\n",
           g->name, g->mem_bytes / GIB, g->bandwidth / (g->host ? 1e9 : 1e12));
    printf("               bandwidth: %s\n", g->bandwidth_source);
    char held[32], read[32], file[32];
    decimal_bytes(r->weight_bytes, held, sizeof held);
    decimal_bytes(r->decode_bytes_per_step, read, sizeof read);
    decimal_bytes(m->weight_bytes, file, sizeof file);
    const bool copy = r->weights_bf16 && r->weight_bytes != m->weight_bytes;
    printf("  weights      %s held, %s read per decode step%s%s%s\n", held, read,
           copy ? " (the CUDA backend's bf16 copy; the file's blocks: " : "", copy ? file : "",
           copy ? ")" : "");
    for (int d = 0; d < 2; d++)
        if (r->kv[d].bytes_per_token)
            printf(
                "  KV %-4s      %lld bytes per token, %.3f GiB per sequence of %lld tokens: %lld "
                "fit (%lld KV tokens)%s\n",
                lpx_kv_dtype_name(r->kv[d].dtype), (long long)r->kv[d].bytes_per_token,
                r->kv[d].bytes_per_seq / GIB, (long long)p->max_model_len,
                (long long)r->kv[d].max_seqs, (long long)r->kv[d].max_tokens,
                r->kv[d].dtype == r->kv_dtype ? "  <- planned" : "");
    printf("  floor        batch 1, empty context: %.3f ms/token = %.0f tok/s\n", r->floor_ms,
           r->floor_tok_s);
    printf("  memory       %.0f%% of %.1f GiB = %.1f GiB; minus weights %.2f GiB and reserve %.2f "
           "GiB leaves %.1f GiB for KV\n",
           p->mem_utilization * 100, g->mem_bytes / GIB, r->usable_bytes / GIB,
           r->weight_bytes / GIB, p->reserve_bytes / GIB, r->kv_budget / GIB);
    if (r->fits)
        printf("  fits         yes: %lld sequences of %lld tokens (%lld KV tokens in all)\n",
               (long long)r->max_seqs, (long long)p->max_model_len, (long long)r->max_tokens);
    else
        printf("  fits         NO: not even one sequence of %lld tokens (%lld KV tokens fit); "
               "lower --max-model-len%s or use a GPU with more memory\n",
               (long long)p->max_model_len, (long long)r->max_tokens,
               r->kv_dtype == LPX_KV_FP8 ? "" : ", use an fp8 KV cache (--kv-cache-dtype fp8)");
    printf("\n  decode floor at %lld tokens of context per sequence:\n", (long long)p->context);
    printf("  %8s %10s %10s %12s %14s  %s\n", "batch", "GB/step", "ms/step", "tok/s", "tok/s/seq",
           "fits");
    for (int i = 0; i < r->n_rows; i++) {
        const lpx_plan_row *w = &r->rows[i];
        printf("  %8lld %10.3f %10.3f %12.0f %14.1f  %s\n", (long long)w->batch,
               w->bytes_per_step / GB, w->ms_per_step, w->tok_s, w->tok_s / (double)w->batch,
               w->fits ? "yes" : "no");
    }
}

static int print_json(const char *model, const lpx_plan_model *m, const lpx_plan_gpu *g,
                      const lpx_plan_params *p, const lpx_plan *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddNumberToObject(o, "weight_bytes", (double)r->weight_bytes);
    cJSON_AddNumberToObject(o, "decode_bytes_per_step", (double)r->decode_bytes_per_step);
    cJSON_AddStringToObject(o, "weights_as", r->weights_bf16 ? "bf16" : "stored");
    cJSON_AddNumberToObject(o, "file_weight_bytes", (double)m->weight_bytes);
    cJSON_AddStringToObject(o, "kv_cache_dtype", lpx_kv_dtype_name(r->kv_dtype));
    cJSON_AddNumberToObject(o, "kv_bytes_per_token", (double)r->kv_bytes_per_token);
    cJSON *kd = cJSON_AddObjectToObject(o, "kv_dtypes");
    for (int d = 0; d < 2; d++) {
        cJSON *k = cJSON_AddObjectToObject(kd, lpx_kv_dtype_name(r->kv[d].dtype));
        cJSON_AddNumberToObject(k, "kv_bytes_per_token", (double)r->kv[d].bytes_per_token);
        cJSON_AddNumberToObject(k, "kv_bytes_per_seq", (double)r->kv[d].bytes_per_seq);
        cJSON_AddNumberToObject(k, "max_seqs", (double)r->kv[d].max_seqs);
        cJSON_AddNumberToObject(k, "max_kv_tokens", (double)r->kv[d].max_tokens);
    }
    cJSON *gj = cJSON_AddObjectToObject(o, "gpu");
    cJSON_AddStringToObject(gj, "name", g->name);
    cJSON_AddNumberToObject(gj, "memory_bytes", (double)g->mem_bytes);
    cJSON_AddNumberToObject(gj, "bandwidth_bytes_per_s", g->bandwidth);
    cJSON_AddStringToObject(gj, "bandwidth_source", g->bandwidth_source);
    cJSON_AddNumberToObject(o, "max_model_len", (double)p->max_model_len);
    cJSON_AddNumberToObject(o, "context", (double)p->context);
    cJSON_AddNumberToObject(o, "gpu_memory_utilization", p->mem_utilization);
    cJSON_AddNumberToObject(o, "reserve_bytes", (double)p->reserve_bytes);
    cJSON_AddNumberToObject(o, "floor_ms_per_token", r->floor_ms);
    cJSON_AddNumberToObject(o, "floor_tok_s", r->floor_tok_s);
    cJSON_AddNumberToObject(o, "usable_bytes", (double)r->usable_bytes);
    cJSON_AddNumberToObject(o, "kv_bytes_per_seq", (double)r->kv_bytes_per_seq);
    cJSON_AddNumberToObject(o, "kv_budget_bytes", (double)r->kv_budget);
    cJSON_AddNumberToObject(o, "max_seqs", (double)r->max_seqs);
    cJSON_AddNumberToObject(o, "max_kv_tokens", (double)r->max_tokens);
    cJSON_AddBoolToObject(o, "fits", r->fits);
    cJSON *rows = cJSON_AddArrayToObject(o, "batches");
    for (int i = 0; i < r->n_rows; i++) {
        cJSON *w = cJSON_CreateObject();
        cJSON_AddNumberToObject(w, "batch", (double)r->rows[i].batch);
        cJSON_AddNumberToObject(w, "bytes_per_step", (double)r->rows[i].bytes_per_step);
        cJSON_AddNumberToObject(w, "ms_per_step", r->rows[i].ms_per_step);
        cJSON_AddNumberToObject(w, "tok_s", r->rows[i].tok_s);
        cJSON_AddBoolToObject(w, "fits", r->rows[i].fits);
        cJSON_AddItemToArray(rows, w);
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s) {
        fprintf(stderr, "lpx plan: out of memory\n");
        return 1;
    }
    printf("%s\n", s);
    free(s);
    return 0;
}

int cmd_plan(int argc, char **argv) {
    const char *model = NULL, *gpu = "auto";
    double bw_tbs = 0, mem_gb = 0;
    bool json = false;
    lpx_plan_params p;
    lpx_plan_params_default(&p);
    p.context = -1; /* not given: half of max-model-len */
    const char *batches = NULL;
    lpx_opts a = {.cmd = "plan", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (lpx_opts_flag(&a, "--json"))
            json = true;
        else if (!lpx_opts_str(&a, LPX_OPT_MODEL, &model) && !lpx_opts_str(&a, "--gpu", &gpu) &&
                 !lpx_opts_str(&a, "--batch", &batches) &&
                 !lpx_opts_num(&a, "--bandwidth", 1e-3, 1e3, &bw_tbs) &&
                 !lpx_opts_num(&a, "--memory", 1e-3, 1e6, &mem_gb) &&
                 !lpx_opts_int(&a, LPX_OPT_CTX, 1, INT32_MAX, &p.max_model_len) &&
                 !lpx_opts_int(&a, "--context", 0, INT32_MAX, &p.context) &&
                 !lpx_opts_kv_dtype(&a, &p.kv_dtype) &&
                 !lpx_opts_num(&a, "--gpu-memory-utilization", 0.01, 1, &p.mem_utilization))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    if (batches && lpx_plan_parse_batches(batches, &p) != LPX_OK) {
        fprintf(stderr, "lpx plan: %s\n", lpx_last_error());
        return 2;
    }
    if (!strcmp(gpu, "list")) {
        list_gpus();
        return 0;
    }
    if (!model) {
        fprintf(stderr, "lpx plan: -m MODEL is required (see --help)\n");
        return 2;
    }
    lpx_plan_gpu g = {0};
    if (!strcmp(gpu, "auto")) {
        if (!(bw_tbs > 0 && mem_gb > 0) && detect_gpu(&g)) return 1;
    } else {
        const lpx_gpu_spec *s = lpx_gpu_spec_find(gpu);
        if (!s) {
            fprintf(stderr, "lpx plan: unknown GPU '%s' (lpx plan --gpu list shows the table)\n",
                    gpu);
            return 2;
        }
        from_spec(s, &g);
    }
    if (bw_tbs > 0) {
        g.bandwidth = bw_tbs * 1e12;
        snprintf(g.bandwidth_source, sizeof g.bandwidth_source, "given with --bandwidth");
    }
    if (mem_gb > 0) g.mem_bytes = (int64_t)(mem_gb * GIB);
    if (g.host) p.reserve_bytes = 0; /* no CUDA context or workspaces */
    if (!g.name[0]) snprintf(g.name, sizeof g.name, "given GPU");
    lpx_plan_model m;
    lpx_model_info mi;
    if (lpx_plan_model_load(model, &m, &mi) != LPX_OK) {
        fprintf(stderr, "lpx plan: %s\n", lpx_last_error());
        return 1;
    }
    if (!p.max_model_len) p.max_model_len = m.max_position_embeddings;
    if (p.context < 0) p.context = p.max_model_len / 2;
    lpx_plan r;
    if (lpx_plan_compute(&m, &g, &p, &r) != LPX_OK) {
        fprintf(stderr, "lpx plan: %s\n", lpx_last_error());
        return 1;
    }
    if (json) return print_json(model, &m, &g, &p, &r);
    print_text(model, &mi, &m, &g, &p, &r);
    return 0;
}
