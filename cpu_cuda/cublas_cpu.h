// cpu_cuda/cublas_cpu.h: the cuBLAS and cuBLASLt calls the project makes, on the CPU. The
// functions are the toolkit's own declarations (cublas_api.h, cublasLt.h), defined here.
//
// Semantics are cuBLAS's documented ones: column-major matrices, op(X) = X or Xᵀ (C means T
// for real types), D = alpha·op(A)·op(B) + beta·C, the documented argument checks and status
// codes, beta == 0 never reads C, and a cuBLASLt algorithm refuses buffers less aligned than
// the preference it was chosen under (check_alignment). Every product accumulates in float32. Inputs in bf16
// or fp16 are widened exactly; with TF32 (or fast bf16/fp16) math the float32 inputs are
// first rounded to that format, which is all a tensor core's arithmetic is modelled by. The
// output is rounded to its type once, after alpha, beta and the epilogue.
//
// What a GPU could not check: every matrix, vector and batch must lie inside one device
// allocation (memory.h), or the call reports the operand and returns
// CUBLAS_STATUS_EXECUTION_FAILED, where a GPU would fault or silently corrupt memory.
//
// The engine is a packed, register-blocked SGEMM. Each task owns one tile of D: it copies
// ("packs") blocks of op(A) and op(B) into contiguous float panels, converting and rounding
// as it goes, and a micro-kernel keeps an MR×NR block of the tile in vector registers. Each
// element of D is one chain of multiply-adds (fused, where the CPU has FMA) over k = 0, 1,
// ..., K-1, whatever the tiling or the number of threads, so results are bit-identical from
// run to run and across CPU_CUDA_THREADS. Batches and tiles are shared out over the pool
// (pool.h). cuBLASLt's heuristic offers three algorithms, as a GPU's offers several: k in 1,
// 2 or 3 slices, each slice one chain, the slices' sums added in order (split-K without a
// workspace); they differ in rounding only, so a caller's choice among them shows in the bits.
//
// cuBLAS's own blocking and split-K orders are not reproduced, so results match a GPU to
// float32 rounding, not bit for bit. Calls run at once on the calling thread's behalf, so
// streams and workspaces are accepted and have no effect; a cuBLAS (not Lt) algorithm is the
// one engine, and a cuBLASLt algorithm carries its k slices and the alignments it was chosen for.
//
// CPU_CUDA_LT_REFUSE_EPILOGUE=NAME[,NAME...] (bias, gelu_aux_bias, dgelu, bgradb, ...: the
// epilogue's name in cublasLt.h, lower case, without CUBLASLT_EPILOGUE_) makes the heuristic
// offer no algorithm for those epilogues (CUBLAS_STATUS_NOT_SUPPORTED, none returned), and
// cublasLtMatmul refuse them, as a GPU or cuBLASLt version without a kernel for them would:
// the caller's fallback can be tested. Read at each call.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#if defined(__AVX__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "capture.h"
#include "exec.h"
#include "memory.h"
#include "pool.h"

// The toolkit declares the handles but leaves them opaque: the runtime defines them.
struct cublasContext {
    cudaStream_t stream;
    cublasMath_t math_mode;
    cublasPointerMode_t pointer_mode;
};
struct cublasLtContext {};  // cuBLASLt keeps its settings in descriptors; the handle holds none

