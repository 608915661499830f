/* Batch input: one JSON object per line, in the OpenAI batch format
 * ({"custom_id","method":"POST","url":"/v1/chat/completions"|"/v1/completions","body"})
 * or the short forms {"id","prompt"} / {"id","messages"}. The whole file is
 * checked before anything runs; bad lines and duplicate ids become rejects. */
#ifndef LPX_BATCH_INPUT_H
#define LPX_BATCH_INPUT_H

#include "lpx.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* A longer line is rejected (and skipped without being held in memory). */
#define LPX_BATCH_MAX_LINE ((size_t)64 << 20)
/* Stop strings a request may give (in-process generation takes this many). */
#define LPX_BATCH_MAX_STOP 16

typedef struct lpx_batch_task {
    char *id;     /* custom_id */
    int64_t line; /* 1-based line in the input */
    bool chat;    /* /v1/chat/completions (else /v1/completions) */
    cJSON *body;  /* the request body (short forms: {"prompt"} or {"messages"}) */
} lpx_batch_task;

typedef struct lpx_batch_reject {
    char *id; /* NULL when the line has no usable id */
    int64_t line;
    char *reason;
    char *param; /* the body's field refused, named as lpx serve's 400 names it; NULL when
                    the line's fault is no field (not JSON, a duplicate id, ...) */
} lpx_batch_reject;

typedef struct lpx_batch_input {
    lpx_batch_task *tasks;
    size_t n_tasks;
    lpx_batch_reject *rejects;
    size_t n_rejects;
    int64_t n_lines; /* non-blank lines */
} lpx_batch_input;

/* Reads and checks the file. Fails only when the file cannot be read; bad
 * lines land in in->rejects with their line number and reason. */
lpx_status lpx_batch_input_read(const char *path, lpx_batch_input *in);
/* The same on an open stream (read to its end, not closed); path only names
 * the input in error messages. */
lpx_status lpx_batch_input_read_stream(FILE *f, const char *path, lpx_batch_input *in);
void lpx_batch_input_free(lpx_batch_input *in);

/* Shard of an id: FNV-1a 64 of its bytes mod n (stable across machines). */
int32_t lpx_batch_shard_of(const char *id, int32_t n);

#endif
