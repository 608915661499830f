/* The batch runner's loop (batch.h): read the input and what OUTDIR holds, open the
 * model or find the server's, then admit ready slots up to the concurrency, collect
 * outcomes, enforce timeouts, until every slot has an outcome or the interrupt. */
#include "batch/job.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double lpx_batch_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int lpx_batch_interrupts(const job *j) {
    return j->o.interrupted ? *j->o.interrupted : 0;
}

void lpx_batch_note(const job *j, const char *fmt, ...) {
    if (!j->o.note) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    j->o.note(j->o.user, msg);
}

void lpx_batch_opts_init(lpx_batch_opts *o) {
    memset(o, 0, sizeof *o);
    lpx_engine_opts_init(&o->engine);
    o->retries = 2;
    o->max_tokens = 256;
    o->top_p = 1;
    o->seed = -1;
    lpx_bq_opts_init(&o->quality);
}

/* The rate counts tokens as they are generated, so a job of a few long answers shows
 * its pace before the first one ends. ETA: the tokens still to come (the requests left
 * at this run's mean answer length, or max_tokens before one ended, less what the ones
 * in flight have written) at that rate. */
static void progress(job *j, bool final) {
    if (!j->o.progress) return;
    double el = lpx_batch_now_s() - j->t_start;
    int64_t left = j->total - j->n_results - j->n_failed, streamed = j->streamed;
    double per = j->run_done > 0 ? (double)j->run_tokens / (double)j->run_done : j->o.max_tokens;
    double tok_s = el > 0 ? (double)streamed / el : 0,
           to_come = (double)(left > 0 ? left : 0) * per - (double)(streamed - j->run_tokens);
    lpx_batch_progress p = {.total = j->total,
                            .done = j->n_results,
                            .failed = j->n_failed,
                            .tok_s = tok_s,
                            .eta_s = tok_s > 0 && left > 0 ? fmax(to_come, 0) / tok_s : 0};
    j->o.progress(j->o.user, &p, final);
}

/* Summed over the engines. */
static int32_t auto_concurrency(job *j) {
    if (!j->n_eng) return 8;
    int64_t sum = 0;
    for (int32_t i = 0; i < j->n_eng; i++) {
        lpx_engine_stats st;
        if (lpx_engine_get_stats(j->eng[i], &st) != LPX_OK) return 1;
        /* sequences the KV pool holds at max_tokens plus a typical prompt; half as
         * many again wait queued in the engine, so a finished slot is refilled in
         * the next step without a round trip through this thread */
        int64_t per_seq = (int64_t)j->o.max_tokens + 256;
        int64_t fit = (int64_t)st.kv_blocks_total * st.block_size / (per_seq > 0 ? per_seq : 1);
        int64_t c = st.max_num_seqs < fit ? st.max_num_seqs : fit;
        if (c < 1) c = 1;
        sum += c + (c + 1) / 2;
    }
    return sum < 4096 ? (int32_t)sum : 4096;
}

