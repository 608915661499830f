/* The one HTTP client of lpx (libcurl): batch --server, bench serve's load generator and
 * the /metrics scrape of monitor and bench all use it. GET or POST (a JSON body), an
 * optional bearer token, connect and total timeouts, the body collected or streamed to a
 * callback (SSE), and many exchanges at once on one thread (lpx_http_multi).
 *
 * An exchange that got no response (refused, reset, timed out, aborted) is LPX_ERR_IO
 * with "URL: why" in lpx_last_error() and in the response's error; an HTTP error status is
 * a response (LPX_OK, status set). The program calls lpx_http_global_init once before it
 * starts threads (libcurl's rule). A handle is used by one thread at a time. */
#ifndef LPX_BASE_HTTP_CLIENT_H
#define LPX_BASE_HTTP_CLIENT_H

#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct lpx_http_request {
    const char *url;
    const char *body;         /* NULL: GET; else POST with Content-Type: application/json */
    const char *api_key;      /* Authorization: Bearer KEY; NULL or "": none */
    bool sse;                 /* Accept: text/event-stream */
    double connect_timeout_s; /* 0: libcurl's */
    double timeout_s;         /* the whole exchange; 0: none */
    size_t max_body;          /* a longer body aborts the exchange (too_big); 0: no limit */
    /* Each piece of the body as it arrives; false aborts the exchange. NULL: the body is
     * collected into the response. Called on the thread that drives the exchange. */
    bool (*on_data)(void *user, const char *data, size_t n);
    void *user;
} lpx_http_request;

typedef struct lpx_http_response {
    long status;     /* HTTP status; 0 when no response arrived */
    char *body;      /* collected body, NUL-terminated ("" when empty); NULL with on_data */
    size_t len;      /* of body */
    bool timed_out;  /* timeout_s passed */
    bool too_big;    /* the body passed max_body */
    char error[512]; /* "URL: why" when the exchange failed, else "" */
} lpx_http_response;

typedef struct lpx_http lpx_http;

lpx_status lpx_http_global_init(void);
void lpx_http_global_cleanup(void);

/* A handle keeps its connection open for the next exchange to the same server. */
lpx_status lpx_http_create(lpx_http **h);
void lpx_http_destroy(lpx_http *h);
/* One blocking exchange on h. */
lpx_status lpx_http_do(lpx_http *h, const lpx_http_request *rq, lpx_http_response *rs);
/* One blocking exchange on a handle of its own. */
lpx_status lpx_http_fetch(const lpx_http_request *rq, lpx_http_response *rs);
void lpx_http_response_free(lpx_http_response *rs);
/* base + path, without the base's trailing slashes; false when it does not fit. */
bool lpx_http_url(char *out, size_t cap, const char *base, const char *path);

/* Exchanges in flight together, driven by lpx_http_multi_wait. */
typedef struct lpx_http_multi lpx_http_multi;

lpx_status lpx_http_multi_create(lpx_http_multi **m);
/* After every handle added to m completed or was destroyed (which ends its exchange). */
void lpx_http_multi_destroy(lpx_http_multi *m);
/* Starts rq on h; rq (and what it points to) and rs must live until h completes. */
lpx_status lpx_http_multi_add(lpx_http_multi *m, lpx_http *h, const lpx_http_request *rq,
                              lpx_http_response *rs);
/* Moves the exchanges along, waiting up to timeout_s for activity. */
lpx_status lpx_http_multi_wait(lpx_http_multi *m, double timeout_s);
/* A handle whose exchange completed (its response filled, *st its status), or NULL. */
lpx_http *lpx_http_multi_done(lpx_http_multi *m, lpx_status *st);

#endif