namespace cpu_cuda {
namespace blas {

// ----------------------------------------------------------------------------
// Element types and rounding

// The matrix element types the subset supports: float, bf16 and fp16.
inline bool is_supported_type(int t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; }
inline int64_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

// How float32 inputs are rounded before the product: not at all, or to the format a tensor
// core multiplies in.
enum class Rounding { none, tf32, bf16, fp16 };

// TF32 keeps float32's 8-bit exponent and 10 of its 23 mantissa bits. NVIDIA's TF32 article
// says the tensor cores "round FP32 inputs to TF32"; PTX's conversion for it,
// cvt.rna.tf32.f32 (the only one before sm_90), rounds to nearest with ties away from zero:
// add half a unit of the 10th mantissa bit to the magnitude and cut the 13 bits below it.
// Infinity and NaN pass unchanged (the cut would turn a NaN whose payload lies in those 13
// bits into infinity).
inline float round_to_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}

template <Rounding R>
inline float round_input(float x) {
    if constexpr (R == Rounding::tf32) return round_to_tf32(x);
    if constexpr (R == Rounding::bf16) return __bfloat162float(__float2bfloat16(x));  // nearest, ties to even
    if constexpr (R == Rounding::fp16) return __half2float(__float2half(x));
    return x;
}

inline float to_float(float x) { return x; }
inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
inline float to_float(__half x) { return __half2float(x); }

// n consecutive elements of type t as floats, and floats back to type t (to nearest, ties to
// even).
inline void load_floats(cudaDataType t, const void* src, int64_t n, float* dst) {
    if (t == CUDA_R_32F) {
        memcpy(dst, src, (size_t)n * 4);
    } else if (t == CUDA_R_16BF) {
        for (int64_t i = 0; i < n; i++) dst[i] = __bfloat162float(static_cast<const __nv_bfloat16*>(src)[i]);
    } else {
        for (int64_t i = 0; i < n; i++) dst[i] = __half2float(static_cast<const __half*>(src)[i]);
    }
}
inline void store_floats(cudaDataType t, const float* src, int64_t n, void* dst) {
    if (t == CUDA_R_32F) {
        memcpy(dst, src, (size_t)n * 4);
    } else if (t == CUDA_R_16BF) {
        for (int64_t i = 0; i < n; i++) static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16(src[i]);
    } else {
        for (int64_t i = 0; i < n; i++) static_cast<__half*>(dst)[i] = __float2half(src[i]);
    }
}

// GELU in the tanh form cuBLASLt uses, and its derivative for the backward epilogues.
// (cuBLASLt does not say how its epilogue evaluates it: on a GPU its bits need not be those
// of a GELU kernel's.)
constexpr float GELU_SCALE = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float GELU_CUBE = 0.044715f;
inline float gelu(float x) { return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + GELU_CUBE * x * x * x))); }
inline float gelu_grad(float x) {
    float t = tanhf(GELU_SCALE * (x + GELU_CUBE * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
}

// ----------------------------------------------------------------------------
// What one call computes, whichever entry point it came through

// A batch of column-major matrices: element (r, c) of batch b at ptr + (b·stride + r + c·ld).
struct Matrix {
    const void* ptr;
    cudaDataType type;
    int64_t ld, stride;
    const char* at(int64_t b, int64_t r, int64_t c) const {
        return static_cast<const char*>(ptr) + (b * stride + r + c * ld) * type_size(type);
    }
};

enum class Activation { none, relu, gelu, gelu_grad };

// cuBLASLt's epilogues, taken apart. The steps run in this order on v = alpha·acc + beta·C:
// add the bias, store v to aux, apply the activation (or multiply by gelu'(aux)), add v to
// the bias gradient, round v to D.
struct Epilogue {
    bool bias = false;          // v += bias[row]
    bool aux_out = false;       // aux(row, col) = v: the activation's input, kept for training
    Activation act = Activation::none;
    bool bias_grad = false;     // bias[row] = Σ_col v, after the activation's gradient
    bool grad_a = false;        // bias[row] = Σ_k op(A)(row, k)
    bool grad_b = false;        // bias[col] = Σ_k op(B)(k, col)
    const void* bias_ptr = nullptr;
    cudaDataType bias_type = CUDA_R_32F;
    const void* aux = nullptr;  // written by aux_out, read by gelu_grad
    int64_t aux_ld = 0;
    cudaDataType aux_type = CUDA_R_32F;
    bool any() const { return bias || aux_out || act != Activation::none || bias_grad || grad_a || grad_b; }
    bool reads_aux() const { return act == Activation::gelu_grad; }
    bool writes_bias() const { return bias_grad || grad_a || grad_b; }
};

struct Gemm {
    const char* call;           // for messages: "cublasSgemm", ...
    int64_t m, n, k;
    int batch;
    bool trans_a, trans_b;
    Matrix A, B, C, D;          // op(A) is m×k, op(B) k×n, C and D m×n; D is written
    float alpha, beta;
    Rounding rounding;          // of float32 inputs
    Epilogue ep;
    int slices = 1;             // cuBLASLt's algorithm: k in this many slices, added in order
};

// op(X)(r, c) for a matrix stored as X.
inline const char* op_at(const Matrix& x, bool trans, int64_t b, int64_t r, int64_t c) {
    return trans ? x.at(b, c, r) : x.at(b, r, c);
}

// ----------------------------------------------------------------------------
// The micro-kernel keeps an MR×NR block of D in vector registers: MR rows as two vectors
// (rows are contiguous in column-major storage) by NR columns. Each step of k adds column k
// of A's panel times row k of B's, with fused multiply-adds, written out because g++ in ISO
// mode (-std=c++17) does not contract a·b + c into one.

#if defined(__AVX512F__)
using Vec = __m512;
constexpr int VL = 16;  // floats per vector
inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec vbroadcast(float x) { return _mm512_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
#elif defined(__AVX__) && defined(__FMA__)
using Vec = __m256;
constexpr int VL = 8;
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec vbroadcast(float x) { return _mm256_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
#else  // portable: GCC vector types, multiply and add rounded separately
typedef float Vec __attribute__((vector_size(16)));
constexpr int VL = 4;
inline Vec vload(const float* p) {
    Vec v;
    memcpy(&v, p, sizeof v);
    return v;
}
inline void vstore(float* p, Vec v) { memcpy(p, &v, sizeof v); }
inline Vec vbroadcast(float x) { return Vec{} + x; }
inline Vec vfma(Vec a, Vec b, Vec c) { return a * b + c; }
#endif

constexpr int MR = 2 * VL;  // rows of the register block: two vectors
constexpr int NR = 6;       // its columns: 12 accumulators, 2 A vectors, 1 broadcast B value
constexpr int KC = 256;     // depth of a packed block: an A micro-panel is 16 KiB (AVX2)
constexpr int MC = 96;      // rows of A packed at once: 96 KiB, kept in L2
// A task computes a tile of D of up to TILE_MAX × TILE_MAX, its sums kept as floats (2.25
// MiB, touched once per KC products), halved while there are too few tiles for the threads.
// Smaller tiles repack more: op(A) is packed once per column tile, op(B) once per row tile.
constexpr int64_t TILE_MAX = 768, TILE_MIN = 192;
// Tiles start at multiples of CHUNK columns: the bias gradient adds up the columns in
// chunks of that many, so that its order does not depend on the tiling.
constexpr int64_t CHUNK = TILE_MIN;
static_assert(MC % MR == 0 && TILE_MIN % MC == 0 && TILE_MIN % NR == 0, "blocks must nest");

// acc (MR×NR, column j at acc + j·ldacc) = or += Ap (kc×MR, packed) · Bp (kc×NR, packed)
inline void micro_kernel(int kc, const float* Ap, const float* Bp, float* acc, int64_t ldacc, bool add) {
    Vec c[NR][2];
#pragma GCC unroll 6
    for (int j = 0; j < NR; j++) {
        c[j][0] = add ? vload(acc + j * ldacc) : vbroadcast(0.0f);
        c[j][1] = add ? vload(acc + j * ldacc + VL) : vbroadcast(0.0f);
    }
    for (int p = 0; p < kc; p++, Ap += MR, Bp += NR) {
        Vec a0 = vload(Ap), a1 = vload(Ap + VL);
#pragma GCC unroll 6
        for (int j = 0; j < NR; j++) {
            Vec b = vbroadcast(Bp[j]);
            c[j][0] = vfma(a0, b, c[j][0]);
            c[j][1] = vfma(a1, b, c[j][1]);
        }
    }
#pragma GCC unroll 6
    for (int j = 0; j < NR; j++) {
        vstore(acc + j * ldacc, c[j][0]);
        vstore(acc + j * ldacc + VL, c[j][1]);
    }
}

// Copies X(r, p), r < rows, p < depth, into panels of W rows laid out [panel][p][W],
// converted to float and rounded. X has leading dimension ld and is stored by columns
// (X(r, p) at src[r + p·ld]) or by rows (at src[r·ld + p]); by rows, 8 values of p at a
// time are turned round in a small buffer, so that reads and writes both run along memory.
// A last partial panel is padded with zeros: the micro-kernel always runs whole, and what
// the padding produces lands in sums that are never read, but it must not be garbage (a
// denormal would slow the kernel down).
template <class T, Rounding R, int W>
void pack(float* dst, const void* src, int64_t ld, bool by_columns, int64_t rows, int64_t depth) {
    const T* x = static_cast<const T*>(src);
    for (int64_t r0 = 0; r0 < rows; r0 += W, dst += W * depth) {
        int64_t w = std::min<int64_t>(W, rows - r0);
        if (by_columns) {
            for (int64_t p = 0; p < depth; p++) {
                const T* in = x + r0 + p * ld;
                float* out = dst + p * W;
                for (int64_t r = 0; r < w; r++) out[r] = round_input<R>(to_float(in[r]));
                for (int64_t r = w; r < W; r++) out[r] = 0.0f;
            }
        } else {
            constexpr int P = 8;
            float block[P][W] = {};  // rows from w on stay zero
            for (int64_t p0 = 0; p0 < depth; p0 += P) {
                int np = (int)std::min<int64_t>(P, depth - p0);
                for (int64_t r = 0; r < w; r++) {
                    const T* in = x + (r0 + r) * ld + p0;
                    if (np == P)  // the common case, unrolled
#pragma GCC unroll 8
                        for (int q = 0; q < P; q++) block[q][r] = round_input<R>(to_float(in[q]));
                    else
                        for (int q = 0; q < np; q++) block[q][r] = round_input<R>(to_float(in[q]));
                }
                memcpy(dst + p0 * W, block, sizeof(float) * W * np);
            }
        }
    }
}
using PackFn = void (*)(float*, const void*, int64_t, bool, int64_t, int64_t);

// Only float32 inputs are ever rounded: bf16 and fp16 convert to float exactly.
template <int W>
PackFn pack_for(cudaDataType t, Rounding r) {
    if (t == CUDA_R_16BF) return pack<__nv_bfloat16, Rounding::none, W>;
    if (t == CUDA_R_16F) return pack<__half, Rounding::none, W>;
    switch (r) {
        case Rounding::tf32: return pack<float, Rounding::tf32, W>;
        case Rounding::bf16: return pack<float, Rounding::bf16, W>;
        case Rounding::fp16: return pack<float, Rounding::fp16, W>;
        default: return pack<float, Rounding::none, W>;
    }
}

// A grow-only, 64-byte aligned float buffer.
class Floats {
  public:
    float* get(size_t n) {
        if (n > size_) {
            data_.reset(static_cast<float*>(::operator new(n * sizeof(float), std::align_val_t(64))));
            size_ = n;
        }
        return data_.get();
    }

  private:
    struct Free {
        void operator()(float* p) const { ::operator delete(p, std::align_val_t(64)); }
    };
    std::unique_ptr<float, Free> data_;
    size_t size_ = 0;
};
// Each OS thread packs into space of its own, kept between calls.
struct Scratch {
    Floats a, b, acc, column, part;
};
inline Scratch& scratch() {
    static thread_local Scratch s;
    return s;
}

constexpr int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }
constexpr int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

// ----------------------------------------------------------------------------
// Running a Gemm

// Checks that a batch of rows×cols matrices (ld, stride in elements) lies inside one
// allocation: the span from the lowest start to the highest end, so strides of any sign work.
inline bool check_matrices(const char* call, const char* name, const void* p, cudaDataType t, int64_t rows,
                           int64_t cols, int64_t ld, int64_t stride, int batch) {
    if (rows == 0 || cols == 0 || batch == 0) return true;
    int64_t one = (cols - 1) * ld + rows, last = (int64_t)(batch - 1) * stride;
    int64_t lo = std::min<int64_t>(0, last), hi = std::max<int64_t>(0, last) + one;
    int64_t s = type_size(t);
    return check_range(static_cast<const char*>(p) + lo * s, (size_t)((hi - lo) * s), call, name);
}

inline bool operands_in_memory(const Gemm& g, bool product) {
    const Epilogue& e = g.ep;
    bool reads_a = product || e.grad_a, reads_b = product || e.grad_b;
    int64_t ar = g.trans_a ? g.k : g.m, ac = g.trans_a ? g.m : g.k;
    int64_t br = g.trans_b ? g.n : g.k, bc = g.trans_b ? g.k : g.n;
    auto vector_ok = [&](const void* p, cudaDataType t, int64_t n) {
        return check_range(p, (size_t)(n * type_size(t)), g.call, "bias");
    };
    return (!reads_a || check_matrices(g.call, "A", g.A.ptr, g.A.type, ar, ac, g.A.ld, g.A.stride, g.batch)) &&
           (!reads_b || check_matrices(g.call, "B", g.B.ptr, g.B.type, br, bc, g.B.ld, g.B.stride, g.batch)) &&
           (g.beta == 0 || check_matrices(g.call, "C", g.C.ptr, g.C.type, g.m, g.n, g.C.ld, g.C.stride, g.batch)) &&
           check_matrices(g.call, g.C.ptr == g.D.ptr ? "C" : "D", g.D.ptr, g.D.type, g.m, g.n, g.D.ld, g.D.stride,
                          g.batch) &&
           (!(e.bias || e.bias_grad || e.grad_a) || vector_ok(e.bias_ptr, e.bias_type, g.m)) &&
           (!e.grad_b || vector_ok(e.bias_ptr, e.bias_type, g.n)) &&
           (!(e.aux_out || e.reads_aux()) ||
            check_matrices(g.call, "aux", e.aux, e.aux_type, g.m, g.n, e.aux_ld, 0, 1));
}

// out[r] = Σ_p X(r, p), p in increasing order, X stored as for pack(): the bias gradients of
// the BGRADA and BGRADB epilogues. Each sum is one task's.
inline void row_sums(cudaDataType t, const void* src, int64_t ld, bool by_columns, int64_t rows, int64_t depth,
                     float* out) {
    constexpr int64_t ROWS = 256;  // per task
    const char* x = static_cast<const char*>(src);
    int64_t s = type_size(t);
    pool().run((size_t)ceil_div(rows, ROWS), [&](size_t task) {
        int64_t r0 = (int64_t)task * ROWS, n = std::min(ROWS, rows - r0);
        float* sum = out + r0;
        std::fill(sum, sum + n, 0.0f);
        if (by_columns) {  // a column of X at a time, added element by element
            float* v = scratch().column.get((size_t)n);
            for (int64_t p = 0; p < depth; p++) {
                load_floats(t, x + (r0 + p * ld) * s, n, v);
                for (int64_t r = 0; r < n; r++) sum[r] += v[r];
            }
        } else {
            float* v = scratch().column.get((size_t)depth);
            for (int64_t r = 0; r < n; r++) {
                load_floats(t, x + (r0 + r) * ld * s, depth, v);
                for (int64_t p = 0; p < depth; p++) sum[r] += v[p];
            }
        }
    });
}

// One task: the tile of rows [i0, i0 + rows) and columns [j0, j0 + cols) of batch b's D.
struct Tile {
    int b;
    int64_t i0, j0, rows, cols;
};

class Runner {
  public:
    explicit Runner(const Gemm& g)
        : g_(g),
          product_(g.k > 0 && g.alpha != 0),  // cuBLAS reads neither A nor B otherwise
          pack_a_(pack_for<MR>(g.A.type, g.rounding)),
          pack_b_(pack_for<NR>(g.B.type, g.rounding)) {
        // The largest tiles that give each thread two, where the shape allows.
        int64_t want = 2 * pool().size();
        while (g.batch * ceil_div(g.m, tile_rows_) * ceil_div(g.n, tile_cols_) < want) {
            bool rows = tile_rows_ > TILE_MIN && g.m > tile_rows_ / 2;
            bool cols = tile_cols_ > TILE_MIN && g.n > tile_cols_ / 2;
            if (!rows && !cols) break;
            if (rows && (!cols || tile_rows_ >= tile_cols_))
                tile_rows_ /= 2;
            else
                tile_cols_ /= 2;
        }
        row_tiles_ = ceil_div(g.m, tile_rows_), col_tiles_ = ceil_div(g.n, tile_cols_);
    }

    void compute() {
        const Epilogue& e = g_.ep;
        if (e.bias) {
            bias_.resize((size_t)g_.m);
            load_floats(e.bias_type, e.bias_ptr, g_.m, bias_.data());
        }
        if (e.bias_grad) partial_sums_.assign((size_t)(ceil_div(g_.n, CHUNK) * g_.m), 0.0f);
        size_t tiles = (size_t)(g_.batch * row_tiles_ * col_tiles_);
        pool().run(tiles, [this](size_t task) { run_tile(tile(task)); });
        if (e.bias_grad) {  // the chunks' sums, in order
            std::vector<float> sum((size_t)g_.m, 0.0f);
            for (int64_t c = 0; c < ceil_div(g_.n, CHUNK); c++)
                for (int64_t i = 0; i < g_.m; i++) sum[(size_t)i] += partial_sums_[(size_t)(c * g_.m + i)];
            store_floats(e.bias_type, sum.data(), g_.m, const_cast<void*>(e.bias_ptr));
        }
        if (e.grad_a || e.grad_b) {  // Σ_k op(A)(i, k), or Σ_k op(B)(k, j) as op(B)ᵀ's row sums
            const Matrix& x = e.grad_a ? g_.A : g_.B;
            bool by_columns = e.grad_a ? !g_.trans_a : g_.trans_b;
            int64_t n = e.grad_a ? g_.m : g_.n;
            std::vector<float> sum((size_t)n);
            row_sums(x.type, x.ptr, x.ld, by_columns, n, g_.k, sum.data());
            store_floats(e.bias_type, sum.data(), n, const_cast<void*>(e.bias_ptr));
        }
    }

  private:
    Tile tile(size_t task) const {
        int64_t per_batch = row_tiles_ * col_tiles_, t = (int64_t)task % per_batch;
        int64_t i0 = t / col_tiles_ * tile_rows_, j0 = t % col_tiles_ * tile_cols_;
        return {(int)((int64_t)task / per_batch), i0, j0, std::min(tile_rows_, g_.m - i0),
                std::min(tile_cols_, g_.n - j0)};
    }

    void run_tile(const Tile& t) {
        Scratch& s = scratch();
        int64_t ldacc = round_up(t.rows, MR);
        float* acc = s.acc.get((size_t)(ldacc * round_up(t.cols, NR)));
        if (product_) multiply(t, acc, ldacc, s);
        finish(t, acc, ldacc, s.column.get((size_t)t.rows));
    }

    // acc = op(A)·op(B) over the tile, KC values of k at a time: for each step the tile's
    // block of op(B) is packed once, and op(A) MC rows at a time; the micro-kernel adds step
    // after step to the sums, so that each element's sum runs k = 0, 1, ... as one chain.
    // With g.slices > 1 (a cuBLASLt algorithm) each slice of k is such a chain, summed apart
    // and added to the slices before it, in order.
    void multiply(const Tile& t, float* acc, int64_t ldacc, Scratch& s) const {
        float* Ap = s.a.get((size_t)(MC * KC));
        float* Bp = s.b.get((size_t)(round_up(t.cols, NR) * KC));
        const int64_t slice = std::max<int64_t>(1, ceil_div(g_.k, g_.slices)), tile = ldacc * round_up(t.cols, NR);
        float* part = g_.slices > 1 ? s.part.get((size_t)tile) : nullptr;
        for (int64_t k0 = 0; k0 < g_.k; k0 += slice) {
            const int64_t k1 = std::min(g_.k, k0 + slice);
            float* sums = k0 == 0 ? acc : part;
            for (int64_t pc = k0; pc < k1; pc += KC) {
                int kc = (int)std::min<int64_t>(KC, k1 - pc);
                // op(B)(p, j) as X(j, p): stored by columns exactly when B is transposed
                pack_b_(Bp, op_at(g_.B, g_.trans_b, t.b, pc, t.j0), g_.B.ld, g_.trans_b, t.cols, kc);
                for (int64_t ic = 0; ic < t.rows; ic += MC) {
                    int64_t mc = std::min<int64_t>(MC, t.rows - ic);
                    pack_a_(Ap, op_at(g_.A, g_.trans_a, t.b, t.i0 + ic, pc), g_.A.ld, !g_.trans_a, mc, kc);
                    for (int64_t jr = 0; jr < t.cols; jr += NR)
                        for (int64_t ir = 0; ir < mc; ir += MR)
                            micro_kernel(kc, Ap + ir * kc, Bp + jr * kc, sums + jr * ldacc + ic + ir, ldacc, pc > k0);
                }
            }
            if (k0 > 0)
                for (int64_t i = 0; i < tile; i++) acc[i] += part[i];
        }
    }

    // D = epilogue(alpha·acc + beta·C), a column at a time, in float; then rounded to D's type.
    // A float D without an epilogue is written in the same pass.
    void finish(const Tile& t, float* acc, int64_t ldacc, float* column) {
        const float alpha = g_.alpha, beta = g_.beta;
        const bool direct = g_.D.type == CUDA_R_32F && !g_.ep.any();
        for (int64_t jj = 0; jj < t.cols; jj++) {
            int64_t j = t.j0 + jj, rows = t.rows;
            float* v = acc + jj * ldacc;
            char* d = const_cast<char*>(g_.D.at(t.b, t.i0, j));
            float* out = direct ? reinterpret_cast<float*>(d) : v;
            const float* c = nullptr;  // beta == 0: C is never read, so it may hold NaN
            if (beta != 0 && g_.C.type == CUDA_R_32F) {
                c = reinterpret_cast<const float*>(g_.C.at(t.b, t.i0, j));
            } else if (beta != 0) {
                load_floats(g_.C.type, g_.C.at(t.b, t.i0, j), rows, column);
                c = column;
            }
            if (product_ && c)
                for (int64_t i = 0; i < rows; i++) out[i] = alpha * v[i] + beta * c[i];
            else if (product_)
                for (int64_t i = 0; i < rows; i++) out[i] = alpha * v[i];
            else if (c)
                for (int64_t i = 0; i < rows; i++) out[i] = beta * c[i];
            else
                std::fill(out, out + rows, 0.0f);
            if (direct) continue;
            if (g_.ep.any()) epilogue(v, t.i0, j, rows, column);
            store_floats(g_.D.type, v, rows, d);
        }
    }

    void epilogue(float* v, int64_t i0, int64_t j, int64_t rows, float* column) {
        const Epilogue& e = g_.ep;
        auto aux = [&] {
            return static_cast<char*>(const_cast<void*>(e.aux)) + (i0 + j * e.aux_ld) * type_size(e.aux_type);
        };
        if (e.bias)
            for (int64_t i = 0; i < rows; i++) v[i] += bias_[(size_t)(i0 + i)];
        if (e.aux_out) store_floats(e.aux_type, v, rows, aux());
        switch (e.act) {
            case Activation::relu:
                for (int64_t i = 0; i < rows; i++) v[i] = v[i] < 0 ? 0.0f : v[i];  // NaN stays NaN
                break;
            case Activation::gelu:
                for (int64_t i = 0; i < rows; i++) v[i] = gelu(v[i]);
                break;
            case Activation::gelu_grad:
                load_floats(e.aux_type, aux(), rows, column);
                for (int64_t i = 0; i < rows; i++) v[i] *= gelu_grad(column[i]);
                break;
            case Activation::none: break;
        }
        if (e.bias_grad) {  // this tile's rows of its chunk's sums
            float* sum = &partial_sums_[(size_t)(j / CHUNK * g_.m + i0)];
            for (int64_t i = 0; i < rows; i++) sum[i] += v[i];
        }
    }

    const Gemm& g_;
    const bool product_;
    const PackFn pack_a_, pack_b_;
    int64_t tile_rows_ = TILE_MAX, tile_cols_ = TILE_MAX, row_tiles_, col_tiles_;
    std::vector<float> bias_;          // the bias, as floats
    std::vector<float> partial_sums_;  // the bias gradient per chunk of columns: each task owns rows
};

// A product runs on the host's thread, after its stream's queued work (streams.h) and not
// after other streams' (the legacy default stream's rule aside).
inline DeviceAccess::Ordered after_stream(cudaStream_t stream) {
    wait_for_stream(stream);
    return {};
}

// Checks the operands' memory, then computes. Arguments have been validated. On a capturing
// stream (capture.h) the product becomes a graph node instead, its scalars already read, as
// cuBLAS reads host-side alpha and beta at the call.
inline cublasStatus_t execute(const Gemm& g, cudaStream_t stream) {
    if (g.m == 0 || g.n == 0 || g.batch == 0) return CUBLAS_STATUS_SUCCESS;
    if (capturing(stream)) {
        capture(stream, cudaGraphNodeTypeKernel, [g](cudaStream_t) {
            return execute(g, nullptr) == CUBLAS_STATUS_SUCCESS ? cudaSuccess : set_error(cudaErrorIllegalAddress);
        });
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!operands_in_memory(g, g.k > 0 && g.alpha != 0)) return CUBLAS_STATUS_EXECUTION_FAILED;
    std::lock_guard<std::recursive_mutex> one_grid(device_mutex());  // (a kernel may run on a stream's worker)
    Runner(g).compute();
    return CUBLAS_STATUS_SUCCESS;
}

// ----------------------------------------------------------------------------
// Argument checks shared by the entry points

inline bool valid_op(int op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

// cuBLAS's documented conditions for INVALID_VALUE: negative sizes or batch count, an
// operation other than N, T or C, a leading dimension below the rows it must span (and
// below 1), a null alpha or beta.
inline cublasStatus_t check_gemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                 int k, const void* alpha, int lda, int ldb, const void* beta, int ldc, int batch) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!valid_op(ta) || !valid_op(tb) || m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k) || ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) ||
        ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

// The type combinations cuBLAS documents for a float32 compute type, and how the inputs are
// rounded. CUBLAS_COMPUTE_32F takes A = B in float, bf16 or fp16, and C in that type or
// float; with float inputs it follows the handle's math mode (TF32 tensor-op math: TF32;
// the deprecated tensor-op math: fp16). The _FAST_ types take float only and may round the
// inputs: this models them as rounding always. _PEDANTIC never rounds.
inline cublasStatus_t resolve_types(cudaDataType a, cudaDataType b, cudaDataType c, cublasComputeType_t compute,
                                    cublasMath_t math, Rounding* rounding) {
    *rounding = Rounding::none;
    switch (compute) {
        case CUBLAS_COMPUTE_32F:
        case CUBLAS_COMPUTE_32F_PEDANTIC:
            if (!is_supported_type(a) || b != a || (c != a && c != CUDA_R_32F)) return CUBLAS_STATUS_NOT_SUPPORTED;
            if (a == CUDA_R_32F && compute == CUBLAS_COMPUTE_32F) {
                int mode = math & 0xf;
                if (mode == CUBLAS_TF32_TENSOR_OP_MATH) *rounding = Rounding::tf32;
                if (mode == CUBLAS_TENSOR_OP_MATH) *rounding = Rounding::fp16;
            }
            return CUBLAS_STATUS_SUCCESS;
        case CUBLAS_COMPUTE_32F_FAST_TF32:
        case CUBLAS_COMPUTE_32F_FAST_16BF:
        case CUBLAS_COMPUTE_32F_FAST_16F:
            if (a != CUDA_R_32F || b != CUDA_R_32F || c != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
            *rounding = compute == CUBLAS_COMPUTE_32F_FAST_TF32   ? Rounding::tf32
                        : compute == CUBLAS_COMPUTE_32F_FAST_16BF ? Rounding::bf16
                                                                  : Rounding::fp16;
            return CUBLAS_STATUS_SUCCESS;
        default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

// alpha and beta, from the host or, in device pointer mode, from device memory.
inline bool read_scalar(const void* p, bool device, const char* call, const char* name, float* out) {
    if (device && !check_range(p, sizeof(float), call, name)) return false;
    memcpy(out, p, sizeof(float));
    return true;
}

// The cuBLAS (not Lt) products: check, read the scalars, run.
inline cublasStatus_t gemm(const char* call, cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb,
                           int m, int n, int k, const void* alpha, const void* A, cudaDataType a_type, int lda,
                           long long stride_a, const void* B, cudaDataType b_type, int ldb, long long stride_b,
                           const void* beta, void* C, cudaDataType c_type, int ldc, long long stride_c, int batch,
                           cublasComputeType_t compute) {
    cublasStatus_t status = check_gemm(handle, ta, tb, m, n, k, alpha, lda, ldb, beta, ldc, batch);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    Gemm g{};
    status = resolve_types(a_type, b_type, c_type, compute, handle->math_mode, &g.rounding);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    bool device = handle->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    if (!read_scalar(alpha, device, call, "alpha", &g.alpha) || !read_scalar(beta, device, call, "beta", &g.beta))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    g.call = call;
    g.m = m, g.n = n, g.k = k, g.batch = batch;
    g.trans_a = ta != CUBLAS_OP_N, g.trans_b = tb != CUBLAS_OP_N;
    g.A = {A, a_type, lda, stride_a};
    g.B = {B, b_type, ldb, stride_b};
    g.C = g.D = {C, c_type, ldc, stride_c};
    return execute(g, handle->stream);
}

// cuBLAS accepts the default and numbered algorithms (plain and tensor-op) and autotuning;
// here they all name the one engine.
inline bool valid_algo(cublasGemmAlgo_t algo) {
    return (algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) ||
           (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP) ||
           algo == CUBLAS_GEMM_AUTOTUNE;
}

inline const char* status_name(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}
inline const char* status_string(cublasStatus_t s) {
    switch (s) {  // what each status means
        case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
        case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
        case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
        case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
        case CUBLAS_STATUS_LICENSE_ERROR: return "the license check failed";
    }
    return "unknown status";
}

}  // namespace blas
}  // namespace cpu_cuda

// ----------------------------------------------------------------------------
// cuBLAS: handles and modes

inline cublasStatus_t cublasCreate(cublasHandle_t* handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH, CUBLAS_POINTER_MODE_HOST};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    int base = mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH && base != CUBLAS_PEDANTIC_MATH &&
        base != CUBLAS_TF32_TENSOR_OP_MATH && base != CUBLAS_FP32_EMULATED_BF16X9_MATH &&
        base != CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
    handle->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGetPointerMode(cublasHandle_t handle, cublasPointerMode_t* mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void*, size_t) {
    return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;  // the engine needs none
}
inline const char* cublasGetStatusName(cublasStatus_t status) { return cpu_cuda::blas::status_name(status); }
inline const char* cublasGetStatusString(cublasStatus_t status) { return cpu_cuda::blas::status_string(status); }

// ----------------------------------------------------------------------------
// cuBLAS: products

inline cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                  int n, int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                                  const float* beta, float* C, int ldc) {
    cpu_cuda::DeviceAccess access{cpu_cuda::blas::after_stream(handle ? handle->stream : nullptr)};
    return cpu_cuda::blas::gemm("cublasSgemm", handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, 0, B,
                                CUDA_R_32F, ldb, 0, beta, C, CUDA_R_32F, ldc, 0, 1, CUBLAS_COMPUTE_32F);
}

inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                cublasOperation_t transb, int m, int n, int k, const float* alpha,
                                                const float* A, int lda, long long strideA, const float* B, int ldb,
                                                long long strideB, const float* beta, float* C, int ldc,
                                                long long strideC, int batchCount) {
    cpu_cuda::DeviceAccess access{cpu_cuda::blas::after_stream(handle ? handle->stream : nullptr)};
    return cpu_cuda::blas::gemm("cublasSgemmStridedBatched", handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F,
                                lda, strideA, B, CUDA_R_32F, ldb, strideB, beta, C, CUDA_R_32F, ldc, strideC,
                                batchCount, CUBLAS_COMPUTE_32F);
}

