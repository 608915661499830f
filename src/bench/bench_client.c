/* The load generator's client for lpx bench serve (base/http_client.h's multi interface): streaming
 * requests with incremental SSE parsing, Poisson arrivals, a concurrency cap and periodic /metrics
 * scrapes. */
#include "bench/bench_client.h"

#include "base/checked.h"
#include "base/error.h"
#include "base/http_client.h"
#include "telemetry/prom_text.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A single SSE line longer than this is a broken server, not a token chunk. */
#define MAX_LINE (1 << 20)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double bench_rand(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static bool buf_add(buf *b, const char *d, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

/* The base URL with path; false (an error set) when it does not fit. */
static bool url_of(const bench_target *t, const char *path, char *out, size_t cap) {
    return lpx_http_url(out, cap, t->url, path) ||
           (lpx_errorf(LPX_ERR_INVALID_ARG, "URL %s%s too long", t->url, path), false);
}

lpx_status bench_http(const bench_target *t, const char *path, const char *body, char **out,
                      long *status) {
    *out = NULL;
    *status = 0;
    char url[1024];
    if (!url_of(t, path, url, sizeof url)) return LPX_ERR_INVALID_ARG;
    lpx_http_request rq = {
        .url = url, .body = body, .api_key = t->api_key, .timeout_s = t->timeout_s};
    lpx_http_response rs;
    lpx_status st = lpx_http_fetch(&rq, &rs);
    *status = rs.status;
    if (st == LPX_OK)
        *out = rs.body;
    else
        lpx_http_response_free(&rs);
    return st;
}

lpx_status bench_parse_metrics(const char *text, double t, bench_run *run) {
    for (const char *l = text; *l;) {
        const char *eol = strchr(l, '\n');
        if (!eol) eol = l + strlen(l);
        lpx_prom_sample ps;
        if (lpx_prom_line(l, eol, &ps) && ps.has_value && ps.name_len > 8 &&
            strncmp(l, "lpx:gpu_", 8) == 0) {
            if (run->n_samples == run->cap_samples) {
                size_t cap = run->cap_samples ? run->cap_samples * 2 : 64;
                bench_sample *s = realloc(run->samples, cap * sizeof *s);
                if (!s) return lpx_errorf(LPX_ERR_NOMEM, "metrics samples: out of memory");
                run->samples = s;
                run->cap_samples = cap;
            }
            bench_sample *s = &run->samples[run->n_samples++];
            s->t = t;
            snprintf(s->name, sizeof s->name, "%.*s", (int)ps.series_len, l);
            s->value = ps.value;
        }
        l = *eol ? eol + 1 : eol;
    }
    return LPX_OK;
}

/* One streaming request in flight. */
typedef struct flight {
    lpx_http *h; /* NULL when not in flight */
    lpx_http_request rq;
    lpx_http_response rs;
    char url[1024];
    char *body;
    buf line; /* bytes of the SSE line being received */
    buf raw;  /* the start of a non-SSE body (an error), for the message */
    bench_req *r;
    double t_start; /* absolute */
    bool done, chat;
    bool overflow;
} flight;

static void fail(bench_req *r, const char *why) {
    if (r->ok || !r->error[0]) {
        r->ok = false;
        snprintf(r->error, sizeof r->error, "%s", why);
    }
}

static bool add_chunk(bench_req *r, double t) {
    if (r->n_chunks == r->cap_chunks) {
        int64_t cap = r->cap_chunks ? r->cap_chunks * 2 : 64;
        double *p = realloc(r->chunk_times, (size_t)cap * sizeof *p);
        if (!p) return false;
        r->chunk_times = p;
        r->cap_chunks = cap;
    }
    r->chunk_times[r->n_chunks++] = t;
    return true;
}

static void on_event(flight *f, const char *data) {
    double t = now_s() - f->t_start;
    bench_req *r = f->r;
    if (strcmp(data, "[DONE]") == 0) {
        f->done = true;
        r->e2e = t;
        return;
    }
    cJSON *j = cJSON_Parse(data);
    if (!j) {
        fail(r, "stream: an event that is not JSON");
        return;
    }
    cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (err) {
        cJSON *m = cJSON_GetObjectItemCaseSensitive(err, "message");
        char why[160];
        snprintf(why, sizeof why, "stream error: %s",
                 cJSON_IsString(m) ? m->valuestring : "(no message)");
        fail(r, why);
    }
    cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "choices");
    if (cJSON_IsArray(ch) && cJSON_GetArraySize(ch) > 0) {
        cJSON *c0 = cJSON_GetArrayItem(ch, 0), *text;
        if (f->chat)
            text = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "delta"),
                                                    "content");
        else
            text = cJSON_GetObjectItemCaseSensitive(c0, "text");
        /* A chunk with text is a token's arrival; the chat stream's opening role
         * delta carries none. */
        if (cJSON_IsString(text) && text->valuestring[0]) {
            if (r->n_chunks == 0) r->ttft = t;
            if (!add_chunk(r, t)) fail(r, "out of memory");
        }
    }
    cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    if (cJSON_IsObject(u)) {
        cJSON *p = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
        cJSON *c = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
        if (cJSON_IsNumber(p)) r->input_tokens = (int64_t)p->valuedouble;
        if (cJSON_IsNumber(c)) r->output_tokens = (int64_t)c->valuedouble;
    }
    cJSON_Delete(j);
}

