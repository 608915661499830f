/* lpx serve: the engine behind an OpenAI-compatible HTTP API (src/server/). */
#include "cli/cli_num.h"
#include "cli/commands.h"
#include "lpx.h"
#include "server/server.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The web UI, embedded at build time (generated from web/ by scripts/embed-web.cmake). */
extern const lpx_web_asset lpx_web_assets[];

static const char help[] =
    "usage: lpx serve -m MODEL [options]\n\n"
    "OpenAI-compatible HTTP server with SSE streaming, Prometheus /metrics and a web UI at /.\n\n"
    "options:\n"
    "  -m, --model PATH              model directory or .gguf file (required)\n"
    "  --host ADDR                   address to bind (default 127.0.0.1: this machine only)\n"
    "  --port N                      port (default 8080; 0 picks a free one)\n"
    "  --served-model-name NAME      model id clients use (default: the model file's name)\n"
    "  --api-key KEY                 require 'Authorization: Bearer KEY' (or env LPX_API_KEY)\n"
    "  --max-num-seqs N              sequences decoded together (default: engine's)\n"
    "  --max-model-len L             prompt + output tokens per request (default: the model's)\n"
    "  --gpu-memory-utilization F    fraction of GPU memory for weights + KV (cuda, default 0.9)\n"
    "  --max-queue N                 waiting requests before 503 (default 1024)\n"
    "  --request-timeout S           end requests running longer with 504 (default: none)\n"
    "  --shutdown-timeout S          on SIGTERM, wait this long for requests (default 30)\n"
    "  --device DEV                  cpu, cuda or cuda:N (default: cuda when usable, else cpu)\n"
    "  -t, --threads N               CPU threads (default: all cores)\n"
    "  -h, --help                    this help\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "lpx serve: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (lpx serve --help)\n");
    return 2;
}

/* The file or directory name without a .gguf suffix. */
static void default_name(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    size_t len = n - b;
    if (len > 5 && !strncmp(path + n - 5, ".gguf", 5)) len -= 5;
    snprintf(out, cap, "%.*s", (int)len, path + b);
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *name = NULL, *api_key = getenv("LPX_API_KEY");
    lpx_server_opts so = {.host = "127.0.0.1", .port = 8080};
    lpx_engine_opts eo;
    lpx_engine_opts_init(&eo);
    double shutdown_timeout = 30, gpu_util = 0;
    int32_t port = 8080;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(help, stdout);
            return 0;
        }
        if (i + 1 >= argc) return usage_error("unknown option or missing value: %s", a);
        const char *v = argv[++i];
        bool ok = true;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--host"))
            so.host = v;
        else if (!strcmp(a, "--port"))
            ok = lpx_cli_i32(v, 0, 65535, &port);
        else if (!strcmp(a, "--served-model-name"))
            name = v;
        else if (!strcmp(a, "--api-key"))
            api_key = v;
        else if (!strcmp(a, "--max-num-seqs"))
            ok = lpx_cli_i32(v, 1, 4096, &eo.max_num_seqs);
        else if (!strcmp(a, "--max-model-len"))
            ok = lpx_cli_i32(v, 2, INT32_MAX, &eo.max_model_len);
        else if (!strcmp(a, "--gpu-memory-utilization"))
            ok = lpx_cli_double(v, 0.01, 1.0, &gpu_util);
        else if (!strcmp(a, "--max-queue"))
            ok = lpx_cli_i32(v, 1, 1 << 20, &so.max_queue);
        else if (!strcmp(a, "--request-timeout"))
            ok = lpx_cli_double(v, 0.001, 1e7, &so.request_timeout_s);
        else if (!strcmp(a, "--shutdown-timeout"))
            ok = lpx_cli_double(v, 0, 1e7, &shutdown_timeout);
        else if (!strcmp(a, "--device"))
            eo.device = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            ok = lpx_cli_i32(v, 1, 4096, &eo.n_threads);
        else
            return usage_error("unknown option %s", a);
        if (!ok) return usage_error("bad value for %s", a);
    }
    if (!model) return usage_error("%s", "-m MODEL is required");
    so.port = port;
    eo.gpu_memory_utilization = (float)gpu_util;
    char defname[256];
    default_name(model, defname, sizeof defname);
    so.served_model_name = name ? name : defname;
    so.api_key = api_key && api_key[0] ? api_key : NULL;
    so.assets = lpx_web_assets;

    /* Every thread inherits this mask, so SIGTERM/SIGINT reach only sigwait. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* Listen first, so probes see 503 "loading" rather than a refused connection. */
    lpx_model *m = NULL;
    lpx_engine *e = NULL;
    lpx_server *s = NULL;
    lpx_status st = lpx_server_start(&so, &s);
    if (st == LPX_OK)
        fprintf(stderr, "lpx serve: listening on http://%s:%d (loading %s)\n", so.host,
                lpx_server_port(s), model);
    if (st == LPX_OK) st = lpx_model_open(model, &m);
    if (st == LPX_OK) st = lpx_engine_create(m, &eo, &e);
    if (st == LPX_OK) st = lpx_engine_start(e);
    if (st == LPX_OK) st = lpx_server_ready(s, m, e);
    if (st != LPX_OK) {
        fprintf(stderr, "lpx serve: %s\n", lpx_last_error());
        lpx_server_stop(s);
        lpx_engine_destroy(e);
        lpx_model_close(m);
        return st == LPX_ERR_INVALID_ARG ? 2 : 1;
    }
    lpx_engine_stats es;
    lpx_engine_get_stats(e, &es);
    fprintf(stderr, "lpx serve: ready: model %s, device %s, max_model_len %d, max_num_seqs %d\n",
            so.served_model_name, es.device, es.max_model_len, es.max_num_seqs);

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "lpx serve: %s: draining (up to %g s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            shutdown_timeout);
    lpx_server_drain(s, shutdown_timeout);
    lpx_server_stop(s);
    lpx_engine_stop(e);
    lpx_engine_destroy(e);
    lpx_model_close(m);
    fprintf(stderr, "lpx serve: stopped\n");
    return 0;
}
