/* Tokenizer unit tests: encode/decode against ids from the `tokenizers` package
 * (values from tests/fixtures/tokenizer, computed with tokenizers 0.23.3), the
 * streaming decoder, the buffer protocol, and malformed tokenizer files. */
#include "test.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FIX LPX_SOURCE_DIR "/tests/fixtures/tokenizer/"

static bool ids_eq(const int32_t *a, size_t n, const int32_t *b, size_t m) {
    return n == m && !memcmp(a, b, n * sizeof *a);
}

static void test_bytelevel(void) {
    lpx_tokenizer *t = NULL;
    CHECK(lpx_tokenizer_load_json_file(FIX "tiny_bpe/tokenizer.json", &t) == LPX_OK);
    if (!t) return;
    const char *text = "Hello <|im_start|>world 123 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD";
    const int32_t want[] = {0, 41, 70, 553, 222, 700, 88, 324, 77, 69, 222, 18, 19, 20, 222, 347};
    int32_t ids[64];
    size_t n = 0;
    CHECK(lpx_tokenize(t, text, strlen(text), true, true, ids, 64, &n) == LPX_OK);
    CHECK(ids_eq(ids, n, want, sizeof want / sizeof *want));
    /* Too small a buffer: the full count comes back, the prefix is written. */
    size_t n2 = 0;
    CHECK(lpx_tokenize(t, text, strlen(text), true, true, ids, 3, &n2) == LPX_OK && n2 == n);
    /* lstrip/rstrip added token swallows the spaces around it; normalized added tokens
     * match after NFC (the ligature "ﬁne" stays as it is under NFC). */
    const int32_t want_pad[] = {0, 66, 702, 67};
    CHECK(lpx_tokenize(t, "a  <|pad|>  b", 13, true, true, ids, 64, &n) == LPX_OK);
    CHECK(ids_eq(ids, n, want_pad, 4));
    const int32_t want_added[] = {0, 89, 222, 703, 222, 704};
    const char *added = "x lpx_added \xEF\xAC\x81ne";
    CHECK(lpx_tokenize(t, added, strlen(added), true, true, ids, 64, &n) == LPX_OK);
    CHECK(ids_eq(ids, n, want_added, 6));

    /* stopping past a limit: more than the limit, fewer than all; the bytes bound */
    size_t n_all = 0, n_lim = 0;
    CHECK(lpx_tokenize(t, text, strlen(text), true, true, ids, 64, &n_all) == LPX_OK);
    CHECK(lpx_tokenize_limit(t, text, strlen(text), true, true, 3, ids, 64, &n_lim) == LPX_OK);
    CHECK(n_lim > 3 && n_lim < n_all);
    /* <|pad|> strips the spaces beside it: one token can stand for any amount of text */
    CHECK(lpx_tokenizer_bytes_bound(t, 3) == SIZE_MAX);

    CHECK(lpx_tokenizer_bos(t) == 0);
    CHECK(lpx_tokenizer_find(t, "<|im_start|>") == 700);
    CHECK(lpx_tokenizer_is_special(t, 700) && !lpx_tokenizer_is_special(t, 41));
    CHECK(lpx_vocab_size(t) == 705);
    CHECK(lpx_token_text(t, -1) == NULL && lpx_token_text(t, 705) == NULL);

    /* Invalid UTF-8 is an error, not a guess. */
    CHECK(lpx_tokenize(t, "ab\xC3", 3, false, true, ids, 64, &n) == LPX_ERR_INVALID_ARG);
    CHECK(strstr(lpx_last_error(), "not valid UTF-8") != NULL);

    /* Decode and streaming decode of an emoji cut into byte tokens. */
    CHECK(lpx_tokenize(t, text, strlen(text), false, true, ids, 64, &n) == LPX_OK);
    char buf[256], chunk[256], joined[256] = "";
    size_t len = 0;
    CHECK(lpx_detokenize(t, ids, n, false, buf, sizeof buf, &len) == LPX_OK);
    CHECK(len == strlen(text) && !strcmp(buf, text));
    lpx_detok_stream s;
    lpx_detok_stream_init(&s, t, false);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t w = lpx_detok_stream_push(&s, ids[i], chunk, sizeof chunk);
        /* A chunk never ends inside a character. */
        CHECK(w == 0 || ((unsigned char)chunk[w - 1] & 0xC0) != 0xC0);
        memcpy(joined + total, chunk, w);
        total += w;
    }
    total += lpx_detok_stream_flush(&s, joined + total, sizeof joined - total);
    joined[total] = '\0';
    CHECK(!strcmp(joined, text));
    /* A dangling half character becomes U+FFFD at flush. */
    lpx_detok_stream_init(&s, t, false);
    CHECK(lpx_detok_stream_push(&s, 174, chunk, sizeof chunk) == 0); /* byte 0xF0 */
    CHECK(lpx_detok_stream_flush(&s, chunk, sizeof chunk) == 3 && !strcmp(chunk, "\xEF\xBF\xBD"));
    /* Truncated output never ends in half a character. */
    CHECK(lpx_detokenize(t, ids, n, false, buf, strlen(text) - 1, &len) == LPX_OK);
    CHECK(len == strlen(text) && strlen(buf) < strlen(text) - 1);
    lpx_tokenizer_free(t);
}

