// host/gradsync.h: the step's one gradient sync, overlapped with the last micro-batch's
// backward (--grad-sync overlap), for both trainers.
//
// The backward finishes the parameter gradients block by block, from the last block to the
// first: once block l is done, nothing adds to its gradients again in this step. With
// --grad-sync overlap the last micro-batch's backward tells this helper each time a block is
// done, and the helper starts the sum over the replicas of every bucket that is now final
// (Comm::start_sum: NCCL on a second stream on the GPU, MPI's non-blocking collectives on the
// CPU) while the backward goes on through the earlier blocks. The step's sync call starts the
// last bucket (the embeddings wte and wpe, final only after the encoder's backward) and waits
// for all of them. Still one sync per optimizer step; the first A-1 micro-batches only add.
//
// A bucket is a run of blocks [l, hi) plus, in the first, the final LayerNorm: in the gradient
// buffer (host/checkpoint.h's order: wte wpe ln1w ln1b qkvw ... fcprojb lnfw lnfb, each
// per-block tensor (L, ...)) that is one contiguous range per tensor, 12 ranges (14 with lnf).
// Blocks join the open bucket until it holds at least --grad-bucket bytes (0: one block each).
//
// In float32 the sum of every element is the same whichever bucket carries it (an element's
// replicas are added in the same order as by the one all-reduce at the end, on the CPU
// runtime's NCCL and on 2 replicas anywhere), so overlap and end give the same bits there.
// --grad-sync-dtype bf16 (GPU only) rounds each replica's gradient to bf16 for the sum, which
// halves the bytes on the wire; AdamW still reads float32 gradients.
#pragma once
#include <vector>

#include "checkpoint.h"
#include "comm.h"

struct GradBucket {
    int after_block = -1;  // started when the backward has finished block after_block; -1: by the step's sync
    std::vector<GradRange> ranges;
    size_t floats = 0;
};

// The buckets of a model's gradient buffer, in the order the backward finishes them.
inline std::vector<GradBucket> gradient_buckets(const ModelConfig& c, double bucket_bytes) {
    const std::vector<size_t> sizes = c.param_sizes();
    std::vector<size_t> offset(NUM_PARAM_TENSORS + 1, 0);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) offset[i + 1] = offset[i] + sizes[i];
    // ln1w .. fcprojb; then lnfw, lnfb and wout, which the backward finishes first
    const int FIRST_BLOCK_TENSOR = 2, LAST_BLOCK_TENSOR = 13, LNFW = 14;
    std::vector<GradBucket> buckets;
    // blocks [lo, hi) of every per-block tensor, and lnf when `with_lnf`
    auto bucket = [&](int lo, int hi, bool with_lnf, int after_block) {
        GradBucket b;
        b.after_block = after_block;
        for (int i = FIRST_BLOCK_TENSOR; i <= LAST_BLOCK_TENSOR; i++) {
            size_t per_block = sizes[i] / c.L;
            if (hi > lo && per_block > 0) b.ranges.push_back({offset[i] + lo * per_block, (hi - lo) * per_block});
        }
        if (with_lnf) b.ranges.push_back({offset[LNFW], offset[NUM_PARAM_TENSORS] - offset[LNFW]});
        for (const GradRange& r : b.ranges) b.floats += r.count;
        return b;
    };
    int hi = c.L;  // the open bucket holds blocks [l, hi)
    for (int l = c.L - 1; l >= 0; l--) {
        GradBucket open = bucket(l, hi, buckets.empty(), l);
        if (open.floats * sizeof(float) >= bucket_bytes) buckets.push_back(open), hi = l;
    }
    GradBucket last = bucket(0, hi, buckets.empty(), -1);  // what is left, and the embeddings
    last.ranges.push_back({0, offset[FIRST_BLOCK_TENSOR]});
    last.floats += offset[FIRST_BLOCK_TENSOR];
    buckets.push_back(last);
    return buckets;
}

// The communication helper of the gradient sync: created once by a trainer, with the model's
// buckets; the step hands it to the last micro-batch's backward (hook), and the backward
// calls block_done(l) after each block. It knows no model code, and the model knows no ranks.
// Whether the sync overlaps the last backward: only with replicas, and not when the step's one
// micro-batch must first measure its own gradient norm for the noise scale.
inline bool sync_overlaps(bool overlap, int world, int A, bool measure_noise) {
    return overlap && world > 1 && !(A == 1 && measure_noise);
}

class GradSync {
public:
    GradSync() = default;
    // overlap: --grad-sync overlap; bf16: --grad-sync-dtype bf16; shard: ZeRO's (or all).
    GradSync(const ModelConfig& c, bool overlap, bool bf16, double bucket_bytes, const Shard& shard)
        : overlap_(overlap), bf16_(bf16), shard_(shard), buckets_(gradient_buckets(c, bucket_bytes)) {}

    // For the step: what micro-batch i of A's backward is given; null (nothing overlapped)
    // but for the last, and not when that one is also the first whose own gradient norm the
    // noise scale measures after its backward (A = 1: it must see the gradient unsummed).
    GradSync* hook(int i, int A, bool measure_noise, float* grads, const Comm& comm) {
        if (!sync_overlaps(overlap_, comm.world, A, measure_noise) || i != A - 1) return nullptr;
        grads_ = grads, comm_ = &comm, next_ = 0, armed_ = true;
        return this;
    }
    // For the backward: block l's parameter gradients are final (lnf's too, from the last block).
    void block_done(int l) {
        while (next_ < buckets_.size() && buckets_[next_].after_block == l) start(next_++);
    }
    // The step's sync, when this helper does it: after an overlapped backward, or for bf16,
    // every bucket not yet started, then the wait for all. false: the trainer's one collective
    // on the whole buffer does it (--grad-sync end in float32, or a single process).
    bool finish(float* grads, const Comm& comm) {
        if (comm.world == 1 || (!armed_ && !bf16_)) return false;
        if (!armed_) grads_ = grads, comm_ = &comm, next_ = 0;
        while (next_ < buckets_.size()) start(next_++);
        comm.wait_sums();
        armed_ = false;
        return true;
    }
    const std::vector<GradBucket>& buckets() const { return buckets_; }

private:
    void start(size_t b) { comm_->start_sum(grads_, buckets_[b].ranges, shard_, bf16_); }
    bool overlap_ = false, bf16_ = false, armed_ = false;
    Shard shard_;
    std::vector<GradBucket> buckets_;
    float* grads_ = nullptr;
    const Comm* comm_ = nullptr;
    size_t next_ = 0;
};
