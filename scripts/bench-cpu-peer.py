"""llama.cpp's side of scripts/bench-cpu-peer.sh: the same two figures as
`lpx bench --device cpu -p P -n N -b 1 -t T -r R`, measured the same way, through
llama-cpp-python's low-level API (ctypes over libllama; no sampling, no Python
loop in the timed calls beyond one llama_decode per step).

  pp: one llama_decode of P random token ids at positions 0..P-1 of an empty
      cache, logits of the last token only (lpx's prefill step asks for the
      same one row); wall time of that call.
  tg: P random tokens prefilled (untimed: lpx bench decodes at depth P), then N
      steps of one random token each, logits of it, wall time of the N calls.
      lpx's step also picks the greedy token from those logits (an argmax over
      the vocabulary, ~0.02 ms of a ~9 ms step); llama.cpp's does not.

Each: one untimed warm-up, then R repetitions, the median printed in tok/s (as
lpx bench does). Token ids come from a fixed-seed generator, all below the
vocabulary size, none of them special. The cache is cleared between
repetitions. Prints one line: `peer pp<P> <tok/s> tg<N> <tok/s> fa=<0|1>`
plus llama.cpp's system info on stderr.
"""

import argparse
import ctypes
import random
import statistics
import sys
import time

import llama_cpp as L


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", required=True)
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-r", type=int, default=5)
    a = ap.parse_args()

    L.llama_backend_init()
    quiet = L.llama_log_callback(lambda *args: None)  # kept alive: libllama holds it
    L.llama_log_set(quiet, ctypes.c_void_p(0))
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = L.llama_model_load_from_file(a.m.encode(), mp)
    if not model:
        print("peer: cannot load " + a.m, file=sys.stderr)
        return 1
    cp = L.llama_context_default_params()
    cp.n_ctx = a.p + a.n + 64
    cp.n_batch = cp.n_ubatch = max(a.p, 512)
    cp.n_threads = cp.n_threads_batch = a.t
    cp.no_perf = False
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        print("peer: cannot create a context", file=sys.stderr)
        return 1
    mem = L.llama_get_memory(ctx)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    rng = random.Random(1)
    batch = L.llama_batch_init(max(a.p, 1), 0, 1)

    def fill(n: int, pos0: int, last_logits: bool) -> None:
        batch.n_tokens = n
        for i in range(n):
            batch.token[i] = rng.randrange(256, n_vocab)
            batch.pos[i] = pos0 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if (last_logits and i == n - 1) else 0

    def decode() -> None:
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    pp, tg = [], []
    for rep in range(-1, a.r):
        L.llama_memory_clear(mem, True)
        fill(a.p, 0, True)
        t0 = time.perf_counter()
        decode()
        t1 = time.perf_counter()
        if rep >= 0:
            pp.append(a.p / (t1 - t0))
    for rep in range(-1, a.r):
        L.llama_memory_clear(mem, True)
        fill(a.p, 0, True)
        decode()
        total = 0.0
        for k in range(a.n):
            fill(1, a.p + k, True)
            t0 = time.perf_counter()
            decode()
            total += time.perf_counter() - t0
        if rep >= 0:
            tg.append(a.n / total)
    fa = L.llama_flash_attn_type_name(cp.flash_attn_type)
    print(L.llama_print_system_info().decode(), file=sys.stderr)
    print(
        "peer pp%d %.1f tg%d %.1f flash_attn=%s"
        % (a.p, statistics.median(pp), a.n, statistics.median(tg), fa.decode() if fa else "?")
    )
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