inline cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                   int n, int k, const void* alpha, const void* A, cudaDataType Atype, int lda,
                                   const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                                   cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                   cublasGemmAlgo_t algo) {
    cpu_cuda::DeviceAccess access{cpu_cuda::blas::after_stream(handle ? handle->stream : nullptr)};
    if (handle && !cpu_cuda::blas::valid_algo(algo)) return CUBLAS_STATUS_NOT_SUPPORTED;
    return cpu_cuda::blas::gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype,
                                ldb, 0, beta, C, Ctype, ldc, 0, 1, computeType);
}

inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                 cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                                 const void* A, cudaDataType Atype, int lda, long long strideA,
                                                 const void* B, cudaDataType Btype, int ldb, long long strideB,
                                                 const void* beta, void* C, cudaDataType Ctype, int ldc,
                                                 long long strideC, int batchCount,
                                                 cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    cpu_cuda::DeviceAccess access{cpu_cuda::blas::after_stream(handle ? handle->stream : nullptr)};
    if (handle && !cpu_cuda::blas::valid_algo(algo)) return CUBLAS_STATUS_NOT_SUPPORTED;
    return cpu_cuda::blas::gemm("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda,
                                strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount,
                                computeType);
}

// ----------------------------------------------------------------------------
// cuBLASLt: descriptors

