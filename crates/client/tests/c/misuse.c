/*
 * A rank used carelessly, or attacked: each scenario is one sequence of C API calls that used
 * to end in a wrong restore, a deadlock or a file eckpt was never given being changed. The
 * test (tests/c_misuse.rs) runs `misuse SCENARIO` as real processes, with ECKPT_DIR and
 * ECKPT_RANK set and the working directory a fresh one, and checks what they print.
 *
 * Memory is page-aligned so that the kernel tracks writes (userfaultfd), as in real ranks.
 * Every line printed is "name value"; the test looks lines up by name.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "eckpt.h"

#define PAGE 4096
#define PAGES 64

static unsigned char *pages(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, PAGE, n * PAGE) != 0) {
        perror("posix_memalign");
        exit(2);
    }
    memset(p, 0, n * PAGE);
    return p;
}

/* A call that must succeed; the scenario cannot go on otherwise. */
static int must(const char *what, int rc) {
    if (rc < 0) {
        printf("failed %s: %d %s\n", what, rc, eckpt_last_error());
        exit(1);
    }
    return rc;
}

static void report(const char *what, int rc) {
    printf("%s %d %s\n", what, rc, rc < 0 ? eckpt_last_error() : "");
    fflush(stdout);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

/* The state the restart scenarios protect: PAGES pages as region 0. */
static unsigned char *init_state(void) {
    must("init", eckpt_init(NULL));
    unsigned char *state = pages(PAGES);
    must("protect", eckpt_protect(0, state, PAGES * PAGE));
    return state;
}

/* Prints the first byte of page `page` after a restart, as "page<N> <value>". */
static void restart_and_show(unsigned char *state, const int *shown, int count) {
    report("restart", eckpt_restart());
    for (int i = 0; i < count; i++) printf("page%d %d\n", shown[i], state[shown[i] * PAGE]);
}

/* A checkpoint that failed (here: by a panic over a Latin-1 file name) consumed the pages
 * written before it; a later successful epoch must still hold them. */
static int latin1_name(void) {
    unsigned char *state = init_state();
    mkdir("out", 0700);
    must("protect_dir", eckpt_protect_dir("out"));
    state[1 * PAGE] = 11;
    must("checkpoint 1", eckpt_checkpoint());
    state[3 * PAGE] = 33;
    write_file("out/caf\xe9.txt", "latin-1\n");
    report("checkpoint-latin1", eckpt_checkpoint());
    unlink("out/caf\xe9.txt");
    state[40 * PAGE] = 44;
    report("checkpoint-after", eckpt_checkpoint());
    return 0;
}

static int show_pages(void) {
    unsigned char *state = init_state();
    const int shown[] = {1, 3, 5, 40};
    restart_and_show(state, shown, 4);
    return 0;
}

/* A child made by fork() inherits the tracker's descriptors, which act on the parent's
 * memory: its calls must be refused, and its own eckpt_init for the parent's rank too. */
static int forked_child(void) {
    unsigned char *state = init_state();
    state[5 * PAGE] = 1;
    must("checkpoint 1", eckpt_checkpoint());
    state[5 * PAGE] = 55;
    pid_t child = fork();
    if (child == 0) {
        report("child-restart", eckpt_restart());
        report("child-checkpoint", eckpt_checkpoint());
        report("child-init-same-rank", eckpt_init(NULL));
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    report("parent-checkpoint", eckpt_checkpoint());
    return 0;
}

/* Holds rank 0 until its standard input closes. */
static int hold(void) {
    init_state();
    must("checkpoint", eckpt_checkpoint());
    printf("holding %d\n", (int)getpid());
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
    return 0;
}

static int second_holder(void) {
    report("second-init", eckpt_init(NULL));
    return 0;
}

/* An append file swapped for a link to another file between protect and restart: restart
 * must refuse, leaving the link's target as it was. */
static int append_link(int checkpoint_first) {
    must("init", eckpt_init(NULL));
    if (checkpoint_first) {
        write_file("app.log", "first lines\n");
        must("protect_file", eckpt_protect_file("app.log", ECKPT_FILE_APPEND));
        must("checkpoint", eckpt_checkpoint());
        return 0;
    }
    must("protect_file", eckpt_protect_file("app.log", ECKPT_FILE_APPEND));
    unlink("app.log");
    if (symlink("victim.txt", "app.log") != 0) {
        perror("symlink");
        return 2;
    }
    report("restart", eckpt_restart());
    return 0;
}

/* Run 1 checkpoints a region, a snapshot file and a directory; run 2 finds one of them
 * changed beyond repair and must refuse before touching memory. */
static int all_or_nothing(const char *phase) {
    unsigned char *state = init_state();
    if (strcmp(phase, "save") == 0) {
        write_file("snap.dat", "snapshot\n");
        mkdir("outdir", 0700);
        must("protect_file", eckpt_protect_file("snap.dat", ECKPT_FILE_SNAPSHOT));
        must("protect_dir", eckpt_protect_dir("outdir"));
        state[0] = 7;
        must("checkpoint", eckpt_checkpoint());
        return 0;
    }
    must("protect_file", eckpt_protect_file("snap.dat", ECKPT_FILE_SNAPSHOT));
    if (strcmp(phase, "dir-gone") == 0) {
        rmdir("outdir");
        write_file("outdir", "a file now\n");
    } else if (strcmp(phase, "snapshot-is-link") == 0) {
        must("protect_dir", eckpt_protect_dir("outdir"));
        unlink("snap.dat");
        write_file("elsewhere.dat", "not eckpt's\n");
        if (symlink("elsewhere.dat", "snap.dat") != 0) return 2;
    } else if (strcmp(phase, "read-only-region") == 0) {
        must("protect_dir", eckpt_protect_dir("outdir"));
        mprotect(state, PAGES * PAGE, PROT_READ);
    }
    report("restart", eckpt_restart());
    printf("page0 %d\n", state[0]);
    return 0;
}

static const char constant[PAGE] = "a const global";

static int unwritable(void) {
    must("init", eckpt_init(NULL));
    report("protect-const", eckpt_protect(1, (void *)constant, sizeof constant));
    void *ro = mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    report("protect-prot-read", eckpt_protect(2, ro, PAGE));
    report("protect-bogus", eckpt_protect(5, (void *)0x1000, (size_t)1 << 40));
    unsigned char *heap = pages(2);
    report("protect-past-end", eckpt_protect(6, heap, (size_t)1 << 40));
    must("protect-good", eckpt_protect(3, heap, 2 * PAGE));
    report("checkpoint", eckpt_checkpoint());
    return 0;
}

/* Run 1 protects regions 1, 2, 3; run 2 only 1 and 2. */
static int region_sets(const char *phase) {
    must("init", eckpt_init(NULL));
    unsigned char *state = pages(3);
    int regions = strcmp(phase, "save") == 0 ? 3 : 2;
    for (int id = 1; id <= regions; id++) must("protect", eckpt_protect(id, state + (id - 1) * PAGE, PAGE));
    if (regions == 3) {
        must("checkpoint", eckpt_checkpoint());
        return 0;
    }
    report("restart", eckpt_restart());
    return 0;
}

/* A SIGALRM handler that checkpoints, as HPC codes do on SIGTERM, firing while the main
 * loop is inside eckpt_checkpoint: it must be refused at once, never deadlock. */
static volatile sig_atomic_t refused, taken, other;
static int main_failed;

static void checkpoint_from_handler(int sig) {
    (void)sig;
    int rc = eckpt_checkpoint();
    if (rc == ECKPT_ESTATE && strstr(eckpt_last_error(), "signal handler") != NULL)
        refused++;
    else if (rc > 0)
        taken++;
    else
        other++;
}

static int signal_handler(void) {
    must("init", eckpt_init("track=hash"));
    size_t len = (size_t)32 << 20;
    unsigned char *big = pages(len / PAGE);
    must("protect", eckpt_protect(0, big, len));
    struct sigaction action = {0};
    action.sa_handler = checkpoint_from_handler;
    action.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &action, NULL);
    struct itimerval every = {{0, 3000}, {0, 3000}};
    setitimer(ITIMER_REAL, &every, NULL);
    for (int i = 0; i < 400 && refused < 3; i++) {
        big[(size_t)i * PAGE % len] = (unsigned char)i;
        if (eckpt_checkpoint() < 0) main_failed++;
    }
    struct itimerval stop = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &stop, NULL);
    printf("refused %d\ntaken %d\nother %d\nmain-failed %d\n", (int)refused, (int)taken, (int)other, main_failed);
    return 0;
}

