#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "doctor/doctor.h"

#include "base/checked.h"
#include "base/error.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void read_env(const char *name, bool *set, char *buf, size_t cap) {
    const char *v = getenv(name);
    *set = v != NULL;
    snprintf(buf, cap, "%s", v ? v : "");
}

static void read_modules(lpx_host_facts *h) {
    FILE *f = fopen("/proc/modules", "r");
    if (!f) return;
    h->modules_readable = true;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, " \n")] = '\0';
        if (!strcmp(line, "nvidia")) h->nvidia_module = true;
        if (!strcmp(line, "nvidia_uvm")) h->nvidia_uvm_module = true;
        if (!strcmp(line, "nouveau")) h->nouveau_module = true;
    }
    fclose(f);
}

static void read_devices(lpx_host_facts *h) {
    h->dev_nvidiactl = exists("/dev/nvidiactl");
    h->dev_nvidia_uvm = exists("/dev/nvidia-uvm");
    DIR *d = opendir("/dev");
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        const char *p = e->d_name;
        if (strncmp(p, "nvidia", 6) || !p[6]) continue;
        p += 6;
        while (*p >= '0' && *p <= '9')
            p++;
        if (!*p) h->dev_nvidia_n++;
    }
    closedir(d);
}

static void read_container(lpx_host_facts *h) {
    const char *hint = NULL;
    if (exists("/.dockerenv"))
        hint = "docker: /.dockerenv";
    else if (exists("/run/.containerenv"))
        hint = "podman: /run/.containerenv";
    else if (getenv("KUBERNETES_SERVICE_HOST"))
        hint = "kubernetes: KUBERNETES_SERVICE_HOST";
    char line[512];
    FILE *f = hint ? NULL : fopen("/proc/1/cgroup", "r");
    static const char *const names[] = {"docker", "kubepods", "containerd", "libpod", "lxc"};
    while (f && !hint && fgets(line, sizeof line, f))
        for (size_t i = 0; i < sizeof names / sizeof names[0] && !hint; i++)
            if (strstr(line, names[i])) {
                snprintf(h->container_hint, sizeof h->container_hint, "cgroup of PID 1: %s",
                         names[i]);
                h->in_container = true;
                break;
            }
    if (f) fclose(f);
    if (hint) {
        h->in_container = true;
        snprintf(h->container_hint, sizeof h->container_hint, "%s", hint);
    }
}

static void read_cpu(lpx_host_facts *h) {
    cpu_set_t set;
    h->cpu_cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                               : (int)sysconf(_SC_NPROCESSORS_ONLN);
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %lld kB", &kb) == 1) h->ram_total = kb * 1024;
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) h->ram_available = kb * 1024;
    }
    if (f) fclose(f);
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    snprintf(h->cpu_features, sizeof h->cpu_features, "%s%s%s",
             __builtin_cpu_supports("avx2") ? "avx2 " : "",
             __builtin_cpu_supports("fma") ? "fma " : "",
             __builtin_cpu_supports("avx512f") ? "avx512f " : "");
    size_t n = strlen(h->cpu_features);
    if (n && h->cpu_features[n - 1] == ' ') h->cpu_features[n - 1] = '\0';
#endif
}

void lpx_host_facts_read(lpx_host_facts *h) {
    memset(h, 0, sizeof *h);
    read_modules(h);
    read_devices(h);
    read_container(h);
    read_env("NVIDIA_VISIBLE_DEVICES", &h->nvidia_visible_set, h->nvidia_visible,
             sizeof h->nvidia_visible);
    read_env("CUDA_VISIBLE_DEVICES", &h->cuda_visible_set, h->cuda_visible, sizeof h->cuda_visible);
    read_env("NVIDIA_DRIVER_CAPABILITIES", &h->nvidia_caps_set, h->nvidia_caps,
             sizeof h->nvidia_caps);
    read_cpu(h);
}

lpx_status lpx_model_need_compute(const lpx_plan_model *m, int64_t max_model_len,
                                  int64_t max_num_seqs, int64_t reserve, lpx_model_need *out) {
    memset(out, 0, sizeof *out);
    out->weights = m->weight_bytes;
    out->weights_bf16 = m->weight_bytes_bf16;
    out->reserve = reserve;
    out->max_model_len = max_model_len;
    out->max_num_seqs = max_num_seqs;
    int64_t toks;
    if (!lpx_mul_i64(max_model_len, max_num_seqs, &toks) ||
        !lpx_mul_i64(toks, m->kv_bytes_per_token, &out->kv) ||
        !lpx_add_i64(out->kv, out->weights, &out->total) ||
        !lpx_add_i64(out->total, reserve, &out->total))
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "--max-model-len %lld x --max-num-seqs %lld: KV size overflows",
                          (long long)max_model_len, (long long)max_num_seqs);
    return LPX_OK;
}

