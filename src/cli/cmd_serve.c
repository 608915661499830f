/* lpx serve: the engine behind an OpenAI-compatible HTTP API (src/server/). */
#include "cli/commands.h"
#include "model/model.h"
#include "cli/gen_args.h"
#include "engine/data_parallel.h"
#include "lpx.h"
#include "server/server.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* The web UI, embedded at build time (generated from web/ by scripts/embed-web.cmake). */
extern const lpx_web_asset lpx_web_assets[];

#define CMD "serve"

static void usage(FILE *f) {
    fprintf(f,
            "usage: lpx serve -m MODEL [options]\n\n"
            "OpenAI-compatible HTTP server with SSE streaming, Prometheus /metrics and a web UI\n"
            "at /.\n\n"
            "options:\n"
            "%s"
            "  --host ADDR             address to bind (default 127.0.0.1: this machine only)\n"
            "  --port N                port, 0 to 65535 (default 8080; 0 picks a free one)\n"
            "  --served-model-name NAME  model id clients use (default: the model file's name)\n"
            "  --api-key KEY           require 'Authorization: Bearer KEY' on the API and\n"
            "                          /metrics (or env LPX_API_KEY; /health stays open)\n"
            "  --api-key-file PATH     the key from a file (not in the process list): one line,\n"
            "                          not empty, not readable by others\n"
            "  --metrics-public        /metrics without the key (scrapers on a private network)\n"
            "  --allowed-hosts LIST    Host names accepted besides localhost, 127.0.0.1, [::1]\n"
            "                          (comma-separated, or '*'; default: those only when bound\n"
            "                          to loopback, any when bound elsewhere)\n"
            "  --allowed-origins LIST  CORS: web origins (comma-separated, e.g.\n"
            "                          https://app.example) or '*' whose pages may call the API\n"
            "                          (default: none; the UI at / needs none). Requests with\n"
            "                          another Origin are refused (403)\n"
            "%s"
            "                          A request goes to the engine with the fewest requests\n"
            "                          waiting + running (ties: the lowest index)\n"
            "  --fallback-model PATH   a second model (one engine): requests naming no model go\n"
            "                          to it while RULE holds, back once clear for S seconds\n"
            "  --fallback-name NAME    its model id (default: its file's name)\n"
            "  --fallback-when RULE    queue>N,kv>F,gpu>F: any of them, F 0..1 (default\n"
            "                          " LPX_FALLBACK_WHEN_DEFAULT "; docs/server.md)\n"
            "  --fallback-cooldown S   0 to 1e6 (default 5)\n"
            "  --max-num-seqs N        sequences decoded together per engine, 1 to 4096\n"
            "                          (default: engine's)\n"
            "  --max-num-seqs-per-request N  of those, how many one request's n choices may\n"
            "                          take at once, 1 to 4096 (default: half of --max-num-seqs;\n"
            "                          its value: no cap); the others wait their turn\n"
            "  --gpu-memory-utilization F  fraction of GPU memory for weights + KV, 0.01 to 1\n"
            "                          (cuda, default 0.9)\n"
            "  --max-queue N           waiting requests before 503, 1 to 1048576 (default 1024)\n"
            "  --request-timeout S     end requests running longer than S seconds with 504,\n"
            "                          0.001 to 1e7 (default: none)\n"
            "  --read-timeout S        seconds for a request's head + body, else 408 (default 30)\n"
            "  --max-connections N     1 to 1048576 (default 4096)\n"
            "  --max-connections-per-ip N  1 to 1048576 (default 256; raise it behind a proxy)\n"
            "  --shutdown-timeout S    on SIGTERM, wait up to S seconds for requests, 0 to 1e7\n"
            "                          (default 30); a second SIGTERM/SIGINT exits at once\n"
            "  --metrics-compat vllm   /metrics also under vLLM's queue and KV gauge names\n"
            "  -h, --help              this help\n\n"
            "A number must be the whole value (no trailing text) and in its range; anything\n"
            "else, like an unknown option, is a usage error (exit 2) before the model is loaded.\n",
            lpx_engine_args_help, lpx_dp_args_help);
}

/* The key from --api-key-file, so it is not in the process list: the first
 * line, trailing CR/LF stripped. An empty key or a file others can read is
 * refused. Returns a malloc'd key, NULL after printing why. */
