#include "doctor/plan.h"

#include "base/checked.h"
#include "base/error.h"
#include "base/host_bw.h"
#include "doctor/doctor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MIB (1024LL * 1024LL)
#define TBS 1e12

/* Memory as NVML reports it; bandwidth from the vendors' datasheets. Rows whose match
 * string is contained in a later row's come first (GH200 before H200, L40S before L4). */
static const lpx_gpu_spec specs[] = {
    {"b200", "NVIDIA B200 180GB", "B200", 183359 * MIB, 8.0 * TBS, 0},
    {"gh200", "NVIDIA GH200 96GB", "GH200", 97871 * MIB, 4.0 * TBS, 0},
    {"h200", "NVIDIA H200 SXM 141GB", "H200", 143771 * MIB, 4.8 * TBS, 4.08 * TBS},
    {"h100-nvl", "NVIDIA H100 NVL 94GB", "H100 NVL", 95830 * MIB, 3.9 * TBS, 0},
    {"h100-pcie", "NVIDIA H100 PCIe 80GB", "H100 PCIe", 81559 * MIB, 2.0 * TBS, 0},
    {"h100", "NVIDIA H100 SXM 80GB", "H100", 81559 * MIB, 3.35 * TBS, 0},
    {"a100-80", "NVIDIA A100 SXM 80GB", "A100-SXM4-80GB", 81920 * MIB, 2.039 * TBS, 0},
    {"a100-80-pcie", "NVIDIA A100 PCIe 80GB", "A100 80GB PCIe", 81920 * MIB, 1.935 * TBS, 0},
    {"a100", "NVIDIA A100 40GB", "A100", 40960 * MIB, 1.555 * TBS, 0},
    {"l40s", "NVIDIA L40S 48GB", "L40S", 46068 * MIB, 0.864 * TBS, 0},
    {"l40", "NVIDIA L40 48GB", "L40", 46068 * MIB, 0.864 * TBS, 0},
    {"l4", "NVIDIA L4 24GB", "L4", 23034 * MIB, 0.300 * TBS, 0},
    {"a10g", "NVIDIA A10G 24GB", "A10G", 23028 * MIB, 0.600 * TBS, 0},
    {"a10", "NVIDIA A10 24GB", "A10", 23028 * MIB, 0.600 * TBS, 0},
    {"t4", "NVIDIA T4 16GB", "T4", 15360 * MIB, 0.320 * TBS, 0},
    {"rtx6000ada", "NVIDIA RTX 6000 Ada 48GB", "RTX 6000 Ada", 49140 * MIB, 0.960 * TBS, 0},
    {"rtx5090", "NVIDIA GeForce RTX 5090 32GB", "RTX 5090", 32607 * MIB, 1.792 * TBS, 0},
    {"rtx4090", "NVIDIA GeForce RTX 4090 24GB", "RTX 4090", 24564 * MIB, 1.008 * TBS, 0},
    {"rtx3090", "NVIDIA GeForce RTX 3090 24GB", "RTX 3090", 24576 * MIB, 0.936 * TBS, 0},
    {"rtx4060-laptop", "NVIDIA GeForce RTX 4060 Laptop 8GB", "RTX 4060 Laptop", 8188 * MIB,
     0.256 * TBS, 0},
};

const lpx_gpu_spec *lpx_gpu_specs(int *n) {
    *n = (int)(sizeof specs / sizeof specs[0]);
    return specs;
}

const lpx_gpu_spec *lpx_gpu_spec_find(const char *key) {
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        if (!strcasecmp(specs[i].key, key)) return &specs[i];
    return NULL;
}

static bool contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (!strncasecmp(hay, needle, n)) return true;
    return false;
}

const lpx_gpu_spec *lpx_gpu_spec_match(const char *nvml_name) {
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        if (contains_nocase(nvml_name, specs[i].match)) return &specs[i];
    return NULL;
}

void lpx_plan_params_default(lpx_plan_params *p) {
    memset(p, 0, sizeof *p);
    p->mem_utilization = 0.9;
    p->reserve_bytes = 1024 * MIB;
    static const int64_t b[] = {1, 16, 64, 256};
    p->n_batches = 4;
    memcpy(p->batches, b, sizeof b);
}

lpx_status lpx_plan_parse_batches(const char *s, lpx_plan_params *p) {
    int n = 0;
    const char *q = s;
    while (*q) {
        char *end;
        long long v = strtoll(q, &end, 10);
        if (end == q || v < 1 || v > 1000000 || (*end && *end != ','))
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "--batch: expected positive integers separated by commas, found "
                              "'%s'",
                              s);
        if (n == LPX_PLAN_MAX_BATCHES)
            return lpx_errorf(LPX_ERR_INVALID_ARG, "--batch: at most %d sizes",
                              LPX_PLAN_MAX_BATCHES);
        p->batches[n++] = v;
        q = *end ? end + 1 : end;
    }
    if (!n) return lpx_errorf(LPX_ERR_INVALID_ARG, "--batch: empty list");
    p->n_batches = n;
    return LPX_OK;
}

