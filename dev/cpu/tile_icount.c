/* One integer tile kernel alone, for dev/cpu/tile-icount.sh: the AVX2 tile of
 * TYPE (an lpx_dtype name) over a 576 x 1536 matrix (SmolLM2's ffn_down) and T
 * tokens, REPS times; the instructions it takes under callgrind, divided by
 * rows x activation blocks x REPS, are the kernel's cost a (row, block). */
#include "backend/cpu/cpu_qdot.h"
#include "format/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 576, COLS = 1536, REPS = 10 };

int main(int argc, char **argv) {
    lpx_dtype t = LPX_DT_COUNT;
    for (int i = 0; argc == 3 && i < LPX_DT_COUNT; i++)
        if (!strcmp(argv[1], lpx_dtype_name((lpx_dtype)i))) t = (lpx_dtype)i;
    const int T = argc == 3 ? atoi(argv[2]) : 0;
    cpu_qkernels k;
    if (t == LPX_DT_COUNT || T < 1 || T > CPU_QT_TOKENS || !cpu_qkernels_init(&k, "avx2") ||
        !k.tile[t]) {
        fprintf(stderr, "usage: tile_icount TYPE T (an integer-dot type, T 1..4; needs AVX2)\n");
        return 2;
    }
    const int64_t nb = COLS / 32;
    const size_t rb = (size_t)COLS / (size_t)lpx_dtype_block_elems(t) * lpx_dtype_block_bytes(t);
    uint8_t *w = calloc(ROWS, rb);
    lpx_blk_q8 *x = calloc((size_t)T * (size_t)nb, sizeof *x);
    if (!w || !x) return 1;
    float out[CPU_QT_TOKENS][CPU_QT_ROWS], sum = 0;
    for (int rep = 0; rep < REPS; rep++)
        for (int r = 0; r < ROWS; r += CPU_QT_ROWS) {
            k.tile[t](w + (size_t)r * rb, rb, CPU_QT_ROWS, x, nb, T, out);
            sum += out[0][0];
        }
    printf("%g %d\n", sum, ROWS * (int)nb * REPS); /* the sum keeps the calls */
    free(w);
    free(x);
    return 0;
}
