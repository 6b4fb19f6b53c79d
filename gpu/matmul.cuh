// gpu/matmul.cuh: the linear layer, out (N,OC) = inp (N,IC) · w (OC,IC)ᵀ + bias (OC), and
// its backward. The products go to cuBLASLt, which adds the bias and applies GELU as it
// writes the forward's result, and in the backward applies GELU's gradient and sums the bias
// gradient as it writes the products (--epilogues fused; `separate` runs the backward on
// cublasGemmEx and kernels), with floatX inputs and float32 sums; the weight gradient is
// float32, summed straight into the accumulated gradient.
// FLOPs and bytes of each product and pass: host/kernel_cost.h (matmul_forward_cost,
// matmul_backward_dinp_cost, matmul_backward_dw_cost, bias_grad_cost, gelu_*_cost).
//
// cuBLAS is column-major: to it, a row-major X (rows × cols) is the column-major matrix Xᵀ
// (cols × rows) with leading dimension cols, without moving a byte. So each row-major
// product below is written as its transpose, Cᵀ = (A·B)ᵀ = Bᵀ·Aᵀ, and the comment above
// each call gives the row-major product, then the column-major one that cuBLAS computes.
#pragma once
#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common.cuh"

namespace gpu {

// GELU, tanh approximation (as in GPT-2): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
constexpr float GELU_K = 0.7978845608028654f;  // √(2/π)

// How aligned p is, up to the 256 bytes cuBLASLt assumes unless told: the largest power of
// two that divides its address. A layer's slice of a tensor is only as aligned as its offset
// (C·sizeof(floatX) bytes a row, B·T rows a layer).
inline uint32_t alignment_of(const void* p) {
    uint32_t alignment = 256;
    while (alignment > 1 && (uintptr_t)p % alignment != 0) alignment /= 2;
    return alignment;
}

// Rows of a product with N rows of IC inputs and OC outputs that go to cuBLAS at once: all
// of them, unless a matrix would exceed ctx.max_matrix_elements; then as many as fit, a
// multiple of 128 where that many fit (so that chunks start as aligned as the whole).
inline int product_rows(int N, int IC, int OC) {
    size_t fit = ctx.max_matrix_elements / (size_t)std::max(IC, OC);
    if (fit >= (size_t)N) return N;
    if (fit >= 128) fit = fit / 128 * 128;
    return (int)std::max<size_t>(fit, 1);
}

// One cuBLASLt product in cuBLAS's column-major terms: D (m×n) = op(A) (m×k) · op(B) (k×n)
// + beta·D, then the epilogue. The preference carries the pointers' real alignments (A, B, C
// = D), since cuBLASLt's default (256 bytes) does not let an algorithm it picks run on less;
// the workspace is ctx.workspace, BLASLT_WORKSPACE bytes.
// Epilogues used here (cublasLt.h): BIAS and GELU_AUX(_BIAS) in the forward; in the
// backward DGELU (D ⊙= gelu'(aux), aux laid out as D) and BGRADB (bias[j] = Σ_k op(B)(k, j),
// a vector of n, *overwritten*, in the type of D).
struct LtProduct {
    bool trans_a, trans_b;
    int m, n, k;
    const void* A;
    int64_t lda;
    cudaDataType a_type;
    const void* B;
    int64_t ldb;
    cudaDataType b_type;
    void* D;  // also C when beta != 0
    int64_t ldd;
    cudaDataType d_type;
    float beta = 0.0f;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;  // BIAS: read; BGRADB: written
    const void* aux = nullptr;   // GELU_AUX: written (the GELU's input); DGELU: read
    int64_t aux_ld = 0;          // a multiple of 8, at least m (cublasLt.h)
};

// ---- cuBLASLt's algorithm, chosen once per product
//
// Each distinct product (shape, layouts, types, epilogue, the pointers' alignments: LtShape)
// gets its descriptors, layouts and algorithm once, in an LtPlan that every later call of it
// reuses: no descriptor is created and no heuristic asked per call. The heuristic is asked
// once per product for up to LT_CANDIDATES algorithms, best first. Which one runs:
//   * the step's products (those of the start-up pass, lt_choose_begin/end: one micro-batch's
//     forward and backward before step 1) are timed on a GPU, each candidate LT_TIMED_RUNS
//     times after one, at the run's shapes and on its buffers (the pass's results are thrown
//     away), and the fastest kept; on the CPU runtime the first, untimed, unless
//     TRAIN_GPT_GEMM_PICK says otherwise (lt_pick_for_tests);
//   * a resumed run takes the algorithm its state file records for each of them (lt_record),
//     when this GPU and cuBLASLt still offer it, so that it computes the uninterrupted run's bits;
//   * a product first met later (an evaluation's or a sample's other batch shape) takes the first.
// A product cuBLASLt offers no algorithm for has none (chosen < 0): matmul_backward runs it on
// --epilogues separate's path, and a forward one stops the run with one line.
constexpr int LT_CANDIDATES = 8, LT_TIMED_RUNS = 3;

using LtShape = std::array<int64_t, 18>;
inline LtShape lt_shape(const LtProduct& p) {
    return {p.trans_a, p.trans_b, p.m, p.n, p.k, p.lda, p.ldb, p.ldd, p.a_type, p.b_type, p.d_type, p.epilogue,
            p.aux ? p.aux_ld : -1, p.bias != nullptr, ctx.compute, alignment_of(p.A), alignment_of(p.B),
            alignment_of(p.D)};
}

enum class LtHow { first, timed, picked, recorded };
struct LtPlan {
    LtShape shape;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    std::vector<cublasLtMatmulHeuristicResult_t> offered;  // the heuristic's candidates, best first
    int chosen = -1;                                        // into offered; -1: none (the separate path)
    LtHow how = LtHow::first;
    double ms = -1;     // the chosen one's time (timed only)
    bool step = false;  // one of the step's products, in lt_record()
};

// A short, stable name of an algorithm: FNV-1a over cublasLtMatmulAlgo_t's 64 bytes (its
// id, tile, stages, split-K and the rest of its configuration), 24 bits in hex. 24 bits tell
// apart the at most LT_CANDIDATES algorithms a product is offered with a chance of 2e-6 of
// taking another for the recorded one; the record stays 9 bytes a product.
inline std::string lt_algo_name(const cublasLtMatmulAlgo_t& algo) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char* bytes = (const unsigned char*)algo.data;
    for (size_t i = 0; i < sizeof algo.data; i++) h = (h ^ bytes[i]) * 1099511628211ull;
    return strf("%06x", (unsigned)((h ^ (h >> 32)) & 0xffffff));
}

