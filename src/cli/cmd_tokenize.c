/* lpx tokenize: the model's tokenizer on the command line, one text or a JSONL batch. */
#include "base/error.h"
#include "cli/cli_num.h"
#include "base/json_text.h"
#include "cli/commands.h"
#include "cli/opts.h"
#include "lpx.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: lpx tokenize (-m|--model MODEL | --tokenizer PATH) [options] TEXT\n"
            "       lpx tokenize (-m MODEL | --tokenizer PATH) [options] --jsonl FILE\n\n"
            "Tokenizes TEXT with the model's tokenizer. MODEL is a .gguf file or a Hugging Face\n"
            "model directory, opened as every command opens it. PATH is a tokenizer alone:\n"
            "a tokenizer.json (with tokenizer_config.json beside it when present), a directory\n"
            "holding one, or the tokenizer metadata of a .gguf file; no weights are read.\n\n"
            "options:\n"
            "  --ids            print only the ids, space-separated\n"
            "  --pieces         print only the pieces, as a JSON array of strings\n"
            "  --no-special     treat special-token text (e.g. <|im_start|>) as plain text\n"
            "  --no-bos         do not add the BOS/EOS tokens the tokenizer config asks for\n"
            "  --jsonl FILE     batch: each line of FILE ('-': stdin) is a JSON string; prints\n"
            "                   one JSON array of ids per line\n"
            "  --decode         the input is ids (TEXT: ids separated by spaces; --jsonl: one\n"
            "                   JSON array per line); prints the text (a JSON string per line)\n"
            "  --stream         with --decode: decode token by token and print the chunks as\n"
            "                   a JSON array of strings (never half a UTF-8 character)\n"
            "  --skip-special   with --decode: leave special tokens out of the text\n"
            "  --stats          print lines, tokens and tokens/s to stderr\n"
            "  -h, --help       this help\n");
}

/* "lpx tokenize: WHAT: the error" (what "": the error alone, which names its file). */
static int fail(const char *what) {
    fprintf(stderr, "lpx tokenize: %s%s%s\n", what, *what && *lpx_last_error() ? ": " : "",
            lpx_last_error());
    return 1;
}

/* A tokenizer without a model: tokenizer.json, a directory with one, or GGUF metadata. */
static lpx_status open_tokenizer(const char *path, lpx_tokenizer **t) {
    struct stat st;
    if (stat(path, &st) != 0) return lpx_errorf(LPX_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return lpx_tokenizer_load_hf(path, t);
    size_t n = strlen(path);
    if (n >= 5 && !strcmp(path + n - 5, ".json")) return lpx_tokenizer_load_json_file(path, t);
    lpx_gguf *g;
    lpx_status s = lpx_gguf_open(path, &g);
    if (s != LPX_OK) return s;
    s = lpx_tokenizer_load_gguf(g, t);
    lpx_gguf_close(g);
    return s;
}

typedef struct opts {
    bool ids_only, pieces_only, parse_special, add_special, decode, stream, skip_special, stats;
} opts;

static lpx_status encode(const lpx_tokenizer *t, const opts *o, const char *text, size_t len,
                         int32_t **ids, size_t *cap, size_t *n) {
    for (;;) {
        lpx_status s = lpx_tokenize(t, text, len, o->add_special, o->parse_special, *ids, *cap, n);
        if (s != LPX_OK || *n <= *cap) return s;
        int32_t *p = realloc(*ids, *n * sizeof *p);
        if (!p) return LPX_ERR_NOMEM;
        *ids = p;
        *cap = *n;
    }
}

/* Decodes ids and prints the text (or the streamed chunks) as JSON. An id
 * outside the vocabulary is an error, as /detokenize answers, not "". */
static lpx_status print_decoded(const lpx_tokenizer *t, const opts *o, const int32_t *ids, size_t n,
                                FILE *f) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= lpx_vocab_size(t))
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "token id %d at %zu is out of the vocabulary (size %d)", ids[i], i,
                              lpx_vocab_size(t));
    if (o->stream) {
        size_t cap = lpx_tokenizer_max_piece(t) + 16;
        char *buf = malloc(cap);
        if (!buf) return LPX_ERR_NOMEM;
        lpx_detok_stream s;
        lpx_detok_stream_init(&s, t, o->skip_special);
        fputc('[', f);
        bool first = true;
        for (size_t i = 0; i <= n; i++) {
            size_t w = i < n ? lpx_detok_stream_push(&s, ids[i], buf, cap)
                             : lpx_detok_stream_flush(&s, buf, cap);
            if (!w) continue;
            if (!first) fputc(',', f);
            lpx_json_put_string(f, buf, w);
            first = false;
        }
        fputs("]\n", f);
        free(buf);
        return LPX_OK;
    }
    size_t need = 0;
    lpx_status s = lpx_detokenize(t, ids, n, o->skip_special, NULL, 0, &need);
    if (s != LPX_OK) return s;
    char *buf = malloc(need + 1);
    if (!buf) return LPX_ERR_NOMEM;
    s = lpx_detokenize(t, ids, n, o->skip_special, buf, need + 1, &need);
    if (s == LPX_OK) {
        lpx_json_put_string(f, buf, need);
        fputc('\n', f);
    }
    free(buf);
    return s;
}