/* sysfs's NUMA node of a PCI device: NVML's bus id "00000000:17:00.0" is
 * /sys/bus/pci/devices/0000:17:00.0 (a 4-digit domain, lower case); -1 there: no NUMA. */
static int sysfs_numa_node(const char *bus_id) {
    size_t n = strlen(bus_id);
    if (n < 12) return LPX_TEL_NA;
    char path[96], dev[13];
    for (size_t i = 0; i < 12; i++)
        dev[i] = (char)tolower((unsigned char)bus_id[n - 12 + i]);
    dev[12] = '\0';
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", dev);
    FILE *f = fopen(path, "r");
    int node = LPX_TEL_NA;
    if (f && (fscanf(f, "%d", &node) != 1 || node < 0)) node = LPX_TEL_NA;
    if (f) fclose(f);
    return node;
}

static bool node_cpus(int node, lpx_cpu_mask *m) {
    char path[96], text[4096];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
    FILE *f = fopen(path, "r");
    bool ok = f && fgets(text, sizeof text, f) && lpx_cpulist_parse(text, m);
    if (f) fclose(f);
    return ok;
}

static void affinity_mask(lpx_cpu_mask *m) {
    memset(m, 0, sizeof *m);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) CPU_ZERO(&set);
    for (int c = 0; c < CPU_SETSIZE && c < LPX_CPU_MASK_BITS; c++)
        if (CPU_ISSET(c, &set)) m->w[c / 64] |= 1ULL << (c % 64);
}

/* The links between the GPUs, each one's NUMA node (NVML's, else sysfs's) against this
 * process's CPUs: gpu.topology and gpuN.numa. */
static void topology_checks(lpx_telemetry *t, lpx_doctor_report *r) {
    lpx_topology *tp = &r->topo;
    lpx_gpu_links links[LPX_TOPO_MAX_GPUS];
    lpx_cpu_mask aff, cpus;
    affinity_mask(&aff);
    lpx_cpulist_format(&aff, r->affinity, sizeof r->affinity);
    if (r->n_gpus == 0 && !r->no_gpu) return; /* a broken setup: gpu.count FAILs */
    tp->n_all = r->n_gpus;
    tp->n = r->n_gpus < LPX_TOPO_MAX_GPUS ? r->n_gpus : LPX_TOPO_MAX_GPUS;
    for (int i = 0; i < tp->n; i++) {
        if (lpx_telemetry_links(t, i, &links[i]) != LPX_OK)
            links[i] = (lpx_gpu_links){.numa_node = LPX_TEL_NA, .n_links = LPX_TEL_NA};
        tp->numa[i] = links[i].numa_node != LPX_TEL_NA ? links[i].numa_node
                                                       : sysfs_numa_node(links[i].bus_id);
        for (int j = 0; j < tp->n; j++)
            tp->level[i][j] = i == j ? 0 : lpx_telemetry_common_ancestor(t, i, j);
    }
    lpx_topo_count_nvlinks(links, tp->n, tp);
    lpx_check c;
    lpx_eval_topology(tp, &c);
    lpx_checks_add(&r->checks, c.id, c.level, NULL, "%s", c.found);
    for (int i = 0; i < tp->n; i++) {
        bool known = tp->numa[i] != LPX_TEL_NA && node_cpus(tp->numa[i], &cpus);
        lpx_eval_numa(i, tp->numa[i], known ? &cpus : NULL, &aff, &c);
        lpx_checks_add(&r->checks, c.id, c.level, c.fix[0] ? c.fix : NULL, "%s", c.found);
    }
}