struct LtPlans {
    std::map<LtShape, std::unique_ptr<LtPlan>> by_shape;
    std::vector<LtPlan*> order;        // in the order first met
    long long queries = 0;             // heuristic queries made: one per plan
    bool choosing = false;             // in the start-up pass: new products are the step's
    bool time = false;                 // ... and are timed
    int pick = -1;                     // TRAIN_GPT_GEMM_PICK's candidate (CPU runtime), -1: none
    std::vector<std::string> recorded; // the record being adopted: an item per step product
    size_t next = 0;                   // the item the next step product takes
    int not_offered = 0;               // recorded algorithms this GPU and cuBLASLt do not offer

    void clear() {
        for (auto& [shape, plan] : by_shape) {
            if (plan->desc) cublasLtMatmulDescDestroy(plan->desc);
            for (cublasLtMatrixLayout_t l : {plan->a, plan->b, plan->d})
                if (l) cublasLtMatrixLayoutDestroy(l);
        }
        by_shape.clear(), order.clear();
    }
    ~LtPlans() { clear(); }
};
inline LtPlans& lt_plans() {
    static LtPlans plans;
    return plans;
}

// TRAIN_GPT_GEMM_PICK=N, read on the CPU runtime only: its timings say nothing of a GPU's,
// so the step's products take the first candidate there without timing, unless this asks
// the start-up pass to time them as a GPU does and then keep candidate N (the last when
// fewer are offered): the tests' way to make the choice differ from one process to the
// next, as timing can on a GPU. -1 when unset, and always in a GPU build.
inline int lt_pick_for_tests() {
#ifdef CPU_CUDA
    const char* v = getenv("TRAIN_GPT_GEMM_PICK");
    if (!v) return -1;
    char* end = nullptr;
    long n = strtol(v, &end, 10);
    if (end == v || *end || n < 0 || n >= LT_CANDIDATES)
        throw UsageError(strf("TRAIN_GPT_GEMM_PICK='%s' is not valid: expected a candidate from 0 to %d", v,
                              LT_CANDIDATES - 1));
    return (int)n;
#else
    return -1;
#endif
}

