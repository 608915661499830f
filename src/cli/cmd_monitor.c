/* lpx monitor: live GPU table and alerts until Ctrl-C or --count samples. */
#include "cli/commands.h"
#include "doctor/monitor.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) {
    stop_requested = 1;
}

static void usage(FILE *f) {
    lpx_monitor_limits l;
    lpx_monitor_limits_default(&l);
    fprintf(f,
            "usage: lpx monitor [--interval S] [--count N] [--json] [--log FILE] [limits]\n\n"
            "A live table of every NVIDIA GPU (utilisation, memory, temperature, power,\n"
            "clocks, PCIe throughput, throttle reasons), one row per GPU per interval, and\n"
            "alerts when a rule starts or stops holding.\n\n"
            "  --interval S        seconds between samples (default 1)\n"
            "  --count N           stop after N samples (default: until Ctrl-C)\n"
            "  --json              one JSON object per GPU per sample instead of the table\n"
            "  --log FILE          append alerts to FILE too\n"
            "  --url URL           a running lpx server's metrics (not available yet: it comes\n"
            "                      with the server)\n"
            "limits:\n"
            "  --util-high P       utilisation %% that, with --mem-high, is 'saturated' (%d)\n"
            "  --mem-high P        memory-in-use %% for that rule (%d)\n"
            "  --temp-limit C      temperature alert (default: the GPU's slowdown - 5 C)\n"
            "  --growth-mib M      memory growth that alerts when it rose at every sample (%lld)\n"
            "  --growth-window N   samples for that rule (%d)\n",
            l.util_high, l.mem_high, (long long)(l.growth_bytes >> 20), l.growth_window);
}

static bool num(const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

int cmd_monitor(int argc, char **argv) {
    lpx_monitor_opts o = {.interval_s = 1.0, .stop = &stop_requested};
    lpx_monitor_limits_default(&o.limits);
    const char *log_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v;
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            o.json = true;
        } else if (!strcmp(a, "--url") && has_val) {
            fprintf(stderr, "lpx monitor: --url is not available yet: it reads the lpx server's "
                            "/metrics, which comes with the server\n");
            return 2;
        } else if (!strcmp(a, "--log") && has_val) {
            log_path = argv[++i];
        } else if (has_val && !strcmp(a, "--interval") && num(argv[i + 1], 0.05, 86400, &v)) {
            o.interval_s = v, i++;
        } else if (has_val && !strcmp(a, "--count") && num(argv[i + 1], 1, 1e9, &v)) {
            o.count = (long)v, i++;
        } else if (has_val && !strcmp(a, "--util-high") && num(argv[i + 1], 0, 100, &v)) {
            o.limits.util_high = (int)v, i++;
        } else if (has_val && !strcmp(a, "--mem-high") && num(argv[i + 1], 0, 100, &v)) {
            o.limits.mem_high = (int)v, i++;
        } else if (has_val && !strcmp(a, "--temp-limit") && num(argv[i + 1], 1, 200, &v)) {
            o.limits.temp_limit_c = (int)v, i++;
        } else if (has_val && !strcmp(a, "--growth-mib") && num(argv[i + 1], 1, 1e7, &v)) {
            o.limits.growth_bytes = (int64_t)(v * 1024 * 1024), i++;
        } else if (has_val && !strcmp(a, "--growth-window") && num(argv[i + 1], 2, 100000, &v)) {
            o.limits.growth_window = (int)v, i++;
        } else {
            fprintf(stderr, "lpx monitor: bad, incomplete or unknown option '%s' (see --help)\n",
                    a);
            return 2;
        }
    }
    if (log_path && !(o.log = fopen(log_path, "a"))) {
        fprintf(stderr, "lpx monitor: cannot open log %s\n", log_path);
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    lpx_status s = lpx_monitor_run(&o, stdout);
    if (o.log) fclose(o.log);
    if (s != LPX_OK) {
        fprintf(stderr, "lpx monitor: %s\n", lpx_last_error());
        return 1;
    }
    return 0;
}
