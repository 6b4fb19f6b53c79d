// gpu/flash_attention.cuh: causal self-attention in one pass over tiles (FlashAttention-2's
// algorithm), forward and backward, never writing a T×T matrix.
//
// Same contract as gpu/attention.cuh's cuBLAS path, which it is checked against: NH query
// heads and KVH key/value heads (grouped-query attention; GPT-2: KVH = NH), q, k, v read
// straight from qkv (B,T,QKV) = [q: NH·hs | k: KVH·hs | v: KVH·hs], QKV = C + 2·KVH·hs, query
// head h reading K/V head kh = h / G (G = NH / KVH) where it lies, no copy; y is written
// straight into (B,T,C), and the backward overwrites dqkv (B,T,QKV). Per (b, h), row-major,
// scale = 1/√hs, k and v those of kh:
//   forward:   S = q·kᵀ·scale   P = causal_softmax(S)   y = P·v
//   backward:  dP = dy·vᵀ   dS = P ⊙ (dP − D)·scale with D = rowsum(dy ⊙ y)
//              dv = Pᵀ·dy   dk = dSᵀ·q   dq = dS·k
//
// A block takes one (b, h) and a tile of TILE query rows (forward, dq), or one (b, kh) and a
// tile of key rows (dk, dv), and walks the tiles of the other side that the causal mask
// leaves: keys 0..t for query t; in the dk, dv pass those of each of the group's G query
// heads in turn, h = kh·G .. kh·G + G − 1, all summed into the block's accumulators.
// The forward keeps a running maximum m and sum l per row in float32 (online softmax):
// when a key tile raises m, what was summed so far is scaled by exp(m_old − m_new). It
// saves one float32 per row, lse = m + log(l), from which the backward recomputes each
// tile's probabilities, P = exp(S·scale − lse), instead of keeping P (B,NH,T,T).
//
// Deterministic, without atomics: besides D = rowsum(dy ⊙ y) per row, the backward makes
// one pass over key tiles for dk, dv (each block owns its keys' rows and sums over its
// group's heads and their query tiles in order) and one over query tiles for dq; every sum
// has a fixed order. (The scalar dq kernel computes D on the way, before the dk, dv kernel;
// the tensor-core path gives it a pass of its own.)
//
// Two implementations of that algorithm, one contract:
//   * the tensor-core kernels (gpu/flash_attention_mma.cuh), the bf16 build's, instantiated
//     for every supported head size (flash_mma_supports()): every product an mma.sync, P and
//     dS kept in registers; at head sizes 64 and 128 the forward is the wide one
//     (gpu/flash_attention_wide.cuh: 32 query rows per warp, 128 per block), the narrow one of
//     flash_attention_mma.cuh (16 per warp) its reference (MmaForward::narrow), and the
//     backward is one kernel of five products per query-key pair (gpu/flash_attention_bwd5.cuh:
//     dq's terms added in a fixed order through counters), the three-kernel one its reference
//     (three_kernels);
//   * the scalar kernels below, the fp32 build's (the exact tier, checked against train.cpp
//     to 1e-5): tiles of 32 rows in shared memory, every product float32 FMAs in a fixed
//     order. In bf16 they are the reference that the tensor-core kernels are tested against
//     (scalar = true), and the path for buffers not 16-byte aligned.
//
// Shapes: any T ≥ 1 (rows past T in the last tile are zeros and masked). The scalar kernels'
// shared memory is up to ~120 KiB (fp32, hs = 128), so they opt in above the default 48 KiB.
#pragma once
#include <initializer_list>
#include <type_traits>

#include "common.cuh"
#include "flash_attention_bwd5.cuh"
#include "flash_attention_mma.cuh"
#include "flash_attention_wide.cuh"