// Milliseconds per run of candidate i of a plan on p's buffers: the mean of LT_TIMED_RUNS
// after one untimed. (Only in the start-up pass: D is written, and accumulated into when
// beta = 1, reps + 1 times.)
inline void lt_run(const LtPlan& plan, int i, const LtProduct& p);
inline double lt_time(const LtPlan& plan, int i, const LtProduct& p) {
    lt_run(plan, i, p);
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start, ctx.stream));
    for (int r = 0; r < LT_TIMED_RUNS; r++) lt_run(plan, i, p);
    CUDA_CHECK(cudaEventRecord(stop, ctx.stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float total = 0;
    CUDA_CHECK(cudaEventElapsedTime(&total, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return total / LT_TIMED_RUNS;
}

// Which candidate a new plan runs (see above).
inline void lt_choose(LtPlan& plan, const LtProduct& p) {
    LtPlans& all = lt_plans();
    plan.step = all.choosing;
    if (plan.step && all.next < all.recorded.size()) {  // the resumed run's record
        const std::string& item = all.recorded[all.next++];
        if (item == "s") {  // recorded on the separate path: kept there, for the same bits
            plan.chosen = -1, plan.how = LtHow::recorded;
            return;
        }
        const std::string name = item.substr(item.find('.') + 1);
        for (size_t i = 0; i < plan.offered.size(); i++)
            if (lt_algo_name(plan.offered[i].algo) == name) {
                plan.chosen = (int)i, plan.how = LtHow::recorded;
                return;
            }
        all.not_offered++;  // chosen again, below
    }
    plan.chosen = plan.offered.empty() ? -1 : 0, plan.how = LtHow::first;
    if (!plan.step || plan.offered.size() < 2 || !(all.time || all.pick >= 0)) return;
    for (size_t i = 0; i < plan.offered.size(); i++) {
        double ms = lt_time(plan, (int)i, p);
        if (plan.how != LtHow::timed || ms < plan.ms) plan.chosen = (int)i, plan.ms = ms, plan.how = LtHow::timed;
    }
    if (all.pick >= 0) plan.chosen = std::min(all.pick, (int)plan.offered.size() - 1), plan.how = LtHow::picked;
}

// The plan of p's product: found, or made (descriptors, layouts, one heuristic query) and chosen.
inline LtPlan& lt_plan(const LtProduct& p) {
    LtPlans& all = lt_plans();
    const LtShape shape = lt_shape(p);
    auto found = all.by_shape.find(shape);
    if (found != all.by_shape.end()) return *found->second;
    auto owned = std::make_unique<LtPlan>();
    LtPlan& plan = *owned;
    plan.shape = shape;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, ctx.compute, CUDA_R_32F));
    cublasOperation_t trans_a = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue, sizeof p.epilogue));
    if (p.bias) {  // the bias, or its gradient, in D's type (cuBLASLt's default, said explicitly)
        cudaDataType bias_type = p.d_type;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias,
                                                    sizeof p.bias));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                    sizeof bias_type));
    }
    if (p.aux) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux,
                                                    sizeof p.aux));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &p.aux_ld,
                                                    sizeof p.aux_ld));
    }
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, p.a_type, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, p.b_type, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.d, p.d_type, p.m, p.n, p.ldd));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t workspace = BLASLT_WORKSPACE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                      sizeof workspace));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> operands[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p.A}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p.B},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p.D}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p.D}};
    for (const auto& [attribute, ptr] : operands) {
        uint32_t alignment = alignment_of(ptr);
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &alignment, sizeof alignment));
    }
    cublasLtMatmulHeuristicResult_t results[LT_CANDIDATES];
    int found_count = 0;
    all.queries++;
    // no algorithm: NOT_SUPPORTED, or success with none returned (cublasLt.h allows both)
    cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(ctx.blaslt, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                                           pref, LT_CANDIDATES, results, &found_count);
    cublasLtMatmulPreferenceDestroy(pref);
    if (status != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK(status);
    if (status == CUBLAS_STATUS_SUCCESS)
        for (int i = 0; i < found_count; i++)
            if (results[i].state == CUBLAS_STATUS_SUCCESS) plan.offered.push_back(results[i]);
    all.order.push_back(&plan);
    all.by_shape.emplace(shape, std::move(owned));
    lt_choose(plan, p);
    return plan;
}
// Whether p's product runs on cuBLASLt (an algorithm is offered and chosen).
inline bool lt_offers(const LtProduct& p) { return lt_plan(p).chosen >= 0; }