lpx_status lpx_doctor_run(const lpx_build_facts *build, const lpx_model_need *need,
                          lpx_doctor_report *r) {
    memset(r, 0, sizeof *r);
    r->build = build ? *build : lpx_build_facts_get();
    lpx_host_facts_read(&r->host);
    if (need) r->has_need = true, r->need = *need;
    lpx_telemetry *t;
    LPX_TRY(lpx_telemetry_open(LPX_TEL_WITH_CUDA, &t));
    r->state = *lpx_telemetry_get_state(t);
    lpx_eval_host(&r->host, &r->state, &r->build, &r->checks);
    r->no_gpu = lpx_checks_no_gpu(&r->host, &r->state, &r->checks);
    int n = r->state.nvml_device_count;
    if (n > 0) {
        r->facts = calloc((size_t)n, sizeof *r->facts);
        r->samples = calloc((size_t)n, sizeof *r->samples);
        r->procs = calloc((size_t)n * LPX_DOCTOR_MAX_PROCS, sizeof *r->procs);
        r->n_procs = calloc((size_t)n, sizeof *r->n_procs);
        if (!r->facts || !r->samples || !r->procs || !r->n_procs) {
            lpx_telemetry_close(t);
            return lpx_errorf(LPX_ERR_NOMEM, "out of memory for %d GPUs", n);
        }
        r->n_gpus = n;
    }
    for (int i = 0; i < n; i++) {
        lpx_gpu_facts *f = &r->facts[i];
        lpx_gpu_sample *s = &r->samples[i];
        if (lpx_telemetry_facts(t, i, f) != LPX_OK || lpx_telemetry_sample(t, i, s) != LPX_OK) {
            char id[32];
            snprintf(id, sizeof id, "gpu%d", i);
            lpx_checks_add(&r->checks, id, LPX_CHECK_FAIL,
                           "check `nvidia-smi` and `dmesg | grep -i xid`; a lost GPU needs a "
                           "reset (sudo nvidia-smi -r) or a reboot",
                           "%s", lpx_last_error());
            continue;
        }
        lpx_gpu_process *procs = r->procs + (size_t)i * LPX_DOCTOR_MAX_PROCS;
        size_t np = 0;
        const char *perr = NULL;
        char perr_buf[256];
        if (lpx_telemetry_processes(t, i, procs, LPX_DOCTOR_MAX_PROCS, &np) != LPX_OK) {
            snprintf(perr_buf, sizeof perr_buf, "%s", lpx_last_error());
            perr = perr_buf;
        }
        if (np > LPX_DOCTOR_MAX_PROCS) np = LPX_DOCTOR_MAX_PROCS;
        r->n_procs[i] = np;
        lpx_eval_gpu(f, s, procs, np, perr, (uint32_t)getpid(), &r->build, need, &r->checks);
    }
    topology_checks(t, r);
    lpx_telemetry_close(t);
    if (need && r->n_gpus == 0) { /* lpx runs on the CPU here: does the model fit its RAM? */
        lpx_check c;
        lpx_eval_ram(&r->host, need, &c);
        lpx_checks_add(&r->checks, c.id, c.level, c.fix[0] ? c.fix : NULL, "%s", c.found);
    }
    if (r->checks.oom) return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    return LPX_OK;
}

void lpx_doctor_report_free(lpx_doctor_report *r) {
    free(r->facts);
    free(r->samples);
    free(r->procs);
    free(r->n_procs);
    lpx_checks_free(&r->checks);
    memset(r, 0, sizeof *r);
}

int lpx_doctor_exit_status(const lpx_doctor_report *r) {
    return lpx_check_exit_status(lpx_checks_worst(&r->checks), r->no_gpu);
}

void lpx_doctor_print(FILE *f, const lpx_doctor_report *r) {
    fprintf(f, "lpx doctor (lpx %s)\n\n", lpx_version());
    size_t count[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < r->checks.n; i++) {
        const lpx_check *c = &r->checks.v[i];
        count[c->level]++;
        fprintf(f, "  %-4s  %-18s %s\n", lpx_check_level_name(c->level), c->id, c->found);
        if (c->fix[0] && c->level != LPX_CHECK_OK && c->level != LPX_CHECK_SKIP)
            fprintf(f, "        %-18s fix: %s\n", "", c->fix);
    }
    if (r->topo.n > 1) {
        char m[4096];
        lpx_topo_matrix_text(&r->topo, m, sizeof m);
        fprintf(f, "\ntopology (this process's CPUs: %s):\n%s", r->affinity, m);
    }
    lpx_check_level w = lpx_checks_worst(&r->checks);
    const int rc = lpx_doctor_exit_status(r);
    fprintf(f, "\nresult: %s (%zu OK, %zu WARN, %zu FAIL, %zu SKIP), exit status %d\n",
            rc == 4 ? "no GPU: CPU backend" : lpx_check_level_name(w), count[0], count[1], count[2],
            count[3], rc);
    if (r->no_gpu)
        fprintf(f,
                "No NVIDIA GPU here (no device, driver or NVML): lpx runs on its CPU backend "
                "(%d cores); the GPU checks are skipped.\n",
                r->host.cpu_cores);
    else if (r->n_gpus == 0)
        fprintf(f, "No NVIDIA GPU is usable here: lpx runs on its CPU backend (%d cores).\n",
                r->host.cpu_cores);
}

