/* The engine on the CPU backend with the real SmolLM2-135M-Instruct: eight
 * prompts together, and under a KV budget small enough to force preemption,
 * give the same greedy tokens as each prompt alone; a seed reproduces a
 * sampled run whatever the batch. (Greedy tokens against transformers':
 * tests/py/test_run.py.) Short prompts and outputs: the CPU backend decodes
 * SmolLM2 at a few tokens/s on CI's cores. The model comes from
 * scripts/fetch-model.sh (make test fetches it first). */
#include "base/readall.h"
#include "engine/engine.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_PROMPTS = 8, GEN = 6, MAX_IDS = 128 };

typedef struct out {
    int32_t ids[MAX_IDS];
    int n, finish;
} out;

static void on_event(const lpx_event *ev, void *user) {
    out *o = user;
    if (ev->token >= 0 && o->n < MAX_IDS) o->ids[o->n++] = ev->token;
    if (ev->finish) o->finish = ev->finish;
}

static int32_t prompts[N_PROMPTS][MAX_IDS];
static const char *device = "cpu"; /* LPX_TEST_DEVICE: the same checks on another backend */
static int n_prompt[N_PROMPTS];

/* Runs prompts first .. first+n-1 together; sp NULL = greedy. */
static void run(const lpx_model *m, int first, int n, int64_t kv_bytes,
                const lpx_sampling_params *sp, int max_tokens, out *res, int64_t *preemptions) {
    lpx_engine_opts o;
    lpx_engine_opts_init(&o);
    o.device = device;
    o.max_num_seqs = N_PROMPTS;
    o.max_model_len = 256;
    o.kv_cache_bytes = kv_bytes;
    o.block_size = kv_bytes ? 4 : 16; /* small pools: small blocks, many boundaries */
    o.max_num_batched_tokens = 64;    /* prefill in chunks, mixed with decodes */
    lpx_engine *e;
    lpx_status st = lpx_engine_create(m, &o, &e);
    CHECK(st == LPX_OK);
    if (st != LPX_OK) {
        fprintf(stderr, "engine: %s\n", lpx_last_error());
        return;
    }
    for (int k = 0; k < n; k++) {
        lpx_request r;
        lpx_request_init(&r);
        r.prompt_ids = prompts[first + k];
        r.n_prompt_ids = (size_t)n_prompt[first + k];
        r.max_tokens = max_tokens;
        r.ignore_eos = true;
        if (sp) r.sampling = *sp;
        memset(&res[k], 0, sizeof res[k]);
        uint64_t id;
        CHECK(lpx_engine_submit(e, &r, on_event, &res[k], &id) == LPX_OK);
    }
    bool busy = true;
    while (busy)
        if (lpx_engine_step(e, &busy) != LPX_OK) {
            CHECK(0);
            break;
        }
    lpx_engine_stats s;
    lpx_engine_get_stats(e, &s);
    CHECK(s.kv_blocks_used == 0 && s.n_finished == n);
    if (preemptions) *preemptions = s.n_preemptions;
    lpx_engine_destroy(e);
}

static bool same(const out *a, const out *b, int n) {
    return a->n >= n && b->n >= n && !memcmp(a->ids, b->ids, (size_t)n * sizeof *a->ids);
}

int main(void) {
    if (getenv("LPX_TEST_DEVICE")) device = getenv("LPX_TEST_DEVICE");
    lpx_model *m = test_open_model();
    if (!m) {
        CHECK(0);
        TEST_DONE();
    }
    char *json = NULL;
    size_t n_json;
    CHECK(lpx_read_file(LPX_SOURCE_DIR "/tests/fixtures/smollm2/greedy.json", 1 << 20, &json,
                        &n_json) == LPX_OK);
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    cJSON *ps = cJSON_GetObjectItem(root, "prompts");
    int n_fix = cJSON_GetArraySize(ps);
    CHECK(n_fix >= 4);
    /* Eight different prompts of 3..10 tokens: slices of the fixture's. */
    for (int k = 0; k < N_PROMPTS; k++) {
        cJSON *ids = cJSON_GetObjectItem(cJSON_GetArrayItem(ps, k % n_fix), "ids");
        int len = cJSON_GetArraySize(ids), from = k < n_fix ? 0 : len / 2;
        n_prompt[k] = 0;
        for (int i = from; i < len && n_prompt[k] < 3 + k; i++)
            prompts[k][n_prompt[k]++] = cJSON_GetArrayItem(ids, i)->valueint;
        CHECK(n_prompt[k] >= 3);
    }

    static out alone[N_PROMPTS], batch[N_PROMPTS], tight[N_PROMPTS];
    for (int k = 0; k < N_PROMPTS; k++) {
        run(m, k, 1, 0, NULL, GEN, &alone[k], NULL);
        CHECK(alone[k].n == GEN && alone[k].finish == LPX_FINISH_LENGTH);
    }

    /* All eight together: the same tokens. */
    int64_t pre = 0;
    run(m, 0, N_PROMPTS, 0, NULL, GEN, batch, &pre);
    CHECK(pre == 0);
    for (int k = 0; k < N_PROMPTS; k++)
        CHECK(same(&alone[k], &batch[k], GEN));

    /* A KV pool of 6 blocks of 4 tokens for 8 sequences of 100 tokens in all:
     * preemption and recompute, the same tokens. */
    /* KV elements: fp32 on the CPU backend, bf16 on CUDA. */
    int64_t bpt =
        (int64_t)lpx_kv_bytes_per_token(&m->cfg, strcmp(device, "cpu") ? LPX_KV_BF16 : LPX_KV_F32);
    run(m, 0, N_PROMPTS, 6 * 4 * bpt, NULL, GEN, tight, &pre);
    printf("preemptions with a 24-token KV pool: %lld\n", (long long)pre);
    CHECK(pre > 0);
    for (int k = 0; k < N_PROMPTS; k++)
        CHECK(same(&alone[k], &tight[k], GEN));

    /* Seeded sampling: one seed, alone and in a preempting batch of four, the same
     * tokens; another seed, different tokens. */
    lpx_sampling_params sp = {
        .temperature = 1.0f, .top_p = 0.95f, .repetition_penalty = 1.1f, .seed = 1234};
    out s_alone, s_batch[N_PROMPTS], s_other;
    run(m, 0, 1, 0, &sp, GEN, &s_alone, NULL);
    run(m, 0, 4, 5 * 4 * bpt, &sp, GEN, s_batch, &pre);
    CHECK(pre > 0);
    CHECK(same(&s_alone, &s_batch[0], GEN));
    sp.seed = 4321;
    run(m, 0, 1, 0, &sp, GEN, &s_other, NULL);
    CHECK(!same(&s_alone, &s_other, GEN));

    cJSON_Delete(root);
    free(json);
    lpx_model_close(m);
    TEST_DONE();
}
