/* Structured-output costs (docs/structured-outputs.md "Cost"): the per-token mask cost
 * on a model's vocabulary and on a 151,936-token one (Qwen's size: the model's tokens
 * plus concatenations of two of them, so a realistic spread of lengths), cold (first
 * time a state is seen: a trie scan) and warm (cached); then batch-1 decode on the CPU
 * with and without a schema.
 *   dev/grammar/build-mask-bench.sh OUT && OUT/mask_bench MODEL.gguf [threads] */
#include "lpx.h"

#include "grammar/grammar.h"
#include "grammar/mask.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
    "\"integer\"},\"email\":{\"type\":\"string\",\"pattern\":\"^[a-z]+@[a-z]+\\\\.com$\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"admin\",\"user\",\"guest\"]}},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{"
    "\"type\":\"string\"}},\"required\":[\"city\",\"zip\"],\"additionalProperties\":false}},"
    "\"required\":[\"name\",\"age\",\"email\",\"tags\",\"address\"],\"additionalProperties\":"
    "false}";
static const char *DOC =
    "{\"name\": \"Ada Lovelace, Countess of Lovelace\", \"age\": 36, \"email\": "
    "\"ada@analytical.com\", \"tags\": [\"admin\", \"user\"], \"address\": {\"city\": "
    "\"London\", \"zip\": \"W1 4AB\"}}";

/* Walks DOC token by token (the tokenizer's split), asking for each state's mask; the
 * mean microseconds a token, and the mean allowed. Includes applying the mask to a row
 * of logits (the sampler's -inf loop). */
static void walk(const lpx_grammar *g, lpx_gmasks *c, const int32_t *ids, size_t n,
                 const char *const *bytes, const size_t *lens, int32_t vocab, float *logits,
                 double *us, double *allowed) {
    lpx_gmatch m;
    lpx_gmatch_init(&m, g);
    double t0 = now_us(), sum_allowed = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t *mask;
        int32_t k;
        lpx_gmasks_get(c, &m, &mask, &k);
        for (int32_t t = 0; t < vocab; t++)
            if (!(mask[t >> 5] >> (t & 31) & 1)) logits[t] = -INFINITY;
        sum_allowed += k;
        if (!(mask[ids[i] >> 5] >> (ids[i] & 31) & 1) ||
            !lpx_gmatch_feed(&m, bytes[ids[i]], lens[ids[i]])) {
            fprintf(stderr, "mask_bench: the document's token %zu is refused\n", i);
            exit(1);
        }
    }
    *us = (now_us() - t0) / (double)n;
    *allowed = sum_allowed / (double)n;
    lpx_gmatch_free(&m);
}

static void mask_cost(const char *label, const lpx_grammar *g, const char *const *bytes,
                      const size_t *lens, int32_t vocab, const int32_t *ids, size_t n) {
    double t0 = now_us();
    lpx_gvocab *v;
    if (lpx_gvocab_create(vocab, bytes, lens, &v) != LPX_OK) exit(1);
    double build_ms = (now_us() - t0) * 1e-3;
    lpx_gmasks *c;
    lpx_gmasks_create(g, v, 0, &c);
    float *logits = calloc((size_t)vocab, sizeof *logits);
    double cold, warm, allowed;
    walk(g, c, ids, n, bytes, lens, vocab, logits, &cold, &allowed);
    walk(g, c, ids, n, bytes, lens, vocab, logits, &warm, &allowed);
    lpx_gmask_stats s;
    lpx_gmasks_stats(c, &s);
    printf("%-22s vocab %6d  trie %7zu nodes (built in %.0f ms)  %zu tokens  cold %8.1f us/token"
           "  warm %6.1f us/token  states %lld  matcher steps %lld  mean allowed %.0f  cache %.1f "
           "MiB\n",
           label, vocab, lpx_gvocab_nodes(v), build_ms, n, cold, warm, (long long)s.misses,
           (long long)s.steps, allowed, (double)s.bytes / (1 << 20));
    free(logits);
    lpx_gmasks_free(c);
    lpx_gvocab_free(v);
}

typedef struct run_state {
    double tok_s;
    int32_t n;
    lpx_finish_reason finish;
} run_state;

static void on_event(const lpx_event *ev, void *user) {
    run_state *r = user;
    if (ev->finish) {
        r->tok_s = ev->decode_tok_s;
        r->n = ev->n_output_tokens;
        r->finish = ev->finish;
    }
}

