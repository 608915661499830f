/* lpx monitor --url's reading of /metrics: against the server's own exposition
 * (lpx_metrics_render, so a renamed series fails here), hand-written texts with awkward
 * labels, and expositions that are not an lpx server's. bench serve's scrape of the
 * lpx:gpu_* gauges goes through the same line parser and is checked here too. */
#include "bench/bench_client.h"
#include "doctor/server_scrape.h"
#include "server/metrics.h"
#include "telemetry/prom_text.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_server_exposition(void) {
    lpx_metrics m;
    lpx_metrics_init(&m);
    lpx_engine_stats st = {.n_running = 3,
                           .n_waiting = 2,
                           .prompt_tokens = 1234,
                           .generated_tokens = 98765,
                           .kv_blocks_total = 400,
                           .kv_blocks_used = 100,
                           .tok_s = 55.5};
    lpx_gpu_sample gpu = {.util_gpu = 97, .mem_used = 1 << 30, .mem_total = 2LL << 30};
    char *text = lpx_metrics_render(&m, &st, 1, "smollm2", &gpu, 1);
    CHECK(text != NULL);
    lpx_scrape s;
    CHECK(lpx_scrape_parse(text, &s) == LPX_OK);
    CHECK(s.generation_tokens == 98765 && s.prompt_tokens == 1234);
    CHECK(s.running == 3 && s.waiting == 2);
    CHECK(s.kv_usage == 0.25 && s.kv_blocks_used == 100 && s.kv_blocks_total == 400);

    /* bench serve keeps every lpx:gpu_* series, labels included, and nothing else. */
    bench_run run = {0};
    CHECK(bench_parse_metrics(text, 2.5, &run) == LPX_OK);
    bool util = false, other = false;
    for (size_t i = 0; i < run.n_samples; i++) {
        const bench_sample *g = &run.samples[i];
        CHECK(g->t == 2.5 && !strncmp(g->name, "lpx:gpu_", 8) && !strchr(g->name, ' '));
        if (!strcmp(g->name, "lpx:gpu_utilization_perc{gpu=\"0\",model_name=\"smollm2\"}"))
            util = g->value == 97;
        else if (!strncmp(g->name, "lpx:gpu_memory_used_bytes{", 26))
            other = g->value == (double)(1 << 30);
    }
    CHECK(util && other);
    free(run.samples);
    free(text);
    lpx_metrics_destroy(&m);
}

static void test_hand_written(void) {
    lpx_scrape s;
    /* Labels holding '}' and escaped quotes, a timestamp, comments, blank lines, no final
     * newline, and a name that only starts like a wanted one. */
    const char *text = "# HELP lpx:generation_tokens_total Generated tokens.\n"
                       "# TYPE lpx:generation_tokens_total counter\n"
                       "lpx:generation_tokens_total{model_name=\"a}\\\"b\"} 10 1700000000\n"
                       "lpx:generation_tokens_total_extra 500\n"
                       "\n"
                       "lpx:prompt_tokens_total 7\n"
                       "lpx:num_requests_running{model_name=\"x\"} 1\n"
                       "lpx:num_requests_waiting{model_name=\"x\"} 0\n"
                       "lpx:kv_cache_usage_perc{model_name=\"x\"} 1e-1";
    CHECK(lpx_scrape_parse(text, &s) == LPX_OK);
    CHECK(s.generation_tokens == 10 && s.prompt_tokens == 7 && s.running == 1);
    CHECK(s.waiting == 0 && fabs(s.kv_usage - 0.1) < 1e-12);
    CHECK(s.kv_blocks_used == -1 && s.kv_blocks_total == -1); /* optional, absent */

    /* vLLM's names: a Prometheus exposition, but not an lpx server. */
    CHECK(lpx_scrape_parse("vllm:num_requests_running{model_name=\"m\"} 1\n"
                           "vllm:generation_tokens_total{model_name=\"m\"} 5\n",
                           &s) == LPX_ERR_FORMAT);
    CHECK(strstr(lpx_last_error(), "no lpx:generation_tokens_total series") &&
          strstr(lpx_last_error(), "not an lpx server"));
    CHECK(lpx_scrape_parse("<html>Not Found</html>", &s) == LPX_ERR_FORMAT);
    CHECK(lpx_scrape_parse("", &s) == LPX_ERR_FORMAT);
    /* A wanted series without a number. */
    CHECK(lpx_scrape_parse("lpx:num_requests_running{a=\"b\"}\n", &s) == LPX_ERR_FORMAT);
    CHECK(strstr(lpx_last_error(), "lpx:num_requests_running has no number"));
    /* The line parser: a series with labels, one without, a comment, no number. */
    const char *line = "lpx:gpu_power_watts{gpu=\"1\",m=\"a}b\"} 250.5 1700000000\n";
    lpx_prom_sample ps;
    CHECK(lpx_prom_line(line, strchr(line, '\n'), &ps));
    CHECK(ps.name_len == 19 && ps.series_len == 36 && ps.has_value && ps.value == 250.5);
    line = "lpx:up 1";
    CHECK(lpx_prom_line(line, line + 8, &ps) && ps.name_len == 6 && ps.series_len == 6);
    CHECK(ps.has_value && ps.value == 1);
    line = "# TYPE lpx:up gauge\n";
    CHECK(!lpx_prom_line(line, strchr(line, '\n'), &ps));
    line = "lpx:up\n7\n";
    CHECK(lpx_prom_line(line, line + 6, &ps) && !ps.has_value);
    /* Unterminated labels: not a sample, so the series is missing. */
    CHECK(lpx_scrape_parse("lpx:generation_tokens_total{a=\"} 3\n", &s) == LPX_ERR_FORMAT);
}

static void test_url(void) {
    char u[64];
    CHECK(lpx_scrape_metrics_url("http://127.0.0.1:8000", u, sizeof u) == LPX_OK);
    CHECK(!strcmp(u, "http://127.0.0.1:8000/metrics"));
    CHECK(lpx_scrape_metrics_url("http://h:1//", u, sizeof u) == LPX_OK);
    CHECK(!strcmp(u, "http://h:1/metrics"));
    CHECK(lpx_scrape_metrics_url("https://h/lpx/metrics", u, sizeof u) == LPX_OK);
    CHECK(!strcmp(u, "https://h/lpx/metrics"));
    CHECK(lpx_scrape_metrics_url("127.0.0.1:8000", u, sizeof u) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_scrape_metrics_url("http://a-very-long-host-name.example:8000/x/y/z/w", u, 40) ==
          LPX_ERR_INVALID_ARG);
}

static void test_rates(void) {
    lpx_scrape a = {.t = 10.0, .generation_tokens = 100, .prompt_tokens = 50};
    lpx_scrape b = {.t = 12.5, .generation_tokens = 350, .prompt_tokens = 60};
    double gen, prompt;
    CHECK(lpx_scrape_rates(&a, &b, &gen, &prompt));
    CHECK(gen == 100.0 && prompt == 4.0); /* 250 tokens / 2.5 s, 10 / 2.5 */
    b.generation_tokens = 20;             /* the server restarted: counters went back */
    CHECK(!lpx_scrape_rates(&a, &b, &gen, &prompt));
    b = a; /* no time passed */
    CHECK(!lpx_scrape_rates(&a, &b, &gen, &prompt));
}

int main(void) {
    test_server_exposition();
    test_hand_written();
    test_url();
    test_rates();
    TEST_DONE();
}
