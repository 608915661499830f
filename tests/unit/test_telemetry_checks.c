/* Doctor's verdicts on written-down readings: each fault a user meets (PCIe at x8,
 * throttling, a GPU without compiled kernels, an old driver, a foreign process, ...)
 * must come out with the right level and a fix that names the remedy. The healthy
 * baseline is an H200 as NVML reported it on the GPU machine (driver 580.159). */
#include "doctor/checks.h"
#include "test.h"

#include <string.h>

#define GIB (1024LL * 1024 * 1024)

static lpx_gpu_facts h200_facts(void) {
    lpx_gpu_facts f = {
        .index = 0,
        .name = "NVIDIA H200",
        .cc_major = 9,
        .cc_minor = 0,
        .mem_total = 143771LL * 1024 * 1024,
        .mem_bus_width = 6144,
        .sm_clock_max_mhz = 1980,
        .mem_clock_max_mhz = 3201,
        .pcie_gen_max = 5,
        .pcie_width_max = 16,
        .power_limit_mw = 700000,
        .power_default_limit_mw = 700000,
        .temp_slowdown_c = 90,
        .temp_shutdown_c = 95,
        .ecc_current = 1,
        .ecc_pending = 1,
        .ecc_uncorrected = 0,
        .persistence = 1,
        .mig_current = 0,
        .mig_pending = 0,
    };
    return f;
}

static lpx_gpu_sample h200_idle(void) {
    lpx_gpu_sample s = {
        .util_gpu = 0,
        .util_mem = 0,
        .mem_total = 143771LL * 1024 * 1024,
        .mem_used = 512LL * 1024 * 1024,
        .mem_free = 143259LL * 1024 * 1024,
        .temp_c = 30,
        .power_mw = 75000,
        .sm_clock_mhz = 345,
        .mem_clock_mhz = 3201,
        .pcie_gen = 5,
        .pcie_width = 16,
        .throttle = LPX_THR_GPU_IDLE,
    };
    return s;
}

static const lpx_build_facts build90 = {true, "90", 13000};

static bool has(const char *s, const char *sub) {
    return strstr(s, sub) != NULL;
}

static void test_healthy_gpu_is_all_ok(void) {
    lpx_gpu_facts f = h200_facts();
    lpx_gpu_sample s = h200_idle();
    lpx_checks c = {0};
    lpx_eval_gpu(&f, &s, NULL, 0, NULL, 1234, &build90, NULL, &c);
    CHECK(c.n == 10);
    for (size_t i = 0; i < c.n; i++) {
        if (c.v[i].level != LPX_CHECK_OK)
            fprintf(stderr, "not OK: %s %s\n", c.v[i].id, c.v[i].found);
        CHECK(c.v[i].level == LPX_CHECK_OK);
        CHECK(!strncmp(c.v[i].id, "gpu0.", 5));
    }
    CHECK(lpx_checks_worst(&c) == LPX_CHECK_OK);
    lpx_checks_free(&c);
}

static void test_pcie(void) {
    lpx_gpu_facts f = h200_facts();
    lpx_gpu_sample s = h200_idle();
    lpx_check c;
    s.pcie_width = 8;
    lpx_eval_pcie(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_WARN && has(c.found, "x8 of x16") && has(c.found, "50%"));
    CHECK(has(c.fix, "x16 slot"));
    /* idle links drop generation to save power: not a fault */
    s = h200_idle();
    s.pcie_gen = 1;
    lpx_eval_pcie(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_OK && has(c.found, "gen 1 of 5"));
    /* under load it is */
    s.pcie_gen = 3, s.util_gpu = 90;
    lpx_eval_pcie(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_WARN && has(c.found, "gen 3 of 5") && has(c.fix, "BIOS"));
    s.pcie_width = LPX_TEL_NA;
    lpx_eval_pcie(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_OK && has(c.found, "not reported"));
}

