/* lpx batch: options → the batch runner (src/batch/batch.h) → progress and the last line;
 * lpx batch merge combines shard outputs. docs/batch.md has the formats and guarantees. */
#include "base/http_client.h"
#include "batch/batch.h"
#include "cli/cli_num.h"
#include "cli/commands.h"
#include "cli/gen_args.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CMD "batch"

static volatile sig_atomic_t interrupted; /* SIGINT/SIGTERM count */
static void on_sigint(int sig) {
    (void)sig;
    interrupted++;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void note(void *user, const char *msg) {
    fprintf(stderr, "lpx batch: %s\n", msg);
}

/* The progress display: a bar on a terminal (every 0.25 s), else a line at the first
 * report, then at most every 10 s, and the final state. Without a terminal the final line
 * is left out when the last line already showed those counts (a job that ends within one
 * turn); the bar's final call must still end its line. */
typedef struct shown {
    bool tty;
    double t; /* when the last line was shown; 0: none yet */
    int64_t done, failed;
} shown;

static void progress(void *user, const lpx_batch_progress *p, bool final) {
    shown *s = user;
    double t = now_s();
    if (!final && t - s->t < (s->tty ? 0.25 : 10.0)) return;
    if (final && !s->tty && s->t > 0 && p->done == s->done && p->failed == s->failed) return;
    s->t = t;
    s->done = p->done;
    s->failed = p->failed;
    if (s->tty) {
        int w = 30, fill = p->total ? (int)(w * (p->done + p->failed) / p->total) : w;
        char bar[64];
        for (int i = 0; i < w; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[w] = '\0';
        fprintf(stderr, "\r[%s] %lld/%lld done, %lld failed, %.1f tok/s, ETA %.0f s ", bar,
                (long long)p->done, (long long)p->total, (long long)p->failed, p->tok_s, p->eta_s);
        if (final) fputc('\n', stderr);
    } else {
        fprintf(stderr, "lpx batch: %lld/%lld done, %lld failed, %.1f tok/s, ETA %.0f s\n",
                (long long)p->done, (long long)p->total, (long long)p->failed, p->tok_s, p->eta_s);
    }
    fflush(stderr);
}

static void merge_help(FILE *f) {
    fprintf(f, "usage: lpx batch merge DIR... -o OUTDIR\n\n"
               "Combines the OUTDIRs of shards (--shard K/N) into one: results concatenated\n"
               "(an id with results in two DIRs keeps the first), all failure records kept\n"
               "(an id with a result anywhere is not counted failed), summary recomputed.\n"
               "A torn last line (a write cut by a kill) or an unreadable line is not\n"
               "merged: stderr says where it is (the DIRs are never changed) and it counts\n"
               "as remaining.\n");
}

static int merge(int argc, char **argv) {
    const char *out = NULL, *dirs[LPX_BATCH_MAX_MERGE], *dir;
    int n_dirs = 0;
    lpx_opts a = {.cmd = "batch: merge", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (lpx_opts_arg(&a, &dir)) {
            if (n_dirs < LPX_BATCH_MAX_MERGE) dirs[n_dirs] = dir;
            n_dirs++; /* counted past the most for the message */
        } else if (!lpx_opts_str(&a, "-o", &out) && lpx_opts_left(&a)) {
            fprintf(stderr, "lpx batch: merge: unknown option '%s' (see lpx batch merge --help)\n",
                    argv[a.i]);
            a.bad = true;
        }
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, merge_help);
    if (n_dirs > LPX_BATCH_MAX_MERGE) {
        fprintf(stderr, "lpx batch: merge: at most %d directories (got %d)\n", LPX_BATCH_MAX_MERGE,
                n_dirs);
        return 2;
    }
    if (!out || !n_dirs) {
        fprintf(stderr, "lpx batch: merge: DIR... and -o OUTDIR are required "
                        "(see lpx batch merge --help)\n");
        return 2;
    }
    lpx_batch_result r;
    if (lpx_batch_merge(dirs, n_dirs, out, note, NULL, &r) != LPX_OK) {
        fprintf(stderr, "lpx batch: %s\n", lpx_last_error());
        return 1;
    }
    printf("merged %d directories: %lld results, %lld failed, %lld remaining into %s\n", n_dirs,
           (long long)r.succeeded, (long long)r.failed, (long long)r.remaining, out);
    return 0;
}

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

static void help(FILE *f) {
    fprintf(f,
            "usage: lpx batch -i INPUT.jsonl -o OUTDIR (-m MODEL | --server URL) [options]\n"
            "       lpx batch merge DIR... -o OUTDIR\n\n"
            "Runs every line of INPUT (OpenAI batch format, or {\"id\",\"prompt\"} /\n"
            "{\"id\",\"messages\"}) and writes OUTDIR/results.jsonl, failures.jsonl, run.log and\n"
            "summary.json. Results are synced one by one: a killed job continues with --resume.\n\n"
            "  -i, --input FILE        input JSONL\n"
            "  -o, --output DIR        output directory (refused if it exists, unless --resume)\n"
            "  --server URL            send requests to an OpenAI-compatible server instead of\n"
            "                          the in-process engine (-m NAME: every line's model\n"
            "                          field; default: the line's, else GET /v1/models' first)\n"
            "  --api-key KEY           bearer token for --server (default: $OPENAI_API_KEY)\n"
            "  --resume                continue OUTDIR: skip ids that already have a result\n"
            "  --concurrency N|auto    requests in flight, 1 to 4096 (default auto: from the KV\n"
            "                          budget; server: 8)\n"
            "  --timeout S             per-attempt timeout in seconds, 0 to 1e6 (default 0: none)\n"
            "  --retries N             retries of transient failures, with backoff, 0 to 100\n"
            "                          (default 2)\n"
            "  --shard K/N             run only ids in shard K of N (K = 0..N-1, N up to 2^31-1)\n"
            "  -n, --max-tokens N      default max_tokens for lines without one, 1 to 1e7 (256)\n"
            "  --temp T                default temperature, 0 to 100 (also --temperature;\n"
            "                          0 = greedy)\n"
            "  --top-p P               default top_p, 1e-9 to 1 (1)\n"
            "  -s, --seed S            default seed, 0 to 2^53 (default: derived from each id)\n"
            "  --repeat-ngram N        quality: n-gram size of the repetition check, 1 to 64 (3)\n"
            "  --repeat-ratio R        quality: flag when repeated n-grams exceed R, 0 to 1 (0.5)\n"
            "  --repeat-min N          quality: no repetition flag under N n-grams, 1 to 1e6 (8)\n"
            "in-process engine:\n"
            "%s%s"
            "                          A line goes to the engine with the fewest lines in\n"
            "                          flight (ties: the lowest index), as in lpx serve\n\n"
            "A number must be the whole value (no trailing text) and in its range; anything\n"
            "else, like an unknown option, is a usage error (exit 2) before anything is read.\n",
            lpx_engine_args_help, lpx_dp_args_help);
}

static bool concurrency_opt(lpx_opts *a, int32_t *c) {
    const char *v;
    if (!lpx_opts_str(a, "--concurrency", &v)) return false;
    return !strcmp(v, "auto") || lpx_cli_i32(v, 1, 4096, c) ||
           lpx_opts_bad(a, "auto or a whole number from 1 to 4096");
}

static bool shard_opt(lpx_opts *a, lpx_batch_opts *o) {
    const char *v;
    if (!lpx_opts_str(a, "--shard", &v)) return false;
    return parse_shard(v, &o->shard_k, &o->shard_n) ||
           lpx_opts_bad(a, "K/N, whole numbers with 0 <= K < N <= 2147483647");
}

int cmd_batch(int argc, char **argv) {
    /* past `ulimit -f` a write fails with EFBIG, reported like a full disk, instead of
     * the signal killing the job between two records */
    signal(SIGXFSZ, SIG_IGN);
    if (argc >= 2 && !strcmp(argv[1], "merge")) return merge(argc - 1, argv + 1);
    lpx_batch_opts o;
    lpx_batch_opts_init(&o);
    o.api_key = getenv("OPENAI_API_KEY");
    lpx_engine_args ea;
    lpx_engine_args_init(&ea);
    ea.data_parallel = true;
    const char *extra;
    lpx_opts a = {.cmd = CMD, .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (lpx_opts_flag(&a, "--resume"))
            o.resume = true;
        else if (lpx_opts_arg(&a, &extra)) {
            fprintf(stderr, "lpx batch: unexpected argument '%s' (see lpx batch --help)\n", extra);
            a.bad = true;
        } else if (!lpx_engine_args_opt(&a, &ea) && !lpx_opts_str(&a, "-i|--input", &o.input) &&
                   !lpx_opts_str(&a, "-o|--output", &o.outdir) &&
                   !lpx_opts_str(&a, "--server", &o.server) &&
                   !lpx_opts_str(&a, "--api-key", &o.api_key) &&
                   !concurrency_opt(&a, &o.concurrency) &&
                   !lpx_opts_double(&a, "--timeout", 0, false, 1e6, &o.timeout_s) &&
                   !lpx_opts_i32(&a, "--retries", 0, 100, &o.retries) && !shard_opt(&a, &o) &&
                   !lpx_opts_i32(&a, LPX_OPT_MAX_TOKENS, 1, 10000000, &o.max_tokens) &&
                   !lpx_opts_double(&a, LPX_OPT_TEMP, 0, false, 100, &o.temperature) &&
                   !lpx_opts_double(&a, "--top-p", 1e-9, false, 1, &o.top_p) &&
                   /* a JSON number holds it exactly */
                   !lpx_opts_int(&a, "-s|--seed", 0, LPX_BATCH_MAX_SEED, &o.seed) &&
                   !lpx_opts_i32(&a, "--repeat-ngram", 1, 64, &o.quality.ngram) &&
                   !lpx_opts_double(&a, "--repeat-ratio", 0, false, 1, &o.quality.repeat_ratio) &&
                   !lpx_opts_i32(&a, "--repeat-min", 1, 1000000, &o.quality.min_ngrams))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, help);
    if (!o.input || !o.outdir) {
        fprintf(stderr, "lpx batch: -i INPUT and -o OUTDIR are required (see lpx batch --help)\n");
        return 2;
    }
    if (!ea.model && !o.server) {
        fprintf(stderr, "lpx batch: -m MODEL or --server URL is required "
                        "(see lpx batch --help)\n");
        return 2;
    }
    lpx_dp_plan plan;
    int prc = o.server ? 0 : lpx_engine_args_plan(&ea, CMD, &plan);
    if (prc) return prc;
    if (o.server && ea.dp) {
        fprintf(stderr, "lpx batch: --data-parallel-size is for the in-process engine, not "
                        "--server\n");
        return 2;
    }
    o.dp = o.server ? NULL : &plan;
    lpx_engine_args_env(&ea);
    o.model = ea.model;
    o.engine = ea.eo;
    shown s = {.tty = isatty(2)};
    o.interrupted = &interrupted;
    o.progress = progress;
    o.note = note;
    o.user = &s;
    if (o.server && lpx_http_global_init() != LPX_OK) {
        fprintf(stderr, "lpx batch: %s\n", lpx_last_error());
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    lpx_batch_result r;
    lpx_status st = lpx_batch_run(&o, &r);
    if (o.server) lpx_http_global_cleanup();
    if (st != LPX_OK) {
        fprintf(stderr, "lpx batch: %s\n", lpx_last_error());
        return 1;
    }
    fprintf(stderr, "lpx batch: %lld succeeded, %lld failed%s; results in %s\n",
            (long long)r.succeeded, (long long)r.failed,
            r.interrupted ? ", interrupted (continue with --resume)" : "", o.outdir);
    return r.complete && !r.interrupted ? 0 : 1;
}
