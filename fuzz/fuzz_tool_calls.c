/* libFuzzer target for tool calls (src/grammar/tool_calls.h). The first byte picks:
 * even, the output parser: the rest of the input is model output in the format of bits 1
 * and 5 (hermes, llama3, pythonic, mistral), parsed whole and in pieces of 1 + bits 2-4
 * bytes (bit 6: one call only, bit 7: only the names "a" and "f"); the two must give the
 * same content and calls. Odd: the rest is a chat body: its tools and messages are
 * checked, and when the tools are taken the forcing grammar of every format that has one
 * must compile (pythonic has none: it must say so). Built by scripts/fuzz.sh. */
#include "grammar/grammar.h"
#include "grammar/tool_calls.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static bool same(const lpx_tool_buf *a, const lpx_tool_buf *b) {
    return a->n == b->n && (!a->n || !memcmp(a->p, b->p, a->n));
}

static void parse(const lpx_tool_rules *r, const char *s, size_t n, size_t step,
                  lpx_tool_parser *p) {
    lpx_tool_parser_init(p, r);
    for (size_t i = 0; i < n; i += step)
        lpx_tool_parser_feed(p, s + i, n - i < step ? n - i : step);
    lpx_tool_parser_finish(p);
}

static void check_parser(const uint8_t *data, size_t size) {
    static const lpx_tool_format formats[4] = {LPX_TOOLS_HERMES, LPX_TOOLS_LLAMA3,
                                               LPX_TOOLS_PYTHONIC, LPX_TOOLS_MISTRAL};
    lpx_tool_rules r = lpx_tool_rules_any(formats[(data[0] >> 1 & 1) | (data[0] >> 4 & 2)]);
    char names[] = "a\0f\0";
    r.single = data[0] & 0x40;
    r.names = data[0] & 0x80 ? names : NULL;
    size_t step = 1 + (data[0] >> 2 & 7);
    const char *s = (const char *)data + 1;
    lpx_tool_parser a, b;
    parse(&r, s, size - 1, size, &a);
    parse(&r, s, size - 1, step, &b);
    if (!a.oom && !b.oom) {
        if (!same(&a.content, &b.content) || a.n_calls != b.n_calls) abort();
        for (size_t i = 0; i < a.n_calls; i++)
            if (strcmp(a.calls[i].name, b.calls[i].name) ||
                !same(&a.calls[i].args, &b.calls[i].args))
                abort();
    }
    lpx_tool_parser_free(&a);
    lpx_tool_parser_free(&b);
}

static void check_body(const uint8_t *data, size_t size) {
    cJSON *body = cJSON_ParseWithLength((const char *)data + 1, size - 1);
    if (!body) return;
    char msg[600], *mj = NULL;
    const char *param;
    if (lpx_chat_messages_json(cJSON_GetObjectItemCaseSensitive(body, "messages"), &mj, msg,
                               sizeof msg))
        free(mj);
    lpx_tools t;
    if (lpx_tools_parse(body, &t, msg, sizeof msg, &param)) {
        free(lpx_tools_template_vars(&t));
        for (int f = LPX_TOOLS_HERMES; f <= LPX_TOOLS_MISTRAL; f++) {
            char *g = lpx_tools_grammar_text(&t, (lpx_tool_format)f);
            const char *fp;
            if (f == LPX_TOOLS_PYTHONIC &&
                (g ||
                 lpx_tools_check_format(&t, LPX_TOOLS_PYTHONIC, msg, sizeof msg, &fp) ==
                     (t.choice == LPX_TOOL_CHOICE_REQUIRED || t.choice == LPX_TOOL_CHOICE_NAMED)))
                abort();
            lpx_grammar *gr = NULL;
            /* the tools' schemas were compiled by the check: their grammar must build
             * (unless all of them together pass the size bound) */
            if (g && lpx_grammar_tool_calls(g, strlen(g), &gr) != LPX_OK &&
                !strstr(lpx_last_error(), "too large"))
                abort();
            lpx_grammar_free(gr);
            free(g);
        }
        lpx_tools_free(&t);
    } else if (!param || !msg[0]) {
        abort();
    }
    cJSON_Delete(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 1)
        check_body(data, size);
    else
        check_parser(data, size);
    return 0;
}
