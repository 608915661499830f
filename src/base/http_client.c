#include "base/http_client.h"

#include "base/error.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lpx_http {
    CURL *c;
    struct curl_slist *headers;
    const lpx_http_request *rq;
    lpx_http_response *rs;
    size_t cap;         /* of rs->body */
    lpx_http_multi *in; /* the multi handle h is in flight on, or NULL */
    char errbuf[CURL_ERROR_SIZE];
};

struct lpx_http_multi {
    CURLM *m;
};

lpx_status lpx_http_global_init(void) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return lpx_errorf(LPX_ERR_INTERNAL, "curl_global_init failed");
    return LPX_OK;
}

void lpx_http_global_cleanup(void) {
    curl_global_cleanup();
}

lpx_status lpx_http_create(lpx_http **out) {
    lpx_http *h = calloc(1, sizeof *h);
    if (h) h->c = curl_easy_init();
    if (!h || !h->c) {
        free(h);
        return lpx_errorf(LPX_ERR_NOMEM, "curl_easy_init failed");
    }
    *out = h;
    return LPX_OK;
}

void lpx_http_destroy(lpx_http *h) {
    if (!h) return;
    if (h->in) curl_multi_remove_handle(h->in->m, h->c);
    curl_slist_free_all(h->headers);
    curl_easy_cleanup(h->c);
    free(h);
}

void lpx_http_response_free(lpx_http_response *rs) {
    free(rs->body);
    rs->body = NULL;
    rs->len = 0;
}

bool lpx_http_url(char *out, size_t cap, const char *base, const char *path) {
    size_t n = strlen(base);
    while (n && base[n - 1] == '/')
        n--;
    return (size_t)snprintf(out, cap, "%.*s%s", (int)n, base, path) < cap;
}

static size_t on_write(char *d, size_t sz, size_t nm, void *user) {
    lpx_http *h = user;
    const lpx_http_request *rq = h->rq;
    lpx_http_response *rs = h->rs;
    size_t n = sz * nm;
    if (rq->max_body && rs->len + n > rq->max_body) {
        rs->too_big = true;
        return 0;
    }
    if (rq->on_data) {
        rs->len += n;
        return rq->on_data(rq->user, d, n) ? n : 0;
    }
    if (rs->len + n + 1 > h->cap) {
        size_t cap = h->cap ? h->cap : 4096;
        while (cap < rs->len + n + 1)
            cap *= 2;
        char *p = realloc(rs->body, cap);
        if (!p) return 0;
        rs->body = p;
        h->cap = cap;
    }
    memcpy(rs->body + rs->len, d, n);
    rs->len += n;
    rs->body[rs->len] = '\0';
    return n;
}

/* Sets h up for rq; the exchange then runs on h->c. */
static lpx_status setup(lpx_http *h, const lpx_http_request *rq, lpx_http_response *rs) {
    memset(rs, 0, sizeof *rs);
    h->rq = rq;
    h->rs = rs;
    h->cap = 0;
    h->errbuf[0] = '\0';
    curl_slist_free_all(h->headers);
    h->headers = NULL;
    char auth[1024];
    bool ok = true;
    if (rq->body)
        ok = (h->headers = curl_slist_append(h->headers, "Content-Type: application/json"));
    if (ok && rq->sse)
        ok = (h->headers = curl_slist_append(h->headers, "Accept: text/event-stream"));
    if (ok && rq->api_key && rq->api_key[0]) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", rq->api_key);
        ok = (h->headers = curl_slist_append(h->headers, auth));
    }
    if (!ok) return lpx_errorf(LPX_ERR_NOMEM, "%s: headers", rq->url);
    CURL *c = h->c;
    curl_easy_reset(c); /* keeps the connection and DNS caches */
    curl_easy_setopt(c, CURLOPT_URL, rq->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(c, CURLOPT_PRIVATE, h);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->errbuf);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (rq->connect_timeout_s > 0)
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(rq->connect_timeout_s * 1000));
    if (rq->timeout_s > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(rq->timeout_s * 1000));
    if (rq->body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, rq->body);
    return LPX_OK;
}