namespace gpu {

constexpr int FLASH_TILE = 32;     // query rows and key rows per tile
constexpr int FLASH_THREADS = 128;
constexpr int FLASH_MAX_HS = 128;

inline bool flash_attention_supports(int hs) { return hs % 16 == 0 && hs >= 16 && hs <= FLASH_MAX_HS; }

// Leading dimensions of the tiles in shared memory: padded by 16 bytes, which spreads rows
// over the memory banks.
__host__ __device__ inline int flash_ld(int hs) { return hs + 16 / (int)sizeof(floatX); }
constexpr int FLASH_LDS = FLASH_TILE + 4;                          // float32 score tiles
constexpr int FLASH_LDP = FLASH_TILE + 16 / (int)sizeof(floatX);   // floatX probability tiles

// acc (M×N float32, leading dimension ldacc) = [acc +] A·B over K, every operand in shared
// memory. A's element (m, k) is A[m·lda + k], or A[k·lda + m] with A_T (Aᵀ stored);
// B's element (k, n) is B[k·ldb + n], or B[n·ldb + k] with B_T. Every thread of the block
// calls it, each owning outputs and summing over k in order; the caller synchronises before
// and after.
template <bool A_T, bool B_T, class T>
__device__ void tile_product(float* acc, int ldacc, const T* A, int lda, const T* B, int ldb, int M, int N, int K,
                             bool accumulate) {
    for (int i = threadIdx.x; i < M * N; i += blockDim.x) {
        int m = i / N, n = i % N;
        float sum = accumulate ? acc[m * ldacc + n] : 0.0f;
        for (int k = 0; k < K; k++)
            sum = fmaf((float)(A_T ? A[k * lda + m] : A[m * lda + k]), (float)(B_T ? B[n * ldb + k] : B[k * ldb + n]),
                       sum);
        acc[m * ldacc + n] = sum;
    }
}

// Where the heads of one block lie in qkv (B,T,QKV): q of query head h, k and v of K/V head
// kh, at (b, 0, the head's first column), rows of width QKV = C + 2·KVH·hs.
struct FlashHeads {
    int C, width;
    const floatX *q, *k, *v;
    __device__ FlashHeads(const floatX* qkv, int b, int h, int kh, int T, int NH, int KVH, int hs)
        : C(NH * hs), width(C + 2 * KVH * hs), q(qkv + (size_t)b * T * width + h * hs),
          k(qkv + (size_t)b * T * width + C + kh * hs), v(k + KVH * hs) {}
};

// Rows t0.. of one head's hs columns of a (B,T,width) tensor (src already at (b, 0, column
// of the head)) into a TILE×ld tile; rows at or past T are zeros, so that they add nothing.
__device__ inline void load_rows(floatX* tile, int ld, const floatX* src, int width, int t0, int T, int hs) {
    for (int i = threadIdx.x; i < FLASH_TILE * hs; i += blockDim.x) {
        int r = i / hs, d = i % hs, t = t0 + r;
        tile[r * ld + d] = t < T ? src[(size_t)t * width + d] : floatX(0.0f);
    }
}
__device__ inline void zero_floats(float* p, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = 0.0f;
}

// Carves a block's dynamic shared memory into tiles, each on a 128-byte boundary.
struct SharedCarver {
    char* base;  // null when the host only counts the bytes
    size_t used = 0;
    template <class T>
    __host__ __device__ T* take(size_t count) {
        T* at = base ? reinterpret_cast<T*>(base + used) : nullptr;
        used += (count * sizeof(T) + 127) / 128 * 128;
        return at;
    }
};
// Shared memory of each kernel, in the order the kernels take it (the host sizes launches
// with the same function and a null base).
struct FlashForwardTiles {
    floatX *q, *k, *v, *p;
    float *s, *o, *m, *l, *alpha;
};
__host__ __device__ inline FlashForwardTiles flash_forward_tiles(char* base, int hs, size_t* bytes) {
    SharedCarver c{base};
    const int ld = flash_ld(hs), ldo = hs + 4;
    FlashForwardTiles t;
    t.q = c.take<floatX>(FLASH_TILE * ld), t.k = c.take<floatX>(FLASH_TILE * ld), t.v = c.take<floatX>(FLASH_TILE * ld);
    t.p = c.take<floatX>(FLASH_TILE * FLASH_LDP);
    t.s = c.take<float>(FLASH_TILE * FLASH_LDS), t.o = c.take<float>(FLASH_TILE * ldo);
    t.m = c.take<float>(FLASH_TILE), t.l = c.take<float>(FLASH_TILE), t.alpha = c.take<float>(FLASH_TILE);
    if (bytes) *bytes = c.used;
    return t;
}
struct FlashBackwardTiles {
    floatX *q, *k, *v, *dy, *p, *ds;
    float *s, *dp, *acc1, *acc2, *lse, *delta;  // acc1, acc2: dk and dv, or dq alone
};
__host__ __device__ inline FlashBackwardTiles flash_backward_tiles(char* base, int hs, bool two_accumulators,
                                                                   size_t* bytes) {
    SharedCarver c{base};
    const int ld = flash_ld(hs), ldo = hs + 4;
    FlashBackwardTiles t;
    t.q = c.take<floatX>(FLASH_TILE * ld), t.k = c.take<floatX>(FLASH_TILE * ld);
    t.v = c.take<floatX>(FLASH_TILE * ld), t.dy = c.take<floatX>(FLASH_TILE * ld);
    t.p = c.take<floatX>(FLASH_TILE * FLASH_LDP), t.ds = c.take<floatX>(FLASH_TILE * FLASH_LDP);
    t.s = c.take<float>(FLASH_TILE * FLASH_LDS), t.dp = c.take<float>(FLASH_TILE * FLASH_LDS);
    t.acc1 = c.take<float>(FLASH_TILE * ldo);
    t.acc2 = two_accumulators ? c.take<float>(FLASH_TILE * ldo) : nullptr;
    t.lse = c.take<float>(FLASH_TILE), t.delta = c.take<float>(FLASH_TILE);
    if (bytes) *bytes = c.used;
    return t;
}

// grid (query tiles, B·NH); the tiles nearest the end of the sequence, which see the most
// keys, start first. lse: (B, NH, T).
__global__ void flash_attention_forward_kernel(floatX* out, float* lse, const floatX* qkv, int T, int NH, int KVH,
                                               int hs) {
    extern __shared__ __align__(128) char flash_smem[];
    FlashForwardTiles s = flash_forward_tiles(flash_smem, hs, nullptr);
    const int tiles = (T + FLASH_TILE - 1) / FLASH_TILE, qt = tiles - 1 - blockIdx.x, q0 = qt * FLASH_TILE;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, ld = flash_ld(hs), ldo = hs + 4;
    const FlashHeads at(qkv, b, h, h / (NH / KVH), T, NH, KVH, hs);
    const int C = at.C;
    const float scale = 1.0f / sqrtf((float)hs);
    load_rows(s.q, ld, at.q, at.width, q0, T, hs);
    zero_floats(s.o, FLASH_TILE * ldo);
    if (threadIdx.x < FLASH_TILE) s.m[threadIdx.x] = -INFINITY, s.l[threadIdx.x] = 0.0f;
    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * FLASH_TILE;
        load_rows(s.k, ld, at.k, at.width, k0, T, hs);
        load_rows(s.v, ld, at.v, at.width, k0, T, hs);
        __syncthreads();
        tile_product<false, true>(s.s, FLASH_LDS, s.q, ld, s.k, ld, FLASH_TILE, FLASH_TILE, hs, false);  // q·kᵀ
        __syncthreads();
        if (threadIdx.x < FLASH_TILE) {  // online softmax, one thread per query row
            const int r = threadIdx.x, t = q0 + r;
            const int last = t >= T ? -1 : t - k0 < FLASH_TILE ? t - k0 : FLASH_TILE - 1;  // the last key this row sees here
            const float* srow = s.s + r * FLASH_LDS;
            float m_new = s.m[r];
            for (int c = 0; c <= last; c++) m_new = fmaxf(m_new, srow[c] * scale);
            float alpha = last >= 0 ? expf(s.m[r] - m_new) : 1.0f, sum = 0.0f;  // exp(-inf) = 0 at the first tile
            for (int c = 0; c < FLASH_TILE; c++) {
                float p = c <= last ? expf(srow[c] * scale - m_new) : 0.0f;
                sum += p;
                s.p[r * FLASH_LDP + c] = floatX(p);
            }
            if (last >= 0) s.m[r] = m_new, s.l[r] = s.l[r] * alpha + sum;
            s.alpha[r] = alpha;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < FLASH_TILE * hs; i += blockDim.x) s.o[i / hs * ldo + i % hs] *= s.alpha[i / hs];
        __syncthreads();
        tile_product<false, false>(s.o, ldo, s.p, FLASH_LDP, s.v, ld, FLASH_TILE, hs, FLASH_TILE, true);  // += P·v
        __syncthreads();
    }
    for (int i = threadIdx.x; i < FLASH_TILE * hs; i += blockDim.x) {
        int r = i / hs, d = i % hs, t = q0 + r;
        if (t < T) out[((size_t)b * T + t) * C + h * hs + d] = floatX(s.o[r * ldo + d] / s.l[r]);
    }
    if (threadIdx.x < FLASH_TILE && q0 + (int)threadIdx.x < T)
        lse[(size_t)bh * T + q0 + threadIdx.x] = s.m[threadIdx.x] + logf(s.l[threadIdx.x]);
}