static void on_line(flight *f, char *s, size_t n) {
    if (n > 0 && s[n - 1] == '\r') s[--n] = 0;
    if (n < 5 || strncmp(s, "data:", 5) != 0)
        return; /* blank separators, ": comments", event:/id: fields */
    s += 5;
    if (*s == ' ') s++;
    on_event(f, s);
}

static bool on_stream(void *ud, const char *d, size_t n) {
    flight *f = ud;
    if (f->raw.len < 512) buf_add(&f->raw, d, n < 512 ? n : 512);
    for (size_t i = 0; i < n; i++) {
        if (d[i] == '\n') {
            if (f->line.p) {
                on_line(f, f->line.p, f->line.len);
                f->line.len = 0;
            }
        } else if (f->line.len < MAX_LINE) {
            if (!buf_add(&f->line, d + i, 1)) return false;
        } else {
            f->overflow = true;
        }
    }
    return true;
}

static char *request_body(const bench_target *t, const bench_work *w) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", t->model);
    if (t->chat) {
        cJSON *msgs = cJSON_AddArrayToObject(j, "messages");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", w->prompt);
        cJSON_AddItemToArray(msgs, m);
    } else {
        cJSON_AddStringToObject(j, "prompt", w->prompt);
    }
    cJSON_AddNumberToObject(j, "max_tokens", (double)w->output_len);
    cJSON_AddNumberToObject(j, "temperature", 0);
    cJSON_AddBoolToObject(j, "ignore_eos", 1);
    cJSON_AddBoolToObject(j, "stream", 1);
    cJSON *so = cJSON_AddObjectToObject(j, "stream_options");
    cJSON_AddBoolToObject(so, "include_usage", 1);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

static lpx_status start(lpx_http_multi *m, const bench_target *t, const bench_work *w, flight *f,
                        bench_req *r, double t0) {
    memset(f, 0, sizeof *f);
    f->r = r;
    f->chat = t->chat;
    r->expected_input = w->input_len;
    r->expected_output = w->output_len;
    f->body = request_body(t, w);
    if (!f->body) return lpx_errorf(LPX_ERR_NOMEM, "request %p: out of memory", (void *)r);
    if (!url_of(t, t->chat ? "/v1/chat/completions" : "/v1/completions", f->url, sizeof f->url))
        return LPX_ERR_INVALID_ARG;
    LPX_TRY(lpx_http_create(&f->h));
    f->rq = (lpx_http_request){.url = f->url,
                               .body = f->body,
                               .api_key = t->api_key,
                               .sse = true,
                               .timeout_s = t->timeout_s,
                               .on_data = on_stream,
                               .user = f};
    f->t_start = now_s();
    r->start = f->t_start - t0;
    return lpx_http_multi_add(m, f->h, &f->rq, &f->rs);
}

