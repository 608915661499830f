/* lpx bench serve statistics: numpy's linear percentile on small hand-checked lists,
 * and the whole summary of a recorded trace (tests/fixtures/bench/trace.json, written
 * by lpx bench serve --json against the Python SSE server of test_bench_serve.py). */
#include "base/readall.h"
#include "bench/bench_stats.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int near(double a, double b) {
    return fabs(a - b) <= 1e-12 + 1e-9 * fabs(b);
}

static void test_percentiles(void) {
    /* np.percentile([1, 2, 3, 4], q): h = q/100 * 3. P50: h = 1.5 -> 2.5; P90: h = 2.7
     * -> 3 + 0.7 = 3.7; P99: h = 2.97 -> 3.97; P0 = 1; P100 = 4. */
    double v[] = {1, 2, 3, 4};
    CHECK(near(bench_percentile(v, 4, 50), 2.5));
    CHECK(near(bench_percentile(v, 4, 90), 3.7));
    CHECK(near(bench_percentile(v, 4, 99), 3.97));
    CHECK(near(bench_percentile(v, 4, 0), 1));
    CHECK(near(bench_percentile(v, 4, 100), 4));
    /* One value: every percentile is it; none: 0. */
    CHECK(near(bench_percentile(v + 2, 1, 99), 3));
    CHECK(bench_percentile(v, 0, 50) == 0);
    /* bench_dist_compute sorts a copy: [10, 0, 5] -> [0, 5, 10], mean 5, P90: h = 1.8 ->
     * 5 + 0.8 * 5 = 9; P99: h = 1.98 -> 9.9. */
    double u[] = {10, 0, 5};
    bench_dist d;
    CHECK(bench_dist_compute(u, 3, &d) == LPX_OK);
    CHECK(near(d.mean, 5) && near(d.median, 5) && near(d.p90, 9) && near(d.p99, 9.9));
    CHECK(u[0] == 10 && d.min == 0 && d.max == 10 && d.n == 3);
}

static void test_trace(void) {
    char *text = NULL;
    size_t n_text;
    CHECK(lpx_read_file(LPX_SOURCE_DIR "/tests/fixtures/bench/trace.json", 1 << 20, &text,
                        &n_text) == LPX_OK);
    if (!text) return;
    cJSON *j = cJSON_Parse(text);
    cJSON *rs = cJSON_GetObjectItem(j, "requests");
    int n = cJSON_GetArraySize(rs);
    CHECK(n == 7);
    bench_req *reqs = calloc((size_t)n, sizeof *reqs);
    for (int i = 0; i < n; i++) {
        cJSON *q = cJSON_GetArrayItem(rs, i), *ct = cJSON_GetObjectItem(q, "chunk_times");
        bench_req *r = &reqs[i];
        r->ok = cJSON_IsTrue(cJSON_GetObjectItem(q, "ok"));
        r->ttft = cJSON_GetObjectItem(q, "ttft")->valuedouble;
        r->e2e = cJSON_GetObjectItem(q, "e2e")->valuedouble;
        r->input_tokens = (int64_t)cJSON_GetObjectItem(q, "input_tokens")->valuedouble;
        r->output_tokens = (int64_t)cJSON_GetObjectItem(q, "output_tokens")->valuedouble;
        r->n_chunks = cJSON_GetArraySize(ct);
        r->chunk_times = calloc((size_t)r->n_chunks + 1, sizeof *r->chunk_times);
        for (int k = 0; k < r->n_chunks; k++)
            r->chunk_times[k] = cJSON_GetArrayItem(ct, k)->valuedouble;
    }
    double duration = cJSON_GetObjectItem(j, "duration")->valuedouble;
    bench_summary s;
    CHECK(bench_summarize(reqs, (size_t)n, duration, &s) == LPX_OK);
    /* 3 of 7 succeeded (requests 1, 3, 5, 7 got HTTP 500), 6 prompt and 4 output
     * tokens each, over 0.262379 s. */
    CHECK(s.completed == 3 && s.failed == 4);
    CHECK(s.total_input == 18 && s.total_output == 12);
    CHECK(near(s.request_throughput, 3 / 0.262379));
    CHECK(near(s.output_throughput, 12 / 0.262379));
    CHECK(near(s.total_throughput, 30 / 0.262379));
    /* Expected values: numpy (np.mean, np.percentile(v, [50, 90, 99])) on the series of
     * the fixture; P90 by hand as a check of the definition, h = 0.9 * (n - 1).
     * TTFT sorted [0.004720, 0.004838, 0.004964]: mean 0.00484066667;
     *   P90: h = 1.8 -> 0.004838 + 0.8 * 0.000126 = 0.0049388; P99 0.00496148. */
    CHECK(s.ttft.n == 3);
    CHECK(near(s.ttft.mean, 0.00484066666666667));
    CHECK(near(s.ttft.median, 0.004838));
    CHECK(near(s.ttft.p90, 0.0049388));
    CHECK(near(s.ttft.p99, 0.00496148));
    /* TPOT = (e2e - ttft) / 3 per request, sorted [0.004222, 0.004323, 0.005792]
     * (to 1e-6): mean 0.00477922222, median 0.004323, P90 0.00549846667,
     * P99 0.00576294667. */
    CHECK(s.tpot.n == 3);
    CHECK(fabs(s.tpot.mean - 0.00477922222) < 1e-11);
    CHECK(fabs(s.tpot.median - 0.004323) < 1e-9);
    CHECK(fabs(s.tpot.p90 - 0.00549846667) < 1e-11);
    CHECK(fabs(s.tpot.p99 - 0.00576294667) < 1e-11);
    /* ITL: the 9 gaps between the 4 chunks of 3 requests, sorted [0.004157, 0.004158,
     * 0.004206, 0.004238, 0.004308, 0.004334, 0.004343, 0.004411, 0.008750]: mean
     * 0.00476722222, median (h = 4) 0.004308, P90: h = 7.2 -> 0.004411 + 0.2 * 0.004339
     * = 0.0052788, P99: h = 7.92 -> 0.00840288. */
    CHECK(s.itl.n == 9);
    CHECK(fabs(s.itl.mean - 0.00476722222) < 1e-11);
    CHECK(fabs(s.itl.median - 0.004308) < 1e-9);
    CHECK(fabs(s.itl.p90 - 0.0052788) < 1e-9);
    CHECK(fabs(s.itl.p99 - 0.00840288) < 1e-9);
    /* E2E sorted [0.017387, 0.017933, 0.022215]: mean 0.0191783333, P90: h = 1.8 ->
     * 0.017933 + 0.8 * 0.004282 = 0.0213586, P99 0.02212936. */
    CHECK(fabs(s.e2e.mean - 0.0191783333) < 1e-10);
    CHECK(near(s.e2e.median, 0.017933));
    CHECK(near(s.e2e.p90, 0.0213586));
    CHECK(near(s.e2e.p99, 0.02212936));
    for (int i = 0; i < n; i++)
        free(reqs[i].chunk_times);
    free(reqs);
    cJSON_Delete(j);
    free(text);
}

static void test_empty(void) {
    /* No successful request: zero statistics, not a division by zero. */
    bench_req r = {.ok = false};
    bench_summary s;
    CHECK(bench_summarize(&r, 1, 0.5, &s) == LPX_OK);
    CHECK(s.failed == 1 && s.completed == 0 && s.ttft.n == 0 && s.ttft.p99 == 0);
    CHECK(s.request_throughput == 0);
}

int main(void) {
    test_percentiles();
    test_trace();
    test_empty();
    TEST_DONE();
}
