/* lpx bench serve: options → bench_serve_run (src/bench/bench_serve.c). */
#include "base/http_client.h"
#include "bench/bench_serve.h"
#include "cli/cli_num.h"
#include "cli/commands.h"
#include "cli/opts.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "bench serve"

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
        "  --url URL            server base URL (http://host:port), required (also\n"
        "                       --base-url, vLLM's name)\n"
        "  --model NAME         default: the first of GET /v1/models\n"
        "  --api-key K          sent as Authorization: Bearer K (default: env OPENAI_API_KEY)\n"
        "  --endpoint E         completions (/v1/completions, default) or chat\n"
        "  --num-prompts N      requests per run, 1 to 1e9 (default 100)\n"
        "  --request-rate R     Poisson arrivals at R requests/s; inf (default): all at once\n"
        "  --max-concurrency C  at most C requests in flight, 1 to 1e6 (default: unlimited)\n"
        "  --input-len L        random prompts of L tokens, 1 to 1e7 (default 128; exact\n"
        "                       when the server has /tokenize and /detokenize, else\n"
        "                       approximate; also --random-input-len)\n"
        "  --output-len L       max_tokens with ignore_eos, 1 to 1e7 (default 128; also\n"
        "                       --random-output-len)\n"
        "  --dataset FILE       JSONL lines {\"prompt\": ..., \"output_len\": ...}\n"
        "  --seed S             prompts and arrivals (default 0)\n"
        "  --timeout S          per request, seconds > 0 (default 600)\n"
        "  --metrics-interval S scrape /metrics every S seconds for lpx:gpu_* (default 1; 0: off)\n"
        "  --sweep K=V,V,...    one run per value; prints throughput against latency\n"
        "  --json OUT           summary and per-request trace\n"
        "  --report OUT.html    self-contained HTML report (inline SVG)\n");
}

/* "inf" or a number > 0. */
static bool parse_rate(const char *s, double *out) {
    if (!strcmp(s, "inf")) {
        *out = INFINITY;
        return true;
    }
    return lpx_cli_double(s, DBL_MIN, DBL_MAX, out);
}

static bool rate_opt(lpx_opts *a, double *rate) {
    const char *v;
    if (!lpx_opts_str(a, "--request-rate", &v)) return false;
    return parse_rate(v, rate) || lpx_opts_bad(a, "a number > 0 or inf");
}

static bool endpoint_opt(lpx_opts *a, bool *chat) {
    const char *v;
    if (!lpx_opts_str(a, "--endpoint", &v)) return false;
    if (strcmp(v, "chat") && strcmp(v, "completions"))
        return lpx_opts_bad(a, "completions or chat");
    *chat = !strcmp(v, "chat");
    return true;
}

/* --sweep max-concurrency=A,B,... | request-rate=A,B,...: one point per value, the other
 * setting as given (p0). False after printing the usage error. */
static bool parse_sweep(const char *sweep, bench_serve_point p0, bench_serve_opts *o) {
    bool by_conc = !strncmp(sweep, "max-concurrency=", 16);
    const char *what = by_conc ? "max-concurrency=A,B,... with whole numbers from 1 to 1000000"
                               : "max-concurrency=A,B,... or request-rate=A,B,... (numbers > 0 "
                                 "or inf), at most 32 values";
    if (!by_conc && strncmp(sweep, "request-rate=", 13))
        return lpx_cli_opt_bad(CMD, "--sweep", sweep, what);
    char list[512];
    snprintf(list, sizeof list, "%s", strchr(sweep, '=') + 1);
    o->n_points = 0;
    for (char *sv = NULL, *tok = strtok_r(list, ",", &sv); tok; tok = strtok_r(NULL, ",", &sv)) {
        bench_serve_point p = p0;
        int32_t c;
        if (o->n_points == BENCH_MAX_SWEEP ||
            (by_conc ? !lpx_cli_i32(tok, 1, 1000000, &c) : !parse_rate(tok, &p.rate)))
            return lpx_cli_opt_bad(CMD, "--sweep", sweep, what);
        if (by_conc) p.max_concurrency = c;
        o->points[o->n_points++] = p;
    }
    return o->n_points > 0 || lpx_cli_opt_bad(CMD, "--sweep", sweep, what);
}

static void note(void *user, const char *msg) {
    fprintf(stderr, "lpx bench serve: %s\n", msg);
}

int cmd_bench_serve(int argc, char **argv) {
    bench_serve_opts o = {.target = {.timeout_s = 600, .api_key = getenv("OPENAI_API_KEY")},
                          .n_prompts = 100,
                          .input_len = 128,
                          .output_len = 128,
                          .metrics_interval_s = 1.0,
                          .n_points = 1,
                          .note = note};
    bench_target *t = &o.target;
    bench_serve_point p0 = {0, INFINITY};
    const char *sweep = NULL;
    lpx_opts a = {.cmd = CMD, .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (!lpx_opts_str(&a, "--url|--base-url", &t->url) &&
            !lpx_opts_str(&a, "--model", &t->model) &&
            !lpx_opts_str(&a, "--api-key", &t->api_key) && !endpoint_opt(&a, &t->chat) &&
            !lpx_opts_int(&a, "--num-prompts", 1, 1000000000, &o.n_prompts) &&
            !lpx_opts_int(&a, "--input-len|--random-input-len", 1, 10000000, &o.input_len) &&
            !lpx_opts_int(&a, "--output-len|--random-output-len", 1, 10000000, &o.output_len) &&
            !lpx_opts_i32(&a, "--max-concurrency", 1, 1000000, &p0.max_concurrency) &&
            !lpx_opts_int(&a, "--seed", 0, INT64_MAX, &o.seed) && !rate_opt(&a, &p0.rate) &&
            !lpx_opts_double(&a, "--timeout", 0, true, DBL_MAX, &t->timeout_s) &&
            !lpx_opts_double(&a, "--metrics-interval", 0, false, DBL_MAX, &o.metrics_interval_s) &&
            !lpx_opts_str(&a, "--dataset", &o.dataset) && !lpx_opts_str(&a, "--sweep", &sweep) &&
            !lpx_opts_str(&a, "--json", &o.json) && !lpx_opts_str(&a, "--report", &o.report))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    if (!t->url) {
        fprintf(stderr, "lpx bench serve: --url is required (see lpx bench serve --help)\n");
        return 2;
    }
    o.points[0] = p0;
    if (sweep && !parse_sweep(sweep, p0, &o)) return 2;
    if (lpx_http_global_init() != LPX_OK) {
        fprintf(stderr, "lpx bench serve: %s\n", lpx_last_error());
        return 1;
    }
    lpx_status st = bench_serve_run(&o, stdout);
    if (st != LPX_OK) fprintf(stderr, "lpx bench serve: %s\n", lpx_last_error());
    lpx_http_global_cleanup();
    return st == LPX_OK ? 0 : 1;
}
