/* lpx batch: resumable batch jobs over the in-process engine or an
 * OpenAI-compatible server; lpx batch merge combines shard outputs.
 * docs/batch.md has the formats, the guarantees and the thresholds. */
#include "batch/input.h"
#include "base/checked.h"
#include "base/error.h"
#include "base/readall.h"
#include "batch/quality.h"
#include "cli/cli_num.h"
#include "cli/commands.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted; /* SIGINT count */
static void on_sigint(int sig) {
    (void)sig;
    interrupted++;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- options -------------------------------------------------------------- */

typedef struct batch_opts {
    const char *input, *outdir, *model, *server, *api_key, *device;
    int32_t concurrency; /* 0 = auto */
    double timeout_s;    /* 0 = none */
    int32_t retries;
    bool resume;
    int32_t shard_k, shard_n; /* shard_n 0 = no sharding */
    int32_t max_tokens, threads, ctx;
    double temperature, top_p;
    int64_t seed; /* < 0: per-id seed */
    int64_t kv_bytes;
    lpx_bq_opts quality;
} batch_opts;

/* Owned strings; sorted, membership is a bsearch. */
typedef struct strvec {
    char **v;
    size_t n, cap;
} strvec;

/* ---- per-task state ------------------------------------------------------- */

enum { OUT_OK, OUT_RETRY, OUT_FAIL };

typedef struct outcome {
    int kind;
    char *text; /* generated text (engine mode) */
    size_t n_text, cap_text;
    char finish[16];
    int64_t prompt_tokens, completion_tokens;
    cJSON *body; /* server mode: the response body as received */
    char error[512];
} outcome;

typedef struct slot {
    struct job *job;
    size_t task; /* index into job->in.tasks */
    int32_t attempts;
    double t_submit, not_before;
    uint64_t eng_id;
    bool timed_out;
    bool failed_before; /* counted in n_failed: a failure record and no result */
    outcome out;
} slot;

typedef struct job {
    batch_opts o;
    lpx_batch_input in;
    lpx_model *model;
    lpx_engine *eng;
    char model_name[256];
    int results_fd, failures_fd, log_fd;

    slot *slots;
    size_t n_slots;
    size_t *ready; /* slot indices waiting to be sent, FIFO with retry times */
    size_t n_ready;
    size_t inflight;

    pthread_mutex_t mu;
    pthread_cond_t cv;      /* main thread: an outcome arrived */
    pthread_cond_t cv_send; /* server workers: work arrived or stop */
    size_t *doneq, n_doneq; /* guarded by mu */
    size_t *sendq, n_sendq; /* guarded by mu (server mode) */
    bool stop_workers;

    /* OUTDIR as found: ids with a result, ids with a failure record, and
     * input-check rejections (reject_key); sorted */
    strvec done, failed, rejects;
    /* totals over all results, previous runs included */
    int64_t n_invalid; /* input-check rejections of this job (shard) */
    int64_t n_results, n_failed, prompt_tokens, completion_tokens, run_tokens, run_done;
    int64_t flag_counts[LPX_BQ_COUNT];
    double *lat; /* latency (ms) of every result */
    size_t n_lat, cap_lat;
    int64_t n_skipped_resume;
    int64_t n_unmerged; /* merge: torn or unreadable lines left out (records not done) */
    int64_t total;      /* lines of this job (shard), rejected ones included */
    double t_start;
    /* the last progress line: when (0: none yet) and the counts it showed */
    double shown_t;
    int64_t shown_done, shown_failed;
} job;

/* ---- files ---------------------------------------------------------------- */

static void logf_(job *j, const char *fmt, ...) LPX_PRINTF(2, 3);
static void logf_(job *j, const char *fmt, ...) {
    if (j->log_fd < 0) return;
    char buf[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    int n = (int)strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(buf + n, sizeof buf - (size_t)n, ".%03dZ ", (int)(tv.tv_usec / 1000));
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    n = m < 0 ? n : n + m >= (int)sizeof buf - 1 ? (int)sizeof buf - 2 : n + m;
    buf[n++] = '\n';
    if (write(j->log_fd, buf, (size_t)n) < 0) return;
}

/* Appends one JSON line with a single write and syncs it: once this returns
 * true the record survives a kill (a torn tail is dropped on --resume). */
static bool append_line(int fd, const cJSON *rec) {
    char *s = cJSON_PrintUnformatted(rec);
    if (!s) return false;
    size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (!line) {
        free(s);
        return false;
    }
    line[n] = '\n';
    size_t off = 0;
    while (off < n + 1) {
        ssize_t w = write(fd, line + off, n + 1 - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            free(line);
            return false;
        }
        off += (size_t)w;
    }
    free(line);
    return fsync(fd) == 0;
}

/* An OUTDIR file is read whole on --resume and merge; results of a very
 * large job stay far below this. */
#define MAX_OUT_FILE ((size_t)16 << 30)

/* Seeds travel as JSON numbers (doubles): integers up to 2^53 are exact. */
#define MAX_JSON_INT ((int64_t)1 << 53)

/* ---- results bookkeeping ---------------------------------------------------- */

static void add_latency(job *j, double ms) {
    if (j->n_lat == j->cap_lat) {
        size_t nc = j->cap_lat ? 2 * j->cap_lat : 256;
        double *l = realloc(j->lat, nc * sizeof *l);
        if (!l) return;
        j->lat = l;
        j->cap_lat = nc;
    }
    j->lat[j->n_lat++] = ms;
}

/* Counts one result record's tokens, flags and latency into the totals. */
static void account(job *j, const cJSON *rec) {
    j->n_results++;
    const cJSON *resp = cJSON_GetObjectItemCaseSensitive(rec, "response");
    const cJSON *body = cJSON_GetObjectItemCaseSensitive(resp, "body");
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(body, "usage");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
    if (cJSON_IsNumber(pt)) j->prompt_tokens += (int64_t)pt->valuedouble;
    if (cJSON_IsNumber(ct)) j->completion_tokens += (int64_t)ct->valuedouble;
    const cJSON *lpx = cJSON_GetObjectItemCaseSensitive(rec, "lpx");
    const cJSON *lat = cJSON_GetObjectItemCaseSensitive(lpx, "latency_ms");
    if (cJSON_IsNumber(lat)) add_latency(j, lat->valuedouble);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(lpx, "quality"), *f;
    cJSON_ArrayForEach(f, q) {
        for (int b = 0; b < LPX_BQ_COUNT; b++)
            if (cJSON_IsString(f) && !strcmp(f->valuestring, lpx_bq_flag_name(b)))
                j->flag_counts[b]++;
    }
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool strvec_push(strvec *s, const char *str) {
    if (s->n == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 256, bytes;
        char **v = lpx_mul_size(nc, sizeof *v, &bytes) ? realloc(s->v, bytes) : NULL;
        if (!v) return false;
        s->v = v;
        s->cap = nc;
    }
    char *c = strdup(str);
    if (!c) return false;
    s->v[s->n++] = c;
    return true;
}

static void strvec_sort_unique(strvec *s) {
    if (!s->n) return;
    qsort(s->v, s->n, sizeof *s->v, cmp_str);
    size_t k = 1;
    for (size_t i = 1; i < s->n; i++) {
        if (strcmp(s->v[i], s->v[k - 1]))
            s->v[k++] = s->v[i];
        else
            free(s->v[i]);
    }
    s->n = k;
}

static bool strvec_has(const strvec *s, const char *str) {
    return s->n && bsearch(&str, s->v, s->n, sizeof *s->v, cmp_str);
}

static void strvec_free(strvec *s) {
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* Receives one record of an OUTDIR file; keeps it by taking *rec (setting it
 * to NULL). False stops the reading, with the reason in lpx_last_error(). */
typedef bool (*record_fn)(void *user, cJSON **rec);

/* Calls fn on each whole line of path, in order. A last line without its
 * newline is a write cut by a kill. On --resume (truncate_torn) it is logged
 * and the file is cut back to its whole lines, so later appends stay whole;
 * its id has no record and runs again. Merge (!truncate_torn) never changes
 * a DIR: a torn or unreadable line stays where it is, stderr says where, and
 * it counts in j->n_unmerged (a record not done). A missing file has no
 * lines. */
static bool read_records(job *j, const char *path, bool truncate_torn, record_fn fn, void *user) {
    if (access(path, F_OK) != 0 && errno == ENOENT) return true;
    char *buf;
    size_t len, start = 0;
    if (lpx_read_file(path, MAX_OUT_FILE, &buf, &len) != LPX_OK) return false;
    bool ok = true;
    while (ok && start < len) {
        char *nl = memchr(buf + start, '\n', len - start);
        size_t n = nl ? (size_t)(nl - buf) - start : len - start;
        cJSON *rec = nl ? cJSON_ParseWithLength(buf + start, n) : NULL;
        if (rec) {
            ok = fn(user, &rec);
        } else if (!truncate_torn && n) {
            j->n_unmerged++;
            fprintf(stderr,
                    "lpx batch: merge: %s: %s at byte %zu (%zu bytes) not merged, left there; "
                    "it counts as remaining (--resume redoes its id)\n",
                    path, nl ? "an unreadable line" : "a torn last line (a write cut by a kill)",
                    start, n);
        } else if (!nl) {
            logf_(j, "dropping a torn last line of %zu bytes in %s", n, path);
            if (truncate(path, (off_t)start) != 0) {
                lpx_errorf(LPX_ERR_IO, "%s: cannot truncate a torn last line: %s", path,
                           strerror(errno));
                ok = false;
            }
        } else if (n) {
            logf_(j, "ignoring an unreadable line at byte %zu of %s", start, path);
        }
        cJSON_Delete(rec);
        start += n + 1;
    }
    free(buf);
    return ok;
}

static double num(const cJSON *b, const char *k, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *str_item(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A result: its id is done, its tokens, latency and flags count. */
static bool on_result(void *user, cJSON **rec) {
    job *j = user;
    const char *id = str_item(*rec, "custom_id");
    if (!id) return true;
    if (!strvec_push(&j->done, id))
        return lpx_errorf(LPX_ERR_NOMEM, "results: out of memory"), false;
    account(j, *rec);
    return true;
}

/* The identity of an input-check failure: its line, id and reason. */
static char *reject_key(int64_t line, const char *id, const char *error) {
    size_t n = strlen(id ? id : "") + strlen(error) + 48;
    char *k = malloc(n);
    if (k) snprintf(k, n, "%lld\x1f%s\x1f%s", (long long)line, id ? id : "", error);
    return k;
}

/* A failure record: an input-check rejection (attempts 0) or an id whose
 * attempts ran out in some run. */
static bool on_failure(void *user, cJSON **rec) {
    job *j = user;
    const cJSON *att = cJSON_GetObjectItemCaseSensitive(*rec, "attempts");
    const char *id = str_item(*rec, "custom_id"), *err = str_item(*rec, "error");
    bool ok = true;
    if (cJSON_IsNumber(att) && att->valuedouble == 0) {
        char *k = reject_key((int64_t)num(*rec, "line", 0), id, err ? err : "");
        ok = k && strvec_push(&j->rejects, k);
        free(k);
    } else if (id) {
        ok = strvec_push(&j->failed, id);
    }
    return ok || (lpx_errorf(LPX_ERR_NOMEM, "failures: out of memory"), false);
}

/* Failed entries of OUTDIR: every input-check rejection, and every id with a
 * failure record and no result (an id that failed once and later succeeded
 * is not failed). The sets must be sorted. */
static int64_t count_failed(const job *j) {
    int64_t n = (int64_t)j->rejects.n;
    for (size_t i = 0; i < j->failed.n; i++)
        n += !strvec_has(&j->done, j->failed.v[i]);
    return n;
}

/* ---- requests --------------------------------------------------------------- */

/* The body as sent: the line's body with the command line's defaults for
 * what it leaves out. The default seed derives from the id, so a resumed or
 * re-run job samples the same tokens. */
static cJSON *effective_body(const job *j, const lpx_batch_task *t) {
    cJSON *b = cJSON_Duplicate(t->body, 1);
    if (!b) return NULL;
    if (!cJSON_GetObjectItemCaseSensitive(b, "max_tokens") &&
        !cJSON_GetObjectItemCaseSensitive(b, "max_completion_tokens"))
        cJSON_AddNumberToObject(b, "max_tokens", j->o.max_tokens);
    if (!cJSON_GetObjectItemCaseSensitive(b, "temperature"))
        cJSON_AddNumberToObject(b, "temperature", j->o.temperature);
    if (!cJSON_GetObjectItemCaseSensitive(b, "top_p"))
        cJSON_AddNumberToObject(b, "top_p", j->o.top_p);
    if (!cJSON_GetObjectItemCaseSensitive(b, "seed")) {
        int64_t seed = j->o.seed >= 0 ? j->o.seed : lpx_batch_shard_of(t->id, INT32_MAX);
        cJSON_AddNumberToObject(b, "seed", (double)seed);
    }
    if (!cJSON_GetObjectItemCaseSensitive(b, "model") && j->model_name[0])
        cJSON_AddStringToObject(b, "model", j->model_name);
    return b;
}

/* ---- engine mode ------------------------------------------------------------ */

static void on_event(const lpx_event *ev, void *user) {
    slot *s = user;
    outcome *o = &s->out;
    if (ev->text_len) {
        if (o->n_text + ev->text_len + 1 > o->cap_text) {
            size_t nc = 2 * (o->n_text + ev->text_len + 1);
            char *t = realloc(o->text, nc);
            if (t) {
                o->text = t;
                o->cap_text = nc;
            }
        }
        if (o->n_text + ev->text_len + 1 <= o->cap_text) {
            memcpy(o->text + o->n_text, ev->text, ev->text_len);
            o->n_text += ev->text_len;
            o->text[o->n_text] = '\0';
        }
    }
    if (!ev->finish) return;
    snprintf(o->finish, sizeof o->finish, "%s", lpx_finish_reason_name(ev->finish));
    o->prompt_tokens = ev->n_prompt_tokens;
    o->completion_tokens = ev->n_output_tokens;
    if (ev->finish == LPX_FINISH_STOP || ev->finish == LPX_FINISH_LENGTH) {
        o->kind = OUT_OK;
    } else if (ev->finish == LPX_FINISH_CANCELLED) {
        o->kind = OUT_RETRY;
        snprintf(o->error, sizeof o->error, "%s", s->timed_out ? "timeout" : "cancelled");
    } else {
        o->kind = OUT_RETRY;
        snprintf(o->error, sizeof o->error, "engine error: %s", ev->error ? ev->error : "?");
    }
    job *j = s->job;
    pthread_mutex_lock(&j->mu);
    j->doneq[j->n_doneq++] = (size_t)(s - j->slots);
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Text of one chat message content: a string or text parts joined. */
static char *content_text(const cJSON *c) {
    if (cJSON_IsString(c)) return strdup(c->valuestring);
    size_t n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, c) n += strlen(cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring);
    char *s = malloc(n + 1);
    if (!s) return NULL;
    s[0] = '\0';
    cJSON_ArrayForEach(p, c) strcat(s, cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring);
    return s;
}

/* Submits one attempt to the engine; false with o->error set when refused. */
static bool engine_submit(job *j, slot *s, const cJSON *b) {
    const lpx_batch_task *t = &j->in.tasks[s->task];
    lpx_request r;
    lpx_request_init(&r);
    r.max_tokens = (int32_t)num(b, "max_tokens", num(b, "max_completion_tokens", j->o.max_tokens));
    r.sampling.temperature = (float)num(b, "temperature", 0);
    r.sampling.top_p = (float)num(b, "top_p", 1);
    r.sampling.top_k = (int32_t)num(b, "top_k", 0);
    r.sampling.min_p = (float)num(b, "min_p", 0);
    r.sampling.presence_penalty = (float)num(b, "presence_penalty", 0);
    r.sampling.frequency_penalty = (float)num(b, "frequency_penalty", 0);
    r.sampling.repetition_penalty = (float)num(b, "repetition_penalty", 1);
    r.sampling.seed = (int64_t)num(b, "seed", 0);
    const cJSON *ie = cJSON_GetObjectItemCaseSensitive(b, "ignore_eos");
    r.ignore_eos = cJSON_IsTrue(ie);
    const char *stops[LPX_BATCH_MAX_STOP]; /* the input check allows no more */
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(b, "stop"), *sv;
    if (cJSON_IsString(stop)) {
        stops[r.n_stop++] = stop->valuestring;
    } else {
        cJSON_ArrayForEach(sv, stop) {
            if (r.n_stop < LPX_BATCH_MAX_STOP) stops[r.n_stop++] = sv->valuestring;
        }
    }
    r.stop = stops;
    lpx_chat_message *msgs = NULL;
    size_t n_msgs = 0;
    bool ok = true;
    if (t->chat) {
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(b, "messages"), *m;
        msgs = calloc((size_t)cJSON_GetArraySize(ms) + 1, sizeof *msgs);
        ok = msgs != NULL;
        cJSON_ArrayForEach(m, ms) {
            if (!ok) break;
            msgs[n_msgs].role = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
            msgs[n_msgs].content = content_text(cJSON_GetObjectItemCaseSensitive(m, "content"));
            ok = msgs[n_msgs++].content != NULL;
        }
        r.messages = msgs;
        r.n_messages = n_msgs;
    } else {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "prompt");
        if (cJSON_IsArray(p)) p = cJSON_GetArrayItem(p, 0);
        r.prompt_text = p->valuestring;
    }
    lpx_status st = ok ? lpx_engine_submit(j->eng, &r, on_event, s, &s->eng_id) : LPX_ERR_NOMEM;
    for (size_t i = 0; i < n_msgs; i++)
        free((char *)msgs[i].content);
    free(msgs);
    if (st == LPX_OK) return true;
    s->out.kind = st == LPX_ERR_BUSY || st == LPX_ERR_NOMEM ? OUT_RETRY : OUT_FAIL;
    snprintf(s->out.error, sizeof s->out.error, "%s: %s", lpx_status_name(st),
             ok ? lpx_last_error() : "out of memory");
    return false;
}

/* ---- server mode ------------------------------------------------------------ */

typedef struct membuf {
    char *p;
    size_t n;
} membuf;

static size_t on_data(char *d, size_t sz, size_t nm, void *user) {
    membuf *m = user;
    size_t n = sz * nm;
    char *p = realloc(m->p, m->n + n + 1);
    if (!p) return 0;
    memcpy(p + m->n, d, n);
    m->p = p;
    m->n += n;
    p[m->n] = '\0';
    return n;
}

/* Classifies one HTTP exchange into s->out. */
static void server_exchange(job *j, CURL *c, slot *s, const char *payload) {
    const lpx_batch_task *t = &j->in.tasks[s->task];
    outcome *o = &s->out;
    char url[2048];
    size_t ul = strlen(j->o.server);
    while (ul && j->o.server[ul - 1] == '/')
        ul--;
    snprintf(url, sizeof url, "%.*s%s", (int)ul, j->o.server,
             t->chat ? "/v1/chat/completions" : "/v1/completions");
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    char auth[1024];
    if (j->o.api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", j->o.api_key);
        h = curl_slist_append(h, auth);
    }
    membuf m = {0};
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &m);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (j->o.timeout_s > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(j->o.timeout_s * 1000));
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    if (rc == CURLE_OPERATION_TIMEDOUT) {
        o->kind = OUT_RETRY;
        snprintf(o->error, sizeof o->error, "timeout after %.3g s", j->o.timeout_s);
    } else if (rc != CURLE_OK) {
        o->kind = OUT_RETRY;
        snprintf(o->error, sizeof o->error, "%.300s: %s", url, curl_easy_strerror(rc));
    } else {
        cJSON *body = m.p ? cJSON_Parse(m.p) : NULL;
        const cJSON *choice =
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(body, "choices"), 0);
        if (code == 200 && choice) {
            o->kind = OUT_OK;
            const cJSON *fr = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
            snprintf(o->finish, sizeof o->finish, "%s", cJSON_IsString(fr) ? fr->valuestring : "");
            const cJSON *usage = cJSON_GetObjectItemCaseSensitive(body, "usage");
            o->prompt_tokens = (int64_t)num(usage, "prompt_tokens", 0);
            o->completion_tokens = (int64_t)num(usage, "completion_tokens", 0);
            o->body = body;
            body = NULL;
        } else {
            const char *msg = m.p ? m.p : "";
            const cJSON *err = cJSON_GetObjectItemCaseSensitive(body, "error");
            const cJSON *em = cJSON_GetObjectItemCaseSensitive(err, "message");
            if (cJSON_IsString(em))
                msg = em->valuestring;
            else if (cJSON_IsString(err))
                msg = err->valuestring;
            /* rate limits, overload and server faults pass; a request the
             * server refuses (context length, bad parameters) fails again */
            bool transient = code == 408 || code == 429 || code >= 500 || (code == 200 && !choice);
            o->kind = transient ? OUT_RETRY : OUT_FAIL;
            snprintf(o->error, sizeof o->error, "HTTP %ld: %.400s", code, msg);
        }
        cJSON_Delete(body);
    }
    free(m.p);
}

/* The server's first model id (GET /v1/models), for lines without "model"
 * when no -m names one; "" when the server does not list models. */
static void server_model(job *j) {
    CURL *c = curl_easy_init();
    if (!c) return;
    char url[2048], auth[1024];
    size_t ul = strlen(j->o.server);
    while (ul && j->o.server[ul - 1] == '/')
        ul--;
    snprintf(url, sizeof url, "%.*s/v1/models", (int)ul, j->o.server);
    struct curl_slist *h = NULL;
    if (j->o.api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", j->o.api_key);
        h = curl_slist_append(h, auth);
    }
    membuf m = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &m);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    long code = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    cJSON *r = code == 200 && m.p ? cJSON_Parse(m.p) : NULL;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(r, "data");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(data, 0), "id");
    if (cJSON_IsString(id)) snprintf(j->model_name, sizeof j->model_name, "%s", id->valuestring);
    logf_(j, "server model: %s", j->model_name[0] ? j->model_name : "(none listed)");
    cJSON_Delete(r);
    free(m.p);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
}

static void *server_worker(void *arg) {
    job *j = arg;
    CURL *c = curl_easy_init();
    for (;;) {
        pthread_mutex_lock(&j->mu);
        while (!j->n_sendq && !j->stop_workers)
            pthread_cond_wait(&j->cv_send, &j->mu);
        if (!j->n_sendq) {
            pthread_mutex_unlock(&j->mu);
            break;
        }
        size_t si = j->sendq[0];
        memmove(j->sendq, j->sendq + 1, --j->n_sendq * sizeof *j->sendq);
        pthread_mutex_unlock(&j->mu);
        slot *s = &j->slots[si];
        cJSON *b = effective_body(j, &j->in.tasks[s->task]);
        char *payload = b ? cJSON_PrintUnformatted(b) : NULL;
        cJSON_Delete(b);
        if (!c || !payload) {
            s->out.kind = OUT_RETRY;
            snprintf(s->out.error, sizeof s->out.error, "out of memory");
        } else {
            server_exchange(j, c, s, payload);
        }
        free(payload);
        pthread_mutex_lock(&j->mu);
        j->doneq[j->n_doneq++] = si;
        pthread_cond_signal(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    if (c) curl_easy_cleanup(c);
    return NULL;
}

/* ---- outcomes --------------------------------------------------------------- */

static cJSON *quality_array(uint32_t flags) {
    cJSON *a = cJSON_CreateArray();
    for (int b = 0; b < LPX_BQ_COUNT; b++)
        if (flags & (1u << b)) cJSON_AddItemToArray(a, cJSON_CreateString(lpx_bq_flag_name(b)));
    return a;
}

/* The OpenAI completion / chat.completion object of an engine result. */
static cJSON *engine_body(job *j, slot *s) {
    const lpx_batch_task *t = &j->in.tasks[s->task];
    cJSON *b = cJSON_CreateObject();
    char id[64];
    snprintf(id, sizeof id, "%s-lpx%zu", t->chat ? "chatcmpl" : "cmpl", s->task);
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "object", t->chat ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(b, "created", (double)time(NULL));
    cJSON_AddStringToObject(b, "model", j->model_name);
    cJSON *ch = cJSON_AddArrayToObject(b, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    const char *text = s->out.text ? s->out.text : "";
    if (t->chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", text);
    } else {
        cJSON_AddStringToObject(c, "text", text);
        cJSON_AddNullToObject(c, "logprobs");
    }
    cJSON_AddStringToObject(c, "finish_reason", s->out.finish);
    cJSON_AddItemToArray(ch, c);
    cJSON *u = cJSON_AddObjectToObject(b, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)s->out.prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)s->out.completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens",
                            (double)(s->out.prompt_tokens + s->out.completion_tokens));
    return b;
}

/* The generated text inside a response body (chat or completion). */
static const char *body_text(const cJSON *body) {
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(body, "choices"), 0);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(c, "message");
    const cJSON *t = m ? cJSON_GetObjectItemCaseSensitive(m, "content")
                       : cJSON_GetObjectItemCaseSensitive(c, "text");
    return cJSON_IsString(t) ? t->valuestring : "";
}

static bool write_failure(job *j, const char *id, int64_t line, const char *error,
                          int32_t attempts) {
    cJSON *f = cJSON_CreateObject();
    if (id)
        cJSON_AddStringToObject(f, "custom_id", id);
    else
        cJSON_AddNullToObject(f, "custom_id");
    cJSON_AddNumberToObject(f, "line", (double)line);
    cJSON_AddStringToObject(f, "error", error);
    cJSON_AddNumberToObject(f, "attempts", attempts);
    bool ok = append_line(j->failures_fd, f);
    cJSON_Delete(f);
    return ok;
}

/* Backoff before retry k (1-based): 0.5 s doubling, at most 8 s. */
static double backoff_s(int32_t k) {
    double d = 0.5 * pow(2.0, k - 1);
    return d > 8 ? 8 : d;
}

/* Returns false when a record could not be written (disk full...). */
static bool handle_outcome(job *j, size_t si) {
    slot *s = &j->slots[si];
    const lpx_batch_task *t = &j->in.tasks[s->task];
    double lat_ms = 1000.0 * (now_s() - s->t_submit);
    bool ok = true;
    if (s->out.kind == OUT_OK) {
        cJSON *body = s->out.body ? s->out.body : engine_body(j, s);
        s->out.body = NULL;
        const char *text = body_text(body);
        uint32_t flags =
            lpx_bq_check(&j->o.quality, text, strlen(text), !strcmp(s->out.finish, "length"));
        cJSON *rec = cJSON_CreateObject();
        char rid[64];
        snprintf(rid, sizeof rid, "batch_req_%lld", (long long)t->line);
        cJSON_AddStringToObject(rec, "id", rid);
        cJSON_AddStringToObject(rec, "custom_id", t->id);
        cJSON *resp = cJSON_AddObjectToObject(rec, "response");
        cJSON_AddNumberToObject(resp, "status_code", 200);
        cJSON_AddItemToObject(resp, "body", body);
        cJSON_AddNullToObject(rec, "error");
        cJSON *lx = cJSON_AddObjectToObject(rec, "lpx");
        cJSON_AddItemToObject(lx, "quality", quality_array(flags));
        cJSON_AddNumberToObject(lx, "latency_ms", round(lat_ms * 1000) / 1000);
        cJSON_AddNumberToObject(lx, "attempts", s->attempts);
        cJSON_AddNumberToObject(lx, "line", (double)t->line);
        ok = append_line(j->results_fd, rec);
        if (ok) {
            account(j, rec);
            if (s->failed_before) j->n_failed--;
            s->failed_before = false;
            j->run_tokens += s->out.completion_tokens;
            j->run_done++;
            char names[96] = "";
            for (int b = 0; b < LPX_BQ_COUNT; b++)
                if (flags & (1u << b))
                    snprintf(names + strlen(names), sizeof names - strlen(names), " %s",
                             lpx_bq_flag_name(b));
            logf_(j, "done %s attempt %d: %lld tokens, %.1f ms, finish %s%s%s", t->id, s->attempts,
                  (long long)s->out.completion_tokens, lat_ms, s->out.finish,
                  flags ? ", flags:" : "", names);
        }
        cJSON_Delete(rec);
    } else if (s->out.kind == OUT_RETRY && s->attempts <= j->o.retries && !interrupted) {
        double d = backoff_s(s->attempts);
        logf_(j, "attempt %d of %s failed: %s; retrying in %.1f s", s->attempts, t->id,
              s->out.error, d);
        s->not_before = now_s() + d;
        j->ready[j->n_ready++] = si;
    } else if (s->out.kind == OUT_RETRY && interrupted) {
        logf_(j, "attempt %d of %s ended by the interrupt (%s): left for --resume", s->attempts,
              t->id, s->out.error);
    } else {
        logf_(j, "failed %s after %d attempt(s): %s", t->id, s->attempts, s->out.error);
        ok = write_failure(j, t->id, t->line, s->out.error, s->attempts);
        if (!s->failed_before) j->n_failed++;
        s->failed_before = true;
    }
    free(s->out.text);
    cJSON_Delete(s->out.body);
    memset(&s->out, 0, sizeof s->out);
    return ok;
}

/* ---- progress and summary ----------------------------------------------------- */

/* A line at the first loop turn, then at most every 10 s (the bar every 0.25 s),
 * and the final state. Without a terminal the final line is left out when the
 * last line already showed those counts (a job that ends within one turn): the
 * bar's final call must still end its line. */
static void progress(job *j, bool tty, bool final) {
    double t = now_s();
    if (!final && t - j->shown_t < (tty ? 0.25 : 10.0)) return;
    int64_t total = j->total, done = j->n_results, failed = j->n_failed;
    if (final && !tty && j->shown_t > 0 && done == j->shown_done && failed == j->shown_failed)
        return;
    j->shown_t = t;
    j->shown_done = done;
    j->shown_failed = failed;
    double el = t - j->t_start, tps = el > 0 ? (double)j->run_tokens / el : 0;
    int64_t left = total - done - failed;
    double eta = j->run_done > 0 ? el / (double)j->run_done * (double)(left > 0 ? left : 0) : 0;
    if (tty) {
        int w = 30, fill = total ? (int)(w * (done + failed) / total) : w;
        char bar[64];
        for (int i = 0; i < w; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[w] = '\0';
        fprintf(stderr, "\r[%s] %lld/%lld done, %lld failed, %.1f tok/s, ETA %.0f s ", bar,
                (long long)done, (long long)total, (long long)failed, tps, eta);
        if (final) fputc('\n', stderr);
    } else {
        fprintf(stderr, "lpx batch: %lld/%lld done, %lld failed, %.1f tok/s, ETA %.0f s\n",
                (long long)done, (long long)total, (long long)failed, tps, eta);
    }
    fflush(stderr);
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static bool write_summary(job *j, const char *dir, int64_t total, double wall_s,
                          bool was_interrupted, const char *mode) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "mode", mode);
    cJSON_AddStringToObject(s, "model", j->model_name);
    cJSON_AddNumberToObject(s, "total", (double)total);
    cJSON_AddNumberToObject(s, "succeeded", (double)j->n_results);
    cJSON_AddNumberToObject(s, "failed", (double)j->n_failed);
    int64_t rem = total - j->n_results - j->n_failed;
    cJSON_AddNumberToObject(s, "remaining", (double)(rem > 0 ? rem : 0));
    cJSON_AddNumberToObject(s, "invalid_lines", (double)j->n_invalid);
    cJSON_AddBoolToObject(s, "interrupted", was_interrupted);
    cJSON_AddNumberToObject(s, "prompt_tokens", (double)j->prompt_tokens);
    cJSON_AddNumberToObject(s, "completion_tokens", (double)j->completion_tokens);
    cJSON_AddNumberToObject(s, "wall_s", round(wall_s * 1000) / 1000);
    cJSON_AddNumberToObject(s, "run_completion_tokens", (double)j->run_tokens);
    cJSON_AddNumberToObject(s, "completion_tokens_per_s",
                            wall_s > 0 ? round((double)j->run_tokens / wall_s * 100) / 100 : 0);
    cJSON *lat = cJSON_AddObjectToObject(s, "latency_ms");
    qsort(j->lat, j->n_lat, sizeof *j->lat, cmp_dbl);
    static const struct {
        const char *k;
        double p;
    } ps[] = {{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"max", 1.0}};
    for (size_t i = 0; i < 4; i++) {
        if (!j->n_lat) {
            cJSON_AddNullToObject(lat, ps[i].k);
            continue;
        }
        size_t k = (size_t)ceil(ps[i].p * (double)j->n_lat);
        cJSON_AddNumberToObject(lat, ps[i].k, j->lat[k ? k - 1 : 0]);
    }
    cJSON *q = cJSON_AddObjectToObject(s, "quality");
    for (int b = 0; b < LPX_BQ_COUNT; b++)
        cJSON_AddNumberToObject(q, lpx_bq_flag_name(b), (double)j->flag_counts[b]);
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char *txt = cJSON_Print(s);
    cJSON_Delete(s);
    FILE *f = txt ? fopen(tmp, "w") : NULL;
    bool ok = f && fprintf(f, "%s\n", txt) > 0;
    free(txt);
    if (f) ok = (fflush(f) == 0) & (fsync(fileno(f)) == 0) & (fclose(f) == 0) && ok;
    return ok && rename(tmp, path) == 0;
}

/* ---- the job ---------------------------------------------------------------- */

static int fail(const char *msg, const char *arg) {
    fprintf(stderr, "lpx batch: %s%s\n", msg, arg ? arg : "");
    return 1;
}

static int open_in(const char *dir, const char *name, int flags) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return open(p, flags | O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
}

static int32_t auto_concurrency(job *j) {
    if (!j->eng) return 8;
    lpx_engine_stats st;
    if (lpx_engine_get_stats(j->eng, &st) != LPX_OK) return 1;
    /* sequences the KV pool holds at max_tokens plus a typical prompt; half as
     * many again wait queued in the engine, so a finished slot is refilled in
     * the next step without a round trip through this thread */
    int64_t per_seq = (int64_t)j->o.max_tokens + 256;
    int64_t fit = (int64_t)st.kv_blocks_total * st.block_size / (per_seq > 0 ? per_seq : 1);
    int64_t c = st.max_num_seqs < fit ? st.max_num_seqs : fit;
    if (c < 1) c = 1;
    return (int32_t)(c + (c + 1) / 2);
}

static int run_job(job *j) {
    batch_opts *o = &j->o;
    struct stat sb;
    bool exists = stat(o->outdir, &sb) == 0;
    if (exists && !o->resume) {
        fprintf(stderr, "lpx batch: -o %s: exists (add --resume to continue it)\n", o->outdir);
        return 1;
    }
    if (exists && !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "lpx batch: -o %s: not a directory\n", o->outdir);
        return 1;
    }
    /* the input first: a missing file must not leave an empty OUTDIR behind */
    lpx_status st = lpx_batch_input_read(o->input, &j->in);
    if (st != LPX_OK) return fail(lpx_last_error(), NULL);
    if (!exists && mkdir(o->outdir, 0755) != 0) {
        fprintf(stderr, "lpx batch: cannot create %s: %s\n", o->outdir, strerror(errno));
        return 1;
    }
    j->log_fd = open_in(o->outdir, "run.log", O_APPEND);
    j->results_fd = open_in(o->outdir, "results.jsonl", O_APPEND);
    j->failures_fd = open_in(o->outdir, "failures.jsonl", O_APPEND);
    if (j->log_fd < 0 || j->results_fd < 0 || j->failures_fd < 0) {
        fprintf(stderr, "lpx batch: cannot write in %s: %s\n", o->outdir, strerror(errno));
        return 1;
    }
    j->t_start = now_s();
    logf_(j, "%s: input %s, %lld lines, %zu valid, %zu rejected, mode %s",
          o->resume ? "resume" : "start", o->input, (long long)j->in.n_lines, j->in.n_tasks,
          j->in.n_rejects, o->server ? "server" : "engine");
    /* what earlier runs left: both files are append-only, read whole */
    char rpath[4096], fpath[4096];
    snprintf(rpath, sizeof rpath, "%s/results.jsonl", o->outdir);
    snprintf(fpath, sizeof fpath, "%s/failures.jsonl", o->outdir);
    if (!read_records(j, rpath, true, on_result, j) || !read_records(j, fpath, true, on_failure, j))
        return fail(lpx_last_error(), NULL);
    strvec_sort_unique(&j->done);
    strvec_sort_unique(&j->failed);
    strvec_sort_unique(&j->rejects);
    j->n_failed = count_failed(j);
    /* rejects: this shard's part (lines without an id belong to shard 0);
     * one recorded by an earlier run is not written again */
    for (size_t i = 0; i < j->in.n_rejects; i++) {
        const lpx_batch_reject *r = &j->in.rejects[i];
        int32_t sh = r->id && o->shard_n ? lpx_batch_shard_of(r->id, o->shard_n) : 0;
        if (o->shard_n && sh != o->shard_k) continue;
        char msg[640];
        snprintf(msg, sizeof msg, "line %lld: %s", (long long)r->line, r->reason);
        j->n_invalid++;
        char *key = reject_key(r->line, r->id, msg);
        if (!key) return fail("out of memory", NULL);
        bool recorded = strvec_has(&j->rejects, key);
        free(key);
        logf_(j, "rejected %s%s", msg, recorded ? " (recorded by an earlier run)" : "");
        if (recorded) continue;
        if (!write_failure(j, r->id, r->line, msg, 0))
            return fail("cannot write failures.jsonl in ", o->outdir);
        j->n_failed++;
    }
    j->slots = calloc(j->in.n_tasks + 1, sizeof *j->slots);
    j->ready = calloc(j->in.n_tasks + 1, sizeof *j->ready);
    j->doneq = calloc(j->in.n_tasks + 1, sizeof *j->doneq);
    j->sendq = calloc(j->in.n_tasks + 1, sizeof *j->sendq);
    if (!j->slots || !j->ready || !j->doneq || !j->sendq) return fail("out of memory", NULL);
    size_t n_retry = 0;
    for (size_t i = 0; i < j->in.n_tasks; i++) {
        const char *id = j->in.tasks[i].id;
        if (o->shard_n && lpx_batch_shard_of(id, o->shard_n) != o->shard_k) continue;
        if (strvec_has(&j->done, id)) {
            j->n_skipped_resume++;
            continue;
        }
        slot *s = &j->slots[j->n_slots];
        s->job = j;
        s->task = i;
        s->failed_before = strvec_has(&j->failed, id);
        n_retry += s->failed_before;
        j->ready[j->n_ready++] = j->n_slots++;
    }
    int64_t total = j->total = (int64_t)j->n_slots + j->n_skipped_resume + j->n_invalid;
    if (o->resume)
        logf_(j, "resume: %lld already done, %zu to run (%zu of them failed before)",
              (long long)j->n_skipped_resume, j->n_slots, n_retry);

    /* the model or the server */
    pthread_t *workers = NULL;
    int32_t conc = o->concurrency;
    if (o->server) {
        const char *slash = o->model ? strrchr(o->model, '/') : NULL;
        if (o->model)
            snprintf(j->model_name, sizeof j->model_name, "%s", slash ? slash + 1 : o->model);
        else if (j->n_slots)
            server_model(j);
    } else if (j->n_slots) {
        st = lpx_model_open(o->model, &j->model);
        if (st != LPX_OK) return fail(lpx_last_error(), NULL);
        lpx_engine_opts eo;
        lpx_engine_opts_init(&eo);
        eo.device = o->device;
        eo.n_threads = o->threads;
        eo.max_model_len = o->ctx;
        eo.kv_cache_bytes = o->kv_bytes;
        if (conc > 0 && conc < 16) eo.max_num_seqs = conc;
        st = lpx_engine_create(j->model, &eo, &j->eng);
        if (st != LPX_OK) return fail(lpx_last_error(), NULL);
        if (lpx_engine_start(j->eng) != LPX_OK) return fail(lpx_last_error(), NULL);
    }
    if (!j->model_name[0]) {
        const char *slash = o->model ? strrchr(o->model, '/') : NULL;
        snprintf(j->model_name, sizeof j->model_name, "%s",
                 o->model ? (slash ? slash + 1 : o->model) : "");
    }
    if (j->model) {
        /* the model's own special token texts count as leaks too */
        const lpx_tokenizer *tk = lpx_model_tokenizer(j->model);
        size_t n = lpx_bq_n_default_specials;
        const char **sp = malloc((n + (size_t)lpx_vocab_size(tk)) * sizeof *sp);
        if (sp) {
            memcpy(sp, lpx_bq_default_specials, n * sizeof *sp);
            for (int32_t id = 0; id < lpx_vocab_size(tk); id++)
                if (lpx_tokenizer_is_special(tk, id) && lpx_token_text(tk, id) &&
                    lpx_token_text(tk, id)[0])
                    sp[n++] = lpx_token_text(tk, id);
            o->quality.specials = sp;
            o->quality.n_specials = n;
        }
    }
    if (conc <= 0) conc = auto_concurrency(j);
    logf_(j, "concurrency %d, timeout %.3g s, retries %d", conc, o->timeout_s, o->retries);
    if (o->server) {
        workers = calloc((size_t)conc, sizeof *workers);
        for (int32_t i = 0; workers && i < conc; i++)
            pthread_create(&workers[i], NULL, server_worker, j);
        if (!workers) return fail("out of memory", NULL);
    }

    bool tty = isatty(2), io_ok = true;
    int seen_int = 0;
    for (;;) {
        double t = now_s(), wake = t + 0.2;
        if (interrupted != seen_int) {
            if (!seen_int) logf_(j, "interrupt: no new work; finishing %zu in flight", j->inflight);
            if (interrupted >= 2 && j->eng) {
                logf_(j, "second interrupt: cancelling %zu in flight (left for --resume)",
                      j->inflight);
                for (size_t i = 0; i < j->n_slots; i++)
                    if (j->slots[i].t_submit > 0) lpx_engine_cancel(j->eng, j->slots[i].eng_id);
            }
            seen_int = interrupted;
        }
        /* admit: the first ready slot whose backoff has passed */
        while (!interrupted && io_ok && j->inflight < (size_t)conc && j->n_ready) {
            size_t k = 0;
            while (k < j->n_ready && j->slots[j->ready[k]].not_before > t)
                k++;
            if (k == j->n_ready) {
                for (size_t q = 0; q < j->n_ready; q++)
                    if (j->slots[j->ready[q]].not_before < wake)
                        wake = j->slots[j->ready[q]].not_before;
                break;
            }
            size_t si = j->ready[k];
            memmove(j->ready + k, j->ready + k + 1, (--j->n_ready - k) * sizeof *j->ready);
            slot *s = &j->slots[si];
            s->attempts++;
            s->timed_out = false;
            s->t_submit = now_s();
            if (s->attempts > 1) logf_(j, "attempt %d of %s", s->attempts, j->in.tasks[s->task].id);
            j->inflight++;
            if (j->eng) {
                cJSON *b = effective_body(j, &j->in.tasks[s->task]);
                bool sent = b && engine_submit(j, s, b);
                cJSON_Delete(b);
                if (!sent) {
                    j->inflight--;
                    s->t_submit = 0;
                    if (!b) snprintf(s->out.error, sizeof s->out.error, "out of memory");
                    io_ok = handle_outcome(j, si);
                }
            } else {
                pthread_mutex_lock(&j->mu);
                j->sendq[j->n_sendq++] = si;
                pthread_cond_signal(&j->cv_send);
                pthread_mutex_unlock(&j->mu);
            }
        }
        if (!j->inflight && (!j->n_ready || interrupted || !io_ok)) break;
        /* wait for outcomes */
        pthread_mutex_lock(&j->mu);
        if (!j->n_doneq) {
            double w = wake > t ? wake : t + 0.001;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            double abs = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + (w - t);
            ts.tv_sec = (time_t)abs;
            ts.tv_nsec = (long)((abs - (double)ts.tv_sec) * 1e9);
            pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        }
        size_t got[64], n_got = 0;
        while (j->n_doneq && n_got < 64)
            got[n_got++] = j->doneq[--j->n_doneq];
        pthread_mutex_unlock(&j->mu);
        for (size_t i = 0; i < n_got; i++) {
            j->inflight--;
            if (!handle_outcome(j, got[i])) io_ok = false;
            j->slots[got[i]].t_submit = 0;
        }
        /* per-task timeout (engine mode; curl enforces it in server mode) */
        if (j->eng && o->timeout_s > 0) {
            double tn = now_s();
            for (size_t i = 0; i < j->n_slots; i++) {
                slot *s = &j->slots[i];
                if (s->t_submit > 0 && !s->timed_out && tn - s->t_submit > o->timeout_s) {
                    s->timed_out = true;
                    logf_(j, "timeout: %s attempt %d after %.3g s", j->in.tasks[s->task].id,
                          s->attempts, o->timeout_s);
                    lpx_engine_cancel(j->eng, s->eng_id);
                }
            }
        }
        progress(j, tty, false);
    }
    if (!io_ok)
        fprintf(stderr, "lpx batch: writing a record in %s failed: %s\n", o->outdir,
                strerror(errno));
    if (workers) {
        pthread_mutex_lock(&j->mu);
        j->stop_workers = true;
        pthread_cond_broadcast(&j->cv_send);
        pthread_mutex_unlock(&j->mu);
        for (int32_t i = 0; i < conc; i++)
            pthread_join(workers[i], NULL);
        free(workers);
    }
    double wall = now_s() - j->t_start;
    progress(j, tty, true);
    bool sum_ok =
        write_summary(j, o->outdir, total, wall, interrupted > 0, o->server ? "server" : "engine");
    logf_(j, "%s: %lld succeeded, %lld failed, %lld remaining, %.2f s, %.1f tok/s",
          interrupted ? "interrupted" : "finished", (long long)j->n_results, (long long)j->n_failed,
          (long long)(total - j->n_results - j->n_failed), wall,
          wall > 0 ? (double)j->run_tokens / wall : 0);
    if (!sum_ok) return fail("cannot write summary.json in ", o->outdir);
    fprintf(stderr, "lpx batch: %lld succeeded, %lld failed%s; results in %s\n",
            (long long)j->n_results, (long long)j->n_failed,
            interrupted ? ", interrupted (continue with --resume)" : "", o->outdir);
    return io_ok && !interrupted && j->n_results == total ? 0 : 1;
}

