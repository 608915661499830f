/* The CUDA backend's tuning resolution (src/backend/cuda/tuning.c), without a GPU:
 * each instance keeps its own tuning, the defaults are the measured ones for the
 * shapes of scripts/make-shape-model.py and SmolLM2-135M, and the developer strings
 * parse (docs/dev.md) with errors that name the bad key.
 *
 * The device facts are an H200's (docs/lab/notebook.md): 132 SMs, 64 K registers an SM,
 * MM_SOLO's 115,457 bytes (row 34); the registers are ptxas's for sm_90 at this
 * commit (-Xptxas -v): matvec_tma_kernel<1> 72, matvec_tma_small_kernel 56,
 * qkv_attn_kernel<128, 2> (Qwen3-0.6B) 72, <64, 4> (SmolLM2, groups of 3) 75, <64, 8>
 * (Qwen2.5-0.5B) 154. Llama-3.2-1B's fused plan finds no cluster that fits (row 49),
 * so its qa_cluster is 0. */
#include "backend/cuda/tuning.h"
#include "test.h"

#include <string.h>

static const cuda_shape qwen3_06b = {16, 8, 128, 1024, 3072};
static const cuda_shape qwen25_05b = {14, 2, 64, 896, 4864};
static const cuda_shape llama32_1b = {32, 8, 64, 2048, 8192};
static const cuda_shape smollm2_135m = {9, 3, 64, 576, 1536};

static cuda_facts h200(int qa_cluster, int qa_regs) {
    cuda_facts f = {.n_sms = 132,
                    .regs_per_sm = 65536,
                    .qa_cluster = qa_cluster,
                    .qa_regs = qa_regs,
                    .qa_threads = 256,
                    .mv_regs = 72,
                    .mv_small_regs = 56,
                    .mv_threads = 384,
                    .mv_solo_smem = 115457};
    return f;
}

/* Resolves shape sh on facts f with tune string s (must parse). */
static cuda_tuning resolve(const cuda_shape *sh, cuda_facts f, const char *s) {
    cuda_tune_overrides o;
    cuda_tuning t;
    CHECK(lpx_cuda_tune_parse(s, &o) == LPX_OK);
    lpx_cuda_tuning_resolve(sh, &f, &o, &t);
    return t;
}

static void check_defaults(const cuda_tuning *t) {
    CHECK(t->early == (TK_O | TK_D)); /* rows 26, 32, 43 */
    CHECK(t->late == 0);              /* rows 27, 43 */
    CHECK(t->solo == TK_G);           /* row 34 */
    CHECK(t->pace == 2);              /* row 33 */
    CHECK(t->mv_solo_smem == 115457);
    CHECK(t->graphs && t->pdl);
    CHECK(t->skip == 0);
    CHECK(t->qa_ctx == CT_QA_CTX_DEFAULT && t->attn_keys == CT_ATTN_KEYS_DEFAULT);
}

static void test_defaults(void) {
    const cuda_tuning q3 = resolve(&qwen3_06b, h200(16, 72), NULL);
    const cuda_tuning q25 = resolve(&qwen25_05b, h200(16, 154), "");
    const cuda_tuning ll = resolve(&llama32_1b, h200(0, 0), NULL);
    const cuda_tuning sm = resolve(&smollm2_135m, h200(16, 75), NULL);
    check_defaults(&q3);
    check_defaults(&q25);
    check_defaults(&ll);
    check_defaults(&sm);
    /* the fused kernel where its plan fits */
    CHECK(q3.qa && q25.qa && !ll.qa && sm.qa);
    /* the 56-register projections where a fused block (18.4 K registers for Qwen3,
     * 20.5 K for SmolLM2) and two of them fit an SM only with the cap; not beside
     * Qwen2.5's 40 K fused block, nor without the fused kernel (row 49) */
    CHECK(q3.mv_small);
    CHECK(!q25.mv_small);
    CHECK(!ll.mv_small);
    CHECK(sm.mv_small);
}

