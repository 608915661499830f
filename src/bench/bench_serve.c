/* lpx bench serve: flags, the workload (random prompts of exact token lengths via the
 * server's /tokenize and /detokenize, or a JSONL dataset), the sweep, and output. */
#include "bench/bench_serve.h"

#include "base/error.h"
#include "bench/bench_client.h"
#include "bench/bench_report.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SWEEP 32

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: lpx bench serve --url URL [--model NAME] [--api-key K] [--endpoint "
        "completions|chat]\n"
        "         [--num-prompts N] [--request-rate R|inf] [--max-concurrency C]\n"
        "         [--input-len L --output-len L | --dataset FILE.jsonl] [--seed S]\n"
        "         [--timeout S] [--sweep max-concurrency=1,4,16|request-rate=1,2,4]\n"
        "         [--json OUT.json] [--report OUT.html]\n"
        "Drives an OpenAI-compatible server with streaming requests and prints TTFT, TPOT,\n"
        "ITL and end-to-end latency (mean/median/P90/P99) and throughput.\n"
        "  --url URL            server base URL (http://host:port), required\n"
        "  --model NAME         default: the first of GET /v1/models\n"
        "  --api-key K          sent as Authorization: Bearer K (default: env OPENAI_API_KEY)\n"
        "  --endpoint E         completions (/v1/completions, default) or chat\n"
        "  --num-prompts N      requests per run (default 100)\n"
        "  --request-rate R     Poisson arrivals at R requests/s; inf (default): all at once\n"
        "  --max-concurrency C  at most C requests in flight (default: unlimited)\n"
        "  --input-len L        random prompts of L tokens (default 128; exact when the\n"
        "                       server has /tokenize and /detokenize, else approximate)\n"
        "  --output-len L       max_tokens with ignore_eos (default 128)\n"
        "  --dataset FILE       JSONL lines {\"prompt\": ..., \"output_len\": ...}\n"
        "  --seed S             prompts and arrivals (default 0)\n"
        "  --timeout S          per request (default 600)\n"
        "  --metrics-interval S scrape /metrics every S seconds for lpx:gpu_* (default 1; 0: off)\n"
        "  --sweep K=V,V,...    one run per value; prints throughput against latency\n"
        "  --json OUT           summary and per-request trace\n"
        "  --report OUT.html    self-contained HTML report (inline SVG)\n");
}

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

static int parse_int(const char *s, int64_t lo, int64_t *out) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || v < lo) return -1;
    *out = v;
    return 0;
}

static int parse_rate(const char *s, double *out) {
    if (strcmp(s, "inf") == 0) {
        *out = INFINITY;
        return 0;
    }
    char *end;
    *out = strtod(s, &end);
    return end == s || *end || !(*out > 0) ? -1 : 0;
}

static int bad(const char *fmt, const char *arg) {
    fprintf(stderr, "lpx bench serve: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 2;
}

static char *first_model(const bench_target *t) {
    char *resp = NULL, *out = NULL;
    long status = 0;
    if (bench_http(t, "/v1/models", NULL, &resp, &status) != LPX_OK) {
        fprintf(stderr, "lpx bench serve: GET /v1/models: %s (give --model)\n", lpx_last_error());
        return NULL;
    }
    cJSON *j = cJSON_Parse(resp);
    cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data");
    cJSON *id = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(d, 0), "id");
    if (status == 200 && cJSON_IsString(id))
        out = strdup(id->valuestring);
    else
        fprintf(stderr, "lpx bench serve: GET /v1/models: HTTP %ld, no model id (give --model)\n",
                status);
    cJSON_Delete(j);
    free(resp);
    return out;
}

