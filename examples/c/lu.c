/*
 * lu: SSOR sweeps over a 3-D grid of 5 unknowns per point, like NPB LU (the hard case for
 * incremental checkpointing, which saves only about 40% there): every step rewrites almost
 * every page of the state.
 *
 * Step t is one symmetric SOR sweep (lower-triangular pass in ascending order, then the
 * upper-triangular pass in descending order) of a 7-point Laplacian with a source term that
 * moves with t, so the solution never settles and keeps changing everywhere. The boundary
 * planes stay fixed.
 *
 *   ECKPT_DIR=/dev/shm/ck ./lu -m 512 -s 20 -k 5 -l lu.log
 */

/* First: it sets the feature-test macros the system headers read. */
#include "example.h"

#include <math.h>

#define VARS 5
#define OMEGA 1.2

/* One relaxation of point (i, j, k); returns the squared size of the change. */
static double relax(double *u, size_t n, size_t i, size_t j, size_t k, uint64_t t) {
    size_t sx = VARS, sy = n * VARS, sz = n * n * VARS;
    double *p = u + ((k * n + j) * n + i) * VARS;
    double change = 0.0;
    /* The source of unknown m is 0.01 sin(phase + m), from one sin and one cos per point via
     * sin(a + m) = sin a cos m + cos a sin m: five sin calls per point made the sweep twice as
     * slow at large sizes. */
    static const double cos_m[VARS] = {1.0, 0.54030230586813977, -0.41614683654714241, -0.98999249660044542,
                                       -0.65364362086361194};
    static const double sin_m[VARS] = {0.0, 0.84147098480789650, 0.90929742682568170, 0.14112000805986721,
                                       -0.75680249530792825};
    double phase = 0.3 * (double)t + 0.1 * (double)(i + 2 * j + 3 * k);
    double sin_phase = sin(phase), cos_phase = cos(phase);
    for (int m = 0; m < VARS; m++) {
        double neighbours = p[m - sx] + p[m + sx] + p[m - sy] + p[m + sy] + p[m - sz] + p[m + sz];
        double source = 0.01 * (sin_phase * cos_m[m] + cos_phase * sin_m[m]);
        /* A weak coupling of the 5 unknowns, as in LU's block systems. */
        double coupling = 0.05 * p[(m + 1) % VARS];
        double target = (neighbours + source + coupling) / 6.05;
        double delta = OMEGA * (target - p[m]);
        p[m] += delta;
        change += delta * delta;
    }
    return change;
}

int main(int argc, char **argv) {
    struct example ex;
    example_parse(&ex, argc, argv, "lu.%r.log");

    size_t bytes = (size_t)ex.mib << 20;
    size_t n = (size_t)cbrt((double)(bytes - EXAMPLE_PAGE) / (VARS * sizeof(double)));
    if (n < 3) {
        fprintf(stderr, "%s: -m %lu is too small for a grid\n", ex.prog, ex.mib);
        return 2;
    }
    int restored = example_start(&ex, n * n * n * VARS * sizeof(double));
    double *u = (double *)(ex.region + EXAMPLE_PAGE);

    if (restored == 0) {
        uint64_t rng = ex.seed;
        for (size_t i = 0; i < n * n * n * VARS; i++)
            u[i] = example_uniform(&rng);
    }

    char line[128];
    while (ex.header->step < ex.steps) {
        uint64_t t = ex.header->step;
        double change = 0.0;
        for (size_t k = 1; k + 1 < n; k++)
            for (size_t j = 1; j + 1 < n; j++)
                for (size_t i = 1; i + 1 < n; i++)
                    change += relax(u, n, i, j, k, t);
        for (size_t k = n - 2; k >= 1; k--)
            for (size_t j = n - 2; j >= 1; j--)
                for (size_t i = n - 2; i >= 1; i--)
                    change += relax(u, n, i, j, k, t);
        /* %a prints the exact bits, so the log shows any divergence after a restart. */
        snprintf(line, sizeof line, "step %llu change %a\n", (unsigned long long)t, change);
        example_step_done(&ex, line);
    }
    example_finish(&ex);
    return 0;
}