/* JSON numbers for readings: null when not available. */
static void add_num(cJSON *o, const char *k, int64_t v) {
    if (v == LPX_TEL_NA)
        cJSON_AddNullToObject(o, k);
    else
        cJSON_AddNumberToObject(o, k, (double)v);
}

static void add_num_item(cJSON *a, int64_t v) {
    cJSON_AddItemToArray(a, v == LPX_TEL_NA ? cJSON_CreateNull() : cJSON_CreateNumber((double)v));
}

static cJSON *gpu_json(const lpx_gpu_facts *f, const lpx_gpu_sample *s,
                       const lpx_gpu_process *procs, size_t n_procs) {
    cJSON *g = cJSON_CreateObject();
    add_num(g, "index", f->index);
    cJSON_AddStringToObject(g, "name", f->name);
    cJSON_AddStringToObject(g, "uuid", f->uuid);
    if (f->cc_major == LPX_TEL_NA)
        cJSON_AddNullToObject(g, "compute_capability");
    else {
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", f->cc_major, f->cc_minor);
        cJSON_AddStringToObject(g, "compute_capability", cc);
    }
    add_num(g, "memory_total_bytes", s->mem_total);
    add_num(g, "memory_used_bytes", s->mem_used);
    add_num(g, "memory_free_bytes", s->mem_free);
    add_num(g, "memory_bus_width_bits", f->mem_bus_width);
    add_num(g, "utilization_gpu_pct", s->util_gpu);
    add_num(g, "utilization_memory_pct", s->util_mem);
    add_num(g, "temperature_c", s->temp_c);
    add_num(g, "temperature_slowdown_c", f->temp_slowdown_c);
    add_num(g, "power_mw", s->power_mw);
    add_num(g, "power_limit_mw", f->power_limit_mw);
    add_num(g, "power_default_limit_mw", f->power_default_limit_mw);
    add_num(g, "sm_clock_mhz", s->sm_clock_mhz);
    add_num(g, "sm_clock_max_mhz", f->sm_clock_max_mhz);
    add_num(g, "mem_clock_mhz", s->mem_clock_mhz);
    add_num(g, "mem_clock_max_mhz", f->mem_clock_max_mhz);
    add_num(g, "throttle_reasons", s->throttle);
    add_num(g, "pcie_gen", s->pcie_gen);
    add_num(g, "pcie_gen_max", f->pcie_gen_max);
    add_num(g, "pcie_width", s->pcie_width);
    add_num(g, "pcie_width_max", f->pcie_width_max);
    add_num(g, "ecc", f->ecc_current);
    add_num(g, "ecc_pending", f->ecc_pending);
    add_num(g, "ecc_uncorrected_errors", f->ecc_uncorrected);
    add_num(g, "persistence", f->persistence);
    add_num(g, "mig", f->mig_current);
    char unread[1100];
    snprintf(unread, sizeof unread, "%s%s%s", f->unread, f->unread[0] && s->unread[0] ? "; " : "",
             s->unread);
    cJSON_AddStringToObject(g, "unread", unread);
    cJSON *pa = cJSON_AddArrayToObject(g, "processes");
    for (size_t i = 0; i < n_procs; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "pid", procs[i].pid);
        cJSON_AddStringToObject(p, "name", procs[i].name);
        add_num(p, "memory_used_bytes", procs[i].mem_used);
        cJSON_AddItemToArray(pa, p);
    }
    return g;
}