static void test_isolation(void) {
    cuda_tuning a = resolve(&qwen3_06b, h200(16, 72), NULL);
    const cuda_tuning a0 = a;
    cuda_tuning b = resolve(&qwen25_05b, h200(16, 154), "pace=3,solo=-");
    CHECK(!memcmp(&a, &a0, sizeof a)); /* resolving b left a alone */
    CHECK(a.mv_small != b.mv_small);
    CHECK(a.pace == 2 && b.pace == 3 && a.solo == TK_G && b.solo == 0);
    /* the same shape on another device (fewer registers an SM): its own choice */
    cuda_facts small_sm = h200(16, 72);
    small_sm.regs_per_sm = 32768;
    const cuda_tuning c = resolve(&qwen3_06b, small_sm, NULL);
    CHECK(!c.mv_small && a.mv_small);
    CHECK(!memcmp(&a, &a0, sizeof a));
}

static void test_keys(void) {
    const cuda_facts f = h200(16, 72);
    CHECK(!resolve(&qwen3_06b, f, "qa=0").qa);
    CHECK(!resolve(&qwen3_06b, f, "qa=0").mv_small); /* no fused kernel: no room to gain */
    CHECK(resolve(&qwen3_06b, f, "qa=1").qa);
    CHECK(!resolve(&qwen3_06b, f, "mv_small=0").mv_small);
    CHECK(resolve(&qwen25_05b, h200(16, 154), "mv_small=1").mv_small);
    CHECK(resolve(&qwen3_06b, f, "qa=0,mv_small=1").mv_small);
    CHECK(resolve(&qwen3_06b, f, "early=of").early == (TK_O | TK_F));
    CHECK(resolve(&qwen3_06b, f, "early=ofgd").early == (TK_O | TK_F | TK_G | TK_D));
    CHECK(resolve(&qwen3_06b, f, "early=-").early == 0);
    const cuda_tuning late = resolve(&qwen3_06b, f, "late=o");
    CHECK(late.late == TK_O && late.early == TK_D); /* late wins over early */
    CHECK(resolve(&qwen3_06b, f, "late=-").late == 0);
    CHECK(resolve(&qwen3_06b, f, "pace=0").pace == 0);
    CHECK(resolve(&qwen3_06b, f, "pace=15").pace == 15);
    CHECK(resolve(&qwen3_06b, f, "solo=ogd").solo == (TK_O | TK_G | TK_D));
    CHECK(resolve(&qwen3_06b, f, "solo=-").solo == 0);
    CHECK(!resolve(&qwen3_06b, f, "graphs=0").graphs);
    CHECK(!resolve(&qwen3_06b, f, "pdl=0").pdl);
    CHECK(resolve(&qwen3_06b, f, "skip=attn+o").skip == (SK_ATTN | SK_O));
    CHECK(resolve(&qwen3_06b, f, "qa_ctx=0").qa_ctx == 0);
    CHECK(resolve(&qwen3_06b, f, "qa_ctx=8192").qa_ctx == 8192);
    CHECK(resolve(&qwen3_06b, f, "attn_keys=512").attn_keys == 512);
    CHECK(resolve(&qwen3_06b, f, "skip=embed+qkv+rope+attn+o+gu+down+head+sample").skip == 511);
    const cuda_tuning all = resolve(
        &qwen3_06b, f, "qa=0,mv_small=1,early=od,late=-,pace=2,solo=g,graphs=0,pdl=0,skip=attn+o");
    CHECK(!all.qa && all.mv_small && all.early == (TK_O | TK_D) && all.late == 0);
    CHECK(all.pace == 2 && all.solo == TK_G && !all.graphs && !all.pdl);
    CHECK(all.skip == (SK_ATTN | SK_O));
}

/* s fails to parse as a tune (or, with trace, a trace) string, naming want. */
static void check_bad(const char *s, bool trace, const char *want) {
    cuda_tune_overrides o;
    cuda_trace_opts t;
    const lpx_status st = trace ? lpx_cuda_trace_parse(s, &t) : lpx_cuda_tune_parse(s, &o);
    CHECK(st == LPX_ERR_INVALID_ARG);
    CHECK(strstr(lpx_last_error(), want) != NULL);
    if (!strstr(lpx_last_error(), want))
        fprintf(stderr, "'%s': error '%s' does not name '%s'\n", s, lpx_last_error(), want);
}