// Candidate i of a plan, on p's pointers (the descriptor is the plan's; its pointers are this call's).
inline void lt_run(const LtPlan& plan, int i, const LtProduct& p) {
    if (p.bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias,
                                                    sizeof p.bias));
    if (p.aux)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux,
                                                    sizeof p.aux));
    const float one = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(ctx.blaslt, plan.desc, &one, p.A, plan.a, p.B, plan.b, &p.beta, p.D, plan.d, p.D,
                                plan.d, &plan.offered[i].algo, ctx.workspace, BLASLT_WORKSPACE, ctx.stream));
}

// The epilogues used here by name, as the log says them
inline const char* lt_epilogue_name(int64_t e) {
    switch (e) {
        case CUBLASLT_EPILOGUE_DEFAULT: return "default";
        case CUBLASLT_EPILOGUE_BIAS: return "bias";
        case CUBLASLT_EPILOGUE_GELU_AUX: return "gelu";
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "bias+gelu";
        case CUBLASLT_EPILOGUE_DGELU: return "dgelu";
        case CUBLASLT_EPILOGUE_BGRADB: return "bgradb";
        default: return "other";
    }
}

inline void lt_matmul(const LtProduct& p) {
    const LtPlan& plan = lt_plan(p);
    if (plan.chosen < 0)
        throw Error(strf("cuBLASLt has no algorithm for a %d×%d×%d product with epilogue %d", p.m, p.n, p.k,
                         (int)p.epilogue));
    lt_run(plan, plan.chosen, p);
}

// ---- the start-up pass and the record
//
// The record, written into every state file as the run-time choice "gemm" (host/checkpoint.h,
// RunChoices), names the algorithm of each of the step's products in the order the pass meets
// them: "gemm=KEYS/ITEM,ITEM,...", KEYS a hash (8 hex digits) of the products' LtShapes, so
// that a record made for other products (another -b, -t, model or --epilogues) is known and
// not applied; each ITEM "I.NAME", candidate I of the heuristic's and lt_algo_name's 6 hex
// digits (NAME decides on resume; I is for the reader), or "s" for a product on the separate
// path. 9 bytes a product: GPT-2's step has 15.
constexpr size_t LT_RECORD_MAX = 320;  // of the state header's 512 bytes of choices

inline std::string lt_record() {
    uint64_t h = 1469598103934665603ull;
    std::string items;
    for (const LtPlan* plan : lt_plans().order) {
        if (!plan->step) continue;
        for (int64_t v : plan->shape)
            for (int byte = 0; byte < 8; byte++) h = (h ^ (uint8_t)(v >> (8 * byte))) * 1099511628211ull;
        items += items.empty() ? "" : ",";
        items += plan->chosen < 0 ? std::string("s")
                                  : strf("%d.", plan->chosen) + lt_algo_name(plan->offered[plan->chosen].algo);
    }
    if (items.empty()) return "";
    return strf("%08x/", (unsigned)((h ^ (h >> 32)) & 0xffffffffu)) + items;
}

