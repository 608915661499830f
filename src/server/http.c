/* libmicrohttpd glue. A small pool of threads serves every connection (epoll),
 * and none of them ever blocks: parsing and tokenizing a body runs on the
 * server's work queue (workq.h) while the connection is parked (suspended), a
 * non-streaming request parks until its job finishes, and an SSE body's reader
 * parks when it has nothing to send; the engine thread wakes (resumes) the
 * connection with the next event. A ticker thread, every 100 ms, closes
 * connections whose request head and body did not arrive within --read-timeout
 * (a 408 when it was their first request), ends requests past --request-timeout,
 * cancels parked requests whose client went away (the socket's peer closed:
 * POLLRDHUP) and wakes idle streams for an SSE keep-alive. MHD's completion
 * callback cancels whatever is still running when a connection ends early. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "server/server.h"

#include "base/error.h"
#include "base/utf8.h"
#include "engine/data_parallel.h"
#include "model/model.h"
#include "server/job.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "model/prompt.h"
#include "server/params.h"
#include "server/workq.h"
#include "telemetry/telemetry.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SLICE_MS 100
/* libmicrohttpd closes a connection after IDLE_S without traffic; a stream
 * waiting for a batch slot sends an SSE comment every KEEPALIVE_MS so that it
 * is not taken for a stalled one. */
#define IDLE_S 30
#define KEEPALIVE_MS 10000
/* The threads that serve connections, and those that parse and tokenize bodies
 * (which bounds the memory that work takes: docs/server.md "Limits"). */
#define POOL_THREADS 4
#define PREP_THREADS 2
/* After --shutdown-timeout, how long the ended requests may take to send their
 * error before their connections are closed. */
#define DRAIN_GRACE_MS 10000

struct lpx_server {
    const lpx_model *m;
    lpx_engine *e[LPX_DP_MAX]; /* [n_engines], data parallel */
    int n_engines;
    lpx_server_opts o;
    char *model_name;  /* owned copy */
    char *model_label; /* escaped for Prometheus label values */
    struct MHD_Daemon *d;
    int port;
    int32_t max_model_len;
    lpx_metrics metrics;
    pthread_mutex_t mu;
    lpx_job *jobs; /* in flight, linked through job->prev/next */
    bool loopback; /* bound to a loopback address: only loopback Host names by default */
    atomic_bool ready, draining;
    atomic_int inflight[LPX_DP_MAX]; /* per engine: requests submitted and not finished */
    pthread_mutex_t place_mu;        /* placement and submit, so loads are current */
    lpx_telemetry *tel;              /* GPU gauges; NULL when there is no usable NVML */
    int n_gpus;
    pthread_mutex_t tel_mu;
    atomic_ullong next_rid;
    lpx_workq *prep;         /* parse + tokenize of request bodies */
    pthread_mutex_t park_mu; /* parking and waking connections, against stopping */
    atomic_bool stopping;    /* lpx_server_stop began: nothing parks any more */
    pthread_mutex_t sock_mu;
    struct sock_ctx *socks; /* every open connection, for the read deadline */
    pthread_t ticker;
    bool ticker_started;
    atomic_bool ticker_stop;
    char timeout_resp[512]; /* the 408 a connection gets at the read deadline */
    /* --fallback-model (fallback.h), owned: NULL fb_e when none */
    lpx_model *fb_m;
    lpx_engine *fb_e;
    char *fb_name;
    int32_t fb_max_model_len;
    atomic_int fb_inflight;
    lpx_fallback_when fb_when;
    lpx_fallback_state fb_state; /* under place_mu */
};

/* One connection (MHD's socket context), from accept to close. */
typedef struct sock_ctx {
    struct sock_ctx *prev, *next;
    int fd;
    double t_start; /* ms: the connection opened, or its last request ended */
    bool busy;      /* a request's head and body are in: no read deadline */
    bool served;    /* a request was answered: at the deadline it is only closed */
    bool expired;
} sock_ctx;

/* A request's progress: read, parked while its body is parsed, then answered. */
typedef enum conn_phase { PH_NEW, PH_PREP, PH_PREPARED } conn_phase;

typedef struct conn_ctx {
    lpx_server *s;
    unsigned long long rid;
    double t0;
    char method[16];
    char url[256];
    lpx_strbuf body;
    bool too_large;
    int status;
    lpx_job *job;  /* a generation request, registered in s->jobs */
    int engine;    /* the job's engine (index into s->e) */
    bool fallback; /* the job runs on the fallback model */
    int fd;
    bool http11; /* an HTTP/1.1 request (interim 1xx answers allowed) */
    struct MHD_Connection *conn;
    sock_ctx *sock;
    conn_phase phase;
    bool parked; /* suspended; under s->park_mu */
    lpx_srv_kind kind;
    /* set by the work queue: an error, or a tokenize answer, or a submitted job */
    bool failed, stream;
    lpx_srv_error err;
    char *answer;
} conn_ctx;

/* ---- responses -------------------------------------------------------------- */

/* Whether the comma-separated list names s (n bytes); "*" names anything
 * (then *star is set). */
static bool in_list(const char *list, const char *s, size_t n, bool icase, bool *star) {
    *star = false;
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t len = strcspn(p, ", ");
        if (len == 1 && *p == '*') return (*star = true);
        if (len && len == n && !(icase ? strncasecmp(p, s, n) : strncmp(p, s, n))) return true;
        p += len;
    }
    return false;
}

/* The Origin header of a cross-origin request, when --allowed-origins lets it
 * call: the origin itself, or "*" for any. NULL: no CORS headers, so a
 * browser keeps the answer from the page (the UI's own origin needs none). */
static const char *cors_origin(const lpx_server *s, struct MHD_Connection *conn) {
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    bool star;
    if (!origin || !in_list(s->o.allowed_origins, origin, strlen(origin), false, &star))
        return NULL;
    return star ? "*" : origin;
}

static void sock_busy(lpx_server *s, sock_ctx *k, bool busy);

static enum MHD_Result send_response(conn_ctx *c, struct MHD_Connection *conn, int status,
                                     struct MHD_Response *r, const char *ctype) {
    if (!r) return MHD_NO;
    if (ctype) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (atomic_load(&c->s->draining))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    const char *origin = cors_origin(c->s, conn);
    if (origin) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, "Origin");
    }
    c->status = status;
    sock_busy(c->s, c->sock, true); /* answering (a 413 before the body, too): no deadline */
    pthread_mutex_lock(&c->s->metrics.mu);
    if (status >= 100 && status < 600) c->s->metrics.http[status / 100]++;
    pthread_mutex_unlock(&c->s->metrics.mu);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Takes ownership of body (malloc'd). */
static enum MHD_Result send_body(conn_ctx *c, struct MHD_Connection *conn, int status, char *body,
                                 const char *ctype) {
    if (!body) {
        static char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                            "\"param\":null,\"code\":null}}";
        return send_response(
            c, conn, 500,
            MHD_create_response_from_buffer(sizeof oom - 1, oom, MHD_RESPMEM_PERSISTENT),
            "application/json");
    }
    return send_response(c, conn, status,
                         MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE),
                         ctype);
}

