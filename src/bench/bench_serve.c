/* lpx bench serve: the workload (random prompts of exact token lengths via the
 * server's /tokenize and /detokenize, or a JSONL dataset), the sweep, and output. */
#include "bench/bench_serve.h"

#include "base/error.h"
#include "bench/bench_client.h"
#include "bench/bench_report.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *WORDS[] = {
    "time",    "people",   "way",     "water",    "house",   "light",  "river",   "market",
    "garden",  "music",    "letter",  "window",   "morning", "city",   "story",   "paper",
    "school",  "family",   "forest",  "road",     "number",  "friend", "teacher", "world",
    "animal",  "mountain", "picture", "question", "answer",  "summer", "winter",  "country",
    "history", "machine",  "problem", "island",   "kitchen", "engine", "signal",  "bridge",
    "doctor",  "power",    "color",   "table",    "voice",   "ocean",  "season",  "field"};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

static char *random_words(uint64_t *rng, int64_t n) {
    size_t cap = (size_t)n * 10 + 1, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *w = WORDS[(size_t)(bench_rand(rng) * N_WORDS) % N_WORDS];
        len += (size_t)snprintf(s + len, cap - len, "%s%s", i ? " " : "", w);
    }
    return s;
}

/* The server's prefix cache counters (tokens), summed over their series, from
 * /metrics: lpx's or vLLM's names. false when it has neither. */
static bool prefix_counters(const bench_target *t, double *queries, double *hits) {
    static const char *const names[4] = {
        "lpx:prefix_cache_queries_total", "lpx:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"};
    char *body = NULL;
    long status = 0;
    bool found = false;
    *queries = *hits = 0;
    if (bench_http(t, "/metrics", NULL, &body, &status) == LPX_OK && status == 200)
        for (char *l = body; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
            for (int i = 0; i < 4; i++) {
                size_t n = strlen(names[i]);
                const char *v = l + n;
                if (strncmp(l, names[i], n) != 0) continue;
                if (*v == '{' && (v = strchr(v, '}')) != NULL) v++; /* labels */
                if (!v || *v != ' ') continue;
                *(i % 2 ? hits : queries) += strtod(v, NULL);
                found = true;
            }
    free(body);
    return found;
}

/* A prompt of exactly `len` tokens: tokenize random words, keep the first len ids,
 * detokenize. NULL (no error) when the server lacks the endpoints. */
static char *exact_prompt(const bench_target *t, uint64_t *rng, int64_t len, bool *unsupported) {
    char *words = random_words(rng, len + 8);
    if (!words) return NULL;
    cJSON *rq = cJSON_CreateObject();
    cJSON_AddStringToObject(rq, "model", t->model);
    cJSON_AddStringToObject(rq, "prompt", words);
    cJSON_AddBoolToObject(rq, "add_special_tokens", 0);
    char *body = cJSON_PrintUnformatted(rq);
    cJSON_Delete(rq);
    free(words);
    char *resp = NULL, *out = NULL;
    long status = 0;
    if (!body || bench_http(t, "/tokenize", body, &resp, &status) != LPX_OK || status != 200) {
        *unsupported = true;
        goto done;
    }
    cJSON *j = cJSON_Parse(resp), *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    if (!cJSON_IsArray(toks) || cJSON_GetArraySize(toks) < len) {
        cJSON_Delete(j);
        *unsupported = true;
        goto done;
    }
    cJSON *ids = cJSON_CreateArray();
    for (int64_t i = 0; i < len; i++)
        cJSON_AddItemToArray(ids,
                             cJSON_CreateNumber(cJSON_GetArrayItem(toks, (int)i)->valuedouble));
    cJSON_Delete(j);
    cJSON *dq = cJSON_CreateObject();
    cJSON_AddStringToObject(dq, "model", t->model);
    cJSON_AddItemToObject(dq, "tokens", ids);
    free(body);
    body = cJSON_PrintUnformatted(dq);
    cJSON_Delete(dq);
    free(resp);
    resp = NULL;
    if (!body || bench_http(t, "/detokenize", body, &resp, &status) != LPX_OK || status != 200) {
        *unsupported = true;
        goto done;
    }
    j = cJSON_Parse(resp);
    cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    if (cJSON_IsString(p))
        out = strdup(p->valuestring);
    else
        *unsupported = true;
    cJSON_Delete(j);
done:
    free(body);
    free(resp);
    return out;
}

static lpx_status read_dataset(const char *path, bench_work **w, size_t *n, int64_t out_default) {
    FILE *f = fopen(path, "r");
    if (!f) return lpx_errorf(LPX_ERR_IO, "%s: cannot open", path);
    char *line = NULL;
    size_t lcap = 0, cap = 0, lineno = 0;
    ssize_t len;
    lpx_status st = LPX_OK;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        if (len <= 1) continue;
        cJSON *j = cJSON_Parse(line);
        cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        cJSON *o = cJSON_GetObjectItemCaseSensitive(j, "output_len");
        if (!cJSON_IsString(p) || (o && (!cJSON_IsNumber(o) || o->valuedouble < 1))) {
            cJSON_Delete(j);
            st = lpx_errorf(LPX_ERR_FORMAT,
                            "%s:%zu: expected {\"prompt\": string, \"output_len\": int >= 1}", path,
                            lineno);
            break;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            bench_work *nw = realloc(*w, cap * sizeof *nw);
            if (!nw) {
                cJSON_Delete(j);
                st = lpx_errorf(LPX_ERR_NOMEM, "%s: %zu lines", path, lineno);
                break;
            }
            *w = nw;
        }
        bench_work *x = &(*w)[(*n)++];
        x->prompt = strdup(p->valuestring);
        x->input_len = 0;
        x->output_len = o ? (int64_t)o->valuedouble : out_default;
        cJSON_Delete(j);
        if (!x->prompt) {
            st = lpx_errorf(LPX_ERR_NOMEM, "%s:%zu", path, lineno);
            break;
        }
    }
    free(line);
    fclose(f);
    if (st == LPX_OK && *n == 0) st = lpx_errorf(LPX_ERR_FORMAT, "%s: no prompts", path);
    return st;
}