lpx_status lpx_plan_compute(const lpx_plan_model *m, const lpx_plan_gpu *g,
                            const lpx_plan_params *p, lpx_plan *out) {
    memset(out, 0, sizeof *out);
    if (m->decode_bytes_per_step <= 0 || m->kv_bytes_per_token <= 0 || m->weight_bytes <= 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "model sizes must be positive (weights %lld, per step %lld, KV "
                          "per token %lld)",
                          (long long)m->weight_bytes, (long long)m->decode_bytes_per_step,
                          (long long)m->kv_bytes_per_token);
    if (!(g->bandwidth > 0) || g->mem_bytes <= 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "GPU %s: bandwidth and memory must be > 0", g->name);
    if (p->max_model_len < 1 || p->context < 0 || !(p->mem_utilization > 0) ||
        p->mem_utilization > 1 || p->reserve_bytes < 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "need max_model_len >= 1, context >= 0, 0 < utilisation <= 1");
    if (p->kv_dtype != LPX_KV_AUTO && p->kv_dtype != LPX_KV_BF16 && p->kv_dtype != LPX_KV_FP8)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "KV dtype %s: expected bf16 or fp8",
                          lpx_kv_dtype_name(p->kv_dtype));
    if (g->host && p->kv_dtype == LPX_KV_BF16)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "--kv-cache-dtype bf16: the CPU backend's KV cache is f32 (auto) or fp8");
    const bool fp8 = p->kv_dtype == LPX_KV_FP8;
    if (fp8 && m->kv_bytes_per_token_fp8 <= 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "the model's fp8 KV bytes are not known");
    const lpx_kv_dtype wide = g->host ? LPX_KV_F32 : LPX_KV_BF16;
    const int64_t wide_bpt = g->host ? 2 * m->kv_bytes_per_token : m->kv_bytes_per_token;
    out->kv_dtype = fp8 ? LPX_KV_FP8 : wide;
    out->kv_bytes_per_token = fp8 ? m->kv_bytes_per_token_fp8 : wide_bpt;
    const int64_t bpt = out->kv_bytes_per_token;
    out->usable_bytes = (int64_t)((double)g->mem_bytes * p->mem_utilization);
    /* the CUDA backend's rule: bf16 where it fits beside the rest (here: the reserve and
     * one sequence of max_model_len), else the file's blocks */
    int64_t seq = 0;
    out->weight_bytes = m->weight_bytes;
    out->decode_bytes_per_step = m->decode_bytes_per_step;
    if (!g->host && m->weight_bytes_bf16 > 0 && lpx_mul_i64(p->max_model_len, bpt, &seq) &&
        out->usable_bytes - m->weight_bytes_bf16 - p->reserve_bytes >= seq) {
        out->weights_bf16 = true;
        out->weight_bytes = m->weight_bytes_bf16;
        out->decode_bytes_per_step = m->decode_bytes_bf16;
    }
    out->floor_ms = (double)out->decode_bytes_per_step / g->bandwidth * 1e3;
    out->floor_tok_s = 1e3 / out->floor_ms;
    out->kv_budget = out->usable_bytes - out->weight_bytes - p->reserve_bytes;
    const int64_t per_dtype[2] = {wide_bpt, m->kv_bytes_per_token_fp8};
    for (int d = 0; d < 2; d++) {
        lpx_plan_kv *k = &out->kv[d];
        k->dtype = d ? LPX_KV_FP8 : wide;
        k->bytes_per_token = per_dtype[d] > 0 ? per_dtype[d] : 0;
        if (!k->bytes_per_token) continue;
        if (!lpx_mul_i64(p->max_model_len, k->bytes_per_token, &k->bytes_per_seq))
            return lpx_errorf(LPX_ERR_INVALID_ARG, "max_model_len %lld x KV bytes overflows",
                              (long long)p->max_model_len);
        k->max_tokens = out->kv_budget > 0 ? out->kv_budget / k->bytes_per_token : 0;
        k->max_seqs = out->kv_budget > 0 ? out->kv_budget / k->bytes_per_seq : 0;
    }
    const lpx_plan_kv *at = &out->kv[fp8];
    out->kv_bytes_per_seq = at->bytes_per_seq;
    out->max_tokens = at->max_tokens;
    out->max_seqs = at->max_seqs;
    out->fits = out->max_seqs >= 1;
    for (int i = 0; i < p->n_batches; i++) {
        lpx_plan_row *r = &out->rows[out->n_rows++];
        r->batch = p->batches[i];
        int64_t toks, kv;
        if (!lpx_mul_i64(r->batch, p->context, &toks) || !lpx_mul_i64(toks, bpt, &kv) ||
            !lpx_add_i64(kv, out->decode_bytes_per_step, &r->bytes_per_step))
            return lpx_errorf(LPX_ERR_INVALID_ARG, "batch %lld x context %lld overflows",
                              (long long)r->batch, (long long)p->context);
        r->ms_per_step = (double)r->bytes_per_step / g->bandwidth * 1e3;
        r->tok_s = (double)r->batch / r->ms_per_step * 1e3;
        r->fits = out->kv_budget >= 0 && toks <= out->max_tokens;
    }
    return LPX_OK;
}

void lpx_plan_host(lpx_plan_gpu *g) {
    memset(g, 0, sizeof *g);
    lpx_host_facts h;
    lpx_host_facts_read(&h);
    snprintf(g->name, sizeof g->name, "no GPU: the CPU backend (%d cores%s%s)", h.cpu_cores,
             h.cpu_features[0] ? ", " : "", h.cpu_features);
    g->host = true;
    g->mem_bytes = h.ram_available;
    g->bandwidth = lpx_host_read_bandwidth();
    snprintf(g->bandwidth_source, sizeof g->bandwidth_source,
             "host read bandwidth lpx measured now (256 MiB, best of 3); memory: the RAM "
             "available now");
}
