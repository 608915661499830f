/* summary.json of an OUTDIR: counts, tokens, latency percentiles, the prefix cache's hit
 * rate (engine mode), quality flags. */
#include "batch/job.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

bool lpx_batch_write_summary(job *j, const char *dir, int64_t total, double wall_s,
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
    if (j->n_eng) { /* engine mode: prompt tokens this run took from the prefix cache */
        int64_t queries = 0, hits = 0;
        cJSON *ea = cJSON_AddArrayToObject(s, "engines");
        for (int32_t i = 0; i < j->n_eng; i++) {
            lpx_engine_stats es;
            if (lpx_engine_get_stats(j->eng[i], &es) != LPX_OK) continue;
            queries += es.prefix_cache_queries;
            hits += es.prefix_cache_hits;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "engine", i);
            cJSON_AddStringToObject(e, "device", es.device);
            cJSON_AddNumberToObject(e, "run_results", (double)j->eng_results[i]);
            cJSON_AddNumberToObject(e, "run_completion_tokens", (double)j->eng_tokens[i]);
            cJSON_AddNumberToObject(
                e, "completion_tokens_per_s",
                wall_s > 0 ? round((double)j->eng_tokens[i] / wall_s * 100) / 100 : 0);
            cJSON_AddItemToArray(ea, e);
        }
        cJSON *pc = cJSON_AddObjectToObject(s, "prefix_cache");
        cJSON_AddNumberToObject(pc, "queries", (double)queries);
        cJSON_AddNumberToObject(pc, "hits", (double)hits);
        cJSON_AddNumberToObject(
            pc, "hit_rate", queries > 0 ? round((double)hits / (double)queries * 1000) / 1000 : 0);
    }
    cJSON *q = cJSON_AddObjectToObject(s, "quality");
    for (int b = 0; b < LPX_BQ_COUNT; b++)
        cJSON_AddNumberToObject(q, lpx_bq_flag_name(b), (double)j->flag_counts[b]);
    char *txt = cJSON_Print(s);
    cJSON_Delete(s);
    size_t n = txt ? strlen(txt) : 0;
    char *line = txt ? realloc(txt, n + 2) : NULL;
    if (!line) {
        free(txt);
        return false;
    }
    memcpy(line + n, "\n", 2);
    bool ok = lpx_batch_write_atomic(dir, "summary.json", line);
    free(line);
    return ok;
}