// One tile pair of the backward: S = q·kᵀ and dP = dy·vᵀ into s.s and s.dp, then
// P = exp(S·scale − lse) into s.p and dS = P ⊙ (dP − D)·scale into s.ds, zero where the
// causal mask (or the end of the sequence) hides key k0 + c from query q0 + r.
__device__ inline void flash_backward_tile(const FlashBackwardTiles& s, int q0, int k0, int T, int hs, float scale) {
    const int ld = flash_ld(hs);
    tile_product<false, true>(s.s, FLASH_LDS, s.q, ld, s.k, ld, FLASH_TILE, FLASH_TILE, hs, false);
    tile_product<false, true>(s.dp, FLASH_LDS, s.dy, ld, s.v, ld, FLASH_TILE, FLASH_TILE, hs, false);
    __syncthreads();
    for (int i = threadIdx.x; i < FLASH_TILE * FLASH_TILE; i += blockDim.x) {
        const int r = i / FLASH_TILE, c = i % FLASH_TILE, t = q0 + r, key = k0 + c;
        const bool seen = t < T && key <= t;
        float p = seen ? expf(s.s[r * FLASH_LDS + c] * scale - s.lse[r]) : 0.0f;
        float ds = seen ? p * (s.dp[r * FLASH_LDS + c] - s.delta[r]) * scale : 0.0f;
        s.p[r * FLASH_LDP + c] = floatX(p);
        s.ds[r * FLASH_LDP + c] = floatX(ds);
    }
    __syncthreads();
}
// lse (and D, unless null) of query rows q0.. into shared memory (0 past T: those rows are
// masked anyway)
__device__ inline void load_row_stats(const FlashBackwardTiles& s, const float* lse, const float* delta, int q0,
                                      int T) {
    if (threadIdx.x < FLASH_TILE) {
        int t = q0 + threadIdx.x;
        s.lse[threadIdx.x] = t < T ? lse[t] : 0.0f;
        if (delta) s.delta[threadIdx.x] = t < T ? delta[t] : 0.0f;
    }
}
// D = rowsum(dy ⊙ y) of query rows q0.. (dy already in s.dy; y read from out at (b, 0,
// column of the head)) into s.delta and delta; uses s.acc1 as scratch for the products, so
// that y is read coalesced and each row summed by one thread in order.
__device__ inline void row_dots(const FlashBackwardTiles& s, float* delta, const floatX* out, int C, int q0, int T,
                                int hs) {
    const int ld = flash_ld(hs), ldo = hs + 4;
    for (int i = threadIdx.x; i < FLASH_TILE * hs; i += blockDim.x) {
        int r = i / hs, d = i % hs, t = q0 + r;
        s.acc1[r * ldo + d] = t < T ? (float)s.dy[r * ld + d] * (float)out[(size_t)t * C + d] : 0.0f;
    }
    __syncthreads();
    if (threadIdx.x < FLASH_TILE) {
        const int r = threadIdx.x;
        float sum = 0.0f;
        for (int d = 0; d < hs; d++) sum += s.acc1[r * ldo + d];
        s.delta[r] = sum;
        if (q0 + r < T) delta[q0 + r] = sum;
    }
    __syncthreads();
}
// A TILE×hs float32 accumulator's rows t0.. (before T) into a (B,T,width) tensor at dst (at
// (b, 0, column of the head)).
__device__ inline void store_rows(floatX* dst, int width, const float* acc, int t0, int T, int hs) {
    for (int i = threadIdx.x; i < FLASH_TILE * hs; i += blockDim.x) {
        int r = i / hs, d = i % hs, t = t0 + r;
        if (t < T) dst[(size_t)t * width + d] = floatX(acc[r * (hs + 4) + d]);
    }
}

