/* lpx bench -m MODEL: options → the engine benchmark (src/bench/bench_engine.c) → the
 * table (md, json or csv) and the HTML report; lpx bench serve is cmd_bench_serve.c. */
#include "bench/bench_engine.h"
#include "cli/cli_dev_env.h"
#include "cli/commands.h"
#include "cli/gen_args.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: lpx bench -m MODEL [-p 512] [-n 128] [-d 128,...] [-b 1,16,64,256] [-r 5]\n"
        "                 [-o md|json|csv] [--device cpu|cuda|cuda:N] [--report OUT.html]\n"
        "                 [-dp N | --device cuda:0,1] [--dp-baseline]\n"
        "       lpx bench serve --url URL ...   (load generator for a server; see\n"
        "                                        lpx bench serve --help)\n\n"
        "Runs the backend directly on random token ids and prints, per test, tokens/s\n"
        "(median of r repetitions after one warm-up, ± standard deviation), ms per step\n"
        "(a decode step ends in greedy sampling on the device, as the engine's do, so\n"
        "only token ids come back) and the %% of the bandwidth floor: (weight bytes +\n"
        "KV bytes read per step) over the read bandwidth measured at start. Decode steps\n"
        "run one step ahead where the backend can (step N+1 queued before step N's\n"
        "tokens are read, its tokens the ones step N draws), as the engine's do.\n"
        "--no-step-ahead waits for each step first; --no-device-sampling copies every\n"
        "decode step's logits to the host instead (and waits too).\n\n"
        "%s"
        "  -p N                    prompt tokens of the prefill test ppN, 0 to 65536 (0: skip)\n"
        "  -n N                    decode steps per test (tg and batched), 1 to 65536\n"
        "  -d, --depth LIST        contexts before decoding starts, up to 8 of 1 to 65536\n"
        "                          (default 128); each decode test runs at each, a row\n"
        "                          each (\"tg128 @ d4096\" when more than one)\n"
        "  -b LIST                 decode batch sizes; 1 is the tg test (default 1,16,64,256)\n"
        "  -r N                    timed repetitions, 1 to 64 (default 5)\n"
        "  -o md|json|csv          output format (default md)\n"
        "%s"
        "                          Every test runs on each engine at once (a thread each,\n"
        "                          repetitions started together): a row per engine and\n"
        "                          their aggregate (\"all\": tok/s summed)\n"
        "  --dp-baseline           with -dp N: first run engine 0 alone; each aggregate\n"
        "                          row shows its ratio to N x that figure\n"
        "  --report OUT.html       also write the table, clocks and charts of tok/s per test\n"
        "                          and batch size as one self-contained HTML file\n"
        "  -h, --help              this help\n",
        lpx_backend_args_help, lpx_dp_args_help);
}

static bool format_opt(lpx_opts *a, const char **fmt) {
    if (!lpx_opts_str(a, "-o", fmt)) return false;
    return !strcmp(*fmt, "md") || !strcmp(*fmt, "json") || !strcmp(*fmt, "csv") ||
           lpx_opts_bad(a, "md, json or csv");
}

int cmd_bench(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "serve") == 0) return cmd_bench_serve(argc - 1, argv + 1);
    const char *fmt = "md", *report = NULL;
    bench_engine_opts o;
    bench_engine_opts_init(&o);
    lpx_engine_args ea;
    lpx_engine_args_init(&ea);
    ea.backend_only = true;
    ea.data_parallel = true;
    lpx_opts a = {.cmd = "bench", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (!lpx_engine_args_opt(&a, &ea) && !lpx_opts_i32(&a, "-p", 0, 65536, &o.p) &&
            !lpx_opts_i32(&a, "-n", 1, 65536, &o.n) &&
            !lpx_opts_i32_list(&a, "-d|--depth", 1, 65536, o.depths, BENCH_MAX_DEPTHS,
                               &o.n_depths) &&
            !lpx_opts_i32(&a, "-r", 1, 64, &o.reps) &&
            !lpx_opts_i32_list(&a, "-b", 1, 4096, o.batches, BENCH_MAX_BATCHES, &o.n_batches) &&
            !format_opt(&a, &fmt) && !lpx_opts_str(&a, "--report", &report) &&
            !(lpx_opts_flag(&a, "--dp-baseline") && (o.dp_baseline = true)))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    if (!lpx_engine_args_check(&ea, "bench")) return 2;
    lpx_dp_plan plan;
    int prc = lpx_engine_args_plan(&ea, "bench", &plan);
    if (prc) return prc;
    if (o.dp_baseline && plan.n < 2) {
        fprintf(stderr, "lpx bench: --dp-baseline needs several engines (-dp N, N > 1)\n");
        return 2;
    }
    o.dp = &plan;
    o.model = ea.model;
    o.device = ea.eo.device;
    o.n_threads = ea.eo.n_threads;
    o.step_ahead = ea.eo.step_ahead;
    o.device_sampling = ea.eo.device_sampling;
    o.kv_dtype = ea.eo.kv_cache_dtype;
    lpx_cli_dev_env(o.device, &o.tune, &o.trace);
    bench_engine_result r;
    lpx_status st = bench_engine_run(&o, &r);
    if (st == LPX_OK) {
        bench_engine_print(stdout, fmt, &r);
        if (report) st = bench_engine_write_html(report, &r.meta, r.rows, (size_t)r.n_rows);
        bench_engine_result_free(&r);
    }
    if (st != LPX_OK) {
        fprintf(stderr, "lpx bench: %s\n", lpx_last_error());
        return 1;
    }
    return 0;
}