int bench_serve_main(int argc, char **argv) {
    bench_target t = {.timeout_s = 600, .api_key = getenv("OPENAI_API_KEY")};
    const char *dataset = NULL, *json = NULL, *report = NULL, *sweep = NULL;
    int64_t n_prompts = 100, in_len = 128, out_len = 128, conc = 0, seed = 0;
    double rate = INFINITY, scrape = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!v) return bad("%s needs a value (see --help)", a);
        i++;
        if (!strcmp(a, "--url"))
            t.url = v;
        else if (!strcmp(a, "--model"))
            t.model = v;
        else if (!strcmp(a, "--api-key"))
            t.api_key = v;
        else if (!strcmp(a, "--endpoint")) {
            if (strcmp(v, "chat") && strcmp(v, "completions"))
                return bad("--endpoint: expected completions or chat, got '%s'", v);
            t.chat = !strcmp(v, "chat");
        } else if (!strcmp(a, "--num-prompts")) {
            if (parse_int(v, 1, &n_prompts))
                return bad("--num-prompts: expected an integer >= 1, got '%s'", v);
        } else if (!strcmp(a, "--input-len")) {
            if (parse_int(v, 1, &in_len))
                return bad("--input-len: expected an integer >= 1, got '%s'", v);
        } else if (!strcmp(a, "--output-len")) {
            if (parse_int(v, 1, &out_len))
                return bad("--output-len: expected an integer >= 1, got '%s'", v);
        } else if (!strcmp(a, "--max-concurrency")) {
            if (parse_int(v, 1, &conc))
                return bad("--max-concurrency: expected an integer >= 1, got '%s'", v);
        } else if (!strcmp(a, "--seed")) {
            if (parse_int(v, 0, &seed)) return bad("--seed: expected an integer >= 0, got '%s'", v);
        } else if (!strcmp(a, "--request-rate")) {
            if (parse_rate(v, &rate))
                return bad("--request-rate: expected a number > 0 or inf, got '%s'", v);
        } else if (!strcmp(a, "--timeout")) {
            char *end;
            t.timeout_s = strtod(v, &end);
            if (end == v || *end || !(t.timeout_s > 0))
                return bad("--timeout: expected seconds > 0, got '%s'", v);
        } else if (!strcmp(a, "--metrics-interval")) {
            char *end;
            scrape = strtod(v, &end);
            if (end == v || *end || !(scrape >= 0))
                return bad("--metrics-interval: expected seconds >= 0, got '%s'", v);
        } else if (!strcmp(a, "--dataset"))
            dataset = v;
        else if (!strcmp(a, "--sweep"))
            sweep = v;
        else if (!strcmp(a, "--json"))
            json = v;
        else if (!strcmp(a, "--report"))
            report = v;
        else {
            i--;
            return bad("unknown option '%s' (see --help)", a);
        }
    }
    if (!t.url) return bad("%s", "--url is required (see --help)");

    /* The sweep: a list of max-concurrency or request-rate values, one run each. */
    bench_point pts[MAX_SWEEP];
    memset(pts, 0, sizeof pts);
    size_t np = 0;
    if (sweep) {
        bool by_conc = !strncmp(sweep, "max-concurrency=", 16);
        if (!by_conc && strncmp(sweep, "request-rate=", 13))
            return bad(
                "--sweep: expected max-concurrency=A,B,... or request-rate=A,B,..., got '%s'",
                sweep);
        char list[512];
        snprintf(list, sizeof list, "%s", strchr(sweep, '=') + 1);
        for (char *sv = NULL, *tok = strtok_r(list, ",", &sv); tok;
             tok = strtok_r(NULL, ",", &sv)) {
            if (np == MAX_SWEEP) return bad("--sweep: at most 32 values, got '%s'", sweep);
            int64_t c = conc;
            double r = rate;
            if (by_conc ? parse_int(tok, 1, &c) : parse_rate(tok, &r))
                return bad("--sweep: bad value '%s'", tok);
            pts[np].max_concurrency = (int)c;
            pts[np++].rate = r;
        }
        if (np == 0) return bad("--sweep: no values in '%s'", sweep);
    } else {
        pts[0].max_concurrency = (int)conc;
        pts[0].rate = rate;
        np = 1;
    }

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "lpx bench serve: curl_global_init failed\n");
        return 1;
    }
    int rc = 1;
    char *model = NULL;
    bench_work *w = NULL;
    size_t nw = 0;
    bool approx = false;
    if (!t.model) {
        model = first_model(&t);
        if (!model) goto out;
        t.model = model;
    }
    if (dataset) {
        if (read_dataset(dataset, &w, &nw, out_len) != LPX_OK) {
            fprintf(stderr, "lpx bench serve: %s\n", lpx_last_error());
            goto out;
        }
    } else {
        w = calloc((size_t)n_prompts, sizeof *w);
        if (!w) goto out;
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
                if (!w[i].prompt) goto out;
            }
        }
        if (approx)
            fprintf(stderr,
                    "lpx bench serve: the server has no /tokenize and /detokenize: prompts "
                    "are %lld random words (approximate token counts)\n",
                    (long long)in_len);
    }
    /* A dataset is used from its start; --num-prompts caps it. */
    size_t n_run = dataset && (int64_t)nw > n_prompts ? (size_t)n_prompts : nw;

    bool any_ok = false;
    for (size_t k = 0; k < np; k++) {
        bench_run_opts o = {.rate = pts[k].rate,
                            .max_concurrency = pts[k].max_concurrency,
                            .seed = (uint64_t)seed,
                            .scrape_interval = scrape};
        if (bench_run_workload(&t, w, n_run, &o, &pts[k].run) != LPX_OK ||
            bench_summarize(pts[k].run.reqs, pts[k].run.n, pts[k].run.duration, &pts[k].sum) !=
                LPX_OK) {
            fprintf(stderr, "lpx bench serve: %s\n", lpx_last_error());
            goto out;
        }
        if (np > 1)
            printf("\n## max concurrency %d, request rate %g\n", pts[k].max_concurrency,
                   pts[k].rate);
        bench_print_summary(stdout, &pts[k].sum);
        /* The first failure's reason, so a failing run says why. */
        for (size_t i = 0; i < pts[k].run.n; i++)
            if (!pts[k].run.reqs[i].ok) {
                printf("first failure: %s\n", pts[k].run.reqs[i].error);
                break;
            }
        any_ok |= pts[k].sum.completed > 0;
    }
    if (np > 1) {
        printf("\n");
        bench_print_sweep(stdout, pts, np);
    }
    fflush(stdout);
    bench_meta meta = {t.url, t.model, t.chat ? "/v1/chat/completions" : "/v1/completions", approx};
    if (json && bench_write_json(json, pts, np, &meta) != LPX_OK) {
        fprintf(stderr, "lpx bench serve: %s\n", lpx_last_error());
        goto out;
    }
    if (report && bench_write_html(report, pts, np, &meta) != LPX_OK) {
        fprintf(stderr, "lpx bench serve: %s\n", lpx_last_error());
        goto out;
    }
    if (!any_ok) fprintf(stderr, "lpx bench serve: no request succeeded\n");
    rc = any_ok ? 0 : 1;
out:
    for (size_t k = 0; k < np; k++)
        bench_run_free(&pts[k].run);
    for (size_t i = 0; w && i < nw; i++)
        free(w[i].prompt);
    free(w);
    free(model);
    curl_global_cleanup();
    return rc;
}
