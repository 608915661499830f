#include "doctor/server_scrape.h"

#include "base/error.h"

#include <curl/curl.h>
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

/* Label values may hold '}' and escaped quotes. Returns the end of the labels (or of
 * the name), NULL when they do not close before the end of the line. */
static const char *skip_labels(const char *p, const char *end) {
    if (p == end || *p != '{') return p;
    bool quoted = false;
    for (p++; p < end; p++) {
        if (quoted && *p == '\\')
            p++;
        else if (*p == '"')
            quoted = !quoted;
        else if (!quoted && *p == '}')
            return p + 1;
    }
    return NULL;
}

bool lpx_scrape_line(const char *line, const char *eol, lpx_scrape_sample *out) {
    if (line == eol || *line == '#') return false;
    size_t name_len = strcspn(line, "{ \t\n");
    if (name_len > (size_t)(eol - line)) name_len = (size_t)(eol - line);
    const char *p = skip_labels(line + name_len, eol);
    if (!p) return false;
    char *num_end;
    double v = strtod(p, &num_end);
    *out = (lpx_scrape_sample){.name_len = name_len,
                               .series_len = (size_t)(p - line),
                               .has_value = num_end != p && num_end <= eol,
                               .value = v};
    return true;
}

lpx_status lpx_scrape_parse(const char *text, lpx_scrape *s) {
    memset(s, 0, sizeof *s);
    bool seen[N_WANTED] = {false};
    for (const char *l = text; *l;) {
        const char *eol = strchr(l, '\n');
        if (!eol) eol = l + strlen(l);
        lpx_scrape_sample ps;
        const bool sample = lpx_scrape_line(l, eol, &ps);
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

typedef struct body {
    char *p;
    size_t n;
    bool too_big;
} body;

/* An lpx /metrics body is ~10 kB; anything far larger is not one. */
#define MAX_BODY (4u << 20)

static size_t on_body(char *data, size_t size, size_t nmemb, void *user) {
    body *b = user;
    size_t k = size * nmemb;
    if (b->n + k > MAX_BODY) {
        b->too_big = true;
        return 0;
    }
    char *p = realloc(b->p, b->n + k + 1);
    if (!p) return 0;
    memcpy(p + b->n, data, k);
    b->p = p;
    b->n += k;
    p[b->n] = '\0';
    return k;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

lpx_status lpx_scrape_fetch(const char *metrics_url, double timeout_s, lpx_scrape *s) {
    CURL *c = curl_easy_init();
    if (!c) return lpx_errorf(LPX_ERR_NOMEM, "%s: curl_easy_init failed", metrics_url);
    body b = {0};
    char err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, metrics_url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    CURLcode rc = curl_easy_perform(c);
    long http = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
    curl_easy_cleanup(c);
    lpx_status st = LPX_OK;
    if (b.too_big)
        st = lpx_errorf(LPX_ERR_FORMAT, "%s: answer over %u MiB: this is not an lpx server",
                        metrics_url, MAX_BODY >> 20);
    else if (rc != CURLE_OK)
        st = lpx_errorf(LPX_ERR_IO, "%s: %s", metrics_url, err[0] ? err : curl_easy_strerror(rc));
    else if (http != 200)
        st = lpx_errorf(LPX_ERR_IO, "%s: HTTP %ld: is it an lpx server (lpx serve)?", metrics_url,
                        http);
    else if ((st = lpx_scrape_parse(b.p ? b.p : "", s)) != LPX_OK)
        lpx_error_wrap(st, "%s", metrics_url);
    else
        s->t = now_s();
    free(b.p);
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
