/* Verdicts of lpx doctor. Wording rule: `found` says what was seen in numbers, `fix`
 * says the command or setting that changes it. */
#include "doctor/checks.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static double gib(int64_t b) {
    return (double)b / GIB;
}

static void setv(lpx_check *c, const char *id, lpx_check_level level, const char *fix,
                 const char *fmt, va_list ap) {
    snprintf(c->id, sizeof c->id, "%s", id);
    c->level = level;
    snprintf(c->fix, sizeof c->fix, "%s", fix ? fix : "");
    vsnprintf(c->found, sizeof c->found, fmt, ap);
}

static void set(lpx_check *c, lpx_check_level level, const char *fix, const char *fmt, ...)
    LPX_PRINTF(4, 5);
/* Keeps c->id (set by the caller) and fills the rest. */
static void set(lpx_check *c, lpx_check_level level, const char *fix, const char *fmt, ...) {
    char id[sizeof c->id];
    memcpy(id, c->id, sizeof id);
    va_list ap;
    va_start(ap, fmt);
    setv(c, id, level, fix, fmt, ap);
    va_end(ap);
}

bool lpx_checks_add(lpx_checks *c, const char *id, lpx_check_level level, const char *fix,
                    const char *fmt, ...) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 32;
        lpx_check *v = realloc(c->v, cap * sizeof *v);
        if (!v) {
            c->oom = true;
            return false;
        }
        c->v = v;
        c->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    setv(&c->v[c->n++], id, level, fix, fmt, ap);
    va_end(ap);
    return true;
}

static void push(lpx_checks *c, const lpx_check *k) {
    lpx_checks_add(c, k->id, k->level, k->fix, "%s", k->found);
}

void lpx_checks_free(lpx_checks *c) {
    free(c->v);
    memset(c, 0, sizeof *c);
}

lpx_check_level lpx_checks_worst(const lpx_checks *c) {
    lpx_check_level w = LPX_CHECK_OK;
    for (size_t i = 0; i < c->n; i++)
        if (c->v[i].level != LPX_CHECK_SKIP && c->v[i].level > w) w = c->v[i].level;
    return w;
}

int lpx_check_exit_status(lpx_check_level worst, bool no_gpu) {
    return worst == LPX_CHECK_FAIL ? 1 : worst == LPX_CHECK_WARN ? 3 : no_gpu ? 4 : 0;
}

const char *lpx_check_level_name(lpx_check_level l) {
    return l == LPX_CHECK_SKIP   ? "SKIP"
           : l == LPX_CHECK_FAIL ? "FAIL"
           : l == LPX_CHECK_WARN ? "WARN"
                                 : "OK";
}

bool lpx_checks_no_gpu(const lpx_host_facts *h, const lpx_telemetry_state *st, lpx_checks *out) {
    if (st->nvml_loaded || st->cuda_loaded || h->dev_nvidiactl || h->dev_nvidia_n > 0 ||
        h->dev_nvidia_uvm || (h->modules_readable && (h->nvidia_module || h->nouveau_module)))
        return false;
    static const char *const ids[] = {"build.cuda",  "driver.module", "driver.devices",
                                      "driver.nvml", "driver.cuda",   "gpu.count",
                                      "container"};
    for (size_t i = 0; i < out->n; i++)
        for (size_t k = 0; k < sizeof ids / sizeof *ids; k++)
            if (!strcmp(out->v[i].id, ids[k]) && out->v[i].level != LPX_CHECK_OK)
                out->v[i].level = LPX_CHECK_SKIP;
    return true;
}

void lpx_eval_ram(const lpx_host_facts *h, const lpx_model_need *need, lpx_check *out) {
    snprintf(out->id, sizeof out->id, "model.ram");
    char what[256];
    const int64_t kv = 2 * need->kv, want = need->weights + kv; /* fp32: twice the bf16 */
    snprintf(what, sizeof what,
             "the CPU backend needs %.2f GiB (weights %.2f GiB as stored + fp32 KV %.2f GiB for "
             "%lld x %lld tokens)",
             gib(want), gib(need->weights), gib(kv), (long long)need->max_num_seqs,
             (long long)need->max_model_len);
    out->fix[0] = '\0';
    if (h->ram_available <= 0) {
        out->level = LPX_CHECK_WARN;
        snprintf(out->found, sizeof out->found, "%s; available RAM unknown", what);
        snprintf(out->fix, sizeof out->fix, "check `free -g`");
        return;
    }
    out->level = want > h->ram_available                         ? LPX_CHECK_FAIL
                 : (double)want > 0.9 * (double)h->ram_available ? LPX_CHECK_WARN
                                                                 : LPX_CHECK_OK;
    snprintf(out->found, sizeof out->found, "%s; %.2f GiB of %.2f GiB RAM available: %s", what,
             gib(h->ram_available), gib(h->ram_total),
             out->level == LPX_CHECK_OK     ? "fits"
             : out->level == LPX_CHECK_WARN ? "fits, with little to spare"
                                            : "does not fit");
    if (out->level != LPX_CHECK_OK)
        snprintf(out->fix, sizeof out->fix,
                 "a shorter --max-model-len or fewer --max-num-seqs (lpx -c N), a smaller "
                 "quantized model (lpx quantize), or free memory");
}