// Starts the start-up pass: the plans made so far are dropped, and the step's products, met
// next, follow `record` (a state file's "gemm", or "" to choose afresh).
inline void lt_choose_begin(const std::string& record) {
    LtPlans& all = lt_plans();
    all.clear();
    all.choosing = true;
    all.pick = lt_pick_for_tests();
    #ifdef CPU_CUDA
    all.time = false;  // the CPU's timings say nothing of a GPU's (TRAIN_GPT_GEMM_PICK times)
#else
    all.time = ctx.device >= 0;
#endif
    all.recorded.clear(), all.next = 0, all.not_offered = 0;
    const size_t slash = record.find('/');
    for (size_t pos = slash + 1; slash != std::string::npos && pos <= record.size();) {
        size_t end = std::min(record.find(',', pos), record.size());
        all.recorded.push_back(record.substr(pos, end - pos));
        pos = end + 1;
    }
}
// Ends it: false when `record` was made for other products than the pass met (then the
// caller runs the pass again with ""). The lines to print: what was chosen, how, and which
// products take the separate path; `from` names the record's file.
inline bool lt_choose_end(const std::string& record, const std::string& from, std::vector<std::string>* lines) {
    LtPlans& all = lt_plans();
    all.choosing = false;
    const std::string made = lt_record();
    if (!record.empty() && (made.substr(0, 9) != record.substr(0, 9) || all.next != all.recorded.size())) {
        lines->push_back(strf("gemm: '%s' records the algorithms of other products (another -b, -t, model or "
                              "--epilogues): they are chosen again",
                              from.c_str()));
        return false;
    }
    int step = 0, timed = 0, recorded = 0, picked = 0;
    std::string chosen;
    std::map<std::string, int> separate;  // epilogue -> products
    for (const LtPlan* plan : all.order) {
        if (!plan->step) continue;
        step++;
        timed += plan->how == LtHow::timed, recorded += plan->how == LtHow::recorded, picked += plan->how == LtHow::picked;
        const LtShape& s = plan->shape;
        chosen += strf("%s%lldx%lldx%lld%s%s ", chosen.empty() ? "" : ", ", (long long)s[2], (long long)s[3],
                       (long long)s[4], s[11] == CUBLASLT_EPILOGUE_DEFAULT ? "" : "+", 
                       s[11] == CUBLASLT_EPILOGUE_DEFAULT ? "" : lt_epilogue_name(s[11]));
        if (plan->chosen < 0) {
            chosen += "separate";
            separate[lt_epilogue_name(s[11])]++;
        } else {
            chosen += strf("#%d/%zu %s", plan->chosen, plan->offered.size(),
                           lt_algo_name(plan->offered[plan->chosen].algo).c_str());
            if (plan->how == LtHow::timed) chosen += strf(" %.3f ms", plan->ms);
        }
    }
    if (step == 0) return true;
    const char* how = recorded == step ? "as recorded"
                      : timed + picked > 0 ? "the fastest of each product's candidates, timed"
                                           : "the heuristic's first";
    lines->push_back(strf("gemm: the step's %d cuBLASLt products, algorithm (#candidate/offered, name) %s%s: %s",
                          step, how,
                          picked ? strf(" (TRAIN_GPT_GEMM_PICK=%d keeps that candidate)", all.pick).c_str() : "",
                          chosen.c_str()));
    if (all.not_offered > 0)
        lines->push_back(strf("gemm: %d of the %zu algorithms recorded in '%s' are not offered by this GPU and "
                              "cuBLASLt: those products chose again, so this run will not reproduce the recorded "
                              "one bit for bit",
                              all.not_offered, all.recorded.size(), from.c_str()));
    for (const auto& [epilogue, count] : separate)
        lines->push_back(strf("gemm: %d product%s with the %s epilogue on --epilogues separate's path (cublasGemmEx "
                              "and the kernel)%s",
                              count, count == 1 ? "" : "s", epilogue.c_str(),
                              recorded == step ? ", as recorded" : ": cuBLASLt offers no algorithm for it"));
    if (made.size() > LT_RECORD_MAX)
        lines->push_back(strf("gemm: the record of %d products takes %zu bytes, more than the state file's %zu: "
                              "not recorded, a resumed run chooses again",
                              step, made.size(), LT_RECORD_MAX));
    return true;
}
// The record for the state files ("" when none, or too long to keep).
inline std::string lt_record_to_keep() {
    std::string made = lt_record();
    return made.size() > LT_RECORD_MAX ? "" : made;
}

// The forward on N rows (no more than product_rows allows): the layout of matmul_forward below.
inline void matmul_forward_rows(floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int IC,
                                int OC, floatX* pre_gelu) {
    LtProduct p{true, false, OC, N, IC, w, IC, CUDA_FLOATX, inp, IC, CUDA_FLOATX, out, OC, CUDA_FLOATX};
    p.epilogue = pre_gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                          : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
    p.bias = bias;
    p.aux = pre_gelu, p.aux_ld = OC;  // the GELU's input, laid out as the output
    lt_matmul(p);
}

