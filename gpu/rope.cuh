// gpu/rope.cuh: rotary position embedding (Llama), forward and backward, in place on the q
// and k parts of qkv (B, T, QKV), QKV = (NH + 2·KVH)·hs: in each of the NH query heads and KVH
// key heads of a row, channels (2i, 2i+1) are rotated by the angle t·freq_i of the row's
// position t (Meta's interleaved pairs); v is not touched. cos_sin (maxT, hs/2, 2) float32 is
// host/model.h's rope_table(), uploaded once. The arithmetic is float32 in both precisions and
// is train.cpp's rope_forward / rope_backward (test/gpu_trainer/trainer.cu checks them).
#pragma once
#include "common.cuh"

namespace gpu {

// A pack of channels per thread, out of the row's first (NH + KVH)·hs (`rotated`, even);
// `row_packs` = ⌈rotated / P⌉ packs a row, the last one partial, an even count of channels
// (hs is even). (x0, x1) -> (x0·cos − x1·sin', x0·sin' + x1·cos), sin' = sin_sign · sin:
// sin_sign = 1 rotates forward, −1 rotates back (the inverse, the gradient's rotation; the
// negation is exact: train.cpp's rope_backward arithmetic, d0·cos + d1·sin, −d0·sin + d1·cos).
// FLOPs: 3 per rotated element (4 multiplies and 2 adds a pair). Bytes: 2·x per rotated
// element (read and written in place), the table's T·hs floats (re-read by every row of a
// position and every head from cache): 2x·B·T·(NH + KVH)·hs + 4·T·hs.
__global__ void rope_kernel(floatX* qkv, const float* cos_sin, float sin_sign, int T, int QKV, int hs, int rotated,
                            int row_packs, size_t packs) {
    constexpr int P = pack_size<floatX>();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= packs) return;
    const size_t bt = i / row_packs;
    const int c = (int)(i % row_packs) * P, count = min(P, rotated - c), t = (int)(bt % T);
    floatX* x = qkv + bt * QKV + c;
    const float* cs = cos_sin + (size_t)t * hs;  // position t's hs/2 pairs (cos, sin)
    Pack<floatX> v = load_part(x, count);
#pragma unroll
    for (int k = 0; k < P; k += 2) {
        if (k >= count) break;
        const int pair = (c + k) % hs / 2;  // c + k is even: the pair's first channel
        const float co = cs[2 * pair], si = sin_sign * cs[2 * pair + 1];
        const float x0 = (float)v.v[k], x1 = (float)v.v[k + 1];
        v.v[k] = floatX(x0 * co - x1 * si), v.v[k + 1] = floatX(x0 * si + x1 * co);
    }
    store_part(x, count, v);
}
inline void rope_launch(floatX* qkv, const float* cos_sin, float sin_sign, int B, int T, int NH, int KVH, int hs) {
    const int QKV = (NH + 2 * KVH) * hs, rotated = (NH + KVH) * hs;
    const int row_packs = (int)packs_for<floatX>(rotated);
    const size_t packs = (size_t)B * T * row_packs;
    rope_kernel<<<blocks_for(packs), THREADS, 0, ctx.stream>>>(qkv, cos_sin, sin_sign, T, QKV, hs, rotated, row_packs,
                                                               packs);
    KERNEL_CHECK();
}
// q and k of qkv rotated by their positions, in place (hs even)
void rope_forward(floatX* qkv, const float* cos_sin, int B, int T, int NH, int KVH, int hs) {
    rope_launch(qkv, cos_sin, 1.0f, B, T, NH, KVH, hs);
}
// A rotation's transpose is its inverse: the gradient of q and k in dqkv rotated back by the
// same angle, in place: (d0, d1) -> (d0·cos + d1·sin, −d0·sin + d1·cos)
void rope_backward(floatX* dqkv, const float* cos_sin, int B, int T, int NH, int KVH, int hs) {
    rope_launch(dqkv, cos_sin, -1.0f, B, T, NH, KVH, hs);
}

}  // namespace gpu
