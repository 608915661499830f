/* Tool calls (src/grammar/tool_calls.h): the parser on recorded outputs of each format,
 * malformed ones included, fed whole, byte by byte and in random pieces (the same
 * result each way); the forcing grammar; the tools' checks; the messages for the
 * template. With arguments, a driver for tests/py/test_tool_calls.py (the pythonic
 * parser against Python's ast):
 *   test_tool_calls parse hermes|llama3|pythonic|mistral   stdin's text parsed:
 *       {"content", "tool_calls": [{"name", "arguments"}]} */
#include "test.h"

#include "base/readall.h"
#include "grammar/grammar.h"
#include "grammar/tool_calls.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdint.h>
#include <string.h>

/* The parse as JSON text: {"content": ..., "tool_calls": [[name, arguments], ...]}. */
static char *summary(const lpx_tool_parser *p) {
    cJSON *o = cJSON_CreateObject();
    if (p->content.n)
        cJSON_AddStringToObject(o, "content", p->content.p);
    else
        cJSON_AddNullToObject(o, "content");
    cJSON *calls = cJSON_AddArrayToObject(o, "tool_calls");
    for (size_t i = 0; i < p->n_calls; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "name", p->calls[i].name);
        cJSON_AddStringToObject(c, "arguments", p->calls[i].args.n ? p->calls[i].args.p : "");
        cJSON_AddItemToArray(calls, c);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* text parsed by rules in pieces: 0 whole, 1 a byte at a time, else random cuts (seed). */
static char *parse_by(const lpx_tool_rules *r, const char *text, int how) {
    lpx_tool_parser p;
    lpx_tool_parser_init(&p, r);
    size_t n = strlen(text), i = 0;
    uint64_t seed = (uint64_t)how * 2654435761u + 1;
    while (i < n) {
        size_t k = how == 0 ? n : how == 1 ? 1 : 1 + rng(&seed) % 7;
        if (k > n - i) k = n - i;
        lpx_tool_parser_feed(&p, text + i, k);
        i += k;
    }
    lpx_tool_parser_finish(&p);
    char *s = summary(&p);
    lpx_tool_parser_free(&p);
    return s;
}

static void check_rules(const lpx_tool_rules *r, const char *text, const char *want) {
    for (int how = 0; how < 12; how++) {
        char *got = parse_by(r, text, how);
        bool ok = got && !strcmp(got, want);
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "  text %s (pieces %d)\n  got  %s\n  want %s\n", text, how, got, want);
        free(got);
    }
}

static void check_parse(lpx_tool_format f, const char *text, const char *want) {
    lpx_tool_rules r = lpx_tool_rules_any(f);
    check_rules(&r, text, want);
}

