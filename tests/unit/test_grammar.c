/* The grammar engine: byte-level acceptance of documents for schemas, refused schemas
 * and their messages, token masks against feeding every token, and (with arguments) a
 * driver for tests/py/test_grammar_jsonschema.py:
 *   test_grammar walk SCHEMA_FILE SEED N   N random documents of the grammar, one JSON
 *                                          string a line
 *   test_grammar check SCHEMA_FILE         for each line (a JSON string) of stdin:
 *                                          "accept" or "reject"
 *   test_grammar prefix SCHEMA_FILE        the same for "is a prefix of a document"
 * SCHEMA_FILE may also hold a tool-call description (lpx_grammar_tool_calls). */
#include "test.h"

#include "grammar/grammar.h"
#include "grammar/mask.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static lpx_grammar *compile(const char *schema) {
    lpx_grammar *g = NULL;
    if (lpx_grammar_from_schema(schema, strlen(schema), "schema", &g) != LPX_OK) {
        fprintf(stderr, "compile failed: %s\n  %s\n", lpx_last_error(), schema);
        return NULL;
    }
    return g;
}

static bool accepts(const lpx_grammar *g, const char *doc) {
    lpx_gmatch m;
    if (lpx_gmatch_init(&m, g) != LPX_OK) return false;
    bool ok = lpx_gmatch_feed(&m, doc, strlen(doc)) && lpx_gmatch_can_end(&m);
    lpx_gmatch_free(&m);
    return ok;
}

