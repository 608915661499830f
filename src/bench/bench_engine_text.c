/* lpx bench's table as text (bench_engine_print): md, json or csv. */
#include "bench/bench_engine.h"

#include <stdio.h>
#include <string.h>

/* One row in fmt; with several engines (n > 1) its engine ("all" for the aggregate)
 * and, measured with --dp-baseline, the aggregate's ratio to n x engine 0 alone. */
static void print_row(FILE *f, const char *fmt, const bench_engine_row *r, int n, bool first) {
    char eng[16] = "all", vs[64] = "";
    if (r->engine >= 0) snprintf(eng, sizeof eng, "%d", r->engine);
    if (!strcmp(fmt, "json")) {
        fprintf(f,
                "%s{\"test\": \"%s\", \"batch\": %d, \"depth\": %d, \"tok_s\": %.2f, "
                "\"tok_s_sd\": %.2f, \"ms_per_step\": %.4f, \"floor_ms_per_step\": %.4f, "
                "\"pct_of_floor\": %.1f",
                first ? "" : ", ", r->test, r->batch, r->depth, r->tok_s, r->tok_s_sd,
                r->ms_per_step, r->floor_ms_per_step, r->pct_of_floor);
        if (n > 1 && r->engine >= 0) fprintf(f, ", \"engine\": %d", r->engine);
        if (n > 1 && r->engine < 0 && r->vs_one > 0)
            fprintf(f, ", \"engine\": \"all\", \"one_tok_s\": %.2f, \"vs_one\": %.4f", r->one_tok_s,
                    r->vs_one);
        else if (n > 1 && r->engine < 0)
            fprintf(f, ", \"engine\": \"all\", \"one_tok_s\": null, \"vs_one\": null");
        fprintf(f, "}");
        return;
    }
    if (n > 1 && r->vs_one > 0) snprintf(vs, sizeof vs, "%.3f", r->vs_one);
    if (!strcmp(fmt, "csv"))
        fprintf(f, "%s,%d,%.2f,%.2f,%.4f,%.4f,%.1f,%d", r->test, r->batch, r->tok_s, r->tok_s_sd,
                r->ms_per_step, r->floor_ms_per_step, r->pct_of_floor, r->depth);
    else
        fprintf(f, "| %s | %.1f | %.1f | %.3f | %.3f | %.1f |", r->test, r->tok_s, r->tok_s_sd,
                r->ms_per_step, r->floor_ms_per_step, r->pct_of_floor);
    if (n > 1) fprintf(f, strcmp(fmt, "csv") ? " %s | %s |" : ",%s,%s", eng, vs);
    fprintf(f, "\n");
}

void bench_engine_print(FILE *f, const char *fmt, const bench_engine_result *res) {
    const bench_engine_meta *m = &res->meta;
    const int n = res->n_engines;
    if (!strcmp(fmt, "json")) {
        fprintf(f,
                "{\"model\": \"%s\", \"device\": \"%s\", \"gpu\": \"%s\", "
                "\"read_bandwidth_GBps\": %.1f, \"decode\": \"%s\", \"kv_cache_dtype\": \"%s\", "
                "\"sm_mhz_before\": %d, "
                "\"sm_mhz_after\": %d, \"mem_mhz_before\": %d, \"mem_mhz_after\": %d, "
                "\"throttled\": %s, ",
                m->model, m->device, m->gpu, m->read_bandwidth / 1e9, m->decode, m->kv_dtype,
                m->before.sm_mhz, m->after.sm_mhz, m->before.mem_mhz, m->after.mem_mhz,
                m->throttled ? "true" : "false");
        if (n > 1) fprintf(f, "\"engines\": \"%s\", ", m->engines);
        fprintf(f, "\"tests\": [");
    }
    const bool csv = !strcmp(fmt, "csv"), md = !strcmp(fmt, "md");
    if (csv)
        fprintf(f, "test,batch,tok_s,tok_s_sd,ms_per_step,floor_ms_per_step,pct_of_floor,depth%s\n",
                n > 1 ? ",engine,vs_one" : "");
    if (md)
        fprintf(f,
                "model: %s\ndevice: %s (%s), read bandwidth %.1f GB/s; decode steps: %s; KV "
                "cache: %s\n%s%s%s\n"
                "| test | tok/s | ± sd | ms/step | floor ms/step | %% of floor |%s\n"
                "| --- | ---: | ---: | ---: | ---: | ---: |%s\n",
                m->model, m->device, m->gpu, m->read_bandwidth / 1e9, m->decode, m->kv_dtype,
                n > 1 ? "engines at once: " : "", n > 1 ? m->engines : "", n > 1 ? "\n" : "",
                n > 1 ? " engine | vs N x one |" : "", n > 1 ? " ---: | ---: |" : "");
    for (int i = 0; i < res->n_rows; i++) {
        for (int k = 0; k < n && n > 1; k++)
            print_row(f, fmt, &res->engine_rows[(size_t)k * BENCH_MAX_ROWS + (size_t)i], n,
                      !i && !k);
        print_row(f, fmt, &res->rows[i], n, !i && n == 1);
    }
    if (!md) {
        if (!csv) fprintf(f, "]}\n");
        return;
    }
    if (m->before.ok)
        fprintf(f, "\nclocks SM/mem MHz: before %d/%d [%s], after %d/%d [%s]%s\n", m->before.sm_mhz,
                m->before.mem_mhz, m->before.throttle, m->after.sm_mhz, m->after.mem_mhz,
                m->after.throttle, m->throttled ? "  ** THROTTLED: not a result **" : "");
    else
        fprintf(f, "\nclocks: not available (no NVML)\n");
}
