/* lpx run: one generation, streamed to stdout, then stats on stderr (or one
 * JSON object with --json). Ctrl-C cancels the generation: nothing more of it is
 * printed, the stats are, and the exit status is 130. */
#include "base/readall.h"
#include "cli/commands.h"
#include "cli/gen_args.h"
#include "model/prompt.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROMPT_FILE ((size_t)64 << 20) /* far beyond any context window */

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
    interrupted = sig;
}

typedef struct run_state {
    bool json, done;
    int32_t *ids;
    int32_t n_ids, cap_ids;
    char *text;
    size_t n_text, cap_text;
    cJSON *logprobs; /* array, with --logprobs */
    lpx_event fin;   /* the finish event (pointers not kept) */
    char error[512];
} run_state;

static void on_event(const lpx_event *ev, void *user) {
    run_state *r = user;
    if (ev->token >= 0) {
        if (r->n_ids == r->cap_ids) {
            r->cap_ids = r->cap_ids ? 2 * r->cap_ids : 256;
            r->ids = realloc(r->ids, (size_t)r->cap_ids * sizeof *r->ids);
        }
        if (r->ids) r->ids[r->n_ids++] = ev->token;
        if (r->logprobs) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "id", ev->token);
            cJSON_AddNumberToObject(o, "logprob", ev->logprob);
            cJSON *top = cJSON_AddArrayToObject(o, "top");
            for (int32_t i = 0; i < ev->n_top; i++) {
                cJSON *t = cJSON_CreateObject();
                cJSON_AddNumberToObject(t, "id", ev->top[i].id);
                cJSON_AddNumberToObject(t, "logprob", ev->top[i].logprob);
                cJSON_AddItemToArray(top, t);
            }
            cJSON_AddItemToArray(r->logprobs, o);
        }
    }
    if (ev->text_len && !interrupted) { /* after a ^C, nothing more of the text */
        if (r->json) {
            if (r->n_text + ev->text_len + 1 > r->cap_text) {
                r->cap_text = 2 * (r->n_text + ev->text_len + 1);
                r->text = realloc(r->text, r->cap_text);
            }
            if (r->text) {
                memcpy(r->text + r->n_text, ev->text, ev->text_len);
                r->n_text += ev->text_len;
                r->text[r->n_text] = '\0';
            }
        } else {
            fwrite(ev->text, 1, ev->text_len, stdout);
            fflush(stdout);
        }
    }
    if (ev->finish) {
        r->fin = *ev;
        r->done = true;
        if (ev->error) snprintf(r->error, sizeof r->error, "%s", ev->error);
    }
}

static void help(FILE *f) {
    fprintf(f,
            "usage: lpx run -m MODEL (-p TEXT | -f FILE) [options]\n\n"
            "Generates a continuation of the prompt (or, with --chat, the assistant's answer),\n"
            "streams it to stdout, then prints stats to stderr. Ctrl-C stops it (the stats\n"
            "are printed; exit status 130). Exit status: 0 done, 1 failed, 2 usage error.\n\n"
            "  -p, --prompt TEXT       prompt text\n"
            "  -f, --file FILE         read the prompt from FILE\n"
            "  --chat                  wrap the prompt in the model's chat template\n"
            "  --json                  print one JSON object (text, token ids, stats) instead\n"
            "  --logprobs N            with --json: top-N log-probabilities per token\n"
            "%s%s",
            lpx_engine_args_help, lpx_gen_args_help);
}