static void job_free(job *j) {
    if (j->eng) {
        lpx_engine_stop(j->eng);
        lpx_engine_destroy(j->eng);
    }
    if (j->o.quality.specials != lpx_bq_default_specials) free((void *)j->o.quality.specials);
    if (j->model) lpx_model_close(j->model);
    for (size_t i = 0; i < j->n_slots; i++) {
        free(j->slots[i].out.text);
        cJSON_Delete(j->slots[i].out.body);
    }
    lpx_batch_input_free(&j->in);
    free(j->slots);
    free(j->ready);
    free(j->doneq);
    free(j->sendq);
    free(j->lat);
    strvec_free(&j->done);
    strvec_free(&j->failed);
    strvec_free(&j->rejects);
    if (j->results_fd >= 0) close(j->results_fd);
    if (j->failures_fd >= 0) close(j->failures_fd);
    if (j->log_fd >= 0) close(j->log_fd);
}

/* ---- merge ------------------------------------------------------------------ */

static bool keep_record(void *user, cJSON **rec) {
    cJSON_AddItemToArray(user, *rec);
    *rec = NULL;
    return true;
}

typedef struct id_at {
    const char *id;
    size_t at; /* position in the merged results */
} id_at;

static int cmp_id_at(const void *a, const void *b) {
    const id_at *x = a, *y = b;
    int c = strcmp(x->id, y->id);
    return c ? c : (x->at > y->at) - (x->at < y->at);
}

