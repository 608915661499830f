/* The batch runner's parts (batch.h), shared between its files: the job, its slots, the
 * OUTDIR journal (journal.c), requests on the engine (engine_mode.c) or a server
 * (server_mode.c), the retry policy and records of outcomes (retry.c), the summary
 * (summary.c), the loop (runner.c) and merge (merge.c). */
#ifndef LPX_BATCH_JOB_H
#define LPX_BATCH_JOB_H

#include "base/error.h"
#include "base/http_client.h"
#include "batch/batch.h"
#include "batch/input.h"
#include "grammar/tool_calls.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

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
    bool failed_before;          /* counted in n_failed: a failure record and no result */
    lpx_tool_format tool_format; /* engine mode: the output is parsed for tool calls */
    outcome out;
} slot;

typedef struct job {
    lpx_batch_opts o;          /* the caller's, quality.specials extended by the model's */
    const char **own_specials; /* that extension, or NULL */
    lpx_batch_input in;
    lpx_model *model;
    lpx_engine *eng;
    int32_t max_model_len; /* the engine's: prompt + completion */
    char model_name[256];
    int results_fd, failures_fd, log_fd, lock_fd;

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
} job;

/* An OUTDIR file is read whole on resume and merge; results of a very
 * large job stay far below this. */
#define MAX_OUT_FILE ((size_t)16 << 30)

double lpx_batch_now_s(void);
/* The interrupt count (lpx_batch_opts.interrupted). */
int lpx_batch_interrupts(const job *j);
/* A warning for lpx_batch_opts.note. */
void lpx_batch_note(const job *j, const char *fmt, ...) LPX_PRINTF(2, 3);

/* journal.c: run.log, records, the sets of done / failed ids */
void lpx_batch_log(job *j, const char *fmt, ...) LPX_PRINTF(2, 3);
bool lpx_batch_append_line(int fd, const cJSON *rec);
bool lpx_strvec_push(strvec *s, const char *str);
void lpx_strvec_sort_unique(strvec *s);
bool lpx_strvec_has(const strvec *s, const char *str);
void lpx_strvec_free(strvec *s);
/* Receives one record of an OUTDIR file; keeps it by taking *rec (setting it
 * to NULL). False stops the reading, with the reason in lpx_last_error(). */
typedef bool (*record_fn)(void *user, cJSON **rec);
/* fd >= 0: the file is read (and a torn tail cut) through it, never through path,
 * which only names it in messages. */
bool lpx_batch_read_records(job *j, const char *path, int fd, bool truncate_torn, record_fn fn,
                            void *user);
bool lpx_batch_on_result(void *user, cJSON **rec);
bool lpx_batch_on_failure(void *user, cJSON **rec);
char *lpx_batch_reject_key(int64_t line, const char *id, const char *error);
int64_t lpx_batch_count_failed(const job *j);
void lpx_batch_account(job *j, const cJSON *rec);
bool lpx_batch_write_failure(job *j, const char *id, int64_t line, const char *error,
                             int32_t attempts);
double lpx_batch_num(const cJSON *b, const char *k, double dflt);
const char *lpx_batch_str(const cJSON *o, const char *k);

/* engine_mode.c */
cJSON *lpx_batch_effective_body(const job *j, const lpx_batch_task *t);
bool lpx_batch_engine_submit(job *j, slot *s, const cJSON *b);

/* server_mode.c */
void lpx_batch_server_model(job *j);
void *lpx_batch_server_worker(void *arg);

/* retry.c: false when a record could not be written (disk full...) */
bool lpx_batch_handle_outcome(job *j, size_t si);

/* summary.c */
bool lpx_batch_write_summary(job *j, const char *dir, int64_t total, double wall_s,
                             bool was_interrupted, const char *mode);

/* outdir.c: the lock, files opened without following links, the atomic summary */
#define LPX_BATCH_LOCK "lpx.lock"
/* name in dir, read-write with flags, created 0644; never a link, only a regular file.
 * -1 with the reason in lpx_last_error(). */
int lpx_batch_open_in(const char *dir, const char *name, int flags);
/* Refuses dir when a file lpx writes there is a symbolic link. */
lpx_status lpx_batch_check_links(const char *dir);
/* Takes dir's lock for this job (*fd, held until closed) or says which PID holds it
 * (LPX_ERR_BUSY). */
lpx_status lpx_batch_lock(const char *dir, int *fd);
/* Writes text as dir/name through a mkstemp temporary in dir, synced, then renamed;
 * false with errno set. */
bool lpx_batch_write_atomic(const char *dir, const char *name, const char *text);
void lpx_batch_job_free(job *j);

#endif
