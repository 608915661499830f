/* The chat template C API: rendering struct messages (the path lpx_chat_render
 * takes), options, error statuses and messages. Byte-exact agreement with
 * transformers over the official templates is tested in tests/py. */
#include "lpx.h"
#include "test.h"
#include "template/template.h"

#include <stdlib.h>
#include <string.h>

static char *read_fixture(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/templates/%s", LPX_SOURCE_DIR, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 16);
    if (buf) fread(buf, 1, (1 << 16) - 1, f);
    fclose(f);
    return buf;
}

static int renders(const char *tmpl, const lpx_chat_message *m, size_t n,
                   const lpx_template_opts *o, const char *want) {
    char *out = NULL;
    lpx_status s = lpx_template_render(tmpl, m, n, o, &out);
    int ok = s == LPX_OK && out && !strcmp(out, want);
    if (!ok)
        fprintf(stderr, "render: status %d (%s), got [%s]\n", s, lpx_last_error(), out ? out : "");
    lpx_free(out);
    return ok;
}

static int fails(const char *tmpl, lpx_status want, const char *needle) {
    char *out = (char *)1;
    lpx_status s = lpx_template_render(tmpl, NULL, 0, NULL, &out);
    int ok = s == want && out == NULL && strstr(lpx_last_error(), needle);
    if (!ok) fprintf(stderr, "fails: status %d, message [%s]\n", s, lpx_last_error());
    return ok;
}

