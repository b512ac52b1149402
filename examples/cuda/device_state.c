/*
 * device_state: a rank whose state lives in GPU memory, in C. The memory is allocated with the
 * CUDA driver API and protected with eckpt_protect_device: each checkpoint fingerprints it on
 * the GPU and copies only the changed blocks to the host; restart fills it in place.
 *
 * Step s sets 4 KiB at a step-dependent place to the byte s + 1. At restart the whole device
 * buffer is copied back and compared with a replay of the steps the restored counter says
 * were done; at the end, with a replay of all of them.
 *
 *   cc -std=c11 -I/usr/local/cuda/include -Iinclude examples/cuda/device_state.c -lcuda -leckpt
 *   ECKPT_DIR=/dev/shm/ck ./a.out STEPS [STOP_AFTER]   # STOP_AFTER: exit 3 after that step
 */

#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eckpt.h"

#define BYTES ((size_t)32 << 20)
#define PIECE 4096

static void cu(CUresult result, const char *call) {
    if (result != CUDA_SUCCESS) {
        const char *name = "?";
        cuGetErrorName(result, &name);
        fprintf(stderr, "device_state: %s: %s\n", call, name);
        exit(1);
    }
}

static void ok(int rc, const char *call) {
    if (rc < 0) {
        fprintf(stderr, "device_state: %s: %s\n", call, eckpt_last_error());
        exit(1);
    }
}

static size_t place(long step) { return ((size_t)step * 3 * 65536 + 512) % (BYTES - PIECE); }

/* The device buffer after `steps` steps, built on the host. */
static void replay(unsigned char *expected, long steps) {
    memset(expected, 0, BYTES);
    for (long s = 0; s < steps; s++) memset(expected + place(s), (int)((s + 1) & 0xff), PIECE);
}

static void verify(CUdeviceptr device, long steps, const char *when) {
    unsigned char *got = malloc(BYTES), *expected = malloc(BYTES);
    cu(cuMemcpyDtoH(got, device, BYTES), "cuMemcpyDtoH");
    replay(expected, steps);
    if (memcmp(got, expected, BYTES) != 0) {
        fprintf(stderr, "device_state: %s: the device memory is not step %ld's\n", when, steps);
        exit(1);
    }
    printf("device_state: %s: step %ld verified\n", when, steps);
    free(got);
    free(expected);
}

int main(int argc, char **argv) {
    long steps = argc > 1 ? atol(argv[1]) : 6, stop_after = argc > 2 ? atol(argv[2]) : -1;
    CUdevice gpu;
    CUcontext context;
    CUdeviceptr device;
    cu(cuInit(0), "cuInit");
    cu(cuDeviceGet(&gpu, 0), "cuDeviceGet");
    cu(cuDevicePrimaryCtxRetain(&context, gpu), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(context), "cuCtxSetCurrent");
    cu(cuMemAlloc(&device, BYTES), "cuMemAlloc");
    cu(cuMemsetD8(device, 0, BYTES), "cuMemsetD8");

    static long step; /* restored with the device memory it describes */
    ok(eckpt_init(NULL), "eckpt_init");
    ok(eckpt_protect(0, &step, sizeof step), "eckpt_protect");
    ok(eckpt_protect_device(1, (void *)(uintptr_t)device, BYTES), "eckpt_protect_device");
    int epoch = eckpt_restart();
    ok(epoch, "eckpt_restart");
    if (epoch > 0) verify(device, step, "restart");
    while (step < steps) {
        cu(cuMemsetD8(device + place(step), (unsigned char)((step + 1) & 0xff), PIECE), "cuMemsetD8");
        step++;
        ok(eckpt_checkpoint(), "eckpt_checkpoint");
        if (step == stop_after) return 3;
    }
    verify(device, steps, "end");
    ok(eckpt_finalize(), "eckpt_finalize");
    cu(cuMemFree(device), "cuMemFree");
    return 0;
}
