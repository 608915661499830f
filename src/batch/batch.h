/* The batch runner: a resumable job over a JSONL file, on the in-process engine or an
 * OpenAI-compatible server (--server), and the merge of shard outputs. docs/batch.md has
 * the formats, the guarantees and the thresholds.
 *
 * OUTDIR holds results.jsonl and failures.jsonl (append-only, each record synced when
 * written: a killed job continues with resume), run.log and summary.json. The runner
 * prints nothing: it reports progress and warnings through the callbacks, and its
 * failures as lpx_status with the message in lpx_last_error(). */
#ifndef LPX_BATCH_BATCH_H
#define LPX_BATCH_BATCH_H

#include "batch/quality.h"
#include "engine/data_parallel.h"
#include "lpx.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/* Seeds travel as JSON numbers (doubles): integers up to 2^53 are exact. */
#define LPX_BATCH_MAX_SEED ((int64_t)1 << 53)
/* Directories one merge takes. */
#define LPX_BATCH_MAX_MERGE 256

typedef struct lpx_batch_progress {
    int64_t total, done, failed; /* lines of the job (shard); results; failed entries */
    double tok_s;                /* completion tokens per second of this run */
    double eta_s;                /* time left at this run's pace (0: not known yet) */
} lpx_batch_progress;

typedef struct lpx_batch_opts {
    const char *input, *outdir;
    const char *model;        /* engine: the model to open; server: the "model" of every
                                 request, replacing the line's (NULL: the line's, else the
                                 server's first of GET /v1/models) */
    const char *server;       /* base URL of an OpenAI-compatible server; NULL: the engine */
    const char *api_key;      /* bearer token for server; NULL: none */
    lpx_engine_opts engine;   /* in-process; max_num_seqs is set from concurrency */
    const lpx_dp_plan *dp;    /* in-process engines (data parallel: each line on the one with
                                 the fewest in flight, lpx_dp_place); NULL: one engine */
    int32_t concurrency;      /* requests in flight; 0 = auto (from the KV budget; server: 8) */
    double timeout_s;         /* per attempt; 0 = none */
    int32_t retries;          /* of transient failures, with backoff */
    bool resume;              /* continue an existing OUTDIR */
    int32_t shard_k, shard_n; /* run only ids in shard k of n; n 0 = no sharding */
    /* defaults for lines that leave them out */
    int32_t max_tokens;
    double temperature, top_p;
    int64_t seed; /* < 0: derived from each id */
    lpx_bq_opts quality;
    /* The program's interrupt count (SIGINT/SIGTERM handler): 1 stops new work and lets
     * what is in flight finish, 2 cancels it (left for resume). NULL: none. */
    const volatile sig_atomic_t *interrupted;
    /* Called from the calling thread at least every 0.2 s and once at the end (final). */
    void (*progress)(void *user, const lpx_batch_progress *p, bool final);
    /* Warnings that do not stop the job ("merge: ..."). */
    void (*note)(void *user, const char *msg);
    void *user;
} lpx_batch_opts;

typedef struct lpx_batch_result {
    int64_t total, succeeded, failed, remaining;
    bool interrupted;
    bool complete; /* every line has a result and every record was written */
} lpx_batch_result;

void lpx_batch_opts_init(lpx_batch_opts *o);
/* Runs the job. LPX_OK when it ran to its end or to the interrupt (r says how far); an
 * error when it could not start, or its summary could not be written. Needs
 * lpx_http_global_init with a server. */
lpx_status lpx_batch_run(const lpx_batch_opts *o, lpx_batch_result *r);
/* Combines the OUTDIRs of shards into the new directory out: results concatenated (an id
 * with results in two DIRs keeps the first), every failure record kept, the summary
 * recomputed. A torn or unreadable line is left where it is (note says where) and counts
 * as remaining. */
lpx_status lpx_batch_merge(const char *const *dirs, int n_dirs, const char *out,
                           void (*note)(void *user, const char *msg), void *user,
                           lpx_batch_result *r);

#endif
