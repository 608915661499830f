/* lpx_dp_plan_make and the engines of a plan (data_parallel.h). */
#include "engine/data_parallel.h"

#include "base/error.h"
#include "engine/engine.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The entries of a comma-separated list into p->names; an entry of digits alone is a
 * GPU ordinal ("cuda:0,2" is cuda:0 and cuda:2). */
static lpx_status split_list(const char *list, lpx_dp_plan *p) {
    p->n = 0;
    for (const char *s = list;; s++) {
        size_t len = strcspn(s, ",");
        if (p->n == LPX_DP_MAX)
            return lpx_errorf(LPX_ERR_INVALID_ARG, "--device %s: more than %d devices", list,
                              LPX_DP_MAX);
        const bool ordinal = len > 0 && strspn(s, "0123456789") == len;
        if (len == 0 || len + (ordinal ? strlen("cuda:") : 0) >= sizeof p->names[0])
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "--device %s: expected a list like cuda:0,1 (an entry is empty "
                              "or too long)",
                              list);
        snprintf(p->names[p->n], sizeof p->names[p->n], "%s%.*s", ordinal ? "cuda:" : "", (int)len,
                 s);
        p->device[p->n] = p->names[p->n];
        p->n++;
        s += len;
        if (!*s) return LPX_OK;
    }
}

lpx_status lpx_dp_plan_make(const char *device, int32_t dp, int32_t n_threads, lpx_dp_plan *out) {
    lpx_dp_plan *p = out;
    memset(p, 0, sizeof *p);
    if (dp < 0 || dp > LPX_DP_MAX)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "--data-parallel-size %d: expected 1 to %d", dp,
                          LPX_DP_MAX);
    p->n_threads = n_threads;
    if (device && strchr(device, ',')) {
        LPX_TRY(split_list(device, p));
        if (dp && dp != p->n)
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "--data-parallel-size %d contradicts --device %s (%d devices)", dp,
                              device, p->n);
        for (int32_t i = 0; i < p->n; i++) {
            const lpx_backend_ops *ops;
            int ordinal;
            LPX_TRY(lpx_backend_select(p->device[i], &ops, &ordinal));
        }
    } else {
        p->n = dp ? dp : 1;
        p->device[0] = device;
        if (p->n == 1) return LPX_OK;
        const char *d = device && device[0] ? device : lpx_engine_default_device();
        if (strcmp(d, "cpu") && strcmp(d, "cuda"))
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "--device %s with --data-parallel-size %d: expected cpu, cuda (then "
                              "cuda:0..%d) or a list like cuda:0,1",
                              d, dp, dp - 1);
        for (int32_t i = 0; i < p->n; i++) {
            if (strcmp(d, "cpu"))
                snprintf(p->names[i], sizeof p->names[i], "cuda:%d", i);
            else
                snprintf(p->names[i], sizeof p->names[i], "cpu");
            p->device[i] = p->names[i];
        }
    }
    bool cpu = false;
    for (int32_t i = 0; i < p->n; i++)
        cpu |= !strcmp(p->device[i], "cpu");
    if (!cpu || p->n == 1) return LPX_OK;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t total = n_threads ? n_threads : cores > 0 ? cores : 1;
    if (n_threads && n_threads < p->n)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "--threads %d is below --data-parallel-size %d: each CPU engine needs "
                          "a thread",
                          n_threads, p->n);
    p->n_threads = total / p->n > 0 ? (int32_t)(total / p->n) : 1;
    return LPX_OK;
}

lpx_status lpx_dp_engines_start(const lpx_model *m, const lpx_engine_opts *eo,
                                const lpx_dp_plan *plan, lpx_engine **e) {
    memset(e, 0, sizeof *e * (size_t)plan->n);
    lpx_status st = LPX_OK;
    for (int32_t i = 0; st == LPX_OK && i < plan->n; i++) {
        lpx_engine_opts o = *eo;
        o.device = plan->device[i];
        o.n_threads = plan->n_threads;
        st = lpx_engine_create(m, &o, &e[i]);
        if (st == LPX_OK) st = lpx_engine_start(e[i]);
        if (st != LPX_OK && plan->n > 1) {
            char why[512]; /* lpx_errorf writes the buffer lpx_last_error reads */
            snprintf(why, sizeof why, "%s", lpx_last_error());
            st = lpx_errorf(st, "engine %d of %d (%s): %s", i, plan->n, o.device, why);
        }
    }
    if (st != LPX_OK) lpx_dp_engines_destroy(e, plan->n);
    return st;
}

int32_t lpx_dp_place(const atomic_int *load, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (atomic_load(&load[i]) < atomic_load(&load[best])) best = i;
    return best;
}

void lpx_dp_engines_destroy(lpx_engine **e, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        lpx_engine_destroy(e[i]);
        e[i] = NULL;
    }
}