static void test_hermes(void) {
    lpx_tool_format H = LPX_TOOLS_HERMES;
    check_parse(H, "Hello there.", "{\"content\":\"Hello there.\",\"tool_calls\":[]}");
    check_parse(H,
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                "\"Paris\"}}\n</tool_call>",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"get_weather\",\"arguments\":\"{"
                "\\\"city\\\": \\\"Paris\\\"}\"}]}");
    /* text before, two calls, text after: the whitespace before the calls joins them */
    check_parse(
        H,
        "Let me check.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": "
        "\"}\"}]}}\n</tool_call>\n"
        "<tool_call>\n{\"name\":\"b\",\"arguments\":{}}\n</tool_call>\n Done.",
        "{\"content\":\"Let me check.\\n\\nDone.\",\"tool_calls\":[{\"name\":\"a\",\"arguments\":"
        "\"{\\\"x\\\": [1, {\\\"y\\\": \\\"}\\\"}]}\"},{\"name\":\"b\",\"arguments\":\"{}\"}]}");
    /* escapes in the name and in string arguments */
    check_parse(
        H, "<tool_call>{\"name\": \"f\\u0031\", \"arguments\": {\"q\": \"a\\\"}b\"}}</tool_call>",
        "{\"content\":null,\"tool_calls\":[{\"name\":\"f1\",\"arguments\":\"{\\\"q\\\": "
        "\\\"a\\\\\\\"}b\\\"}\"}]}");
    /* the arguments before the name, and "parameters" for "arguments" */
    check_parse(H, "<tool_call>\n{\"arguments\": {}, \"name\": \"f\"}\n</tool_call>",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"f\",\"arguments\":\"{}\"}]}");
    check_parse(H,
                "ok <tool_call>{\"arguments\": {\"q\": \"}{\", \"n\": [1]} , \"name\":\"s\"}"
                "</tool_call><tool_call>{\"name\": \"t\", \"parameters\": 7}</tool_call>",
                "{\"content\":\"ok\",\"tool_calls\":[{\"name\":\"s\",\"arguments\":\"{\\\"q\\\": "
                "\\\"}{\\\", \\\"n\\\": [1]}\"},{\"name\":\"t\",\"arguments\":\"7\"}]}");
    check_parse(H, "<tool_call>{\"arguments\": true, \"name\": \"f\"}</tool_call>",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"f\",\"arguments\":\"true\"}]}");
    /* arguments first and no name (cut short, or another key): content */
    check_parse(H, "<tool_call>{\"arguments\": {\"a\": 1}, \"nam",
                "{\"content\":\"<tool_call>{\\\"arguments\\\": {\\\"a\\\": 1}, \\\"nam\","
                "\"tool_calls\":[]}");
    check_parse(H, "<tool_call>{\"arguments\": {}, \"id\": 1}</tool_call>",
                "{\"content\":\"<tool_call>{\\\"arguments\\\": {}, \\\"id\\\": "
                "1}</tool_call>\",\"tool_calls\":[]}");
    /* malformed: another key, not JSON, an unclosed tag: all content */
    check_parse(H, "<tool_call>\n{\"call\": {}, \"name\": \"f\"}\n</tool_call>",
                "{\"content\":\"<tool_call>\\n{\\\"call\\\": {}, \\\"name\\\": "
                "\\\"f\\\"}\\n</tool_call>\",\"tool_calls\":[]}");
    check_parse(H, "a <tool_call>oops</tool_call> b",
                "{\"content\":\"a <tool_call>oops</tool_call> b\",\"tool_calls\":[]}");
    check_parse(H, "x <tool_ca", "{\"content\":\"x <tool_ca\",\"tool_calls\":[]}");
    check_parse(H, "<<tool_call>{\"name\": \"f\", \"arguments\": 5}</tool_call>",
                "{\"content\":\"<\",\"tool_calls\":[{\"name\":\"f\",\"arguments\":\"5\"}]}");
    check_parse(H, "a < b and c <tool_call>{\"name\": 3}",
                "{\"content\":\"a < b and c <tool_call>{\\\"name\\\": 3}\",\"tool_calls\":[]}");
    /* cut short inside the arguments (max_tokens): the call keeps what it has */
    check_parse(H, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"hal",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": "
                "\\\"hal\"}]}");
    /* a header cut short: content */
    check_parse(H, "<tool_call>\n{\"name\": \"f\"",
                "{\"content\":\"<tool_call>\\n{\\\"name\\\": \\\"f\\\"\",\"tool_calls\":[]}");
    check_parse(H, "  \n", "{\"content\":\"  \\n\",\"tool_calls\":[]}");
    check_parse(H, "", "{\"content\":null,\"tool_calls\":[]}");
}

/* Whitespace next to calls: kept once where calls join two pieces of content (the
 * whitespace before them, else after), dropped at the content's ends. */
static void test_whitespace(void) {
    lpx_tool_format H = LPX_TOOLS_HERMES, L = LPX_TOOLS_LLAMA3;
#define CALL "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"
#define ONE "\"tool_calls\":[{\"name\":\"f\",\"arguments\":\"{}\"}]}"
    check_parse(H, "A " CALL " B", "{\"content\":\"A B\"," ONE);
    check_parse(H, "A" CALL "B", "{\"content\":\"AB\"," ONE);
    check_parse(H, "A\n" CALL "\n\nB", "{\"content\":\"A\\nB\"," ONE);
    check_parse(H, "A" CALL "\n B", "{\"content\":\"A\\n B\"," ONE);
    check_parse(H, "Check:\n\n" CALL "\n", "{\"content\":\"Check:\"," ONE);
    check_parse(H, " \n" CALL "\n\nDone", "{\"content\":\"Done\"," ONE);
    check_parse(H, "x <tool_call>no</tool_call> y\n",
                "{\"content\":\"x <tool_call>no</tool_call> y\\n\",\"tool_calls\":[]}");
    check_parse(L, "\n{\"name\": \"f\", \"parameters\": {}}\n\nThen", "{\"content\":\"Then\"," ONE);
#undef CALL
#undef ONE
}

