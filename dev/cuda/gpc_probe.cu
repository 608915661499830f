/* gpc_probe: which SMs of this GPU share a GPC, and how many thread-block clusters of
 * each size fit one block an SM. The batch-1 fused q/k/v + attention kernel
 * (src/backend/cuda/qkv_attn.cuh) runs a cluster a KV head; where the clusters cannot
 * all be placed one block an SM, one of them doubles up on another's SMs and ends
 * late (docs/lab/notebook.md rows 36-38). The cluster shapes that avoid this follow from the
 * GPC sizes, which CUDA does not report: this measures them.
 *
 * 1. cudaOccupancyMaxActiveClusters for cluster sizes 1..16 with shared memory just
 *    over half an SM's (one block an SM).
 * 2. Many launches of clusters of several sizes, one block an SM, each block writing
 *    its %smid: blocks of one cluster are on one GPC, so the SMs joined by shared
 *    clusters (union-find over all launches) fall into the GPCs.
 *
 * Build: nvcc -arch=sm_90 -O2 dev/cuda/gpc_probe.cu -o gpc_probe. Run: ./gpc_probe */
#include "check_util.h"

#include <cooperative_groups.h>

__global__ void where_kernel(int *sm_of_block, int spin_ns) {
    extern __shared__ int pad[];
    namespace cg = cooperative_groups;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    if (threadIdx.x == 0) {
        pad[0] = (int)sm;
        sm_of_block[blockIdx.x] = pad[0];
    }
    /* stay resident a while, so that every cluster of the grid is placed at once */
    long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (;;) {
        long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > spin_ns) break;
    }
    cg::this_cluster().sync();
}

/* A launch of `blocks` blocks in clusters of c, smem bytes of shared memory a block;
 * attr is the caller's (the config points at it). */
static cudaLaunchConfig_t cluster_cfg(int c, int blocks, int smem, cudaLaunchAttribute *attr) {
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = c;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(128);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

static int find(int *p, int x) {
    while (p[x] != x) x = p[x] = p[p[x]];
    return x;
}

int main(void) {
    int dev = 0, n_sms = 0, per_sm = 0, optin = 0, reserved = 0;
    cudaDeviceProp prop;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    CK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    const int smem = per_sm / 2 - reserved + 1024; /* > half: one block an SM */
    printf("%s: %d SMs, %d B shared memory an SM (opt-in %d, reserved %d); probe blocks ask %d B\n",
           prop.name, n_sms, per_sm, optin, reserved, smem);
    CK(cudaFuncSetAttribute(where_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(where_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));

    int max_clusters[17] = {0};
    printf("clusters that fit one block an SM (cudaOccupancyMaxActiveClusters):\n");
    for (int c = 1; c <= 16; c++) {
        cudaLaunchAttribute attr;
        cudaLaunchConfig_t cfg = cluster_cfg(c, c, smem, &attr);
        int n = 0;
        if (cudaOccupancyMaxActiveClusters(&n, where_kernel, &cfg) != cudaSuccess) {
            cudaGetLastError();
            n = -1;
        }
        max_clusters[c] = n;
        printf("  size %2d: %3d clusters (%3d SMs)\n", c, n, n > 0 ? n * c : 0);
    }

    /* union-find over SMs: joined when two blocks of one cluster ran on them */
    int *parent = (int *)malloc(sizeof(int) * (size_t)n_sms);
    for (int i = 0; i < n_sms; i++) parent[i] = i;
    int *d_sm = NULL;
    CK(cudaMalloc(&d_sm, sizeof(int) * 4096));
    int *h_sm = (int *)malloc(sizeof(int) * 4096);
    const int sizes[] = {16, 14, 12, 10, 9, 8, 7, 6, 5, 4, 3, 2};
    int launches = 0;
    for (int rep = 0; rep < 20; rep++) {
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
            const int c = sizes[si], n = max_clusters[c];
            if (n <= 0) continue;
            /* fewer clusters than fit, in some launches, so that placement varies */
            const int use = rep % 2 ? n : (n + 1) / 2 + rep % ((n + 1) / 2 + 1);
            const int blocks = (use < n ? use : n) * c;
            if (blocks > 4096) continue;
            cudaLaunchAttribute attr;
            cudaLaunchConfig_t cfg = cluster_cfg(c, blocks, smem, &attr);
            CK(cudaLaunchKernelEx(&cfg, where_kernel, d_sm, 20000));
            CK(cudaMemcpy(h_sm, d_sm, sizeof(int) * blocks, cudaMemcpyDeviceToHost));
            launches++;
            for (int b = 0; b < blocks; b++) {
                const int s = h_sm[b], s0 = h_sm[b - b % c];
                if (s < 0 || s >= n_sms || s0 < 0 || s0 >= n_sms) continue;
                parent[find(parent, s)] = find(parent, s0);
            }
        }
    }
    printf("SM groups joined by shared clusters over %d launches (GPCs, if every SM was "
           "reached):\n", launches);
    int groups = 0;
    for (int r = 0; r < n_sms; r++) {
        if (find(parent, r) != r) continue;
        int cnt = 0;
        for (int i = 0; i < n_sms; i++) cnt += find(parent, i) == r;
        printf("  group %d: %2d SMs:", groups++, cnt);
        for (int i = 0; i < n_sms; i++)
            if (find(parent, i) == r) printf(" %d", i);
        printf("\n");
    }
    free(parent);
    free(h_sm);
    cudaFree(d_sm);
    return 0;
}