static void test_clocks_and_throttle(void) {
    lpx_gpu_facts f = h200_facts();
    lpx_gpu_sample s = h200_idle();
    lpx_check c;
    lpx_eval_clocks(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_OK && has(c.found, "SM 345 of 1980 MHz") && has(c.found, "idle"));
    s.throttle = LPX_THR_HW_THERMAL;
    lpx_eval_clocks(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_FAIL && has(c.found, "thermal (hardware)") && has(c.fix, "cooling"));
    s.throttle = LPX_THR_HW_POWER_BRAKE | LPX_THR_SW_POWER_CAP;
    lpx_eval_clocks(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_FAIL && has(c.found, "power brake") && has(c.found, "power cap"));
    s.throttle = LPX_THR_SW_THERMAL;
    lpx_eval_clocks(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_WARN && has(c.found, "thermal (software)") &&
          has(c.fix, "gpu0.temperature"));
    s.throttle = LPX_THR_SW_POWER_CAP;
    lpx_eval_clocks(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_WARN && has(c.found, "power cap") && has(c.fix, "nvidia-smi -pl"));
    s.throttle = LPX_THR_APP_CLOCKS;
    lpx_eval_clocks(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_WARN && has(c.fix, "-rac"));
    s.throttle = LPX_TEL_NA;
    lpx_eval_clocks(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_OK && has(c.found, "not reported"));
    char buf[128];
    lpx_throttle_text(LPX_THR_GPU_IDLE, buf, sizeof buf);
    CHECK(!strcmp(buf, "none"));
    lpx_throttle_text(LPX_THR_SW_POWER_CAP | LPX_THR_HW_SLOWDOWN, buf, sizeof buf);
    CHECK(!strcmp(buf, "power cap, hardware slowdown"));
}

static void test_arch(void) {
    lpx_gpu_facts f = h200_facts();
    lpx_check c;
    lpx_eval_arch(&f, &build90, &c);
    CHECK(c.level == LPX_CHECK_OK && has(c.found, "9.0"));
    /* an RTX 4090 (8.9) with kernels for sm_90 only: nothing runs */
    f.cc_major = 8, f.cc_minor = 9;
    snprintf(f.name, sizeof f.name, "NVIDIA GeForce RTX 4090");
    lpx_eval_arch(&f, &build90, &c);
    CHECK(c.level == LPX_CHECK_FAIL && has(c.fix, "CMAKE_CUDA_ARCHITECTURES=89"));
    /* sm_80 machine code runs on 8.6 and 8.9 (same major, higher minor) */
    lpx_build_facts b = {true, "80-real;90", 13000};
    lpx_eval_arch(&f, &b, &c);
    CHECK(c.level == LPX_CHECK_OK);
    /* only compute_80 PTX: the driver JIT-compiles it */
    b.cuda_archs = "80-virtual";
    lpx_eval_arch(&f, &b, &c);
    CHECK(c.level == LPX_CHECK_WARN && has(c.found, "compute_80"));
    /* sm_90a is for 9.0 alone and carries no forward PTX */
    f.cc_major = 10, f.cc_minor = 0;
    b.cuda_archs = "90a";
    lpx_eval_arch(&f, &b, &c);
    CHECK(c.level == LPX_CHECK_FAIL);
    f.cc_major = 9;
    lpx_eval_arch(&f, &b, &c);
    CHECK(c.level == LPX_CHECK_OK);
    b.cuda_archs = "native";
    lpx_eval_arch(&f, &b, &c);
    CHECK(c.level == LPX_CHECK_OK && has(c.found, "native"));
    b.have_cuda = false;
    lpx_eval_arch(&f, &b, &c);
    CHECK(c.level == LPX_CHECK_FAIL && has(c.fix, "nvcc"));
}

static void test_memory(void) {
    lpx_gpu_facts f = h200_facts();
    lpx_gpu_sample s = h200_idle();
    lpx_check c;
    lpx_model_need need = {.weights = 1192099840,
                           .kv = 40960LL * 114688,
                           .reserve = GIB,
                           .max_model_len = 40960,
                           .max_num_seqs = 1};
    need.total = need.weights + need.kv + need.reserve;
    lpx_eval_memory(&f, &s, &need, &c);
    CHECK(c.level == LPX_CHECK_OK && has(c.found, "40960 tokens x 1 sequences"));
    /* another process holds all but 5 GiB */
    s.mem_free = 5 * GIB, s.mem_used = s.mem_total - s.mem_free;
    lpx_eval_memory(&f, &s, &need, &c);
    CHECK(c.level == LPX_CHECK_FAIL && has(c.found, "only 5.0 GiB") &&
          has(c.fix, "--max-model-len"));
    /* tight: needs 6.47 GiB of 7 GiB free */
    s.mem_free = 7 * GIB;
    lpx_eval_memory(&f, &s, &need, &c);
    CHECK(c.level == LPX_CHECK_WARN);
    /* more than the card */
    need.max_num_seqs = 64, need.kv = 64 * 40960LL * 114688;
    need.total = need.weights + need.kv + need.reserve;
    s = h200_idle();
    lpx_eval_memory(&f, &s, &need, &c);
    CHECK(c.level == LPX_CHECK_FAIL && has(c.found, "more than the GPU"));
    lpx_eval_memory(&f, &s, NULL, &c);
    CHECK(c.level == LPX_CHECK_OK && has(c.found, "-m MODEL"));
    /* a quantized file (0.4 GB) whose bf16 copy (1.19 GB) the CUDA backend holds where it
     * fits the free memory: counted as that copy; with too little free for the copy but
     * enough for the file's blocks, as stored (the backend's rule) */
    need = (lpx_model_need){.weights = 400000000,
                            .weights_bf16 = 1192099840,
                            .kv = 40960LL * 114688,
                            .reserve = GIB,
                            .max_model_len = 40960,
                            .max_num_seqs = 1};
    need.total = need.weights + need.kv + need.reserve;
    s = h200_idle();
    lpx_eval_memory(&f, &s, &need, &c);
    CHECK(c.level == LPX_CHECK_OK && has(c.found, "weights 1.11 (bf16 copy)"));
    s.mem_free = need.total + 100000000, s.mem_used = s.mem_total - s.mem_free;
    lpx_eval_memory(&f, &s, &need, &c);
    CHECK(c.level != LPX_CHECK_FAIL && has(c.found, "weights 0.37 +") &&
          !has(c.found, "bf16 copy"));
}