lpx_build_facts lpx_build_facts_get(void) {
    lpx_build_facts b = {false, "", 0};
#ifdef LPX_HAVE_CUDA
    b.have_cuda = true;
    b.cuda_archs = LPX_CUDA_ARCHS;
#endif
#ifdef LPX_CUDA_BUILD_VERSION
    b.cuda_version = LPX_CUDA_BUILD_VERSION;
#endif
    return b;
}

/* ---- host ------------------------------------------------------------------------- */

/* Oldest Linux driver branch for each CUDA major (minor version compatibility). */
static int min_driver_for_cuda_major(int major) {
    return major >= 13 ? 580 : major == 12 ? 525 : major == 11 ? 450 : 0;
}

static void eval_cuda_version(const lpx_telemetry_state *st, const lpx_build_facts *b,
                              lpx_check *c) {
    int d = st->driver_cuda_version, r = b->cuda_version;
    int dmaj = d / 1000, dmin = d % 1000 / 10, rmaj = r / 1000, rmin = r % 1000 / 10;
    char fix[512];
    if (d >= r) {
        set(c, LPX_CHECK_OK, NULL, "driver %s supports CUDA %d.%d; lpx was built with CUDA %d.%d",
            st->driver_version[0] ? st->driver_version : "(version unknown)", dmaj, dmin, rmaj,
            rmin);
    } else if (dmaj == rmaj) {
        snprintf(fix, sizeof fix,
                 "upgrade the NVIDIA driver to one for CUDA %d.%d, or rebuild lpx with a CUDA "
                 "%d.%d toolkit",
                 rmaj, rmin, dmaj, dmin);
        set(c, LPX_CHECK_WARN, fix,
            "driver %s supports CUDA %d.%d, lpx was built with CUDA %d.%d: it runs under minor "
            "version compatibility (its sm_ machine code loads; PTX newer than the driver "
            "cannot be JIT-compiled)",
            st->driver_version, dmaj, dmin, rmaj, rmin);
    } else {
        snprintf(fix, sizeof fix,
                 "install an NVIDIA driver >= %d (the first for CUDA %d), or rebuild lpx with a "
                 "CUDA %d.x toolkit",
                 min_driver_for_cuda_major(rmaj), rmaj, dmaj);
        set(c, LPX_CHECK_FAIL, fix,
            "driver %s supports CUDA %d.%d only, lpx was built with CUDA %d.%d: the CUDA "
            "backend cannot start (cudaErrorInsufficientDriver)",
            st->driver_version[0] ? st->driver_version : "(version unknown)", dmaj, dmin, rmaj,
            rmin);
    }
}

static const char *container_fix(const lpx_host_facts *h) {
    if (h->nvidia_visible_set && (!strcmp(h->nvidia_visible, "void") ||
                                  !strcmp(h->nvidia_visible, "none") || !h->nvidia_visible[0]))
        return "NVIDIA_VISIBLE_DEVICES hides every GPU: start the container with "
               "NVIDIA_VISIBLE_DEVICES=all (or GPU indices/UUIDs)";
    return "start the container with the GPU: `docker run --gpus all ...` (the host needs the "
           "NVIDIA driver and the NVIDIA Container Toolkit), `podman run --device "
           "nvidia.com/gpu=all ...` (CDI), or a Kubernetes resource limit nvidia.com/gpu";
}

