/* Chat templates: a Jinja subset that renders the official chat templates of
 * Qwen3, Qwen2.5, Llama 3.x, SmolLM2 and Mistral byte for byte as Hugging Face
 * transformers' apply_chat_template does (jinja2 sandbox with trim_blocks,
 * lstrip_blocks, loop controls, raise_exception, strftime_now and tojson).
 *
 * The supported subset is listed in docs/templates.md. A construct outside it
 * fails with LPX_ERR_UNSUPPORTED naming the construct and its line; a template
 * that calls raise_exception(msg) fails with LPX_ERR_INVALID_ARG and msg. A
 * render never aborts: nesting depth, loop iterations, memory and output size
 * are capped. */
#ifndef LPX_TEMPLATE_TEMPLATE_H
#define LPX_TEMPLATE_TEMPLATE_H

#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct lpx_template_opts {
    bool add_generation_prompt;
    int enable_thinking;     /* 1 true, 0 false, -1 undefined (the template's default) */
    const char *bos_token;   /* NULL: undefined */
    const char *eos_token;   /* NULL: undefined */
    const char *date_string; /* NULL: undefined, so the template picks its default */
    /* NULL, or a JSON object whose members become further template variables
     * (e.g. "tools", "documents", "custom_tools"); they override the above. */
    const char *extra_json;
} lpx_template_opts;

/* Default options: no generation prompt, enable_thinking undefined, no tokens. */
lpx_template_opts lpx_template_opts_default(void);

/* Renders tmpl (NUL-terminated UTF-8) over msgs. *out is a malloc'd
 * NUL-terminated string (free with lpx_free). As in transformers, the template
 * also sees tools = none and documents = none unless extra_json sets them. */
lpx_status lpx_template_render(const char *tmpl, const lpx_chat_message *msgs, size_t n_msgs,
                               const lpx_template_opts *opts, char **out);

/* The same with the messages given as a JSON array of objects, which may carry
 * any further keys (tool_calls, reasoning_content, ...). Like transformers, a
 * message with reasoning_content, thinking or reasoning gets the first of them
 * copied to both "thinking" and "reasoning_content". */
lpx_status lpx_template_render_json(const char *tmpl, const char *messages_json,
                                    const lpx_template_opts *opts, char **out);

/* lpx_chat_render over JSON messages (any keys: tool_calls, reasoning_content,
 * ...) and extra variables (extra_json, e.g. {"tools": [...]}, may be NULL),
 * with the model's template and BOS/EOS texts: what an OpenAI-style server
 * needs. */
lpx_status lpx_chat_render_json(const lpx_model *m, const char *messages_json,
                                const char *extra_json, bool add_generation_prompt,
                                int enable_thinking, char **out);

#endif