static void test_ecc_persistence_mig_temp_power(void) {
    lpx_gpu_facts f = h200_facts();
    lpx_gpu_sample s = h200_idle();
    lpx_check c;
    lpx_eval_ecc(&f, &c);
    CHECK(c.level == LPX_CHECK_OK && has(c.found, "ECC on"));
    f.ecc_uncorrected = 3;
    lpx_eval_ecc(&f, &c);
    CHECK(c.level == LPX_CHECK_FAIL && has(c.found, "3 uncorrected") && has(c.fix, "reset"));
    f = h200_facts();
    f.rows_remap_pending = 1;
    lpx_eval_ecc(&f, &c);
    CHECK(c.level == LPX_CHECK_WARN && has(c.found, "wait for a GPU reset"));
    f.rows_remap_failed = 1;
    lpx_eval_ecc(&f, &c);
    CHECK(c.level == LPX_CHECK_FAIL && has(c.fix, "RMA"));
    f = h200_facts();
    f.ecc_pending = 0;
    lpx_eval_ecc(&f, &c);
    CHECK(c.level == LPX_CHECK_WARN && has(c.found, "switches off"));
    f.ecc_current = f.ecc_pending = LPX_TEL_NA; /* GeForce */
    lpx_eval_ecc(&f, &c);
    CHECK(c.level == LPX_CHECK_OK && has(c.found, "not supported"));

    f = h200_facts();
    f.persistence = 0;
    lpx_eval_persistence(&f, &c);
    CHECK(c.level == LPX_CHECK_WARN && has(c.fix, "nvidia-smi -pm 1"));
    f.mig_current = 1;
    lpx_eval_mig(&f, &c);
    CHECK(c.level == LPX_CHECK_WARN && has(c.found, "MIG on") && has(c.fix, "MIG-"));
    f.mig_current = 0, f.mig_pending = 1;
    lpx_eval_mig(&f, &c);
    CHECK(c.level == LPX_CHECK_WARN && has(c.found, "next reset"));

    f = h200_facts();
    s.temp_c = 92;
    lpx_eval_temperature(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_FAIL && has(c.found, "92 C") && has(c.found, "90 C"));
    s.temp_c = 82;
    lpx_eval_temperature(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_WARN);
    s.temp_c = 79;
    lpx_eval_temperature(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_OK);

    f.power_limit_mw = 400000;
    lpx_eval_power(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_WARN && has(c.found, "lowered to 400 W (default 700 W)") &&
          has(c.fix, "-pl 700"));
    f.power_limit_mw = 700000;
    lpx_eval_power(&f, &s, &c);
    CHECK(c.level == LPX_CHECK_OK && has(c.found, "75 W of a 700 W"));
}

