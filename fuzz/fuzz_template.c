/* libFuzzer target for the chat template renderer: the input is a template,
 * optionally followed by a NUL and a JSON messages array; otherwise a fixed
 * conversation is rendered. Any status is fine; a crash, a sanitizer report,
 * a hang or unbounded memory is a bug. */
#include "lpx.h"
#include "template/template.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    const char *json = NULL;
    size_t tlen = strlen(buf);
    if (tlen < size) json = buf + tlen + 1;

    static const lpx_chat_message msgs[] = {
        {"system", "You are a helpful assistant."},
        {"user", "Hi <think>x</think> {{ y }} \xe4\xb8\x96\xe7\x95\x8c"},
        {"assistant", "<think>\nr\n</think>\n\nHello!"},
        {"user", "  bye \n"},
    };
    lpx_template_opts o = lpx_template_opts_default();
    o.add_generation_prompt = size % 2;
    o.enable_thinking = (int)(size % 3) - 1;
    o.bos_token = "<s>";
    o.eos_token = "</s>";
    o.date_string = size % 5 ? NULL : "26 Jul 2024";
    char *out = NULL;
    if (json)
        lpx_template_render_json(buf, json, &o, &out);
    else
        lpx_template_render(buf, msgs, sizeof msgs / sizeof msgs[0], &o, &out);
    lpx_free(out);
    free(buf);
    return 0;
}