/* Marks in drop[] every result whose custom_id an earlier one has. */
static bool mark_duplicates(const cJSON *results, bool *drop) {
    size_t n = (size_t)cJSON_GetArraySize(results), k = 0;
    id_at *order = calloc(n + 1, sizeof *order);
    if (!order) return false;
    const cJSON *rec;
    cJSON_ArrayForEach(rec, results) {
        const char *id = str_item(rec, "custom_id");
        order[k] = (id_at){id ? id : "", k};
        k++;
    }
    qsort(order, n, sizeof *order, cmp_id_at);
    for (size_t i = 0; i < n; i++) {
        bool dup = i && !strcmp(order[i].id, order[i - 1].id);
        drop[order[i].at] = dup || !order[i].id[0];
        if (dup)
            fprintf(stderr, "lpx batch: merge: %s has more than one result; kept the first\n",
                    order[i].id);
    }
    free(order);
    return true;
}

/* Writes the records of arr not marked in drop (NULL: all) to fd, passing
 * each to fn. */
static bool write_records(int fd, cJSON *arr, const bool *drop, record_fn fn, void *user) {
    size_t k = 0;
    cJSON *rec;
    cJSON_ArrayForEach(rec, arr) {
        if (!(drop && drop[k++]) && (!append_line(fd, rec) || !fn(user, &rec))) return false;
    }
    return true;
}