static void test_processes(void) {
    lpx_gpu_facts f = h200_facts();
    lpx_check c;
    lpx_gpu_process p[2] = {{1234, 2 * GIB, "lpx"}, {4321, 20 * GIB, "python3"}};
    lpx_eval_processes(&f, p, 1, NULL, 1234, &c);
    CHECK(c.level == LPX_CHECK_OK); /* only lpx itself */
    lpx_eval_processes(&f, p, 2, NULL, 1234, &c);
    CHECK(c.level == LPX_CHECK_WARN && has(c.found, "1 other process(es) hold 20.0 GiB") &&
          has(c.found, "4321 python3"));
    f.compute_mode = LPX_COMPUTE_EXCLUSIVE_PROCESS;
    lpx_eval_processes(&f, p, 2, NULL, 1234, &c);
    CHECK(c.level == LPX_CHECK_FAIL && has(c.found, "Exclusive_Process") &&
          has(c.fix, "-c DEFAULT"));
    lpx_eval_processes(&f, p, 1, NULL, 1234, &c);
    CHECK(c.level == LPX_CHECK_OK);
    f.compute_mode = LPX_COMPUTE_PROHIBITED;
    lpx_eval_processes(&f, p, 1, NULL, 1234, &c);
    CHECK(c.level == LPX_CHECK_FAIL && has(c.found, "Prohibited"));
    f.compute_mode = LPX_COMPUTE_DEFAULT;
    lpx_eval_processes(&f, NULL, 0, "Insufficient Permissions", 1234, &c);
    CHECK(c.level == LPX_CHECK_OK && has(c.found, "Insufficient Permissions"));
}

static lpx_telemetry_state gpu_state(void) {
    lpx_telemetry_state st = {
        .nvml_loaded = true,
        .nvml_ready = true,
        .cuda_loaded = true,
        .cuda_init_result = 0,
        .driver_version = "580.159.04",
        .driver_cuda_version = 13000,
        .nvml_device_count = 1,
        .cuda_device_count = 1,
    };
    return st;
}

static lpx_host_facts bare_metal(void) {
    lpx_host_facts h = {.modules_readable = true,
                        .nvidia_module = true,
                        .nvidia_uvm_module = true,
                        .dev_nvidiactl = true,
                        .dev_nvidia_uvm = true,
                        .dev_nvidia_n = 1,
                        .cpu_cores = 16,
                        .ram_total = 128 * GIB,
                        .ram_available = 120 * GIB};
    return h;
}

static const lpx_check *find(const lpx_checks *c, const char *id) {
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->v[i].id, id)) return &c->v[i];
    return NULL;
}

