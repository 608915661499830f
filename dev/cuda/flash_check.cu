/* Workshop check of the flash prefill kernel (src/backend/cuda/flash_prefill.cuh)
 * alone: random queries and a random paged KV cache (shuffled block ids, a layer
 * other than 0), batches that mix prefill chunks after earlier context with
 * one-token sequences, head_dim 64/128/256, groups 1..8, odd block sizes and a
 * sliding window; every output compared with a float64 reference, the output
 * poisoned before each run. Then the time of one launch at the Qwen3-0.6B shape
 * (512 tokens, 16 heads over 8 KV heads of 128), median of 50.
 * Not part of the product build: dev/cuda/build-flash-check.sh. */
#include "backend/cuda/flash_prefill.cuh"

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "check_util.h"

struct seq_spec {
    int before, chunk; /* context already cached, tokens in this step */
};

/* Returns the max per-row relative L2 error; times the launch when reps > 0. */
static double run_case(const char *name, int hd, int n_heads, int n_kv, int bs, int window,
                       std::vector<seq_spec> seqs, int reps) {
    const int n_layers = 2, layer = 1, G = n_heads / n_kv, ns = (int)seqs.size();
    int T = 0, max_blocks = 0, n_blocks = 0;
    std::vector<int> seq_start(ns + 1, 0);
    for (int s = 0; s < ns; s++) {
        T += seqs[s].chunk;
        seq_start[s + 1] = T;
        const int nb = (seqs[s].before + seqs[s].chunk + bs - 1) / bs;
        max_blocks = std::max(max_blocks, nb);
        n_blocks += nb;
    }
    kv_geom g;
    g.n_heads = n_heads;
    g.n_kv = n_kv;
    g.head_dim = hd;
    g.block_size = bs;
    g.bs_shift = __builtin_ctz((unsigned)bs);
    g.n_layers = n_layers;
    g.block_stride = (int64_t)n_layers * 2 * n_kv * bs * hd;
    /* shuffled block ids */
    std::vector<int> ids(n_blocks);
    for (int i = 0; i < n_blocks; i++) ids[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        frand();
        std::swap(ids[i], ids[(rng >> 33) % (i + 1)]);
    }
    std::vector<int32_t> table((size_t)ns * max_blocks, 0), tok_seq(T), pos(T);
    int next = 0;
    for (int s = 0; s < ns; s++) {
        const int len = seqs[s].before + seqs[s].chunk;
        for (int i = 0; i < (len + bs - 1) / bs; i++) table[(size_t)s * max_blocks + i] = ids[next++];
        for (int t = seq_start[s]; t < seq_start[s + 1]; t++) {
            tok_seq[t] = s;
            pos[t] = seqs[s].before + (t - seq_start[s]);
        }
    }
    const size_t kv_elems = (size_t)n_blocks * g.block_stride;
    std::vector<uint16_t> kv(kv_elems);
    for (auto &v : kv) v = f2bf_h(frand());
    std::vector<float> q((size_t)T * n_heads * hd);
    for (auto &v : q) v = 2.0f * frand();
    std::vector<int32_t> tiles(2 * T + 8);
    const int n_tiles = flash_tiles(seq_start.data(), ns, G, tiles.data());

    float *dq;
    bf16 *dkv, *dout;
    int32_t *dtiles, *dseq, *dpos, *dbt;
    CK(cudaMalloc(&dq, q.size() * 4));
    CK(cudaMalloc(&dkv, kv_elems * 2));
    CK(cudaMalloc(&dout, (size_t)T * n_heads * hd * 2));
    CK(cudaMalloc(&dtiles, n_tiles * 4));
    CK(cudaMalloc(&dseq, T * 4));
    CK(cudaMalloc(&dpos, T * 4));
    CK(cudaMalloc(&dbt, table.size() * 4));
    CK(cudaMemcpy(dq, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dkv, kv.data(), kv_elems * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dtiles, tiles.data(), n_tiles * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dseq, tok_seq.data(), T * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dpos, pos.data(), T * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dbt, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xff, (size_t)T * n_heads * hd * 2)); /* NaN: unwritten shows */
    if (flash_prefill(dout, dq, dkv, dtiles, n_tiles, dseq, dpos, dbt, max_blocks, g, layer,
                      window, kstream{0, true}) != LPX_OK) {
        fprintf(stderr, "%s: launch failed: %s\n", name, lpx_last_error());
        exit(1);
    }
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> out((size_t)T * n_heads * hd);
    CK(cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost));

    double worst = 0.0;
    std::vector<double> sc, o(hd);
    for (int t = 0; t < T; t++) {
        const int s = tok_seq[t], p = pos[t];
        const int lo = window > 0 ? std::max(0, p - window + 1) : 0;
        for (int h = 0; h < n_heads; h++) {
            const int kvh = h / G;
            const float *qr = &q[((size_t)t * n_heads + h) * hd];
            sc.assign(p + 1 - lo, 0.0);
            double mx = -1e300;
            for (int k = lo; k <= p; k++) {
                const int blk = table[(size_t)s * max_blocks + k / bs], slot = k % bs;
                const uint16_t *kr = &kv[blk * g.block_stride +
                                         ((((size_t)layer * 2) * n_kv + kvh) * bs + slot) * hd];
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)qr[i] * bf2f_h(kr[i]);
                sc[k - lo] = d / sqrt((double)hd);
                mx = std::max(mx, sc[k - lo]);
            }
            double den = 0;
            std::fill(o.begin(), o.end(), 0.0);
            for (int k = lo; k <= p; k++) {
                const double w = exp(sc[k - lo] - mx);
                den += w;
                const int blk = table[(size_t)s * max_blocks + k / bs], slot = k % bs;
                const uint16_t *vr = &kv[blk * g.block_stride +
                                         ((((size_t)layer * 2 + 1) * n_kv + kvh) * bs + slot) * hd];
                for (int i = 0; i < hd; i++) o[i] += w * bf2f_h(vr[i]);
            }
            double num = 0, nrm = 0;
            for (int i = 0; i < hd; i++) {
                const double ref = o[i] / den;
                const double got = bf2f_h(out[((size_t)t * n_heads + h) * hd + i]);
                if (!std::isfinite(got)) num = INFINITY;
                num += (got - ref) * (got - ref);
                nrm += ref * ref;
            }
            worst = std::max(worst, sqrt(num / std::max(nrm, 1e-30)));
        }
    }
    double us = 0;
    if (reps > 0) {
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        std::vector<float> ts;
        for (int r = 0; r < reps + 5; r++) {
            CK(cudaEventRecord(e0));
            flash_prefill(dout, dq, dkv, dtiles, n_tiles, dseq, dpos, dbt, max_blocks, g, layer,
                          window, kstream{0, true});
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 5) ts.push_back(ms);
        }
        std::sort(ts.begin(), ts.end());
        us = 1000.0 * ts[ts.size() / 2];
        CK(cudaGetLastError());
    }
    printf("%-34s T=%4d tiles=%3d max rel-L2 %.2e %s", name, T, n_tiles, worst,
           worst < 1e-2 ? "ok" : "FAIL");
    if (reps > 0) printf("  %.1f us/launch", us);
    printf("\n");
    cudaFree(dq);
    cudaFree(dkv);
    cudaFree(dout);
    cudaFree(dtiles);
    cudaFree(dseq);
    cudaFree(dpos);
    cudaFree(dbt);
    return worst;
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "--quick"); /* for the sanitizers */
    if (flash_prefill_init() != LPX_OK) {
        fprintf(stderr, "init: %s\n", lpx_last_error());
        return 1;
    }
    bool ok = true;
    ok &= run_case("hd128 G2 bs16 (qwen3)", 128, 16, 8, 16, 0, {{0, quick ? 70 : 512}}, quick ? 0 : 50) < 1e-2;
    ok &= run_case("hd128 G2 bs16 chunk after ctx + decode", 128, 16, 8, 16, 0,
                   {{100, 300}, {37, 1}, {0, 45}}, 0) < 1e-2;
    ok &= run_case("hd64 G7 bs16 (qwen2.5)", 64, 14, 2, 16, 0, {{0, 77}, {21, 1}, {37, 130}}, 0) < 1e-2;
    ok &= run_case("hd64 G4 bs32 (llama3.2)", 64, 32, 8, 32, 0, {{5, 200}}, 0) < 1e-2;
    ok &= run_case("hd64 G3 bs7 window 40 (smollm2)", 64, 9, 3, 7, 40, {{60, 99}, {3, 1}}, 0) < 1e-2;
    ok &= run_case("hd256 G8 bs16", 256, 8, 1, 16, 0, {{0, 150}, {70, 33}}, 0) < 1e-2;
    ok &= run_case("hd128 G1 bs5 window 17", 128, 4, 4, 5, 17, {{9, 61}}, 0) < 1e-2;
    if (!quick)
        ok &= run_case("hd128 G2 bs16 (qwen3) 2048", 128, 16, 8, 16, 0, {{0, 2048}}, 20) < 1e-2;
    printf("flash_check: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