/* wq: the weights' packing on the device (cuda_backend.cu reads it at create). */
static void test_wq(void) {
    cuda_tune_overrides o;
    CHECK(lpx_cuda_tune_parse("", &o) == LPX_OK && o.wq == -1);
    CHECK(lpx_cuda_tune_parse("wq=1", &o) == LPX_OK && o.wq == 1);
    CHECK(lpx_cuda_tune_parse("qa=0,wq=0", &o) == LPX_OK && o.wq == 0 && o.qa == 0);
}

static void test_errors(void) {
    check_bad("bogus=1", false, "bogus");
    check_bad("pace=1,bogus", false, "bogus");
    check_bad("qa=2", false, "qa=2");
    check_bad("qa", false, "qa");
    check_bad("mv_small=yes", false, "mv_small=yes");
    check_bad("early=oz", false, "early=oz");
    check_bad("late=", false, "late");
    check_bad("solo=x", false, "solo=x");
    check_bad("pace=x", false, "pace=x");
    check_bad("pace=16", false, "pace=16");
    check_bad("pace=-1", false, "pace=-1");
    check_bad("graphs=off", false, "graphs=off");
    check_bad("pdl=", false, "pdl");
    check_bad("skip=attn+foo", false, "foo");
    check_bad("skip=", false, "skip");
    check_bad("qa_ctx=-1", false, "qa_ctx=-1");
    check_bad("wq=2", false, "wq=2");
    check_bad("attn_keys=16", false, "attn_keys=16");
    check_bad("LPX_CUDA_QA=0", false, "LPX_CUDA_QA");
    check_bad("nope", true, "nope");
    check_bad("timing=1", true, "timing=1");
    check_bad("blk=x", true, "blk=x");
    check_bad("blk=", true, "blk");
    check_bad("blk_file=", true, "blk_file");
}

static void test_trace(void) {
    cuda_trace_opts t;
    CHECK(lpx_cuda_trace_parse(NULL, &t) == LPX_OK);
    CHECK(!t.timing && !t.attn && !t.mv && t.blk_layer == -1 && !t.blk_file[0]);
    CHECK(lpx_cuda_trace_parse("", &t) == LPX_OK && t.blk_layer == -1);
    CHECK(lpx_cuda_trace_parse("timing", &t) == LPX_OK && t.timing && !t.attn && !t.mv);
    CHECK(lpx_cuda_trace_parse("timing,attn,mv,blk=14,blk_file=/tmp/b.csv", &t) == LPX_OK);
    CHECK(t.timing && t.attn && t.mv && t.blk_layer == 14 && !strcmp(t.blk_file, "/tmp/b.csv"));
    CHECK(lpx_cuda_trace_parse("blk=0", &t) == LPX_OK && t.blk_layer == 0 && !t.timing);
}

static void test_shape_fits(void) {
    CHECK(lpx_cuda_qa_shape_fits(&qwen3_06b, 2048));
    CHECK(lpx_cuda_qa_shape_fits(&qwen25_05b, 2048));
    CHECK(lpx_cuda_qa_shape_fits(&llama32_1b, 2048));
    CHECK(lpx_cuda_qa_shape_fits(&smollm2_135m, 2048));
    CHECK(!lpx_cuda_qa_shape_fits(&llama32_1b, 1024)); /* x longer than the block holds */
    const cuda_shape hd256 = {8, 4, 256, 2048, 8192}, g16 = {32, 2, 64, 2048, 8192};
    CHECK(!lpx_cuda_qa_shape_fits(&hd256, 2048));
    CHECK(!lpx_cuda_qa_shape_fits(&g16, 2048));
    /* no fused variant: neither the kernel nor the small projections, whatever the plan */
    const cuda_tuning t = resolve(&hd256, h200(16, 72), NULL);
    CHECK(!t.qa && !t.mv_small);
}

int main(void) {
    test_defaults();
    test_isolation();
    test_keys();
    test_wq();
    test_errors();
    test_trace();
    test_shape_fits();
    TEST_DONE();
}