static void eval_cuda_driver(const lpx_host_facts *h, const lpx_telemetry_state *st,
                             lpx_checks *out) {
    const char *id = "driver.cuda";
    const char *caps_fix =
        h->in_container ? "the container needs the driver's CUDA library: set "
                          "NVIDIA_DRIVER_CAPABILITIES=compute,utility (or all)"
                        : "install the driver's CUDA library (libcuda.so.1: Debian libcuda1, "
                          "Ubuntu libnvidia-compute-<branch>), the same version as the driver";
    if (!st->cuda_loaded) {
        lpx_checks_add(out, id, LPX_CHECK_FAIL,
                       st->nvml_ready ? caps_fix : "it comes with the driver (see driver.nvml)",
                       "%s", st->cuda_error);
        return;
    }
    int r = st->cuda_init_result;
    if (r == 34) /* CUDA_ERROR_STUB_LIBRARY */
        lpx_checks_add(out, id, LPX_CHECK_FAIL,
                       "remove the toolkit's lib64/stubs folder from LD_LIBRARY_PATH so the "
                       "driver's libcuda.so.1 is found",
                       "%s: the CUDA toolkit's stub libcuda was loaded instead of the driver's",
                       st->cuda_error);
    else if (r == 803) /* CUDA_ERROR_SYSTEM_DRIVER_MISMATCH */
        lpx_checks_add(out, id, LPX_CHECK_FAIL,
                       "reboot (or reload the nvidia modules) after a driver update, or "
                       "reinstall the driver so that kernel module and libraries match",
                       "%s: the kernel module and libcuda.so.1 are from different driver "
                       "versions",
                       st->cuda_error);
    else if (r == 802) /* CUDA_ERROR_SYSTEM_NOT_READY */
        lpx_checks_add(out, id, LPX_CHECK_FAIL,
                       "start the fabric manager (NVSwitch systems): sudo systemctl enable --now "
                       "nvidia-fabricmanager; its version must match the driver's",
                       "%s: the system is not ready for CUDA (NVSwitch fabric not initialised)",
                       st->cuda_error);
    else if (r == 804) /* CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE */
        lpx_checks_add(
            out, id, LPX_CHECK_FAIL,
            "remove the CUDA forward-compatibility libcuda (cuda-compat) from the "
            "library path: it works on data-center GPUs only",
            "%s: a forward-compatibility libcuda was loaded on a GPU it does not support",
            st->cuda_error);
    else if (r == 100 && h->cuda_visible_set) /* CUDA_ERROR_NO_DEVICE */
        lpx_checks_add(out, id, LPX_CHECK_FAIL,
                       "unset CUDA_VISIBLE_DEVICES or set it to GPU indices/UUIDs that exist "
                       "(nvidia-smi -L)",
                       "%s with CUDA_VISIBLE_DEVICES=\"%s\": it hides every GPU", st->cuda_error,
                       h->cuda_visible);
    else if (r != 0)
        lpx_checks_add(out, id, LPX_CHECK_FAIL,
                       h->in_container ? container_fix(h)
                                       : "check `nvidia-smi` and `dmesg | grep -i nvrm` for "
                                         "the driver's own error",
                       "%s", st->cuda_error);
    else if (st->cuda_device_count <= 0)
        lpx_checks_add(out, id, LPX_CHECK_FAIL,
                       h->cuda_visible_set ? "fix CUDA_VISIBLE_DEVICES (nvidia-smi -L lists GPUs)"
                                           : "check `nvidia-smi`",
                       "cuInit succeeded but CUDA sees no GPU%s%s%s",
                       h->cuda_visible_set ? " (CUDA_VISIBLE_DEVICES=\"" : "",
                       h->cuda_visible_set ? h->cuda_visible : "",
                       h->cuda_visible_set ? "\")" : "");
    else
        lpx_checks_add(out, id, LPX_CHECK_OK, NULL,
                       "%s loaded, cuInit ok, CUDA sees %d GPU(s)%s%s%s", st->cuda_library,
                       st->cuda_device_count,
                       h->cuda_visible_set ? " (CUDA_VISIBLE_DEVICES=\"" : "",
                       h->cuda_visible_set ? h->cuda_visible : "",
                       h->cuda_visible_set ? "\"; NVML numbers GPUs in PCI order, CUDA "
                                             "fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID)"
                                           : "");
}