static enum MHD_Result send_json(conn_ctx *c, struct MHD_Connection *conn, int status, cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return send_body(c, conn, status, s, "application/json");
}

static enum MHD_Result send_error(conn_ctx *c, struct MHD_Connection *conn,
                                  const lpx_srv_error *e) {
    char *s = lpx_oa_error(e);
    if (!s) return send_body(c, conn, 500, NULL, NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    if (r && e->status == 503) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (r && e->status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    return send_response(c, conn, e->status, r, "application/json");
}

static enum MHD_Result fail(conn_ctx *c, struct MHD_Connection *conn, int status, const char *type,
                            const char *code, const char *fmt, const char *arg) {
    lpx_srv_error e;
    lpx_srv_fail(&e, status, type, code, NULL, fmt, arg);
    return send_error(c, conn, &e);
}

/* ---- request state -------------------------------------------------------------- */

/* What the client's socket says while its request is parked: its side shut (a FIN:
 * a half-close after the request, or a close), or gone (reset or error: a write
 * reached a closed socket). */
typedef enum peer_state { PEER_OPEN, PEER_SHUT, PEER_GONE } peer_state;

static peer_state peer_of(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (fd < 0 || poll(&p, 1, 0) <= 0) return PEER_OPEN;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return PEER_GONE;
    return p.revents & POLLRDHUP ? PEER_SHUT : PEER_OPEN;
}

static bool timed_out(const lpx_server *s, double t0) {
    return s->o.request_timeout_s > 0 && lpx_now_ms() - t0 > s->o.request_timeout_s * 1e3;
}

static const lpx_srv_error *timeout_error(const lpx_server *s, lpx_srv_error *e) {
    lpx_srv_fail(e, 504, "timeout_error", "request_timeout", NULL,
                 "the request ran longer than the server's --request-timeout of %g s",
                 s->o.request_timeout_s);
    return e;
}

static void jobs_add(lpx_server *s, lpx_job *j) {
    pthread_mutex_lock(&s->mu);
    j->next = s->jobs;
    if (s->jobs) s->jobs->prev = j;
    s->jobs = j;
    pthread_mutex_unlock(&s->mu);
}

static void jobs_remove(lpx_server *s, lpx_job *j) {
    pthread_mutex_lock(&s->mu);
    if (j->prev)
        j->prev->next = j->next;
    else
        s->jobs = j->next;
    if (j->next) j->next->prev = j->prev;
    j->prev = j->next = NULL;
    pthread_mutex_unlock(&s->mu);
}

/* ---- parking -------------------------------------------------------------------- */

/* Suspends c's connection until unpark; false (nothing done) once the server stops,
 * since libmicrohttpd must not be stopped with a connection suspended. Called on
 * the connection's thread, possibly with its job's mu held. */
static bool park(conn_ctx *c) {
    pthread_mutex_lock(&c->s->park_mu);
    bool ok = !atomic_load(&c->s->stopping);
    if (ok) {
        MHD_suspend_connection(c->conn);
        c->parked = true;
    }
    pthread_mutex_unlock(&c->s->park_mu);
    return ok;
}

/* Resumes c's connection if parked; any thread. Once resumed the connection may
 * answer, end and free c at once: c is not touched after. */
static void unpark(conn_ctx *c) {
    lpx_server *s = c->s;
    pthread_mutex_lock(&s->park_mu);
    if (c->parked) {
        c->parked = false;
        MHD_resume_connection(c->conn);
    }
    pthread_mutex_unlock(&s->park_mu);
}

/* A job's wake (job.h): its connection, parked on it. */
static void wake_conn(void *arg) {
    unpark(arg);
}

/* With j->mu held: parks c on j until the job's next event; false when stopping. */
static bool park_on(conn_ctx *c, lpx_job *j) {
    j->waiting = true;
    j->t_waiting = lpx_now_ms();
    if (!park(c)) j->waiting = false;
    return j->waiting;
}

/* ---- the ticker ------------------------------------------------------------------- */

static sock_ctx *sock_of(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* busy: the request is in (the deadline stops); else it ended (the next one's starts). */
static void sock_busy(lpx_server *s, sock_ctx *k, bool busy) {
    if (!k) return;
    pthread_mutex_lock(&s->sock_mu);
    k->busy = busy;
    if (!busy) {
        k->t_start = lpx_now_ms();
        k->served = true;
    }
    pthread_mutex_unlock(&s->sock_mu);
}

static void on_socket(void *cls, struct MHD_Connection *conn, void **socket_context,
                      enum MHD_ConnectionNotificationCode code) {
    lpx_server *s = cls;
    sock_ctx *k = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci || !(k = calloc(1, sizeof *k))) return; /* no deadline for this one */
        k->fd = ci->connect_fd;
        k->t_start = lpx_now_ms();
        pthread_mutex_lock(&s->sock_mu);
        k->next = s->socks;
        if (s->socks) s->socks->prev = k;
        s->socks = k;
        pthread_mutex_unlock(&s->sock_mu);
        *socket_context = k;
        return;
    }
    if (!k) return;
    /* before libmicrohttpd closes the fd: the ticker never shuts a reused one */
    pthread_mutex_lock(&s->sock_mu);
    if (k->prev)
        k->prev->next = k->next;
    else
        s->socks = k->next;
    if (k->next) k->next->prev = k->prev;
    pthread_mutex_unlock(&s->sock_mu);
    free(k);
    *socket_context = NULL;
}

/* Connections whose request head and body took longer than --read-timeout: a 408
 * for a first request (a later one on a kept-alive connection may race the client's
 * next request, so it is only closed), then shut down; libmicrohttpd sees the end
 * and closes them. */
static void expire_reads(lpx_server *s, double now) {
    int n408 = 0;
    pthread_mutex_lock(&s->sock_mu);
    for (sock_ctx *k = s->socks; k; k = k->next) {
        if (k->busy || k->expired || now - k->t_start < s->o.read_timeout_s * 1e3) continue;
        k->expired = true;
        if (!k->served &&
            send(k->fd, s->timeout_resp, strlen(s->timeout_resp), MSG_DONTWAIT | MSG_NOSIGNAL) > 0)
            n408++;
        shutdown(k->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&s->sock_mu);
    if (n408) {
        pthread_mutex_lock(&s->metrics.mu);
        s->metrics.http[4] += (uint64_t)n408;
        pthread_mutex_unlock(&s->metrics.mu);
    }
}

/* Jobs past --request-timeout end with the timeout error; parked ones whose client
 * went away are cancelled; a stream parked for KEEPALIVE_MS is woken to send a
 * keep-alive comment. */
static void watch_jobs(lpx_server *s, double now) {
    lpx_srv_error e;
    pthread_mutex_lock(&s->mu);
    for (lpx_job *j = s->jobs; j; j = j->next) {
        pthread_mutex_lock(&j->mu);
        bool late = !j->timed_out && !j->finished && timed_out(s, j->t_arrival);
        peer_state ps = j->waiting && !j->gone ? peer_of(j->fd) : PEER_OPEN;
        bool gone = ps == PEER_GONE;
        if (ps == PEER_SHUT && !j->probed) {
            /* A half-closed client still reads its answer (as uvicorn and h11 give it);
             * a closed one resets the probe, seen as gone at a later tick. The job is
             * parked (no response queued), so these bytes come before the answer. */
            static const char interim[] = "HTTP/1.1 100 Continue\r\n\r\n";
            j->probed = true;
            if (j->stream)
                j->keepalive_now = true;
            else
                gone = !j->http11 || send(j->fd, interim, sizeof interim - 1,
                                          MSG_DONTWAIT | MSG_NOSIGNAL) != sizeof interim - 1;
        }
        j->timed_out |= late;
        j->gone |= gone;
        if (j->waiting && j->wake && j->stream &&
            (now - j->t_waiting > KEEPALIVE_MS || j->keepalive_now)) {
            j->waiting = false;
            j->wake(j->wake_arg);
        }
        pthread_mutex_unlock(&j->mu);
        if (late) lpx_job_cancel(j, timeout_error(s, &e));
        if (gone) lpx_job_cancel(j, NULL);
    }
    pthread_mutex_unlock(&s->mu);
}

static void *ticker(void *arg) {
    lpx_server *s = arg;
    while (!atomic_load(&s->ticker_stop)) {
        nanosleep(&(struct timespec){.tv_nsec = SLICE_MS * 1000000L}, NULL);
        double now = lpx_now_ms();
        expire_reads(s, now);
        watch_jobs(s, now);
    }
    return NULL;
}

/* ---- SSE ------------------------------------------------------------------------ */

typedef struct sse_ctx {
    conn_ctx *c;  /* valid while the connection is: the reader runs only then */
    lpx_job *job; /* a reference of its own */
    double t_sent;
} sse_ctx;

/* Never blocks: what the job has, a keep-alive comment, or nothing (the connection
 * parks until the job's next event or the ticker's keep-alive wake). */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse_ctx *x = cls;
    lpx_job *j = x->job;
    static const char keepalive[] = ": keep-alive\n\n";
    double now = lpx_now_ms();
    bool end, parked = false;
    pthread_mutex_lock(&j->mu);
    size_t n = lpx_job_take(j, buf, max, &end);
    bool gone = j->gone;
    if (!n && !end && !gone) {
        if ((now - x->t_sent > KEEPALIVE_MS || j->keepalive_now) && max >= sizeof keepalive - 1) {
            j->keepalive_now = false;
            memcpy(buf, keepalive, sizeof keepalive - 1);
            n = sizeof keepalive - 1;
        } else {
            parked = park_on(x->c, j);
        }
    }
    pthread_mutex_unlock(&j->mu);
    if (n) {
        x->t_sent = now;
        return (ssize_t)n;
    }
    if (end) return MHD_CONTENT_READER_END_OF_STREAM;
    if (parked) return 0;
    lpx_job_cancel(j, NULL); /* the client went away, or the server stops */
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void sse_free(void *cls) {
    sse_ctx *x = cls;
    lpx_job_unref(x->job);
    free(x);
}

/* ---- endpoints ------------------------------------------------------------------- */

static bool authorized(const lpx_server *s, struct MHD_Connection *conn) {
    if (!s->o.api_key || !s->o.api_key[0]) return true;
    const char *h =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    const char *k = h + 7, *want = s->o.api_key;
    size_t n = strlen(k), m = strlen(want);
    /* Compare in time independent of where the first difference is. */
    unsigned diff = (unsigned)(n != m);
    for (size_t i = 0; i < m; i++)
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < n ? k[i] : 0);
    return diff == 0;
}

static enum MHD_Result do_models(conn_ctx *c, struct MHD_Connection *conn) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", c->s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "lpx");
    cJSON_AddNumberToObject(m, "max_model_len", c->s->max_model_len);
    cJSON_AddItemToArray(data, m);
    if (c->s->fb_e) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "id", c->s->fb_name);
        cJSON_AddStringToObject(f, "object", "model");
        cJSON_AddNumberToObject(f, "created", (double)time(NULL));
        cJSON_AddStringToObject(f, "owned_by", "lpx");
        cJSON_AddNumberToObject(f, "max_model_len", c->s->fb_max_model_len);
        cJSON_AddItemToArray(data, f);
    }
    return send_json(c, conn, 200, o);
}

