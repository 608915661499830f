/* The developer strings of the CUDA backend, read from the environment in one place:
 * LPX_CUDA_TUNE (overrides of the measured tuning) and LPX_CUDA_TRACE (tracing);
 * docs/dev.md lists their keys. The library reads no environment. */
#ifndef LPX_CLI_DEV_ENV_H
#define LPX_CLI_DEV_ENV_H

/* Each is the variable's value when it is set and non-empty, else NULL (the CPU
 * backend refuses non-empty strings, so unset ones are never passed). */
void lpx_cli_dev_env(const char **tune, const char **trace);

#endif