void lpx_eval_host(const lpx_host_facts *h, const lpx_telemetry_state *st, const lpx_build_facts *b,
                   lpx_checks *out) {
    bool gpu = st->nvml_ready && st->nvml_device_count > 0;
    /* lpx build */
    if (b->have_cuda)
        lpx_checks_add(out, "build.cuda", LPX_CHECK_OK, NULL,
                       "lpx has the CUDA backend, built with CUDA %d.%d for architectures %s",
                       b->cuda_version / 1000, b->cuda_version % 1000 / 10, b->cuda_archs);
    else
        lpx_checks_add(out, "build.cuda", gpu ? LPX_CHECK_FAIL : LPX_CHECK_WARN,
                       "install the CUDA toolkit (nvcc on PATH) and rebuild: make clean && make",
                       "lpx was built without the CUDA backend (no nvcc at build time): it runs "
                       "on the CPU only");

    /* kernel modules */
    if (!h->modules_readable && gpu)
        lpx_checks_add(out, "driver.module", LPX_CHECK_OK, NULL,
                       "/proc/modules is not readable here; the driver answers through NVML");
    else if (!h->modules_readable) /* cannot tell: never OK */
        lpx_checks_add(out, "driver.module", LPX_CHECK_WARN,
                       "check on the host: lsmod | grep nvidia",
                       "cannot tell: /proc/modules is not readable here");
    else if (h->nvidia_module)
        lpx_checks_add(out, "driver.module", LPX_CHECK_OK, NULL, "nvidia kernel module loaded%s",
                       h->nvidia_uvm_module ? ", nvidia_uvm loaded" : "");
    else if (st->nvml_ready)
        lpx_checks_add(out, "driver.module", LPX_CHECK_OK, NULL,
                       "nvidia is not listed in /proc/modules (a container or VM view), but the "
                       "driver answers through NVML");
    else
        lpx_checks_add(out, "driver.module", LPX_CHECK_FAIL,
                       h->in_container ? "the NVIDIA driver must be installed and loaded on the "
                                         "host; the container then gets it through the NVIDIA "
                                         "Container Toolkit"
                                       : "install the NVIDIA driver (Debian: apt install "
                                         "nvidia-driver; or NVIDIA's CUDA repository), then "
                                         "`sudo modprobe nvidia` or reboot",
                       "the nvidia kernel module is not loaded (not in /proc/modules)");
    if (h->modules_readable && h->nouveau_module)
        lpx_checks_add(out, "driver.nouveau", LPX_CHECK_FAIL,
                       "blacklist it: printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | "
                       "sudo tee /etc/modprobe.d/blacklist-nouveau.conf && sudo update-initramfs "
                       "-u && sudo reboot",
                       "nouveau (the open-source driver) is loaded: it holds the GPU and the "
                       "NVIDIA driver cannot bind to it");

    /* device nodes */
    if (h->dev_nvidiactl && h->dev_nvidia_n > 0 && h->dev_nvidia_uvm)
        lpx_checks_add(out, "driver.devices", LPX_CHECK_OK, NULL,
                       "/dev/nvidiactl, /dev/nvidia-uvm and %d /dev/nvidiaN node(s)",
                       h->dev_nvidia_n);
    else if (h->dev_nvidiactl && h->dev_nvidia_n > 0)
        lpx_checks_add(out, "driver.devices", LPX_CHECK_FAIL,
                       h->in_container ? "pass /dev/nvidia-uvm into the container (--gpus all "
                                         "does it)"
                                       : "sudo modprobe nvidia-uvm (or sudo nvidia-modprobe -u "
                                         "-c=0)",
                       "/dev/nvidia-uvm is missing: CUDA cannot allocate memory without it");
    else
        lpx_checks_add(out, "driver.devices", LPX_CHECK_FAIL,
                       h->in_container ? "pass the GPU into the container (see the container "
                                         "check)"
                                       : "load the driver: sudo modprobe nvidia nvidia-uvm (or "
                                         "sudo nvidia-modprobe -u -c=0)",
                       "no /dev/nvidia* device nodes (nvidiactl %s, %d GPU node(s), nvidia-uvm "
                       "%s)",
                       h->dev_nvidiactl ? "present" : "missing", h->dev_nvidia_n,
                       h->dev_nvidia_uvm ? "present" : "missing");

    /* NVML */
    if (st->nvml_ready)
        lpx_checks_add(out, "driver.nvml", LPX_CHECK_OK, NULL, "%s loaded, driver %s%s%s",
                       st->nvml_library,
                       st->driver_version[0] ? st->driver_version : "(version unknown)",
                       st->missing_symbols[0] ? "; this NVML lacks: " : "", st->missing_symbols);
    else if (st->nvml_init_result == 18) /* NVML_ERROR_LIB_RM_VERSION_MISMATCH */
        lpx_checks_add(out, "driver.nvml", LPX_CHECK_FAIL,
                       "reboot: the driver was updated but the old kernel module is still loaded "
                       "(or reinstall one driver version for both)",
                       "%s: the kernel module and the driver libraries are different versions",
                       st->nvml_error);
    else if (st->nvml_init_result == 9) /* NVML_ERROR_DRIVER_NOT_LOADED */
        lpx_checks_add(out, "driver.nvml", LPX_CHECK_FAIL,
                       "load the kernel module: sudo modprobe nvidia (see driver.module)",
                       "%s: the libraries are installed but the kernel module is not loaded",
                       st->nvml_error);
    else
        lpx_checks_add(out, "driver.nvml", LPX_CHECK_FAIL,
                       h->in_container ? "the driver's libraries are mounted into a container "
                                         "started with the GPU (see the container check)"
                                       : "install the driver (libnvidia-ml.so.1 comes with it; "
                                         "Debian: libnvidia-ml1) and check `nvidia-smi`",
                       "%s", st->nvml_error);

    /* CUDA driver API (only when it was probed) */
    if (st->cuda_init_result != LPX_TEL_NA || st->cuda_error[0]) eval_cuda_driver(h, st, out);

    /* driver CUDA version vs the toolkit lpx was built with */
    if (b->have_cuda && b->cuda_version > 0 && st->driver_cuda_version > 0) {
        lpx_check c = {.id = "driver.version"};
        eval_cuda_version(st, b, &c);
        push(out, &c);
    }

    /* GPU count: the plain answer when there is none */
    if (!st->nvml_ready)
        lpx_checks_add(out, "gpu.count", LPX_CHECK_FAIL,
                       h->in_container ? "see the container check; lpx falls back to its CPU "
                                         "backend"
                                       : "install an NVIDIA GPU driver, or run on a machine with "
                                         "an NVIDIA GPU; lpx falls back to its CPU backend",
                       "no NVIDIA GPU found: the driver's NVML library is not usable: %s",
                       st->nvml_error);
    else if (st->nvml_device_count == 0)
        lpx_checks_add(out, "gpu.count", LPX_CHECK_FAIL,
                       h->in_container ? container_fix(h)
                                       : "check `nvidia-smi` and `lspci | grep -i nvidia`",
                       "no NVIDIA GPU found: the driver is loaded but reports 0 GPUs");
    else
        lpx_checks_add(out, "gpu.count", LPX_CHECK_OK, NULL, "%d NVIDIA GPU(s)",
                       st->nvml_device_count);

    /* container */
    if (h->in_container) {
        char env[400];
        snprintf(env, sizeof env, "NVIDIA_VISIBLE_DEVICES=%s, NVIDIA_DRIVER_CAPABILITIES=%s",
                 h->nvidia_visible_set ? h->nvidia_visible : "(unset)",
                 h->nvidia_caps_set ? h->nvidia_caps : "(unset)");
        bool caps_ok = !h->nvidia_caps_set || strstr(h->nvidia_caps, "all") ||
                       strstr(h->nvidia_caps, "compute");
        if (!gpu)
            lpx_checks_add(out, "container", LPX_CHECK_FAIL, container_fix(h),
                           "in a container (%s) that sees no GPU; %s", h->container_hint, env);
        else if (!caps_ok)
            lpx_checks_add(out, "container", LPX_CHECK_FAIL,
                           "set NVIDIA_DRIVER_CAPABILITIES=compute,utility (or all)",
                           "in a container (%s); %s: without 'compute' libcuda is not mounted",
                           h->container_hint, env);
        else
            lpx_checks_add(out, "container", LPX_CHECK_OK, NULL, "in a container (%s); %s",
                           h->container_hint, env);
    }

    /* the fallback */
    lpx_checks_add(out, "cpu.backend", LPX_CHECK_OK, NULL,
                   "CPU backend available%s: %d core(s), %.1f GiB RAM (%.1f GiB available)%s%s",
                   gpu ? "" : " (lpx will run there)", h->cpu_cores, gib(h->ram_total),
                   gib(h->ram_available), h->cpu_features[0] ? ", " : "", h->cpu_features);
}

