/* lpx batch merge: the OUTDIRs of shards into one (batch.h). A DIR is never changed. */
#include "batch/job.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
static bool mark_duplicates(const job *j, const cJSON *results, bool *drop) {
    size_t n = (size_t)cJSON_GetArraySize(results), k = 0;
    id_at *order = calloc(n + 1, sizeof *order);
    if (!order) return false;
    const cJSON *rec;
    cJSON_ArrayForEach(rec, results) {
        const char *id = lpx_batch_str(rec, "custom_id");
        order[k] = (id_at){id ? id : "", k};
        k++;
    }
    qsort(order, n, sizeof *order, cmp_id_at);
    for (size_t i = 0; i < n; i++) {
        bool dup = i && !strcmp(order[i].id, order[i - 1].id);
        drop[order[i].at] = dup || !order[i].id[0];
        if (dup)
            lpx_batch_note(j, "merge: %s has more than one result; kept the first", order[i].id);
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
        if (!(drop && drop[k++]) && (!lpx_batch_append_line(fd, rec) || !fn(user, &rec)))
            return false;
    }
    return true;
}

/* The merge into j (its journal fields; j.o.note for warnings). */
static lpx_status merge(job *j, const char *const *dirs, int n_dirs, const char *out,
                        cJSON *results, cJSON *failures, bool **drop) {
    struct stat sb;
    if (stat(out, &sb) == 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "merge: -o %s: exists (merge writes a new directory)", out);
    if (!results || !failures) return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    for (int d = 0; d < n_dirs; d++) {
        char rp[4096], fp[4096];
        snprintf(rp, sizeof rp, "%s/results.jsonl", dirs[d]);
        snprintf(fp, sizeof fp, "%s/failures.jsonl", dirs[d]);
        if (access(rp, R_OK) != 0)
            return lpx_errorf(LPX_ERR_IO, "merge: cannot read %s: %s", rp, strerror(errno));
        if (!lpx_batch_read_records(j, rp, -1, false, keep_record, results) ||
            !lpx_batch_read_records(j, fp, -1, false, keep_record, failures))
            return LPX_ERR_IO;
    }
    if (!(*drop = calloc((size_t)cJSON_GetArraySize(results) + 1, sizeof **drop)) ||
        !mark_duplicates(j, results, *drop))
        return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    if (mkdir(out, 0755) != 0)
        return lpx_errorf(LPX_ERR_IO, "cannot create %s: %s", out, strerror(errno));
    LPX_TRY(lpx_batch_lock(out, &j->lock_fd));
    if ((j->results_fd = lpx_batch_open_in(out, "results.jsonl", O_APPEND)) < 0 ||
        (j->failures_fd = lpx_batch_open_in(out, "failures.jsonl", O_APPEND)) < 0)
        return LPX_ERR_IO;
    if (!write_records(j->results_fd, results, *drop, lpx_batch_on_result, j) ||
        !write_records(j->failures_fd, failures, NULL, lpx_batch_on_failure, j))
        return lpx_errorf(LPX_ERR_IO, "cannot write the merged records in %s", out);
    lpx_strvec_sort_unique(&j->done);
    lpx_strvec_sort_unique(&j->failed);
    lpx_strvec_sort_unique(&j->rejects);
    j->n_failed = lpx_batch_count_failed(j);
    j->n_invalid = (int64_t)j->rejects.n;
    if (!lpx_batch_write_summary(j, out, j->n_results + j->n_failed + j->n_unmerged, 0, false,
                                 "merge"))
        return lpx_errorf(LPX_ERR_IO, "cannot write summary.json in %s", out);
    return LPX_OK;
}

lpx_status lpx_batch_merge(const char *const *dirs, int n_dirs, const char *out,
                           void (*note)(void *user, const char *msg), void *user,
                           lpx_batch_result *r) {
    memset(r, 0, sizeof *r);
    job j;
    memset(&j, 0, sizeof j);
    j.log_fd = j.results_fd = j.failures_fd = j.lock_fd = -1;
    j.o.note = note;
    j.o.user = user;
    cJSON *results = cJSON_CreateArray(), *failures = cJSON_CreateArray();
    bool *drop = NULL;
    lpx_status st = merge(&j, dirs, n_dirs, out, results, failures, &drop);
    if (st == LPX_OK)
        *r = (lpx_batch_result){.total = j.n_results + j.n_failed + j.n_unmerged,
                                .succeeded = j.n_results,
                                .failed = j.n_failed,
                                .remaining = j.n_unmerged,
                                .complete = j.n_unmerged == 0};
    cJSON_Delete(results);
    cJSON_Delete(failures);
    free(drop);
    lpx_batch_job_free(&j);
    return st;
}
