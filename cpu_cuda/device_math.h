// cpu_cuda/device_math.h: the device functions CUDA's headers declare only for nvcc:
// atomics, math intrinsics, integer intrinsics, __ldg, and the bf16/fp16 math that
// cuda_bf16.h and cuda_fp16.h leave to the device. Types and conversions come from the
// toolkit's own headers, which work on the host.
//
// Numerics: the fast intrinsics (__expf, __fdividef, rsqrtf, ...) are exact here but
// approximate on a GPU, and the host's libm differs from CUDA's by a few ulps; there is
// no flush-to-zero. Results agree with a GPU to float32 rounding, not bit for bit.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <chrono>
#include <cassert>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "exec.h"

// ---- min and max: CUDA has them as overloaded global functions
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
// mixed signedness: as CUDA's math_functions.hpp, both compared as the unsigned type
// (so min(-1, 5u) is 5u: -1 becomes 0xffffffff)
#define CPU_CUDA_MIXED_MIN_MAX(S, U)                                  \
    inline U min(S a, U b) { return min((U)a, b); }                   \
    inline U min(U a, S b) { return min(a, (U)b); }                   \
    inline U max(S a, U b) { return max((U)a, b); }                   \
    inline U max(U a, S b) { return max(a, (U)b); }
CPU_CUDA_MIXED_MIN_MAX(int, unsigned)
CPU_CUDA_MIXED_MIN_MAX(long, unsigned long)
CPU_CUDA_MIXED_MIN_MAX(long long, unsigned long long)
#undef CPU_CUDA_MIXED_MIN_MAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }

// ---- float intrinsics (exact here; approximate on a GPU)
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }

