/* lpx doctor end to end (dlopen, telemetry, host facts, checks) through the fake NVML and
 * libcuda (tests/fake_nvml, built as libfake_nvml.so next to this test) for a CUDA build
 * of lpx: CUDA 13.0 with sm_90 kernels, whatever this build is. The verdicts that exist
 * only in CUDA builds (the driver too old for lpx's CUDA runtime, a GPU whose compute
 * capability lpx has no kernels for, a healthy GPU all OK) so run in every CI build;
 * tests/py/test_doctor_fake_nvml.py drives the lpx binary as it was built. */
#include "doctor/doctor.h"
#include "test.h"

#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const lpx_build_facts cuda_build = {
    .have_cuda = true, .cuda_archs = "90", .cuda_version = 13000};

static const lpx_check *find(const lpx_doctor_report *r, const char *id) {
    for (size_t i = 0; i < r->checks.n; i++)
        if (!strcmp(r->checks.v[i].id, id)) return &r->checks.v[i];
    return NULL;
}

/* Runs doctor in `state`; checks that `id` is there with `level`, `found` in its text
 * and `fix` in its fix. Returns the report's worst level. */
static lpx_check_level expect(const char *state, const lpx_model_need *need, const char *id,
                              lpx_check_level level, const char *found, const char *fix) {
    setenv("LPX_FAKE_NVML_STATE", state, 1);
    lpx_doctor_report r;
    CHECK(lpx_doctor_run(&cuda_build, need, &r) == LPX_OK);
    const lpx_check *c = find(&r, id);
    CHECK(c != NULL);
    if (c) {
        bool ok = c->level == level && strstr(c->found, found) && strstr(c->fix, fix);
        if (!ok)
            fprintf(stderr, "%s: %s %s: %s (fix: %s)\n", state, lpx_check_level_name(c->level), id,
                    c->found, c->fix);
        CHECK(ok);
    }
    lpx_check_level worst = lpx_checks_worst(&r.checks);
    lpx_doctor_report_free(&r);
    return worst;
}

int main(void) {
    char exe[PATH_MAX], lib[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(n > 0);
    exe[n > 0 ? n : 0] = '\0';
    snprintf(lib, sizeof lib, "%s/libfake_nvml.so", dirname(exe));
    CHECK(access(lib, R_OK) == 0);
    setenv("LPX_NVML_LIBRARY", lib, 1);
    setenv("LPX_CUDA_LIBRARY", lib, 1);

    /* healthy: the driver is new enough, the GPU has kernels, every GPU check is OK */
    expect("healthy", NULL, "build.cuda", LPX_CHECK_OK, "built with CUDA 13.0 for architectures 90",
           "");
    expect("healthy", NULL, "driver.version", LPX_CHECK_OK,
           "driver 580.159.04 supports CUDA 13.0; lpx was built with CUDA 13.0", "");
    expect("healthy", NULL, "gpu0.arch", LPX_CHECK_OK,
           "NVIDIA H200, compute capability 9.0; lpx has sm_90-compatible machine code", "");
    setenv("LPX_FAKE_NVML_STATE", "healthy", 1);
    lpx_doctor_report r;
    CHECK(lpx_doctor_run(&cuda_build, NULL, &r) == LPX_OK);
    size_t gpu_checks = 0;
    for (size_t i = 0; i < r.checks.n; i++)
        if (!strncmp(r.checks.v[i].id, "gpu0.", 5)) {
            gpu_checks++;
            CHECK(r.checks.v[i].level == LPX_CHECK_OK);
        }
    CHECK(gpu_checks == 11); /* gpu0.numa among them */
    lpx_doctor_report_free(&r);

    /* the driver supports CUDA 11.4, lpx needs 13.0 */
    CHECK(expect("old_driver", NULL, "driver.version", LPX_CHECK_FAIL,
                 "driver 470.256.02 supports CUDA 11.4 only, lpx was built with CUDA 13.0: the "
                 "CUDA backend cannot start",
                 "install an NVIDIA driver >= 580 (the first for CUDA 13)") == LPX_CHECK_FAIL);
    /* a Kepler GPU against sm_90 kernels */
    CHECK(expect("cc_not_compiled", NULL, "gpu0.arch", LPX_CHECK_FAIL,
                 "Tesla K80, compute capability 3.7: lpx has kernels only for 90, none of which "
                 "runs on sm_37",
                 "-DCMAKE_CUDA_ARCHITECTURES=37") == LPX_CHECK_FAIL);
    /* no GPU: the CUDA backend exists but has nothing to run on */
    CHECK(expect("nogpu", NULL, "gpu.count", LPX_CHECK_FAIL, "reports 0 GPUs", "") ==
          LPX_CHECK_FAIL);
    expect("nogpu", NULL, "cpu.backend", LPX_CHECK_OK, "(lpx will run there)", "");

    /* the faults that do not depend on the build, for completeness of the CUDA case */
    expect("pcie_x8", NULL, "gpu0.pcie", LPX_CHECK_WARN, "PCIe link x8 of x16", "x16 slot");
    expect("thermal", NULL, "gpu0.clocks", LPX_CHECK_WARN, "thermal (software)", "improve cooling");
    expect("power_cap", NULL, "gpu0.power", LPX_CHECK_WARN, "power limit lowered to 300 W",
           "nvidia-smi -i 0 -pl 700");
    expect("ecc_on", NULL, "gpu0.ecc", LPX_CHECK_FAIL, "2 uncorrected ECC error(s)", "reset it");
    expect("foreign_process", NULL, "gpu0.processes", LPX_CHECK_WARN,
           "1 other process(es) hold 19.0 GiB", "stop them");
    expect("mig_on", NULL, "gpu0.mig", LPX_CHECK_WARN, "MIG on", "CUDA_VISIBLE_DEVICES=MIG-");
    /* 2 GiB of weights + 4 GiB of KV + 1 GiB reserve against 1 GiB free */
    const int64_t gib = 1LL << 30;
    lpx_model_need need = {.total = 7 * gib,
                           .weights = 2 * gib,
                           .kv = 4 * gib,
                           .reserve = gib,
                           .max_model_len = 8192,
                           .max_num_seqs = 64};
    expect("low_memory", &need, "gpu0.memory", LPX_CHECK_FAIL, "only 1.0 GiB of 141.0 GiB are free",
           "lower --max-model-len or --max-num-seqs");
    expect("healthy", &need, "gpu0.memory", LPX_CHECK_OK, "140.0 GiB of 141.0 GiB free", "");
    TEST_DONE();
}
