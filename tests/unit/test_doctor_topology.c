/* doctor/topology.h on made-up machines: CPU lists, NVLink counting (direct pairs,
 * NVSwitch boards, a GPU whose links are unreadable), the nvidia-smi style names and
 * matrix, the topology check and the affinity-against-NUMA verdict. The NVML side is
 * tests/py/test_doctor_fake_nvml.py's. */
#include "doctor/topology.h"
#include "test.h"

#include <string.h>

static lpx_cpu_mask mask(const char *list) {
    lpx_cpu_mask m;
    if (!lpx_cpulist_parse(list, &m)) memset(&m, 0, sizeof m);
    return m;
}

static void bus(char *dst, int b) {
    snprintf(dst, 32, "00000000:%02X:00.0", b);
}

int main(void) {
    char buf[4096];
    lpx_cpu_mask m;
    /* CPU lists as sysfs and taskset write them */
    CHECK(lpx_cpulist_parse("0-27,56-83\n", &m));
    lpx_cpulist_format(&m, buf, sizeof buf);
    CHECK(!strcmp(buf, "0-27,56-83"));
    CHECK(lpx_cpulist_parse("3", &m));
    lpx_cpulist_format(&m, buf, sizeof buf);
    CHECK(!strcmp(buf, "3"));
    CHECK(lpx_cpulist_parse("0,2,4-5,4095", &m));
    lpx_cpulist_format(&m, buf, sizeof buf);
    CHECK(!strcmp(buf, "0,2,4-5,4095"));
    const char *bad[] = {"", "\n", "a", "3-1", "1,", "1-", "4096", "0-99999999999", "1 2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(!lpx_cpulist_parse(bad[i], &m));
    memset(&m, 0, sizeof m);
    lpx_cpulist_format(&m, buf, sizeof buf);
    CHECK(!strcmp(buf, "none"));

    /* 4 GPUs: 0-1 by 4 direct links, 2-3 by 2, where GPU 3's links are unreadable (only
     * GPU 2 sees them); a loopback link counts for no pair */
    lpx_gpu_links g[LPX_TOPO_MAX_GPUS];
    memset(g, 0, sizeof g);
    for (int i = 0; i < 4; i++)
        bus(g[i].bus_id, 0x18 + 0x10 * i);
    g[0].n_links = g[1].n_links = 4;
    for (int l = 0; l < 4; l++) {
        snprintf(g[0].remote[l], 32, "%s", g[1].bus_id);
        snprintf(g[1].remote[l], 32, "%s", g[0].bus_id);
    }
    g[2].n_links = 3;
    bus(g[2].remote[0], 0x48);
    snprintf(g[2].remote[1], 32, "00000000:48:00.0");
    snprintf(g[2].remote[2], 32, "%s", g[2].bus_id);
    g[3].n_links = LPX_TEL_NA;
    lpx_topology t = {.n = 4, .n_all = 4, .numa = {0, 0, 1, LPX_TEL_NA}};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            t.level[i][j] = i == j ? 0 : (i < 2) == (j < 2) ? 20 : 50;
    t.level[0][3] = t.level[3][0] = LPX_TEL_NA;
    lpx_topo_count_nvlinks(g, 4, &t);
    CHECK(t.nvlinks[0][1] == 4 && t.nvlinks[1][0] == 4);
    CHECK(t.nvlinks[2][3] == 2 && t.nvlinks[3][2] == 2);
    CHECK(t.nvlinks[0][2] == 0 && t.nvlinks[2][2] == 0 && !t.nvswitch[0][1]);
    char name[16];
    CHECK(!strcmp(lpx_topo_link_name(&t, 1, 1, name, sizeof name), "X"));
    CHECK(!strcmp(lpx_topo_link_name(&t, 0, 1, name, sizeof name), "NV4"));
    CHECK(!strcmp(lpx_topo_link_name(&t, 1, 2, name, sizeof name), "SYS"));
    CHECK(!strcmp(lpx_topo_link_name(&t, 0, 3, name, sizeof name), "?"));
    const int levels[] = {0, 10, 20, 30, 40, 50};
    const char *names[] = {"PIX", "PIX", "PXB", "PHB", "NODE", "SYS"};
    for (int k = 0; k < 6; k++) {
        t.level[1][2] = levels[k];
        CHECK(!strcmp(lpx_topo_link_name(&t, 1, 2, name, sizeof name), names[k]));
    }
    t.level[1][2] = 50;
    lpx_topo_matrix_text(&t, buf, sizeof buf);
    const char *want = "        GPU0   GPU1   GPU2   GPU3   NUMA\n"
                       "GPU0    X      NV4    SYS    ?      0\n"
                       "GPU1    NV4    X      SYS    SYS    0\n"
                       "GPU2    SYS    SYS    X      NV2    1\n"
                       "GPU3    ?      SYS    NV2    X      ?\n"
                       "X itself";
    CHECK(!strncmp(buf, want, strlen(want)));
    lpx_check c;
    lpx_eval_topology(&t, &c);
    CHECK(!strcmp(c.id, "gpu.topology") && c.level == LPX_CHECK_OK);
    CHECK(!strcmp(c.found, "4 GPUs: 2 of 6 pairs on NVLink, 3 across the CPUs' interconnect "
                           "(SYS): 0-1 NV4, 0-2 SYS, 0-3 ?, 1-2 SYS, 1-3 SYS, 2-3 NV2"));

    /* an HGX board: 8 GPUs, 18 links each to four NVSwitches; one GPU with 12 links up */
    memset(g, 0, sizeof g);
    for (int i = 0; i < 8; i++) {
        bus(g[i].bus_id, 0x18 + 0x10 * i);
        g[i].n_links = i == 5 ? 12 : 18;
        for (int l = 0; l < g[i].n_links; l++)
            bus(g[i].remote[l], 0xa0 + l % 4);
    }
    lpx_topology h = {.n = 8, .n_all = 8};
    lpx_topo_count_nvlinks(g, 8, &h);
    CHECK(h.nvlinks[0][7] == 18 && h.nvswitch[0][7] && h.nvlinks[7][0] == 18);
    CHECK(h.nvlinks[5][2] == 12 && h.nvlinks[2][5] == 12 && !h.nvswitch[3][3]);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            h.level[i][j] = 40;
    lpx_eval_topology(&h, &c);
    CHECK(strstr(c.found, "28 of 28 pairs on NVLink") && strstr(c.found, "4-5 NV12 (NVSwitch)") &&
          strstr(c.found, "0-1 NV18 (NVSwitch)"));
    for (int l = 12; l < 18; l++) /* all 18 up again: one summary */
        bus(g[5].remote[l], 0xa0 + l % 4);
    g[5].n_links = 18;
    lpx_topo_count_nvlinks(g, 8, &h);
    lpx_eval_topology(&h, &c);
    CHECK(!strcmp(c.found, "8 GPUs: 28 of 28 pairs on NVLink, 0 across the CPUs' interconnect "
                           "(SYS): every pair NV18 (NVSwitch)"));

    /* fewer than two GPUs, more than the matrix holds */
    lpx_topology one = {.n = 1, .n_all = 1}, none = {0};
    lpx_eval_topology(&one, &c);
    CHECK(c.level == LPX_CHECK_OK && !strcmp(c.found, "one GPU: no links between GPUs"));
    lpx_eval_topology(&none, &c);
    CHECK(c.level == LPX_CHECK_SKIP && strstr(c.found, "no GPU"));
    h.n_all = 20;
    lpx_eval_topology(&h, &c);
    CHECK(strstr(c.found, "20 GPUs (the first 16 shown)"));
    lpx_topo_matrix_text(&h, buf, sizeof buf);
    CHECK(strstr(buf, "(the first 8 of 20 GPUs)\n"));

    /* affinity against the GPU's NUMA node: two sockets of 28 cores + SMT */
    lpx_cpu_mask n0 = mask("0-27,56-83"), n1 = mask("28-55,84-111");
    lpx_cpu_mask on0 = mask("0-7"), both = mask("20-35"), all = mask("0-111");
    lpx_eval_numa(3, 1, &n1, &on0, &c);
    CHECK(!strcmp(c.id, "gpu3.numa") && c.level == LPX_CHECK_WARN);
    CHECK(!strcmp(c.found, "GPU 3 is on NUMA node 1 (CPUs 28-55,84-111), but this process may "
                           "run only on CPUs 0-7, none of them on that node: copies between "
                           "host and GPU and the engine's thread cross the CPUs' interconnect"));
    CHECK(strstr(c.fix, "numactl --cpunodebind=1 --membind=1") &&
          strstr(c.fix, "taskset -c 28-55,84-111") && strstr(c.fix, "--cpuset-mems=1"));
    lpx_eval_numa(0, 0, &n0, &on0, &c);
    CHECK(c.level == LPX_CHECK_OK &&
          !strcmp(c.found, "NUMA node 0 (CPUs 0-27,56-83); this process's CPUs (0-7) are on it"));
    lpx_eval_numa(3, 1, &n1, &both, &c);
    CHECK(c.level == LPX_CHECK_OK && strstr(c.found, "8 of this process's 16 CPUs (20-35)"));
    lpx_eval_numa(3, 1, &n1, &all, &c);
    CHECK(c.level == LPX_CHECK_OK && strstr(c.found, "56 of this process's 112 CPUs"));
    lpx_eval_numa(2, LPX_TEL_NA, &n1, &on0, &c);
    CHECK(c.level == LPX_CHECK_OK && strstr(c.found, "not reported") && !c.fix[0]);
    lpx_eval_numa(2, 1, NULL, &on0, &c);
    CHECK(c.level == LPX_CHECK_OK && strstr(c.found, "not readable here: placement not checked"));
    TEST_DONE();
}
