/* The batch runner's journal: run.log, the append-only records of OUTDIR (each synced
 * when written), and what earlier runs left there (resume, merge). */
#include "base/checked.h"
#include "base/readall.h"
#include "base/utf8.h"
#include "batch/job.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

void lpx_batch_log(job *j, const char *fmt, ...) {
    if (j->log_fd < 0) return;
    char buf[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    int n = (int)strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(buf + n, sizeof buf - (size_t)n, ".%03dZ ", (int)(tv.tv_usec / 1000));
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* ids and reasons are the input's text: escaped, so a line can forge none */
    lpx_utf8_log_escape(msg, buf + n, sizeof buf - (size_t)n - 1);
    n += (int)strlen(buf + n);
    buf[n++] = '\n';
    if (write(j->log_fd, buf, (size_t)n) < 0) return;
}

/* Appends one JSON line with a single write and syncs it: once this returns
 * true the record survives a kill (a torn tail is dropped on --resume). */
bool lpx_batch_append_line(int fd, const cJSON *rec) {
    char *s = cJSON_PrintUnformatted(rec);
    if (!s) return false;
    size_t n = strlen(s);
    if (lpx_utf8_invalid_at(s, n) < n) {
        /* client bytes that are not UTF-8 (a rejected line's id): U+FFFD, so that
         * strict readers decode every line */
        cJSON *fixed = cJSON_Duplicate(rec, 1);
        free(s);
        s = fixed && lpx_utf8_fix_json(fixed) ? cJSON_PrintUnformatted(fixed) : NULL;
        cJSON_Delete(fixed);
        if (!s) return false;
        n = strlen(s);
    }
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
void lpx_batch_account(job *j, const cJSON *rec) {
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

bool lpx_strvec_push(strvec *s, const char *str) {
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

void lpx_strvec_sort_unique(strvec *s) {
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

bool lpx_strvec_has(const strvec *s, const char *str) {
    return s->n && bsearch(&str, s->v, s->n, sizeof *s->v, cmp_str);
}

void lpx_strvec_free(strvec *s) {
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* Calls fn on each whole line of path, in order. A last line without its
 * newline is a write cut by a kill. On --resume (truncate_torn) it is logged
 * and the file is cut back to its whole lines, so later appends stay whole;
 * its id has no record and runs again. Merge (!truncate_torn) never changes
 * a DIR: a torn or unreadable line stays where it is, the note callback says where, and
 * it counts in j->n_unmerged (a record not done). A missing file has no
 * lines. */
bool lpx_batch_read_records(job *j, const char *path, int fd, bool truncate_torn, record_fn fn,
                            void *user) {
    char *buf;
    size_t len, start = 0;
    if (fd >= 0) {
        int dfd = dup(fd);
        FILE *f = dfd >= 0 ? fdopen(dfd, "rb") : NULL;
        if (!f) {
            if (dfd >= 0) close(dfd);
            return lpx_errorf(LPX_ERR_IO, "%s: %s", path, strerror(errno)), false;
        }
        rewind(f);
        lpx_status st = lpx_read_stream(f, path, MAX_OUT_FILE, &buf, &len);
        fclose(f);
        if (st != LPX_OK) return false;
    } else {
        if (access(path, F_OK) != 0 && errno == ENOENT) return true;
        if (lpx_read_file(path, MAX_OUT_FILE, &buf, &len) != LPX_OK) return false;
    }
    bool ok = true;
    while (ok && start < len) {
        char *nl = memchr(buf + start, '\n', len - start);
        size_t n = nl ? (size_t)(nl - buf) - start : len - start;
        cJSON *rec = nl ? cJSON_ParseWithLength(buf + start, n) : NULL;
        if (rec) {
            ok = fn(user, &rec);
        } else if (!truncate_torn && n) {
            j->n_unmerged++;
            lpx_batch_note(j,
                           "merge: %s: %s at byte %zu (%zu bytes) not merged, left there; "
                           "it counts as remaining (--resume redoes its id)",
                           path,
                           nl ? "an unreadable line" : "a torn last line (a write cut by a kill)",
                           start, n);
        } else if (!nl) {
            lpx_batch_log(j, "dropping a torn last line of %zu bytes in %s", n, path);
            if (fd < 0 || ftruncate(fd, (off_t)start) != 0) {
                lpx_errorf(LPX_ERR_IO, "%s: cannot truncate a torn last line: %s", path,
                           strerror(errno));
                ok = false;
            }
        } else if (n) {
            lpx_batch_log(j, "ignoring an unreadable line at byte %zu of %s", start, path);
        }
        cJSON_Delete(rec);
        start += n + 1;
    }
    free(buf);
    return ok;
}

double lpx_batch_num(const cJSON *b, const char *k, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

const char *lpx_batch_str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A result: its id is done, its tokens, latency and flags count. */
bool lpx_batch_on_result(void *user, cJSON **rec) {
    job *j = user;
    const char *id = lpx_batch_str(*rec, "custom_id");
    if (!id) return true;
    if (!lpx_strvec_push(&j->done, id))
        return lpx_errorf(LPX_ERR_NOMEM, "results: out of memory"), false;
    lpx_batch_account(j, *rec);
    return true;
}

/* The identity of an input-check failure: its line, id and reason. */
char *lpx_batch_reject_key(int64_t line, const char *id, const char *error) {
    size_t n = strlen(id ? id : "") + strlen(error) + 48;
    char *k = malloc(n);
    if (k) snprintf(k, n, "%lld\x1f%s\x1f%s", (long long)line, id ? id : "", error);
    return k;
}

/* A failure record: an input-check rejection (attempts 0) or an id whose
 * attempts ran out in some run. */
bool lpx_batch_on_failure(void *user, cJSON **rec) {
    job *j = user;
    const cJSON *att = cJSON_GetObjectItemCaseSensitive(*rec, "attempts");
    const char *id = lpx_batch_str(*rec, "custom_id"), *err = lpx_batch_str(*rec, "error");
    bool ok = true;
    if (cJSON_IsNumber(att) && att->valuedouble == 0) {
        char *k = lpx_batch_reject_key((int64_t)lpx_batch_num(*rec, "line", 0), id, err ? err : "");
        ok = k && lpx_strvec_push(&j->rejects, k);
        free(k);
    } else if (id) {
        ok = lpx_strvec_push(&j->failed, id);
    }
    return ok || (lpx_errorf(LPX_ERR_NOMEM, "failures: out of memory"), false);
}

/* Failed entries of OUTDIR: every input-check rejection, and every id with a
 * failure record and no result (an id that failed once and later succeeded
 * is not failed). The sets must be sorted. */
int64_t lpx_batch_count_failed(const job *j) {
    int64_t n = (int64_t)j->rejects.n;
    for (size_t i = 0; i < j->failed.n; i++)
        n += !lpx_strvec_has(&j->done, j->failed.v[i]);
    return n;
}

bool lpx_batch_write_failure(job *j, const char *id, int64_t line, const char *error,
                             const char *param, int32_t attempts) {
    cJSON *f = cJSON_CreateObject();
    if (id)
        cJSON_AddStringToObject(f, "custom_id", id);
    else
        cJSON_AddNullToObject(f, "custom_id");
    cJSON_AddNumberToObject(f, "line", (double)line);
    cJSON_AddStringToObject(f, "error", error);
    if (param && param[0])
        cJSON_AddStringToObject(f, "param", param);
    else
        cJSON_AddNullToObject(f, "param");
    cJSON_AddNumberToObject(f, "attempts", attempts);
    bool ok = lpx_batch_append_line(j->failures_fd, f);
    cJSON_Delete(f);
    return ok;
}
