/* The developer strings of the backends, read from the environment in one place:
 * LPX_CUDA_TUNE (overrides of the measured tuning) and LPX_CUDA_TRACE (tracing)
 * for the CUDA backend, LPX_CPU_TUNE (kernel choice) for the CPU backend;
 * docs/dev.md lists their keys. The library reads no environment. */
#ifndef LPX_CLI_DEV_ENV_H
#define LPX_CLI_DEV_ENV_H

/* The strings for a device ("cuda", "cuda:N"; NULL or "" the engine's default, a GPU
 * if one answers; anything else is the CPU): each the variable's value when it is
 * set and non-empty, else NULL (the CPU backend has no tracing: its trace is always
 * NULL). */
void lpx_cli_dev_env(const char *device, const char **tune, const char **trace);

#endif