static void test_sentencepiece_gguf(void) {
    lpx_gguf *g = NULL;
    lpx_tokenizer *t = NULL;
    CHECK(lpx_gguf_open(FIX "tiny_spm.gguf", &g) == LPX_OK);
    if (!g) return;
    CHECK(lpx_tokenizer_load_gguf(g, &t) == LPX_OK);
    lpx_gguf_close(g);
    if (!t) return;
    const int32_t want[] = {1, 534, 321, 588, 435, 437, 327, 320, 372, 408};
    int32_t ids[32];
    size_t n = 0, len = 0;
    CHECK(lpx_tokenize(t, "Hello world \xF0\x9F\x91\x8D", 16, true, true, ids, 32, &n) == LPX_OK);
    CHECK(ids_eq(ids, n, want, 10));
    char buf[64];
    CHECK(lpx_detokenize(t, ids, n, true, buf, sizeof buf, &len) == LPX_OK);
    CHECK(!strcmp(buf, "Hello world \xF0\x9F\x91\x8D"));
    lpx_tokenizer_free(t);
}

static lpx_status from(const char *json) {
    lpx_tokenizer *t = NULL;
    lpx_status s = lpx_tokenizer_from_json(json, strlen(json), NULL, 0, &t);
    lpx_tokenizer_free(t);
    return s;
}