int main(void) {
    const lpx_chat_message conv[] = {{"system", "Be brief."},
                                     {"user", "Hi"},
                                     {"assistant", "<think>\nr\n</think>\n\nHello"},
                                     {"user", "Bye"}};

    char *qwen3 = read_fixture("Qwen-Qwen3-0.6B.jinja");
    CHECK(qwen3 != NULL);
    lpx_template_opts o = lpx_template_opts_default();
    CHECK(o.enable_thinking == -1 && !o.add_generation_prompt && !o.bos_token);
    o.add_generation_prompt = true;
    const char *q_base = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                         "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
                         "<|im_start|>assistant\n";
    CHECK(renders(qwen3, conv, 4, &o, q_base));
    o.enable_thinking = 1;
    CHECK(renders(qwen3, conv, 4, &o, q_base));
    o.enable_thinking = 0;
    char want[1024];
    snprintf(want, sizeof want, "%s<think>\n\n</think>\n\n", q_base);
    CHECK(renders(qwen3, conv, 4, &o, want));
    free(qwen3);

    /* Options reach the template as variables; NULL options are defaults. */
    const char *vars = "{{ bos_token }}|{{ eos_token }}|{{ date_string is defined }}|"
                       "{{ add_generation_prompt }}|{{ tools is none }}|{{ messages|length }}";
    CHECK(renders(vars, conv, 2, NULL, "||False|False|True|2"));
    lpx_template_opts o2 = lpx_template_opts_default();
    o2.bos_token = "<s>";
    o2.eos_token = "</s>";
    o2.date_string = "26 Jul 2024";
    o2.extra_json = "{\"tools\": [{\"name\": \"f\"}], \"answer\": 42}";
    CHECK(renders(vars, conv, 1, &o2, "<s>|</s>|True|False|False|1"));
    CHECK(renders("{{ tools|tojson }} {{ answer + 1 }}", conv, 1, &o2, "[{\"name\": \"f\"}] 43"));

    /* Whitespace control as transformers configures jinja2. */
    CHECK(renders("a\n  {% if true %}\n  x\n  {% endif %}\n  y\n", NULL, 0, NULL, "a\n  x\n  y"));
    CHECK(renders("a  {%- if true -%}  x  {%- endif %}\ny", NULL, 0, NULL, "axy"));
    CHECK(renders("{{ 'x' }}\n{{ 'y' }}  {% if 1 %}\n{% endif %}", NULL, 0, NULL, "x\ny  "));

    /* Python semantics of values. */
    CHECK(renders("{{ [1, 'a', none, true, 1.5, {'k': (1,)}] }}", NULL, 0, NULL,
                  "[1, 'a', None, True, 1.5, {'k': (1,)}]"));
    CHECK(renders("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 3 ** 2 }}", NULL, 0,
                  NULL, "3 -4 2 3.5 64"));
    CHECK(renders("{{ 'h\xc3\xa9llo'[::-1] }} {{ 'h\xc3\xa9llo'|length }} {{ 'abc'[1:] }}", NULL, 0,
                  NULL, "oll\xc3\xa9h 5 bc"));
    CHECK(renders("{% for x in [1,2,3] if x != 2 %}{{ loop.index }}/{{ loop.length }}"
                  "{{ loop.last }} {% endfor %}",
                  NULL, 0, NULL, "1/2False 2/2True "));
    CHECK(renders("{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}"
                  "{% set local = 1 %}{% endfor %}{{ ns.n }}{{ local is defined }}",
                  NULL, 0, NULL, "10False"));

    /* Errors: a status, a one-line message naming what and where; no output. */
    CHECK(fails("{{ raise_exception('Roles must alternate') }}", LPX_ERR_INVALID_ARG,
                "chat template: Roles must alternate"));
    CHECK(fails("\n{% call m() %}{% endcall %}", LPX_ERR_UNSUPPORTED,
                "line 2: unsupported construct: {% call %}"));
    CHECK(fails("{{ x | frobnicate }}", LPX_ERR_UNSUPPORTED, "filter 'frobnicate'"));
    CHECK(fails("{% for %}", LPX_ERR_INVALID_ARG, "line 1"));
    CHECK(
        fails("{{ undefined_thing.attr }}", LPX_ERR_INVALID_ARG, "'undefined_thing' is undefined"));
    CHECK(fails("bad \xff utf-8", LPX_ERR_INVALID_ARG, "not valid UTF-8"));
    CHECK(fails("{{ \"\\U88888888\" }}", LPX_ERR_INVALID_ARG, "escape \\U outside Unicode"));
    char deep[4096] = "{{ ";
    for (int i = 0; i < 1000; i++)
        strcat(deep, "(");
    CHECK(fails(deep, LPX_ERR_INVALID_ARG, "nested too deeply"));

    char *out = (char *)1;
    CHECK(lpx_template_render(NULL, NULL, 0, NULL, &out) == LPX_ERR_INVALID_ARG && out == NULL);
    CHECK(lpx_template_render("x", NULL, 3, NULL, &out) == LPX_ERR_INVALID_ARG);
    const lpx_chat_message norole[] = {{NULL, "x"}};
    CHECK(lpx_template_render("x", norole, 1, NULL, &out) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_template_render_json("x", "{not json", NULL, &out) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_template_render_json("{{ messages[0].thinking }}|{{ messages[0].reasoning_content }}",
                                   "[{\"role\": \"assistant\", \"reasoning\": \"r\"}]", NULL,
                                   &out) == LPX_OK &&
          !strcmp(out, "r|r"));
    lpx_free(out);

    /* lpx_chat_render: the model's template; none gives LPX_ERR_UNSUPPORTED. */
    lpx_model *m = NULL;
    CHECK(lpx_model_open(LPX_SOURCE_DIR "/tests/fixtures/model/hf-llama", &m) == LPX_OK);
    const lpx_chat_message hi[] = {{"user", "Hi"}};
    out = NULL;
    CHECK(m && lpx_chat_render(m, hi, 1, true, -1, &out) == LPX_OK && out &&
          !strcmp(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    lpx_free(out);
    CHECK(m &&
          lpx_chat_render_json(m, "[{\"role\": \"user\", \"content\": \"Hi\"}]", NULL, false, -1,
                               &out) == LPX_OK &&
          out && !strcmp(out, "<|im_start|>user\nHi<|im_end|>\n"));
    lpx_free(out);
    lpx_model_close(m);
    m = NULL;
    CHECK(lpx_model_open(LPX_SOURCE_DIR "/tests/fixtures/models/llama", &m) == LPX_OK);
    out = (char *)1;
    CHECK(m && lpx_chat_render(m, hi, 1, true, -1, &out) == LPX_ERR_UNSUPPORTED && out == NULL &&
          strstr(lpx_last_error(), "model has no chat template"));
    lpx_model_close(m);
    TEST_DONE();
}