// dk, dv for a tile of keys of K/V head kh: grid (key tiles, B·KVH); the first keys, seen by
// the most queries, start first. Sums over the group's query heads h = kh·G.. in order, and
// for each over its query tiles in order. Runs after the dq kernel, which wrote D (delta).
__global__ void flash_attention_backward_dkdv_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv,
                                                     const float* lse, const float* delta, int T, int NH, int KVH,
                                                     int hs) {
    extern __shared__ __align__(128) char flash_smem[];
    FlashBackwardTiles s = flash_backward_tiles(flash_smem, hs, true, nullptr);
    const int tiles = (T + FLASH_TILE - 1) / FLASH_TILE, kt = blockIdx.x, k0 = kt * FLASH_TILE;
    const int G = NH / KVH, b = blockIdx.y / KVH, kh = blockIdx.y % KVH, ld = flash_ld(hs), ldo = hs + 4;
    const FlashHeads at(qkv, b, kh * G, kh, T, NH, KVH, hs);  // q: the group's first head
    const int C = at.C;
    const float scale = 1.0f / sqrtf((float)hs);
    load_rows(s.k, ld, at.k, at.width, k0, T, hs);
    load_rows(s.v, ld, at.v, at.width, k0, T, hs);
    zero_floats(s.acc1, FLASH_TILE * ldo);
    zero_floats(s.acc2, FLASH_TILE * ldo);
    for (int g = 0; g < G; g++) {
        const int h = kh * G + g;
        const size_t bh = (size_t)b * NH + h;
        const floatX* q = at.q + g * hs;
        const floatX* dy = dout + (size_t)b * T * C + h * hs;
        for (int qt = kt; qt < tiles; qt++) {
            const int q0 = qt * FLASH_TILE;
            load_rows(s.q, ld, q, at.width, q0, T, hs);
            load_rows(s.dy, ld, dy, C, q0, T, hs);
            load_row_stats(s, lse + bh * T, delta + bh * T, q0, T);
            __syncthreads();
            flash_backward_tile(s, q0, k0, T, hs, scale);
            tile_product<true, false>(s.acc1, ldo, s.ds, FLASH_LDP, s.q, ld, FLASH_TILE, hs, FLASH_TILE, true);  // dk += dSᵀ·q
            tile_product<true, false>(s.acc2, ldo, s.p, FLASH_LDP, s.dy, ld, FLASH_TILE, hs, FLASH_TILE, true);  // dv += Pᵀ·dy
            __syncthreads();
        }
    }
    floatX* dk = dqkv + (at.k - qkv);  // K/V head kh's columns of dqkv
    store_rows(dk, at.width, s.acc1, k0, T, hs);
    store_rows(dk + KVH * hs, at.width, s.acc2, k0, T, hs);
}