static void print_ids(FILE *f, const int32_t *ids, size_t n) {
    fputc('[', f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, i ? ",%d" : "%d", ids[i]);
    fputs("]\n", f);
}

static int run_jsonl(const lpx_tokenizer *t, const opts *o, const char *path) {
    FILE *in = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!in) {
        fprintf(stderr, "lpx tokenize: %s: %s\n", path, strerror(errno));
        return 1;
    }
    char *line = NULL;
    size_t line_cap = 0, cap = 0, n = 0, lines = 0, tokens = 0;
    int32_t *ids = NULL;
    ssize_t len;
    int rc = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char *text = NULL;
    while (rc == 0 && (len = getline(&line, &line_cap, in)) >= 0) {
        lines++;
        cJSON *v = o->decode ? cJSON_ParseWithLength(line, (size_t)len) : NULL;
        /* Escapes never grow: the text fits in the line's length. */
        char *grown = o->decode ? text : realloc(text, (size_t)len + 1);
        long tlen =
            grown ? (text = grown, o->decode ? -1 : lpx_json_parse_string(line, (size_t)len, text))
                  : -1;
        if (!o->decode && tlen >= 0) {
            if (encode(t, o, text, (size_t)tlen, &ids, &cap, &n) != LPX_OK) {
                fprintf(stderr, "lpx tokenize: %s line %zu: %s\n", path, lines, lpx_last_error());
                rc = 1;
            } else {
                tokens += n;
                print_ids(stdout, ids, n);
            }
        } else if (o->decode && cJSON_IsArray(v)) {
            n = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, v) {
                if (n == cap) {
                    cap = cap ? cap * 2 : 256;
                    int32_t *p = realloc(ids, cap * sizeof *p);
                    if (!p) break;
                    ids = p;
                }
                ids[n++] = cJSON_IsNumber(e) ? (int32_t)e->valuedouble : -1;
            }
            tokens += n;
            if (print_decoded(t, o, ids, n, stdout) != LPX_OK) {
                fprintf(stderr, "lpx tokenize: %s line %zu: %s\n", path, lines, lpx_last_error());
                rc = 1;
            }
        } else {
            fprintf(stderr, "lpx tokenize: %s line %zu: expected a JSON %s\n", path, lines,
                    o->decode ? "array of ids" : "string");
            rc = 1;
        }
        cJSON_Delete(v);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (o->stats)
        fprintf(stderr, "lpx tokenize: %zu lines, %zu tokens, %.3f s, %.0f tokens/s\n", lines,
                tokens, secs, secs > 0 ? (double)tokens / secs : 0.0);
    free(line);
    free(text);
    free(ids);
    if (in != stdin) fclose(in);
    return rc;
}

/* What may stand between the ids of TEXT with --decode. */
#define SEPS " ,\n"