/* st: the exchange's status (LPX_OK: a response arrived). */
static void finish(flight *f, lpx_status st) {
    bench_req *r = f->r;
    long status = f->rs.status;
    r->http_status = (int)status;
    r->ok = true;
    if (f->line.len) on_line(f, f->line.p, f->line.len); /* a last line without its newline */
    if (st != LPX_OK) {
        r->ok = false;
        snprintf(r->error, sizeof r->error, "%.*s", (int)sizeof r->error - 1,
                 f->rs.error[0] ? f->rs.error : lpx_last_error());
    } else if (status != 200) {
        char why[160];
        snprintf(why, sizeof why, "HTTP %ld: %.120s", status, f->raw.p ? f->raw.p : "");
        for (char *p = why; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
        r->ok = false;
        snprintf(r->error, sizeof r->error, "%s", why);
    } else if (f->overflow) {
        fail(r, "stream: a line over 1 MiB");
    } else if (!f->done) {
        fail(r, "stream ended without [DONE]");
    } else if (r->n_chunks == 0) {
        fail(r, "no tokens in the stream");
    }
    if (r->error[0]) r->ok = false;
    if (r->ok) {
        if (r->output_tokens == 0)
            r->output_tokens = r->n_chunks; /* no usage chunk: one token per chunk */
        if (r->input_tokens == 0) r->input_tokens = r->expected_input;
    }
    lpx_http_destroy(f->h);
    free(f->body);
    free(f->line.p);
    free(f->raw.p);
    f->h = NULL;
}

void bench_run_free(bench_run *run) {
    if (run->reqs)
        for (size_t i = 0; i < run->n; i++)
            free(run->reqs[i].chunk_times);
    free(run->reqs);
    free(run->samples);
    memset(run, 0, sizeof *run);
}

lpx_status bench_run_workload(const bench_target *t, const bench_work *w, size_t n,
                              const bench_run_opts *o, bench_run *run) {
    memset(run, 0, sizeof *run);
    run->reqs = calloc(n ? n : 1, sizeof *run->reqs);
    double *arrive = calloc(n ? n : 1, sizeof *arrive);
    flight *fl = calloc(n ? n : 1, sizeof *fl);
    lpx_http_multi *m = NULL;
    lpx_http *mh = NULL; /* the /metrics scrape */
    lpx_http_request mrq = {.timeout_s = 5};
    lpx_http_response mrs = {0};
    char murl[1024];
    bool scraping = false;
    lpx_status st = LPX_OK;
    if (!run->reqs || !arrive || !fl) {
        st = lpx_errorf(LPX_ERR_NOMEM, "%zu requests: out of memory", n);
        goto out;
    }
    if ((st = lpx_http_multi_create(&m)) != LPX_OK) goto out;
    if (o->scrape_interval > 0) {
        if (!url_of(t, "/metrics", murl, sizeof murl)) {
            st = LPX_ERR_INVALID_ARG;
            goto out;
        }
        mrq.url = murl;
        if ((st = lpx_http_create(&mh)) != LPX_OK) goto out;
    }
    run->n = n;
    /* Poisson process: exponential gaps of mean 1/rate, as vLLM's benchmark. */
    uint64_t rng = o->seed;
    double at = 0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(o->rate) && o->rate > 0) at += -log(1.0 - bench_rand(&rng)) / o->rate;
        arrive[i] = at;
    }
    size_t cap = o->max_concurrency > 0 ? (size_t)o->max_concurrency : n;
    size_t next = 0, active = 0, done = 0;
    double t0 = now_s(), next_scrape = 0, scrape_t = 0;
    while (done < n) {
        double now = now_s() - t0;
        while (next < n && active < cap && arrive[next] <= now) {
            st = start(m, t, &w[next], &fl[next], &run->reqs[next], t0);
            if (st != LPX_OK) goto out;
            next++;
            active++;
        }
        if (mh && !scraping && now >= next_scrape) {
            scraping = lpx_http_multi_add(m, mh, &mrq, &mrs) == LPX_OK;
            scrape_t = now;
            next_scrape = now + o->scrape_interval;
        }
        lpx_http *h;
        lpx_status hst;
        while ((h = lpx_http_multi_done(m, &hst))) {
            if (h == mh) {
                if (hst == LPX_OK && mrs.status == 200)
                    st = bench_parse_metrics(mrs.body, scrape_t, run);
                lpx_http_response_free(&mrs);
                scraping = false;
                if (st != LPX_OK) goto out;
                continue;
            }
            size_t i = 0;
            while (fl[i].h != h)
                i++;
            finish(&fl[i], hst);
            active--;
            done++;
        }
        if (done == n) break;
        /* Sleep until data arrives, the next arrival may start or a scrape is due. */
        double wait = 0.1;
        now = now_s() - t0;
        if (next < n && active < cap) wait = fmin(wait, fmax(0.0, arrive[next] - now));
        if (mh && !scraping) wait = fmin(wait, fmax(0.0, next_scrape - now));
        if ((st = lpx_http_multi_wait(m, wait)) != LPX_OK) goto out;
    }
    run->duration = now_s() - t0;
out:
    lpx_http_destroy(mh);
    lpx_http_response_free(&mrs);
    if (st != LPX_OK && fl)
        for (size_t i = 0; i < n; i++)
            if (fl[i].h) {
                snprintf(fl[i].rs.error, sizeof fl[i].rs.error, "aborted");
                finish(&fl[i], LPX_ERR_IO);
            }
    lpx_http_multi_destroy(m);
    free(fl);
    free(arrive);
    if (st != LPX_OK) bench_run_free(run);
    return st;
}
