/* The host's read bandwidth (host_bw.h). */
#include "base/host_bw.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double lpx_host_read_bandwidth(void) {
    const size_t n = (size_t)32 << 20; /* uint64 words */
    uint64_t *buf = malloc(n * sizeof(uint64_t));
    if (!buf) return 1e10;
    for (size_t i = 0; i < n; i++)
        buf[i] = i * 0x9e3779b97f4a7c15ull;
    double best = 1e30;
    volatile uint64_t sink = 0;
    for (int r = 0; r < 3; r++) {
        const double t0 = now_s();
        uint64_t a = 0, c = 0, d = 0, e = 0;
        for (size_t i = 0; i < n; i += 4) {
            a ^= buf[i];
            c ^= buf[i + 1];
            d ^= buf[i + 2];
            e ^= buf[i + 3];
        }
        sink ^= a ^ c ^ d ^ e;
        const double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    (void)sink;
    free(buf);
    return (double)n * sizeof(uint64_t) / best;
}