/* auto's checks of the request: names among the tools, parallel_tool_calls false. */
static void test_rules(void) {
    char names[] = "get_weather\0now\0";
    lpx_tool_rules r = {.f = LPX_TOOLS_HERMES, .names = names};
    /* an unknown name, in either key order: content; the known call after it is a call */
    check_rules(&r,
                "<tool_call>{\"name\": \"other\", \"arguments\": {}}</tool_call>\n"
                "<tool_call>{\"arguments\": {}, \"name\": \"nope\"}</tool_call>\n"
                "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>",
                "{\"content\":\"<tool_call>{\\\"name\\\": \\\"other\\\", \\\"arguments\\\": "
                "{}}</tool_call>\\n<tool_call>{\\\"arguments\\\": {}, \\\"name\\\": "
                "\\\"nope\\\"}</tool_call>\",\"tool_calls\":[{\"name\":\"now\",\"arguments\":"
                "\"{}\"}]}");
    /* a prefix of a known name is not one */
    check_rules(&r, "<tool_call>{\"name\": \"no\", \"arguments\": 1}</tool_call>",
                "{\"content\":\"<tool_call>{\\\"name\\\": \\\"no\\\", \\\"arguments\\\": "
                "1}</tool_call>\",\"tool_calls\":[]}");
    /* one call only: the later ones are dropped, content around them kept */
    r.single = true;
    check_rules(&r,
                "Both: <tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>\n"
                "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"c\": 1}}</tool_call>"
                "<tool_call>{\"arguments\": {}, \"name\": \"now\"}</tool_call> done",
                "{\"content\":\"Both: done\",\"tool_calls\":[{\"name\":\"now\",\"arguments\":"
                "\"{}\"}]}");
    r.f = LPX_TOOLS_LLAMA3;
    check_rules(&r,
                "{\"name\": \"get_weather\", \"parameters\": {\"c\": 1}}; {\"name\": \"now\", "
                "\"parameters\": {}}",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"get_weather\",\"arguments\":"
                "\"{\\\"c\\\": 1}\"}]}");
    r.single = false;
    check_rules(&r, "{\"name\": \"search\", \"parameters\": {}}",
                "{\"content\":\"{\\\"name\\\": \\\"search\\\", \\\"parameters\\\": "
                "{}}\",\"tool_calls\":[]}");
    /* arguments before the name may be long (held until the name) */
    static char big[9000], want[9200];
    int n = snprintf(big, sizeof big, "<tool_call>{\"arguments\": {\"s\": \"");
    memset(big + n, 'x', 8000);
    snprintf(big + n + 8000, sizeof big - (size_t)n - 8000, "\"}, \"name\": \"now\"}</tool_call>");
    n = snprintf(want, sizeof want,
                 "{\"content\":null,\"tool_calls\":[{\"name\":\"now\",\"arguments\":\"{\\\"s\\\": "
                 "\\\"");
    memset(want + n, 'x', 8000);
    snprintf(want + n + 8000, sizeof want - (size_t)n - 8000, "\\\"}\"}]}");
    r.f = LPX_TOOLS_HERMES;
    check_rules(&r, big, want);
}

