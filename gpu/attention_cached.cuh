// gpu/attention_cached.cuh: generation's attention (host/sample.h), the key/value cache's side
// of train.cpp's attention_forward: T new query rows of one sequence, positions P..P+T-1, each
// attending to the cached keys and values of positions 0..P+t (grouped-query: query head h reads
// K/V head h / (NH/KVH), cached once per group). Sums, the softmax and the output in float32 in
// both precisions. The cache is (maxT, 2·KVH·hs) a layer: each position's KVH keys, then its
// KVH values (train_gpt.cu's kv_cache_append writes it from qkv's rows, after RoPE).
#pragma once
#include "common.cuh"

namespace gpu {

constexpr int CACHED_WARPS = 4;     // warps of a block, each over every CACHED_WARPS-th key
constexpr int CACHED_MAX_HS = 256;  // head sizes up to this: 8 channels a lane

// One block per (query head h, query row t). Warp w takes keys w, w + 4, ...; lane i holds
// channels i, i + 32, ... of q, and of its running output. Per key: the dot product q·k (a warp
// sum), then an online softmax (running maximum m and sum l, the output rescaled by exp(m_old −
// m)). The four warps' (m, l, output) are then merged in shared memory in warp order, a fixed
// order: the result is deterministic. FLOPs: ≈ 4·hs per (head, row, key) seen: 4·hs·NH·Σ_t
// (P + t + 1). Bytes: each block reads its K/V head's P + t + 1 keys and values, 2·hs·x each
// (the NH/KVH query heads of a group read the same ones, from L2), and q and out, hs·x each.
__global__ void attention_cached_kernel(floatX* out, const floatX* qkv, const floatX* kv, int P, int C, int NH,
                                        int KVH, int hs) {
    constexpr int R = CACHED_MAX_HS / 32;
    const int h = blockIdx.x, t = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int QKV = C + 2 * KVH * hs, KV = 2 * KVH * hs, kh = h / (NH / KVH), last = P + t;
    const float scale = 1.0f / sqrtf((float)hs);
    const floatX* q = qkv + (size_t)t * QKV + h * hs;
    float qr[R], acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int i = lane + 32 * r;
        qr[r] = i < hs ? (float)q[i] : 0.0f, acc[r] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int t2 = warp; t2 <= last; t2 += CACHED_WARPS) {
        const floatX* k = kv + (size_t)t2 * KV + kh * hs;
        const floatX* v = k + KVH * hs;
        float s = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++)
            if (lane + 32 * r < hs) s += qr[r] * (float)k[lane + 32 * r];
        s = warp_sum(s) * scale;
        const float m_new = fmaxf(m, s), rescale = expf(m - m_new), p = expf(s - m_new);  // first key: exp(−∞) = 0
        l = l * rescale + p;
#pragma unroll
        for (int r = 0; r < R; r++)
            if (lane + 32 * r < hs) acc[r] = acc[r] * rescale + p * (float)v[lane + 32 * r];
        m = m_new;
    }
    __shared__ float warp_m[CACHED_WARPS], warp_l[CACHED_WARPS], warp_acc[CACHED_WARPS][CACHED_MAX_HS];
    if (lane == 0) warp_m[warp] = m, warp_l[warp] = l;
#pragma unroll
    for (int r = 0; r < R; r++)
        if (lane + 32 * r < hs) warp_acc[warp][lane + 32 * r] = acc[r];
    __syncthreads();
    if (warp != 0) return;
    float M = -INFINITY, L = 0.0f;  // warp 0 always saw key 0: M is finite
    for (int w = 0; w < CACHED_WARPS; w++) M = fmaxf(M, warp_m[w]);
    float weight[CACHED_WARPS];  // a warp without keys has m = −∞: weight 0
    for (int w = 0; w < CACHED_WARPS; w++) weight[w] = expf(warp_m[w] - M), L += warp_l[w] * weight[w];
    floatX* o = out + (size_t)t * C + h * hs;
    for (int i = lane; i < hs; i += 32) {
        float sum = 0.0f;
        for (int w = 0; w < CACHED_WARPS; w++) sum += warp_acc[w][i] * weight[w];
        o[i] = floatX(sum / L);
    }
}

// out (T, C) for the T rows of qkv (T, QKV) at positions P..P+T-1 over a layer's cache kv,
// whose first P + T rows are filled.
inline void attention_cached_forward(floatX* out, const floatX* qkv, const floatX* kv, int T, int P, int C, int NH,
                                     int KVH) {
    const int hs = C / NH;
    if (hs > CACHED_MAX_HS)
        throw Error(strf("generation's attention supports head sizes up to %d; the model's is %d", CACHED_MAX_HS, hs));
    attention_cached_kernel<<<dim3(NH, T), 32 * CACHED_WARPS, 0, ctx.stream>>>(out, qkv, kv, P, C, NH, KVH, hs);
    KERNEL_CHECK();
}

}  // namespace gpu