static void test_malformed(void) {
    CHECK(from("") == LPX_ERR_FORMAT);
    CHECK(from("[1, 2]") == LPX_ERR_FORMAT);
    CHECK(from("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}") == LPX_ERR_UNSUPPORTED);
    CHECK(from("{\"model\": {\"vocab\": {\"a\": -1}}}") == LPX_ERR_FORMAT);
    CHECK(from("{\"model\": {\"vocab\": {\"a\": 1e12}}}") == LPX_ERR_FORMAT);
    CHECK(from("{\"model\": {\"vocab\": {\"a\": 0.5}}}") == LPX_ERR_FORMAT);
    CHECK(from("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}}") ==
          LPX_ERR_FORMAT);
    CHECK(strstr(lpx_last_error(), "'c' is not in the vocabulary") != NULL);
    /* The merge's result must exist too. */
    CHECK(from("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [[\"a\", \"b\"]]}}") ==
          LPX_ERR_FORMAT);
    CHECK(from("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [\"a  a\"]}}") == LPX_ERR_FORMAT);
    CHECK(from("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [7]}}") == LPX_ERR_FORMAT);
    CHECK(from("{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Split\", "
               "\"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}") ==
          LPX_ERR_UNSUPPORTED);
    CHECK(from("{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Split\", "
               "\"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}}") == LPX_ERR_FORMAT);
    CHECK(from("{\"model\": {\"vocab\": {\"a\": 0}}, \"added_tokens\": [{\"id\": 5}]}") ==
          LPX_ERR_FORMAT);
    CHECK(from("{\"model\": {\"vocab\": {\"a\": 0}, \"unk_token\": \"<unk>\"}}") == LPX_ERR_FORMAT);
    CHECK(from("{\"model\": {\"vocab\": {\"a\": 0}}, \"normalizer\": {\"type\": "
               "\"BertNormalizer\"}}") == LPX_ERR_UNSUPPORTED);
    /* Duplicate keys: the later one wins, as when tokenizers reads the object. */
    lpx_tokenizer *t = NULL;
    const char *dup = "{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1, \"a\": 2}}}";
    CHECK(lpx_tokenizer_from_json(dup, strlen(dup), NULL, 0, &t) == LPX_OK);
    if (t) {
        int32_t ids[4];
        size_t n = 0;
        CHECK(lpx_tokenize(t, "ab", 2, false, true, ids, 4, &n) == LPX_OK && n == 2 && ids[0] == 2);
        lpx_tokenizer_free(t);
    }
    CHECK(lpx_tokenizer_load_hf("/nonexistent-dir", &t) == LPX_ERR_IO && t == NULL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Issue 27: added tokens were tried one by one at every byte they could start at, so
 * 32,000 control tokens made a 300 KB prompt of '<' take 42 s. With the trie a position
 * costs the length of the longest token starting there: this takes milliseconds, and
 * the 10 s bound fails only when the matching is O(added tokens x text) again. */
static void test_many_added_tokens(void) {
    enum { N_ADDED = 32000, N_TEXT = 300 * 1024 };
    size_t cap = 64 + (size_t)N_ADDED * 80, len = 0;
    char *json = malloc(cap);
    len += (size_t)snprintf(json + len, cap - len,
                            "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"<\": 0, \"c\": 1}, "
                            "\"merges\": []}, \"added_tokens\": [");
    for (int i = 0; i < N_ADDED; i++)
        len += (size_t)snprintf(json + len, cap - len,
                                "%s{\"id\": %d, \"content\": \"<ctrl%d>\", \"special\": true}",
                                i ? ", " : "", 2 + i, i);
    snprintf(json + len, cap - len, "]}");
    lpx_tokenizer *t = NULL;
    CHECK(lpx_tokenizer_from_json(json, strlen(json), NULL, 0, &t) == LPX_OK);
    free(json);
    if (!t) return;
    char *text = malloc(N_TEXT + 1);
    memset(text, '<', N_TEXT);
    memcpy(text + 1000, "<ctrl31999><ctrl7>c<c", 21);
    int32_t *ids = malloc((N_TEXT + 16) * sizeof *ids);
    size_t n = 0;
    double t0 = now_s();
    CHECK(lpx_tokenize(t, text, N_TEXT, false, true, ids, N_TEXT + 16, &n) == LPX_OK);
    double el = now_s() - t0;
    printf("32,000 added tokens, 300 KB prompt: %.3f s\n", el);
    CHECK(el < 10.0);
    /* '<' x 1000, <ctrl31999>, <ctrl7>, c, <, c, then '<' to the end */
    CHECK(n == N_TEXT - 16);
    CHECK(ids[999] == 0 && ids[1000] == 2 + 31999 && ids[1001] == 2 + 7 && ids[1002] == 1);
    CHECK(ids[1003] == 0 && ids[1004] == 1);
    /* 4 x the longest token text ("<ctrl10000>": 11 bytes) per token */
    CHECK(lpx_tokenizer_bytes_bound(t, 100) == 100 * 4 * 11);
    /* the longest token wins; a prefix of one is text */
    const char *both = "<ctrl1><ctrl12>";
    CHECK(lpx_tokenize(t, both, strlen(both), false, true, ids, 8, &n) == LPX_OK && n == 2);
    CHECK(ids[0] == 3 && ids[1] == 14);
    free(text);
    free(ids);
    lpx_tokenizer_free(t);
}

int main(void) {
    test_bytelevel();
    test_sentencepiece_gguf();
    test_malformed();
    test_many_added_tokens();
    TEST_DONE();
}
