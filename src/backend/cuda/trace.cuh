/* Developer tracing of the CUDA backend (the trace string, docs/dev.md): all of its
 * state behind one pointer of the instance, NULL when nothing is traced. Each hook
 * is one call that does nothing on a NULL trace, so without tracing the kernels
 * launched (and the graphs captured) are those of a backend without hooks.
 *   timing    the GPU time of each batch-1 decode graph (events), printed at exit
 *   attn      block 0's phase marks of the decode attention (AD_TRACE a layer)
 *   mv        block 0's phases of the batch-1 projections (MV_TRACE a launch)
 *   blk=L     every block's SM and marks of layer L's batch-1 kernels, as CSV
 * With attn, mv or blk on, step_begin waits for its step (the buffers are the
 * graph's). */
#ifndef LPX_BACKEND_CUDA_TRACE_CUH
#define LPX_BACKEND_CUDA_TRACE_CUH

#include "attention.cuh"
#include "common.cuh"
#include "matmul.cuh"
#include "qkv_attn.cuh"
#include "tuning.h"

#include <stdio.h>
#include <stdlib.h>

#define TRACE_SLOTS 2                          /* steps in flight (cuda_backend.cu's N_SLOTS) */
enum { BK_FUSED, BK_O, BK_GU, BK_DOWN, BK_N }; /* the blk trace's kernels of a layer */

typedef struct cuda_trace {
    cuda_trace_opts o;
    int n_layers;
    bool fused; /* the batch-1 q/k/v + attention kernel is on (qa_plan.cluster) */
    /* timing: events around each decode graph of a slot */
    cudaEvent_t ev[TRACE_SLOTS][2];
    double graph_ms;
    int graph_steps;
    /* attn: (n_layers, AD_TRACE) on the device and the host; sums per phase */
    long long *attn_dev, *attn_host;
    double attn_phase[AD_TRACE];
    int attn_traced;
    /* mv: the matvec launchers' hooks; per kind (qkv, o, gate/up, down): cycles
     * before the wait, x staging, weights wait, rest; ns wait to last block end; ns
     * release after the predecessor */
    mv_probe probe;
    long long *mv_host;
    double mv_phase[4][6];
    int mv_traced;
    /* blk: (BK_N, BT_BLOCKS, BT_MARKS) on the device and the host, written out at
     * the 64th traced step */
    long long *bt_dev, *bt_host;
    int bt_steps;
} cuda_trace;

/* n long longs on the host and the device, zeroed (the mv trace's last-block end
 * is an atomicMax into its device buffer). */
static lpx_status trace_buffers(size_t n, const char *what, long long **host, long long **dev) {
    *host = (long long *)calloc(n, sizeof(long long));
    if (!*host) return lpx_errorf(LPX_ERR_NOMEM, "cuda: %s trace: out of host memory", what);
    LPX_CUDA_TRY(cudaMalloc((void **)dev, n * sizeof(long long)));
    LPX_CUDA_TRY(cudaMemset(*dev, 0, n * sizeof(long long)));
    return LPX_OK;
}

/* Prints the trace's sums and frees it (NULL: nothing). */
static void trace_destroy(cuda_trace *t) {
    if (!t) return;
    if (t->graph_steps > 0)
        fprintf(stderr, "lpx cuda: batch-1 decode graph, %d steps, %.2f us per step on the GPU\n",
                t->graph_steps, 1e3 * t->graph_ms / t->graph_steps);
    for (int i = 0; i < TRACE_SLOTS; i++)
        for (int j = 0; j < 2; j++)
            if (t->ev[i][j]) cudaEventDestroy(t->ev[i][j]);
    if (t->attn_traced > 0) {
        const double n = (double)t->attn_traced * t->n_layers;
        const double *ph = t->attn_phase;
        /* the marks of attn_decode_kernel, or of qkv_attn_kernel (qkv_attn.cuh) */
        fprintf(stderr,
                t->fused
                    ? "lpx cuda: fused q/k/v + attention (cluster), block 0, mean cycles per "
                      "layer: inputs and issue %.0f, wait %.0f, x norm %.0f, "
                      "rows %.0f, cluster barrier and q/k/v %.0f, attention %.0f, cluster "
                      "barrier and combine %.0f; %.2f us from the wait to the end; %.2f us from "
                      "its end to the next layer's wait\n"
                    : "lpx cuda: decode attention, block (0,0,0), mean cycles per layer: inputs "
                      "%.0f, issue %.0f, wait for the projection %.0f, q/k/v %.0f, scores %.0f, "
                      "P·V %.0f, combine and output %.0f; %.2f us from the wait to the end; "
                      "%.2f us from its end to the next layer's wait\n",
                ph[1] / n, ph[2] / n, ph[3] / n, ph[4] / n, ph[5] / n, ph[6] / n, ph[7] / n,
                ph[8] / n / 1e3, ph[9] / ((double)t->attn_traced * (t->n_layers - 1)) / 1e3);
        if (t->fused)
            fprintf(stderr,
                    "lpx cuda: fused q/k/v + attention, the last block after block 0's wait: "
                    "weights landed %.2f us, rows done %.2f us, end %.2f us\n",
                    ph[10] / n / 1e3, ph[11] / n / 1e3, ph[12] / n / 1e3);
    }
    if (t->mv_traced > 0) {
        static const char *const kind[4] = {"qkv", "o", "gate/up", "down"};
        const double n = (double)t->mv_traced * t->n_layers;
        for (int k = t->fused ? 1 : 0; k < 4; k++) {
            const double *ph = t->mv_phase[k];
            fprintf(stderr,
                    "lpx cuda: matvec %s, block 0 cycles: before the wait %.0f, x %.0f, weights "
                    "wait %.0f, rest %.0f; wait to last block end %.2f us",
                    kind[k], ph[0] / n, ph[1] / n, ph[2] / n, ph[3] / n, ph[4] / n / 1e3);
            if (k != 1)
                fprintf(stderr, "; release after the predecessor's end %.2f us",
                        ph[5] / (k == 0 ? n - t->mv_traced : n) / 1e3);
            fprintf(stderr, "\n");
        }
    }
    free(t->attn_host);
    free(t->mv_host);
    free(t->bt_host);
    cudaFree(t->attn_dev);
    cudaFree(t->probe.slots);
    cudaFree(t->bt_dev);
    free(t);
}

