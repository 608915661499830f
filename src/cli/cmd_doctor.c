/* lpx doctor: diagnoses driver, CUDA, GPUs, container and memory; prints fixes.
 * Exit status: 0 all OK, 1 a FAIL, 3 WARN without FAIL, 2 usage error. */
#include "cli/commands.h"
#include "cli/opts.h"
#include "doctor/doctor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: lpx doctor [-m MODEL] [--max-model-len L] [--max-num-seqs N] [--json]\n\n"
               "Checks the NVIDIA driver, CUDA, every GPU (architecture, memory, ECC, PCIe link,\n"
               "clocks and throttling, temperature, power, persistence, MIG, other processes,\n"
               "NUMA node against this process's CPUs), the links between GPUs (NVLink/PCIe,\n"
               "a matrix like nvidia-smi topo -m), containers and the CPU fallback. Each\n"
               "check prints OK, WARN or FAIL, what was found and the fix.\n\n"
               "  -m, --model MODEL   also check that MODEL fits in each GPU's free memory\n"
               "                      (no GPU: in RAM, for the CPU backend)\n"
               "  --max-model-len L   tokens per sequence for that check, 1 to 2147483647\n"
               "                      (also -c, --ctx-size)\n"
               "                      (default: the model's)\n"
               "  --max-num-seqs N    sequences for that check, 1 to 2147483647 (default 1)\n"
               "  --json              print the report as JSON\n\n"
               "exit status: 0 all OK, 1 at least one FAIL, 3 WARN but no FAIL, 4 no GPU here\n"
               "(no device, driver or NVML: the GPU checks are SKIP) and the rest OK (what a\n"
               "CPU-only CI job expects), 2 usage error\n");
}

int cmd_doctor(int argc, char **argv) {
    const char *model = NULL;
    int64_t max_len = 0, max_seqs = 1;
    bool json = false;
    lpx_opts a = {.cmd = "doctor", .argc = argc, .argv = argv};
    while (lpx_opts_next(&a)) {
        if (lpx_opts_flag(&a, "--json"))
            json = true;
        else if (!lpx_opts_str(&a, LPX_OPT_MODEL, &model) &&
                 !lpx_opts_int(&a, LPX_OPT_CTX, 1, INT32_MAX, &max_len) &&
                 !lpx_opts_int(&a, "--max-num-seqs", 1, INT32_MAX, &max_seqs))
            lpx_opts_unknown(&a);
    }
    if (a.help || a.bad) return lpx_opts_exit(&a, usage);
    lpx_model_need need, *needp = NULL;
    if (model) {
        lpx_plan_model pm;
        if (lpx_plan_model_load(model, &pm, NULL) != LPX_OK) {
            fprintf(stderr, "lpx doctor: %s\n", lpx_last_error());
            return 1;
        }
        if (!max_len) max_len = pm.max_position_embeddings;
        lpx_plan_params pp;
        lpx_plan_params_default(&pp);
        if (lpx_model_need_compute(&pm, max_len, max_seqs, pp.reserve_bytes, &need) != LPX_OK) {
            fprintf(stderr, "lpx doctor: %s\n", lpx_last_error());
            return 2;
        }
        needp = &need;
    }
    lpx_doctor_report r;
    if (lpx_doctor_run(NULL, needp, &r) != LPX_OK) {
        fprintf(stderr, "lpx doctor: %s\n", lpx_last_error());
        lpx_doctor_report_free(&r);
        return 1;
    }
    if (json) {
        char *s = lpx_doctor_json(&r);
        if (!s) {
            fprintf(stderr, "lpx doctor: out of memory\n");
            lpx_doctor_report_free(&r);
            return 1;
        }
        printf("%s\n", s);
        lpx_free(s);
    } else {
        lpx_doctor_print(stdout, &r);
    }
    int rc = lpx_doctor_exit_status(&r);
    lpx_doctor_report_free(&r);
    return rc;
}