static void check_docs(const char *schema, const char *const *good, const char *const *bad) {
    lpx_grammar *g = compile(schema);
    CHECK(g != NULL);
    if (!g) return;
    for (; good && *good; good++) {
        bool ok = accepts(g, *good);
        CHECK(ok);
        if (!ok) fprintf(stderr, "  should accept %s\n  under %s\n", *good, schema);
    }
    for (; bad && *bad; bad++) {
        bool ok = accepts(g, *bad);
        CHECK(!ok);
        if (ok) fprintf(stderr, "  should reject %s\n  under %s\n", *bad, schema);
    }
    lpx_grammar_free(g);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_documents(void) {
    check_docs("{\"type\":\"integer\"}", L("0", "-12", "1234567890123456"),
               L("", "01", "1.5", "+1", "12345678901234567", "1 "));
    check_docs("{\"type\":\"number\"}", L("0", "-0.5", "1e10", "2.25E-3"),
               L("1.", ".5", "1e", "--1", "NaN"));
    check_docs(
        "{\"type\":\"string\"}",
        L("\"\"", "\"a b\"", "\"\\\"\\\\\\n\\u00e9\"", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""),
        L("\"", "\"a", "\"\n\"", "\"\\x\"", "\"\\ud800\"", "\"\xc3\"", "\"\xc0\xaf\"", "a"));
    check_docs("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
               L("\"ab\"", "\"abc\"", "\"\\n\xc3\xa9\""), L("\"a\"", "\"abcd\""));
    check_docs("{\"type\":[\"boolean\",\"null\"]}", L("true", "false", "null"),
               L("0", "\"true\"", "nul"));
    check_docs("{\"enum\":[\"red\",\"green\",3,null,{\"a\":[1]}]}",
               L("\"red\"", "\"green\"", "3", "null", "{\"a\":[1]}"), L("\"blue\"", "\"re\"", "4"));
    check_docs("{\"const\":\"x\\\"y\"}", L("\"x\\\"y\""), L("\"xy\""));
    check_docs("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
               "\"string\"}},\"required\":[\"b\"],\"additionalProperties\":false}",
               L("{\"b\":\"x\"}", "{\"a\":1,\"b\":\"x\"}", "{ \"a\" : 1 , \"b\" : \"x\" }",
                 "{\n  \"a\": 1,\n  \"b\": \"x\"\n}"),
               L("{}", "{\"a\":1}", "{\"b\":\"x\",\"a\":1}", "{\"b\":\"x\",\"c\":1}", "{\"b\":1}",
                 "{\"b\":\"x\",}", "{\"b\":\"x\"}x", "{  \"b\":\"x\"}",
                 "{\n                      \"b\":\"x\"}"));
    /* additionalProperties absent: extra names, never a listed one */
    check_docs("{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"null\"}}}",
               L("{}", "{\"ab\":null}", "{\"ab\":null,\"x\":[1,{}]}", "{\"a\":1}", "{\"abc\":1}",
                 "{\"x\":1,\"y\":\"z\"}"),
               L("{\"ab\":1}", "{\"x\":1,\"ab\":null}", "{\"ab\":null,\"ab\":null}"));
    check_docs(
        "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
        L("[1]", "[1,2,3]", "[ 1 , 2 ]"), L("[]", "[1,2,3,4]", "[1,]", "[\"a\"]"));
    check_docs("{\"type\":\"array\"}", L("[]", "[1,\"a\",[],{}]"), L("[", "[1 2]"));
    check_docs("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}",
               L("5", "\"a\""), L("\"ab\"", "true"));
    check_docs("{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#/$"
               "defs/n\"}},\"additionalProperties\":false}},\"$ref\":\"#/$defs/n\"}",
               L("{}", "{\"next\":{}}", "{\"next\":{\"next\":{}}}"), L("{\"next\":1}"));
    check_docs("{\"type\":\"string\",\"pattern\":\"^[a-z]+-\\\\d{2,3}(x|yz)?$\"}",
               L("\"ab-12\"", "\"a-123x\"", "\"q-99yz\""),
               L("\"ab-1\"", "\"AB-12\"", "\"a-1234\"", "\"a-12y\""));
    check_docs("{\"type\":\"string\",\"pattern\":\"a\\\"\\\\\\\\.\"}", L("\"a\\\"\\\\b\""),
               L("\"a\\\"\\\\\""));
    /* a pattern with length bounds: both hold, counted in characters (an escape and a
     * UTF-8 sequence are one), and only lengths the pattern can make ((ab)* is even) */
    check_docs("{\"type\":\"string\",\"pattern\":\"^[a-z]+(-[a-z]+)*$\",\"minLength\":5,"
               "\"maxLength\":8}",
               L("\"abcde\"", "\"ab-cd\"", "\"a-b-c-de\"", "\"abcdefgh\""),
               L("\"abcd\"", "\"abcdefghi\"", "\"ab-\"", "\"ab--cd\"", "\"a-b-c-d-e\""));
    check_docs("{\"type\":\"string\",\"pattern\":\"(ab)*\",\"minLength\":3,\"maxLength\":7}",
               L("\"abab\"", "\"ababab\""), L("\"\"", "\"ab\"", "\"aba\"", "\"abababab\""));
    check_docs("{\"type\":\"string\",\"pattern\":\"^(\\\\n|\xc3\xa9|x)+$\",\"minLength\":2,"
               "\"maxLength\":3}",
               L("\"\\n\xc3\xa9\"", "\"x\\nx\"", "\"\xc3\xa9\xc3\xa9\xc3\xa9\""),
               L("\"\xc3\xa9\"", "\"\\n\"", "\"xxxx\"", "\"\xc3\xa9\xc3\xa9x\xc3\xa9\""));
    check_docs("{\"type\":\"string\",\"pattern\":\"^a*$\",\"minLength\":3}",
               L("\"aaa\"", "\"aaaaaaaaaa\""), L("\"aa\"", "\"aaab\""));
    check_docs("{\"type\":\"string\",\"pattern\":\"^\\\\d+$\",\"maxLength\":2}",
               L("\"1\"", "\"12\""), L("\"\"", "\"123\""));
    check_docs("{\"type\":\"string\",\"pattern\":\"^(a|b?)*c$\",\"maxLength\":3}",
               L("\"c\"", "\"abc\"", "\"bbc\""), L("\"abab\"", "\"abbc\""));
    /* a long pattern: its automaton is one long chain of rules, built without recursing
     * on its length and settled in one sweep of the shortest-length fixed point (one
     * rule a sweep took seconds here); CPU time, so a loaded machine does not fail it */
    {
        enum { REP = 30000 };
        static char schema[2 * REP + 64], doc[2 * REP + 8];
        int at = snprintf(schema, sizeof schema, "{\"type\":\"string\",\"pattern\":\"^");
        for (int i = 0; i < REP; i++)
            schema[at++] = 'a', schema[at++] = 'b';
        snprintf(schema + at, sizeof schema - (size_t)at, "$\"}");
        doc[0] = '"';
        memcpy(doc + 1, schema + at - 2 * REP, 2 * REP);
        memcpy(doc + 1 + 2 * REP, "\"", 2);
        clock_t t0 = clock();
        lpx_grammar *g = compile(schema);
        CHECK(g && accepts(g, doc));
        CHECK((double)(clock() - t0) / CLOCKS_PER_SEC < 5);
        doc[2 * REP] = '"', doc[2 * REP + 1] = '\0';
        CHECK(g && !accepts(g, doc));
        lpx_grammar_free(g);
    }
    check_docs("true", L("1", "{\"a\":[null]}", "\"x\""), L("", "{"));
    /* depth: 32 open containers, and no more */
    char deep[200] = "", deeper[200] = "";
    for (int i = 0; i < 32; i++)
        strcat(deep, "[");
    strcat(deep, "1");
    for (int i = 0; i < 32; i++)
        strcat(deep, "]");
    strcpy(deeper, "[");
    strcat(deeper, deep);
    strcat(deeper, "]");
    check_docs("{}", L(deep), L(deeper));
}

static void refused(const char *schema, const char *want) {
    lpx_grammar *g = NULL;
    lpx_status st =
        lpx_grammar_from_schema(schema, strlen(schema), "response_format.json_schema.schema", &g);
    CHECK(st == LPX_ERR_INVALID_ARG);
    CHECK(g == NULL);
    if (st != LPX_OK && !strstr(lpx_last_error(), want))
        fprintf(stderr, "  message '%s' lacks '%s'\n", lpx_last_error(), want);
    CHECK(st != LPX_OK && strstr(lpx_last_error(), want));
    lpx_grammar_free(g);
}

static void test_refused(void) {
    refused(
        "{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"multipleOf\":2}}}",
        "response_format.json_schema.schema.properties.age: keyword 'multipleOf' is not "
        "supported");
    refused("{\"type\":\"string\",\"format\":\"date\"}", "schema: keyword 'format'");
    refused("{\"type\":\"integer\",\"minimum\":0}", "keyword 'minimum'");
    refused("{\"oneOf\":[{}]}", "keyword 'oneOf'");
    refused("{\"type\":\"strin\"}", "'strin' is not a JSON Schema type");
    refused("{\"type\":\"array\",\"items\":[{}]}", "schema.items: a list of schemas");
    refused("{\"$ref\":\"#/$defs/missing\"}", "keyword '$ref'");
    refused("{\"$ref\":\"http://x/y\"}", "not a local reference");
    refused("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "schema.pattern: lookarounds");
    refused("{\"type\":\"string\",\"pattern\":\"^(ab)*$\",\"minLength\":3,\"maxLength\":3}",
            "schema.pattern: no string of the length");
    refused("{\"type\":\"string\",\"pattern\":\"^x{3}$\",\"maxLength\":2}",
            "schema.pattern: no string of the length");
    char many[1024] = "{\"type\":\"string\",\"pattern\":\"^(a";
    for (int i = 0; i < 64; i++)
        strcat(many, "|a");
    strcat(many, ")$\"}");
    refused(many, "schema.pattern: more than 64 alternatives");
    refused("{\"type\":\"string\",\"pattern\":\"^((a?){4000}){4000}$\"}",
            "schema.pattern: the pattern is too large");
    refused("{\"type\":\"string\",\"pattern\":\"^(a?){4000}$\",\"maxLength\":4000}",
            "schema.pattern: the pattern is too");
    refused("{\"type\":\"string\",\"pattern\":\"a\\\\bc\"}", "schema.pattern: an escape");
    refused("{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "above 'maxLength'");
    refused("{\"anyOf\":[]}", "keyword 'anyOf'");
    refused("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\",\"patternProperties\":{}}]}",
            "schema.anyOf[1]: keyword 'patternProperties'");
    refused("{\"type\":\"object\",\"required\":[\"x\"]}", "'x' is not in 'properties'");
    refused("{\"enum\":[1,2],\"type\":\"string\"}", "no value is of the schema's 'type'");
    refused("{\"enum\":[1],\"minLength\":1}", "keyword 'minLength' beside keyword 'enum'");
    refused("{\"type\":\"object\",\"if\":{}}", "keyword 'if'");
    refused("[1]", "a schema must be an object or a boolean");
    refused("{\"a\":", "not valid JSON");
    refused("false", "allows no value");
}

/* Masks equal feeding each token's bytes to the state, along a few documents. */
static void test_masks(void) {
    static const char *const toks[] = {"{",    "}",        "\"",   "\"name", "\":", " ",     "\n",
                                       "\n  ", "a",        "ab",   "1",      "12",  "-",     ",",
                                       ", ",   "\"age\":", "true", "null",   "x\"", "\":\"", "é",
                                       "\xc3", "\xa9",     "}}",   "",       "[",   "]"};
    const int32_t n = (int32_t)(sizeof toks / sizeof *toks);
    const char *bytes[64];
    size_t lens[64];
    for (int32_t i = 0; i < n; i++) {
        bytes[i] = toks[i];
        lens[i] = strlen(toks[i]);
    }
    lpx_gvocab *v = NULL;
    CHECK(lpx_gvocab_create(n, bytes, lens, &v) == LPX_OK);
    lpx_grammar *g = compile("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                             "\"age\":{\"type\":\"integer\"}},\"required\":[\"name\"]}");
    lpx_gmasks *c = NULL;
    CHECK(g && v && lpx_gmasks_create(g, v, 0, &c) == LPX_OK);
    if (!c) return;
    const char *doc = "{\"name\":\"ab\xc3\xa9\", \"age\":12}";
    lpx_gmatch m;
    CHECK(lpx_gmatch_init(&m, g) == LPX_OK);
    for (size_t at = 0; at <= strlen(doc); at++) {
        const uint32_t *mask;
        int32_t n_allowed;
        CHECK(lpx_gmasks_get(c, &m, &mask, &n_allowed) == LPX_OK);
        int32_t count = 0;
        for (int32_t t = 0; t < n; t++) {
            lpx_gmatch x;
            lpx_gmatch_init(&x, g);
            lpx_gmatch_feed(&x, doc, at);
            bool want = lens[t] > 0 && lpx_gmatch_feed(&x, toks[t], lens[t]);
            lpx_gmatch_free(&x);
            bool got = mask[t >> 5] >> (t & 31) & 1;
            count += got;
            CHECK(want == got);
            if (want != got) fprintf(stderr, "  at %zu token %d: want %d\n", at, t, want);
        }
        CHECK(count == n_allowed);
        if (at < strlen(doc)) CHECK(lpx_gmatch_feed(&m, doc + at, 1));
    }
    CHECK(lpx_gmatch_can_end(&m) && lpx_gmatch_no_next(&m));
    lpx_gmask_stats s;
    lpx_gmasks_stats(c, &s);
    CHECK(s.misses > 0 && s.hits >= 0);
    /* the same state again: from the cache */
    lpx_gmatch y;
    lpx_gmatch_init(&y, g);
    const uint32_t *mask;
    int32_t n_allowed;
    lpx_gmasks_get(c, &y, &mask, &n_allowed);
    lpx_gmask_stats s2;
    lpx_gmasks_stats(c, &s2);
    CHECK(s2.hits == s.hits + 1);
    lpx_gmatch_free(&y);
    lpx_gmatch_free(&m);
    lpx_gmasks_free(c);
    lpx_grammar_free(g);
    lpx_gvocab_free(v);
}

/* ---- the driver -------------------------------------------------------------------- */

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

static uint64_t rng(uint64_t *s) {
    uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* A random document: random allowed bytes (ending at times where it may), then past a
 * budget the bytes that bring the end nearest, so that every walk ends. */
static char *walk(const lpx_grammar *g, uint64_t *seed) {
    lpx_gmatch m;
    lpx_gmatch_init(&m, g);
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    size_t budget = 40 + rng(seed) % 200;
    for (;;) {
        bool end = lpx_gmatch_can_end(&m);
        if (lpx_gmatch_no_next(&m) || (end && rng(seed) % 4 == 0) || n + 8 >= cap) break;
        uint8_t set[32];
        lpx_gmatch_next_bytes(&m, set);
        int cand[256], nc = 0;
        for (int b = 0; b < 256; b++)
            if (set[b >> 3] >> (b & 7) & 1) cand[nc++] = b;
        int pick = cand[rng(seed) % (uint64_t)nc];
        if (n > budget) {
            if (end) break;
            int32_t best = INT32_MAX;
            for (int k = 0; k < nc; k++) {
                lpx_gmatch x;
                lpx_gmatch_init(&x, g);
                lpx_gmatch_feed(&x, out, n);
                uint8_t b = (uint8_t)cand[k];
                int32_t d = lpx_gmatch_feed(&x, &b, 1) ? lpx_gmatch_min_remaining(&x) : INT32_MAX;
                lpx_gmatch_free(&x);
                if (d < best || (d == best && rng(seed) % 2)) best = d, pick = cand[k];
            }
        }
        uint8_t b = (uint8_t)pick;
        if (!lpx_gmatch_feed(&m, &b, 1)) break; /* a dead end: the bounds cut it */
        out[n++] = (char)b;
    }
    out[n] = '\0';
    if (!lpx_gmatch_can_end(&m)) out[0] = '\0', fprintf(stderr, "walk: a dead end\n");
    lpx_gmatch_free(&m);
    return out;
}

/* A schema, or a tool-call description ({"format", "functions", ...}). */
static lpx_grammar *compile_any(const char *text) {
    cJSON *o = cJSON_Parse(text);
    bool tools = cJSON_GetObjectItemCaseSensitive(o, "functions") &&
                 cJSON_GetObjectItemCaseSensitive(o, "format");
    cJSON_Delete(o);
    lpx_grammar *g = NULL;
    if (!tools) return compile(text);
    if (lpx_grammar_tool_calls(text, strlen(text), &g) != LPX_OK)
        fprintf(stderr, "compile failed: %s\n", lpx_last_error());
    return g;
}

static int driver(int argc, char **argv) {
    char *schema = read_file(argv[2]);
    lpx_grammar *g = schema ? compile_any(schema) : NULL;
    free(schema);
    if (!g) return 2;
    if (!strcmp(argv[1], "walk") && argc == 5) {
        uint64_t seed = strtoull(argv[3], NULL, 10);
        for (int i = 0; i < atoi(argv[4]); i++) {
            char *doc = walk(g, &seed);
            cJSON *s = cJSON_CreateString(doc);
            char *line = cJSON_PrintUnformatted(s);
            printf("%s\n", line);
            free(line);
            cJSON_Delete(s);
            free(doc);
        }
    } else if (!strcmp(argv[1], "check") || !strcmp(argv[1], "prefix")) {
        bool whole = !strcmp(argv[1], "check");
        static char line[1 << 20];
        while (fgets(line, sizeof line, stdin)) {
            cJSON *s = cJSON_Parse(line);
            bool ok = false;
            lpx_gmatch m;
            if (cJSON_IsString(s) && lpx_gmatch_init(&m, g) == LPX_OK) {
                ok = lpx_gmatch_feed(&m, s->valuestring, strlen(s->valuestring)) &&
                     (!whole || lpx_gmatch_can_end(&m));
                lpx_gmatch_free(&m);
            }
            printf("%s\n", ok ? "accept" : "reject");
            cJSON_Delete(s);
        }
    } else {
        return 2;
    }
    lpx_grammar_free(g);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3) return driver(argc, argv);
    test_documents();
    test_refused();
    test_masks();
    TEST_DONE();
}
