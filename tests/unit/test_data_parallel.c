/* lpx_dp_plan_make (engine/data_parallel.h): the device and thread split of N engines,
 * the refusals of contradicting flags, and the placement of new work. lpx serve's end-to-end
 * behaviour is in tests/py/test_serve_dp.py. */
#include "engine/data_parallel.h"
#include "test.h"

#include <string.h>
#include <unistd.h>

int main(void) {
    lpx_dp_plan p;
    /* One engine keeps device and threads as given (lpx serve without the flag). */
    CHECK(lpx_dp_plan_make(NULL, 0, 0, &p) == LPX_OK && p.n == 1 && !p.device[0] &&
          p.n_threads == 0);
    CHECK(lpx_dp_plan_make("cpu", 1, 3, &p) == LPX_OK && p.n == 1 && p.n_threads == 3 &&
          !strcmp(p.device[0], "cpu"));
    /* N CPU engines split the threads: the given total, else every core. */
    CHECK(lpx_dp_plan_make("cpu", 2, 5, &p) == LPX_OK && p.n == 2 && p.n_threads == 2);
    CHECK(!strcmp(p.device[0], "cpu") && !strcmp(p.device[1], "cpu"));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(lpx_dp_plan_make("cpu", 3, 0, &p) == LPX_OK && p.n == 3 &&
          p.n_threads == (cores / 3 > 0 ? cores / 3 : 1));
    /* "cuda" with N: cuda:0..N-1 (the names need no CUDA build). */
    CHECK(lpx_dp_plan_make("cuda", 3, 0, &p) == LPX_OK && p.n == 3 &&
          !strcmp(p.device[2], "cuda:2") && p.n_threads == 0);
    /* A list sets N; -dp may repeat it. */
    CHECK(lpx_dp_plan_make("cpu,cpu", 0, 4, &p) == LPX_OK && p.n == 2 && p.n_threads == 2);
    CHECK(lpx_dp_plan_make("cpu,cpu", 2, 0, &p) == LPX_OK && p.n == 2);
    /* An entry of digits is a GPU ordinal: cuda:0,2 is cuda:0 and cuda:2, cuda:0,0 two
     * engines on one GPU (the names are set before the backend check, which a CPU-only
     * build fails) */
    (void)lpx_dp_plan_make("cuda:0,2", 0, 0, &p);
    CHECK(p.n == 2 && !strcmp(p.device[0], "cuda:0") && !strcmp(p.device[1], "cuda:2"));
    (void)lpx_dp_plan_make("cuda:0,0", 0, 0, &p);
    CHECK(p.n == 2 && !strcmp(p.device[1], "cuda:0"));
    CHECK(lpx_dp_plan_make("cpu,12345678901234567890123456789", 0, 0, &p) == LPX_ERR_INVALID_ARG);
    /* Refusals. */
    CHECK(lpx_dp_plan_make("cpu,cpu", 3, 0, &p) == LPX_ERR_INVALID_ARG &&
          strstr(lpx_last_error(), "contradicts"));
    CHECK(lpx_dp_plan_make("cuda:1", 2, 0, &p) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_dp_plan_make("cpu", 65, 0, &p) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_dp_plan_make("cpu", -1, 0, &p) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_dp_plan_make("cpu", 4, 3, &p) == LPX_ERR_INVALID_ARG &&
          strstr(lpx_last_error(), "--threads 3"));
    CHECK(lpx_dp_plan_make("cpu,,cpu", 0, 0, &p) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_dp_plan_make("cpu,nope", 0, 0, &p) == LPX_ERR_INVALID_ARG);
    char many[64 * 4 + 8] = "cpu";
    for (int i = 1; i < 65; i++)
        strcat(many, ",cpu");
    CHECK(lpx_dp_plan_make(many, 0, 0, &p) == LPX_ERR_INVALID_ARG &&
          strstr(lpx_last_error(), "more than 64"));
    /* Placement (serve's requests, batch's lines): the fewest in flight, ties low. */
    atomic_int load[4];
    const int v[4] = {3, 1, 1, 2};
    for (int i = 0; i < 4; i++)
        atomic_init(&load[i], v[i]);
    CHECK(lpx_dp_place(load, 4) == 1);
    CHECK(lpx_dp_place(load, 1) == 0);
    atomic_store(&load[3], 0);
    CHECK(lpx_dp_place(load, 4) == 3 && lpx_dp_place(load, 3) == 1);
    TEST_DONE();
}