/* Ready once every engine is loaded and while each answers. */
static enum MHD_Result do_health(conn_ctx *c, struct MHD_Connection *conn) {
    bool ready = atomic_load(&c->s->ready), draining = atomic_load(&c->s->draining);
    lpx_engine_stats st;
    for (int i = 0; ready && i < c->s->n_engines; i++)
        ready = lpx_engine_get_stats(c->s->e[i], &st) == LPX_OK;
    if (ready && c->s->fb_e) ready = lpx_engine_get_stats(c->s->fb_e, &st) == LPX_OK;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", draining ? "draining" : ready ? "ok" : "loading");
    return send_json(c, conn, ready && !draining ? 200 : 503, o);
}

static bool fallback_look(lpx_server *s);

static enum MHD_Result do_metrics(conn_ctx *c, struct MHD_Connection *conn) {
    lpx_engine_stats fs;
    if (atomic_load(&c->s->ready) && c->s->fb_e) { /* the gauges as of now */
        pthread_mutex_lock(&c->s->place_mu);
        fallback_look(c->s);
        pthread_mutex_unlock(&c->s->place_mu);
        if (lpx_engine_get_stats(c->s->fb_e, &fs) == LPX_OK) {
            pthread_mutex_lock(&c->s->metrics.mu);
            c->s->metrics.fallback_running = (double)fs.n_running;
            c->s->metrics.fallback_waiting = (double)fs.n_waiting;
            c->s->metrics.fallback_kv =
                fs.kv_blocks_total ? (double)fs.kv_blocks_used / fs.kv_blocks_total : 0;
            pthread_mutex_unlock(&c->s->metrics.mu);
        }
    }
    lpx_engine_stats st[LPX_DP_MAX];
    memset(st, 0, sizeof st[0]);
    int n_e = atomic_load(&c->s->ready) ? c->s->n_engines : 1; /* zeros while loading */
    for (int i = 0; atomic_load(&c->s->ready) && i < n_e; i++)
        if (lpx_engine_get_stats(c->s->e[i], &st[i]) != LPX_OK)
            return fail(c, conn, 500, "server_error", NULL, "engine stats: %s", lpx_last_error());
    lpx_gpu_sample g[8];
    int n = 0;
    pthread_mutex_lock(&c->s->tel_mu);
    for (; c->s->tel && n < c->s->n_gpus && n < 8; n++)
        if (lpx_telemetry_sample(c->s->tel, n, &g[n]) != LPX_OK) break;
    pthread_mutex_unlock(&c->s->tel_mu);
    return send_body(c, conn, 200,
                     lpx_metrics_render(&c->s->metrics, st, n_e, c->s->model_label, g, n),
                     "text/plain; version=0.0.4; charset=utf-8");
}

