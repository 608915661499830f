/* Two engines in one process do not affect each other (no process-wide state):
 * each model's greedy tokens with both engines alive, stepped in turn, equal its
 * tokens with its engine alone, whichever engine was created last.
 *
 * By default both engines run the real SmolLM2 (two opens of the same file) on
 * the CPU backend with different KV pools and batch limits. On the GPU machine
 * scripts/gpu-check.sh runs it with LPX_TEST_DEVICE=cuda and two different shapes
 * (LPX_MODEL, LPX_MODEL2: e.g. the Qwen3-0.6B and Qwen2.5-0.5B shapes, whose
 * backend tuning differs), so that each backend instance must keep its own. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GEN = 12, MAX_IDS = 64 };

typedef struct out {
    int32_t ids[MAX_IDS];
    int n;
} out;

static void on_event(const lpx_event *ev, void *user) {
    out *o = user;
    if (ev->token >= 0 && o->n < MAX_IDS) o->ids[o->n++] = ev->token;
}

static const char *device = "cpu";

static lpx_engine *make(const lpx_model *m, int32_t max_seqs, int32_t block_size) {
    lpx_engine_opts o;
    lpx_engine_opts_init(&o);
    o.device = device;
    o.max_num_seqs = max_seqs;
    o.max_model_len = 128;
    o.block_size = block_size;
    o.kv_cache_bytes = (int64_t)64 << 20; /* both fit on one GPU (the default takes 90% of it) */
    lpx_engine *e = NULL;
    if (lpx_engine_create(m, &o, &e) != LPX_OK) fprintf(stderr, "engine: %s\n", lpx_last_error());
    CHECK(e != NULL);
    return e;
}

static void submit(lpx_engine *e, const int32_t *prompt, size_t n, out *res) {
    lpx_request r;
    lpx_request_init(&r);
    r.prompt_ids = prompt;
    r.n_prompt_ids = n;
    r.max_tokens = GEN;
    r.ignore_eos = true;
    memset(res, 0, sizeof *res);
    uint64_t id;
    CHECK(lpx_engine_submit(e, &r, on_event, res, &id) == LPX_OK);
}

/* Steps every engine of es in turn until all are idle. */
static void drain(lpx_engine **es, int n) {
    bool any = true;
    for (int guard = 0; any && guard < 10000; guard++) {
        any = false;
        for (int i = 0; i < n; i++) {
            bool busy = false;
            if (lpx_engine_step(es[i], &busy) != LPX_OK) {
                fprintf(stderr, "step: %s\n", lpx_last_error());
                CHECK(0);
                return;
            }
            any = any || busy;
        }
    }
}

static void alone(const lpx_model *m, int32_t max_seqs, int32_t bs, const int32_t *p, size_t n,
                  out *res) {
    lpx_engine *e = make(m, max_seqs, bs);
    if (!e) return;
    submit(e, p, n, res);
    drain(&e, 1);
    lpx_engine_destroy(e);
}

static const char *model_path(const char *var, char *buf, size_t n) {
    return getenv(var) ? getenv(var) : test_model_path(buf, n);
}

int main(void) {
    if (getenv("LPX_TEST_DEVICE")) device = getenv("LPX_TEST_DEVICE");
    char b1[4096], b2[4096];
    const char *p1 = model_path("LPX_MODEL", b1, sizeof b1);
    const char *p2 = model_path("LPX_MODEL2", b2, sizeof b2);
    lpx_model *ma = NULL, *mb = NULL;
    if (lpx_model_open(p1, &ma) != LPX_OK || lpx_model_open(p2, &mb) != LPX_OK) {
        fprintf(stderr, "%s (scripts/fetch-model.sh fetches the model)\n", lpx_last_error());
        CHECK(0);
        TEST_DONE();
    }
    /* Token ids below every test model's vocabulary. */
    static const int32_t pa[] = {1, 504, 3458, 28, 253, 6512, 1373, 30};
    static const int32_t pb[] = {2, 3016, 282, 260, 8326, 30, 17, 99, 1000, 4};
    const size_t na = sizeof pa / sizeof *pa, nb = sizeof pb / sizeof *pb;

    out ra, rb, ta, tb;
    alone(ma, 4, 16, pa, na, &ra);
    alone(mb, 8, 32, pb, nb, &rb);
    CHECK(ra.n == GEN && rb.n == GEN);

    /* Both alive, each order of creation; stepped in turn. */
    for (int order = 0; order < 2; order++) {
        lpx_engine *es[2];
        if (order == 0) {
            es[0] = make(ma, 4, 16);
            es[1] = make(mb, 8, 32);
        } else {
            es[1] = make(mb, 8, 32);
            es[0] = make(ma, 4, 16);
        }
        if (!es[0] || !es[1]) break;
        submit(es[0], pa, na, &ta);
        submit(es[1], pb, nb, &tb);
        drain(es, 2);
        CHECK(ta.n == GEN && !memcmp(ta.ids, ra.ids, sizeof ra.ids));
        CHECK(tb.n == GEN && !memcmp(tb.ids, rb.ids, sizeof rb.ids));
        printf("%s, order %d: A %s, B %s\n", device, order,
               !memcmp(ta.ids, ra.ids, sizeof ra.ids) ? "same" : "DIFFERENT",
               !memcmp(tb.ids, rb.ids, sizeof rb.ids) ? "same" : "DIFFERENT");
        lpx_engine_destroy(es[0]);
        lpx_engine_destroy(es[1]);
    }
    lpx_model_close(ma);
    lpx_model_close(mb);
    TEST_DONE();
}