// dq for a tile of queries: grid (query tiles, B·NH), the last tiles first. Sums over key
// tiles in order. Also writes D = rowsum(dy ⊙ y) of its rows to delta (B, NH, T), for
// itself and the dk, dv kernel.
__global__ void flash_attention_backward_dq_kernel(floatX* dqkv, float* delta, const floatX* dout, const floatX* out,
                                                   const floatX* qkv, const float* lse, int T, int NH, int KVH, int hs) {
    extern __shared__ __align__(128) char flash_smem[];
    FlashBackwardTiles s = flash_backward_tiles(flash_smem, hs, false, nullptr);
    const int tiles = (T + FLASH_TILE - 1) / FLASH_TILE, qt = tiles - 1 - blockIdx.x, q0 = qt * FLASH_TILE;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, ld = flash_ld(hs), ldo = hs + 4;
    const FlashHeads at(qkv, b, h, h / (NH / KVH), T, NH, KVH, hs);
    const int C = at.C;
    const float scale = 1.0f / sqrtf((float)hs);
    load_rows(s.q, ld, at.q, at.width, q0, T, hs);
    load_rows(s.dy, ld, dout + (size_t)b * T * C + h * hs, C, q0, T, hs);
    load_row_stats(s, lse + (size_t)bh * T, nullptr, q0, T);
    __syncthreads();
    row_dots(s, delta + (size_t)bh * T, out + (size_t)b * T * C + h * hs, C, q0, T, hs);
    zero_floats(s.acc1, FLASH_TILE * ldo);
    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * FLASH_TILE;
        load_rows(s.k, ld, at.k, at.width, k0, T, hs);
        load_rows(s.v, ld, at.v, at.width, k0, T, hs);
        __syncthreads();
        flash_backward_tile(s, q0, k0, T, hs, scale);
        tile_product<false, false>(s.acc1, ldo, s.ds, FLASH_LDP, s.k, ld, FLASH_TILE, hs, FLASH_TILE, true);  // dq += dS·k
        __syncthreads();
    }
    store_rows(dqkv + (at.q - qkv), at.width, s.acc1, q0, T, hs);
}