#define MAX_MERGE 256

/* Results of all DIRs, each custom_id once, and all their failure records;
 * the summary counted as for one OUTDIR. */
static int merge(int argc, char **argv) {
    const char *out = NULL;
    const char *dirs[MAX_MERGE];
    int n_dirs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: lpx batch merge DIR... -o OUTDIR\n\n"
                   "Combines the OUTDIRs of shards (--shard K/N) into one: results concatenated\n"
                   "(an id with results in two DIRs keeps the first), all failure records kept\n"
                   "(an id with a result anywhere is not counted failed), summary recomputed.\n"
                   "A torn last line (a write cut by a kill) or an unreadable line is not\n"
                   "merged: stderr says where it is (the DIRs are never changed) and it counts\n"
                   "as remaining.\n");
            return 0;
        }
        if (!strcmp(argv[i], "-o") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "-o"))
            return fprintf(stderr, "lpx batch: merge: -o: needs a value\n"), 2;
        else if (argv[i][0] == '-')
            return fprintf(stderr,
                           "lpx batch: merge: unknown option '%s' (see lpx batch merge --help)\n",
                           argv[i]),
                   2;
        else {
            if (n_dirs < MAX_MERGE) dirs[n_dirs] = argv[i];
            n_dirs++; /* counted past MAX_MERGE for the message */
        }
    }
    if (n_dirs > MAX_MERGE)
        return fprintf(stderr, "lpx batch: merge: at most %d directories (got %d)\n", MAX_MERGE,
                       n_dirs),
               2;
    if (!out || !n_dirs)
        return fprintf(stderr, "lpx batch: merge: DIR... and -o OUTDIR are required "
                               "(see lpx batch merge --help)\n"),
               2;
    struct stat sb;
    if (stat(out, &sb) == 0) {
        fprintf(stderr, "lpx batch: merge: -o %s: exists (merge writes a new directory)\n", out);
        return 1;
    }
    job j;
    memset(&j, 0, sizeof j);
    j.log_fd = j.results_fd = j.failures_fd = -1;
    cJSON *results = cJSON_CreateArray(), *failures = cJSON_CreateArray();
    bool *drop = NULL;
    int rc = results && failures ? 0 : fail("out of memory", NULL);
    for (int d = 0; d < n_dirs && !rc; d++) {
        char rp[4096], fp[4096];
        snprintf(rp, sizeof rp, "%s/results.jsonl", dirs[d]);
        snprintf(fp, sizeof fp, "%s/failures.jsonl", dirs[d]);
        if (access(rp, R_OK) != 0) {
            fprintf(stderr, "lpx batch: merge: cannot read %s: %s\n", rp, strerror(errno));
            rc = 1;
        } else if (!read_records(&j, rp, false, keep_record, results) ||
                   !read_records(&j, fp, false, keep_record, failures))
            rc = fail(lpx_last_error(), NULL);
    }
    if (!rc && (!(drop = calloc((size_t)cJSON_GetArraySize(results) + 1, sizeof *drop)) ||
                !mark_duplicates(results, drop)))
        rc = fail("out of memory", NULL);
    if (!rc && mkdir(out, 0755) != 0) {
        fprintf(stderr, "lpx batch: cannot create %s: %s\n", out, strerror(errno));
        rc = 1;
    }
    if (!rc) {
        j.results_fd = open_in(out, "results.jsonl", O_APPEND);
        j.failures_fd = open_in(out, "failures.jsonl", O_APPEND);
        if (j.results_fd < 0 || j.failures_fd < 0) rc = fail("cannot write in ", out);
    }
    if (!rc && (!write_records(j.results_fd, results, drop, on_result, &j) ||
                !write_records(j.failures_fd, failures, NULL, on_failure, &j)))
        rc = fail("cannot write the merged records in ", out);
    if (!rc) {
        strvec_sort_unique(&j.done);
        strvec_sort_unique(&j.failed);
        strvec_sort_unique(&j.rejects);
        j.n_failed = count_failed(&j);
        j.n_invalid = (int64_t)j.rejects.n;
        if (!write_summary(&j, out, j.n_results + j.n_failed + j.n_unmerged, 0, false, "merge"))
            rc = fail("cannot write summary.json in ", out);
    }
    if (!rc)
        printf("merged %d directories: %lld results, %lld failed, %lld remaining into %s\n", n_dirs,
               (long long)j.n_results, (long long)j.n_failed, (long long)j.n_unmerged, out);
    cJSON_Delete(results);
    cJSON_Delete(failures);
    free(drop);
    job_free(&j);
    return rc;
}

