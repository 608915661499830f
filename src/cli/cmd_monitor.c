/* lpx monitor: live GPU table (and a running lpx server's figures) and alerts until
 * Ctrl-C or --count samples. */
#include "base/http_client.h"
#include "cli/commands.h"
#include "cli/opts.h"
#include "doctor/monitor.h"
#include "doctor/server_scrape.h"

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
            "  --interval S        seconds between samples, 0.05 to 86400 (default 1)\n"
            "  --count N           stop after N samples, 1 to 1000000000\n"
            "                      (default: until Ctrl-C)\n"
            "  --url URL           the lpx server (lpx serve) to read, e.g. http://127.0.0.1:8000\n"
            "  --json              JSON instead of the table: an object per GPU per sample\n"
            "                      (per sample with no GPU); --url adds a \"server\" object\n"
            "  --log FILE          append alerts to FILE too\n"
            "limits:\n"
            "  --util-high P       utilisation %% that, with --mem-high, is 'saturated', 0 to 100\n"
            "                      (%d)\n"
            "  --mem-high P        memory-in-use %% for that rule, 0 to 100 (%d)\n"
            "  --temp-limit C      temperature alert, 1 to 200\n"
            "                      (default: the GPU's slowdown - 5 C)\n"
            "  --growth-mib M      memory growth that alerts when it rose at every sample,\n"
            "                      1 to 10000000 (%lld)\n"
            "  --growth-window N   samples for that rule, 2 to 100000 (%d)\n",
            l.util_high, l.mem_high, (long long)(l.growth_bytes >> 20), l.growth_window);
}

int cmd_monitor(int argc, char **argv) {
    lpx_monitor_opts o = {.interval_s = 1.0, .stop = &stop_requested};
    lpx_monitor_limits_default(&o.limits);
    const char *log_path = NULL, *url = NULL;
    char metrics_url[2048];
    int64_t n;
    lpx_opts a = {.cmd = "monitor", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (lpx_opts_flag(&a, "--json"))
            o.json = true;
        else if (lpx_opts_int(&a, "--count", 1, 1000000000, &n))
            o.count = (long)n;
        else if (lpx_opts_int(&a, "--util-high", 0, 100, &n))
            o.limits.util_high = (int)n;
        else if (lpx_opts_int(&a, "--mem-high", 0, 100, &n))
            o.limits.mem_high = (int)n;
        else if (lpx_opts_int(&a, "--temp-limit", 1, 200, &n))
            o.limits.temp_limit_c = (int)n;
        else if (lpx_opts_int(&a, "--growth-mib", 1, 10000000, &n))
            o.limits.growth_bytes = n * 1024 * 1024;
        else if (lpx_opts_int(&a, "--growth-window", 2, 100000, &n))
            o.limits.growth_window = (int)n;
        else if (!lpx_opts_str(&a, "--url", &url) && !lpx_opts_str(&a, "--log", &log_path) &&
                 !lpx_opts_num(&a, "--interval", 0.05, 86400, &o.interval_s))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    if (url) {
        if (lpx_scrape_metrics_url(url, metrics_url, sizeof metrics_url) != LPX_OK) {
            fprintf(stderr, "lpx monitor: %s\n", lpx_last_error());
            return 2;
        }
        o.metrics_url = metrics_url;
    }
    if (log_path && !(o.log = fopen(log_path, "a"))) {
        fprintf(stderr, "lpx monitor: cannot open log %s\n", log_path);
        return 1;
    }
    if (o.metrics_url && lpx_http_global_init() != LPX_OK) {
        fprintf(stderr, "lpx monitor: %s\n", lpx_last_error());
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    lpx_status s = lpx_monitor_run(&o, stdout);
    if (o.log) fclose(o.log);
    if (o.metrics_url) lpx_http_global_cleanup();
    if (s != LPX_OK) {
        fprintf(stderr, "lpx monitor: %s\n", lpx_last_error());
        return 1;
    }
    return 0;
}