/* The model a request names: *fb for the fallback's name, *pinned when it names one
 * (else the overload rule picks); a name the server does not serve is a 404. */
static bool model_ok(const lpx_server *s, const lpx_srv_params *p, bool *fb, bool *pinned,
                     lpx_srv_error *e) {
    *fb = false;
    *pinned = p->model != NULL;
    if (!p->model || !strcmp(p->model, s->model_name)) return true;
    if (s->fb_e && !strcmp(p->model, s->fb_name)) return (*fb = true);
    return lpx_srv_fail(e, 404, "not_found_error", "model_not_found", "model",
                        "the model '%.*s' does not exist: this server serves '%.*s'%s%.*s%s",
                        lpx_utf8_prefix(p->model, 200), p->model,
                        lpx_utf8_prefix(s->model_name, 200), s->model_name, s->fb_e ? " and '" : "",
                        s->fb_e ? lpx_utf8_prefix(s->fb_name, 200) : 0, s->fb_e ? s->fb_name : "",
                        s->fb_e ? "'" : "");
}

/* /tokenize and /detokenize, on the work queue: the answer in c->answer. The token
 * list is written as text, not built as cJSON items (tens of bytes each). */
static void prep_tokenize(conn_ctx *c) {
    lpx_server *s = c->s;
    lpx_srv_params p;
    if (!lpx_srv_parse(c->kind, c->body.p ? c->body.p : "", c->body.n, &s->m->gen, &p, &c->err)) {
        c->failed = true;
        return;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    bool fb = false, pinned = false;
    c->failed = !model_ok(s, &p, &fb, &pinned, &c->err);
    const lpx_model *m = fb ? s->fb_m : s->m; /* each model tokenizes for itself */
    c->failed = c->failed || !lpx_srv_bind_model(m, &p, &c->err) ||
                !lpx_srv_check_vocab(&p, m->cfg.vocab_size, &c->err) ||
                !lpx_job_prompt_ids(m, &p, 0, 0, &ids, &n, &c->err);
    lpx_srv_params_free(&p);
    if (c->failed) return;
    lpx_strbuf b = {0};
    bool ok = true;
    if (c->kind == LPX_SRV_TOKENIZE) {
        char num[32];
        ok = lpx_strbuf_add(&b, "{\"tokens\":[", 11);
        for (size_t i = 0; ok && i < n; i++)
            ok = lpx_strbuf_add(&b, num,
                                (size_t)snprintf(num, sizeof num, i ? ",%d" : "%d", ids[i]));
        int k = snprintf(num, sizeof num, "],\"count\":%zu,", n);
        ok = ok && lpx_strbuf_add(&b, num, (size_t)k);
        k = snprintf(num, sizeof num, "\"max_model_len\":%d}",
                     fb ? s->fb_max_model_len : s->max_model_len);
        ok = ok && lpx_strbuf_add(&b, num, (size_t)k);
    } else {
        size_t need = 0, cap = n * 16 + 16;
        char *text = malloc(cap);
        lpx_status st = text
                            ? lpx_detokenize(lpx_model_tokenizer(m), ids, n, true, text, cap, &need)
                            : LPX_ERR_NOMEM;
        if (st == LPX_OK && need >= cap) {
            free(text);
            cap = need + 1;
            text = malloc(cap);
            st = text ? lpx_detokenize(lpx_model_tokenizer(m), ids, n, true, text, cap, &need)
                      : LPX_ERR_NOMEM;
        }
        if (st != LPX_OK) {
            c->failed = !lpx_srv_fail(&c->err, 400, "invalid_request_error", NULL, NULL,
                                      "detokenize: %s", lpx_last_error());
        } else {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "prompt", text);
            b.p = o ? cJSON_PrintUnformatted(o) : NULL;
            ok = b.p != NULL;
            cJSON_Delete(o);
        }
        free(text);
    }
    free(ids);
    if (c->failed) return;
    if (!ok) {
        free(b.p);
        c->failed = !lpx_srv_fail(&c->err, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    c->answer = b.p;
}

/* Refuses a prompt that, with the output asked for, would not fit the context
 * (max_tokens not given: the rest of the context, which the engine's limit gives). */
static bool fits(int64_t L, const lpx_srv_params *p, size_t n_prompt, bool counted,
                 lpx_srv_error *e) {
    const char *what = p->kind == LPX_SRV_CHAT ? "messages" : "prompt", *param;
    char msg[sizeof e->message];
    /* the wording lpx batch uses too (model/prompt.h) */
    if (!lpx_prompt_fits(L, n_prompt, counted, p->req.max_tokens, what, msg, sizeof msg, &param))
        return lpx_srv_fail(e, 400, "context_length_exceeded", "context_length_exceeded", param,
                            "%s", msg);
    return true;
}

/* Waiting requests, summed over the engines: each engine's count, or, when
 * higher, the requests this server has in flight on it beyond what one batch
 * holds (the engine's count is a snapshot of its last step and misses what was
 * submitted since). */
static int64_t waiting_on(const lpx_engine_stats *st, atomic_int *inflight) {
    int64_t w = (int64_t)atomic_load(inflight) - st->max_num_seqs;
    return st->n_waiting > w ? st->n_waiting : w;
}

static bool queue_ok(lpx_server *s, int32_t n, lpx_srv_error *e) {
    int64_t waiting = 0;
    lpx_engine_stats st;
    for (int i = 0; i < s->n_engines; i++)
        if (lpx_engine_get_stats(s->e[i], &st) == LPX_OK)
            waiting += waiting_on(&st, &s->inflight[i]);
    if (s->fb_e && lpx_engine_get_stats(s->fb_e, &st) == LPX_OK)
        waiting += waiting_on(&st, &s->fb_inflight);
    if (waiting + n <= s->o.max_queue) return true;
    return lpx_srv_fail(e, 503, "service_unavailable", "queue_full", NULL,
                        "the server is at capacity (%lld requests waiting, --max-queue %d): retry "
                        "later",
                        (long long)waiting, s->o.max_queue);
}

/* One look of the overload rule (fallback.h) at the main engines' load; a switch is
 * logged and counted. Whether new requests that name no model go to the fallback.
 * Caller holds place_mu. */
static bool fallback_look(lpx_server *s) {
    lpx_fallback_load l = {.gpu = -1};
    int64_t used = 0, total = 0;
    lpx_engine_stats st;
    for (int i = 0; i < s->n_engines; i++)
        if (lpx_engine_get_stats(s->e[i], &st) == LPX_OK) {
            l.waiting += waiting_on(&st, &s->inflight[i]);
            used += st.kv_blocks_used;
            total += st.kv_blocks_total;
        }
    l.kv = total ? (double)used / (double)total : 0;
    lpx_gpu_sample g;
    pthread_mutex_lock(&s->tel_mu);
    if (s->fb_when.gpu >= 0 && s->tel && s->n_gpus &&
        lpx_telemetry_sample(s->tel, 0, &g) == LPX_OK && g.util_gpu >= 0)
        l.gpu = g.util_gpu / 100.0;
    pthread_mutex_unlock(&s->tel_mu);
    char why[96];
    if (lpx_fallback_look(&s->fb_state, &s->fb_when, &l, lpx_now_ms(), why, sizeof why)) {
        bool on = s->fb_state.active;
        fprintf(stderr, "lpx serve: fallback %s (%s): new requests go to %s\n", on ? "on" : "off",
                why, on ? s->fb_name : s->model_name);
        pthread_mutex_lock(&s->metrics.mu);
        s->metrics.fallback_active = on;
        s->metrics.fallback_switches = s->fb_state.switches;
        pthread_mutex_unlock(&s->metrics.mu);
    }
    return s->fb_state.active;
}

/* A generation request, on the work queue: parsed, tokenized (no further than the
 * context can hold), checked and submitted; the job in c->job, or the error. */
static void prep_generate(conn_ctx *c) {
    lpx_server *s = c->s;
    lpx_srv_params p;
    lpx_srv_error *e = &c->err;
    if (atomic_load(&s->draining) || atomic_load(&s->stopping)) {
        c->failed = !lpx_srv_fail(e, 503, "service_unavailable", "draining", NULL, "%s",
                                  "the server is shutting down");
        return;
    }
    if (!lpx_srv_parse(c->kind, c->body.p ? c->body.p : "", c->body.n, &s->m->gen, &p, e)) {
        c->failed = true;
        return;
    }
    bool fb, pinned, ok = model_ok(s, &p, &fb, &pinned, e);
    if (ok && !pinned && s->fb_e) {
        pthread_mutex_lock(&s->place_mu);
        fb = fallback_look(s);
        pthread_mutex_unlock(&s->place_mu);
    }
    if (ok && fb) { /* the fallback's own sampling defaults */
        lpx_srv_params_free(&p);
        if (!lpx_srv_parse(c->kind, c->body.p ? c->body.p : "", c->body.n, &s->fb_m->gen, &p,
                           e)) {
            c->failed = true;
            return;
        }
    }
    free(c->body.p); /* parsed: the body's bytes are not needed any more */
    c->body = (lpx_strbuf){0};
    const lpx_model *m = fb ? s->fb_m : s->m; /* each model tokenizes for itself */
    const int64_t L = fb ? s->fb_max_model_len : s->max_model_len;
    size_t n_prompts = lpx_srv_n_prompts(&p), n_ids[LPX_SRV_MAX_PROMPTS] = {0};
    int32_t *ids[LPX_SRV_MAX_PROMPTS] = {0};
    lpx_job *j = NULL;
    size_t limit = (size_t)L;
    ok = ok && lpx_srv_bind_model(m, &p, e) && lpx_srv_check_vocab(&p, m->cfg.vocab_size, e);
    for (size_t k = 0; ok && k < n_prompts; k++)
        ok = lpx_job_prompt_ids(m, &p, k, limit, &ids[k], &n_ids[k], e) &&
             fits(L, &p, n_ids[k], n_ids[k] <= limit || (p.n_prompts && p.prompts[k].ids), e);
    ok = ok && queue_ok(s, (int32_t)n_prompts * p.n, e);
    pthread_mutex_lock(&s->place_mu);
    int ei = ok && !fb ? lpx_dp_place(s->inflight, s->n_engines) : 0; /* under place_mu */
    if (ok && !(j = lpx_job_new(fb ? s->fb_e : s->e[ei], lpx_model_tokenizer(m), &s->metrics,
                                fb ? &s->fb_inflight : &s->inflight[ei],
                                fb ? s->fb_name : s->model_name, &p, c->t0)))
        ok = lpx_srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (ok) {
        j->fd = c->fd;
        j->http11 = c->http11;
        j->wake = wake_conn;
        j->wake_arg = c;
        c->job = j;
        c->engine = ei;
        c->fallback = fb;
        jobs_add(s, j);
        ok = lpx_job_submit(j, &p, ids, n_ids, e);
    }
    pthread_mutex_unlock(&s->place_mu);
    if (ok && fb && !pinned) {
        pthread_mutex_lock(&s->metrics.mu);
        s->metrics.fallback_requests++;
        pthread_mutex_unlock(&s->metrics.mu);
    }
    for (size_t k = 0; k < n_prompts; k++)
        free(ids[k]);
    c->stream = p.stream;
    lpx_srv_params_free(&p);
    c->failed = !ok;
}

/* cJSON spends about 100 bytes on each value: a body of more values than any valid
 * request has (LPX_SRV_MAX_PROMPTS prompts of max_model_len ids, and the other
 * fields) is refused before it is parsed, so that 4 MiB of "1,1,1,..." costs 4 MiB. */
static bool values_ok(conn_ctx *c) {
    size_t n = 0, max = LPX_SRV_MAX_PROMPTS * ((size_t)c->s->max_model_len + 1) + 4096;
    bool in_str = false;
    for (size_t i = 0; i < c->body.n; i++) {
        char ch = c->body.p[i];
        if (in_str && ch == '\\')
            i++; /* the escaped character */
        else if (ch == '"')
            in_str = !in_str;
        else if (!in_str && ch == ',')
            n++;
    }
    if (n <= max) return true;
    return lpx_srv_fail(&c->err, 400, "invalid_request_error", NULL, NULL,
                        "the request body holds more than %zu JSON values, more than any valid "
                        "request for a context of %d tokens",
                        max, c->s->max_model_len);
}

static void prep_task(void *arg) {
    conn_ctx *c = arg;
    if (!values_ok(c))
        c->failed = true;
    else if (c->kind == LPX_SRV_TOKENIZE || c->kind == LPX_SRV_DETOKENIZE)
        prep_tokenize(c);
    else
        prep_generate(c);
    free(c->body.p);
    c->body = (lpx_strbuf){0};
    c->phase = PH_PREPARED;
    unpark(c);
}

/* Hands the body to the work queue and parks; the handler answers once it is done. */
static enum MHD_Result start_prep(conn_ctx *c, struct MHD_Connection *conn, lpx_srv_kind kind) {
    c->kind = kind;
    c->phase = PH_PREP;
    if (!park(c))
        return fail(c, conn, 503, "service_unavailable", "draining", "%s",
                    "the server is shutting down");
    if (!lpx_workq_push(c->s->prep, prep_task, c)) {
        c->failed = !lpx_srv_fail(&c->err, 503, "service_unavailable", "queue_full", NULL, "%s",
                                  "the server is at capacity: retry later");
        c->phase = PH_PREPARED;
        unpark(c);
    }
    return MHD_YES;
}

static enum MHD_Result start_stream(conn_ctx *c, struct MHD_Connection *conn, lpx_job *j) {
    sse_ctx *x = malloc(sizeof *x);
    if (!x) return send_body(c, conn, 500, NULL, NULL);
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    *x = (sse_ctx){.c = c, .job = j, .t_sent = lpx_now_ms()};
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, x, sse_free);
    if (!r) {
        sse_free(x);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return send_response(c, conn, 200, r, "text/event-stream");
}

/* After the work queue: the error, the tokenize answer, the stream, or (parked until
 * its job finished) the whole response. */
static enum MHD_Result respond(conn_ctx *c, struct MHD_Connection *conn) {
    if (c->failed) return send_error(c, conn, &c->err);
    if (c->answer) {
        char *a = c->answer;
        c->answer = NULL;
        return send_body(c, conn, 200, a, "application/json");
    }
    lpx_job *j = c->job;
    if (c->stream) return start_stream(c, conn, j);
    pthread_mutex_lock(&j->mu);
    bool done = j->finished, parked = !done && park_on(c, j), gone = j->gone;
    pthread_mutex_unlock(&j->mu);
    if (parked) return MHD_YES;
    if (gone) return MHD_NO; /* nobody to answer */
    if (!done) {
        lpx_job_cancel(j, NULL);
        return fail(c, conn, 503, "service_unavailable", "shutdown", "%s",
                    "the server shut down before the request finished");
    }
    if (j->aborted) return send_error(c, conn, &j->abort);
    for (int32_t i = 0; i < j->n; i++)
        if (j->ch[i].finish == LPX_FINISH_ERROR)
            return fail(c, conn, 500, "server_error", NULL, "generation failed: %s",
                        j->ch[i].error ? j->ch[i].error : "engine error");
    if (j->oom) return send_body(c, conn, 500, NULL, NULL);
    return send_body(c, conn, 200, lpx_oa_response(j, lpx_now_ms() - c->t0), "application/json");
}

static enum MHD_Result no_route(conn_ctx *c, struct MHD_Connection *conn, const char *url) {
    lpx_srv_error e;
    lpx_srv_fail(&e, 404, "not_found_error", "not_found", NULL, "no route %.*s",
                 lpx_utf8_prefix(url, 200), url);
    return send_error(c, conn, &e);
}

static enum MHD_Result do_asset(conn_ctx *c, struct MHD_Connection *conn, const char *url) {
    /* Browsers ask for /favicon.ico on their own: the UI's icon is an SVG. */
    const char *path = !strcmp(url, "/")              ? "index.html"
                       : !strcmp(url, "/favicon.ico") ? "favicon.svg"
                                                      : url + 1;
    /* no-cache: a browser asks each time, and a file it holds (the same ETag) costs a 304 */
    const char *held =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    for (const lpx_web_asset *a = c->s->o.assets; a && a->path; a++)
        if (!strcmp(a->path, path)) {
            bool same = a->etag && held && !strcmp(held, a->etag);
            struct MHD_Response *r = MHD_create_response_from_buffer(
                same ? 0 : a->size, (void *)a->data, MHD_RESPMEM_PERSISTENT);
            if (r) {
                MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
                if (a->etag) MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, a->etag);
            }
            return send_response(c, conn, same ? 304 : 200, r, same ? NULL : a->content_type);
        }
    return no_route(c, conn, url);
}

typedef enum route_kind { R_GET, R_POST } route_kind;

static const struct route {
    const char *path;
    route_kind method;
    bool auth;
    int what; /* lpx_srv_kind for POST routes, else one of the GET_* below */
} routes[] = {
    {"/v1/completions", R_POST, true, LPX_SRV_COMPLETION},
    {"/v1/chat/completions", R_POST, true, LPX_SRV_CHAT},
    {"/generate", R_POST, true, LPX_SRV_GENERATE},
    {"/tokenize", R_POST, true, LPX_SRV_TOKENIZE},
    {"/detokenize", R_POST, true, LPX_SRV_DETOKENIZE},
    {"/v1/models", R_GET, true, 0},
    {"/health", R_GET, false, 1},
    {"/metrics", R_GET, false, 2},
};

/* OPTIONS: 204 with Allow; a CORS preflight from an allowed origin also gets
 * the methods and headers it may use (send_response adds the origin). No API
 * key is asked: browsers send preflights without credentials. */
static enum MHD_Result do_options(conn_ctx *c, struct MHD_Connection *conn) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD, POST, OPTIONS");
    if (cors_origin(c->s, conn)) {
        const char *h =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                h ? h : "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    return send_response(c, conn, 204, r, NULL);
}

/* DNS rebinding: a page of evil.example whose name turns into 127.0.0.1 sends
 * "Host: evil.example". A server bound to loopback answers only the loopback
 * names and --allowed-hosts; one bound elsewhere any Host unless the list is
 * given. A request without Host (HTTP/1.0) comes from no browser. */
static bool host_ok(const lpx_server *s, struct MHD_Connection *conn) {
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!h || (!s->loopback && !s->o.allowed_hosts)) return true;
    size_t n = h[0] == '[' ? strcspn(h, "]") + (strchr(h, ']') ? 1 : 0) : strcspn(h, ":");
    bool star;
    return in_list("localhost,127.0.0.1,[::1]", h, n, true, &star) ||
           in_list(s->o.allowed_hosts, h, n, true, &star);
}

