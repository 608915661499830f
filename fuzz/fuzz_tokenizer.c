/* libFuzzer target: arbitrary bytes through encode (with and without special
 * tokens), decode and the streaming decoder of tests/fixtures/tokenizer/tiny_bpe
 * (a byte-level BPE with Llama 3's pipeline). Run from the repository root. */
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lpx_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    if (lpx_tokenizer_load_json_file("tests/fixtures/tokenizer/tiny_bpe/tokenizer.json", &tok) !=
        LPX_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", lpx_last_error());
        abort();
    }
    return 0;
}

/* The harness checks what the library promises: streamed chunks are whole UTF-8. */
static void check_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t k = c < 0x80                 ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
        if (!k || i + k > n) abort();
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) abort();
        i += k;
    }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (size == 0) return 0;
    bool parse_special = data[0] & 1, add_special = data[0] & 2;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t ids[256];
    size_t n = 0;
    if (lpx_tokenize(tok, text, len, add_special, parse_special, ids, 256, &n) != LPX_OK) return 0;
    if (n > 256) n = 256;
    /* The input bytes as ids too: decode must take any id, valid or not. */
    int32_t raw[128];
    size_t nr = len / 2 < 128 ? len / 2 : 128;
    for (size_t i = 0; i < nr; i++)
        raw[i] = (int32_t)(data[1 + 2 * i] | data[2 + 2 * i] << 8) - 4096;
    char *buf = malloc(8192), chunk[4200];
    size_t out = 0;
    for (int pass = 0; pass < 2; pass++) {
        const int32_t *v = pass ? raw : ids;
        size_t m = pass ? nr : n;
        if (lpx_detokenize(tok, v, m, data[0] & 4, buf, 8192, &out) != LPX_OK) abort();
        check_utf8((const unsigned char *)buf, strlen(buf));
        lpx_detok_stream s;
        lpx_detok_stream_init(&s, tok, data[0] & 4);
        for (size_t i = 0; i <= m; i++) {
            size_t w = i < m ? lpx_detok_stream_push(&s, v[i], chunk, sizeof chunk)
                             : lpx_detok_stream_flush(&s, chunk, sizeof chunk);
            check_utf8((const unsigned char *)chunk, w);
        }
    }
    free(buf);
    return 0;
}
