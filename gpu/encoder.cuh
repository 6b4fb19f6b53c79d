// gpu/encoder.cuh: token and position embeddings, forward and backward. FLOPs and bytes:
// host/kernel_cost.h (encoder_forward_cost, encoder_backward_cost).
#pragma once
#include <vector>

#include "common.cuh"

namespace gpu {

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:], a pack of channels per thread (C is a multiple of
// the pack size: the trainer checks); wpe null: the token's row alone (Llama)
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int T,
                                       int C, size_t packs) {
    constexpr int N = pack_size<floatX>();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= packs) return;
    size_t bt = i * N / C;
    int c = (int)(i * N % C), t = (int)(bt % T);
    Pack<floatX> e = *reinterpret_cast<const Pack<floatX>*>(wte + (size_t)inp[bt] * C + c);
    if (!wpe) {
        reinterpret_cast<Pack<floatX>*>(out)[i] = e;
        return;
    }
    Pack<floatX> p = *reinterpret_cast<const Pack<floatX>*>(wpe + (size_t)t * C + c);
    Pack<floatX> o;
    for (int k = 0; k < N; k++) o.v[k] = floatX((float)e.v[k] + (float)p.v[k]);
    reinterpret_cast<Pack<floatX>*>(out)[i] = o;
}
// P: the position of the first token, 0 but in generation with the key/value cache
void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C,
                     int P = 0) {
    size_t packs = (size_t)B * T * C / pack_size<floatX>();
    const floatX* positions = wpe ? wpe + (size_t)P * C : nullptr;  // row t of these is position P + t
    encoder_forward_kernel<<<blocks_for(packs), THREADS, 0, ctx.stream>>>(out, inp, wte, positions, T, C, packs);
    KERNEL_CHECK();
}

// The positions of a micro-batch grouped by token id (device pointers): group k holds the
// positions b·T + t with inp[b,t] = token[k], in increasing order, at
// position[start[k] .. start[k+1]). The host builds it (TokenGrouper), so that the
// embedding backward needs no atomics: one thread owns one (token, channel) sum.
struct TokenGroups {
    const int* start;     // (groups + 1)
    const int* token;     // (groups)
    const int* position;  // (B·T)
    int groups;
};
// Builds the groups on the host, reusing its counters from call to call.
struct TokenGrouper {
    std::vector<int> count, next;  // (V)
    // Groups the positions of inputs (n tokens, each < V): fills start (groups + 1), token
    // (groups) and position (n); returns the number of groups.
    int group(const int* inputs, int n, int V, int* start, int* token, int* position) {
        count.assign(V, 0), next.resize(V);
        for (int i = 0; i < n; i++) count[inputs[i]]++;
        int groups = 0, offset = 0;
        for (int tok = 0; tok < V; tok++)
            if (count[tok] > 0) {
                token[groups] = tok, start[groups] = offset, next[tok] = offset;
                groups++, offset += count[tok];
            }
        start[groups] = n;
        for (int i = 0; i < n; i++) position[next[inputs[i]]++] = i;  // increasing within a group
        return groups;
    }
};
// dwte[token,c] += dout[p,c] for p in the token's positions, in increasing p: the CPU's order
__global__ void wte_backward_kernel(float* dwte, const floatX* __restrict__ dout, const int* start, const int* token,
                                    const int* position, int C) {
    int k = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float* row = dwte + (size_t)token[k] * C;
    float sum = row[c];
#pragma unroll 8
    for (int j = start[k]; j < start[k + 1]; j++) sum += (float)dout[(size_t)position[j] * C + c];
    row[c] = sum;
}
// dwpe[t,c] += dout[b,t,c] for b = 0..B-1 in order (the CPU's order)
__global__ void wpe_backward_kernel(float* dwpe, const floatX* dout, int B, size_t TC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= TC) return;
    float sum = dwpe[i];
    for (int b = 0; b < B; b++) sum += (float)dout[b * TC + i];
    dwpe[i] = sum;
}
void encoder_backward(float* dwte, float* dwpe, const floatX* dout, const TokenGroups& groups, int B, int T, int C) {
    dim3 grid(groups.groups, blocks_for(C));
    wte_backward_kernel<<<grid, THREADS, 0, ctx.stream>>>(dwte, dout, groups.start, groups.token, groups.position, C);
    KERNEL_CHECK();
    if (!dwpe) return;  // Llama: no position table
    size_t TC = (size_t)T * C;
    wpe_backward_kernel<<<blocks_for(TC), THREADS, 0, ctx.stream>>>(dwpe, dout, B, TC);
    KERNEL_CHECK();
}

}  // namespace gpu