static lpx_status run_job(job *j, lpx_batch_result *res) {
    lpx_batch_opts *o = &j->o;
    struct stat sb;
    bool exists = stat(o->outdir, &sb) == 0;
    if (exists && !o->resume) {
        return lpx_errorf(LPX_ERR_INVALID_ARG, "-o %s: exists (add --resume to continue it)",
                          o->outdir);
    }
    if (exists && !S_ISDIR(sb.st_mode)) {
        return lpx_errorf(LPX_ERR_INVALID_ARG, "-o %s: not a directory", o->outdir);
    }
    /* a second run on this OUTDIR is refused before it reads anything */
    if (exists) LPX_TRY(lpx_batch_lock(o->outdir, &j->lock_fd));
    /* the input first: a missing file must not leave an empty OUTDIR behind */
    lpx_status st = lpx_batch_input_read(o->input, &j->in);
    if (st != LPX_OK) return st;
    if (!exists && mkdir(o->outdir, 0755) != 0)
        return lpx_errorf(LPX_ERR_IO, "cannot create %s: %s", o->outdir, strerror(errno));
    if (!exists) LPX_TRY(lpx_batch_lock(o->outdir, &j->lock_fd));
    if ((j->log_fd = lpx_batch_open_in(o->outdir, "run.log", O_APPEND)) < 0 ||
        (j->results_fd = lpx_batch_open_in(o->outdir, "results.jsonl", O_APPEND)) < 0 ||
        (j->failures_fd = lpx_batch_open_in(o->outdir, "failures.jsonl", O_APPEND)) < 0)
        return LPX_ERR_IO;
    j->t_start = lpx_batch_now_s();
    lpx_batch_log(j, "%s: input %s, %lld lines, %zu valid, %zu rejected, mode %s",
                  o->resume ? "resume" : "start", o->input, (long long)j->in.n_lines, j->in.n_tasks,
                  j->in.n_rejects, o->server ? "server" : "engine");
    /* what earlier runs left: both files are append-only, read whole */
    char rpath[4096], fpath[4096];
    snprintf(rpath, sizeof rpath, "%s/results.jsonl", o->outdir);
    snprintf(fpath, sizeof fpath, "%s/failures.jsonl", o->outdir);
    if (!lpx_batch_read_records(j, rpath, j->results_fd, true, lpx_batch_on_result, j) ||
        !lpx_batch_read_records(j, fpath, j->failures_fd, true, lpx_batch_on_failure, j))
        return LPX_ERR_IO;
    lpx_strvec_sort_unique(&j->done);
    lpx_strvec_sort_unique(&j->failed);
    lpx_strvec_sort_unique(&j->rejects);
    j->n_failed = lpx_batch_count_failed(j);
    /* rejects: this shard's part (lines without an id belong to shard 0);
     * one recorded by an earlier run is not written again */
    for (size_t i = 0; i < j->in.n_rejects; i++) {
        const lpx_batch_reject *r = &j->in.rejects[i];
        int32_t sh = r->id && o->shard_n ? lpx_batch_shard_of(r->id, o->shard_n) : 0;
        if (o->shard_n && sh != o->shard_k) continue;
        char msg[640];
        snprintf(msg, sizeof msg, "line %lld: %s", (long long)r->line, r->reason);
        j->n_invalid++;
        char *key = lpx_batch_reject_key(r->line, r->id, msg);
        if (!key) return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
        bool recorded = lpx_strvec_has(&j->rejects, key);
        free(key);
        lpx_batch_log(j, "rejected %s%s", msg, recorded ? " (recorded by an earlier run)" : "");
        if (recorded) continue;
        if (!lpx_batch_write_failure(j, r->id, r->line, msg, r->param, 0))
            return lpx_errorf(LPX_ERR_IO, "cannot write failures.jsonl in %s", o->outdir);
        j->n_failed++;
    }
    j->slots = calloc(j->in.n_tasks + 1, sizeof *j->slots);
    j->ready = calloc(j->in.n_tasks + 1, sizeof *j->ready);
    j->doneq = calloc(j->in.n_tasks + 1, sizeof *j->doneq);
    j->sendq = calloc(j->in.n_tasks + 1, sizeof *j->sendq);
    if (!j->slots || !j->ready || !j->doneq || !j->sendq)
        return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    size_t n_retry = 0;
    for (size_t i = 0; i < j->in.n_tasks; i++) {
        const char *id = j->in.tasks[i].id;
        if (o->shard_n && lpx_batch_shard_of(id, o->shard_n) != o->shard_k) continue;
        if (lpx_strvec_has(&j->done, id)) {
            j->n_skipped_resume++;
            continue;
        }
        slot *s = &j->slots[j->n_slots];
        s->job = j;
        s->task = i;
        s->failed_before = lpx_strvec_has(&j->failed, id);
        n_retry += s->failed_before;
        j->ready[j->n_ready++] = j->n_slots++;
    }
    int64_t total = j->total = (int64_t)j->n_slots + j->n_skipped_resume + j->n_invalid;
    if (o->resume)
        lpx_batch_log(j, "resume: %lld already done, %zu to run (%zu of them failed before)",
                      (long long)j->n_skipped_resume, j->n_slots, n_retry);

    /* the model or the server */
    pthread_t *workers = NULL;
    int32_t conc = o->concurrency;
    if (o->server) {
        /* -m NAME: every request's "model", as given (a server's ids may hold a '/') */
        if (o->model)
            snprintf(j->model_name, sizeof j->model_name, "%s", o->model);
        else if (j->n_slots)
            lpx_batch_server_model(j);
    } else if (j->n_slots) {
        st = lpx_model_open(o->model, &j->model);
        if (st != LPX_OK) return st;
        for (int32_t i = 0; i < j->model->n_warnings; i++) {
            lpx_batch_note(j, "model: %s", j->model->warnings[i]);
            lpx_batch_log(j, "model: %s", j->model->warnings[i]);
        }
        lpx_engine_opts eo = o->engine;
        if (conc > 0 && conc < 16) eo.max_num_seqs = conc;
        lpx_dp_plan one;
        const lpx_dp_plan *plan = o->dp;
        if (!plan) LPX_TRY(lpx_dp_plan_make(eo.device, 1, eo.n_threads, &one));
        if (!plan) plan = &one;
        LPX_TRY(lpx_dp_engines_start(j->model, &eo, plan, j->eng));
        j->n_eng = plan->n;
        lpx_engine_stats es;
        for (int32_t i = 0; i < j->n_eng; i++) {
            LPX_TRY(lpx_engine_get_stats(j->eng[i], &es));
            if (j->n_eng > 1) lpx_batch_log(j, "engine %d: %s", i, es.device);
        }
        j->max_model_len = es.max_model_len;
    }
    if (!j->model_name[0] && o->model) /* the name lpx serve would list the model by */
        lpx_model_default_name(o->model, j->model_name, sizeof j->model_name);
    if (j->model) {
        /* the model's own special token texts count as leaks too */
        const lpx_tokenizer *tk = lpx_model_tokenizer(j->model);
        size_t n = o->quality.n_specials;
        const char **sp = malloc((n + (size_t)lpx_vocab_size(tk)) * sizeof *sp);
        if (sp) {
            if (n) memcpy(sp, o->quality.specials, n * sizeof *sp);
            for (int32_t id = 0; id < lpx_vocab_size(tk); id++)
                if (lpx_tokenizer_is_special(tk, id) && lpx_token_text(tk, id) &&
                    lpx_token_text(tk, id)[0])
                    sp[n++] = lpx_token_text(tk, id);
            o->quality.specials = j->own_specials = sp;
            o->quality.n_specials = n;
        }
    }
    if (conc <= 0) conc = auto_concurrency(j);
    lpx_batch_log(j, "concurrency %d, timeout %.3g s, retries %d", conc, o->timeout_s, o->retries);
    if (o->server) {
        workers = calloc((size_t)conc, sizeof *workers);
        for (int32_t i = 0; workers && i < conc; i++)
            pthread_create(&workers[i], NULL, lpx_batch_server_worker, j);
        if (!workers) return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    }

    bool io_ok = true;
    int seen_int = 0, io_err = 0; /* errno of the first failed write (ENOSPC, EFBIG...) */
    for (;;) {
        double t = lpx_batch_now_s(), wake = t + 0.2;
        if (lpx_batch_interrupts(j) != seen_int) {
            if (!seen_int)
                lpx_batch_log(j, "interrupt: no new work; finishing %zu in flight", j->inflight);
            if (lpx_batch_interrupts(j) >= 2 && j->n_eng) {
                lpx_batch_log(j, "second interrupt: cancelling %zu in flight (left for --resume)",
                              j->inflight);
                for (size_t i = 0; i < j->n_slots; i++)
                    if (j->slots[i].t_submit > 0)
                        lpx_engine_cancel(j->eng[j->slots[i].engine], j->slots[i].eng_id);
            }
            seen_int = lpx_batch_interrupts(j);
        }
        /* admit: the first ready slot whose backoff has passed */
        while (!lpx_batch_interrupts(j) && io_ok && j->inflight < (size_t)conc && j->n_ready) {
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
            s->t_submit = lpx_batch_now_s();
            if (s->attempts > 1)
                lpx_batch_log(j, "attempt %d of %s", s->attempts, j->in.tasks[s->task].id);
            j->inflight++;
            if (j->n_eng) {
                cJSON *b = lpx_batch_effective_body(j, &j->in.tasks[s->task]);
                bool sent = b && lpx_batch_engine_submit(j, s, b);
                cJSON_Delete(b);
                if (!sent) {
                    j->inflight--;
                    s->t_submit = 0;
                    if (!b) snprintf(s->out.error, sizeof s->out.error, "out of memory");
                    io_ok = lpx_batch_handle_outcome(j, si);
                    if (!io_ok) io_err = errno;
                }
            } else {
                pthread_mutex_lock(&j->mu);
                j->sendq[j->n_sendq++] = si;
                pthread_cond_signal(&j->cv_send);
                pthread_mutex_unlock(&j->mu);
            }
        }
        if (!j->inflight && (!j->n_ready || lpx_batch_interrupts(j) || !io_ok)) break;
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
            slot *s = &j->slots[got[i]];
            if (j->n_eng) { /* engine mode: the engine's share, before the outcome is handled */
                atomic_fetch_sub(&j->eng_load[s->engine], 1);
                j->eng_results[s->engine] += s->out.kind == OUT_OK;
                j->eng_tokens[s->engine] += s->out.kind == OUT_OK ? s->out.completion_tokens : 0;
            }
            if (!lpx_batch_handle_outcome(j, got[i]) && io_ok) {
                io_ok = false;
                io_err = errno;
            }
            j->slots[got[i]].t_submit = 0;
        }
        /* per-task timeout (engine mode; curl enforces it in server mode) */
        if (j->n_eng && o->timeout_s > 0) {
            double tn = lpx_batch_now_s();
            for (size_t i = 0; i < j->n_slots; i++) {
                slot *s = &j->slots[i];
                if (s->t_submit > 0 && !s->timed_out && tn - s->t_submit > o->timeout_s) {
                    s->timed_out = true;
                    lpx_batch_log(j, "timeout: %s attempt %d after %.3g s", j->in.tasks[s->task].id,
                                  s->attempts, o->timeout_s);
                    lpx_engine_cancel(j->eng[s->engine], s->eng_id);
                }
            }
        }
        progress(j, false);
    }
    if (!io_ok) lpx_batch_note(j, "writing a record in %s failed: %s", o->outdir, strerror(io_err));
    if (workers) {
        pthread_mutex_lock(&j->mu);
        j->stop_workers = true;
        pthread_cond_broadcast(&j->cv_send);
        pthread_mutex_unlock(&j->mu);
        for (int32_t i = 0; i < conc; i++)
            pthread_join(workers[i], NULL);
        free(workers);
    }
    double wall = lpx_batch_now_s() - j->t_start;
    progress(j, true);
    errno = 0;
    bool sum_ok = lpx_batch_write_summary(j, o->outdir, total, wall, lpx_batch_interrupts(j) > 0,
                                          o->server ? "server" : "engine");
    for (int32_t i = 0; j->n_eng > 1 && i < j->n_eng; i++)
        lpx_batch_log(j, "engine %d: %lld results, %lld completion tokens, %.1f tok/s", i,
                      (long long)j->eng_results[i], (long long)j->eng_tokens[i],
                      wall > 0 ? (double)j->eng_tokens[i] / wall : 0);
    lpx_batch_log(j, "%s: %lld succeeded, %lld failed, %lld remaining, %.2f s, %.1f tok/s",
                  lpx_batch_interrupts(j) ? "interrupted" : "finished", (long long)j->n_results,
                  (long long)j->n_failed, (long long)(total - j->n_results - j->n_failed), wall,
                  wall > 0 ? (double)j->run_tokens / wall : 0);
    if (!sum_ok)
        return lpx_errorf(LPX_ERR_IO, "cannot write summary.json in %s: %s", o->outdir,
                          strerror(errno));
    *res = (lpx_batch_result){.total = total,
                              .succeeded = j->n_results,
                              .failed = j->n_failed,
                              .remaining = total - j->n_results - j->n_failed,
                              .interrupted = lpx_batch_interrupts(j) > 0,
                              .complete = io_ok && j->n_results == total};
    return LPX_OK;
}

