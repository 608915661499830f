/* Minimal test harness for the C unit tests: CHECK records failures and goes on. */
#ifndef LPX_TEST_H
#define LPX_TEST_H
#include "lpx.h"

#include <stdio.h>
#include <stdlib.h>

static int test_failures, test_checks;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        test_checks++;                                                                             \
        if (!(cond)) {                                                                             \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)
#define TEST_DONE()                                                                                \
    do {                                                                                           \
        printf("%d checks, %d failed\n", test_checks, test_failures);                              \
        return test_failures ? 1 : 0;                                                              \
    } while (0)

/* The real SmolLM2 model of the model tests: $LPX_MODEL, else where
 * scripts/fetch-model.sh puts it ($LPX_CACHE or ~/.cache/lpx). */
static inline const char *test_model_path(char *buf, size_t n) {
    const char *path = getenv("LPX_MODEL");
    if (path) return path;
    const char *cache = getenv("LPX_CACHE");
    if (cache)
        snprintf(buf, n, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    else
        snprintf(buf, n, "%s/.cache/lpx/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : ".");
    return buf;
}

/* The model at test_model_path, or NULL with the reason printed. */
static inline lpx_model *test_open_model(void) {
    char def[4096];
    lpx_model *m;
    if (lpx_model_open(test_model_path(def, sizeof def), &m) != LPX_OK) {
        fprintf(stderr, "%s (scripts/fetch-model.sh fetches the model)\n", lpx_last_error());
        return NULL;
    }
    return m;
}
#endif
