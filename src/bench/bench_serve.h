/* lpx bench serve: a load generator for any OpenAI-compatible server (docs/bench-serve.md). */
#ifndef LPX_BENCH_SERVE_H
#define LPX_BENCH_SERVE_H

/* argv[0] is "serve". Exit 0: the run happened (failed requests are in the report)
 * and at least one request succeeded; 1: failure; 2: usage error. */
int bench_serve_main(int argc, char **argv);

#endif