void lpx_batch_job_free(job *j) {
    lpx_dp_engines_destroy(j->eng, j->n_eng);
    free(j->own_specials);
    if (j->model) lpx_model_close(j->model);
    for (size_t i = 0; i < j->n_slots; i++) {
        free(j->slots[i].out.text);
        cJSON_Delete(j->slots[i].out.body);
        lpx_tool_rules_free(&j->slots[i].tools);
    }
    lpx_batch_input_free(&j->in);
    free(j->slots);
    free(j->ready);
    free(j->doneq);
    free(j->sendq);
    free(j->lat);
    lpx_strvec_free(&j->done);
    lpx_strvec_free(&j->failed);
    lpx_strvec_free(&j->rejects);
    if (j->results_fd >= 0) close(j->results_fd);
    if (j->failures_fd >= 0) close(j->failures_fd);
    if (j->log_fd >= 0) close(j->log_fd);
    if (j->lock_fd >= 0) close(j->lock_fd);
}

lpx_status lpx_batch_run(const lpx_batch_opts *o, lpx_batch_result *r) {
    memset(r, 0, sizeof *r);
    job j;
    memset(&j, 0, sizeof j);
    j.o = *o;
    j.results_fd = j.failures_fd = j.log_fd = j.lock_fd = -1;
    for (int32_t i = 0; i < LPX_DP_MAX; i++)
        atomic_init(&j.eng_load[i], 0);
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    pthread_cond_init(&j.cv_send, NULL);
    lpx_status st = run_job(&j, r);
    lpx_batch_job_free(&j);
    pthread_mutex_destroy(&j.mu);
    pthread_cond_destroy(&j.cv);
    pthread_cond_destroy(&j.cv_send);
    return st;
}
