/* Minimal test harness for the C unit tests: CHECK records failures and goes on. */
#ifndef LPX_TEST_H
#define LPX_TEST_H
#include <stdio.h>

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
#endif