/* The trace of an instance from its trace string (*out NULL when it asks for
 * nothing). fused: the batch-1 fused kernel is on (then the mv trace has three
 * projections a layer, qkv being inside the fused kernel). */
static lpx_status trace_create(const char *spec, int n_layers, bool fused, cuda_trace **out) {
    *out = NULL;
    cuda_trace_opts o;
    LPX_TRY(lpx_cuda_trace_parse(spec, &o));
    if (!o.timing && !o.attn && !o.mv && o.blk_layer < 0) return LPX_OK;
    cuda_trace *t = (cuda_trace *)calloc(1, sizeof(cuda_trace));
    if (!t) return lpx_errorf(LPX_ERR_NOMEM, "cuda: trace: out of host memory");
    t->o = o;
    t->n_layers = n_layers;
    t->fused = fused;
    lpx_status s = LPX_OK;
    if (o.attn)
        s = trace_buffers((size_t)AD_TRACE * n_layers, "attention", &t->attn_host, &t->attn_dev);
    if (s == LPX_OK && o.mv) {
        t->probe.cap = (fused ? 3 : 4) * n_layers; /* qkv (unless fused), o, gate/up, down */
        s = trace_buffers((size_t)MV_TRACE * t->probe.cap, "matvec", &t->mv_host, &t->probe.slots);
    }
    if (s == LPX_OK && o.blk_layer >= 0)
        s = trace_buffers((size_t)BK_N * BT_BLOCKS * BT_MARKS, "block", &t->bt_host, &t->bt_dev);
    for (int i = 0; s == LPX_OK && o.timing && i < TRACE_SLOTS; i++)
        for (int j = 0; s == LPX_OK && j < 2; j++)
            if (cudaEventCreate(&t->ev[i][j]) != cudaSuccess)
                s = lpx_errorf(LPX_ERR_DEVICE, "cuda: trace: cudaEventCreate failed");
    if (s != LPX_OK) {
        trace_destroy(t);
        return s;
    }
    *out = t;
    return LPX_OK;
}

/* The start-up lines (timing or attn): what the batch-1 decode runs on. */
static void trace_report_plan(const cuda_trace *t, const qa_plan *qa, const cuda_tuning *tu) {
    if (!t) return;
    if (t->o.timing || t->o.attn)
        fprintf(stderr,
                "lpx cuda: batch-1 fused q/k/v + attention: %s (clusters of %d blocks, %d rows "
                "a block, %zu bytes of shared memory a block)\n",
                qa->cluster ? "on" : "off", qa->cluster, qa->rb, qa->smem);
    if (t->o.timing) {
        fprintf(stderr,
                "lpx cuda: batch-1 projections on %s (fused kernel: %d registers a thread)\n",
                tu->mv_small ? "matvec_tma_small_kernel" : "matvec_tma_kernel", qa->regs);
        fprintf(stderr,
                "lpx cuda: batch-1 projections one block an SM (MM_SOLO):%s%s%s%s (%d bytes of "
                "shared memory a block)\n",
                tu->solo & TK_O ? " o" : "", tu->solo & TK_G ? " gate/up" : "",
                tu->solo & TK_D ? " down" : "", tu->solo ? "" : " none", tu->mv_solo_smem);
    }
}

/* Whether step_begin must wait for its step (a trace buffer is the graph's). */
static bool trace_waits(const cuda_trace *t) {
    return t && (t->attn_dev || t->probe.slots || t->bt_dev);
}

/* The matvec launchers' hooks (matmul_ctx.probe), NULL when neither mv nor blk is on. */
static mv_probe *trace_probe(cuda_trace *t) {
    return t && (t->probe.slots || t->bt_dev) ? &t->probe : NULL;
}

/* The decode attention's marks buffer, or NULL. */
static long long *trace_attn(const cuda_trace *t) {
    return t ? t->attn_dev : NULL;
}