// Above the default 48 KiB of dynamic shared memory a kernel must opt in.
inline void flash_allow_shared(const void* kernel, size_t bytes) {
    if (bytes > (48 << 10))
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// ---- the tensor-core path (bf16): one instantiation per head size

// The tensor-core kernels are instantiated for every head size the fused path supports
// (multiples of 16 up to 128; GPT-2 uses 64 from 124M to 1.5B).
inline bool flash_mma_supports(int hs) {
    return std::is_same<floatX, __nv_bfloat16>::value && flash_attention_supports(hs);
}
// cp.async and the 16-byte loads need every row of q, k, v, y and dy 16-byte aligned: true of
// the trainer's buffers (256-byte aligned tensors, C a multiple of 8); checked all the same.
inline bool flash_aligned(std::initializer_list<const void*> pointers) {
    for (const void* p : pointers)
        if ((uintptr_t)p % 16) return false;
    return true;
}

// GQA: the grouped-query instantiations (KVH < NH); multi-head attention (KVH = NH, GPT-2) runs
// the others, the code of before grouped-query attention.
template <int HS, bool GQA>
void flash_mma_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int NH, int KVH) {
    using namespace flash_mma;
    const size_t bytes = forward_shared_bytes<HS>();
    flash_allow_shared((const void*)flash_attention_forward_mma_kernel<HS, GQA>, bytes);
    const dim3 grid((T + ROWS - 1) / ROWS, B * NH);
    flash_attention_forward_mma_kernel<HS, GQA><<<grid, flash_mma::THREADS, bytes, ctx.stream>>>(out, lse, qkv, T, NH,
                                                                                                 KVH);
    KERNEL_CHECK();
}
// The wide forward (gpu/flash_attention_wide.cuh), at the head sizes it is instantiated for.
inline bool flash_wide_supports(int hs) { return flash_mma_supports(hs) && (hs == 64 || hs == 128); }
template <int HS, bool GQA>
void flash_wide_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int NH, int KVH) {
    using namespace flash_wide;
    const size_t bytes = forward_wide_shared_bytes<HS>();
    flash_allow_shared((const void*)flash_attention_forward_wide_kernel<HS, GQA>, bytes);
    const dim3 grid((T + Wide<HS>::ROWS - 1) / Wide<HS>::ROWS, B * NH);
    flash_attention_forward_wide_kernel<HS, GQA><<<grid, flash_mma::THREADS, bytes, ctx.stream>>>(out, lse, qkv, T, NH,
                                                                                                  KVH);
    KERNEL_CHECK();
}
template <int HS, bool GQA>
void flash_mma_backward(__nv_bfloat16* dqkv, float* delta, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                        const __nv_bfloat16* qkv, const float* lse, int B, int T, int NH, int KVH) {
    using namespace flash_mma;
    const size_t rows = (size_t)B * T * NH;
    const unsigned row_blocks = (unsigned)((rows + 255) / 256);
    flash_attention_row_dots_kernel<HS><<<row_blocks, 256, 0, ctx.stream>>>(delta, dout, out, B, T, NH);
    KERNEL_CHECK();
    const unsigned tiles = (T + ROWS - 1) / ROWS;
    size_t bytes = dkdv_shared_bytes<HS>();
    flash_allow_shared((const void*)flash_attention_backward_dkdv_mma_kernel<HS, GQA>, bytes);
    flash_attention_backward_dkdv_mma_kernel<HS, GQA><<<dim3(tiles, B * KVH), flash_mma::THREADS, bytes, ctx.stream>>>(
        dqkv, dout, qkv, lse, delta, T, NH, KVH);
    KERNEL_CHECK();
    bytes = dq_shared_bytes<HS>();
    flash_allow_shared((const void*)flash_attention_backward_dq_mma_kernel<HS, GQA>, bytes);
    flash_attention_backward_dq_mma_kernel<HS, GQA><<<dim3(tiles, B * NH), flash_mma::THREADS, bytes, ctx.stream>>>(
        dqkv, dout, qkv, lse, delta, T, NH, KVH);
    KERNEL_CHECK();
}
// Calls f(std::integral_constant<int, hs>{}): the head size as a compile-time constant.
template <class F>
void with_mma_head_size(int hs, F&& f) {
    switch (hs) {
        case 16: f(std::integral_constant<int, 16>{}); break;
        case 32: f(std::integral_constant<int, 32>{}); break;
        case 48: f(std::integral_constant<int, 48>{}); break;
        case 64: f(std::integral_constant<int, 64>{}); break;
        case 80: f(std::integral_constant<int, 80>{}); break;
        case 96: f(std::integral_constant<int, 96>{}); break;
        case 112: f(std::integral_constant<int, 112>{}); break;
        case 128: f(std::integral_constant<int, 128>{}); break;
        default: throw Error(strf("flash attention: no tensor-core kernel for head size %d", hs));
    }
}

