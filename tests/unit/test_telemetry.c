/* The real NVML/CUDA probes on whatever machine runs the test: with no driver (CI) they
 * must report what is missing and refuse readings with an error, never crash; with a
 * GPU (the GPU machine) they must read plausible values. */
#include "telemetry/telemetry.h"
#include "test.h"

#include <string.h>

int main(void) {
    lpx_telemetry *t = NULL;
    CHECK(lpx_telemetry_open(LPX_TEL_WITH_CUDA, &t) == LPX_OK && t);
    const lpx_telemetry_state *st = lpx_telemetry_get_state(t);
    lpx_gpu_facts f;
    lpx_gpu_sample s;
    lpx_gpu_process p[8];
    size_t n = 99;
    if (!st->nvml_ready) {
        printf("no NVML here: %s\n", st->nvml_error);
        CHECK(st->nvml_device_count == 0);
        CHECK(st->nvml_error[0] != '\0');
        CHECK(lpx_telemetry_facts(t, 0, &f) == LPX_ERR_DEVICE);
        CHECK(strstr(lpx_last_error(), "NVML not available") != NULL);
        CHECK(lpx_telemetry_sample(t, 0, &s) == LPX_ERR_DEVICE);
        CHECK(lpx_telemetry_processes(t, 0, p, 8, &n) == LPX_ERR_DEVICE && n == 0);
        lpx_gpu_links l;
        CHECK(lpx_telemetry_links(t, 0, &l) == LPX_ERR_DEVICE && l.numa_node == LPX_TEL_NA &&
              l.n_links == LPX_TEL_NA && !l.bus_id[0]);
        CHECK(lpx_telemetry_common_ancestor(t, 0, 1) == LPX_TEL_NA);
        if (!st->cuda_loaded)
            CHECK(st->cuda_error[0] != '\0' && st->cuda_device_count == LPX_TEL_NA);
    } else {
        printf("NVML: driver %s, CUDA %d, %d GPU(s)\n", st->driver_version, st->driver_cuda_version,
               st->nvml_device_count);
        CHECK(st->nvml_device_count > 0);
        CHECK(lpx_telemetry_facts(t, 0, &f) == LPX_OK);
        CHECK(f.name[0] && f.mem_total > 0 && f.cc_major >= 3);
        CHECK(lpx_telemetry_sample(t, 0, &s) == LPX_OK);
        CHECK(s.mem_total == f.mem_total && s.mem_used >= 0 && s.mem_used <= s.mem_total);
        CHECK(s.t > 0);
        CHECK(lpx_telemetry_processes(t, 0, p, 8, &n) == LPX_OK ||
              lpx_telemetry_processes(t, 0, p, 8, &n) == LPX_ERR_UNSUPPORTED);
        CHECK(lpx_telemetry_facts(t, st->nvml_device_count, &f) == LPX_ERR_INVALID_ARG);
        lpx_gpu_links l; /* the GPU machine: a bus id; NVLink and NUMA as the board has them */
        CHECK(lpx_telemetry_links(t, 0, &l) == LPX_OK && strlen(l.bus_id) >= 12);
        CHECK(l.n_links == LPX_TEL_NA || (l.n_links >= 0 && l.n_links <= LPX_NVLINK_MAX));
        CHECK(lpx_telemetry_common_ancestor(t, 0, st->nvml_device_count) == LPX_TEL_NA);
    }
    lpx_telemetry_close(t);
    TEST_DONE();
}