char *lpx_doctor_json(const lpx_doctor_report *r) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    lpx_check_level w = lpx_checks_worst(&r->checks);
    cJSON_AddStringToObject(root, "lpx_version", lpx_version());
    cJSON_AddStringToObject(root, "result", lpx_check_level_name(w));
    cJSON_AddBoolToObject(root, "no_gpu", r->no_gpu);
    cJSON_AddNumberToObject(root, "exit_status", lpx_doctor_exit_status(r));
    cJSON *checks = cJSON_AddArrayToObject(root, "checks");
    for (size_t i = 0; i < r->checks.n; i++) {
        const lpx_check *c = &r->checks.v[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", c->id);
        cJSON_AddStringToObject(o, "level", lpx_check_level_name(c->level));
        cJSON_AddStringToObject(o, "found", c->found);
        cJSON_AddStringToObject(o, "fix", c->fix);
        cJSON_AddItemToArray(checks, o);
    }
    cJSON *b = cJSON_AddObjectToObject(root, "build");
    cJSON_AddBoolToObject(b, "cuda_backend", r->build.have_cuda);
    cJSON_AddStringToObject(b, "cuda_archs", r->build.cuda_archs);
    cJSON_AddNumberToObject(b, "cuda_version", r->build.cuda_version);
    cJSON *d = cJSON_AddObjectToObject(root, "driver");
    cJSON_AddBoolToObject(d, "nvml", r->state.nvml_ready);
    cJSON_AddStringToObject(d, "nvml_library", r->state.nvml_library);
    cJSON_AddStringToObject(d, "nvml_error", r->state.nvml_error);
    cJSON_AddBoolToObject(d, "libcuda", r->state.cuda_loaded);
    cJSON_AddStringToObject(d, "cuda_library", r->state.cuda_library);
    cJSON_AddStringToObject(d, "cuda_error", r->state.cuda_error);
    cJSON_AddStringToObject(d, "version", r->state.driver_version);
    add_num(d, "cuda_version", r->state.driver_cuda_version);
    add_num(d, "cuda_device_count", r->state.cuda_device_count);
    cJSON *h = cJSON_AddObjectToObject(root, "host");
    cJSON_AddBoolToObject(h, "container", r->host.in_container);
    cJSON_AddStringToObject(h, "container_hint", r->host.container_hint);
    cJSON_AddNumberToObject(h, "cpu_cores", r->host.cpu_cores);
    cJSON_AddNumberToObject(h, "ram_total_bytes", (double)r->host.ram_total);
    cJSON_AddNumberToObject(h, "ram_available_bytes", (double)r->host.ram_available);
    cJSON_AddStringToObject(h, "cpu_features", r->host.cpu_features);
    cJSON *gpus = cJSON_AddArrayToObject(root, "gpus");
    for (int i = 0; i < r->n_gpus; i++)
        cJSON_AddItemToArray(gpus,
                             gpu_json(&r->facts[i], &r->samples[i],
                                      r->procs + (size_t)i * LPX_DOCTOR_MAX_PROCS, r->n_procs[i]));
    cJSON_AddStringToObject(h, "cpu_affinity", r->affinity);
    cJSON *tj = cJSON_AddObjectToObject(root, "topology");
    cJSON *mx = cJSON_AddArrayToObject(tj, "matrix"), *nv = cJSON_AddArrayToObject(tj, "nvlinks");
    cJSON *sw = cJSON_AddArrayToObject(tj, "nvswitch"),
          *nn = cJSON_AddArrayToObject(tj, "numa_node");
    for (int i = 0; i < r->topo.n; i++) {
        cJSON *row = cJSON_CreateArray(), *nrow = cJSON_CreateArray(), *srow = cJSON_CreateArray();
        char name[16];
        for (int j = 0; j < r->topo.n; j++) {
            cJSON_AddItemToArray(
                row, cJSON_CreateString(lpx_topo_link_name(&r->topo, i, j, name, sizeof name)));
            cJSON_AddItemToArray(nrow, cJSON_CreateNumber(r->topo.nvlinks[i][j]));
            cJSON_AddItemToArray(srow, cJSON_CreateBool(r->topo.nvswitch[i][j]));
        }
        cJSON_AddItemToArray(mx, row);
        cJSON_AddItemToArray(nv, nrow);
        cJSON_AddItemToArray(sw, srow);
        add_num_item(nn, r->topo.numa[i]);
    }
    if (r->has_need) {
        cJSON *n = cJSON_AddObjectToObject(root, "model_need");
        cJSON_AddNumberToObject(n, "total_bytes", (double)r->need.total);
        cJSON_AddNumberToObject(n, "weight_bytes", (double)r->need.weights);
        cJSON_AddNumberToObject(n, "weight_bytes_bf16", (double)r->need.weights_bf16);
        cJSON_AddNumberToObject(n, "kv_bytes", (double)r->need.kv);
        cJSON_AddNumberToObject(n, "reserve_bytes", (double)r->need.reserve);
        cJSON_AddNumberToObject(n, "max_model_len", (double)r->need.max_model_len);
        cJSON_AddNumberToObject(n, "max_num_seqs", (double)r->need.max_num_seqs);
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}