/* ---- command line ------------------------------------------------------------- */

#define CMD "batch"

/* "K/N" with 0 <= K < N: both whole numbers as cli_num reads them. */
static bool parse_shard(const char *v, int32_t *k, int32_t *n) {
    const char *slash = strchr(v, '/');
    char kbuf[32];
    int32_t kk, nn;
    if (!slash || (size_t)(slash - v) >= sizeof kbuf) return false;
    memcpy(kbuf, v, (size_t)(slash - v));
    kbuf[slash - v] = '\0';
    if (!lpx_cli_i32(slash + 1, 1, INT32_MAX, &nn) || !lpx_cli_i32(kbuf, 0, nn - 1, &kk))
        return false;
    *k = kk;
    *n = nn;
    return true;
}

static void help(void) {
    printf("usage: lpx batch -i INPUT.jsonl -o OUTDIR (-m MODEL | --server URL) [options]\n"
           "       lpx batch merge DIR... -o OUTDIR\n\n"
           "Runs every line of INPUT (OpenAI batch format, or {\"id\",\"prompt\"} /\n"
           "{\"id\",\"messages\"}) and writes OUTDIR/results.jsonl, failures.jsonl, run.log and\n"
           "summary.json. Results are synced one by one: a killed job continues with --resume.\n\n"
           "  -i, --input FILE        input JSONL\n"
           "  -o, --output DIR        output directory (refused if it exists, unless --resume)\n"
           "  -m, --model PATH        model for in-process generation (.gguf or HF directory)\n"
           "  --server URL            send requests to an OpenAI-compatible server instead\n"
           "                          (-m NAME: the model field; default: GET /v1/models' first)\n"
           "  --api-key KEY           bearer token for --server (default: $OPENAI_API_KEY)\n"
           "  --resume                continue OUTDIR: skip ids that already have a result\n"
           "  --concurrency N|auto    requests in flight, 1 to 4096 (default auto: from the KV\n"
           "                          budget; server: 8)\n"
           "  --timeout S             per-attempt timeout in seconds, 0 to 1e6 (default 0: none)\n"
           "  --retries N             retries of transient failures, with backoff, 0 to 100\n"
           "                          (default 2)\n"
           "  --shard K/N             run only ids in shard K of N (K = 0..N-1, N up to 2^31-1)\n"
           "  --max-tokens N          default max_tokens for lines without one, 1 to 1e7 (256)\n"
           "  --temperature T         default temperature, 0 to 100 (0 = greedy)\n"
           "  --top-p P               default top_p, 1e-9 to 1 (1)\n"
           "  --seed S                default seed, 0 to 2^53 (default: derived from each id)\n"
           "  --device DEV            cpu, cuda or cuda:N\n"
           "  -t, --threads N         CPU threads, 1 to 1024\n"
           "  -c, --ctx-size N        max model length, 1 to 1e8\n"
           "  --kv-bytes N            KV cache budget in bytes, 1 or more\n"
           "  --repeat-ngram N        quality: n-gram size of the repetition check, 1 to 64 (3)\n"
           "  --repeat-ratio R        quality: flag when repeated n-grams exceed R, 0 to 1 (0.5)\n"
           "  --repeat-min N          quality: no repetition flag under N n-grams, 1 to 1e6 (8)\n\n"
           "A number must be the whole value (no trailing text) and in its range; anything\n"
           "else, like an unknown option, is a usage error (exit 2) before anything is read.\n");
}