// ---- directed rounding: __fadd_rz/ru/rd, __fsub_, __fmul_, __fdiv_, __frcp_, __fsqrt_ and the
// __d... forms for double (the toolkit declares them for the device only). Each takes the
// round-to-nearest result r and the sign of the exact result minus r, from an exact
// error-free transform (TwoSum for a sum; fma for the remainder of a product, quotient or square
// root), then steps r one ulp in the asked direction when the exact value lies on that side.
// No floating-point environment is touched, so -O3 cannot move the operation out of a mode.
// Limits: the remainder's sign is exact unless it underflows to zero (results near the
// subnormal range); the fma forms (__fmaf_rz, ...) are not provided.
namespace cpu_cuda {
enum class Round { rz, ru, rd };
// r: the round-to-nearest result of an operation on finite operands; err: the sign of exact - r
template <class F>
F round_toward(F r, F err, Round mode) {
    const F inf = std::numeric_limits<F>::infinity(), big = std::numeric_limits<F>::max();
    if (std::isinf(r)) {  // the exact value overflowed: past the largest finite, toward r
        if (mode == Round::ru) return r > 0 ? inf : -big;
        if (mode == Round::rd) return r > 0 ? big : -inf;
        return r > 0 ? big : -big;
    }
    if (err > 0 && (mode == Round::ru || (mode == Round::rz && r < 0))) return std::nextafter(r, inf);
    if (err < 0 && (mode == Round::rd || (mode == Round::rz && r > 0))) return std::nextafter(r, -inf);
    return r;
}
template <class F>
F add_round(F a, F b, Round mode) {
    const F s = a + b;
    if (!std::isfinite(a) || !std::isfinite(b)) return s;
    if (s == 0) {  // IEEE 754: a zero sum is -0 rounding down unless both are +0; otherwise +0 unless both are -0
        const bool negative = mode == Round::rd ? (a != 0 || std::signbit(a) || std::signbit(b))
                                                : (a == 0 && std::signbit(a) && std::signbit(b));
        return negative ? -F(0) : F(0);
    }
    const F bb = s - a, err = (a - (s - bb)) + (b - bb);  // TwoSum (Knuth): a + b = s + err exactly
    return round_toward(s, err, mode);
}
template <class F>
F mul_round(F a, F b, Round mode) {
    const F p = a * b;
    if (!std::isfinite(a) || !std::isfinite(b) || p == 0) return p;
    return round_toward(p, std::isinf(p) ? F(0) : std::fma(a, b, -p), mode);  // a*b - p
}
template <class F>
F div_round(F a, F b, Round mode) {
    const F q = a / b;
    if (!std::isfinite(a) || !std::isfinite(b) || b == 0 || q == 0) return q;
    if (std::isinf(q)) return round_toward(q, F(0), mode);
    const F rem = std::fma(-q, b, a);  // a - q*b: the exact quotient minus q has its sign times b's
    return round_toward(q, b > 0 ? rem : -rem, mode);
}
template <class F>
F sqrt_round(F a, Round mode) {
    const F r = std::sqrt(a);
    if (!(a > 0) || std::isinf(a)) return r;
    return round_toward(r, std::fma(-r, r, a), mode);  // a - r*r
}
}  // namespace cpu_cuda
#define CPU_CUDA_DIRECTED(SUFFIX, MODE)                                                                         \
    inline float __fadd_##SUFFIX(float a, float b) { return cpu_cuda::add_round(a, b, MODE); }                  \
    inline float __fsub_##SUFFIX(float a, float b) { return cpu_cuda::add_round(a, -b, MODE); }                 \
    inline float __fmul_##SUFFIX(float a, float b) { return cpu_cuda::mul_round(a, b, MODE); }                  \
    inline float __fdiv_##SUFFIX(float a, float b) { return cpu_cuda::div_round(a, b, MODE); }                  \
    inline float __frcp_##SUFFIX(float a) { return cpu_cuda::div_round(1.0f, a, MODE); }                        \
    inline float __fsqrt_##SUFFIX(float a) { return cpu_cuda::sqrt_round(a, MODE); }                            \
    inline double __dadd_##SUFFIX(double a, double b) { return cpu_cuda::add_round(a, b, MODE); }               \
    inline double __dsub_##SUFFIX(double a, double b) { return cpu_cuda::add_round(a, -b, MODE); }              \
    inline double __dmul_##SUFFIX(double a, double b) { return cpu_cuda::mul_round(a, b, MODE); }               \
    inline double __ddiv_##SUFFIX(double a, double b) { return cpu_cuda::div_round(a, b, MODE); }               \
    inline double __drcp_##SUFFIX(double a) { return cpu_cuda::div_round(1.0, a, MODE); }                       \
    inline double __dsqrt_##SUFFIX(double a) { return cpu_cuda::sqrt_round(a, MODE); }
CPU_CUDA_DIRECTED(rz, cpu_cuda::Round::rz)
CPU_CUDA_DIRECTED(ru, cpu_cuda::Round::ru)
CPU_CUDA_DIRECTED(rd, cpu_cuda::Round::rd)
#undef CPU_CUDA_DIRECTED
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __drcp_rn(double a) { return 1.0 / a; }
inline double __dsqrt_rn(double a) { return sqrt(a); }

inline float __saturatef(float x) { return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }

// ---- bit casts
template <class To, class From>
inline To bit_cast_(From f) {
    static_assert(sizeof(To) == sizeof(From), "bit cast between types of one size");
    To t;
    memcpy((void*)&t, (const void*)&f, sizeof t);
    return t;
}
inline int __float_as_int(float x) { return bit_cast_<int>(x); }
inline unsigned __float_as_uint(float x) { return bit_cast_<unsigned>(x); }
inline float __int_as_float(int x) { return bit_cast_<float>(x); }
inline float __uint_as_float(unsigned x) { return bit_cast_<float>(x); }
inline long long __double_as_longlong(double x) { return bit_cast_<long long>(x); }
inline double __longlong_as_double(long long x) { return bit_cast_<double>(x); }

// ---- integer intrinsics
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    return __builtin_bswap32(x);
}
inline int __mul24(int a, int b) { return (int)((long long)(a << 8 >> 8) * (b << 8 >> 8)); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xFFFFFFu) * (b & 0xFFFFFFu); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }

