/* libFuzzer target: the batch input reader (src/batch/input.c) on arbitrary
 * files, then the invariants lpx batch relies on: every non-blank line is a
 * task or a reject, task ids are unique and non-empty, line numbers are in
 * the file, the integer fields it casts are in range. Built by scripts/fuzz.sh. */
#include "batch/input.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_id(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0; /* fmemopen needs a buffer; an empty file is a unit test */
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f) return 0;
    lpx_batch_input in;
    lpx_status st = lpx_batch_input_read_stream(f, "fuzz", &in);
    fclose(f);
    if (st != LPX_OK) return 0;
    int64_t newlines = 0;
    for (size_t i = 0; i < size; i++)
        newlines += data[i] == '\n';
    if ((int64_t)(in.n_tasks + in.n_rejects) != in.n_lines || in.n_lines > newlines + 1) abort();
    const char **ids = malloc((in.n_tasks + 1) * sizeof *ids);
    if (!ids) abort();
    for (size_t i = 0; i < in.n_tasks; i++) {
        const lpx_batch_task *t = &in.tasks[i];
        if (!t->id[0] || t->line < 1 || t->line > newlines + 1 || !cJSON_IsObject(t->body)) abort();
        ids[i] = t->id;
        (void)lpx_batch_shard_of(t->id, 7);
        /* the casts lpx batch makes of a checked body */
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(t->body, "max_tokens");
        const cJSON *seed = cJSON_GetObjectItemCaseSensitive(t->body, "seed");
        volatile int64_t sink = 0;
        if (cJSON_IsNumber(mt)) sink += (int32_t)mt->valuedouble;
        if (cJSON_IsNumber(seed)) sink += (int64_t)seed->valuedouble;
        (void)sink;
    }
    qsort(ids, in.n_tasks, sizeof *ids, cmp_id);
    for (size_t i = 1; i < in.n_tasks; i++)
        if (!strcmp(ids[i - 1], ids[i])) abort();
    free(ids);
    for (size_t i = 0; i < in.n_rejects; i++) {
        const lpx_batch_reject *r = &in.rejects[i];
        if (!r->reason || !r->reason[0] || r->line < 1 || r->line > newlines + 1) abort();
        if (r->id) (void)lpx_batch_shard_of(r->id, 7);
    }
    lpx_batch_input_free(&in);
    return 0;
}