/* A page of another site may send requests (a form POST needs no preflight):
 * its Origin is refused unless --allowed-origins names it. Same-origin calls
 * (the UI: Origin is http://HOST, or https://HOST behind a TLS proxy) and
 * clients that send no Origin pass. */
static bool origin_ok(const lpx_server *s, struct MHD_Connection *conn) {
    const char *o = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    if (!o || cors_origin(s, conn)) return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    size_t skip = !strncasecmp(o, "http://", 7) ? 7 : !strncasecmp(o, "https://", 8) ? 8 : 0;
    return h && skip && !strcasecmp(o + skip, h);
}

/* A browser sends text/plain, form and multipart bodies cross-origin without a
 * preflight; application/json always asks first. */
static bool json_body(struct MHD_Connection *conn) {
    const char *t =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    return t && !strncasecmp(t, "application/json", 16) &&
           (t[16] == '\0' || t[16] == ';' || t[16] == ' ');
}

static enum MHD_Result route(conn_ctx *c, struct MHD_Connection *conn, const char *url,
                             const char *method) {
    if (!host_ok(c->s, conn))
        return fail(c, conn, 400, "invalid_request_error", "host_not_allowed", "%s",
                    "the Host header names no host this server answers to (a loopback name, "
                    "or one of --allowed-hosts)");
    if (!strcmp(method, "OPTIONS")) return do_options(c, conn);
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        const struct route *r = &routes[i];
        if (strcmp(url, r->path)) continue;
        if ((r->method == R_GET && !get) || (r->method == R_POST && !post))
            return fail(c, conn, 405, "invalid_request_error", "method_not_allowed",
                        "method %s is not allowed here", method);
        bool health = r->method == R_GET && r->what == 1;
        bool metrics = r->method == R_GET && r->what == 2;
        if (!health && !origin_ok(c->s, conn))
            return fail(c, conn, 403, "invalid_request_error", "origin_not_allowed", "%s",
                        "requests from this web origin are not allowed (see --allowed-origins)");
        if ((r->auth || (metrics && !c->s->o.metrics_public)) && !authorized(c->s, conn))
            return fail(c, conn, 401, "authentication_error", "invalid_api_key", "%s",
                        "a valid API key is required: send 'Authorization: Bearer <key>'");
        if (r->auth && !atomic_load(&c->s->ready))
            return fail(c, conn, 503, "service_unavailable", "loading", "%s",
                        "the model is still loading: retry shortly");
        if (r->method == R_POST) {
            if (!json_body(conn))
                return fail(c, conn, 415, "invalid_request_error", "unsupported_media_type", "%s",
                            "the request body must be sent as 'Content-Type: application/json'");
            if (c->too_large) {
                lpx_srv_error e;
                lpx_srv_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                             "the request body is larger than %zu bytes", c->s->o.max_body_bytes);
                return send_error(c, conn, &e);
            }
            return start_prep(c, conn, (lpx_srv_kind)r->what);
        }
        return r->what == 0   ? do_models(c, conn)
               : r->what == 1 ? do_health(c, conn)
                              : do_metrics(c, conn);
    }
    if (get) return do_asset(c, conn, url);
    return no_route(c, conn, url);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls) {
    lpx_server *s = cls;
    conn_ctx *c = *con_cls;
    if (!c) {
        if (!(c = calloc(1, sizeof *c))) return MHD_NO;
        *con_cls = c;
        c->s = s;
        c->rid = atomic_fetch_add(&s->next_rid, 1);
        c->t0 = lpx_now_ms();
        c->fd = -1;
        c->conn = conn;
        c->sock = sock_of(conn);
        snprintf(c->method, sizeof c->method, "%s", method);
        snprintf(c->url, sizeof c->url, "%s", url);
        c->http11 = !strcmp(version, MHD_HTTP_VERSION_1_1);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) c->fd = ci->connect_fd;
        /* libmicrohttpd reads a body of another coding until the client closes: refused
         * at once (501, as RFC 9112 says for a coding the server does not know). */
        const char *te =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
        if (te && strcasecmp(te, "chunked")) {
            c->too_large = true; /* the body is not kept */
            lpx_srv_error e;
            lpx_srv_fail(&e, 501, "invalid_request_error", "unsupported_transfer_encoding", NULL,
                         "Transfer-Encoding '%.*s' is not supported (only chunked)",
                         lpx_utf8_prefix(te, 100), te);
            return send_error(c, conn, &e);
        }
        /* A declared body over the limit is refused before it is read. */
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body_bytes) {
            c->too_large = true;
            lpx_srv_error e;
            lpx_srv_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                         "the request body is larger than %zu bytes", s->o.max_body_bytes);
            return send_error(c, conn, &e);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!c->too_large && c->body.n + *upload_size > s->o.max_body_bytes) {
            c->too_large = true;
            free(c->body.p);
            c->body = (lpx_strbuf){0};
        }
        if (!c->too_large && !lpx_strbuf_add(&c->body, upload, *upload_size)) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    if (c->phase == PH_PREPARED) return respond(c, conn);
    if (c->status || c->phase != PH_NEW) return MHD_YES; /* answered already (413) */
    sock_busy(s, c->sock, true);
    return route(c, conn, url, method);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    lpx_server *s = cls;
    conn_ctx *c = *con_cls;
    if (!c) return;
    *con_cls = NULL;
    int32_t prompt = 0, gen = 0;
    bool ran = c->job != NULL;
    sock_busy(s, c->sock, false);
    if (c->job) {
        lpx_job *j = c->job;
        /* A client that left early: free its engine slots and KV now. */
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) lpx_job_cancel(j, NULL);
        pthread_mutex_lock(&j->mu);
        j->wake = NULL; /* c is freed below */
        j->waiting = false;
        prompt = j->n_prompt;
        for (int32_t i = 0; i < j->n; i++)
            gen += j->ch[i].n_output_tokens;
        pthread_mutex_unlock(&j->mu);
        jobs_remove(s, j);
        lpx_job_unref(j);
    }
    char method[sizeof c->method * 4], url[sizeof c->url * 4];
    lpx_utf8_log_escape(c->method, method, sizeof method);
    lpx_utf8_log_escape(c->url, url, sizeof url);
    char where[300] = ""; /* data parallel: the engine that ran it; the fallback model */
    if (ran && c->fallback)
        snprintf(where, sizeof where, " model=%.200s", s->fb_name);
    else if (ran && s->n_engines > 1)
        snprintf(where, sizeof where, " engine=%d", c->engine);
    fprintf(stderr, "lpx serve: req %llu %s %s %d prompt=%d gen=%d%s %.1fms%s\n", c->rid, method,
            url, c->status, prompt, gen, where, lpx_now_ms() - c->t0,
            toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (client gone)");
    free(c->body.p);
    free(c->answer);
    free(c);
}