static char *read_key_file(const char *path) {
    FILE *f = fopen(path, "r");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        fprintf(stderr, "lpx serve: --api-key-file %s: %s\n", path, strerror(errno));
        if (f) fclose(f);
        return NULL;
    }
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    const char *why = st.st_mode & (S_IROTH | S_IWOTH) ? "readable by other users (chmod 600 it)"
                      : !buf[0]                        ? "empty"
                                                       : NULL;
    if (why) {
        fprintf(stderr, "lpx serve: --api-key-file %s: %s\n", path, why);
        return NULL;
    }
    return strdup(buf);
}

/* After the first SIGTERM/SIGINT the drain runs; a second one ends the
 * process at once, as an impatient operator (or uvicorn's Ctrl-C twice) expects. */
static void *second_signal(void *arg) {
    int sig = 0;
    sigwait((sigset_t *)arg, &sig);
    fprintf(stderr, "lpx serve: second %s: exiting now without draining\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    _exit(1);
}

static bool compat_opt(lpx_opts *a, lpx_server_opts *so) {
    const char *v;
    if (!lpx_opts_str(a, "--metrics-compat", &v)) return false;
    so->metrics_compat_vllm = strcmp(v, "vllm") == 0;
    return so->metrics_compat_vllm || lpx_opts_bad(a, "vllm");
}

int cmd_serve(int argc, char **argv) {
    const char *name = NULL, *api_key = getenv("LPX_API_KEY"), *key_file = NULL;
    lpx_server_opts so = {.host = "127.0.0.1", .port = 8080};
    lpx_engine_args ea;
    lpx_engine_args_init(&ea);
    ea.data_parallel = true;
    lpx_engine_opts *eo = &ea.eo;
    double shutdown_timeout = 30, gpu_util = 0;
    int32_t port = 8080;
    const char *fb_path = NULL, *fb_rule = NULL;
    lpx_fallback_when fbw = {.cooldown_s = LPX_FALLBACK_COOLDOWN_DEFAULT};
    lpx_opts a = {.cmd = CMD, .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (!lpx_engine_args_opt(&a, &ea) && !lpx_opts_str(&a, "--host", &so.host) &&
            !lpx_opts_i32(&a, "--port", 0, 65535, &port) &&
            !lpx_opts_str(&a, "--served-model-name", &name) &&
            !lpx_opts_str(&a, "--api-key", &api_key) &&
            !lpx_opts_str(&a, "--api-key-file", &key_file) &&
            !(lpx_opts_flag(&a, "--metrics-public") && (so.metrics_public = true)) &&
            !lpx_opts_str(&a, "--allowed-hosts", &so.allowed_hosts) &&
            !lpx_opts_str(&a, "--allowed-origins", &so.allowed_origins) &&
            !lpx_opts_str(&a, "--fallback-model", &fb_path) &&
            !lpx_opts_str(&a, "--fallback-name", &so.fallback_name) &&
            !lpx_opts_str(&a, "--fallback-when", &fb_rule) &&
            !lpx_opts_num(&a, "--fallback-cooldown", 0, 1e6, &fbw.cooldown_s) &&
            !lpx_opts_i32(&a, "--max-num-seqs", 1, 4096, &eo->max_num_seqs) &&
            !lpx_opts_i32(&a, "--max-num-seqs-per-request", 1, 4096,
                          &eo->max_num_seqs_per_request) &&
            !lpx_opts_num(&a, "--gpu-memory-utilization", 0.01, 1.0, &gpu_util) &&
            !lpx_opts_i32(&a, "--max-queue", 1, 1 << 20, &so.max_queue) &&
            !lpx_opts_num(&a, "--request-timeout", 0.001, 1e7, &so.request_timeout_s) &&
            !lpx_opts_num(&a, "--read-timeout", 0.001, 1e7, &so.read_timeout_s) &&
            !lpx_opts_i32(&a, "--max-connections", 1, 1 << 20, &so.max_connections) &&
            !lpx_opts_i32(&a, "--max-connections-per-ip", 1, 1 << 20, &so.max_connections_per_ip) &&
            !lpx_opts_num(&a, "--shutdown-timeout", 0, 1e7, &shutdown_timeout) &&
            !compat_opt(&a, &so))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    const char *model = ea.model;
    if (!model) {
        fprintf(stderr, "lpx serve: -m MODEL is required (see lpx serve --help)\n");
        return 2;
    }
    lpx_dp_plan plan;
    int prc = lpx_engine_args_plan(&ea, CMD, &plan);
    if (prc) return prc;
    lpx_status fst = fb_path || so.fallback_name || fb_rule
                         ? lpx_fallback_when_check(fb_path, so.fallback_name, fb_rule, &fbw)
                         : LPX_OK;
    if (fst != LPX_OK) return lpx_gen_args_fail(CMD, fst);
    char *file_key = key_file ? read_key_file(key_file) : NULL;
    if (key_file && !file_key) return 2;
    if (file_key) api_key = file_key;
    lpx_engine_args_env(&ea);
    so.port = port;
    eo->gpu_memory_utilization = (float)gpu_util;
    char defname[256], fb_defname[256];
    lpx_model_default_name(model, defname, sizeof defname);
    so.served_model_name = name ? name : defname;
    if (fb_path) lpx_model_default_name(fb_path, fb_defname, sizeof fb_defname);
    if (fb_path && !so.fallback_name) so.fallback_name = fb_defname;
    so.api_key = api_key && api_key[0] ? api_key : NULL;
    so.assets = lpx_web_assets;

    /* Every thread inherits this mask, so SIGTERM/SIGINT reach only sigwait. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct rlimit nf; /* a connection is a file descriptor: as many as the hard limit */
    if (getrlimit(RLIMIT_NOFILE, &nf) == 0 && nf.rlim_cur < nf.rlim_max)
        setrlimit(RLIMIT_NOFILE, &(struct rlimit){nf.rlim_max, nf.rlim_max});

    /* Bind first, so probes see 503 "loading" rather than a refused connection;
     * "listening" is said once requests can be served. */
    lpx_model *m = NULL;
    lpx_engine *e[LPX_DP_MAX] = {0};
    lpx_server *s = NULL;
    lpx_status st = lpx_server_start(&so, &s);
    if (st == LPX_OK)
        fprintf(stderr, "lpx serve: loading %s (port %d bound: /health answers 503 until ready)\n",
                model, lpx_server_port(s));
    if (st == LPX_OK) st = lpx_model_open(model, &m);
    if (st == LPX_OK) st = lpx_dp_engines_start(m, eo, &plan, e);
    if (st == LPX_OK && fb_path) st = lpx_server_fallback(s, fb_path, &fbw, eo, plan.device[0]);
    if (st == LPX_OK) st = lpx_server_ready(s, m, e, plan.n);
    if (st != LPX_OK) {
        fprintf(stderr, "lpx serve: %s\n", lpx_last_error());
        lpx_server_stop(s);
        lpx_dp_engines_destroy(e, plan.n);
        lpx_model_close(m);
        free(file_key);
        return st == LPX_ERR_INVALID_ARG ? 2 : 1;
    }
    lpx_engine_stats es;
    lpx_engine_get_stats(e[0], &es);
    fprintf(stderr,
            "lpx serve: listening on http://%s:%d: model %s, device %s, max_model_len %d, "
            "max_num_seqs %d (%d a request)",
            so.host, lpx_server_port(s), so.served_model_name, es.device, es.max_model_len,
            es.max_num_seqs, es.max_num_seqs_per_request);
    if (plan.n > 1) fprintf(stderr, "; data parallel: %d engines (%s", plan.n, es.device);
    for (int32_t i = 1; i < plan.n && lpx_engine_get_stats(e[i], &es) == LPX_OK; i++)
        fprintf(stderr, ", %s", es.device);
    fprintf(stderr, plan.n > 1 ? ")\n" : "\n");

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "lpx serve: %s: draining (up to %g s; send it again to exit now)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", shutdown_timeout);
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, second_signal, &sigs) == 0) pthread_detach(watcher);
    lpx_server_drain(s, shutdown_timeout);
    lpx_server_stop(s);
    lpx_dp_engines_destroy(e, plan.n);
    lpx_model_close(m);
    fprintf(stderr, "lpx serve: stopped\n");
    free(file_key);
    return 0;
}