/* ---- per GPU ------------------------------------------------------------------------ */

/* Does a CMAKE_CUDA_ARCHITECTURES list run on compute capability cc (e.g. 89)?
 * Returns 2: machine code for it, 1: only PTX the driver can JIT-compile, 0: nothing,
 * -1: the list cannot be judged ("native", "all"). */
static int arch_support(const char *archs, int cc, char *ptx_arch, size_t ptx_cap) {
    int best = 0;
    const char *p = archs;
    while (*p) {
        size_t len = strcspn(p, ";, ");
        char tok[32];
        if (len && len < sizeof tok) {
            memcpy(tok, p, len);
            tok[len] = '\0';
            char *end;
            long v = strtol(tok, &end, 10);
            if (end == tok) return -1;   /* native, all, all-major */
            bool specific = *end == 'a'; /* sm_90a: this exact GPU only, no PTX forward */
            if (*end == 'a' || *end == 'f') end++;
            bool sass = strcmp(end, "-virtual") != 0, ptx = strcmp(end, "-real") != 0;
            int maj = (int)v / 10, min = (int)v % 10;
            if (sass && maj == cc / 10 && (specific ? min == cc % 10 : min <= cc % 10)) best = 2;
            if (ptx && !specific && v <= cc && best < 1) {
                best = 1;
                snprintf(ptx_arch, ptx_cap, "compute_%ld", v);
            }
        }
        p += len;
        while (*p == ';' || *p == ',' || *p == ' ')
            p++;
    }
    return best;
}

void lpx_eval_arch(const lpx_gpu_facts *f, const lpx_build_facts *b, lpx_check *c) {
    snprintf(c->id, sizeof c->id, "gpu%d.arch", f->index);
    if (f->cc_major == LPX_TEL_NA) {
        set(c, LPX_CHECK_WARN, "update the driver", "%s: compute capability unknown", f->name);
        return;
    }
    int cc = f->cc_major * 10 + f->cc_minor;
    if (!b->have_cuda) {
        set(c, LPX_CHECK_FAIL,
            "install the CUDA toolkit (nvcc) and rebuild lpx: make clean && make",
            "%s, compute capability %d.%d: lpx has no CUDA backend to run on it", f->name,
            f->cc_major, f->cc_minor);
        return;
    }
    char ptx[32] = "", fix[256];
    snprintf(fix, sizeof fix,
             "rebuild lpx for it: make clean && make CMAKE_FLAGS=\"-DCMAKE_CUDA_ARCHITECTURES=%d\"",
             cc);
    switch (arch_support(b->cuda_archs, cc, ptx, sizeof ptx)) {
    case 2:
        set(c, LPX_CHECK_OK, NULL,
            "%s, compute capability %d.%d; lpx has sm_%d-compatible "
            "machine code (built for %s)",
            f->name, f->cc_major, f->cc_minor, cc, b->cuda_archs);
        break;
    case 1:
        set(c, LPX_CHECK_WARN, fix,
            "%s, compute capability %d.%d: no machine code for sm_%d in lpx (built for %s); the "
            "driver JIT-compiles %s at first start, slower to start and not tuned for it",
            f->name, f->cc_major, f->cc_minor, cc, b->cuda_archs, ptx);
        break;
    case 0:
        set(c, LPX_CHECK_FAIL, fix,
            "%s, compute capability %d.%d: lpx has kernels only for %s, none of which runs on "
            "sm_%d",
            f->name, f->cc_major, f->cc_minor, b->cuda_archs, cc);
        break;
    default:
        set(c, LPX_CHECK_OK, NULL, "%s, compute capability %d.%d; lpx built for '%s'", f->name,
            f->cc_major, f->cc_minor, b->cuda_archs);
    }
}