int cmd_run(int argc, char **argv) {
    lpx_gen_args g;
    lpx_gen_args_init(&g);
    const char *prompt = NULL, *file = NULL;
    bool chat = false, json = false;
    lpx_opts a = {.cmd = "run", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (lpx_opts_flag(&a, "--chat"))
            chat = true;
        else if (lpx_opts_flag(&a, "--json"))
            json = true;
        else if (!lpx_gen_args_opt(&a, &g) && !lpx_opts_str(&a, "-p|--prompt", &prompt) &&
                 !lpx_opts_str(&a, "-f|--file", &file) &&
                 !lpx_opts_i32(&a, "--logprobs", 0, 20, &g.req.sampling.logprobs))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, help);
    if (!lpx_engine_args_check(&g.e, "run")) return 2;
    if (!prompt == !file) {
        fprintf(stderr, "lpx run: give the prompt with exactly one of -p TEXT and -f FILE\n");
        return 2;
    }
    size_t len = 0;
    char *file_text = NULL;
    if (file) {
        if (lpx_read_file(file, MAX_PROMPT_FILE, &file_text, &len) != LPX_OK) {
            fprintf(stderr, "lpx run: prompt file %s\n", lpx_last_error());
            return 1;
        }
        prompt = file_text;
    }
    if (!prompt[0]) {
        fprintf(stderr, "lpx run: empty prompt\n");
        free(file_text);
        return 2;
    }
    lpx_model *m;
    lpx_engine *e;
    int rc = lpx_gen_args_open(&g, "run", &m, &e);
    if (rc) {
        free(file_text);
        return rc;
    }
    lpx_chat_message msgs[2];
    size_t n_msgs = 0;
    if (chat) {
        if (g.system) msgs[n_msgs++] = (lpx_chat_message){"system", g.system};
        msgs[n_msgs++] = (lpx_chat_message){"user", prompt};
        g.req.messages = msgs;
        g.req.n_messages = n_msgs;
    } else {
        g.req.prompt_text = prompt;
    }
    /* -n past the context: refused before any work, in serve's and batch's words */
    lpx_engine_stats es;
    lpx_engine_get_stats(e, &es);
    char msg[512];
    if (g.given_max && !lpx_request_fits(m, &g.req, es.max_model_len, msg, sizeof msg)) {
        fprintf(stderr, "lpx run: -n %d: %s\n", g.req.max_tokens, msg);
        lpx_engine_destroy(e);
        lpx_model_close(m);
        free(file_text);
        return 1;
    }
    run_state r = {.json = json};
    if (json && g.req.sampling.logprobs > 0) r.logprobs = cJSON_CreateArray();
    uint64_t id;
    lpx_status st = lpx_engine_submit(e, &g.req, on_event, &r, &id);
    if (st != LPX_OK) {
        rc = lpx_gen_args_fail("run", st);
    } else {
        struct sigaction sa = {.sa_handler = on_sigint};
        sigaction(SIGINT, &sa, NULL);
        bool busy = true, cancelled = false;
        while (busy && !r.done) {
            if (interrupted && !cancelled) {
                lpx_engine_cancel(e, id);
                cancelled = true;
            }
            st = lpx_engine_step(e, &busy);
            if (st != LPX_OK && !r.done) break;
        }
        signal(SIGINT, SIG_DFL);
        if (!r.done) {
            fprintf(stderr, "lpx run: %s\n", lpx_last_error());
            rc = 1;
        }
    }
    if (r.done) {
        lpx_engine_stats es;
        lpx_engine_get_stats(e, &es);
        const lpx_event *f = &r.fin;
        const char *reason = lpx_finish_reason_name(f->finish);
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "text", r.text ? r.text : "");
            cJSON_AddItemToObject(o, "token_ids", cJSON_CreateIntArray(r.ids, r.n_ids));
            cJSON_AddStringToObject(o, "finish_reason", reason);
            if (r.error[0]) cJSON_AddStringToObject(o, "error", r.error);
            cJSON_AddNumberToObject(o, "prompt_tokens", f->n_prompt_tokens);
            cJSON_AddNumberToObject(o, "output_tokens", f->n_output_tokens);
            cJSON_AddNumberToObject(o, "ttft_ms", f->ttft_ms);
            cJSON_AddNumberToObject(o, "decode_tok_s", f->decode_tok_s);
            cJSON_AddNumberToObject(o, "total_ms", f->total_ms);
            cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)es.peak_rss);
            cJSON_AddNumberToObject(o, "backend_memory_bytes", (double)es.backend_memory);
            cJSON_AddNumberToObject(o, "kv_cache_bytes", (double)es.kv_bytes);
            cJSON_AddStringToObject(o, "kv_cache_dtype", es.kv_cache_dtype);
            cJSON_AddNumberToObject(o, "max_model_len", es.max_model_len);
            cJSON_AddNumberToObject(o, "seed", (double)g.req.sampling.seed);
            cJSON_AddStringToObject(o, "device", es.device);
            cJSON_AddNumberToObject(o, "steps", (double)es.n_steps);
            cJSON_AddNumberToObject(o, "steps_ahead", (double)es.steps_ahead);
            if (r.logprobs) {
                cJSON_AddItemToObject(o, "logprobs", r.logprobs);
                r.logprobs = NULL;
            }
            char *s = cJSON_PrintUnformatted(o);
            if (s) puts(s);
            fflush(stdout);
            free(s);
            cJSON_Delete(o);
        } else {
            fputc('\n', stdout);
            fflush(stdout);
            fprintf(stderr,
                    "\nprompt %d tokens | output %d tokens | TTFT %.1f ms | decode %.1f tok/s | "
                    "total %.2f s | peak RSS %.0f MiB | %s | finish: %s\n",
                    f->n_prompt_tokens, f->n_output_tokens, f->ttft_ms, f->decode_tok_s,
                    f->total_ms / 1e3, (double)es.peak_rss / (1 << 20), es.device, reason);
        }
        if (f->finish == LPX_FINISH_ERROR) {
            fprintf(stderr, "lpx run: %s\n", r.error);
            rc = 1;
        } else if (f->finish == LPX_FINISH_CANCELLED) {
            rc = 130; /* as a shell reports a command Ctrl-C ended */
        }
    }
    cJSON_Delete(r.logprobs);
    free(r.ids);
    free(r.text);
    lpx_engine_destroy(e);
    lpx_model_close(m);
    free(file_text);
    return rc;
}