/* ---- lifecycle ----------------------------------------------------------------------- */

static char *label_escape(const char *s) {
    char *o = malloc(strlen(s) * 2 + 1), *p = o;
    if (!o) return NULL;
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') *p++ = '\\';
        if (*s == '\n') {
            *p++ = '\\';
            *p++ = 'n';
            continue;
        }
        *p++ = *s;
    }
    *p = '\0';
    return o;
}

lpx_status lpx_server_start(const lpx_server_opts *o, lpx_server **out) {
    *out = NULL;
    lpx_server *s = calloc(1, sizeof *s);
    if (!s) return lpx_errorf(LPX_ERR_NOMEM, "server: out of memory");
    s->o = *o;
    if (!s->o.host) s->o.host = "127.0.0.1";
    s->loopback = !strncmp(s->o.host, "127.", 4) || !strcmp(s->o.host, "::1") ||
                  !strcasecmp(s->o.host, "localhost");
    if (s->o.max_queue <= 0) s->o.max_queue = 1024;
    if (!s->o.max_body_bytes) s->o.max_body_bytes = 4u << 20;
    s->model_name = strdup(o->served_model_name ? o->served_model_name : "lpx");
    s->model_label = s->model_name ? label_escape(s->model_name) : NULL;
    s->fb_name = o->fallback_name ? strdup(o->fallback_name) : NULL;
    if (s->model_name && o->fallback_name && !strcmp(o->fallback_name, s->model_name)) {
        lpx_server_stop(s);
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "--fallback-name '%s' is the main model's name: give it (or "
                          "--served-model-name) another",
                          o->fallback_name);
    }
    atomic_init(&s->ready, false);
    atomic_init(&s->draining, false);
    for (int i = 0; i < LPX_DP_MAX; i++)
        atomic_init(&s->inflight[i], 0);
    atomic_init(&s->next_rid, 1);
    atomic_init(&s->fb_inflight, 0);
    lpx_fallback_state_init(&s->fb_state);
    lpx_metrics_init(&s->metrics);
    s->metrics.compat_vllm = o->metrics_compat_vllm;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->tel_mu, NULL);
    pthread_mutex_init(&s->place_mu, NULL);
    pthread_mutex_init(&s->park_mu, NULL);
    pthread_mutex_init(&s->sock_mu, NULL);
    atomic_init(&s->stopping, false);
    atomic_init(&s->ticker_stop, false);
    static const char body408[] =
        "{\"error\":{\"message\":\"the request's head and body took longer than the "
        "server's --read-timeout\",\"type\":\"invalid_request_error\",\"param\":null,"
        "\"code\":\"request_timeout\"}}";
    snprintf(s->timeout_resp, sizeof s->timeout_resp,
             "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: "
             "application/json\r\nContent-Length: %zu\r\n\r\n%s",
             sizeof body408 - 1, body408);
    /* GPU gauges when NVML answers; a machine without a GPU just has none. */
    if (lpx_telemetry_open(0, &s->tel) == LPX_OK) {
        const lpx_telemetry_state *ts = lpx_telemetry_get_state(s->tel);
        s->n_gpus = ts->nvml_ready ? ts->nvml_device_count : 0;
    }
    if (!s->model_label) {
        lpx_server_stop(s);
        return lpx_errorf(LPX_ERR_NOMEM, "server: out of memory");
    }
    if (!s->o.max_connections) s->o.max_connections = 4096;
    if (!s->o.max_connections_per_ip) s->o.max_connections_per_ip = 256;
    if (s->o.read_timeout_s <= 0) s->o.read_timeout_s = 30;
    /* every connection has at most one body on the queue */
    lpx_status qst = lpx_workq_create(PREP_THREADS, (size_t)s->o.max_connections, &s->prep);
    if (qst != LPX_OK) {
        lpx_server_stop(s);
        return qst;
    }

    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *ai = NULL;
    int rc = getaddrinfo(s->o.host, port, &hints, &ai);
    if (rc != 0) {
        lpx_server_stop(s);
        return lpx_errorf(LPX_ERR_INVALID_ARG, "--host %s: %s", o->host, gai_strerror(rc));
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_socket, s,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_S, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)POOL_THREADS, MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->o.max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->o.max_connections_per_ip,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        lpx_server_stop(s);
        return lpx_errorf(LPX_ERR_IO,
                          "cannot listen on %s port %d (in use, or not an "
                          "address of this machine?)",
                          o->host ? o->host : "127.0.0.1", o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    if (pthread_create(&s->ticker, NULL, ticker, s) != 0) {
        lpx_server_stop(s);
        return lpx_errorf(LPX_ERR_IO, "server: cannot start a thread");
    }
    s->ticker_started = true;
    *out = s;
    return LPX_OK;
}

