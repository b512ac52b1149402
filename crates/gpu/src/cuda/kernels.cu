// The device side of eckpt-gpu, compiled at run time by NVRTC (crates/gpu/src/cuda/nvrtc.rs).
//
// eckpt_fingerprint computes crates/gpu/src/fingerprint.rs's per-block fingerprint: block b is
// read as little-endian 64-bit words (the last zero-padded), word j contributes
// fmix64(w ^ j * POSITION_SALT), and the contributions are XORed. One thread block folds one
// fingerprint block at a time (grid-stride over blocks); threads read consecutive words so that
// a warp's loads are coalesced. The new fingerprint is compared with the one kept on the
// device from the previous scan, and `changed[b]` says whether it differs (or `all`).

typedef unsigned long long u64;

#define POSITION_SALT 0x9e3779b97f4a7c15ULL

__device__ __forceinline__ u64 fmix64(u64 k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

// A little-endian word from bytes, for a block that does not start on an 8-byte boundary.
__device__ __forceinline__ u64 load_bytes(const unsigned char* p, unsigned n) {
    u64 w = 0;
    for (unsigned i = 0; i < n; i++) w |= (u64)p[i] << (8 * i);
    return w;
}

extern "C" __global__ void eckpt_fingerprint(const unsigned char* base, u64 len, u64 block,
                                             u64 nblocks, u64* prints, unsigned char* changed,
                                             int all) {
    __shared__ u64 partial[32];
    const unsigned warps = (blockDim.x + 31) / 32;
    for (u64 b = blockIdx.x; b < nblocks; b += gridDim.x) {
        const unsigned char* start = base + b * block;
        u64 blen = len - b * block;
        if (blen > block) blen = block;
        const u64 nwords = blen / 8;
        u64 acc = 0;
        if ((((u64)start) & 7) == 0) {
            const u64* words = (const u64*)start;
#pragma unroll 4
            for (u64 j = threadIdx.x; j < nwords; j += blockDim.x)
                acc ^= fmix64(words[j] ^ (j * POSITION_SALT));
        } else {
            for (u64 j = threadIdx.x; j < nwords; j += blockDim.x)
                acc ^= fmix64(load_bytes(start + 8 * j, 8) ^ (j * POSITION_SALT));
        }
        if (threadIdx.x == 0 && (blen & 7) != 0)
            acc ^= fmix64(load_bytes(start + 8 * nwords, (unsigned)(blen & 7)) ^ (nwords * POSITION_SALT));
        for (int offset = 16; offset > 0; offset >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, offset);
        if ((threadIdx.x & 31) == 0) partial[threadIdx.x / 32] = acc;
        __syncthreads();
        if (threadIdx.x == 0) {
            u64 fingerprint = 0;
            for (unsigned w = 0; w < warps; w++) fingerprint ^= partial[w];
            changed[b] = (all || fingerprint != prints[b]) ? 1 : 0;
            prints[b] = fingerprint;
        }
        __syncthreads();
    }
}

// Sixteen bytes, the widest load a thread makes.
struct alignas(16) Bytes16 {
    u64 low, high;
};

// eckpt_gather packs blocks list[0..count) of the region into `out`, block list[i] at
// i * block (only the region's last block is shorter, and it can only come last). One thread
// block copies one region block at a time, 16 bytes per thread and step when both ends are
// 16-byte aligned.
extern "C" __global__ void eckpt_gather(const unsigned char* base, u64 len, u64 block,
                                        const u64* list, u64 count, unsigned char* out) {
    for (u64 i = blockIdx.x; i < count; i += gridDim.x) {
        const u64 b = list[i];
        const unsigned char* src = base + b * block;
        unsigned char* dst = out + i * block;
        u64 n = len - b * block;
        if (n > block) n = block;
        u64 done = 0;
        if (((((u64)src) | ((u64)dst)) & 15) == 0) {
            const Bytes16* s = (const Bytes16*)src;
            Bytes16* d = (Bytes16*)dst;
            const u64 vectors = n / 16;
            for (u64 j = threadIdx.x; j < vectors; j += blockDim.x) d[j] = s[j];
            done = vectors * 16;
        }
        for (u64 j = done + threadIdx.x; j < n; j += blockDim.x) dst[j] = src[j];
    }
}
