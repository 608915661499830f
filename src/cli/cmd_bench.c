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
        "  --report OUT.html       also write the table, clocks and charts of tok/s per test\n"
        "                          and batch size as one self-contained HTML file\n"
        "  -h, --help              this help\n",
        lpx_backend_args_help);
}

static void print_results(const char *fmt, const bench_engine_meta *m, const bench_engine_row *rs,
                          int n) {
    if (!strcmp(fmt, "json")) {
        printf("{\"model\": \"%s\", \"device\": \"%s\", \"gpu\": \"%s\", "
               "\"read_bandwidth_GBps\": %.1f, \"decode\": \"%s\", \"kv_cache_dtype\": \"%s\", "
               "\"sm_mhz_before\": %d, "
               "\"sm_mhz_after\": %d, \"mem_mhz_before\": %d, \"mem_mhz_after\": %d, "
               "\"throttled\": %s, \"tests\": [",
               m->model, m->device, m->gpu, m->read_bandwidth / 1e9, m->decode, m->kv_dtype,
               m->before.sm_mhz, m->after.sm_mhz, m->before.mem_mhz, m->after.mem_mhz,
               m->throttled ? "true" : "false");
        for (int i = 0; i < n; i++) {
            const bench_engine_row *r = &rs[i];
            printf("%s{\"test\": \"%s\", \"batch\": %d, \"depth\": %d, \"tok_s\": %.2f, "
                   "\"tok_s_sd\": %.2f, "
                   "\"ms_per_step\": %.4f, \"floor_ms_per_step\": %.4f, \"pct_of_floor\": %.1f}",
                   i ? ", " : "", r->test, r->batch, r->depth, r->tok_s, r->tok_s_sd,
                   r->ms_per_step, r->floor_ms_per_step, r->pct_of_floor);
        }
        printf("]}\n");
        return;
    }
    const bool csv = !strcmp(fmt, "csv");
    if (csv)
        printf("test,batch,tok_s,tok_s_sd,ms_per_step,floor_ms_per_step,pct_of_floor,depth\n");
    else
        printf("model: %s\ndevice: %s (%s), read bandwidth %.1f GB/s; decode steps: %s; KV "
               "cache: %s\n\n"
               "| test | tok/s | ± sd | ms/step | floor ms/step | %% of floor |\n"
               "| --- | ---: | ---: | ---: | ---: | ---: |\n",
               m->model, m->device, m->gpu, m->read_bandwidth / 1e9, m->decode, m->kv_dtype);
    for (int i = 0; i < n; i++) {
        const bench_engine_row *r = &rs[i];
        if (csv)
            printf("%s,%d,%.2f,%.2f,%.4f,%.4f,%.1f,%d\n", r->test, r->batch, r->tok_s, r->tok_s_sd,
                   r->ms_per_step, r->floor_ms_per_step, r->pct_of_floor, r->depth);
        else
            printf("| %s | %.1f | %.1f | %.3f | %.3f | %.1f |\n", r->test, r->tok_s, r->tok_s_sd,
                   r->ms_per_step, r->floor_ms_per_step, r->pct_of_floor);
    }
    if (!csv) {
        if (m->before.ok)
            printf("\nclocks SM/mem MHz: before %d/%d [%s], after %d/%d [%s]%s\n", m->before.sm_mhz,
                   m->before.mem_mhz, m->before.throttle, m->after.sm_mhz, m->after.mem_mhz,
                   m->after.throttle, m->throttled ? "  ** THROTTLED: not a result **" : "");
        else
            printf("\nclocks: not available (no NVML)\n");
    }
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
    lpx_opts a = {.cmd = "bench", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (!lpx_engine_args_opt(&a, &ea) && !lpx_opts_i32(&a, "-p", 0, 65536, &o.p) &&
            !lpx_opts_i32(&a, "-n", 1, 65536, &o.n) &&
            !lpx_opts_i32_list(&a, "-d|--depth", 1, 65536, o.depths, BENCH_MAX_DEPTHS,
                               &o.n_depths) &&
            !lpx_opts_i32(&a, "-r", 1, 64, &o.reps) &&
            !lpx_opts_i32_list(&a, "-b", 1, 4096, o.batches, BENCH_MAX_BATCHES, &o.n_batches) &&
            !format_opt(&a, &fmt) && !lpx_opts_str(&a, "--report", &report))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    if (!lpx_engine_args_check(&ea, "bench")) return 2;
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
        print_results(fmt, &r.meta, r.rows, r.n_rows);
        if (report) st = bench_engine_write_html(report, &r.meta, r.rows, (size_t)r.n_rows);
    }
    if (st != LPX_OK) {
        fprintf(stderr, "lpx bench: %s\n", lpx_last_error());
        return 1;
    }
    return 0;
}