static char *first_model(const bench_target *t) {
    char *resp = NULL, *out = NULL;
    long status = 0;
    if (bench_http(t, "/v1/models", NULL, &resp, &status) != LPX_OK) {
        char why[600];
        snprintf(why, sizeof why, "%s", lpx_last_error());
        lpx_errorf(LPX_ERR_IO, "GET /v1/models: %s (give --model)", why);
        return NULL;
    }
    cJSON *j = cJSON_Parse(resp);
    cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data");
    cJSON *id = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(d, 0), "id");
    if (status == 200 && cJSON_IsString(id))
        out = strdup(id->valuestring);
    else
        lpx_errorf(LPX_ERR_IO, "GET /v1/models: HTTP %ld, no model id (give --model)", status);
    cJSON_Delete(j);
    free(resp);
    return out;
}

lpx_status bench_serve_run(const bench_serve_opts *so, FILE *out) {
    bench_target t = so->target;
    const char *dataset = so->dataset;
    int64_t n_prompts = so->n_prompts, in_len = so->input_len, out_len = so->output_len;
    int64_t seed = so->seed;
    bench_point pts[BENCH_MAX_SWEEP];
    memset(pts, 0, sizeof pts);
    size_t np = so->n_points;
    for (size_t k = 0; k < np; k++) {
        pts[k].max_concurrency = so->points[k].max_concurrency;
        pts[k].rate = so->points[k].rate;
    }
    lpx_status st = LPX_ERR_NOMEM;
    char *model = NULL;
    bench_work *w = NULL;
    size_t nw = 0;
    bool approx = false;
    if (!t.model) {
        model = first_model(&t);
        if (!model) {
            st = LPX_ERR_IO;
            goto out;
        }
        t.model = model;
    }
    if (dataset) {
        if ((st = read_dataset(dataset, &w, &nw, out_len)) != LPX_OK) goto out;
    } else {
        w = calloc((size_t)n_prompts, sizeof *w);
        if (!w) {
            lpx_errorf(LPX_ERR_NOMEM, "%lld prompts", (long long)n_prompts);
            goto out;
        }
        nw = (size_t)n_prompts;
        uint64_t rng = (uint64_t)seed * 0x9E3779B97F4A7C15ull + 1;
        bool unsupported = false;
        for (size_t i = 0; i < nw; i++) {
            w[i].input_len = in_len;
            w[i].output_len = out_len;
            w[i].prompt = unsupported ? NULL : exact_prompt(&t, &rng, in_len, &unsupported);
            if (!w[i].prompt) {
                /* One word of this list is one token in common BPE vocabularies, plus
                 * the separating space: about in_len tokens. */
                approx = true;
                w[i].prompt = random_words(&rng, in_len);
                if (!w[i].prompt) {
                    lpx_errorf(LPX_ERR_NOMEM, "prompt of %lld words", (long long)in_len);
                    goto out;
                }
            }
        }
        if (approx && so->note) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "the server has no /tokenize and /detokenize: prompts are %lld random words "
                     "(approximate token counts)",
                     (long long)in_len);
            so->note(so->user, msg);
        }
    }
    /* A dataset is used from its start; --num-prompts caps it. */
    size_t n_run = dataset && (int64_t)nw > n_prompts ? (size_t)n_prompts : nw;

    bool any_ok = false;
    for (size_t k = 0; k < np; k++) {
        bench_run_opts o = {.rate = pts[k].rate,
                            .max_concurrency = pts[k].max_concurrency,
                            .seed = (uint64_t)seed,
                            .scrape_interval = so->metrics_interval_s};
        double q0, h0, q1, h1;
        bool counted = prefix_counters(&t, &q0, &h0);
        if ((st = bench_run_workload(&t, w, n_run, &o, &pts[k].run)) != LPX_OK ||
            (st = bench_summarize(pts[k].run.reqs, pts[k].run.n, pts[k].run.duration,
                                  &pts[k].sum)) != LPX_OK)
            goto out;
        if (np > 1)
            fprintf(out, "\n## max concurrency %d, request rate %g\n", pts[k].max_concurrency,
                    pts[k].rate);
        pts[k].prefix_hit_rate = -1;
        if (counted && prefix_counters(&t, &q1, &h1))
            pts[k].prefix_hit_rate = q1 > q0 ? (h1 - h0) / (q1 - q0) : 0;
        bench_print_summary(out, &pts[k].sum);
        if (pts[k].prefix_hit_rate >= 0)
            fprintf(out, "%-40s %-10.2f\n",
                    "Prefix cache hit rate (%):", pts[k].prefix_hit_rate * 100);
        /* The first failure's reason, so a failing run says why. */
        for (size_t i = 0; i < pts[k].run.n; i++)
            if (!pts[k].run.reqs[i].ok) {
                fprintf(out, "first failure: %s\n", pts[k].run.reqs[i].error);
                break;
            }
        any_ok |= pts[k].sum.completed > 0;
    }
    if (np > 1) {
        fprintf(out, "\n");
        bench_print_sweep(out, pts, np);
    }
    fflush(out);
    bench_meta meta = {t.url, t.model, t.chat ? "/v1/chat/completions" : "/v1/completions", approx};
    if (so->json && (st = bench_write_json(so->json, pts, np, &meta)) != LPX_OK) goto out;
    if (so->report && (st = bench_write_html(so->report, pts, np, &meta)) != LPX_OK) goto out;
    st = any_ok ? LPX_OK : lpx_errorf(LPX_ERR_IO, "no request succeeded");
out:
    for (size_t k = 0; k < np; k++)
        bench_run_free(&pts[k].run);
    for (size_t i = 0; w && i < nw; i++)
        free(w[i].prompt);
    free(w);
    free(model);
    return st;
}
