/*
 * stencil: a 2-D heat diffusion (Jacobi, 5-point stencil) decomposed over an MPI process
 * grid, with a halo exchange every step — the communication pattern of most HPC codes.
 *
 * Each rank owns a TILE x TILE block of the global plate plus a one-cell halo: two
 * temperature grids (the current step's and the next) and the plate's conductivity, which
 * never changes after the start — all in one page-aligned protected region whose first page
 * holds the step counter. Incremental checkpoints store the grids written since the last
 * epoch, not the conductivity. Every step exchanges halos with the four neighbours
 * (MPI_Sendrecv), relaxes the interior into the other grid and logs one line with a
 * fingerprint of the tile. The initial plate depends only on global coordinates, so the
 * result is the same for any process grid.
 *
 * Under `eckpt run --launcher mpirun` the ranks checkpoint into the cluster (ECKPT_CLUSTER,
 * set by eckpt run; the rank and job size come from MPI's variables) and resume from the
 * last committed epoch after a node loss, with the same final checksums and logs as an
 * uninterrupted run. It also prints the mean halo-exchange time every 50 steps: ranks that
 * share a node exchange through shared memory, others over the network.
 *
 *   eckpt run --launcher mpirun -n 8 -- ./stencil -m 16 -s 400 -a -l stencil.%r.log
 */

#include "../c/example.h"

#include <math.h>
#include <mpi.h>

/* Halo-exchange timing is reported over windows of this many steps. */
#define HALO_WINDOW 50

/* The global plate's initial temperature at (gx, gy): hot spots on a cool plate. */
static double initial(long gx, long gy, long side) {
    double x = (double)gx / (double)side, y = (double)gy / (double)side;
    double t = 0.25 * (x + y);
    double dx = x - 0.3, dy = y - 0.6;
    if (dx * dx + dy * dy < 0.01)
        t += 100.0;
    dx = x - 0.7, dy = y - 0.25;
    if (dx * dx + dy * dy < 0.02)
        t += 50.0;
    return t;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    struct example ex;
    example_parse(&ex, argc, argv, "stencil.%r.log");
    /* Three (TILE + 2)^2 arrays of doubles fill the requested size after the header page. */
    size_t bytes = (size_t)ex.mib << 20;
    size_t stride = (size_t)sqrt((double)(bytes - EXAMPLE_PAGE) / (3.0 * sizeof(double)));
    if (stride < 8) {
        fprintf(stderr, "%s: -m %lu is too small\n", ex.prog, ex.mib);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t tile = stride - 2;

    int dims[2] = {0, 0}, periods[2] = {0, 0}, coords[2];
    MPI_Dims_create(world, 2, dims);
    MPI_Comm grid;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &grid);
    MPI_Cart_coords(grid, rank, 2, coords);
    int up, down, left, right;
    MPI_Cart_shift(grid, 0, 1, &up, &down);
    MPI_Cart_shift(grid, 1, 1, &left, &right);
    long side = (long)tile * (dims[0] > dims[1] ? dims[0] : dims[1]);

    int restored = example_start(&ex, 3 * stride * stride * sizeof(double));
    double *grids[2];
    grids[0] = (double *)(ex.region + EXAMPLE_PAGE);
    grids[1] = grids[0] + stride * stride;
    double *kappa = grids[1] + stride * stride;
    if (restored == 0) {
        for (size_t i = 0; i < stride; i++)
            for (size_t j = 0; j < stride; j++) {
                long gy = (long)coords[0] * (long)tile + (long)i - 1, gx = (long)coords[1] * (long)tile + (long)j - 1;
                double t = (gy < 0 || gx < 0 || gy >= side || gx >= side) ? 0.0 : initial(gx, gy, side);
                grids[0][i * stride + j] = grids[1][i * stride + j] = t;
                /* Two materials: a slow-conducting band across the plate. */
                kappa[i * stride + j] = (gy > side / 3 && gy < side / 2) ? 0.05 : 0.2;
            }
    }

    MPI_Datatype column;
    MPI_Type_vector((int)tile, 1, (int)stride, MPI_DOUBLE, &column);
    MPI_Type_commit(&column);

    double started = MPI_Wtime(), halo_seconds = 0.0;
    unsigned long halo_steps = 0, window_start = ex.header->step;
    char line[160];
    while (ex.header->step < ex.steps) {
        uint64_t step = ex.header->step;
        double *cur = grids[step % 2], *next = grids[(step + 1) % 2];
        /* Timed from a common start: the exchange itself, not the wait for a slower rank. */
        MPI_Barrier(grid);
        double t0 = MPI_Wtime();
        /* Rows to the neighbours above and below, columns to the left and right. */
        MPI_Sendrecv(cur + stride + 1, (int)tile, MPI_DOUBLE, up, 0, cur + (tile + 1) * stride + 1, (int)tile,
                     MPI_DOUBLE, down, 0, grid, MPI_STATUS_IGNORE);
        MPI_Sendrecv(cur + tile * stride + 1, (int)tile, MPI_DOUBLE, down, 1, cur + 1, (int)tile, MPI_DOUBLE, up, 1,
                     grid, MPI_STATUS_IGNORE);
        MPI_Sendrecv(cur + stride + 1, 1, column, left, 2, cur + stride + tile + 1, 1, column, right, 2, grid,
                     MPI_STATUS_IGNORE);
        MPI_Sendrecv(cur + stride + tile, 1, column, right, 3, cur + stride, 1, column, left, 3, grid,
                     MPI_STATUS_IGNORE);
        halo_seconds += MPI_Wtime() - t0;
        halo_steps++;

        for (size_t i = 1; i <= tile; i++)
            for (size_t j = 1; j <= tile; j++) {
                size_t c = i * stride + j;
                next[c] = cur[c] + kappa[c] * (cur[c - stride] + cur[c + stride] + cur[c - 1] + cur[c + 1] - 4.0 * cur[c]);
            }
        uint64_t h = 0;
        for (size_t i = 1; i <= tile; i++)
            h ^= example_hash(next + i * stride + 1, tile * sizeof(double)) + i;
        snprintf(line, sizeof line, "step %llu rank %d tile %016llx\n", (unsigned long long)step, rank,
                 (unsigned long long)h);
        example_step_done(&ex, line);

        if (halo_steps == HALO_WINDOW || ex.header->step == ex.steps) {
            printf("halo steps %lu-%llu%s: %.1f us per step\n", window_start, (unsigned long long)ex.header->step - 1,
                   restored ? " (resumed)" : "", 1e6 * halo_seconds / (double)halo_steps);
            fflush(stdout);
            halo_seconds = 0.0;
            halo_steps = 0;
            window_start = ex.header->step;
        }
    }

    /* A fingerprint of the whole plate: every tile's, combined in rank order. */
    uint64_t mine = example_hash(ex.region, ex.region_len), all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
    /* The slowest rank's time in checkpoint calls: the others wait for it at the next halo. */
    double in_checkpoints = 0.0;
    MPI_Reduce(&ex.checkpoint_seconds, &in_checkpoints, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("plate checksum: %016llx\n", (unsigned long long)all);
        /* Of this process's steps only (after a restart, of the steps since). */
        printf("elapsed: %.3f s\n", MPI_Wtime() - started);
        printf("in checkpoint calls: %.3f s\n", in_checkpoints);
    }
    example_finish(&ex);
    MPI_Type_free(&column);
    MPI_Comm_free(&grid);
    MPI_Finalize();
    return 0;
}