static int run_text(const lpx_tokenizer *t, const opts *o, const char *text) {
    int32_t *ids = NULL;
    size_t cap = 0, n = 0;
    int rc = 0;
    if (o->decode) {
        for (const char *p = text; *p;) {
            size_t len = strcspn(p, SEPS);
            if (!len) {
                p++;
                continue;
            }
            /* one id, copied out of the list so that cli_num sees it alone */
            char id[16];
            snprintf(id, sizeof id, "%.*s", (int)(len < sizeof id ? len : sizeof id - 1), p);
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                int32_t *q = realloc(ids, cap * sizeof *q);
                if (!q) {
                    free(ids);
                    return fail("out of memory");
                }
                ids = q;
            }
            if (len >= sizeof id || !lpx_cli_i32(id, 0, INT32_MAX, &ids[n++])) {
                lpx_cli_opt_bad("tokenize", "--decode", text,
                                "token ids from 0 to 2147483647 separated by spaces or commas");
                free(ids);
                return 2;
            }
            p += len;
        }
        rc = print_decoded(t, o, ids, n, stdout) == LPX_OK ? 0 : fail("--decode");
        free(ids);
        return rc;
    }
    if (encode(t, o, text, strlen(text), &ids, &cap, &n) != LPX_OK) {
        free(ids);
        return fail("encode");
    }
    if (o->ids_only) {
        for (size_t i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    } else {
        size_t pcap = lpx_tokenizer_max_piece(t) + 16;
        char *piece = malloc(pcap);
        if (!piece) {
            free(ids);
            return fail("out of memory");
        }
        if (o->pieces_only) putchar('[');
        for (size_t i = 0; i < n; i++) {
            size_t len = 0;
            lpx_detokenize(t, &ids[i], 1, false, piece, pcap, &len);
            if (o->pieces_only && i)
                putchar(',');
            else if (!o->pieces_only)
                printf("%6d  ", ids[i]);
            lpx_json_put_string(stdout, piece, len < pcap ? len : pcap - 1);
            if (!o->pieces_only) putchar('\n');
        }
        if (o->pieces_only) puts("]");
        free(piece);
    }
    free(ids);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *tok_path = NULL, *jsonl = NULL, *text = NULL;
    opts o = {.parse_special = true, .add_special = true};
    bool two_texts = false;
    const char *arg;
    lpx_opts a = {.cmd = "tokenize", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (lpx_opts_flag(&a, "--ids"))
            o.ids_only = true;
        else if (lpx_opts_flag(&a, "--pieces"))
            o.pieces_only = true;
        else if (lpx_opts_flag(&a, "--no-special"))
            o.parse_special = false;
        else if (lpx_opts_flag(&a, "--no-bos"))
            o.add_special = false;
        else if (lpx_opts_flag(&a, "--decode"))
            o.decode = true;
        else if (lpx_opts_flag(&a, "--stream"))
            o.stream = true;
        else if (lpx_opts_flag(&a, "--skip-special"))
            o.skip_special = true;
        else if (lpx_opts_flag(&a, "--stats"))
            o.stats = true;
        else if (lpx_opts_arg(&a, &arg)) {
            two_texts |= text != NULL;
            text = arg;
        } else if (!lpx_opts_str(&a, LPX_OPT_MODEL, &model) &&
                   !lpx_opts_str(&a, "--tokenizer", &tok_path) &&
                   !lpx_opts_str(&a, "--jsonl", &jsonl))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    if (two_texts) {
        fprintf(stderr, "lpx tokenize: one TEXT only (quote it)\n");
        return 2;
    }
    if (!model == !tok_path || (!text && !jsonl) || (text && jsonl) ||
        (o.ids_only && o.pieces_only) || (o.stream && !o.decode)) {
        fprintf(stderr,
                "lpx tokenize: need one of -m MODEL or --tokenizer PATH, and one of TEXT or "
                "--jsonl FILE (lpx tokenize --help)\n");
        return 2;
    }
    lpx_model *m = NULL;
    lpx_tokenizer *own = NULL;
    const lpx_tokenizer *t;
    if (model) {
        if (lpx_model_open(model, &m) != LPX_OK) return fail(""); /* the message names it */
        t = lpx_model_tokenizer(m);
        if (!t) {
            lpx_model_close(m);
            fprintf(stderr, "lpx tokenize: %s: the model has no tokenizer\n", model);
            return 1;
        }
    } else {
        if (open_tokenizer(tok_path, &own) != LPX_OK) return fail("");
        t = own;
    }
    int rc = jsonl ? run_jsonl(t, &o, jsonl) : run_text(t, &o, text);
    lpx_tokenizer_free(own);
    lpx_model_close(m);
    return rc;
}
