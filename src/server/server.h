/* lpx serve: an OpenAI-compatible HTTP server over one engine.
 *
 * Layout of src/server/:
 *   server.h   this interface (used by src/cli/cmd_serve.c)
 *   http.c     libmicrohttpd glue: daemon, routing, bodies, SSE, disconnects, drain
 *   params.c   request bodies (cJSON) -> validated parameters or an OpenAI error
 *   openai.c   OpenAI response objects and SSE chunks
 *   job.c      the engine bridge: one HTTP request -> n engine requests
 *   workq.c    the threads that parse and tokenize request bodies
 *   metrics.c  Prometheus registry: counters, histograms, engine gauges
 *   fallback.c the overload fallback's rule (--fallback-model)
 * docs/server.md describes the endpoints, parameters, errors and metrics. */
#ifndef LPX_SERVER_SERVER_H
#define LPX_SERVER_SERVER_H

#include "lpx.h"
#include "server/fallback.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A static file served at "/<path>" (index.html also at "/"). */
typedef struct lpx_web_asset {
    const char *path;
    const char *content_type;
    const unsigned char *data;
    size_t size;
    const char *etag; /* quoted, from the content: a browser's If-None-Match gets a 304 */
} lpx_web_asset;

typedef struct lpx_server_opts {
    const char *host;               /* bind address; "127.0.0.1" when NULL */
    int port;                       /* 0: an ephemeral port (lpx_server_port tells) */
    const char *served_model_name;  /* the model id clients use */
    const char *fallback_name;      /* --fallback-model's id (another than served_model_name),
                                       NULL when there is none */
    const char *api_key;            /* NULL: no authentication */
    int32_t max_queue;              /* waiting engine requests before 503; 0 = 1024 */
    double request_timeout_s;       /* 0 = none */
    double read_timeout_s;          /* a request's head and body must arrive within; 0 = 30 */
    int32_t max_connections;        /* open connections at most; 0 = 4096 */
    int32_t max_connections_per_ip; /* from one client address at most; 0 = 256 */
    size_t max_body_bytes;          /* 0 = 4 MiB */
    const lpx_web_asset *assets;    /* NULL-path-terminated, or NULL */
    const char *allowed_origins;    /* CORS: comma-separated origins ("https://a.example") or
                                       "*"; NULL: none (only the UI's own origin can call) */
    const char *allowed_hosts;      /* comma-separated Host names accepted besides the loopback
                                       ones; NULL: any Host unless bound to a loopback address */
    bool metrics_public;            /* /metrics without the API key */
    bool metrics_compat_vllm;       /* /metrics also under vLLM's gauge names (docs/deploy.md) */
} lpx_server_opts;

typedef struct lpx_server lpx_server;

/* Starts listening while the model still loads: /health answers 503
 * "loading" and the API 503 until lpx_server_ready. */
lpx_status lpx_server_start(const lpx_server_opts *o, lpx_server **out);
/* Serves model m through the engines e[n] (1..LPX_DP_MAX, engine/data_parallel.h) from
 * now on: each new request goes to the engine with the fewest requests in flight
 * (waiting + running), ties to the lowest index. The engines must be started
 * (lpx_engine_start); they and m must outlive the server. */
lpx_status lpx_server_ready(lpx_server *s, const lpx_model *m, lpx_engine *const *e, int n);
/* --fallback-model (server/fallback.h, docs/server.md "Overload fallback"): opens the
 * model at path and starts one engine of it with options eo on device (NULL: the
 * default), both owned by the server (lpx_server_stop ends them). Served as
 * opts.fallback_name, it takes the new requests that name no model while rule w says
 * the main engines are overloaded, and every request that names it. Before
 * lpx_server_ready. */
lpx_status lpx_server_fallback(lpx_server *s, const char *path, const lpx_fallback_when *w,
                               const lpx_engine_opts *eo, const char *device);
int lpx_server_port(const lpx_server *s);
/* Refuses new work (503, /health 503), waits up to timeout_s for in-flight
 * requests, then ends the rest with an error. */
void lpx_server_drain(lpx_server *s, double timeout_s);
/* Closes every connection and frees the server. */
void lpx_server_stop(lpx_server *s);

#endif
