/* lpx plan's arithmetic against figures computed by hand (PERF.md's Qwen3-0.6B anchor).
 *
 * Qwen3-0.6B: d_model 1024, 28 layers, 16 query heads and 8 KV heads of 128, d_ff 3072,
 * vocab 151936, tied embeddings, bf16. Per layer: wq 2048x1024 + wk 1024x1024 +
 * wv 1024x1024 + wo 1024x2048 + gate/up/down 3x3072x1024 + norms (2x1024 + 2x128)
 * = 15,730,944 params; x28 = 440,466,432; + final norm 1024 + lm_head (the embedding,
 * tied) 151936x1024 = 155,582,464 -> 596,049,920 params read per step = 1,192,099,840 B.
 * KV per token: 28 layers x 2 (K,V) x 8 heads x 128 x 2 B = 114,688 B. */
#include "doctor/plan.h"
#include "test.h"

#include <math.h>
#include <string.h>

static bool near(double a, double b, double rel) {
    return fabs(a - b) <= rel * fabs(b);
}

static const lpx_plan_model qwen3_06b = {
    .weight_bytes = 1192099840,
    .decode_bytes_per_step = 1192099840,
    .kv_bytes_per_token = 114688,
    .max_position_embeddings = 40960,
};

static void test_floor_and_memory(void) {
    /* H200 as NVML reports it (143771 MiB), read bandwidth measured 4.08 TB/s (PERF.md). */
    lpx_plan_gpu g = {.name = "H200", .mem_bytes = 143771LL * 1024 * 1024, .bandwidth = 4.08e12};
    lpx_plan_params p;
    lpx_plan_params_default(&p);
    p.max_model_len = 40960;
    p.context = 1024;
    p.batches[0] = 1, p.batches[1] = 64, p.batches[2] = 256;
    p.n_batches = 3;
    lpx_plan r;
    CHECK(lpx_plan_compute(&qwen3_06b, &g, &p, &r) == LPX_OK);
    /* 1,192,099,840 B / 4.08e12 B/s = 0.29218 ms = 3,422.5 tok/s (PERF.md: 0.292 ms, 3,420) */
    CHECK(near(r.floor_ms, 0.2921813, 1e-6));
    CHECK(near(r.floor_tok_s, 3422.532, 1e-6));
    /* batch 64 at 1024 tokens: 1,192,099,840 + 64*1024*114,688 = 8,708,292,608 B */
    CHECK(r.n_rows == 3);
    CHECK(r.rows[1].batch == 64 && r.rows[1].bytes_per_step == 8708292608LL);
    CHECK(near(r.rows[1].ms_per_step, 2.1343854, 1e-6));
    CHECK(near(r.rows[1].tok_s, 29985.212, 1e-6));
    /* memory: 0.9 x 150,754,820,096 = 135,679,338,086; - weights - 1 GiB reserve
     * = 133,413,496,422 B of KV = 1,163,273 tokens = 28 sequences of 40960 tokens */
    CHECK(r.usable_bytes == 135679338086LL);
    CHECK(r.kv_budget == 133413496422LL);
    CHECK(r.kv_bytes_per_seq == 40960LL * 114688);
    CHECK(r.max_seqs == 28);
    CHECK(r.max_tokens == 1163273);
    CHECK(r.fits);
    CHECK(r.rows[2].fits); /* 256 x 1024 = 262,144 tokens <= 1,163,273 */
    /* at 20480 tokens, 256 sequences need 5,242,880 KV tokens: no */
    p.context = 20480;
    CHECK(lpx_plan_compute(&qwen3_06b, &g, &p, &r) == LPX_OK);
    CHECK(!r.rows[2].fits && r.rows[0].fits);
    CHECK(r.rows[2].bytes_per_step == 1192099840LL + 256LL * 20480 * 114688);
}

static void test_does_not_fit(void) {
    /* 1.19 GB of weights + 1 GiB reserve on a 2 GB card at 0.9: 1.8 GB usable, no room. */
    lpx_plan_gpu g = {.name = "small", .mem_bytes = 2000000000LL, .bandwidth = 1e11};
    lpx_plan_params p;
    lpx_plan_params_default(&p);
    p.max_model_len = 4096;
    p.context = 0;
    lpx_plan r;
    CHECK(lpx_plan_compute(&qwen3_06b, &g, &p, &r) == LPX_OK);
    CHECK(!r.fits && r.max_seqs == 0 && r.max_tokens == 0 && r.kv_budget < 0);
    CHECK(!r.rows[0].fits); /* even with no context the weights do not fit */
    CHECK(r.rows[0].bytes_per_step == qwen3_06b.decode_bytes_per_step); /* context 0 */
}