void lpx_eval_memory(const lpx_gpu_facts *f, const lpx_gpu_sample *s, const lpx_model_need *need,
                     lpx_check *c) {
    snprintf(c->id, sizeof c->id, "gpu%d.memory", f->index);
    if (s->mem_total == LPX_TEL_NA) {
        set(c, LPX_CHECK_WARN, NULL, "memory size unknown (%s)", s->unread);
        return;
    }
    double tot = gib(s->mem_total), fr = gib(s->mem_free), used = gib(s->mem_used);
    if (!need || need->total < 0) {
        set(c, LPX_CHECK_OK, NULL,
            "%.1f GiB total, %.1f GiB free, %.1f GiB used (give -m MODEL to check a model's "
            "needs)",
            tot, fr, used);
        return;
    }
    /* the CUDA backend's rule: its bf16 copy of the weights where that fits the free
     * memory with the rest, else the file's blocks */
    int64_t weights = need->weights, total = need->total;
    const int64_t total_bf16 = need->total - need->weights + need->weights_bf16;
    const bool bf16 = need->weights_bf16 > 0 && total_bf16 <= s->mem_free;
    if (bf16) {
        weights = need->weights_bf16;
        total = total_bf16;
    }
    char what[256], fix[384];
    snprintf(what, sizeof what,
             "%.2f GiB = weights %.2f%s + KV %.2f (%lld tokens x %lld sequences) + reserve %.2f",
             gib(total), gib(weights), bf16 && weights != need->weights ? " (bf16 copy)" : "",
             gib(need->kv), (long long)need->max_model_len, (long long)need->max_num_seqs,
             gib(need->reserve));
    snprintf(fix, sizeof fix,
             "lower --max-model-len or --max-num-seqs (lpx plan -m MODEL shows what fits), use a "
             "quantized model, or free the GPU");
    if (total > s->mem_total)
        set(c, LPX_CHECK_FAIL, fix, "the model needs %s, more than the GPU's %.1f GiB", what, tot);
    else if (total > s->mem_free)
        set(c, LPX_CHECK_FAIL, fix,
            "the model needs %s, only %.1f GiB of %.1f GiB are free (%.1f GiB in use: see "
            "gpu%d.processes)",
            what, fr, tot, used, f->index);
    else if ((double)total > 0.9 * (double)s->mem_free)
        set(c, LPX_CHECK_WARN, fix, "the model needs %s of %.1f GiB free: less than 10%% to spare",
            what, fr);
    else
        set(c, LPX_CHECK_OK, NULL, "the model needs %s; %.1f GiB of %.1f GiB free", what, fr, tot);
}

void lpx_eval_ecc(const lpx_gpu_facts *f, lpx_check *c) {
    snprintf(c->id, sizeof c->id, "gpu%d.ecc", f->index);
    if (f->ecc_current == LPX_TEL_NA)
        set(c, LPX_CHECK_OK, NULL, "ECC not supported on this GPU");
    else if (f->ecc_uncorrected > 0)
        set(c, LPX_CHECK_FAIL,
            "stop work on this GPU and reset it (sudo nvidia-smi -r -i N); if errors return, "
            "the GPU needs service",
            "%lld uncorrected ECC error(s) since the driver loaded: results may be wrong",
            (long long)f->ecc_uncorrected);
    else if (f->rows_remap_failed == 1)
        set(c, LPX_CHECK_FAIL, "the GPU needs service (RMA): its spare memory rows are used up",
            "a memory row could not be remapped: this GPU has failing memory");
    else if (f->rows_remap_pending == 1)
        set(c, LPX_CHECK_WARN, "reset the GPU (sudo nvidia-smi -r -i N) or reboot to remap them",
            "memory rows with errors wait for a GPU reset to be remapped");
    else if (f->ecc_pending != LPX_TEL_NA && f->ecc_pending != f->ecc_current)
        set(c, LPX_CHECK_WARN, "reset the GPU (sudo nvidia-smi -r) or reboot to apply it",
            "ECC is %s now and switches %s at the next reset", f->ecc_current ? "on" : "off",
            f->ecc_pending ? "on" : "off");
    else
        set(c, LPX_CHECK_OK, NULL, "ECC %s%s", f->ecc_current ? "on" : "off",
            f->ecc_current ? ", no uncorrected errors" : "");
}

void lpx_eval_pcie(const lpx_gpu_facts *f, const lpx_gpu_sample *s, lpx_check *c) {
    snprintf(c->id, sizeof c->id, "gpu%d.pcie", f->index);
    if (s->pcie_width == LPX_TEL_NA || f->pcie_width_max == LPX_TEL_NA ||
        s->pcie_gen == LPX_TEL_NA || f->pcie_gen_max == LPX_TEL_NA) {
        set(c, LPX_CHECK_OK, NULL, "PCIe link not reported by the driver");
        return;
    }
    if (s->pcie_width < f->pcie_width_max)
        set(c, LPX_CHECK_WARN,
            "put the card in a x16 slot wired for all lanes; check risers and the BIOS lane "
            "settings (bifurcation)",
            "PCIe link x%d of x%d (gen %d of %d): host-GPU copies (model load, prompts) run at "
            "%d%% speed",
            s->pcie_width, f->pcie_width_max, s->pcie_gen, f->pcie_gen_max,
            100 * s->pcie_width / f->pcie_width_max);
    else if (s->pcie_gen < f->pcie_gen_max && s->util_gpu >= 50)
        set(c, LPX_CHECK_WARN, "check the BIOS PCIe speed setting, the slot and any riser",
            "PCIe gen %d of %d at x%d while the GPU is busy (%d%%)", s->pcie_gen, f->pcie_gen_max,
            s->pcie_width, s->util_gpu);
    else if (s->pcie_gen < f->pcie_gen_max)
        set(c, LPX_CHECK_OK, NULL,
            "PCIe gen %d of %d, x%d of x%d (the link drops to a lower generation while idle to "
            "save power; run lpx doctor under load to check the trained speed)",
            s->pcie_gen, f->pcie_gen_max, s->pcie_width, f->pcie_width_max);
    else
        set(c, LPX_CHECK_OK, NULL, "PCIe gen %d x%d, the maximum", s->pcie_gen, s->pcie_width);
}