static double decode(lpx_engine *e, const char *schema, int32_t max_tokens) {
    lpx_chat_message msg = {"user", "Write a long story about a dragon, as JSON."};
    lpx_request r;
    lpx_request_init(&r);
    r.messages = &msg;
    r.n_messages = 1;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 1;
    if (schema) {
        r.output_format = LPX_OUTPUT_JSON_SCHEMA;
        r.json_schema = schema;
    }
    run_state st = {0};
    uint64_t id;
    if (lpx_engine_submit(e, &r, on_event, &st, &id) != LPX_OK) {
        fprintf(stderr, "submit: %s\n", lpx_last_error());
        exit(1);
    }
    bool busy = true;
    while (busy)
        lpx_engine_step(e, &busy);
    if (st.n != max_tokens) fprintf(stderr, "mask_bench: %d tokens, finish %d\n", st.n, st.finish);
    return st.tok_s;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: mask_bench MODEL.gguf [threads]\n");
        return 2;
    }
    lpx_model *model;
    if (lpx_model_open(argv[1], &model) != LPX_OK) {
        fprintf(stderr, "%s\n", lpx_last_error());
        return 1;
    }
    const lpx_tokenizer *tok = lpx_model_tokenizer(model);
    int32_t V = lpx_vocab_size(tok);
    lpx_grammar *g;
    if (lpx_grammar_from_schema(SCHEMA, strlen(SCHEMA), "schema", &g) != LPX_OK) return 1;
    size_t n_ids;
    int32_t ids[512];
    lpx_tokenize(tok, DOC, strlen(DOC), false, false, ids, 512, &n_ids);

    /* The model's vocabulary, then a Qwen-sized one. */
    const int32_t Q = 151936;
    const char **bytes = calloc((size_t)Q, sizeof *bytes);
    size_t *lens = calloc((size_t)Q, sizeof *lens);
    char **own = calloc((size_t)Q, sizeof *own);
    for (int32_t i = 0; i < V; i++)
        bytes[i] = lpx_tokenizer_token_bytes(tok, i, &lens[i]);
    mask_cost("model vocabulary", g, bytes, lens, V, ids, n_ids);
    uint64_t x = 12345;
    for (int32_t i = V; i < Q; i++) {
        int32_t a, b;
        do {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            a = (int32_t)((x >> 33) % (uint64_t)V);
            b = (int32_t)((x >> 13) % (uint64_t)V);
        } while (!bytes[a] || !bytes[b] || lens[a] + lens[b] > 16);
        own[i] = malloc(lens[a] + lens[b]);
        memcpy(own[i], bytes[a], lens[a]);
        memcpy(own[i] + lens[a], bytes[b], lens[b]);
        bytes[i] = own[i];
        lens[i] = lens[a] + lens[b];
    }
    mask_cost("151,936-token vocab", g, bytes, lens, Q, ids, n_ids);

    lpx_engine_opts o;
    lpx_engine_opts_init(&o);
    o.device = "cpu";
    o.max_num_seqs = 1;
    o.n_threads = argc > 2 ? atoi(argv[2]) : 0;
    lpx_engine *e;
    if (lpx_engine_create(model, &o, &e) != LPX_OK) {
        fprintf(stderr, "%s\n", lpx_last_error());
        return 1;
    }
    const char *story = "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\"},"
                        "\"story\":{\"type\":\"string\",\"maxLength\":4000}},\"required\":["
                        "\"title\",\"story\"],\"additionalProperties\":false}";
    const int32_t N = 128;
    decode(e, NULL, 8); /* warm-up */
    for (int round = 0; round < 3; round++) {
        double free_tok_s = decode(e, NULL, N);
        double schema_tok_s = decode(e, story, N);
        double obj_tok_s = decode(e, "{\"type\":\"object\"}", N);
        printf("batch-1 decode, %d tokens, round %d: free %.1f tok/s  schema %.1f tok/s (%+.1f%%)"
               "  json object %.1f tok/s (%+.1f%%)\n",
               N, round, free_tok_s, schema_tok_s, 100 * (schema_tok_s / free_tok_s - 1), obj_tok_s,
               100 * (obj_tok_s / free_tok_s - 1));
    }
    lpx_engine_destroy(e);
    for (int32_t i = V; i < Q; i++)
        free(own[i]);
    free(own);
    free(bytes);
    free(lens);
    lpx_grammar_free(g);
    lpx_model_close(model);
    return 0;
}
