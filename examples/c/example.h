/*
 * What the C examples (mat.c, lu.c) share: options, the restart-aware setup, the per-step
 * log and checkpoint, the final checksum. Each example owns one page-aligned region whose
 * first page is a header holding the step counter, so the counter is restored together with
 * the data it describes.
 *
 * The append-only log gets one line per completed step, written right after the step and
 * before the step counter moves on. eckpt cuts an append file back to its checkpointed length
 * at restart, and that length always matches the restored counter, so after any number of
 * crashes and restarts every step's line is in the log exactly once.
 */

#ifndef ECKPT_EXAMPLE_H
#define ECKPT_EXAMPLE_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "eckpt.h"

#define EXAMPLE_PAGE 4096

/* The first page of the protected region. */
struct example_header {
    /* Steps completed so far: the loop resumes here after a restart. */
    uint64_t step;
};

struct example {
    const char *prog;
    /* Protected state in MiB (header page included). */
    unsigned long mib;
    unsigned long steps;
    /* Checkpoint every `interval` steps (and after the last one). */
    unsigned long interval;
    /* Checkpoint by time instead: eckpt_snapshot() every step (ECKPT_INTERVAL says how
     * often it checkpoints), and after the last step. */
    int by_time;
    const char *log_path;
    /* Optional input file: its bytes seed the initial state and eckpt checks at restart
     * that it did not change. */
    const char *input_path;
    /* Optional trace of restart/checkpoint boundaries, for tests that kill the process and
     * want to know where the kill landed. Not protected: it records every attempt. */
    const char *trace_path;
    int log_fd;
    int trace_fd;
    uint64_t seed;
    /* The protected region: header page, then the example's data. */
    unsigned char *region;
    size_t region_len;
    struct example_header *header;
    /* Wall seconds this process spent inside eckpt_snapshot()/eckpt_checkpoint(): what
     * checkpointing cost the computation, measured in the run itself. */
    double checkpoint_seconds;
};

static void example_usage(const struct example *ex, const char *what) {
    fprintf(stderr,
            "%s: %s\n"
            "usage: %s [-m MiB] [-s steps] [-k interval | -a] [-l log] [-i input] [-t trace]\n"
            "  -m  protected state size in MiB (default 16)\n"
            "  -s  steps to run (default 100)\n"
            "  -k  checkpoint every k steps and after the last (default 10)\n"
            "  -a  checkpoint by time: eckpt_snapshot() every step (ECKPT_INTERVAL), and after the last\n"
            "  -l  append-only log, one line per step (default <prog>.%%r.log)\n"
            "  -i  input file: seeds the data; restart refuses if it changed\n"
            "  -t  trace file of restart/checkpoint boundaries (for fault-injection tests)\n"
            "%%r in a file name is the rank (ECKPT_RANK, or the MPI launcher's).\n"
            "ECKPT_DIR, ECKPT_RANK, ECKPT_TRACK configure the checkpoint store; ECKPT_CLUSTER and\n"
            "ECKPT_WORLD checkpoint into a running `eckpt up` cluster instead (`eckpt run` sets them).\n",
            ex->prog, what, ex->prog);
    exit(2);
}

static unsigned long example_number(struct example *ex, const char *text) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (errno || end == text || *end || v == 0)
        example_usage(ex, "options take positive integers");
    return v;
}

static void example_die(const struct example *ex, const char *what) {
    fprintf(stderr, "%s: %s: %s\n", ex->prog, what, strerror(errno));
    exit(1);
}

/* An eckpt call failed: say which, the code's meaning and the library's full message. */
static void example_check(const struct example *ex, int rc, const char *what) {
    if (rc < 0) {
        fprintf(stderr, "%s: %s failed: %s: %s\n", ex->prog, what, eckpt_strerror(rc), eckpt_last_error());
        exit(1);
    }
}

static void example_write_all(const struct example *ex, int fd, const char *text, size_t len, const char *what) {
    while (len > 0) {
        ssize_t n = write(fd, text, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            example_die(ex, what);
        }
        text += n;
        len -= (size_t)n;
    }
}