void lpx_eval_clocks(const lpx_gpu_facts *f, const lpx_gpu_sample *s, lpx_check *c) {
    snprintf(c->id, sizeof c->id, "gpu%d.clocks", f->index);
    char clk[160], why[160];
    snprintf(clk, sizeof clk, "SM %d of %d MHz, memory %d of %d MHz", s->sm_clock_mhz,
             f->sm_clock_max_mhz, s->mem_clock_mhz, f->mem_clock_max_mhz);
    lpx_throttle_text(s->throttle, why, sizeof why);
    int64_t t = s->throttle;
    if (t == LPX_TEL_NA)
        set(c, LPX_CHECK_OK, NULL, "%s; throttle reasons not reported", clk);
    else if (t & (LPX_THR_HW_SLOWDOWN | LPX_THR_HW_THERMAL | LPX_THR_HW_POWER_BRAKE))
        set(c, LPX_CHECK_FAIL,
            "the GPU protects itself: check cooling (fans, airflow, heatsink), the power cables "
            "and the power supply; nvidia-smi -q -d PERFORMANCE shows details",
            "%s; hardware slowdown, clocks held down by: %s", clk, why);
    else if (t & LPX_THR_SW_THERMAL) {
        char fix[96];
        snprintf(fix, sizeof fix, "improve cooling and airflow; see gpu%d.temperature", f->index);
        set(c, LPX_CHECK_WARN, fix, "%s; clocks held down by: %s", clk, why);
    } else if (t & LPX_THR_SW_POWER_CAP)
        set(c, LPX_CHECK_WARN,
            "expected under full load; at idle the power limit is too low: nvidia-smi -q -d "
            "POWER, sudo nvidia-smi -pl <watts>",
            "%s; clocks held down by: %s", clk, why);
    else if (t & LPX_THR_APP_CLOCKS)
        set(c, LPX_CHECK_WARN, "reset clocks: sudo nvidia-smi -rac && sudo nvidia-smi -rgc",
            "%s; clocks limited by an application/locked clock setting", clk);
    else
        set(c, LPX_CHECK_OK, NULL, "%s; no throttling%s", clk,
            (t & LPX_THR_GPU_IDLE) ? " (idle)" : "");
}

void lpx_eval_temperature(const lpx_gpu_facts *f, const lpx_gpu_sample *s, lpx_check *c) {
    snprintf(c->id, sizeof c->id, "gpu%d.temperature", f->index);
    if (s->temp_c == LPX_TEL_NA) {
        set(c, LPX_CHECK_OK, NULL, "temperature not reported");
        return;
    }
    const char *fix = "improve cooling: airflow, fan speed, room temperature, dust in the "
                      "heatsink";
    int slow = f->temp_slowdown_c;
    if (slow == LPX_TEL_NA) {
        if (s->temp_c >= 85)
            set(c, LPX_CHECK_WARN, fix, "%d C (slowdown threshold not reported)", s->temp_c);
        else
            set(c, LPX_CHECK_OK, NULL, "%d C", s->temp_c);
    } else if (s->temp_c >= slow)
        set(c, LPX_CHECK_FAIL, fix, "%d C, at or over the slowdown threshold %d C", s->temp_c,
            slow);
    else if (s->temp_c >= slow - 10)
        set(c, LPX_CHECK_WARN, fix, "%d C, within 10 C of the slowdown threshold %d C", s->temp_c,
            slow);
    else
        set(c, LPX_CHECK_OK, NULL, "%d C (slowdown at %d C)", s->temp_c, slow);
}

void lpx_eval_power(const lpx_gpu_facts *f, const lpx_gpu_sample *s, lpx_check *c) {
    snprintf(c->id, sizeof c->id, "gpu%d.power", f->index);
    if (s->power_mw == LPX_TEL_NA || f->power_limit_mw == LPX_TEL_NA) {
        set(c, LPX_CHECK_OK, NULL, "power draw or limit not reported");
        return;
    }
    double w = s->power_mw / 1000.0, lim = f->power_limit_mw / 1000.0;
    if (f->power_default_limit_mw != LPX_TEL_NA &&
        f->power_limit_mw < f->power_default_limit_mw * 95LL / 100) {
        double def = f->power_default_limit_mw / 1000.0;
        char fix[160];
        snprintf(fix, sizeof fix, "restore it: sudo nvidia-smi -i %d -pl %.0f", f->index, def);
        set(c, LPX_CHECK_WARN, fix,
            "power limit lowered to %.0f W (default %.0f W): the GPU reaches lower clocks; "
            "drawing %.0f W",
            lim, def, w);
    } else
        set(c, LPX_CHECK_OK, NULL, "drawing %.0f W of a %.0f W limit", w, lim);
}