// row-major out (N×OC) = inp (N×IC) · wᵀ (+ bias); with pre_gelu, out = gelu(that) and
// pre_gelu keeps its input (for the backward). bias may be null.
// column-major outᵀ (OC×N) = op_T(w: IC×OC, ld IC) · inpᵀ (IC×N, ld IC), the bias added to
// each of its columns, cuBLASLt's epilogue doing the rest; in chunks of rows (product_rows).
void matmul_forward(floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int IC, int OC,
                    floatX* pre_gelu = nullptr) {
    const int rows = product_rows(N, IC, OC);
    for (int n = 0; n < N; n += rows)
        matmul_forward_rows(out + (size_t)n * OC, inp + (size_t)n * IC, w, bias, std::min(rows, N - n), IC, OC,
                            pre_gelu ? pre_gelu + (size_t)n * OC : nullptr);
}

// out = gelu(inp), in GPT-2's tanh form
__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= packs_for<floatX>(n)) return;
    Pack<floatX> x = load_pack(inp, i, n), out_pack;
    for (int k = 0; k < pack_size<floatX>(); k++) {
        float xk = (float)x.v[k];
        out_pack.v[k] = floatX(0.5f * xk * (1.0f + tanhf(GELU_K * (xk + 0.044715f * xk * xk * xk))));
    }
    store_pack(out, i, n, out_pack);
}
void gelu_forward(floatX* out, const floatX* inp, size_t n) {
    gelu_forward_kernel<<<blocks_for(packs_for<floatX>(n)), THREADS, 0, ctx.stream>>>(out, inp, n);
    KERNEL_CHECK();
}
// The MLP's first layer: out = gelu(inp·wᵀ + bias), pre_gelu keeping GELU's input. cuBLASLt's
// epilogue applies GELU as it writes the product, unless `gelu_kernel`: then gelu_forward
// does, as --recompute 1's backward does again, so that the backward sees the forward's very
// bits. (The epilogue's GELU is not gelu_forward's to the bit on a GPU, and in bf16 it reads
// the float32 sum where gelu_forward reads pre_gelu, rounded.)
void matmul_gelu_forward(floatX* out, floatX* pre_gelu, const floatX* inp, const floatX* w, const floatX* bias, int N,
                         int IC, int OC, bool gelu_kernel) {
    if (!gelu_kernel) return matmul_forward(out, inp, w, bias, N, IC, OC, pre_gelu);
    matmul_forward(pre_gelu, inp, w, bias, N, IC, OC);
    gelu_forward(out, pre_gelu, (size_t)N * OC);
}
// dinp = dout · gelu'(inp), in place on dout allowed
__global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= packs_for<floatX>(n)) return;
    Pack<floatX> x = load_pack(inp, i, n), d = load_pack(dout, i, n), out;
    for (int k = 0; k < pack_size<floatX>(); k++) {
        float xk = (float)x.v[k], u = GELU_K * (xk + 0.044715f * xk * xk * xk), th = tanhf(u);
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * xk * xk);
        out.v[k] = floatX((0.5f * (1.0f + th) + 0.5f * xk * (1.0f - th * th) * du) * (float)d.v[k]);
    }
    store_pack(dinp, i, n, out);
}
void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    gelu_backward_kernel<<<blocks_for(packs_for<floatX>(n)), THREADS, 0, ctx.stream>>>(dinp, inp, dout, n);
    KERNEL_CHECK();
}

// First pass of dbias[o] += Σ_n dout[n,o]: per chunk of rows
__global__ void bias_grad_partial_kernel(float* partial, const floatX* dout, int N, int OC) {
    int o = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
    int n_end = min(N, (chunk + 1) * CHUNK_ROWS);
    float s = 0;
    if (o < OC)
        for (int n = chunk * CHUNK_ROWS + threadIdx.y; n < n_end; n += LANES) s += (float)dout[(size_t)n * OC + o];
    __shared__ float lane_sum[LANES][32];
    lane_sum[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && o < OC) {
        for (int k = 1; k < LANES; k++) s += lane_sum[k][threadIdx.x];
        partial[(size_t)chunk * OC + o] = s;
    }
}
// Which products run the backward's pointwise work as their epilogues (--epilogues):
// fused, both products on cuBLASLt with GELU's gradient and the bias gradient as epilogues;
// separate, the products on cublasGemmEx and that work in the kernels above (the reference).
enum class Epilogues { fused, separate };