static void test_host(void) {
    lpx_host_facts h = bare_metal();
    lpx_telemetry_state st = gpu_state();
    lpx_checks c = {0};
    lpx_eval_host(&h, &st, &build90, &c);
    CHECK(lpx_checks_worst(&c) == LPX_CHECK_OK);
    CHECK(find(&c, "driver.version") && has(find(&c, "driver.version")->found, "CUDA 13.0"));
    lpx_checks_free(&c);

    /* driver for CUDA 12.4 under a CUDA 13.0 build: the backend cannot start */
    st.driver_cuda_version = 12040;
    lpx_eval_host(&h, &st, &build90, &c);
    const lpx_check *v = find(&c, "driver.version");
    CHECK(v && v->level == LPX_CHECK_FAIL && has(v->found, "CUDA 12.4") && has(v->fix, ">= 580"));
    lpx_checks_free(&c);
    /* same major, older minor: minor version compatibility */
    lpx_build_facts b129 = {true, "90", 12090};
    lpx_eval_host(&h, &st, &b129, &c);
    v = find(&c, "driver.version");
    CHECK(v && v->level == LPX_CHECK_WARN && has(v->found, "minor version compatibility"));
    lpx_checks_free(&c);

    /* nouveau holds the card; no NVML */
    st = gpu_state();
    h.nvidia_module = false, h.nouveau_module = true;
    st.nvml_ready = false, st.nvml_device_count = 0;
    snprintf(st.nvml_error, sizeof st.nvml_error, "nvmlInit_v2: Driver Not Loaded");
    lpx_eval_host(&h, &st, &build90, &c);
    CHECK(find(&c, "driver.nouveau") && find(&c, "driver.nouveau")->level == LPX_CHECK_FAIL &&
          has(find(&c, "driver.nouveau")->fix, "blacklist nouveau"));
    CHECK(find(&c, "driver.module")->level == LPX_CHECK_FAIL);
    CHECK(find(&c, "gpu.count")->level == LPX_CHECK_FAIL &&
          has(find(&c, "gpu.count")->found, "no NVIDIA GPU found"));
    CHECK(lpx_check_exit_status(lpx_checks_worst(&c), false) == 1);
    lpx_checks_free(&c);

    /* the classic after a driver update without reboot */
    h = bare_metal();
    st = gpu_state();
    st.nvml_ready = false, st.nvml_device_count = 0, st.nvml_init_result = 18;
    snprintf(st.nvml_error, sizeof st.nvml_error, "nvmlInit_v2: Driver/library version mismatch");
    lpx_eval_host(&h, &st, &build90, &c);
    CHECK(find(&c, "driver.nvml")->level == LPX_CHECK_FAIL &&
          has(find(&c, "driver.nvml")->fix, "reboot"));
    lpx_checks_free(&c);

    /* /dev/nvidia-uvm missing */
    h = bare_metal();
    st = gpu_state();
    h.dev_nvidia_uvm = false;
    lpx_eval_host(&h, &st, &build90, &c);
    CHECK(find(&c, "driver.devices")->level == LPX_CHECK_FAIL &&
          has(find(&c, "driver.devices")->fix, "nvidia-uvm"));
    lpx_checks_free(&c);

    /* CUDA_VISIBLE_DEVICES hides every GPU */
    h = bare_metal();
    h.cuda_visible_set = true;
    st.cuda_init_result = 100, st.cuda_device_count = LPX_TEL_NA;
    snprintf(st.cuda_error, sizeof st.cuda_error, "cuInit: CUDA_ERROR_NO_DEVICE");
    lpx_eval_host(&h, &st, &build90, &c);
    CHECK(find(&c, "driver.cuda")->level == LPX_CHECK_FAIL &&
          has(find(&c, "driver.cuda")->fix, "CUDA_VISIBLE_DEVICES"));
    lpx_checks_free(&c);
    /* NVSwitch system without the fabric manager */
    st.cuda_init_result = 802;
    lpx_eval_host(&h, &st, &build90, &c);
    CHECK(has(find(&c, "driver.cuda")->fix, "nvidia-fabricmanager"));
    lpx_checks_free(&c);
    /* kernel module and libcuda from different driver versions */
    st.cuda_init_result = 803;
    lpx_eval_host(&h, &st, &build90, &c);
    CHECK(has(find(&c, "driver.cuda")->found, "different driver versions"));
    lpx_checks_free(&c);

    /* a container started without the GPU */
    lpx_host_facts ch = {.in_container = true,
                         .container_hint = "docker: /.dockerenv",
                         .cpu_cores = 2,
                         .ram_total = 8 * GIB};
    lpx_telemetry_state none = {.cuda_init_result = LPX_TEL_NA,
                                .driver_cuda_version = LPX_TEL_NA,
                                .cuda_device_count = LPX_TEL_NA,
                                .nvml_error = "libnvidia-ml.so.1: cannot open shared object file"};
    lpx_eval_host(&ch, &none, &build90, &c);
    CHECK(find(&c, "container")->level == LPX_CHECK_FAIL &&
          has(find(&c, "container")->fix, "--gpus all"));
    CHECK(find(&c, "cpu.backend")->level == LPX_CHECK_OK &&
          has(find(&c, "cpu.backend")->found, "2 core(s)"));
    CHECK(lpx_check_exit_status(lpx_checks_worst(&c), false) == 1);
    lpx_checks_free(&c);
    /* ... or with NVIDIA_VISIBLE_DEVICES=void */
    ch.nvidia_visible_set = true;
    snprintf(ch.nvidia_visible, sizeof ch.nvidia_visible, "void");
    lpx_eval_host(&ch, &none, &build90, &c);
    CHECK(has(find(&c, "container")->fix, "NVIDIA_VISIBLE_DEVICES=all"));
    lpx_checks_free(&c);
    /* a container with the GPU but without the compute capability: no libcuda */
    ch.nvidia_caps_set = true;
    snprintf(ch.nvidia_caps, sizeof ch.nvidia_caps, "utility");
    st = gpu_state();
    lpx_eval_host(&ch, &st, &build90, &c);
    CHECK(find(&c, "container")->level == LPX_CHECK_FAIL &&
          has(find(&c, "container")->fix, "compute"));
    lpx_checks_free(&c);
}

static void test_exit_status(void) {
    CHECK(lpx_check_exit_status(LPX_CHECK_OK, false) == 0);
    CHECK(lpx_check_exit_status(LPX_CHECK_WARN, false) == 3);
    CHECK(lpx_check_exit_status(LPX_CHECK_FAIL, false) == 1);
    CHECK(lpx_check_exit_status(LPX_CHECK_OK, true) == 4);
    CHECK(lpx_check_exit_status(LPX_CHECK_WARN, true) == 3);
    CHECK(lpx_check_exit_status(LPX_CHECK_FAIL, true) == 1);
}