static int bad_arguments(void) {
    report("init-block-2^31", eckpt_init("block_size=2147483648"));
    must("init", eckpt_init(NULL));
    unsigned char *state = pages(2);
    must("protect 0", eckpt_protect(0, state, 2 * PAGE));
    report("protect-overlap", eckpt_protect(7, state + PAGE, PAGE));
    mkdir("somedir", 0700);
    report("protect-dir-as-snapshot", eckpt_protect_file("somedir", ECKPT_FILE_SNAPSHOT));
    report("protect-empty-path", eckpt_protect_file("", ECKPT_FILE_APPEND));
    report("checkpoint", eckpt_checkpoint());
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: misuse SCENARIO [PHASE]\n");
        return 2;
    }
    const char *scenario = argv[1], *phase = argc > 2 ? argv[2] : "";
    if (strcmp(scenario, "latin1-name") == 0) return latin1_name();
    if (strcmp(scenario, "show-pages") == 0) return show_pages();
    if (strcmp(scenario, "forked-child") == 0) return forked_child();
    if (strcmp(scenario, "hold") == 0) return hold();
    if (strcmp(scenario, "second-holder") == 0) return second_holder();
    if (strcmp(scenario, "append-link") == 0) return append_link(strcmp(phase, "save") == 0);
    if (strcmp(scenario, "all-or-nothing") == 0) return all_or_nothing(phase);
    if (strcmp(scenario, "unwritable") == 0) return unwritable();
    if (strcmp(scenario, "region-sets") == 0) return region_sets(phase);
    if (strcmp(scenario, "signal-handler") == 0) return signal_handler();
    if (strcmp(scenario, "bad-arguments") == 0) return bad_arguments();
    fprintf(stderr, "misuse: unknown scenario %s\n", scenario);
    return 2;
}
