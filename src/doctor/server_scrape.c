#include "doctor/server_scrape.h"

#include "base/error.h"
#include "base/http_client.h"
#include "telemetry/prom_text.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

lpx_status lpx_scrape_metrics_url(const char *url, char *out, size_t cap) {
    if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "--url '%s': expected http://HOST:PORT of a running lpx serve", url);
    size_t n = strlen(url);
    while (n && url[n - 1] == '/')
        n--;
    const char *suffix = "/metrics";
    if (n >= 8 && !strncmp(url + n - 8, suffix, 8)) suffix = "";
    if ((size_t)snprintf(out, cap, "%.*s%s", (int)n, url, suffix) >= cap)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "--url '%s': too long", url);
    return LPX_OK;
}

/* The series monitor reads; `required` ones are in every lpx server's /metrics. */
typedef struct series {
    const char *name;
    size_t offset; /* of the double in lpx_scrape */
    bool required;
} series;

static const series wanted[] = {
    {"lpx:generation_tokens_total", offsetof(lpx_scrape, generation_tokens), true},
    {"lpx:prompt_tokens_total", offsetof(lpx_scrape, prompt_tokens), true},
    {"lpx:num_requests_running", offsetof(lpx_scrape, running), true},
    {"lpx:num_requests_waiting", offsetof(lpx_scrape, waiting), true},
    {"lpx:kv_cache_usage_perc", offsetof(lpx_scrape, kv_usage), true},
    {"lpx:kv_cache_blocks_used", offsetof(lpx_scrape, kv_blocks_used), false},
    {"lpx:kv_cache_blocks_total", offsetof(lpx_scrape, kv_blocks_total), false},
};
#define N_WANTED (sizeof wanted / sizeof wanted[0])

lpx_status lpx_scrape_parse(const char *text, lpx_scrape *s) {
    memset(s, 0, sizeof *s);
    bool seen[N_WANTED] = {false};
    for (const char *l = text; *l;) {
        const char *eol = strchr(l, '\n');
        if (!eol) eol = l + strlen(l);
        lpx_prom_sample ps;
        const bool sample = lpx_prom_line(l, eol, &ps);
        for (size_t k = 0; sample && k < N_WANTED; k++) {
            if (strlen(wanted[k].name) != ps.name_len || strncmp(l, wanted[k].name, ps.name_len))
                continue;
            if (!ps.has_value)
                return lpx_errorf(LPX_ERR_FORMAT, "%s has no number: '%.*s'", wanted[k].name,
                                  (int)(eol - l), l);
            *(double *)((char *)s + wanted[k].offset) += ps.value;
            seen[k] = true;
        }
        l = *eol ? eol + 1 : eol;
    }
    for (size_t k = 0; k < N_WANTED; k++) {
        if (!seen[k] && wanted[k].required)
            return lpx_errorf(LPX_ERR_FORMAT,
                              "no %s series in the answer: this is not an lpx server",
                              wanted[k].name);
        if (!seen[k]) *(double *)((char *)s + wanted[k].offset) = -1;
    }
    return LPX_OK;
}

#define MAX_BODY (4u << 20)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

lpx_status lpx_scrape_fetch(const char *metrics_url, double timeout_s, lpx_scrape *s) {
    lpx_http_request rq = {.url = metrics_url, .timeout_s = timeout_s, .max_body = MAX_BODY};
    lpx_http_response rs;
    lpx_status st = lpx_http_fetch(&rq, &rs);
    if (rs.too_big)
        st = lpx_errorf(LPX_ERR_FORMAT, "%s: answer over %u MiB: this is not an lpx server",
                        metrics_url, MAX_BODY >> 20);
    else if (st != LPX_OK)
        ;
    else if (rs.status != 200)
        st = lpx_errorf(LPX_ERR_IO, "%s: HTTP %ld: is it an lpx server (lpx serve)?", metrics_url,
                        rs.status);
    else if ((st = lpx_scrape_parse(rs.body, s)) != LPX_OK)
        lpx_error_wrap(st, "%s", metrics_url);
    else
        s->t = now_s();
    lpx_http_response_free(&rs);
    return st;
}

bool lpx_scrape_rates(const lpx_scrape *prev, const lpx_scrape *cur, double *gen_tok_s,
                      double *prompt_tok_s) {
    double dt = cur->t - prev->t;
    if (!(dt > 0) || cur->generation_tokens < prev->generation_tokens ||
        cur->prompt_tokens < prev->prompt_tokens)
        return false;
    *gen_tok_s = (cur->generation_tokens - prev->generation_tokens) / dt;
    *prompt_tok_s = (cur->prompt_tokens - prev->prompt_tokens) / dt;
    return true;
}