// ---- the scalar path (fp32, and bf16 at other head sizes)

inline void flash_scalar_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH, int KVH) {
    const int hs = C / NH, tiles = (T + FLASH_TILE - 1) / FLASH_TILE;
    size_t bytes;
    flash_forward_tiles(nullptr, hs, &bytes);
    flash_allow_shared((const void*)flash_attention_forward_kernel, bytes);
    flash_attention_forward_kernel<<<dim3(tiles, B * NH), FLASH_THREADS, bytes, ctx.stream>>>(out, lse, qkv, T, NH, KVH,
                                                                                            hs);
    KERNEL_CHECK();
}
inline void flash_scalar_backward(floatX* dqkv, float* delta, const floatX* dout, const floatX* out,
                                  const floatX* qkv, const float* lse, int B, int T, int C, int NH, int KVH) {
    const int hs = C / NH, tiles = (T + FLASH_TILE - 1) / FLASH_TILE;
    size_t bytes;
    flash_backward_tiles(nullptr, hs, false, &bytes);
    flash_allow_shared((const void*)flash_attention_backward_dq_kernel, bytes);
    flash_attention_backward_dq_kernel<<<dim3(tiles, B * NH), FLASH_THREADS, bytes, ctx.stream>>>(
        dqkv, delta, dout, out, qkv, lse, T, NH, KVH, hs);
    KERNEL_CHECK();
    flash_backward_tiles(nullptr, hs, true, &bytes);
    flash_allow_shared((const void*)flash_attention_backward_dkdv_kernel, bytes);
    flash_attention_backward_dkdv_kernel<<<dim3(tiles, B * KVH), FLASH_THREADS, bytes, ctx.stream>>>(
        dqkv, dout, qkv, lse, delta, T, NH, KVH, hs);
    KERNEL_CHECK();
}

// ---- the entry points: the tensor-core path where it applies, else the scalar one. (Templates
// on the element type, so that the fp32 build never instantiates the bf16 kernels.)