namespace cpu_cuda {
namespace blas {

// The descriptors live inside the toolkit's fixed-size opaque structs (so that the
// toolkit's *Init calls on caller-owned storage work too), built there with placement new.
struct LtMatmulDesc {
    int32_t compute_type, scale_type;
    int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    int32_t bias_type = -1;  // -1: D's type
    const void* aux = nullptr;
    int64_t aux_ld = 0;
    int32_t aux_type = -1;  // -1: D's type
};
struct LtLayout {
    uint32_t type;
    int32_t order = CUBLASLT_ORDER_COL;
    uint64_t rows, cols;
    int64_t ld;
    int64_t batch_stride = 0;
    int64_t plane_offset = 0;  // only 0 (not planar complex)
    int32_t batch_count = 1;
    uint32_t batch_mode = CUBLASLT_BATCH_MODE_STRIDED;
};
struct LtPreference {  // filters for the heuristic, which has one algorithm to offer anyway
    uint32_t search_mode = 0, reduction_mask = 0x7;
    uint64_t max_workspace = 0, impl_mask = ~0ull;
    uint32_t min_alignment[4] = {256, 256, 256, 256};
    float max_waves = 0;
};

template <class T, class Opaque>
void embed(Opaque* o, const T& value) {
    static_assert(sizeof(T) <= sizeof(Opaque) && alignof(T) <= alignof(Opaque), "descriptor too large");
    static_assert(std::is_trivially_destructible<T>::value, "opaque storage is freed without a destructor");
    new (o->data) T(value);
}
template <class T, class Opaque>
T& embedded(Opaque* o) {
    return *std::launder(reinterpret_cast<T*>(o->data));
}

// One attribute's storage in a descriptor: where, and how many bytes its value has.
struct Slot {
    void* field;
    size_t size;
};
template <class T>
Slot field_slot(T& field) {
    return {&field, sizeof field};
}

inline cublasStatus_t set_slot(Slot s, const void* buf, size_t size, const char* call, int attr) {
    if (!s.field) {
        fprintf(stderr, "cpu_cuda: %s: attribute %d is not emulated\n", call, attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (!buf || size != s.size) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(s.field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}
// As cuBLASLt documents: size 0 asks for the size needed.
inline cublasStatus_t get_slot(Slot s, void* buf, size_t size, size_t* written, const char* call, int attr) {
    if (!s.field) {
        fprintf(stderr, "cpu_cuda: %s: attribute %d is not emulated\n", call, attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (size == 0) {
        if (!written) return CUBLAS_STATUS_INVALID_VALUE;
        *written = s.size;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || size != s.size) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, s.field, size);
    if (written) *written = size;
    return CUBLAS_STATUS_SUCCESS;
}

inline Slot slot(LtMatmulDesc& d, cublasLtMatmulDescAttributes_t attr) {
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return field_slot(d.compute_type);
        case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return field_slot(d.scale_type);
        case CUBLASLT_MATMUL_DESC_POINTER_MODE: return field_slot(d.pointer_mode);
        case CUBLASLT_MATMUL_DESC_TRANSA: return field_slot(d.transa);
        case CUBLASLT_MATMUL_DESC_TRANSB: return field_slot(d.transb);
        case CUBLASLT_MATMUL_DESC_EPILOGUE: return field_slot(d.epilogue);
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return field_slot(d.bias);
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return field_slot(d.bias_type);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return field_slot(d.aux);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return field_slot(d.aux_ld);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return field_slot(d.aux_type);
        default: return {nullptr, 0};
    }
}
inline Slot slot(LtLayout& l, cublasLtMatrixLayoutAttribute_t attr) {
    switch (attr) {
        case CUBLASLT_MATRIX_LAYOUT_TYPE: return field_slot(l.type);
        case CUBLASLT_MATRIX_LAYOUT_ORDER: return field_slot(l.order);
        case CUBLASLT_MATRIX_LAYOUT_ROWS: return field_slot(l.rows);
        case CUBLASLT_MATRIX_LAYOUT_COLS: return field_slot(l.cols);
        case CUBLASLT_MATRIX_LAYOUT_LD: return field_slot(l.ld);
        case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return field_slot(l.batch_count);
        case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return field_slot(l.batch_stride);
        case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: return field_slot(l.plane_offset);
        case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: return field_slot(l.batch_mode);
        default: return {nullptr, 0};
    }
}
inline Slot slot(LtPreference& p, cublasLtMatmulPreferenceAttributes_t attr) {
    switch (attr) {
        case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return field_slot(p.search_mode);
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return field_slot(p.max_workspace);
        case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return field_slot(p.reduction_mask);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return field_slot(p.min_alignment[0]);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return field_slot(p.min_alignment[1]);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return field_slot(p.min_alignment[2]);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return field_slot(p.min_alignment[3]);
        case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return field_slot(p.max_waves);
        case CUBLASLT_MATMUL_PREF_IMPL_MASK: return field_slot(p.impl_mask);
        default: return {nullptr, 0};
    }
}

// Checks a matmul's descriptors and fills in g everything but pointers and scalars. The
// shapes follow cuBLASLt: D is m×n, A is m×k (k×m transposed), B k×n (n×k transposed), C
// has D's shape and type, all batch counts agree. Epilogues with a batch count above 1, and
// the ReLU bit-mask epilogues, are beyond this emulation: NOT_SUPPORTED.
inline cublasStatus_t plan_matmul(const LtMatmulDesc& d, const LtLayout& a, const LtLayout& b, const LtLayout& c,
                                  const LtLayout& dl, Gemm* g) {
    if (!valid_op(d.transa) || !valid_op(d.transb)) return CUBLAS_STATUS_INVALID_VALUE;
    if (d.pointer_mode != CUBLASLT_POINTER_MODE_HOST && d.pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d.scale_type != CUDA_R_32F || c.type != dl.type) return CUBLAS_STATUS_NOT_SUPPORTED;
    cublasStatus_t status = resolve_types((cudaDataType)a.type, (cudaDataType)b.type, (cudaDataType)dl.type,
                                          (cublasComputeType_t)d.compute_type, CUBLAS_DEFAULT_MATH, &g->rounding);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    for (const LtLayout* l : {&a, &b, &c, &dl}) {
        if (l->rows > INT32_MAX || l->cols > INT32_MAX) return CUBLAS_STATUS_NOT_SUPPORTED;
        if (l->ld < std::max<int64_t>(1, (int64_t)l->rows) || l->batch_count < 1 ||
            l->batch_count != dl.batch_count)
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    g->trans_a = d.transa != CUBLAS_OP_N, g->trans_b = d.transb != CUBLAS_OP_N;
    g->m = (int64_t)dl.rows, g->n = (int64_t)dl.cols;
    g->k = (int64_t)(g->trans_a ? a.rows : a.cols);
    if ((int64_t)(g->trans_a ? a.cols : a.rows) != g->m || (int64_t)(g->trans_b ? b.rows : b.cols) != g->n ||
        (int64_t)(g->trans_b ? b.cols : b.rows) != g->k || c.rows != dl.rows || c.cols != dl.cols)
        return CUBLAS_STATUS_INVALID_VALUE;
    g->batch = dl.batch_count;
    g->A = {nullptr, (cudaDataType)a.type, a.ld, a.batch_stride};
    g->B = {nullptr, (cudaDataType)b.type, b.ld, b.batch_stride};
    g->C = {nullptr, (cudaDataType)c.type, c.ld, c.batch_stride};
    g->D = {nullptr, (cudaDataType)dl.type, dl.ld, dl.batch_stride};

    Epilogue& e = g->ep;
    switch (d.epilogue) {
        case CUBLASLT_EPILOGUE_DEFAULT: break;
        case CUBLASLT_EPILOGUE_RELU: e.act = Activation::relu; break;
        case CUBLASLT_EPILOGUE_RELU_BIAS: e.bias = true, e.act = Activation::relu; break;
        case CUBLASLT_EPILOGUE_BIAS: e.bias = true; break;
        case CUBLASLT_EPILOGUE_GELU: e.act = Activation::gelu; break;
        case CUBLASLT_EPILOGUE_GELU_AUX: e.act = Activation::gelu, e.aux_out = true; break;
        case CUBLASLT_EPILOGUE_GELU_BIAS: e.bias = true, e.act = Activation::gelu; break;
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: e.bias = true, e.act = Activation::gelu, e.aux_out = true; break;
        case CUBLASLT_EPILOGUE_DGELU: e.act = Activation::gelu_grad; break;
        case CUBLASLT_EPILOGUE_DGELU_BGRAD: e.act = Activation::gelu_grad, e.bias_grad = true; break;
        case CUBLASLT_EPILOGUE_BGRADA: e.grad_a = true; break;
        case CUBLASLT_EPILOGUE_BGRADB: e.grad_b = true; break;
        default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (e.any() && g->batch > 1) return CUBLAS_STATUS_NOT_SUPPORTED;
    int32_t bias_type = d.bias_type == -1 ? (int32_t)dl.type : d.bias_type;
    int32_t aux_type = d.aux_type == -1 ? (int32_t)dl.type : d.aux_type;
    if (!is_supported_type(bias_type) || !is_supported_type(aux_type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    e.bias_type = (cudaDataType)bias_type, e.aux_type = (cudaDataType)aux_type;
    // The GELU input matrix: "must be divisible by 8 and be no less than the number of rows"
    if ((e.aux_out || e.reads_aux()) && (d.aux_ld < g->m || d.aux_ld % 8 != 0)) return CUBLAS_STATUS_INVALID_VALUE;
    e.aux_ld = d.aux_ld;
    return CUBLAS_STATUS_SUCCESS;
}

// An algorithm from the heuristic carries the buffer alignments it was chosen for: the
// preference's CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES (256 unless set). cuBLASLt
// documents that a successful heuristic does not guarantee the algorithm runs ("will fail if
// e.g. buffers are not correctly aligned"), and that a smaller preference excludes the
// algorithms that need more: an algorithm chosen under the default of 256 may need all 256.
// So cublasLtMatmul refuses, with CUBLAS_STATUS_NOT_SUPPORTED ("doesn't support configured
// operation"), a pointer less aligned than its preference.
constexpr uint64_t ALGO_TAG = 0x63707563'75646131ull;  // "cpucuda1": data[0] of our algorithms
inline void store_alignments(cublasLtMatmulAlgo_t* algo, const uint32_t alignment[4]) {
    *algo = cublasLtMatmulAlgo_t{};
    algo->data[0] = ALGO_TAG;
    for (int i = 0; i < 4; i++) algo->data[1 + i] = alignment[i];
}
// How aligned p is, up to 256 bytes. A GPU's allocations start on 256-byte boundaries, so
// there a pointer's address and its offset into its allocation are equally aligned. The
// runtime's start on 16 (so that they end flush against their guard page), and the two can
// differ: the caller can measure the address, and the offset is what the address would be on
// a GPU. A pointer passes when either is aligned enough.
inline uint32_t alignment_of(const void* p) {
    auto power_of_two = [](uintptr_t x) {
        uint32_t alignment = 256;
        while (alignment > 1 && x % alignment != 0) alignment /= 2;
        return alignment;
    };
    uint32_t address = power_of_two((uintptr_t)p);
    const Allocation* a = memory().find(p);
    return a ? std::max(address, power_of_two((uintptr_t)((const char*)p - a->ptr))) : address;
}
// NOT_SUPPORTED, with a line naming the operand, when a pointer is less aligned than the
// algorithm was chosen for. Without an algorithm (null) cuBLASLt chooses one for the call
// itself, knowing the pointers: nothing to check.
inline cublasStatus_t check_alignment(const cublasLtMatmulAlgo_t* algo, const void* const ptr[4]) {
    if (!algo || algo->data[0] != ALGO_TAG) return CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < 4; i++) {
        uint32_t need = (uint32_t)algo->data[1 + i], have = alignment_of(ptr[i]);
        if (ptr[i] && have < need) {
            fprintf(stderr,
                    "cpu_cuda: cublasLtMatmul: matrix %c is %u-byte aligned; its algorithm was chosen for %u "
                    "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)\n",
                    "ABCD"[i], have, need, "ABCD"[i]);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace blas
}  // namespace cpu_cuda

// ----------------------------------------------------------------------------
// cuBLASLt: handles, descriptors, heuristics

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasLtContext;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}
inline const char* cublasLtGetStatusName(cublasStatus_t status) { return cpu_cuda::blas::status_name(status); }
inline const char* cublasLtGetStatusString(cublasStatus_t status) { return cpu_cuda::blas::status_string(status); }

inline cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t desc, size_t size,
                                                      cublasComputeType_t computeType, cudaDataType_t scaleType) {
    if (!desc || size < sizeof(*desc)) return CUBLAS_STATUS_ALLOC_FAILED;
    cpu_cuda::blas::LtMatmulDesc d;
    d.compute_type = computeType, d.scale_type = scaleType;
    cpu_cuda::blas::embed(desc, d);
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t computeType,
                                               cudaDataType_t scaleType) {
    if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
    *desc = new cublasLtMatmulDescOpaque_t;
    return cublasLtMatmulDescInit_internal(*desc, sizeof(**desc), computeType, scaleType);
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                                     const void* buf, size_t sizeInBytes) {
    if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
    auto& d = cpu_cuda::blas::embedded<cpu_cuda::blas::LtMatmulDesc>(desc);
    return cpu_cuda::blas::set_slot(cpu_cuda::blas::slot(d, attr), buf, sizeInBytes,
                                    "cublasLtMatmulDescSetAttribute", attr);
}
inline cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                                     void* buf, size_t sizeInBytes, size_t* sizeWritten) {
    if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
    auto& d = cpu_cuda::blas::embedded<cpu_cuda::blas::LtMatmulDesc>(desc);
    return cpu_cuda::blas::get_slot(cpu_cuda::blas::slot(d, attr), buf, sizeInBytes, sizeWritten,
                                    "cublasLtMatmulDescGetAttribute", attr);
}

inline cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t layout, size_t size,
                                                        cudaDataType type, uint64_t rows, uint64_t cols,
                                                        int64_t ld) {
    if (!layout || size < sizeof(*layout)) return CUBLAS_STATUS_ALLOC_FAILED;
    cpu_cuda::blas::LtLayout l;
    l.type = type, l.rows = rows, l.cols = cols, l.ld = ld;
    cpu_cuda::blas::embed(layout, l);
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
    if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
    *layout = new cublasLtMatrixLayoutOpaque_t;
    return cublasLtMatrixLayoutInit_internal(*layout, sizeof(**layout), type, rows, cols, ld);
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                       cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                       size_t sizeInBytes) {
    if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
    // Column-major, strided, real matrices only: the tiled orders, pointer-array batches and
    // planar complex are not emulated.
    int32_t value = 0;
    if ((attr == CUBLASLT_MATRIX_LAYOUT_ORDER || attr == CUBLASLT_MATRIX_LAYOUT_BATCH_MODE) && buf &&
        sizeInBytes == 4)
        memcpy(&value, buf, 4);
    int64_t offset = 0;
    if (attr == CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET && buf && sizeInBytes == 8) memcpy(&offset, buf, 8);
    if (value != 0 || offset != 0) return CUBLAS_STATUS_NOT_SUPPORTED;  // CUBLASLT_ORDER_COL and _STRIDED are 0
    auto& l = cpu_cuda::blas::embedded<cpu_cuda::blas::LtLayout>(layout);
    return cpu_cuda::blas::set_slot(cpu_cuda::blas::slot(l, attr), buf, sizeInBytes,
                                    "cublasLtMatrixLayoutSetAttribute", attr);
}
inline cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
                                                       cublasLtMatrixLayoutAttribute_t attr, void* buf,
                                                       size_t sizeInBytes, size_t* sizeWritten) {
    if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
    auto& l = cpu_cuda::blas::embedded<cpu_cuda::blas::LtLayout>(layout);
    return cpu_cuda::blas::get_slot(cpu_cuda::blas::slot(l, attr), buf, sizeInBytes, sizeWritten,
                                    "cublasLtMatrixLayoutGetAttribute", attr);
}

inline cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref, size_t size) {
    if (!pref || size < sizeof(*pref)) return CUBLAS_STATUS_ALLOC_FAILED;
    cpu_cuda::blas::embed(pref, cpu_cuda::blas::LtPreference{});
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    *pref = new cublasLtMatmulPreferenceOpaque_t;
    return cublasLtMatmulPreferenceInit_internal(*pref, sizeof(**pref));
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                           cublasLtMatmulPreferenceAttributes_t attr,
                                                           const void* buf, size_t sizeInBytes) {
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    auto& p = cpu_cuda::blas::embedded<cpu_cuda::blas::LtPreference>(pref);
    return cpu_cuda::blas::set_slot(cpu_cuda::blas::slot(p, attr), buf, sizeInBytes,
                                    "cublasLtMatmulPreferenceSetAttribute", attr);
}

namespace cpu_cuda {
namespace blas {
// The heuristic's algorithms: k in 1, 2 or 3 slices (data[5]), the plainest first.
constexpr int LT_ALGORITHMS = 3;
inline int slices_of(const cublasLtMatmulAlgo_t* algo) {
    return algo && algo->data[0] == ALGO_TAG && algo->data[5] >= 1 ? (int)algo->data[5] : 1;
}
// cuBLASLt's epilogues by their names in cublasLt.h, lower case, without CUBLASLT_EPILOGUE_
inline const char* epilogue_name(uint32_t e) {
    switch (e) {
        case CUBLASLT_EPILOGUE_DEFAULT: return "default";
        case CUBLASLT_EPILOGUE_RELU: return "relu";
        case CUBLASLT_EPILOGUE_RELU_BIAS: return "relu_bias";
        case CUBLASLT_EPILOGUE_BIAS: return "bias";
        case CUBLASLT_EPILOGUE_GELU: return "gelu";
        case CUBLASLT_EPILOGUE_GELU_AUX: return "gelu_aux";
        case CUBLASLT_EPILOGUE_GELU_BIAS: return "gelu_bias";
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "gelu_aux_bias";
        case CUBLASLT_EPILOGUE_DGELU: return "dgelu";
        case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "dgelu_bgrad";
        case CUBLASLT_EPILOGUE_BGRADA: return "bgrada";
        case CUBLASLT_EPILOGUE_BGRADB: return "bgradb";
        default: return "";
    }
}
// CPU_CUDA_LT_REFUSE_EPILOGUE names the epilogue (see the top of this file). A name the
// emulation does not know stops the process with one line, as the runtime's other switches do.
inline bool epilogue_refused(uint32_t epilogue) {
    const char* v = getenv("CPU_CUDA_LT_REFUSE_EPILOGUE");
    if (!v || !*v) return false;
    bool refused = false;
    std::string list = v;
    for (size_t pos = 0; pos <= list.size();) {
        size_t end = std::min(list.find(',', pos), list.size());
        std::string name = list.substr(pos, end - pos);
        bool known = false;
        for (uint32_t e : {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_RELU_BIAS,
                           CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_AUX,
                           CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
                           CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB})
            if (name == epilogue_name(e)) known = true, refused = refused || e == epilogue;
        if (!known)
            bad_setting("CPU_CUDA_LT_REFUSE_EPILOGUE", v,
                        "epilogue names separated by commas: default, bias, gelu_aux, gelu_aux_bias, dgelu, "
                        "bgradb, ... (cublasLt.h's, lower case, without CUBLASLT_EPILOGUE_)");
        pos = end + 1;
    }
    return refused;
}
// Calls of cublasLtMatmulAlgoGetHeuristic in this process (the trainer's tests count them).
inline long long& heuristic_queries() {
    static long long n = 0;
    return n;
}
}  // namespace blas
}  // namespace cpu_cuda

// LT_ALGORITHMS algorithms (or fewer, as requested), best first, needing no workspace, for
// every configuration the emulation supports; none for a refused epilogue.
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                     cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                     cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                     cublasLtMatmulPreference_t pref, int requestedAlgoCount,
                                                     cublasLtMatmulHeuristicResult_t results[],
                                                     int* returnAlgoCount) {
    using namespace cpu_cuda::blas;
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requestedAlgoCount <= 0 || !desc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !pref || !results ||
        !returnAlgoCount)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returnAlgoCount = 0;
    heuristic_queries()++;
    Gemm g{};
    cublasStatus_t status = plan_matmul(embedded<LtMatmulDesc>(desc), embedded<LtLayout>(Adesc),
                                        embedded<LtLayout>(Bdesc), embedded<LtLayout>(Cdesc),
                                        embedded<LtLayout>(Ddesc), &g);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    if (epilogue_refused(embedded<LtMatmulDesc>(desc).epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;
    const int count = std::min(requestedAlgoCount, LT_ALGORITHMS);
    for (int i = 0; i < count; i++) {
        results[i] = cublasLtMatmulHeuristicResult_t{};
        store_alignments(&results[i].algo, embedded<LtPreference>(pref).min_alignment);
        results[i].algo.data[5] = (uint64_t)(i + 1);  // k in i + 1 slices
        results[i].workspaceSize = 0;
        results[i].state = CUBLAS_STATUS_SUCCESS;
        results[i].wavesCount = 1.0f;
    }
    *returnAlgoCount = count;
    return CUBLAS_STATUS_SUCCESS;
}

// D = epilogue(alpha·op(A)·op(B) + beta·C). D may be C (then their layouts must match, as
// cuBLASLt requires for in-place products) or another matrix of the same shape and type.
inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                     const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                                     cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                                     cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                     const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t stream) {
    using namespace cpu_cuda::blas;
    cpu_cuda::DeviceAccess access{cpu_cuda::blas::after_stream(stream)};
    const char* call = "cublasLtMatmul";
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    const LtMatmulDesc& d = embedded<LtMatmulDesc>(desc);
    const LtLayout &cl = embedded<LtLayout>(Cdesc), &dl = embedded<LtLayout>(Ddesc);
    Gemm g{};
    cublasStatus_t status = plan_matmul(d, embedded<LtLayout>(Adesc), embedded<LtLayout>(Bdesc), cl, dl, &g);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    if (C == D && (cl.ld != dl.ld || cl.batch_stride != dl.batch_stride)) return CUBLAS_STATUS_INVALID_VALUE;
    if (epilogue_refused(d.epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;
    const void* operands[4] = {A, B, C, D};
    status = check_alignment(algo, operands);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    g.slices = slices_of(algo);
    Epilogue& e = g.ep;
    if (((e.bias || e.writes_bias()) && !d.bias) || ((e.aux_out || e.reads_aux()) && !d.aux))
        return CUBLAS_STATUS_INVALID_VALUE;
    bool device = d.pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
    if (!read_scalar(alpha, device, call, "alpha", &g.alpha) || !read_scalar(beta, device, call, "beta", &g.beta))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    g.call = call;
    g.A.ptr = A, g.B.ptr = B, g.C.ptr = C, g.D.ptr = D;
    e.bias_ptr = d.bias, e.aux = d.aux;
    return execute(g, stream);
}

// ----------------------------------------------------------------------------
// The old cuBLAS helpers for moving vectors and column-major matrices between host and device
// (cublas_v2.h keeps them): strided element copies, checked as cuBLAS documents (a positive
// increment, a leading dimension of at least the rows) and each strided range inside one
// allocation where it is device memory.
namespace cpu_cuda {
inline cublasStatus_t strided_copy(int rows, int cols, int elem, const void* src, int lds, void* dst, int ldd,
                                   const char* call) {
    if (rows < 0 || cols < 0 || elem <= 0 || lds <= 0 || ldd <= 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (rows == 0 || cols == 0) return CUBLAS_STATUS_SUCCESS;
    if (!src || !dst) return CUBLAS_STATUS_INVALID_VALUE;
    DeviceAccess access;
    size_t span_s = ((size_t)(cols - 1) * lds + rows) * elem, span_d = ((size_t)(cols - 1) * ldd + rows) * elem;
    if ((memory().is_device(src) && !check_range(src, span_s, call, "source")) ||
        (memory().is_device(dst) && !check_range(dst, span_d, call, "destination")))
        return CUBLAS_STATUS_INVALID_VALUE;
    for (int c = 0; c < cols; c++)
        if (lds == rows && ldd == rows && rows > 1) {  // whole columns at once
            memmove((char*)dst + (size_t)c * ldd * elem, (const char*)src + (size_t)c * lds * elem, (size_t)rows * elem);
        } else {
            for (int r = 0; r < rows; r++)
                memmove((char*)dst + ((size_t)c * ldd + r) * elem, (const char*)src + ((size_t)c * lds + r) * elem, elem);
        }
    return CUBLAS_STATUS_SUCCESS;
}
}  // namespace cpu_cuda
// A vector of n elements with stride incx is an n x 1 "matrix" with one element per column
inline cublasStatus_t cublasSetVector(int n, int elem, const void* x, int incx, void* y, int incy) {
    return cpu_cuda::strided_copy(1, n, elem, x, incx, y, incy, "cublasSetVector");
}
inline cublasStatus_t cublasGetVector(int n, int elem, const void* x, int incx, void* y, int incy) {
    return cpu_cuda::strided_copy(1, n, elem, x, incx, y, incy, "cublasGetVector");
}
inline cublasStatus_t cublasSetMatrix(int rows, int cols, int elem, const void* a, int lda, void* b, int ldb) {
    if (lda < std::max(1, rows) || ldb < std::max(1, rows)) return CUBLAS_STATUS_INVALID_VALUE;
    return cpu_cuda::strided_copy(rows, cols, elem, a, lda, b, ldb, "cublasSetMatrix");
}
inline cublasStatus_t cublasGetMatrix(int rows, int cols, int elem, const void* a, int lda, void* b, int ldb) {
    if (lda < std::max(1, rows) || ldb < std::max(1, rows)) return CUBLAS_STATUS_INVALID_VALUE;
    return cpu_cuda::strided_copy(rows, cols, elem, a, lda, b, ldb, "cublasGetMatrix");
}

// ----------------------------------------------------------------------------
// cublasSgemmBatched: arrays (in device memory) of pointers to each product's matrices, each
// product the engine's Sgemm; and cublasDgemm, in float64 throughout, by a plain loop over C's
// columns (the engine above is float32's; samples use Dgemm on small shapes).
inline cublasStatus_t cublasSgemmBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* const Aarray[], int lda,
                                         const float* const Barray[], int ldb, const float* beta,
                                         float* const Carray[], int ldc, int batchCount) {
    cpu_cuda::DeviceAccess access{cpu_cuda::blas::after_stream(handle ? handle->stream : nullptr)};
    cublasStatus_t status =
        cpu_cuda::blas::check_gemm(handle, transa, transb, m, n, k, alpha, lda, ldb, beta, ldc, batchCount);
    if (status != CUBLAS_STATUS_SUCCESS || batchCount == 0) return status;
    size_t bytes = (size_t)batchCount * sizeof(void*);
    if (!cpu_cuda::check_range(Aarray, bytes, "cublasSgemmBatched", "Aarray") ||
        !cpu_cuda::check_range(Barray, bytes, "cublasSgemmBatched", "Barray") ||
        !cpu_cuda::check_range(Carray, bytes, "cublasSgemmBatched", "Carray"))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    for (int i = 0; i < batchCount; i++) {
        status = cpu_cuda::blas::gemm("cublasSgemmBatched", handle, transa, transb, m, n, k, alpha, Aarray[i],
                                      CUDA_R_32F, lda, 0, Barray[i], CUDA_R_32F, ldb, 0, beta, Carray[i], CUDA_R_32F,
                                      ldc, 0, 1, CUBLAS_COMPUTE_32F);
        if (status != CUBLAS_STATUS_SUCCESS) return status;
    }
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasDgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                  int n, int k, const double* alpha, const double* A, int lda, const double* B, int ldb,
                                  const double* beta, double* C, int ldc) {
    cpu_cuda::DeviceAccess access{cpu_cuda::blas::after_stream(handle ? handle->stream : nullptr)};
    cublasStatus_t status = cpu_cuda::blas::check_gemm(handle, transa, transb, m, n, k, alpha, lda, ldb, beta, ldc, 1);
    if (status != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0) return status;
    if (cpu_cuda::capturing(handle->stream)) {
        fprintf(stderr, "cpu_cuda: cublasDgemm on a capturing stream: not recorded into graphs on the CPU runtime\n");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    bool device = handle->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    if (device && (!cpu_cuda::check_range(alpha, sizeof(double), "cublasDgemm", "alpha") ||
                   !cpu_cuda::check_range(beta, sizeof(double), "cublasDgemm", "beta")))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    const double a = *alpha, b = *beta;
    const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    auto span = [](int rows, int cols, int ld) { return ((size_t)(cols - 1) * ld + rows) * sizeof(double); };
    if ((k > 0 && a != 0 &&
         (!cpu_cuda::check_range(A, span(ta ? k : m, ta ? m : k, lda), "cublasDgemm", "A") ||
          !cpu_cuda::check_range(B, span(tb ? n : k, tb ? k : n, ldb), "cublasDgemm", "B"))) ||
        !cpu_cuda::check_range(C, span(m, n, ldc), "cublasDgemm", "C"))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    cpu_cuda::pool().run((size_t)n, [&](size_t j) {
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k && a != 0; p++)
                s += (ta ? A[(size_t)i * lda + p] : A[(size_t)p * lda + i]) * (tb ? B[(size_t)p * ldb + j] : B[j * ldb + p]);
            double& c = C[j * ldc + i];
            c = a * s + (b == 0 ? 0.0 : b * c);  // beta = 0: C is not read (it may hold NaN), as cuBLAS documents
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}
// cublasDgemmBatched: cublasDgemm on each product of the arrays (in device memory) of pointers,
// as cuBLAS documents the batched forms (one handle, the same shape and scalars for every
// product). A product the arguments refuse stops the batch with its status.
inline cublasStatus_t cublasDgemmBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const double* alpha, const double* const Aarray[], int lda,
                                         const double* const Barray[], int ldb, const double* beta,
                                         double* const Carray[], int ldc, int batchCount) {
    cpu_cuda::DeviceAccess access;
    cublasStatus_t status =
        cpu_cuda::blas::check_gemm(handle, transa, transb, m, n, k, alpha, lda, ldb, beta, ldc, batchCount);
    if (status != CUBLAS_STATUS_SUCCESS || batchCount == 0) return status;
    size_t bytes = (size_t)batchCount * sizeof(void*);
    if (!cpu_cuda::check_range(Aarray, bytes, "cublasDgemmBatched", "Aarray") ||
        !cpu_cuda::check_range(Barray, bytes, "cublasDgemmBatched", "Barray") ||
        !cpu_cuda::check_range(Carray, bytes, "cublasDgemmBatched", "Carray"))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    for (int i = 0; i < batchCount; i++) {
        status = cublasDgemm(handle, transa, transb, m, n, k, alpha, Aarray[i], lda, Barray[i], ldb, beta, Carray[i], ldc);
        if (status != CUBLAS_STATUS_SUCCESS) return status;
    }
    return CUBLAS_STATUS_SUCCESS;
}