/* One trace line, prefixed with CLOCK_MONOTONIC nanoseconds (tests estimate how long a
 * checkpoint takes from them). */
static void example_trace(const struct example *ex, const char *format, ...) {
    if (ex->trace_fd < 0)
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    char line[160];
    int len = snprintf(line, sizeof line, "%lld ", (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
    va_list args;
    va_start(args, format);
    len += vsnprintf(line + len, sizeof line - (size_t)len, format, args);
    va_end(args);
    example_write_all(ex, ex->trace_fd, line, (size_t)len, "trace");
}

/* 64-bit FNV-1a over 8-byte words (the region is page-sized, so a multiple of 8): a cheap,
 * order-sensitive fingerprint of the final state, running at memory speed. */
static uint64_t example_hash(const void *data, size_t len) {
    const uint64_t *words = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len / 8; i++)
        h = (h ^ words[i]) * 0x100000001b3ull;
    return h;
}

/* xorshift64*: a deterministic generator for the initial data. */
static uint64_t example_random(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 0x2545f4914f6cdd1dull;
}

/* A double in [0, 1). */
static inline double example_uniform(uint64_t *state) {
    return (double)(example_random(state) >> 11) * 0x1.0p-53;
}

/* This process's rank as the launcher says (eckpt run, mpirun, srun), 0 without one. */
static unsigned long example_rank(void) {
    const char *names[] = {"ECKPT_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v)
            return strtoul(v, NULL, 10);
    }
    return 0;
}

/* `path` with every "%r" replaced by the rank: one file per rank from one command line. */
static const char *example_rank_path(const struct example *ex, const char *path) {
    if (!path || !strstr(path, "%r"))
        return path;
    char rank[24];
    snprintf(rank, sizeof rank, "%lu", example_rank());
    size_t len = strlen(path) + 1;
    for (const char *p = strstr(path, "%r"); p; p = strstr(p + 2, "%r"))
        len += strlen(rank);
    char *out = malloc(len);
    if (!out)
        example_die(ex, "malloc");
    char *o = out;
    for (const char *p = path; *p;) {
        if (p[0] == '%' && p[1] == 'r') {
            o = stpcpy(o, rank);
            p += 2;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return out;
}

static void example_parse(struct example *ex, int argc, char **argv, const char *default_log) {
    memset(ex, 0, sizeof *ex);
    ex->prog = argv[0];
    ex->mib = 16;
    ex->steps = 100;
    ex->interval = 10;
    ex->log_path = default_log;
    ex->log_fd = -1;
    ex->trace_fd = -1;
    int c;
    while ((c = getopt(argc, argv, "m:s:k:al:i:t:")) != -1) {
        switch (c) {
        case 'm': ex->mib = example_number(ex, optarg); break;
        case 's': ex->steps = example_number(ex, optarg); break;
        case 'k': ex->interval = example_number(ex, optarg); break;
        case 'a': ex->by_time = 1; break;
        case 'l': ex->log_path = optarg; break;
        case 'i': ex->input_path = optarg; break;
        case 't': ex->trace_path = optarg; break;
        default: example_usage(ex, "unknown option");
        }
    }
    if (optind != argc)
        example_usage(ex, "unexpected argument");
    ex->log_path = example_rank_path(ex, ex->log_path);
    ex->input_path = example_rank_path(ex, ex->input_path);
    ex->trace_path = example_rank_path(ex, ex->trace_path);
}

/* The seed of the initial data: fixed, or the FNV-1a of the input file's bytes. */
static uint64_t example_seed(const struct example *ex) {
    uint64_t h = 0xcbf29ce484222325ull;
    if (!ex->input_path)
        return h;
    FILE *f = fopen(ex->input_path, "rb");
    if (!f)
        example_die(ex, ex->input_path);
    int c;
    while ((c = getc(f)) != EOF)
        h = (h ^ (uint64_t)c) * 0x100000001b3ull;
    fclose(f);
    /* xorshift must not start at zero. */
    return h ? h : 1;
}

/*
 * Allocates `data_len` bytes of page-aligned state after a header page, protects it with the
 * log (and input) files, and restores the latest checkpoint if there is one. Returns the
 * restored epoch (0 on a fresh start: the caller then initialises its data).
 */
static int example_start(struct example *ex, size_t data_len) {
    ex->region_len = (EXAMPLE_PAGE + data_len + EXAMPLE_PAGE - 1) / EXAMPLE_PAGE * EXAMPLE_PAGE;
    void *region;
    /* Page-aligned private memory: eckpt tracks writes in the kernel and saves only the
     * pages written since the previous epoch. */
    if ((errno = posix_memalign(&region, EXAMPLE_PAGE, ex->region_len)))
        example_die(ex, "posix_memalign");
    ex->region = region;
    ex->header = region;
    ex->seed = example_seed(ex);

    ex->log_fd = open(ex->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (ex->log_fd < 0)
        example_die(ex, ex->log_path);
    if (ex->trace_path) {
        ex->trace_fd = open(ex->trace_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (ex->trace_fd < 0)
            example_die(ex, ex->trace_path);
    }

    example_check(ex, eckpt_init(NULL), "eckpt_init");
    example_check(ex, eckpt_protect(0, ex->region, ex->region_len), "eckpt_protect");
    example_check(ex, eckpt_protect_file(ex->log_path, ECKPT_FILE_APPEND), "eckpt_protect_file(log)");
    if (ex->input_path)
        example_check(ex, eckpt_protect_file(ex->input_path, ECKPT_FILE_INPUT), "eckpt_protect_file(input)");

    example_trace(ex, "restart-begin\n");
    int epoch = eckpt_restart();
    example_check(ex, epoch, "eckpt_restart");
    example_trace(ex, "restart-end %d\n", epoch);
    if (epoch > 0) {
        fprintf(stderr, "%s: restarted from epoch %d at step %llu\n", ex->prog, epoch,
                (unsigned long long)ex->header->step);
    } else {
        /* Nothing checkpointed yet: whatever an earlier attempt logged before crashing
         * belongs to steps that will run again. */
        if (ftruncate(ex->log_fd, 0) < 0)
            example_die(ex, ex->log_path);
        /* posix_memalign does not clear: zero the header and the tail padding so that the
         * checksum only depends on what the example computes. */
        memset(ex->region, 0, ex->region_len);
    }
    return epoch;
}

/* Logs the step just computed, counts it, and checkpoints every `interval` steps (or when
 * eckpt_snapshot() decides, with -a) and after the last. The line goes straight to the file
 * (no stdio buffer) so that the checkpoint records a log length that matches the step
 * counter it saves. */
static double example_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void example_step_done(struct example *ex, const char *line) {
    example_write_all(ex, ex->log_fd, line, strlen(line), ex->log_path);
    uint64_t done = ++ex->header->step;
    double begun = example_now();
    if (ex->by_time && done != ex->steps) {
        example_check(ex, eckpt_snapshot(), "eckpt_snapshot");
    } else if (ex->by_time || done % ex->interval == 0 || done == ex->steps) {
        example_trace(ex, "checkpoint-begin %llu\n", (unsigned long long)done);
        int epoch = eckpt_checkpoint();
        example_check(ex, epoch, "eckpt_checkpoint");
        example_trace(ex, "checkpoint-end %d\n", epoch);
    }
    ex->checkpoint_seconds += example_now() - begun;
}

/* Prints the fingerprint of the whole protected region and releases eckpt, once the last
 * checkpoint is committed (in cluster mode: erasure-coded across the nodes). */
static void example_finish(struct example *ex) {
    printf("checksum: %016llx\n", (unsigned long long)example_hash(ex->region, ex->region_len));
    example_check(ex, eckpt_wait(), "eckpt_wait");
    example_check(ex, eckpt_finalize(), "eckpt_finalize");
    close(ex->log_fd);
    if (ex->trace_fd >= 0)
        close(ex->trace_fd);
    free(ex->region);
}

#endif /* ECKPT_EXAMPLE_H */
