/*
 * mat: a matrix-multiply job in which few pages change per epoch: the case incremental
 * checkpointing is made for (incremental checkpoints about 99.9% smaller than full ones).
 *
 * State: C (n x n) and two large matrices A, B that never change after initialisation. Step s
 * recomputes one TILE x TILE block of C (tile s mod tiles) as C = C/2 + A_rows * B_cols / n,
 * so an epoch dirties about TILE pages per step however large the matrices are.
 *
 *   ECKPT_DIR=/dev/shm/ck ./mat -m 512 -s 200 -k 20 -l mat.log
 */

/* First: it sets the feature-test macros the system headers read. */
#include "example.h"

#include <math.h>

#define TILE 64

int main(int argc, char **argv) {
    struct example ex;
    example_parse(&ex, argc, argv, "mat.%r.log");

    /* Three n x n matrices of doubles fill the requested size after the header page. */
    size_t bytes = (size_t)ex.mib << 20;
    size_t n = (size_t)sqrt((double)(bytes - EXAMPLE_PAGE) / (3.0 * sizeof(double)));
    if (n < TILE) {
        fprintf(stderr, "%s: -m %lu is too small for a %d x %d tile\n", ex.prog, ex.mib, TILE, TILE);
        return 2;
    }
    int restored = example_start(&ex, 3 * n * n * sizeof(double));
    double *a = (double *)(ex.region + EXAMPLE_PAGE);
    double *b = a + n * n;
    double *c = b + n * n;

    if (restored == 0) {
        uint64_t rng = ex.seed;
        for (size_t i = 0; i < 2 * n * n; i++)
            a[i] = example_uniform(&rng) - 0.5;
    }

    size_t tiles_per_side = (n + TILE - 1) / TILE;
    size_t tiles = tiles_per_side * tiles_per_side;
    double row[TILE];
    char line[128];
    while (ex.header->step < ex.steps) {
        uint64_t step = ex.header->step;
        size_t t = step % tiles;
        size_t i0 = t / tiles_per_side * TILE, j0 = t % tiles_per_side * TILE;
        size_t i1 = i0 + TILE < n ? i0 + TILE : n, j1 = j0 + TILE < n ? j0 + TILE : n;
        for (size_t i = i0; i < i1; i++) {
            /* i-k-j order walks B along rows, the cache-friendly direction. */
            for (size_t j = j0; j < j1; j++)
                row[j - j0] = 0.0;
            for (size_t k = 0; k < n; k++) {
                double aik = a[i * n + k];
                const double *bk = b + k * n;
                for (size_t j = j0; j < j1; j++)
                    row[j - j0] += aik * bk[j];
            }
            for (size_t j = j0; j < j1; j++)
                c[i * n + j] = 0.5 * c[i * n + j] + row[j - j0] / (double)n;
        }
        /* A fingerprint of the tile just computed, so the log also shows the step's result. */
        uint64_t h = 0;
        for (size_t i = i0; i < i1; i++)
            h ^= example_hash(c + i * n + j0, (j1 - j0) * sizeof(double)) + i;
        snprintf(line, sizeof line, "step %llu tile %zu %016llx\n", (unsigned long long)step, t,
                 (unsigned long long)h);
        example_step_done(&ex, line);
    }
    example_finish(&ex);
    return 0;
}