/* Fills h's response from the exchange's result. */
static lpx_status complete(lpx_http *h, CURLcode rc) {
    lpx_http_response *rs = h->rs;
    const char *url = h->rq->url;
    curl_easy_getinfo(h->c, CURLINFO_RESPONSE_CODE, &rs->status);
    if (rc == CURLE_OK) {
        if (!h->rq->on_data && !rs->body && !(rs->body = calloc(1, 1)))
            return lpx_errorf(LPX_ERR_NOMEM, "%s: response", url);
        return LPX_OK;
    }
    rs->timed_out = rc == CURLE_OPERATION_TIMEDOUT;
    if (rs->too_big)
        snprintf(rs->error, sizeof rs->error, "%.300s: answer over %zu bytes", url,
                 h->rq->max_body);
    else
        snprintf(rs->error, sizeof rs->error, "%.300s: %.200s", url,
                 h->errbuf[0] ? h->errbuf : curl_easy_strerror(rc));
    return lpx_errorf(LPX_ERR_IO, "%s", rs->error);
}

lpx_status lpx_http_do(lpx_http *h, const lpx_http_request *rq, lpx_http_response *rs) {
    LPX_TRY(setup(h, rq, rs));
    return complete(h, curl_easy_perform(h->c));
}

lpx_status lpx_http_fetch(const lpx_http_request *rq, lpx_http_response *rs) {
    lpx_http *h;
    memset(rs, 0, sizeof *rs);
    LPX_TRY(lpx_http_create(&h));
    lpx_status st = lpx_http_do(h, rq, rs);
    lpx_http_destroy(h);
    return st;
}

lpx_status lpx_http_multi_create(lpx_http_multi **out) {
    lpx_http_multi *m = calloc(1, sizeof *m);
    if (m) m->m = curl_multi_init();
    if (!m || !m->m) {
        free(m);
        return lpx_errorf(LPX_ERR_NOMEM, "curl_multi_init failed");
    }
    *out = m;
    return LPX_OK;
}

void lpx_http_multi_destroy(lpx_http_multi *m) {
    if (!m) return;
    curl_multi_cleanup(m->m);
    free(m);
}

lpx_status lpx_http_multi_add(lpx_http_multi *m, lpx_http *h, const lpx_http_request *rq,
                              lpx_http_response *rs) {
    LPX_TRY(setup(h, rq, rs));
    if (curl_multi_add_handle(m->m, h->c) != CURLM_OK)
        return lpx_errorf(LPX_ERR_INTERNAL, "%s: curl_multi_add_handle failed", rq->url);
    h->in = m;
    return LPX_OK;
}

lpx_status lpx_http_multi_wait(lpx_http_multi *m, double timeout_s) {
    int running;
    CURLMcode mc = curl_multi_perform(m->m, &running);
    if (mc == CURLM_OK) mc = curl_multi_poll(m->m, NULL, 0, (int)(timeout_s * 1000), NULL);
    if (mc == CURLM_OK) mc = curl_multi_perform(m->m, &running);
    if (mc != CURLM_OK)
        return lpx_errorf(LPX_ERR_INTERNAL, "curl multi: %s", curl_multi_strerror(mc));
    return LPX_OK;
}

lpx_http *lpx_http_multi_done(lpx_http_multi *m, lpx_status *st) {
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m->m, &left))) {
        if (msg->msg != CURLMSG_DONE) continue;
        CURL *c = msg->easy_handle;
        CURLcode rc = msg->data.result;
        lpx_http *h = NULL;
        curl_easy_getinfo(c, CURLINFO_PRIVATE, (char **)&h);
        curl_multi_remove_handle(m->m, c);
        h->in = NULL;
        *st = complete(h, rc);
        return h;
    }
    return NULL;
}
