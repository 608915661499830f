/* Overflow-checked size arithmetic for everything computed from untrusted bytes. */
#ifndef LPX_BASE_CHECKED_H
#define LPX_BASE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Each returns false (leaving *out unspecified) when the result overflows. */
static inline bool lpx_mul_size(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool lpx_add_size(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline bool lpx_mul_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool lpx_add_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

#endif
