/* lpx monitor's alert rules on written-down sample series. */
#include "doctor/monitor.h"
#include "test.h"

#include <string.h>

#define MIB (1024LL * 1024)

static lpx_gpu_sample sample(int util, int64_t used_mib, int temp, int64_t throttle) {
    lpx_gpu_sample s = {.util_gpu = util,
                        .util_mem = util / 2,
                        .mem_total = 143771 * MIB,
                        .mem_used = used_mib * MIB,
                        .temp_c = temp,
                        .throttle = throttle};
    s.mem_free = s.mem_total - s.mem_used;
    return s;
}

int main(void) {
    lpx_monitor_limits l;
    lpx_monitor_limits_default(&l);
    l.growth_window = 5;
    l.growth_bytes = 256 * MIB;
    lpx_gpu_facts f = {.temp_slowdown_c = 90};
    char text[512];

    /* idle: nothing */
    lpx_gpu_sample h[8];
    h[0] = sample(0, 500, 30, LPX_THR_GPU_IDLE);
    CHECK(lpx_monitor_alerts(&l, &f, h, 1, text, sizeof text) == 0 && !text[0]);
    CHECK(lpx_monitor_alerts(&l, &f, h, 0, text, sizeof text) == 0);

    /* busy and full: saturated (95% of both by default) */
    h[0] = sample(99, 140000, 60, 0);
    CHECK(lpx_monitor_alerts(&l, &f, h, 1, text, sizeof text) == LPX_ALERT_SATURATED);
    CHECK(strstr(text, "utilisation 99%") && strstr(text, "memory 97%"));
    /* busy but memory low: not saturated */
    h[0] = sample(99, 20000, 60, 0);
    CHECK(lpx_monitor_alerts(&l, &f, h, 1, text, sizeof text) == 0);

    /* temperature: the GPU's slowdown 90 C - 5, or the given limit */
    h[0] = sample(50, 20000, 85, 0);
    CHECK(lpx_monitor_alerts(&l, &f, h, 1, text, sizeof text) == LPX_ALERT_TEMP);
    CHECK(strstr(text, "85 C at or over 85 C"));
    h[0].temp_c = 84;
    CHECK(lpx_monitor_alerts(&l, &f, h, 1, text, sizeof text) == 0);
    l.temp_limit_c = 80;
    CHECK(lpx_monitor_alerts(&l, &f, h, 1, text, sizeof text) == LPX_ALERT_TEMP);
    l.temp_limit_c = 0;
    CHECK(lpx_monitor_alerts(&l, NULL, h, 1, text, sizeof text) == 0); /* 85 C when unknown */

    /* throttling: thermal, power cap, hardware; idle and sync boost are not */
    h[0] = sample(50, 20000, 60, LPX_THR_SW_THERMAL | LPX_THR_GPU_IDLE);
    CHECK(lpx_monitor_alerts(&l, &f, h, 1, text, sizeof text) == LPX_ALERT_THROTTLE);
    CHECK(strstr(text, "thermal (software)") && !strstr(text, "idle"));
    h[0].throttle = LPX_THR_SYNC_BOOST | LPX_THR_GPU_IDLE;
    CHECK(lpx_monitor_alerts(&l, &f, h, 1, text, sizeof text) == 0);
    h[0].throttle = LPX_TEL_NA;
    CHECK(lpx_monitor_alerts(&l, &f, h, 1, text, sizeof text) == 0);

    /* memory rising at every one of 5 samples by 300 MiB in all: growth */
    for (int i = 0; i < 5; i++)
        h[i] = sample(10, 1000 + 75 * i, 40, 0);
    CHECK(lpx_monitor_alerts(&l, &f, h, 5, text, sizeof text) == LPX_ALERT_MEM_GROWTH);
    CHECK(strstr(text, "grew 300 MiB over the last 5 samples"));
    /* fewer samples than the window: not yet */
    CHECK(lpx_monitor_alerts(&l, &f, h, 4, text, sizeof text) == 0);
    /* one dip breaks "steadily" */
    h[2].mem_used = 900 * MIB;
    CHECK(lpx_monitor_alerts(&l, &f, h, 5, text, sizeof text) == 0);
    /* steady but small */
    for (int i = 0; i < 5; i++)
        h[i] = sample(10, 1000 + 10 * i, 40, 0);
    CHECK(lpx_monitor_alerts(&l, &f, h, 5, text, sizeof text) == 0);
    /* only the newest window counts: a fall before it does not matter */
    h[0] = sample(10, 5000, 40, 0);
    for (int i = 1; i < 6; i++)
        h[i] = sample(10, 1000 + 100 * i, 40, 0);
    CHECK(lpx_monitor_alerts(&l, &f, h, 6, text, sizeof text) == LPX_ALERT_MEM_GROWTH);

    /* several at once, one clause each */
    h[0] = sample(99, 140000, 95, LPX_THR_HW_SLOWDOWN);
    CHECK(lpx_monitor_alerts(&l, &f, h, 1, text, sizeof text) ==
          (LPX_ALERT_SATURATED | LPX_ALERT_TEMP | LPX_ALERT_THROTTLE));
    CHECK(strstr(text, "; temperature 95 C") && strstr(text, "; throttling: hardware slowdown"));
    TEST_DONE();
}
