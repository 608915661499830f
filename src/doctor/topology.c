/* GPU topology and NUMA verdicts (topology.h). */
#include "doctor/topology.h"

#include "base/appendf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static void setc(lpx_check *c, lpx_check_level level, const char *fix, const char *fmt, ...)
    LPX_PRINTF(4, 5);
/* Keeps c->id (set by the caller) and fills the rest. */
static void setc(lpx_check *c, lpx_check_level level, const char *fix, const char *fmt, ...) {
    c->level = level;
    snprintf(c->fix, sizeof c->fix, "%s", fix ? fix : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->found, sizeof c->found, fmt, ap);
    va_end(ap);
}

static bool has(const lpx_cpu_mask *m, int cpu) {
    return (m->w[cpu / 64] >> (cpu % 64)) & 1;
}

/* A decimal CPU number below LPX_CPU_MASK_BITS at *p; false when there is none. */
static bool cpu_num(const char **p, int *out) {
    if (**p < '0' || **p > '9') return false;
    long v = 0;
    while (**p >= '0' && **p <= '9') {
        v = v * 10 + (**p - '0');
        if (v >= LPX_CPU_MASK_BITS) return false;
        (*p)++;
    }
    *out = (int)v;
    return true;
}

bool lpx_cpulist_parse(const char *text, lpx_cpu_mask *m) {
    memset(m, 0, sizeof *m);
    const char *p = text;
    bool any = false;
    for (;;) {
        int a, b;
        if (!cpu_num(&p, &a)) return false;
        b = a;
        if (*p == '-') {
            p++;
            if (!cpu_num(&p, &b) || b < a) return false;
        }
        for (int c = a; c <= b; c++)
            m->w[c / 64] |= 1ULL << (c % 64);
        any = true;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == '\n') p++;
        return any && !*p;
    }
}

void lpx_cpulist_format(const lpx_cpu_mask *m, char *buf, size_t cap) {
    buf[0] = '\0';
    for (int c = 0; c < LPX_CPU_MASK_BITS;) {
        if (!has(m, c)) {
            c++;
            continue;
        }
        int e = c;
        while (e + 1 < LPX_CPU_MASK_BITS && has(m, e + 1))
            e++;
        if (e > c)
            lpx_appendf(buf, cap, "%s%d-%d", buf[0] ? "," : "", c, e);
        else
            lpx_appendf(buf, cap, "%s%d", buf[0] ? "," : "", c);
        c = e + 1;
    }
    if (!buf[0]) snprintf(buf, cap, "none");
}

/* Bus ids from NVML may differ in case; the domain is 8 digits in both. */
static int gpu_of_bus(const lpx_gpu_links *g, int n, const char *bus) {
    for (int j = 0; j < n; j++)
        if (g[j].bus_id[0] && !strcasecmp(g[j].bus_id, bus)) return j;
    return -1;
}

void lpx_topo_count_nvlinks(const lpx_gpu_links *g, int n, lpx_topology *t) {
    int raw[LPX_TOPO_MAX_GPUS][LPX_TOPO_MAX_GPUS] = {{0}}, to_switch[LPX_TOPO_MAX_GPUS] = {0};
    if (n > LPX_TOPO_MAX_GPUS) n = LPX_TOPO_MAX_GPUS;
    memset(t->nvlinks, 0, sizeof t->nvlinks);
    memset(t->nvswitch, 0, sizeof t->nvswitch);
    for (int i = 0; i < n; i++)
        for (int l = 0; l < g[i].n_links && l < LPX_NVLINK_MAX; l++) {
            int j = gpu_of_bus(g, n, g[i].remote[l]);
            if (j < 0)
                to_switch[i]++;
            else if (j != i) /* a loopback link joins no pair */
                raw[i][j]++;
        }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            /* both ends see a direct link; one whose links are unreadable sees none */
            int k = raw[i][j] > raw[j][i] ? raw[i][j] : raw[j][i];
            bool sw = !k && to_switch[i] && to_switch[j];
            if (sw) k = to_switch[i] < to_switch[j] ? to_switch[i] : to_switch[j];
            t->nvlinks[i][j] = t->nvlinks[j][i] = k;
            t->nvswitch[i][j] = t->nvswitch[j][i] = sw;
        }
}

const char *lpx_topo_link_name(const lpx_topology *t, int i, int j, char *buf, size_t cap) {
    if (i == j)
        snprintf(buf, cap, "X");
    else if (t->nvlinks[i][j] > 0)
        snprintf(buf, cap, "NV%d", t->nvlinks[i][j]);
    else {
        const int l = t->level[i][j];
        snprintf(buf, cap, "%s",
                 l == LPX_TEL_NA ? "?"
                 : l <= 10       ? "PIX"
                 : l <= 20       ? "PXB"
                 : l <= 30       ? "PHB"
                 : l <= 40       ? "NODE"
                                 : "SYS");
    }
    return buf;
}

