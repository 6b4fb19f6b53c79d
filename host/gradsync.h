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
//
// The noise scale (host/noise.h) needs the first micro-batch's own gradient norm before the
// sum. With A = 1 that micro-batch is also the one whose backward starts the buckets, so the
// norm is taken bucket by bucket, just before each bucket's sum starts (the measure given to
// hook()), and the overlap stays on. For its bits not to depend on the bucketing, the norm is
// a sum over fixed units of the buffer (norm_units: each per-block tensor's slice of one block,
// the embeddings, and lnf with the head), each unit's |g|² computed alone and the units added in
// buffer order at the end: whether the units are measured all at once after the backward
// (--grad-sync end, or A ≥ 2) or bucket by bucket, |G_small|² has the same bits.
#pragma once
#include <functional>
#include <vector>

#include "checkpoint.h"
#include "comm.h"

struct GradBucket {
    int after_block = -1;  // started when the backward has finished block after_block; -1: by the step's sync
    std::vector<GradRange> ranges;
    size_t floats = 0;
    std::vector<int> units;  // the norm units (norm_units()) its ranges hold, in buffer order
};

// The units of the gradient buffer that the noise scale's norm is summed over, in buffer
// order: the embeddings (wte, wpe) as one; each per-block tensor's slice of each block; lnf and
// what follows it (Llama's separate head) as one. Every bucket holds whole units.
constexpr int FIRST_BLOCK_TENSOR = 2, LAST_BLOCK_TENSOR = 13, LNFW = 14;  // ln1w .. fcprojb; lnfw
inline std::vector<GradRange> norm_units(const ModelConfig& c) {
    const std::vector<size_t> sizes = c.param_sizes();
    std::vector<size_t> offset(NUM_PARAM_TENSORS + 1, 0);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) offset[i + 1] = offset[i] + sizes[i];
    std::vector<GradRange> units = {{0, offset[FIRST_BLOCK_TENSOR]}};
    for (int i = FIRST_BLOCK_TENSOR; i <= LAST_BLOCK_TENSOR; i++)
        for (int l = 0; l < c.L && sizes[i] > 0; l++) units.push_back({offset[i] + l * (sizes[i] / c.L), sizes[i] / c.L});
    units.push_back({offset[LNFW], offset[NUM_PARAM_TENSORS] - offset[LNFW]});
    return units;
}
// The units that lie in a bucket's ranges, in buffer order.
inline std::vector<int> units_of(const std::vector<GradRange>& ranges, const std::vector<GradRange>& units) {
    std::vector<int> in;
    for (int u = 0; u < (int)units.size(); u++)
        for (const GradRange& r : ranges)
            if (units[u].begin >= r.begin && units[u].begin < r.begin + r.count) in.push_back(u);
    return in;
}

// The buckets of a model's gradient buffer, in the order the backward finishes them.
inline std::vector<GradBucket> gradient_buckets(const ModelConfig& c, double bucket_bytes) {
    const std::vector<size_t> sizes = c.param_sizes();
    std::vector<size_t> offset(NUM_PARAM_TENSORS + 1, 0);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) offset[i + 1] = offset[i] + sizes[i];
    // ln1w .. fcprojb (FIRST_BLOCK_TENSOR..LAST_BLOCK_TENSOR); then lnfw, lnfb and wout, which
    // the backward finishes first
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
    const std::vector<GradRange> units = norm_units(c);
    for (GradBucket& b : buckets) b.units = units_of(b.ranges, units);
    return buckets;
}

// The communication helper of the gradient sync: created once by a trainer, with the model's
// buckets; the step hands it to the last micro-batch's backward (hook), and the backward
// calls block_done(l) after each block. It knows no model code, and the model knows no ranks.
// Whether the sync overlaps the last backward: with replicas (with the noise scale on too:
// each bucket's norm is taken before its sum starts).
inline bool sync_overlaps(bool overlap, int world) { return overlap && world > 1; }

// A trainer's measure of the noise scale's norm: the |g|² of each of a bucket's units, kept
// per unit, for the sum in buffer order after the sync.
using MeasureUnits = std::function<void(const std::vector<int>& units)>;

class GradSync {
public:
    GradSync() = default;
    // overlap: --grad-sync overlap; bf16: --grad-sync-dtype bf16; shard: ZeRO's (or all).
    GradSync(const ModelConfig& c, bool overlap, bool bf16, double bucket_bytes, const Shard& shard)
        : overlap_(overlap), bf16_(bf16), shard_(shard), buckets_(gradient_buckets(c, bucket_bytes)) {}

    // For the step: what micro-batch i of A's backward is given; null (nothing overlapped)
    // but for the last. measure (or null): the noise scale's norm of this micro-batch's own
    // gradient (A = 1), taken bucket by bucket just before each bucket's sum starts. When this
    // returns null, the trainer measures every unit after the backward itself.
    GradSync* hook(int i, int A, float* grads, const Comm& comm, const MeasureUnits* measure = nullptr) {
        if (!sync_overlaps(overlap_, comm.world) || i != A - 1) return nullptr;
        grads_ = grads, comm_ = &comm, next_ = 0, armed_ = true, measure_ = measure;
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
        armed_ = false, measure_ = nullptr;
        return true;
    }
    const std::vector<GradBucket>& buckets() const { return buckets_; }

private:
    void start(size_t b) {
        if (armed_ && measure_) (*measure_)(buckets_[b].units);  // before the sum changes them
        comm_->start_sum(grads_, buckets_[b].ranges, shard_, bf16_);
    }
    bool overlap_ = false, bf16_ = false, armed_ = false;
    const MeasureUnits* measure_ = nullptr;
    Shard shard_;
    std::vector<GradBucket> buckets_;
    float* grads_ = nullptr;
    const Comm* comm_ = nullptr;
    size_t next_ = 0;
};