int cmd_batch(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "merge")) return merge(argc - 1, argv + 1);
    job j;
    memset(&j, 0, sizeof j);
    j.results_fd = j.failures_fd = j.log_fd = -1;
    batch_opts *o = &j.o;
    o->retries = 2;
    o->max_tokens = 256;
    o->top_p = 1;
    o->seed = -1;
    o->api_key = getenv("OPENAI_API_KEY");
    lpx_bq_opts_init(&o->quality);
    static const char *const with_value[] = {"-i",
                                             "--input",
                                             "-o",
                                             "--output",
                                             "-m",
                                             "--model",
                                             "--server",
                                             "--api-key",
                                             "--device",
                                             "--concurrency",
                                             "--timeout",
                                             "--retries",
                                             "--shard",
                                             "--max-tokens",
                                             "--temperature",
                                             "--temp",
                                             "--top-p",
                                             "--seed",
                                             "-t",
                                             "--threads",
                                             "-c",
                                             "--ctx-size",
                                             "--kv-bytes",
                                             "--repeat-ngram",
                                             "--repeat-ratio",
                                             "--repeat-min"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            return 0;
        }
        if (!strcmp(a, "--resume")) {
            o->resume = true;
            continue;
        }
        if (a[0] != '-') {
            fprintf(stderr, "lpx batch: unexpected argument '%s' (see lpx batch --help)\n", a);
            return 2;
        }
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            known |= !strcmp(a, with_value[k]);
        if (!known) return lpx_cli_opt_unknown(CMD, a), 2;
        if (i + 1 >= argc) return lpx_cli_opt_missing(CMD, a), 2;
        const char *v = argv[++i];
        bool ok = true;
        if (!strcmp(a, "-i") || !strcmp(a, "--input"))
            o->input = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output"))
            o->outdir = v;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--server"))
            o->server = v;
        else if (!strcmp(a, "--api-key"))
            o->api_key = v;
        else if (!strcmp(a, "--device"))
            o->device = v;
        else if (!strcmp(a, "--concurrency")) {
            if (strcmp(v, "auto") && !lpx_cli_i32(v, 1, 4096, &o->concurrency))
                ok = lpx_cli_opt_bad(CMD, a, v, "auto or a whole number from 1 to 4096");
        } else if (!strcmp(a, "--timeout"))
            ok = lpx_cli_opt_double(CMD, a, v, 0, false, 1e6, &o->timeout_s);
        else if (!strcmp(a, "--retries"))
            ok = lpx_cli_opt_i32(CMD, a, v, 0, 100, &o->retries);
        else if (!strcmp(a, "--shard"))
            ok = parse_shard(v, &o->shard_k, &o->shard_n) ||
                 lpx_cli_opt_bad(CMD, a, v, "K/N, whole numbers with 0 <= K < N <= 2147483647");
        else if (!strcmp(a, "--max-tokens"))
            ok = lpx_cli_opt_i32(CMD, a, v, 1, 10000000, &o->max_tokens);
        else if (!strcmp(a, "--temperature") || !strcmp(a, "--temp"))
            ok = lpx_cli_opt_double(CMD, a, v, 0, false, 100, &o->temperature);
        else if (!strcmp(a, "--top-p"))
            ok = lpx_cli_opt_double(CMD, a, v, 1e-9, false, 1, &o->top_p);
        else if (!strcmp(a, "--seed")) /* a JSON number holds it exactly */
            ok = lpx_cli_opt_i64(CMD, a, v, 0, MAX_JSON_INT, &o->seed);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            ok = lpx_cli_opt_i32(CMD, a, v, 1, 1024, &o->threads);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
            ok = lpx_cli_opt_i32(CMD, a, v, 1, 100000000, &o->ctx);
        else if (!strcmp(a, "--kv-bytes"))
            ok = lpx_cli_opt_i64(CMD, a, v, 1, INT64_MAX, &o->kv_bytes);
        else if (!strcmp(a, "--repeat-ngram"))
            ok = lpx_cli_opt_i32(CMD, a, v, 1, 64, &o->quality.ngram);
        else if (!strcmp(a, "--repeat-ratio"))
            ok = lpx_cli_opt_double(CMD, a, v, 0, false, 1, &o->quality.repeat_ratio);
        else /* --repeat-min */
            ok = lpx_cli_opt_i32(CMD, a, v, 1, 1000000, &o->quality.min_ngrams);
        if (!ok) return 2;
    }
    if (!o->input || !o->outdir)
        return fprintf(stderr, "lpx batch: -i INPUT and -o OUTDIR are required "
                               "(see lpx batch --help)\n"),
               2;
    if (!o->model && !o->server)
        return fprintf(stderr, "lpx batch: -m MODEL or --server URL is required "
                               "(see lpx batch --help)\n"),
               2;
    if (o->server) curl_global_init(CURL_GLOBAL_DEFAULT);
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    pthread_cond_init(&j.cv_send, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int rc = run_job(&j);
    job_free(&j);
    pthread_mutex_destroy(&j.mu);
    pthread_cond_destroy(&j.cv);
    pthread_cond_destroy(&j.cv_send);
    if (o->server) curl_global_cleanup();
    return rc;
}