/* The blk marks of kernel k (BK_*) of layer l in a one-token step, or NULL. */
static long long *trace_blk(const cuda_trace *t, int T, int l, int k) {
    if (!t || !t->bt_dev || T != 1 || l != t->o.blk_layer) return NULL;
    return t->bt_dev + (size_t)k * BT_BLOCKS * BT_MARKS;
}

/* The next one-token projection launch gets kernel k's blk marks (k < 0: none, for
 * a launch skipped or not on the TMA kernel, which leaves them unconsumed). */
static void trace_blk_next(cuda_trace *t, int T, int l, int k) {
    if (t) t->probe.bt_next = k < 0 ? NULL : trace_blk(t, T, l, k);
}

/* Around a decode graph's launch in slot i: the timing events. */
static lpx_status trace_graph_begin(const cuda_trace *t, int i, cudaStream_t s) {
    if (t && t->ev[i][0]) LPX_CUDA_TRY(cudaEventRecord(t->ev[i][0], s));
    return LPX_OK;
}
static lpx_status trace_graph_end(const cuda_trace *t, int i, cudaStream_t s) {
    if (t && t->ev[i][0]) LPX_CUDA_TRY(cudaEventRecord(t->ev[i][1], s));
    return LPX_OK;
}

/* Writes the blk CSV (to blk_file, default stderr). */
static void trace_blk_write(const cuda_trace *t) {
    const char *path = t->o.blk_file[0] ? t->o.blk_file : NULL;
    FILE *f = path ? fopen(path, "w") : stderr;
    if (!f) {
        fprintf(stderr, "lpx cuda: trace blk_file %s: cannot write\n", path);
        return;
    }
    static const char *const kn[BK_N] = {"fused", "o", "gu", "down"};
    fprintf(f, "layer,kernel,block,sm,start,wait,staged,rows,end\n");
    for (int k = 0; k < BK_N; k++)
        for (int blk = 0; blk < BT_BLOCKS; blk++) {
            const long long *m = t->bt_host + ((size_t)k * BT_BLOCKS + blk) * BT_MARKS;
            if (m[1] == 0) continue; /* no such block */
            fprintf(f, "%d,%s,%d,%lld,%lld,%lld,%lld,%lld,%lld\n", t->o.blk_layer, kn[k], blk, m[0],
                    m[1], m[2], m[3], m[4], m[5]);
        }
    if (f != stderr) fclose(f);
}

/* After the step in slot i has ended: adds its traces and timings (decode: it ran
 * a decode graph; k0: of bucket 0, one token). */
static lpx_status trace_step_done(cuda_trace *t, int i, bool decode, bool k0) {
    if (!t || !decode || !k0) return LPX_OK;
    const int nl = t->n_layers;
    if (t->attn_dev) {
        LPX_CUDA_TRY(cudaMemcpy(t->attn_host, t->attn_dev, sizeof(long long) * AD_TRACE * nl,
                                cudaMemcpyDeviceToHost));
        for (int l = 0; l < nl; l++) {
            const long long *m = t->attn_host + (size_t)l * AD_TRACE;
            for (int j = 1; j < 8; j++)
                t->attn_phase[j] += (double)(m[j] - m[j - 1]);
            t->attn_phase[8] += (double)(m[9] - m[8]);
            /* gap from this layer's attention end to the next layer's start */
            if (l + 1 < nl) t->attn_phase[9] += (double)(m[AD_TRACE + 8] - m[9]);
            for (int j = 10; j < 13 && t->fused; j++)
                t->attn_phase[j] += (double)(m[j] - m[8]);
        }
        t->attn_traced++;
    }
    if (t->probe.slots && t->probe.n == t->probe.cap) {
        const int n = t->probe.cap;
        LPX_CUDA_TRY(cudaMemcpy(t->mv_host, t->probe.slots, sizeof(long long) * MV_TRACE * n,
                                cudaMemcpyDeviceToHost));
        for (int j = 0; j < n; j++) {
            const long long *m = t->mv_host + (size_t)MV_TRACE * j;
            const int nk = t->fused ? 3 : 4, kind = 4 - nk + j % nk;
            double *ph = t->mv_phase[kind];
            for (int q = 0; q < 4; q++)
                ph[q] += (double)m[2 + q];
            ph[4] += (double)(m[6] - m[1]);
            if (j > 0 && kind != 1) ph[5] += (double)(m[1] - m[6 - MV_TRACE]);
        }
        t->mv_traced++;
    }
    if (t->bt_dev && ++t->bt_steps == 64) {
        LPX_CUDA_TRY(cudaMemcpy(t->bt_host, t->bt_dev,
                                sizeof(long long) * BK_N * BT_BLOCKS * BT_MARKS,
                                cudaMemcpyDeviceToHost));
        trace_blk_write(t);
    }
    if (t->ev[i][0]) {
        float ms = 0.0f;
        LPX_CUDA_TRY(cudaEventElapsedTime(&ms, t->ev[i][0], t->ev[i][1]));
        t->graph_ms += ms;
        t->graph_steps++;
    }
    return LPX_OK;
}

#endif