// The bias gradient, dbias (OC) += Σ_n dout[n,:] over N rows: partial sums per chunk of rows,
// then the chunks added in order. Reads N·OC floatX, writes and reads row_chunks(N)·OC floats.
void bias_backward(float* dbias, float* scratch, const floatX* dout, int N, int OC) {
    int chunks = row_chunks(N);
    bias_grad_partial_kernel<<<dim3(blocks_for(OC, 32), chunks), dim3(32, LANES), 0, ctx.stream>>>(scratch, dout, N,
                                                                                                   OC);
    KERNEL_CHECK();
    sum_partials_add(dbias, scratch, chunks, OC);
}

// The backward's two products of one chunk of n rows on cuBLASLt (matmul_backward's fused path).
//   dinp: 2·n·IC·OC FLOPs; reads n·OC + OC·IC floatX, writes n·IC floatX. With gelu_in, the
//   DGELU epilogue reads n·IC floatX more and multiplies as it writes: the separate path's
//   gelu_backward reads dinp and gelu_in and writes dinp again (3·n·IC floatX), so the
//   epilogue saves 2·n·IC floatX of traffic and a launch (GPT-2 124M, B·T = 65536: 805 MB a
//   layer in bf16).
//   dw: 2·n·IC·OC FLOPs; reads n·(IC + OC) floatX, reads and writes IC·OC floats. With
//   dbias, the BGRADB epilogue sums op(B) = dout over k = n as the product reads it, into
//   scratch (OC floats, overwritten as documented), then one pass adds it to dbias: the
//   separate path's bias_backward reads n·OC floatX again (GPT-2 124M: 906 MB a layer for
//   the four biases in bf16) and its partial sums.
inline LtProduct dinp_product(floatX* dinp, const floatX* dout, const floatX* w, int n, int IC, int OC,
                              const floatX* gelu_in) {
    // row-major dinp (n×IC) = dout (n×OC) · w (OC×IC), ⊙ gelu'(gelu_in) with gelu_in
    // column-major dinpᵀ (IC×n) = w (IC×OC, ld IC) · doutᵀ (OC×n, ld OC); aux gelu_inᵀ (IC×n, ld IC)
    LtProduct di{false, false, IC, n, OC, w, IC, CUDA_FLOATX, dout, OC, CUDA_FLOATX, dinp, IC, CUDA_FLOATX};
    if (gelu_in) di.epilogue = CUBLASLT_EPILOGUE_DGELU, di.aux = gelu_in, di.aux_ld = IC;
    return di;
}
inline LtProduct dw_product(float* dw, float* scratch, const floatX* dout, const floatX* inp, int n, int IC, int OC,
                            bool bias) {
    // row-major dw (OC×IC) += doutᵀ (OC×n) · inp (n×IC), dbias (OC) = Σ_n dout[n,:]
    // column-major dwᵀ (IC×OC) += inpᵀ (IC×n, ld IC) · op_T(doutᵀ: OC×n, ld OC), into float32;
    // op(B) = dout (n×OC): BGRADB's sum over k = n gives a vector of OC, in D's type (float32)
    LtProduct dwp{false, true, IC, OC, n, inp, IC, CUDA_FLOATX, dout, OC, CUDA_FLOATX, dw, IC, CUDA_R_32F, 1.0f};
    if (bias) dwp.epilogue = CUBLASLT_EPILOGUE_BGRADB, dwp.bias = scratch;
    return dwp;
}