// ---- loads and stores with cache hints (__ldg: the read-only cache; __ldca, __ldcg, __ldcs,
// __ldlu, __ldcv; __stwb, __stcg, __stcs, __stwt): an ordinary load or store here, for the
// types CUDA defines them for (sm_32_intrinsics.h), so that a kernel another type would not
// compile under nvcc fails here too.
namespace cpu_cuda {
template <class T, class... U>
constexpr bool one_of = (std::is_same<T, U>::value || ...);
template <class T>
constexpr bool cache_hint_type =
    one_of<T, char, signed char, short, int, long, long long, unsigned char, unsigned short, unsigned, unsigned long,
           unsigned long long, float, double, char2, char4, short2, short4, int2, int4, longlong2, uchar2, uchar4,
           ushort2, ushort4, uint2, uint4, ulonglong2, float2, float4, double2, __half, __half2, __nv_bfloat16,
           __nv_bfloat162>;
}  // namespace cpu_cuda
#define CPU_CUDA_CACHE_LOAD(NAME)                                                                     \
    template <class T>                                                                                \
    inline T NAME(const T* p) {                                                                       \
        static_assert(::cpu_cuda::cache_hint_type<T>, #NAME " is defined for CUDA's scalar and vector " \
                                                             "types (int, float, float4, __half2, ...)"); \
        return *p;                                                                                    \
    }
#define CPU_CUDA_CACHE_STORE(NAME)                                                                    \
    template <class T>                                                                                \
    inline void NAME(T* p, T v) {                                                                     \
        static_assert(::cpu_cuda::cache_hint_type<T>, #NAME " is defined for CUDA's scalar and vector " \
                                                             "types (int, float, float4, __half2, ...)"); \
        *p = v;                                                                                       \
    }
CPU_CUDA_CACHE_LOAD(__ldg)
CPU_CUDA_CACHE_LOAD(__ldca)
CPU_CUDA_CACHE_LOAD(__ldcg)
CPU_CUDA_CACHE_LOAD(__ldcs)
CPU_CUDA_CACHE_LOAD(__ldlu)
CPU_CUDA_CACHE_LOAD(__ldcv)
CPU_CUDA_CACHE_STORE(__stwb)
CPU_CUDA_CACHE_STORE(__stcg)
CPU_CUDA_CACHE_STORE(__stcs)
CPU_CUDA_CACHE_STORE(__stwt)
#undef CPU_CUDA_CACHE_LOAD
#undef CPU_CUDA_CACHE_STORE

// ---- atomics: blocks run concurrently on several OS threads, so these are real atomics
namespace cpu_cuda {
template <class T, class F>
inline T atomic_update(T* address, F f) {  // compare-and-swap loop on the bits: float, double, bf16
    using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>>;
    Bits* bits = (Bits*)address;
    Bits old = __atomic_load_n(bits, __ATOMIC_RELAXED);
    for (;;) {
        T now = f(bit_cast_<T>(old));
        if (__atomic_compare_exchange_n(bits, &old, bit_cast_<Bits>(now), false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
            return bit_cast_<T>(old);
    }
}
}  // namespace cpu_cuda
#define CPU_CUDA_INTEGER_ATOMICS(T)                                                                   \
    inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }             \
    inline T atomicSub(T* a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }             \
    inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }           \
    inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); }             \
    inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }               \
    inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); }             \
    inline T atomicMax(T* a, T v) { return cpu_cuda::atomic_update(a, [v](T x) { return x > v ? x : v; }); } \
    inline T atomicMin(T* a, T v) { return cpu_cuda::atomic_update(a, [v](T x) { return x < v ? x : v; }); } \
    inline T atomicCAS(T* a, T expected, T v) {                                                       \
        __atomic_compare_exchange_n(a, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);      \
        return expected;                                                                              \
    }
