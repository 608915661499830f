/* lpx monitor: a live table of every GPU's readings (like nvidia-smi dmon), with --url a
 * running lpx server's tokens/s, requests and KV usage beside them, and alert rules over
 * the recent samples. The rules are a pure function of the samples, so the unit tests
 * drive them with written-down readings. */
#ifndef LPX_DOCTOR_MONITOR_H
#define LPX_DOCTOR_MONITOR_H

#include "telemetry/telemetry.h"

#include <signal.h>
#include <stdio.h>

typedef struct lpx_monitor_limits {
    int util_high;        /* percent: with mem_high, "saturated" */
    int mem_high;         /* percent of memory in use */
    int temp_limit_c;     /* 0: the GPU's slowdown threshold - 5 C (85 C when unknown) */
    int64_t growth_bytes; /* memory growth over growth_window samples that alerts */
    int growth_window;    /* samples (>= 2) */
} lpx_monitor_limits;

enum {
    LPX_ALERT_SATURATED = 1,  /* utilisation and memory both high */
    LPX_ALERT_TEMP = 2,       /* temperature at or over the limit */
    LPX_ALERT_THROTTLE = 4,   /* thermal, power-cap or hardware throttling active */
    LPX_ALERT_MEM_GROWTH = 8, /* memory in use rose at every sample of the window */
};

void lpx_monitor_limits_default(lpx_monitor_limits *l);

/* Alerts raised by the newest of n samples (oldest first). text gets one clause per
 * alert, "; "-separated. */
unsigned lpx_monitor_alerts(const lpx_monitor_limits *l, const lpx_gpu_facts *f,
                            const lpx_gpu_sample *hist, size_t n, char *text, size_t cap);

typedef struct lpx_monitor_opts {
    double interval_s;
    long count; /* samples per GPU; 0: until *stop */
    bool json;  /* one JSON object a line instead of the table */
    lpx_monitor_limits limits;
    const char *metrics_url;     /* an lpx server's /metrics (lpx_scrape_metrics_url); NULL */
    FILE *log;                   /* alerts are appended here too; may be NULL */
    volatile sig_atomic_t *stop; /* set by a signal handler to end the loop; may be NULL */
} lpx_monitor_opts;

/* Samples until count or *stop. LPX_ERR_DEVICE when there is no GPU and no server to
 * watch; the server's error when its first scrape fails (a later failure is an alert). */
lpx_status lpx_monitor_run(const lpx_monitor_opts *o, FILE *out);

#endif
