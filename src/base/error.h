/* Error reporting inside liblpx: set a message and return the status in one go.
 *   return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: expected %d dims, found %d", ...);
 * The message lives in a thread-local buffer read by lpx_last_error(). */
#ifndef LPX_BASE_ERROR_H
#define LPX_BASE_ERROR_H

#include "lpx.h"

#if defined(__GNUC__)
#define LPX_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define LPX_PRINTF(f, a)
#endif

lpx_status lpx_errorf(lpx_status s, const char *fmt, ...) LPX_PRINTF(2, 3);
/* Prefixes the current message with context ("loading X: " + old message). */
lpx_status lpx_error_wrap(lpx_status s, const char *fmt, ...) LPX_PRINTF(2, 3);
void lpx_error_clear(void);

/* Propagate a failure unchanged. */
#define LPX_TRY(expr)                                                                              \
    do {                                                                                           \
        lpx_status lpx_try_s_ = (expr);                                                            \
        if (lpx_try_s_ != LPX_OK) return lpx_try_s_;                                               \
    } while (0)

#endif