void lpx_eval_persistence(const lpx_gpu_facts *f, lpx_check *c) {
    snprintf(c->id, sizeof c->id, "gpu%d.persistence", f->index);
    if (f->persistence == LPX_TEL_NA)
        set(c, LPX_CHECK_OK, NULL, "persistence mode not reported");
    else if (f->persistence == 0)
        set(c, LPX_CHECK_WARN, "sudo nvidia-smi -pm 1, or enable the nvidia-persistenced service",
            "persistence mode off: when no process holds the GPU the driver tears it down, and "
            "each lpx start pays the re-initialisation (seconds)");
    else
        set(c, LPX_CHECK_OK, NULL, "persistence mode on");
}

void lpx_eval_mig(const lpx_gpu_facts *f, lpx_check *c) {
    snprintf(c->id, sizeof c->id, "gpu%d.mig", f->index);
    char fix[256];
    snprintf(fix, sizeof fix,
             "use one MIG instance: CUDA_VISIBLE_DEVICES=MIG-<uuid> (nvidia-smi -L), or turn MIG "
             "off: sudo nvidia-smi -i %d -mig 0 (then reset)",
             f->index);
    if (f->mig_current == LPX_TEL_NA)
        set(c, LPX_CHECK_OK, NULL, "MIG not supported on this GPU");
    else if (f->mig_current == 1)
        set(c, LPX_CHECK_WARN, fix,
            "MIG on: the GPU is split into instances; CUDA sees only the instance it is given, "
            "with a fraction of the memory and bandwidth");
    else if (f->mig_pending == 1)
        set(c, LPX_CHECK_WARN, "reset the GPU (sudo nvidia-smi -r) or turn it back off",
            "MIG off now, switches on at the next reset");
    else
        set(c, LPX_CHECK_OK, NULL, "MIG off");
}

void lpx_eval_processes(const lpx_gpu_facts *f, const lpx_gpu_process *procs, size_t n,
                        const char *procs_error, uint32_t own_pid, lpx_check *c) {
    snprintf(c->id, sizeof c->id, "gpu%d.processes", f->index);
    char fix[160];
    snprintf(fix, sizeof fix, "sudo nvidia-smi -i %d -c DEFAULT", f->index);
    if (f->compute_mode == LPX_COMPUTE_PROHIBITED) {
        set(c, LPX_CHECK_FAIL, fix, "compute mode is Prohibited: no process may use this GPU");
        return;
    }
    if (procs_error) {
        set(c, LPX_CHECK_OK, NULL, "process list not available (%s)", procs_error);
        return;
    }
    char list[600] = "";
    size_t others = 0;
    int64_t mem = 0;
    for (size_t i = 0; i < n; i++) {
        if (procs[i].pid == own_pid) continue;
        others++;
        size_t len = strlen(list);
        if (procs[i].mem_used != LPX_TEL_NA) {
            mem += procs[i].mem_used;
            snprintf(list + len, sizeof list - len, "%s%u %s (%.1f GiB)", len ? ", " : "",
                     procs[i].pid, procs[i].name, gib(procs[i].mem_used));
        } else
            snprintf(list + len, sizeof list - len, "%s%u %s", len ? ", " : "", procs[i].pid,
                     procs[i].name);
    }
    if (f->compute_mode == LPX_COMPUTE_EXCLUSIVE_PROCESS && others)
        set(c, LPX_CHECK_FAIL, fix,
            "compute mode is Exclusive_Process and %zu other process(es) hold the GPU: lpx "
            "cannot create a context on it (%s)",
            others, list);
    else if (!others)
        set(c, LPX_CHECK_OK, NULL, "no other compute processes%s",
            f->compute_mode == LPX_COMPUTE_EXCLUSIVE_PROCESS ? " (compute mode Exclusive_Process)"
                                                             : "");
    else
        set(c, LPX_CHECK_WARN,
            "they share its memory and bandwidth with lpx: stop them, or pick another GPU with "
            "--device cuda:N",
            "%zu other process(es) hold %.1f GiB: %s", others, gib(mem), list);
}

void lpx_eval_gpu(const lpx_gpu_facts *f, const lpx_gpu_sample *s, const lpx_gpu_process *procs,
                  size_t n_procs, const char *procs_error, uint32_t own_pid,
                  const lpx_build_facts *b, const lpx_model_need *need, lpx_checks *out) {
    lpx_check c;
    lpx_eval_arch(f, b, &c), push(out, &c);
    lpx_eval_memory(f, s, need, &c), push(out, &c);
    lpx_eval_processes(f, procs, n_procs, procs_error, own_pid, &c), push(out, &c);
    lpx_eval_ecc(f, &c), push(out, &c);
    lpx_eval_pcie(f, s, &c), push(out, &c);
    lpx_eval_clocks(f, s, &c), push(out, &c);
    lpx_eval_temperature(f, s, &c), push(out, &c);
    lpx_eval_power(f, s, &c), push(out, &c);
    lpx_eval_persistence(f, &c), push(out, &c);
    lpx_eval_mig(f, &c), push(out, &c);
}