static void test_llama3(void) {
    lpx_tool_format L = LPX_TOOLS_LLAMA3;
    check_parse(L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"get_weather\",\"arguments\":\"{"
                "\\\"city\\\": \\\"Paris\\\"}\"}]}");
    check_parse(L,
                "<|python_tag|>{\"name\": \"a\", \"arguments\": {}}; {\"name\": \"b\", "
                "\"parameters\": {\"k\": 1}}",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"a\",\"arguments\":\"{}\"},{\"name\":"
                "\"b\",\"arguments\":\"{\\\"k\\\": 1}\"}]}");
    /* text first: no calls, {...} later is content */
    check_parse(L, "Sure: {\"name\": \"a\", \"parameters\": {}}",
                "{\"content\":\"Sure: {\\\"name\\\": \\\"a\\\", \\\"parameters\\\": "
                "{}}\",\"tool_calls\":[]}");
    check_parse(L, "{\"answer\": 42}", "{\"content\":\"{\\\"answer\\\": 42}\",\"tool_calls\":[]}");
    check_parse(
        L, "{\"name\": \"a\", \"parameters\": {}} and more",
        "{\"content\":\"and more\",\"tool_calls\":[{\"name\":\"a\",\"arguments\":\"{}\"}]}");
    check_parse(L, "\n  Hi", "{\"content\":\"\\n  Hi\",\"tool_calls\":[]}");
    /* <|python_tag|> (special tokens kept): the arguments first, after whitespace */
    check_parse(L, " <|python_tag|>{\"parameters\": {\"q\": \"x\"}, \"name\": \"search\"}",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"search\",\"arguments\":\"{"
                "\\\"q\\\": \\\"x\\\"}\"}]}");
    /* the built-in tools' Python form is not a function call: content */
    check_parse(L, "<|python_tag|>brave_search.call(query=\"x\")",
                "{\"content\":\"<|python_tag|>brave_search.call(query=\\\"x\\\")\","
                "\"tool_calls\":[]}");
    check_parse(L, "<|python", "{\"content\":\"<|python\",\"tool_calls\":[]}");
}

static bool grammar_takes(const lpx_grammar *g, const char *text) {
    lpx_gmatch m;
    if (lpx_gmatch_init(&m, g) != LPX_OK) return false;
    bool ok = lpx_gmatch_feed(&m, text, strlen(text)) && lpx_gmatch_can_end(&m);
    lpx_gmatch_free(&m);
    return ok;
}

static lpx_grammar *tool_grammar(const char *spec) {
    lpx_grammar *g = NULL;
    if (lpx_grammar_tool_calls(spec, strlen(spec), &g) != LPX_OK)
        fprintf(stderr, "tool grammar: %s\n", lpx_last_error());
    return g;
}

/* pythonic: the list at the start read whole, as vLLM's parser reads it with Python's
 * ast; anything else (a list that is not one of calls with literal keyword arguments)
 * is content, markup and all. tests/py/test_tool_calls.py checks more outputs against
 * Python's own ast. */
static void test_pythonic(void) {
    lpx_tool_format P = LPX_TOOLS_PYTHONIC;
#define NONE_ ",\"tool_calls\":[]}"
    check_parse(P, "[get_weather(city=\"Paris\")]",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"get_weather\",\"arguments\":\"{"
                "\\\"city\\\": \\\"Paris\\\"}\"}]}");
    check_parse(P, " \n[get_weather(city='San Francisco', unit=\"celsius\"), now()]\n",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"get_weather\",\"arguments\":\"{"
                "\\\"city\\\": \\\"San Francisco\\\", \\\"unit\\\": \\\"celsius\\\"}\"},{\"name\":"
                "\"now\",\"arguments\":\"{}\"}]}");
    /* literals: lists, dicts, True/False/None, signs, escapes, brackets in strings */
    check_parse(P,
                "[f(a=[1, 2.5, -3,], b={'k': None, \"t\": True}, c='it\\'s \"x\")]\\n', "
                "d=False)]",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": "
                "[1, 2.5, -3], \\\"b\\\": {\\\"k\\\": null, \\\"t\\\": true}, \\\"c\\\": "
                "\\\"it's \\\\\\\"x\\\\\\\")]\\\\n\\\", \\\"d\\\": false}\"}]}");
    check_parse(P, "[f(s=\"\xc3\xa9\\u00e9\\x41\\t\\\\d\")]",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"f\",\"arguments\":\"{\\\"s\\\": "
                "\\\"\xc3\xa9\xc3\xa9"
                "A\\\\t\\\\\\\\d\\\"}\"}]}");
    check_parse(P, "[f(a=.5, b=5., c=1_000, d=1e3, e=-0.0, g=+2, h=00, i=00.2_5, j=1_0e0_1)]",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": "
                "0.5, \\\"b\\\": 5.0, \\\"c\\\": 1000, \\\"d\\\": 1e3, \\\"e\\\": -0.0, \\\"g\\\": "
                "2, \\\"h\\\": 0, \\\"i\\\": 0.25, \\\"j\\\": 10e01}\"}]}");
    /* text after the list is content */
    check_parse(
        P, "[f(x=1)]\n\nDone.",
        "{\"content\":\"Done.\",\"tool_calls\":[{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": "
        "1}\"}]}");
    /* malformed or not calls: all content */
    static const char *const bad[] = {
        "[f(1)]",       "[f(x=y)]",       "[f(x=1, x=2)]", "[a.b(x=1)]",      "[f(x=0x10)]",
        "[f(x=1j)]",    "[f(x=007)]",     "[f(x=(1, 2))]", "[1, 2]",          "[]",
        "[f(x=1) g()]", "[f(x=1)",        "[f(x='a)]",     "[f(x=\"a\nb\")]", "[f(x={1: 2})]",
        "[f(**k)]",

        "[f(x=r'a')]",  "[f(x=1_)]",      "[f(x=1__0)]",   "[f(x=01)]",       "[f(x=\"\\ud800\")]",
        "[f(x=--1)]",   "Sure: [f(x=1)]", "[f(x=[1, 2)]",  "[f(,)]",          "[f(x=1,,)]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "content", bad[i]);
        cJSON_AddArrayToObject(o, "tool_calls");
        char *want = cJSON_PrintUnformatted(o);
        check_parse(P, bad[i], want);
        free(want);
        cJSON_Delete(o);
    }
    /* (whitespace before text is kept, as in the other formats) */
    check_parse(P, "  [f(x='a)]", "{\"content\":\"  [f(x='a)]\"" NONE_);
    check_parse(P, "[f(x=1)]]",
                "{\"content\":\"]\",\"tool_calls\":[{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": "
                "1}\"}]}");
    /* the request's rules: a name not among the tools makes the list content; one call
     * only keeps the first */
    char names[] = "f\0g\0";
    lpx_tool_rules r = {.f = P, .names = names};
    check_rules(&r, "[f(), h()]", "{\"content\":\"[f(), h()]\"" NONE_);
    r.single = true;
    check_rules(&r, "[g(a=1), f(b=2)] ok",
                "{\"content\":\"ok\",\"tool_calls\":[{\"name\":\"g\",\"arguments\":\"{\\\"a\\\": "
                "1}\"}]}");
#undef NONE_
}