// The two products of one chunk of n rows on cublasGemmEx (the separate path); gelu_in and
// dbias are the caller's. Each on its own: a product cuBLASLt offers no algorithm for takes
// this path on --epilogues fused too.
inline void dinp_gemm(floatX* dinp, const floatX* dout, const floatX* w, int n, int IC, int OC) {
    const float one = 1.0f, zero = 0.0f;
    // row-major dinp (n×IC) = dout (n×OC) · w (OC×IC)
    // column-major dinpᵀ (IC×n) = w (IC×OC, ld IC) · doutᵀ (OC×n, ld OC)
    CUBLAS_CHECK(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, IC, n, OC, &one, w, CUDA_FLOATX, IC, dout,
                              CUDA_FLOATX, OC, &zero, dinp, CUDA_FLOATX, IC, ctx.compute, CUBLAS_GEMM_DEFAULT));
}
inline void dw_gemm(float* dw, const floatX* dout, const floatX* inp, int n, int IC, int OC) {
    const float one = 1.0f;
    // row-major dw (OC×IC) += doutᵀ (OC×n) · inp (n×IC)
    // column-major dwᵀ (IC×OC) += inpᵀ (IC×n, ld IC) · op_T(doutᵀ: OC×n, ld OC), into float32
    CUBLAS_CHECK(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, n, &one, inp, CUDA_FLOATX, IC, dout,
                              CUDA_FLOATX, OC, &one, dw, CUDA_R_32F, IC, ctx.compute, CUBLAS_GEMM_DEFAULT));
}

// Overwrites dinp; dw and dbias (float32 parameter gradients) +=; dbias may be null. With
// gelu_in (the forward's GELU input, laid out as dinp: the MLP's fcproj, whose input was
// gelu(gelu_in)), dinp is the gradient of gelu_in: (dout·w) ⊙ gelu'(gelu_in).
// scratch: row_chunks(N) · OC floats (only with a bias)
// The products run in chunks of rows (product_rows); dw (and dbias) add up the chunks.
// The two paths differ by rounding only: fused multiplies by gelu' before dinp is rounded to
// floatX (separate: after), and sums the bias in cuBLASLt's order. On --epilogues fused,
// each of the two products whose epilogue cuBLASLt offers no algorithm for (in any chunk)
// runs as on the separate path, and computes its bits (gpu/matmul.cuh's plans say which).
void matmul_backward(floatX* dinp, float* dw, float* dbias, float* scratch, const floatX* dout, const floatX* inp,
                     const floatX* w, int N, int IC, int OC, const floatX* gelu_in, Epilogues path) {
    if (gelu_in && path == Epilogues::fused && IC % 8 != 0)  // cublasLt.h: the aux's ld, a multiple of 8
        throw Error(strf("--epilogues fused needs the GELU's width (4C = %d) to be a multiple of 8", IC));
    const int rows = product_rows(N, IC, OC);
    auto chunk = [&](int n0, auto&& run) {
        run(std::min(rows, N - n0), dout + (size_t)n0 * OC, inp + (size_t)n0 * IC, dinp + (size_t)n0 * IC,
            gelu_in ? gelu_in + (size_t)n0 * IC : nullptr);
    };
    bool lt_dinp = path == Epilogues::fused, lt_dw = lt_dinp;  // on cuBLASLt: its first and last chunk's shapes offered
    for (int n0 : {0, (N - 1) / rows * rows})
        if (lt_dinp || lt_dw)
            chunk(n0, [&](int n, const floatX* dout_rows, const floatX* inp_rows, floatX* dinp_rows, const floatX* g) {
                lt_dinp = lt_dinp && lt_offers(dinp_product(dinp_rows, dout_rows, w, n, IC, OC, g));
                lt_dw = lt_dw && lt_offers(dw_product(dw, scratch, dout_rows, inp_rows, n, IC, OC, dbias));
            });
    for (int n0 = 0; n0 < N; n0 += rows)
        chunk(n0, [&](int n, const floatX* dout_rows, const floatX* inp_rows, floatX* dinp_rows, const floatX* g) {
            if (lt_dinp) lt_matmul(dinp_product(dinp_rows, dout_rows, w, n, IC, OC, g));
            else dinp_gemm(dinp_rows, dout_rows, w, n, IC, OC);
            if (lt_dw) {
                lt_matmul(dw_product(dw, scratch, dout_rows, inp_rows, n, IC, OC, dbias));
                if (dbias) sum_partials_add(dbias, scratch, 1, OC);  // the parameter gradients accumulate (+=)
            } else {
                dw_gemm(dw, dout_rows, inp_rows, n, IC, OC);
            }
        });
    if (gelu_in && !lt_dinp) gelu_backward(dinp, gelu_in, dinp, (size_t)N * IC);
    if (dbias && !lt_dw) bias_backward(dbias, scratch, dout, N, OC);
}

}  // namespace gpu