lpx_status lpx_server_ready(lpx_server *s, const lpx_model *m, lpx_engine *const *e, int n) {
    if (n < 1 || n > LPX_DP_MAX)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "server: %d engines: expected 1 to %d", n,
                          LPX_DP_MAX);
    /* Every engine serves the same model with the same options; the smallest
     * context is the one a request may count on. */
    s->max_model_len = INT32_MAX;
    for (int i = 0; i < n; i++) {
        lpx_engine_stats st;
        LPX_TRY(lpx_engine_get_stats(e[i], &st));
        if (st.max_model_len < s->max_model_len) s->max_model_len = st.max_model_len;
        s->e[i] = e[i];
    }
    s->m = m;
    s->n_engines = n;
    atomic_store(&s->ready, true); /* publishes m, e and max_model_len to the handlers */
    return LPX_OK;
}

lpx_status lpx_server_fallback(lpx_server *s, const char *path, const lpx_fallback_when *w,
                               const lpx_engine_opts *eo, const char *device) {
    lpx_engine_stats st;
    lpx_dp_plan plan;
    if (atomic_load(&s->ready) || s->fb_m || !s->fb_name)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "server: one fallback, named in the options, before ready");
    LPX_TRY(lpx_dp_plan_make(device, 1, eo->n_threads, &plan));
    LPX_TRY(lpx_model_open(path, &s->fb_m));
    LPX_TRY(lpx_dp_engines_start(s->fb_m, eo, &plan, &s->fb_e));
    LPX_TRY(lpx_engine_get_stats(s->fb_e, &st));
    s->fb_when = *w;
    s->fb_max_model_len = st.max_model_len;
    s->metrics.fallback = true;
    fprintf(stderr,
            "lpx serve: fallback model %s (%s, %s) loaded: requests naming no model go "
            "to it when %s\n",
            s->fb_name, path, st.device, w->text);
    return LPX_OK;
}