/* mistral: [TOOL_CALLS] (when special tokens are kept) then a JSON list of calls, or the
 * list alone (the tag is a special token, skipped by default). */
static void test_mistral(void) {
    lpx_tool_format M = LPX_TOOLS_MISTRAL;
#define TWO                                                                                        \
    "\"tool_calls\":[{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"},"  \
    "{\"name\":\"now\",\"arguments\":\"{}\"}]}"
    check_parse(M,
                "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                "{\"name\": \"now\", \"arguments\": {}}]",
                "{\"content\":null," TWO);
    check_parse(
        M,
        " [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}},{\"arguments\": "
        "{}, \"name\": \"now\"}]\n\nDone.",
        "{\"content\":\"Done.\"," TWO);
    check_parse(M, "[TOOL_CALLS][{\"name\":\"f\",\"arguments\":{\"a\":[1,\"]\"]}}]",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":[1,"
                "\\\"]\\\"]}\"}]}");
    /* not calls: content, tag and all */
    static const char *const bad[] = {
        "[1, 2] are numbers",
        "[TOOL_CALLS] hello",
        "[TOOL_CALL",
        "[{\"id\": 1}]",
        "[TOOL_CALLS] [{\"name\": 3}]",
        "[]",
        "Sure: [{\"name\": \"f\", \"arguments\": {}}]",
        "[TOOL_CALLS] [",
        "[{\"name\": \"f\"",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "content", bad[i]);
        cJSON_AddArrayToObject(o, "tool_calls");
        char *want = cJSON_PrintUnformatted(o);
        check_parse(M, bad[i], want);
        free(want);
        cJSON_Delete(o);
    }
    /* cut short inside the arguments: the call keeps what it has */
    check_parse(M, "[{\"name\": \"f\", \"arguments\": {\"q\": \"ha",
                "{\"content\":null,\"tool_calls\":[{\"name\":\"f\",\"arguments\":\"{\\\"q\\\": "
                "\\\"ha\"}]}");
    /* its ids: 9 letters and digits, one per call */
    char a[16], b[16];
    lpx_tool_call_id(M, "call_6b1024cd00000100", 0, a, sizeof a);
    lpx_tool_call_id(M, "call_6b1024cd00000100", 1, b, sizeof b);
    bool ok = strlen(a) == 9 && strlen(b) == 9 && strcmp(a, b);
    for (int k = 0; k < 9; k++)
        ok = ok && isalnum((unsigned char)a[k]);
    CHECK(ok);
#undef TWO
}