/* A machine without a GPU (CI): nothing of the driver at all is one verdict, the GPU
 * checks SKIP and exit 4; anything of it present (a device node, NVML that loads, the
 * module) keeps the FAILs of a broken setup. */
static void test_no_gpu(void) {
    lpx_host_facts h = {.modules_readable = false,
                        .in_container = true,
                        .cpu_cores = 2,
                        .ram_total = 8 * GIB,
                        .ram_available = 6 * GIB};
    snprintf(h.container_hint, sizeof h.container_hint, "docker: /.dockerenv");
    lpx_telemetry_state st = {
        .nvml_ready = false, .nvml_init_result = LPX_TEL_NA, .cuda_init_result = LPX_TEL_NA};
    snprintf(st.nvml_error, sizeof st.nvml_error, "libnvidia-ml.so.1: cannot open shared object");
    lpx_build_facts cpu_build = {false, "", 0};
    lpx_checks c = {0};
    lpx_eval_host(&h, &st, &cpu_build, &c);
    /* cannot read /proc/modules and no NVML: cannot tell, so not OK */
    CHECK(find(&c, "driver.module")->level == LPX_CHECK_WARN);
    CHECK(lpx_checks_worst(&c) == LPX_CHECK_FAIL);
    CHECK(lpx_checks_no_gpu(&h, &st, &c));
    for (size_t i = 0; i < c.n; i++)
        CHECK(c.v[i].level == (strcmp(c.v[i].id, "cpu.backend") ? LPX_CHECK_SKIP : LPX_CHECK_OK));
    CHECK(find(&c, "gpu.count") && has(find(&c, "gpu.count")->found, "no NVIDIA GPU found"));
    CHECK(lpx_checks_worst(&c) == LPX_CHECK_OK);
    CHECK(lpx_check_exit_status(lpx_checks_worst(&c), true) == 4);
    lpx_checks_free(&c);
    /* a device node but no library: broken, not absent */
    h.dev_nvidiactl = true, h.dev_nvidia_n = 1;
    lpx_eval_host(&h, &st, &cpu_build, &c);
    CHECK(!lpx_checks_no_gpu(&h, &st, &c));
    CHECK(find(&c, "driver.nvml")->level == LPX_CHECK_FAIL);
    lpx_checks_free(&c);
    /* NVML loads but does not start: broken */
    h.dev_nvidiactl = false, h.dev_nvidia_n = 0;
    st.nvml_loaded = true;
    lpx_eval_host(&h, &st, &cpu_build, &c);
    CHECK(!lpx_checks_no_gpu(&h, &st, &c));
    lpx_checks_free(&c);
    st.nvml_loaded = false;
    /* the module is loaded (readable /proc/modules) but no NVML: broken */
    h.dev_nvidiactl = false, h.dev_nvidia_n = 0, h.modules_readable = true, h.nvidia_module = true;
    lpx_eval_host(&h, &st, &cpu_build, &c);
    CHECK(!lpx_checks_no_gpu(&h, &st, &c));
    lpx_checks_free(&c);

    /* model.ram: weights as stored + fp32 KV (twice the bf16 need) against MemAvailable */
    lpx_model_need need = {.weights = 2 * GIB, .kv = GIB, .max_model_len = 8192, .max_num_seqs = 1};
    lpx_check r;
    lpx_eval_ram(&h, &need, &r); /* 4 GiB of 6 */
    CHECK(r.level == LPX_CHECK_OK && !strcmp(r.id, "model.ram") && has(r.found, "4.00 GiB") &&
          has(r.found, "fits"));
    need.kv = (int64_t)(1.8 * GIB); /* 5.6 of 6: over 90 % */
    lpx_eval_ram(&h, &need, &r);
    CHECK(r.level == LPX_CHECK_WARN && r.fix[0]);
    need.kv = 2 * GIB; /* 6 GiB + a byte more than available */
    need.weights = 2 * GIB + 1;
    lpx_eval_ram(&h, &need, &r);
    CHECK(r.level == LPX_CHECK_FAIL && has(r.found, "does not fit") &&
          has(r.fix, "--max-model-len"));
}

int main(void) {
    test_healthy_gpu_is_all_ok();
    test_pcie();
    test_clocks_and_throttle();
    test_arch();
    test_memory();
    test_ecc_persistence_mig_temp_power();
    test_processes();
    test_host();
    test_exit_status();
    test_no_gpu();
    TEST_DONE();
}
