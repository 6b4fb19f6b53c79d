// gpu/classifier.cuh: the classifier (the head's product, lnf (N, C) · Wᵀ → logits (N, Vp)) and
// the cross-entropy loss, with its backward, done in chunks of rows: the "fused linear
// cross-entropy". For each chunk of rows, the chunk's logits, their softmax statistics, the
// losses and (with backward) the logits' gradient in place (gpu/crossentropy.cuh), then at once
// that gradient's share of the head's input gradient dlnf (the chunk's rows) and of the head's
// weight gradient dW (+=, the chunks added in order). So the (N, Vp) logits are never whole in
// memory: the buffer holds one chunk. --classifier whole is one chunk of all N rows: the same
// products, kernels and order as before the chunks existed (the reference).
//
// The chunk's size comes from the shape only, never from timing, so reruns and resumes compute
// the same bits: as many rows of Vp as CLASSIFIER_CHUNK_ELEMENTS logits hold, a multiple of 128
// (as product_rows), never more than N. GPT-2 (Vp = 50,304): 5,248 rows, 528 MB of logits in
// bf16 (1.06 GB in fp32) where B=64, T=1024 held 6.6 GB (13.2 GB); 13 chunks, the last one of
// 2,560 rows. Llama-3 (Vp = 128,256): 2,048 rows, 525 MB in bf16.
//
// The budget weighs the logits' memory against what the chunks repeat: each chunk's dW product
// reads and writes the float32 dW (Vp·C·8 bytes, 309 MB at GPT-2 124M) once more: 12 times more
// than the whole product at B=64, T=1024, 3.7 GB a micro-batch (an estimate, counted, not
// measured: about 1.4 ms at 2.7 TB/s). Chunks small enough for a chunk
// of logits to stay in L2 (≈ 500 rows of 100 KB in 50 MB) would repeat it 130 times: 40 GB, and
// products too thin for the tensor cores. The logits still cross device memory as before (the
// product writes them, the cross-entropy reads and rewrites them, the two backward products
// read them); what the chunks save is memory, not traffic.
//
// Cost per micro-batch of N rows (host/kernel_cost.h): the same FLOPs as the whole path, 6·N·C·Vp
// in the three products and ≈ 10·N·Vp in the cross-entropy; bytes as the whole path's, plus
// (chunks − 1)·8·Vp·C of dW re-read and re-written.
#pragma once
#include <algorithm>

#include "crossentropy.cuh"
#include "matmul.cuh"

namespace gpu {

// The most logits one chunk holds (2^28: 512 MiB in bf16). Tests lower it, to cut small
// shapes into chunks (whose edges do not divide N); the memory plan reads the same value.
inline size_t classifier_chunk_elements = (size_t)1 << 28;

// Rows of logits at a time for N rows of Vp: N with `whole`; else as many as the budget holds,
// a multiple of 128 where 128 fit (chunks start as aligned as the whole), at least 1, at most N.
inline int classifier_rows(int N, int Vp, bool whole) {
    if (whole) return N;
    size_t fit = classifier_chunk_elements / (size_t)Vp;
    if (fit >= 128) fit = fit / 128 * 128;
    return (int)std::min<size_t>(std::max<size_t>(fit, 1), (size_t)N);
}

// The head's product, forward only, for n rows: logits (n, Vp) = lnf (n, C) · Wᵀ (no bias).
// 2·n·C·Vp FLOPs; reads n·C + Vp·C floatX, writes n·Vp floatX.
inline void classifier_forward(floatX* logits, const floatX* lnf, const floatX* w, int n, int C, int Vp) {
    matmul_forward(logits, lnf, w, nullptr, n, C, Vp);
}

// The classifier and the loss over N rows, `rows` at a time, in a logits buffer of (rows, Vp):
// losses (N) written; with `backward` (a per-position loss scale dloss), dlnf (N, C) written and
// dw (Vp, C) float32 += the head's weight gradient, each chunk's added in order (chunk 0 first).
// Without it (evaluation) no gradient is touched, and the buffer is left with the last chunk's
// logits. Indices of rows into lnf, dlnf, targets and losses in size_t: N·Vp passes 2^31 (GPT-2
// 124M at B=64, T=1024: 65,536 × 50,304). targets: (N) on the device.
inline void classifier_loss(float* losses, floatX* dlnf, float* dw, floatX* logits, const floatX* lnf,
                            const floatX* w, const int* targets, float dloss, int N, int C, int V, int Vp, int rows,
                            bool backward, Epilogues epilogues) {
    for (int n0 = 0; n0 < N; n0 += rows) {
        const int n = std::min(rows, N - n0);  // the last chunk may be partial
        const size_t r0 = (size_t)n0;
        classifier_forward(logits, lnf + r0 * C, w, n, C, Vp);
        crossentropy_forward_backward(losses + r0, logits, targets + r0, dloss, n, V, Vp, backward);
        if (!backward) continue;
        // the logits' gradient of these rows: dlnf's rows = dlogits · W, dW += dlogitsᵀ · lnf's rows
        matmul_backward(dlnf + r0 * C, dw, nullptr, nullptr, logits, lnf + r0 * C, w, n, C, Vp, nullptr, epilogues);
    }
}

}  // namespace gpu