int lpx_server_port(const lpx_server *s) {
    return s->port;
}

void lpx_server_drain(lpx_server *s, double timeout_s) {
    atomic_store(&s->draining, true);
    double end = lpx_now_ms() + timeout_s * 1e3;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool idle = s->jobs == NULL;
        pthread_mutex_unlock(&s->mu);
        if (idle) return;
        if (lpx_now_ms() >= end) break;
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000000L}, NULL);
    }
    lpx_srv_error e;
    lpx_srv_fail(&e, 503, "service_unavailable", "shutdown", NULL,
                 "the server shut down before the request finished (--shutdown-timeout %g s)",
                 timeout_s);
    pthread_mutex_lock(&s->mu);
    for (lpx_job *j = s->jobs; j; j = j->next)
        lpx_job_cancel(j, &e);
    pthread_mutex_unlock(&s->mu);
    /* Let the connections send the error before they are closed: the engine ends
     * the jobs at its next step, then each connection writes its last bytes. That
     * is milliseconds, but on a loaded machine can take seconds; only a client that
     * stopped reading keeps the process waiting this whole grace. */
    end = lpx_now_ms() + DRAIN_GRACE_MS;
    while (lpx_now_ms() < end) {
        pthread_mutex_lock(&s->mu);
        bool idle = s->jobs == NULL;
        pthread_mutex_unlock(&s->mu);
        if (idle) return;
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000000L}, NULL);
    }
}

void lpx_server_stop(lpx_server *s) {
    if (!s) return;
    if (s->ticker_started) {
        atomic_store(&s->ticker_stop, true);
        pthread_join(s->ticker, NULL);
    }
    /* libmicrohttpd must not stop with a connection suspended: nothing parks from
     * now on, the queued bodies end (each waking its connection), then every job's
     * parked connection is woken; each then answers or closes. */
    pthread_mutex_lock(&s->park_mu);
    atomic_store(&s->stopping, true);
    pthread_mutex_unlock(&s->park_mu);
    lpx_workq_destroy(s->prep);
    pthread_mutex_lock(&s->mu);
    for (lpx_job *j = s->jobs; j; j = j->next) {
        pthread_mutex_lock(&j->mu);
        if (j->waiting && j->wake) j->wake(j->wake_arg);
        j->waiting = false;
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_unlock(&s->mu);
    if (s->d) MHD_stop_daemon(s->d);
    lpx_telemetry_close(s->tel);
    lpx_metrics_destroy(&s->metrics);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->tel_mu);
    pthread_mutex_destroy(&s->place_mu);
    pthread_mutex_destroy(&s->park_mu);
    pthread_mutex_destroy(&s->sock_mu);
    lpx_dp_engines_destroy(&s->fb_e, 1);
    lpx_model_close(s->fb_m);
    free(s->model_name);
    free(s->model_label);
    free(s->fb_name);
    free(s);
}
