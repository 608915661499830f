/* lpx monitor: live GPU table (and a running lpx server's figures) and alerts until
 * Ctrl-C or --count samples. */
#include "cli/commands.h"
#include "doctor/monitor.h"
#include "doctor/server_scrape.h"

#include <curl/curl.h>
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
            "usage: lpx monitor [--interval S] [--count N] [--url http://HOST:PORT] [--json]\n"
            "                   [--log FILE] [limits]\n\n"
            "A live table of every NVIDIA GPU (utilisation, memory, temperature, power,\n"
            "clocks, PCIe throughput, throttle reasons), one row per GPU per interval, and\n"
            "alerts when a rule starts or stops holding. With --url, a running lpx server's\n"
            "generated tokens/s, running and waiting requests and KV cache use (from its\n"
            "/metrics) stand beside them; with no GPU here, the server alone.\n\n"
            "  --interval S        seconds between samples (default 1)\n"
            "  --count N           stop after N samples (default: until Ctrl-C)\n"
            "  --url URL           the lpx server (lpx serve) to read, e.g. http://127.0.0.1:8000\n"
            "  --json              one JSON object per GPU (or per sample, with no GPU) per\n"
            "                      sample instead of the table; --url adds a \"server\" object\n"
            "  --log FILE          append alerts to FILE too\n"
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
    char metrics_url[2048];
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
            if (lpx_scrape_metrics_url(argv[++i], metrics_url, sizeof metrics_url) != LPX_OK) {
                fprintf(stderr, "lpx monitor: %s\n", lpx_last_error());
                return 2;
            }
            o.metrics_url = metrics_url;
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
    if (o.metrics_url && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "lpx monitor: curl_global_init failed\n");
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    lpx_status s = lpx_monitor_run(&o, stdout);
    if (o.log) fclose(o.log);
    if (o.metrics_url) curl_global_cleanup();
    if (s != LPX_OK) {
        fprintf(stderr, "lpx monitor: %s\n", lpx_last_error());
        return 1;
    }
    return 0;
}