static void test_bad_input(void) {
    lpx_plan_gpu g = {.name = "x", .mem_bytes = 1LL << 34, .bandwidth = 1e12};
    lpx_plan_params p;
    lpx_plan_params_default(&p);
    p.max_model_len = 1024, p.context = 512;
    lpx_plan r;
    lpx_plan_model m = qwen3_06b;
    m.kv_bytes_per_token = 0;
    CHECK(lpx_plan_compute(&m, &g, &p, &r) == LPX_ERR_INVALID_ARG);
    g.bandwidth = 0;
    CHECK(lpx_plan_compute(&qwen3_06b, &g, &p, &r) == LPX_ERR_INVALID_ARG);
    g.bandwidth = 1e12;
    p.max_model_len = INT64_MAX / 1000; /* x 114,688 overflows */
    CHECK(lpx_plan_compute(&qwen3_06b, &g, &p, &r) == LPX_ERR_INVALID_ARG);
}

static void test_batches(void) {
    lpx_plan_params p;
    lpx_plan_params_default(&p);
    CHECK(p.n_batches == 4 && p.batches[0] == 1 && p.batches[3] == 256);
    CHECK(lpx_plan_parse_batches("1,8,32", &p) == LPX_OK);
    CHECK(p.n_batches == 3 && p.batches[0] == 1 && p.batches[1] == 8 && p.batches[2] == 32);
    CHECK(lpx_plan_parse_batches("0", &p) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_plan_parse_batches("1,,2", &p) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_plan_parse_batches("4x", &p) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_plan_parse_batches("", &p) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_plan_parse_batches("1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", &p) ==
          LPX_ERR_INVALID_ARG);
}

static const char *match_key(const char *nvml_name) {
    const lpx_gpu_spec *s = lpx_gpu_spec_match(nvml_name);
    return s ? s->key : "";
}

static void test_gpu_table(void) {
    /* names as NVML reports them */
    CHECK(!strcmp(match_key("NVIDIA H200"), "h200"));
    CHECK(!strcmp(match_key("NVIDIA GH200 480GB"), "gh200"));
    CHECK(!strcmp(match_key("NVIDIA H100 80GB HBM3"), "h100"));
    CHECK(!strcmp(match_key("NVIDIA H100 PCIe"), "h100-pcie"));
    CHECK(!strcmp(match_key("NVIDIA H100 NVL"), "h100-nvl"));
    CHECK(!strcmp(match_key("NVIDIA A100-SXM4-80GB"), "a100-80"));
    CHECK(!strcmp(match_key("NVIDIA A100 80GB PCIe"), "a100-80-pcie"));
    CHECK(!strcmp(match_key("NVIDIA A100-PCIE-40GB"), "a100"));
    CHECK(!strcmp(match_key("NVIDIA L40S"), "l40s"));
    CHECK(!strcmp(match_key("NVIDIA L4"), "l4"));
    CHECK(!strcmp(match_key("NVIDIA A10G"), "a10g"));
    CHECK(!strcmp(match_key("Tesla T4"), "t4"));
    CHECK(!strcmp(match_key("NVIDIA GeForce RTX 4090"), "rtx4090"));
    CHECK(!strcmp(match_key("NVIDIA GeForce RTX 4060 Laptop GPU"), "rtx4060-laptop"));
    CHECK(!strcmp(match_key("Quadro P1000"), ""));
    const lpx_gpu_spec *h = lpx_gpu_spec_find("H200");
    CHECK(h && h->measured == 4.08e12 && h->bandwidth == 4.8e12);
    CHECK(lpx_gpu_spec_find("rtx4090") && lpx_gpu_spec_find("rtx4090")->bandwidth == 1.008e12);
    CHECK(!lpx_gpu_spec_find("h2000"));
}

int main(void) {
    test_floor_and_memory();
    test_does_not_fit();
    test_bad_input();
    test_batches();
    test_gpu_table();
    TEST_DONE();
}