static void test_grammar(void) {
    const char *fns = "[{\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
                      "\"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"enum\": "
                      "[\"c\", \"f\"]}}, \"required\": [\"city\"], \"additionalProperties\": "
                      "false}}, {\"name\": \"now\", \"parameters\": {\"type\": \"object\", "
                      "\"additionalProperties\": false}}]";
    char spec[1024];
    snprintf(spec, sizeof spec, "{\"format\": \"hermes\", \"parallel\": true, \"functions\": %s}",
             fns);
    lpx_grammar *g = tool_grammar(spec);
    CHECK(g != NULL);
    if (g) {
        CHECK(grammar_takes(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                               "\"Paris\"}}\n</tool_call>"));
        CHECK(grammar_takes(g,
                            "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                            "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"x\","
                            "\"unit\":\"f\"}}\n</tool_call>"));
        CHECK(!grammar_takes(
            g, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
        CHECK(!grammar_takes(
            g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"x\": 1}}\n</tool_call>"));
        CHECK(
            !grammar_takes(g, "<tool_call>\n{\"arguments\": {}, \"name\": \"now\"}\n</tool_call>"));
        CHECK(!grammar_takes(g, "{\"name\": \"now\", \"arguments\": {}}"));
        CHECK(!grammar_takes(g, ""));
        lpx_grammar_free(g);
    }
    snprintf(spec, sizeof spec, "{\"format\": \"hermes\", \"parallel\": false, \"functions\": %s}",
             fns);
    g = tool_grammar(spec);
    CHECK(g &&
          !grammar_takes(g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                            "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
    lpx_grammar_free(g);
    snprintf(spec, sizeof spec, "{\"format\": \"llama3\", \"parallel\": false, \"functions\": %s}",
             fns);
    g = tool_grammar(spec);
    CHECK(g && grammar_takes(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"P\"}}"));
    CHECK(g && !grammar_takes(g, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}"));
    lpx_grammar_free(g);
    /* mistral: the list, its calls ", "-separated, without the special [TOOL_CALLS] */
    snprintf(spec, sizeof spec, "{\"format\": \"mistral\", \"parallel\": true, \"functions\": %s}",
             fns);
    g = tool_grammar(spec);
    CHECK(g && grammar_takes(g, "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}, "
                                "{\"name\": \"now\", \"arguments\": {}}]"));
    CHECK(g && !grammar_takes(g, "{\"name\": \"now\", \"arguments\": {}}"));
    CHECK(g && !grammar_takes(g, "[TOOL_CALLS] [{\"name\": \"now\", \"arguments\": {}}]"));
    CHECK(g && !grammar_takes(g, "[]"));
    lpx_grammar_free(g);
    /* a $ref resolves inside its own function's parameters */
    g = tool_grammar("{\"format\": \"hermes\", \"functions\": [{\"name\": \"f\", \"parameters\": "
                     "{\"$defs\": {\"n\": {\"type\": \"integer\"}}, \"type\": \"object\", "
                     "\"properties\": {\"a\": {\"$ref\": \"#/$defs/n\"}}, \"required\": [\"a\"], "
                     "\"additionalProperties\": false}}]}");
    CHECK(g && grammar_takes(
                   g, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 7}}\n</tool_call>"));
    lpx_grammar_free(g);
    CHECK(lpx_grammar_tool_calls("{\"format\": \"x\", \"functions\": []}", 33, &g) ==
              LPX_ERR_INVALID_ARG &&
          !g);
}

/* lpx_tools_parse on body; returns the message ("" when accepted). */
static const char *tools_msg(const char *body, lpx_tools *t, const char **param) {
    static char msg[600];
    msg[0] = '\0';
    *param = NULL;
    cJSON *o = cJSON_Parse(body);
    if (!lpx_tools_parse(o, t, msg, sizeof msg, param) && !msg[0]) snprintf(msg, sizeof msg, "?");
    cJSON_Delete(o);
    return msg;
}

static void test_tools_parse(void) {
    lpx_tools t;
    const char *param;
    const char *fn = "{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                     "{\"type\": \"object\"}}}";
    char body[1024];
    snprintf(body, sizeof body, "{\"tools\": [%s]}", fn);
    CHECK(!strcmp(tools_msg(body, &t, &param), "") && t.n_tools == 1 &&
          t.choice == LPX_TOOL_CHOICE_AUTO && t.parallel && lpx_tools_parsed(&t));
    char *vars = lpx_tools_template_vars(&t);
    CHECK(vars && strstr(vars, "{\"tools\": [{\"type\":\"function\""));
    free(vars);
    char *gt = lpx_tools_grammar_text(&t, LPX_TOOLS_HERMES);
    CHECK(gt == NULL); /* auto: nothing forced */
    lpx_tools_free(&t);
    snprintf(body, sizeof body,
             "{\"tools\": [%s], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": "
             "\"f\"}}, \"parallel_tool_calls\": false}",
             fn);
    CHECK(!strcmp(tools_msg(body, &t, &param), "") && t.choice == LPX_TOOL_CHOICE_NAMED &&
          t.named == 0 && !t.parallel);
    gt = lpx_tools_grammar_text(&t, LPX_TOOLS_HERMES);
    CHECK(gt && strstr(gt, "\"format\":\"hermes\"") && strstr(gt, "\"parallel\":false"));
    lpx_grammar *g = gt ? tool_grammar(gt) : NULL;
    CHECK(g != NULL);
    lpx_grammar_free(g);
    free(gt);
    lpx_tools_free(&t);
    CHECK(!strcmp(tools_msg("{\"tool_choice\": \"none\"}", &t, &param), "") &&
          t.choice == LPX_TOOL_CHOICE_NONE && !lpx_tools_parsed(&t));
    lpx_tools_free(&t);

    static const struct {
        const char *body, *param, *msg;
    } bad[] = {
        {"{\"tools\": {}}", "tools", "must be a list"},
        {"{\"tools\": [{\"type\": \"retrieval\"}]}", "tools",
         "tools[0].type: 'retrieval' is not supported"},
        {"{\"tools\": [{\"type\": \"function\"}]}", "tools",
         "tools[0].function: expected an object"},
        {"{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}", "tools",
         "tools[0].function.name: 'a b' must be"},
        {"{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}}, {\"type\": "
         "\"function\", \"function\": {\"name\": \"a\"}}]}",
         "tools", "tools[1].function.name: 'a' is given twice"},
        {"{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", \"parameters\": "
         "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"number\", \"multipleOf\": "
         "2}}}}}]}",
         "tools",
         "tools[0].function.parameters.properties.x: keyword 'multipleOf' is not supported"},
        {"{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", \"parameters\": "
         "{\"type\": \"strin\"}}}]}",
         "tools", "tools[0].function.parameters: keyword 'type': 'strin'"},
        {"{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", \"x\": 1}}]}",
         "tools", "field 'x' is not supported"},
        {"{\"tool_choice\": \"required\"}", "tool_choice", "needs 'tools'"},
        {"{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}}], "
         "\"tool_choice\": "
         "{\"type\": \"function\", \"function\": {\"name\": \"b\"}}}",
         "tool_choice", "names function 'b', which is not in 'tools'"},
        {"{\"tool_choice\": \"sometimes\"}", "tool_choice", "is not one of"},
        {"{\"parallel_tool_calls\": 1}", "parallel_tool_calls", "must be a boolean"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *m = tools_msg(bad[i].body, &t, &param);
        bool ok = param && !strcmp(param, bad[i].param) && strstr(m, bad[i].msg);
        CHECK(ok);
        if (!ok) fprintf(stderr, "  %s\n  -> %s: %s\n", bad[i].body, param ? param : "-", m);
    }
}

static void test_messages(void) {
    cJSON *m = cJSON_Parse(
        "[{\"role\": \"developer\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
        "{\"type\": "
        "\"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": null, "
        "\"tool_calls\": "
        "[{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
        "\"arguments\": "
        "\"{\\\"x\\\": 1}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": "
        "\"42\"}]");
    char *out = NULL, msg[256];
    CHECK(lpx_chat_messages_json(m, &out, msg, sizeof msg));
    const char *want =
        "[{\"role\":\"system\",\"content\":\"ab\"},{\"role\":\"assistant\",\"content\":\"\","
        "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"arguments\":{\"x\":1}}}]},{\"role\":\"tool\",\"content\":\"42\",\"tool_call_id\":"
        "\"call_1\"}]";
    CHECK(out && !strcmp(out, want));
    if (out && strcmp(out, want)) fprintf(stderr, "  got  %s\n  want %s\n", out, want);
    free(out);
    cJSON_Delete(m);
    m = cJSON_Parse("[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", "
                    "\"arguments\": \"{x\"}}]}]");
    CHECK(!lpx_chat_messages_json(m, &out, msg, sizeof msg) &&
          strstr(msg, "messages[0].tool_calls[0].function.arguments is not valid JSON"));
    cJSON_Delete(m);
}

static void test_formats(void) {
    CHECK(lpx_tool_format_of("{{ '<tool_call>' }}") == LPX_TOOLS_HERMES);
    CHECK(lpx_tool_format_of(NULL) == LPX_TOOLS_NONE);
    /* vLLM's pythonic Llama 3.2 template: its call list, beside the Llama header blocks */
    CHECK(
        lpx_tool_format_of("<|start_header_id|>system<|end_header_id|> {{ tools }} \"parameters\" "
                           "[func_name1(params_name1=params_value1, ...)]") == LPX_TOOLS_PYTHONIC);
    lpx_tools t = {.n_tools = 1, .choice = LPX_TOOL_CHOICE_REQUIRED};
    char msg[300];
    const char *param = NULL;
    CHECK(!lpx_tools_check_format(&t, LPX_TOOLS_PYTHONIC, msg, sizeof msg, &param) &&
          !strcmp(param, "tool_choice"));
    CHECK(!lpx_tools_check_format(&t, LPX_TOOLS_NONE, msg, sizeof msg, &param) &&
          !strcmp(param, "tools"));
    t.choice = LPX_TOOL_CHOICE_AUTO;
    CHECK(lpx_tools_check_format(&t, LPX_TOOLS_PYTHONIC, msg, sizeof msg, &param));
    CHECK(lpx_tools_grammar_text(&t, LPX_TOOLS_PYTHONIC) == NULL);
    /* the published templates (Mistral v0.3 has the format, v0.1 no tools) and the
     * pythonic test template */
    static const struct {
        const char *file;
        lpx_tool_format f;
    } published[] = {{"mistralai-Mistral-7B-Instruct-v0.3", LPX_TOOLS_MISTRAL},
                     {"mistralai-Mistral-7B-Instruct-v0.1", LPX_TOOLS_NONE},
                     {"meta-llama-Llama-3.2-3B-Instruct", LPX_TOOLS_LLAMA3},
                     {"Qwen-Qwen3-0.6B", LPX_TOOLS_HERMES},
                     {"../tools/pythonic-test", LPX_TOOLS_PYTHONIC}};
    for (size_t i = 0; i < sizeof published / sizeof *published; i++) {
        char path[256], *text = NULL;
        size_t n;
        snprintf(path, sizeof path, LPX_SOURCE_DIR "/tests/fixtures/templates/%s.jinja",
                 published[i].file);
        CHECK(lpx_read_file(path, 1 << 20, &text, &n) == LPX_OK);
        CHECK(text && lpx_tool_format_of(text) == published[i].f);
        free(text);
    }
    CHECK(lpx_tool_format_of("{% for m in messages %}{{ m.content }}{% endfor %}") ==
          LPX_TOOLS_NONE);
}

static int driver(char **argv) {
    lpx_tool_rules r = lpx_tool_rules_any(!strcmp(argv[2], "llama3")     ? LPX_TOOLS_LLAMA3
                                          : !strcmp(argv[2], "pythonic") ? LPX_TOOLS_PYTHONIC
                                          : !strcmp(argv[2], "mistral")  ? LPX_TOOLS_MISTRAL
                                                                         : LPX_TOOLS_HERMES);
    lpx_tool_parser p;
    lpx_tool_parser_init(&p, &r);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0)
        lpx_tool_parser_feed(&p, buf, n);
    lpx_tool_parser_finish(&p);
    char *s = summary(&p);
    printf("%s\n", s);
    free(s);
    lpx_tool_parser_free(&p);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "parse")) return driver(argv);
    test_hermes();
    test_llama3();
    test_pythonic();
    test_mistral();
    test_whitespace();
    test_rules();
    test_grammar();
    test_tools_parse();
    test_messages();
    test_formats();
    TEST_DONE();
}
