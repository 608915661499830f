/* A model file cut or rewritten in place while lpx reads it through its mapping raises
 * SIGBUS; this handler says so, naming the file, instead of a bare "Bus error". */
#ifndef LPX_CLI_SIGBUS_H
#define LPX_CLI_SIGBUS_H

/* Installs the handler for the model at path (the last one given wins). */
void lpx_cli_sigbus_model(const char *path);

#endif