void lpx_topo_matrix_text(const lpx_topology *t, char *buf, size_t cap) {
    char name[16];
    buf[0] = '\0';
    lpx_appendf(buf, cap, "        ");
    for (int j = 0; j < t->n; j++)
        lpx_appendf(buf, cap, "GPU%-4d", j);
    lpx_appendf(buf, cap, "NUMA\n");
    for (int i = 0; i < t->n; i++) {
        lpx_appendf(buf, cap, "GPU%-4d ", i);
        for (int j = 0; j < t->n; j++)
            lpx_appendf(buf, cap, "%-7s", lpx_topo_link_name(t, i, j, name, sizeof name));
        if (t->numa[i] == LPX_TEL_NA)
            lpx_appendf(buf, cap, "?\n");
        else
            lpx_appendf(buf, cap, "%d\n", t->numa[i]);
    }
    if (t->n_all > t->n) lpx_appendf(buf, cap, "(the first %d of %d GPUs)\n", t->n, t->n_all);
    lpx_appendf(buf, cap,
                "X itself, NV# # NVLinks (direct or through NVSwitches), PIX one PCIe switch, PXB\n"
                "several, PHB a host bridge, NODE host bridges of one NUMA node, SYS across the\n"
                "CPUs' interconnect, ? not known\n");
}

void lpx_eval_topology(const lpx_topology *t, lpx_check *out) {
    snprintf(out->id, sizeof out->id, "gpu.topology");
    if (t->n_all < 2) {
        setc(out, t->n_all ? LPX_CHECK_OK : LPX_CHECK_SKIP, NULL, "%s",
             t->n_all == 1 ? "one GPU: no links between GPUs"
                           : "no GPU: no links between GPUs or NUMA placement to check");
        return;
    }
    char pairs[600] = "", name[16], first[32] = "", link[32];
    int nv = 0, sys = 0, n_pairs = 0;
    bool same = true;
    for (int i = 0; i < t->n; i++)
        for (int j = i + 1; j < t->n; j++) {
            lpx_topo_link_name(t, i, j, name, sizeof name);
            snprintf(link, sizeof link, "%s%s", name, t->nvswitch[i][j] ? " (NVSwitch)" : "");
            if (!n_pairs) snprintf(first, sizeof first, "%s", link);
            same = same && !strcmp(link, first);
            nv += t->nvlinks[i][j] > 0;
            sys += !t->nvlinks[i][j] && t->level[i][j] > 40;
            n_pairs++;
            lpx_appendf(pairs, sizeof pairs, "%s%d-%d %s", pairs[0] ? ", " : "", i, j, link);
        }
    if (same && n_pairs > 1) snprintf(pairs, sizeof pairs, "every pair %s", first);
    setc(out, LPX_CHECK_OK, NULL,
         "%d GPUs%s: %d of %d pairs on NVLink, %d across the CPUs' interconnect (SYS): %s",
         t->n_all, t->n_all > t->n ? " (the first 16 shown)" : "", nv, n_pairs, sys, pairs);
}

void lpx_eval_numa(int gpu, int node, const lpx_cpu_mask *node_cpus, const lpx_cpu_mask *affinity,
                   lpx_check *out) {
    snprintf(out->id, sizeof out->id, "gpu%d.numa", gpu);
    if (node == LPX_TEL_NA) {
        setc(out, LPX_CHECK_OK, NULL,
             "NUMA node not reported (a one-node machine, or a driver and sysfs that do not "
             "say): placement not checked");
        return;
    }
    if (!node_cpus) {
        setc(out, LPX_CHECK_OK, NULL,
             "NUMA node %d; its CPU list is not readable here: placement not checked", node);
        return;
    }
    char mine[256], theirs[256];
    lpx_cpulist_format(affinity, mine, sizeof mine);
    lpx_cpulist_format(node_cpus, theirs, sizeof theirs);
    int on = 0, all = 0;
    for (int c = 0; c < LPX_CPU_MASK_BITS; c++) {
        all += has(affinity, c);
        on += has(affinity, c) && has(node_cpus, c);
    }
    if (!on) {
        char fix[1024];
        snprintf(fix, sizeof fix,
                 "run lpx on that node: numactl --cpunodebind=%d --membind=%d lpx ... (or "
                 "taskset -c %s); in a container give it the node's CPUs (docker "
                 "--cpuset-cpus=%s --cpuset-mems=%d)",
                 node, node, theirs, theirs, node);
        setc(out, LPX_CHECK_WARN, fix,
             "GPU %d is on NUMA node %d (CPUs %s), but this process may run only on CPUs %s, "
             "none of them on that node: copies between host and GPU and the engine's thread "
             "cross the CPUs' interconnect",
             gpu, node, theirs, mine);
    } else if (on < all) {
        setc(out, LPX_CHECK_OK, NULL,
             "NUMA node %d (CPUs %s); %d of this process's %d CPUs (%s) are on it", node, theirs,
             on, all, mine);
    } else {
        setc(out, LPX_CHECK_OK, NULL, "NUMA node %d (CPUs %s); this process's CPUs (%s) are on it",
             node, theirs, mine);
    }
}
