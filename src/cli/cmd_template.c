/* lpx template: renders a chat template over a conversation given as JSON,
 * exactly as transformers' apply_chat_template would; a tool for checking a
 * template (and what the tests drive the renderer through). */
#include "base/readall.h"
#include "cli/opts.h"
#include "cli/commands.h"
#include "lpx.h"
#include "template/template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: lpx template (--file T.jinja | -m MODEL) --messages M.json [options]\n\n"
            "Renders the chat template T.jinja (or MODEL's own, with its BOS/EOS tokens) over\n"
            "the messages in M.json (a JSON array of {\"role\": ..., \"content\": ...}\n"
            "objects) and prints the prompt text, byte for byte as Hugging Face transformers'\n"
            "apply_chat_template renders it.\n\n"
            "  --file T.jinja            the template\n"
            "  -m, --model MODEL         a .gguf file or model directory: its template and tokens\n"
            "  --messages M.json         the conversation ('-' reads standard input)\n"
            "  --add-generation-prompt   end with the assistant turn's opening\n"
            "  --enable-thinking BOOL    true or false (Qwen3); default: undefined\n"
            "  --date-string S           Llama 3: the date the template prints\n"
            "  --bos S, --eos S          texts of bos_token and eos_token\n"
            "  --vars V.json             a JSON object of further template variables (tools, ...)\n"
            "                            (--date-string, --bos and --eos need --file)\n"
            "  -h, --help                this help\n");
}

/* Whole file (or standard input for "-") as a NUL-terminated string; NULL
 * with the reason in lpx_last_error(). */
static char *read_all(const char *path) {
    const size_t cap = (size_t)1 << 30;
    char *s;
    size_t n;
    lpx_status st = strcmp(path, "-") ? lpx_read_file(path, cap, &s, &n)
                                      : lpx_read_stream(stdin, "standard input", cap, &s, &n);
    return st == LPX_OK ? s : NULL;
}

/* Prints what a renderer gave (its status and text) and frees the text; the exit status. */
static int print_rendered(lpx_status s, char *out) {
    int rc = 1;
    if (s == LPX_OK) {
        fwrite(out, 1, strlen(out), stdout);
        rc = fflush(stdout) == 0 ? 0 : 1;
    } else {
        fprintf(stderr, "lpx template: %s\n", lpx_last_error());
    }
    lpx_free(out);
    return rc;
}

/* MODEL's own template and tokens, through lpx_chat_render_json. */
static int render_model(const char *path, const char *json, const char *extra,
                        const lpx_template_opts *o) {
    lpx_model *m = NULL;
    char *out = NULL;
    lpx_status s = lpx_model_open(path, &m);
    if (s == LPX_OK)
        s = lpx_chat_render_json(m, json, extra, o->add_generation_prompt, o->enable_thinking,
                                 &out);
    int rc = print_rendered(s, out);
    lpx_model_close(m);
    return rc;
}

/* --enable-thinking true|false */
static bool thinking_opt(lpx_opts *a, int *on) {
    const char *v;
    if (!lpx_opts_str(a, "--enable-thinking", &v)) return false;
    if (strcmp(v, "true") && strcmp(v, "false")) return lpx_opts_bad(a, "true or false");
    *on = !strcmp(v, "true");
    return true;
}

int cmd_template(int argc, char **argv) {
    const char *file = NULL, *messages = NULL, *vars = NULL, *model = NULL;
    lpx_template_opts o = lpx_template_opts_default();
    lpx_opts a = {.cmd = "template", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (lpx_opts_flag(&a, "--add-generation-prompt"))
            o.add_generation_prompt = true;
        else if (!thinking_opt(&a, &o.enable_thinking) && !lpx_opts_str(&a, "--file", &file) &&
                 !lpx_opts_str(&a, "--messages", &messages) && !lpx_opts_str(&a, "--vars", &vars) &&
                 !lpx_opts_str(&a, LPX_OPT_MODEL, &model) &&
                 !lpx_opts_str(&a, "--date-string", &o.date_string) &&
                 !lpx_opts_str(&a, "--bos", &o.bos_token) &&
                 !lpx_opts_str(&a, "--eos", &o.eos_token))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    if (!(file || model) || (file && model) || !messages) {
        fprintf(stderr, "lpx template: --messages and one of --file or -m are required "
                        "(lpx template --help)\n");
        return 2;
    }
    if (model && (o.bos_token || o.eos_token || o.date_string)) {
        fprintf(stderr, "lpx template: --bos, --eos and --date-string need --file\n");
        return 2;
    }
    /* each read stops the next, so the message is the first failure's */
    char *tmpl = NULL, *msgs = NULL, *extra = NULL;
    bool read_ok = (!file || (tmpl = read_all(file))) && (msgs = read_all(messages)) &&
                   (!vars || (extra = read_all(vars)));
    int rc = 1;
    if (!read_ok) {
        fprintf(stderr, "lpx template: %s\n", lpx_last_error());
    } else if (model) {
        rc = render_model(model, msgs, extra, &o);
    } else {
        o.extra_json = extra;
        char *out = NULL;
        lpx_status s = lpx_template_render_json(tmpl, msgs, &o, &out);
        rc = print_rendered(s, out);
    }
    free(tmpl);
    free(msgs);
    free(extra);
    return rc;
}