CPU_CUDA_INTEGER_ATOMICS(int)
CPU_CUDA_INTEGER_ATOMICS(unsigned)
CPU_CUDA_INTEGER_ATOMICS(unsigned long long)
#undef CPU_CUDA_INTEGER_ATOMICS
inline unsigned atomicInc(unsigned* a, unsigned limit) {
    return cpu_cuda::atomic_update(a, [limit](unsigned x) { return x >= limit ? 0u : x + 1; });
}
// CUDA's: ((old == 0) | (old > limit)) ? limit : old - 1
inline unsigned atomicDec(unsigned* a, unsigned limit) {
    return cpu_cuda::atomic_update(a, [limit](unsigned x) { return (x == 0 || x > limit) ? limit : x - 1; });
}
// Device functions with names a host program may use for its own: nvcc shows them to .cu files
// only, never to a .cpp. Here they live in a namespace of their own, which the build's rewrite
// (rewrite.cpp) opens at the top of each .cu file and of no other, so that a host-only .cpp of a
// program (a samples collection's reference code) may define a umin of its own.
namespace cpu_cuda::device_functions {
inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
}  // namespace cpu_cuda::device_functions
// Floating-point sums: the race detector is told (exec.h), since their last bits depend on order
inline float atomicAdd(float* a, float v) {
    cpu_cuda::note_float_atomic(a, sizeof *a);
    return cpu_cuda::atomic_update(a, [v](float x) { return x + v; });
}
inline double atomicAdd(double* a, double v) {
    cpu_cuda::note_float_atomic(a, sizeof *a);
    return cpu_cuda::atomic_update(a, [v](double x) { return x + v; });
}
inline float atomicExch(float* a, float v) { return cpu_cuda::atomic_update(a, [v](float) { return v; }); }
inline float atomicMax(float* a, float v) { return cpu_cuda::atomic_update(a, [v](float x) { return fmaxf(x, v); }); }
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, __nv_bfloat16 v) {
    cpu_cuda::note_float_atomic(a, sizeof *a);
    return cpu_cuda::atomic_update(a, [v](__nv_bfloat16 x) { return __float2bfloat16(__bfloat162float(x) + __bfloat162float(v)); });
}
inline __half atomicAdd(__half* a, __half v) {
    cpu_cuda::note_float_atomic(a, sizeof *a);
    return cpu_cuda::atomic_update(a, [v](__half x) { return __float2half(__half2float(x) + __half2float(v)); });
}
// The packed pairs: as CUDA documents, each half is added atomically on its own (the pair is
// not one atomic operation); the old pair is returned. Each sum is rounded once from float.
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* a, __nv_bfloat162 v) {
    __nv_bfloat16* h = reinterpret_cast<__nv_bfloat16*>(a);
    __nv_bfloat16 lo = atomicAdd(h, v.x), hi = atomicAdd(h + 1, v.y);
    return __nv_bfloat162(lo, hi);
}
inline __half2 atomicAdd(__half2* a, __half2 v) {
    __half* h = reinterpret_cast<__half*>(a);
    __half lo = atomicAdd(h, v.x), hi = atomicAdd(h + 1, v.y);
    return __half2(lo, hi);
}
// The scoped forms (compute capability 6.0 on): atomicAdd_block, atomicAdd_system, ... for every
// atomic above. Each here is sequentially consistent across the whole process, which is at
// least what either scope promises.
#define CPU_CUDA_SCOPED_ATOMIC(NAME)                                                                          \
    template <class... A>                                                                                     \
    inline auto NAME##_block(A... a) -> decltype(NAME(a...)) { return NAME(a...); }                           \
    template <class... A>                                                                                     \
    inline auto NAME##_system(A... a) -> decltype(NAME(a...)) { return NAME(a...); }