inline void flash_check_heads(int NH, int KVH) {
    if (KVH < 1 || NH % KVH)
        throw Error(strf("flash attention: %d query heads do not split into %d K/V heads", NH, KVH));
}
// Which tensor-core forward: the wide one where it is instantiated (flash_wide_supports()),
// else the narrow one; narrow: the narrow one always (the wide one's reference in the tests).
enum class MmaForward { wide, narrow };
template <class X>
void flash_forward_dispatch(X* out, float* lse, const X* qkv, int B, int T, int C, int NH, int KVH, bool scalar,
                            MmaForward mma) {
    flash_check_heads(NH, KVH);
    if constexpr (std::is_same<X, __nv_bfloat16>::value) {
        if (!scalar && mma == MmaForward::wide && flash_wide_supports(C / NH) && flash_aligned({out, qkv})) {
            auto launch = [&](auto hs) {
                constexpr int HS = decltype(hs)::value;
                if (KVH == NH) flash_wide_forward<HS, false>(out, lse, qkv, B, T, NH, KVH);
                else flash_wide_forward<HS, true>(out, lse, qkv, B, T, NH, KVH);
            };
            if (C / NH == 64) launch(std::integral_constant<int, 64>{});
            else launch(std::integral_constant<int, 128>{});
            return;
        }
        if (!scalar && flash_mma_supports(C / NH) && flash_aligned({out, qkv})) {
            with_mma_head_size(C / NH, [&](auto hs) {
                constexpr int HS = decltype(hs)::value;
                if (KVH == NH) flash_mma_forward<HS, false>(out, lse, qkv, B, T, NH, KVH);
                else flash_mma_forward<HS, true>(out, lse, qkv, B, T, NH, KVH);
            });
            return;
        }
    }
    flash_scalar_forward(out, lse, qkv, B, T, C, NH, KVH);
}
// The tensor-core backward in five products (gpu/flash_attention_bwd5.cuh) where it is
// instantiated; elsewhere, or with three_kernels, the three-kernel one (its reference).
inline bool flash_backward_five(int hs) { return flash_mma_supports(hs) && flash_mma::bwd5_supports(hs); }
// The backward's scratch, in floats: D (B,NH,T) for every path, and for the five-product one
// the float32 partial dq (B,T,C) and its order counters after it.
inline size_t flash_backward_scratch_floats(int B, int T, int C, int NH) {
    return flash_backward_five(C / NH) ? flash_mma::bwd5_scratch_floats(B, T, C, NH) : (size_t)B * NH * T;
}
template <class X>
void flash_backward_dispatch(X* dqkv, float* delta, const X* dout, const X* out, const X* qkv, const float* lse, int B,
                             int T, int C, int NH, int KVH, bool scalar, bool three_kernels = false) {
    flash_check_heads(NH, KVH);
    if constexpr (std::is_same<X, __nv_bfloat16>::value) {
        if (!scalar && flash_mma_supports(C / NH) && flash_aligned({dqkv, dout, out, qkv})) {
            with_mma_head_size(C / NH, [&](auto hs) {
                constexpr int HS = decltype(hs)::value;
                if constexpr (HS == 64 || HS == 128)  // flash_mma::bwd5_supports
                    if (!three_kernels) return flash_mma::flash_mma_backward5<HS>(dqkv, delta, dout, out, qkv, lse, B,
                                                                                  T, NH, KVH);
                if (KVH == NH) flash_mma_backward<HS, false>(dqkv, delta, dout, out, qkv, lse, B, T, NH, KVH);
                else flash_mma_backward<HS, true>(dqkv, delta, dout, out, qkv, lse, B, T, NH, KVH);
            });
            return;
        }
    }
    flash_scalar_backward(dqkv, delta, dout, out, qkv, lse, B, T, C, NH, KVH);
}

// y (B,T,C) and lse (B,NH,T) from qkv (B,T,QKV), QKV = C + 2·KVH·(C/NH) (GPT-2: KVH = NH, 3C).
// scalar: the scalar kernels even where the tensor-core ones apply (tests and the workbench
// compare the two); mma: which tensor-core forward (MmaForward::narrow: the wide one's reference).
inline void flash_attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH, int KVH,
                                    bool scalar = false, MmaForward mma = MmaForward::wide) {
    flash_forward_dispatch(out, lse, qkv, B, T, C, NH, KVH, scalar, mma);
}
// dqkv (B,T,QKV), overwritten, from dout (B,T,C); out and lse as the forward wrote them;
// scratch: flash_backward_scratch_floats(B, T, C, NH) floats. three_kernels: the tensor-core
// backward of three kernels even where the five-product one applies (its reference).
inline void flash_attention_backward(floatX* dqkv, float* scratch, const floatX* dout, const floatX* out,
                                     const floatX* qkv, const float* lse, int B, int T, int C, int NH, int KVH,
                                     bool scalar = false, bool three_kernels = false) {
    flash_backward_dispatch(dqkv, scratch, dout, out, qkv, lse, B, T, C, NH, KVH, scalar, three_kernels);
}
// The calls of before KVH, (..., NH, scalar), would pass `scalar` as KVH: they do not compile.
void flash_attention_forward(floatX*, float*, const floatX*, int, int, int, int, bool) = delete;
void flash_attention_backward(floatX*, float*, const floatX*, const floatX*, const floatX*, const float*, int, int,
                              int, int, bool) = delete;

}  // namespace gpu