CPU_CUDA_SCOPED_ATOMIC(atomicAdd)
CPU_CUDA_SCOPED_ATOMIC(atomicSub)
CPU_CUDA_SCOPED_ATOMIC(atomicExch)
CPU_CUDA_SCOPED_ATOMIC(atomicAnd)
CPU_CUDA_SCOPED_ATOMIC(atomicOr)
CPU_CUDA_SCOPED_ATOMIC(atomicXor)
CPU_CUDA_SCOPED_ATOMIC(atomicMax)
CPU_CUDA_SCOPED_ATOMIC(atomicMin)
CPU_CUDA_SCOPED_ATOMIC(atomicCAS)
CPU_CUDA_SCOPED_ATOMIC(atomicInc)
CPU_CUDA_SCOPED_ATOMIC(atomicDec)
#undef CPU_CUDA_SCOPED_ATOMIC
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
// ---- clock64() and clock(): an SM's cycle counter, here following real time at the preset
// GPU's clock rate (cudaDevAttrClockRate, 1,980,000 kHz on the default h100), counted from the
// first call. Kernels that wait "until N cycles have passed" (a sample's clock_block, sized
// from cudaDevAttrClockRate to take 10 ms) then wait the time they meant to; the host's clock()
// counts CPU time in microseconds, so such a wait took 2,000 times longer than meant.
namespace cpu_cuda {
inline long long device_clock_ticks() {
    static const auto start = std::chrono::steady_clock::now();
    const long long ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    const long long khz = cpu_cuda::device_preset().clock_khz;  // cycles per ms
    return ns / 1000000 * khz + ns % 1000000 * khz / 1000000;     // no overflow for 146 years
}
}  // namespace cpu_cuda
inline long long clock64() { return cpu_cuda::device_clock_ticks(); }

// ---- assert() in a kernel: glibc's assert macro calls __assert_fail, which the program's own
// definition here replaces (a definition in the executable comes before the C library's). In a
// kernel it fails the launch with cudaErrorAssert and the program goes on, as on a GPU; in host
// code it prints glibc's message and aborts, as before.
extern "C" inline void __assert_fail(const char* expr, const char* file, unsigned int line,
                                     const char* func) noexcept {
    if (cpu_cuda::current_block) cpu_cuda::assert_failed(expr, file, line, func);
    fprintf(stderr, "%s: %s:%u: %s: Assertion `%s' failed.\n", program_invocation_short_name, file, line, func, expr);
    fflush(stderr);
    abort();
}
// clock() in a kernel is the device's (clock_t, as CUDA declares it); in host code, the C
// library's. cuda_cpu.h turns `clock()` into this call (std::clock() too).
inline clock_t cpu_cuda_clock() { return cpu_cuda::current_block ? (clock_t)cpu_cuda::device_clock_ticks() : ::clock(); }
namespace std {
using ::cpu_cuda_clock;
}
inline void __nanosleep(unsigned) {}

// ---- bf16 and fp16 math that the toolkit headers define for the device only. Each rounds
// once from the float32 result, as the GPU's instructions do for these operations.
#define CPU_CUDA_HALF_MATH(H, TO_F, FROM_F)                                                         \
    inline H __hfma(H a, H b, H c) { return FROM_F(fmaf(TO_F(a), TO_F(b), TO_F(c))); }                 \
    inline H hsqrt(H a) { return FROM_F(sqrtf(TO_F(a))); }                                            \
    inline H hrsqrt(H a) { return FROM_F(1.0f / sqrtf(TO_F(a))); }                                    \
    inline H hrcp(H a) { return FROM_F(1.0f / TO_F(a)); }                                             \
    inline H hexp(H a) { return FROM_F(expf(TO_F(a))); }                                              \
    inline H hlog(H a) { return FROM_F(logf(TO_F(a))); }                                              \
    inline H htanh(H a) { return FROM_F(tanhf(TO_F(a))); }                                            \
    inline H hsin(H a) { return FROM_F(sinf(TO_F(a))); }                                              \
    inline H hcos(H a) { return FROM_F(cosf(TO_F(a))); }
CPU_CUDA_HALF_MATH(__nv_bfloat16, __bfloat162float, __float2bfloat16)
CPU_CUDA_HALF_MATH(__half, __half2float, __float2half)
#undef CPU_CUDA_HALF_MATH
inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    return __nv_bfloat162(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); }
inline int __bfloat162int_rn(__nv_bfloat16 a) { return (int)nearbyintf(__bfloat162float(a)); }
inline int __half2int_rn(__half a) { return (int)nearbyintf(__half2float(a)); }
