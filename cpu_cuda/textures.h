// cpu_cuda/textures.h: textures, surfaces and CUDA arrays on the CPU runtime, as the CUDA C++
// Programming Guide describes them ("Texture and Surface Memory", and the appendix "Texture
// Fetching" for the arithmetic): 1-D and 2-D texture objects over a CUDA array, pitched device
// memory or linear memory; point and linear filtering, the linear weights kept in 9-bit fixed
// point with 8 fractional bits as the hardware keeps them; the four address modes and the
// border colour; normalized coordinates; element-type and normalized-float reads; surface
// reads and writes with their three boundary modes. Pitched memory comes from cudaMallocPitch
// and the 2-D copies and memsets.
//
// A CUDA array here is device memory in packed rows (a GPU keeps it in an opaque tiled layout,
// which no program can observe). What is not here (3-D and layered textures, cubemaps, mipmaps,
// gathers, sRGB, resource views) stops the compile or answers cudaErrorNotSupported, each with
// a message naming the call.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>

#include "exec.h"
#include "runtime.h"

// The toolkit leaves cudaArray opaque; the runtime defines it.
struct cudaArray {
    cudaChannelFormatDesc desc;
    size_t width, height;  // in elements; height 0 for a 1-D array
    unsigned flags;        // cudaArraySurfaceLoadStore, ...
    size_t elem;           // bytes per element
    char* data;            // rows() rows of width * elem bytes, packed (device memory)
    size_t rows() const { return height ? height : 1; }
    size_t row_bytes() const { return width * elem; }
};

namespace cpu_cuda {

// ----------------------------------------------------------------------------
// Channel formats: what a CUDA array or texture can hold

// Bytes per element of a format, or 0 when CUDA cannot make one: 1, 2 or 4 components of 8,
// 16 or 32 bits each, the used ones first; signed, unsigned or float (16 or 32 bits).
inline size_t format_bytes(const cudaChannelFormatDesc& d) {
    const int bits[4] = {d.x, d.y, d.z, d.w};
    int n = 0;
    while (n < 4 && bits[n] != 0) n++;
    for (int k = n; k < 4; k++)
        if (bits[k] != 0) return 0;
    if (n == 0 || n == 3) return 0;
    for (int k = 1; k < n; k++)
        if (bits[k] != bits[0]) return 0;
    if (bits[0] != 8 && bits[0] != 16 && bits[0] != 32) return 0;
    if (d.f == cudaChannelFormatKindFloat) return bits[0] == 8 ? 0 : (size_t)n * bits[0] / 8;
    if (d.f == cudaChannelFormatKindSigned || d.f == cudaChannelFormatKindUnsigned) return (size_t)n * bits[0] / 8;
    return 0;  // the block-compressed, NV12 and fixed normalized kinds are not here
}
inline int format_channels(const cudaChannelFormatDesc& d) { return (d.x != 0) + (d.y != 0) + (d.z != 0) + (d.w != 0); }

inline cudaError_t texture_error(cudaError_t e, const char* call, const std::string& why) {
    fprintf(stderr, "cpu_cuda: %s: %s (%s)\n", call, why.c_str(), cudaGetErrorName(e));
    return set_error(e);
}
inline std::string format_name(const cudaChannelFormatDesc& d) {
    const char* kind = d.f == cudaChannelFormatKindFloat ? "float" : d.f == cudaChannelFormatKindSigned ? "signed" : "unsigned";
    return "{" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ", " +
           std::to_string(d.w) + "} bits of " + kind;
}

// ----------------------------------------------------------------------------
// CUDA arrays: remembered, so that a freed or made-up one is named instead of dereferenced

inline std::mutex& arrays_mutex() {
    static std::mutex m;
    return m;
}
inline std::set<const cudaArray*>& live_arrays() {
    static std::set<const cudaArray*> s;
    return s;
}
inline bool live_array(const cudaArray* a) {
    std::lock_guard<std::mutex> lock(arrays_mutex());
    return live_arrays().count(a) > 0;
}

// The (wOffset, hOffset) window of width bytes by height rows inside an array, or an error
inline cudaError_t array_window(const cudaArray* a, size_t w_offset, size_t h_offset, size_t width, size_t height,
                                const char* call) {
    if (!a || !live_array(a)) return texture_error(cudaErrorInvalidResourceHandle, call, "not a live CUDA array");
    if (w_offset + width > a->row_bytes() || h_offset + height > a->rows())
        return texture_error(cudaErrorInvalidValue, call,
                             std::to_string(width) + " bytes x " + std::to_string(height) + " rows at (" +
                                 std::to_string(w_offset) + ", " + std::to_string(h_offset) + ") fall outside the array of " +
                                 std::to_string(a->row_bytes()) + " bytes x " + std::to_string(a->rows()) + " rows");
    return cudaSuccess;
}

// Rows of width bytes from src (spitch apart) to dst (dpitch apart), each row one checked copy
inline cudaError_t copy_rows(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                             cudaMemcpyKind kind, const char* call, bool async = false, cudaStream_t stream = nullptr) {
    if (width > dpitch || width > spitch)
        return texture_error(cudaErrorInvalidPitchValue, call,
                             "width " + std::to_string(width) + " exceeds a pitch (" + std::to_string(dpitch) + ", " +
                                 std::to_string(spitch) + ")");
    for (size_t r = 0; r < height; r++)
        if (cudaError_t e = copy((char*)dst + r * dpitch, (const char*)src + r * spitch, width, kind, call, async, stream))
            return e;
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// Texture and surface objects. A handle is an index into a table of their descriptions (1 on,
// never reused); a destroyed one keeps its (small) description, marked dead, so that a stale
// handle is reported, not read, and a handle never made is found in no entry. Each keeps the
// generation of the allocation its texels lie in (memory.h), and a fetch after memory was
// freed anywhere checks it again: a texture over freed memory (its array freed, or its linear
// memory, even where cudaMalloc has since reused the address) fails the launch.

struct TextureObject {
    static constexpr uint64_t kLive = 0x43505543'54455854ull, kDead = 0x44454144'54455854ull;
    uint64_t state = kLive;
    bool surface = false;
    cudaResourceDesc res{};
    cudaTextureDesc desc{};
    const char* base = nullptr;  // texel (0, 0)
    size_t pitch = 0;            // bytes from one row to the next
    size_t width = 0, height = 1;
    cudaChannelFormatDesc fmt{};
    size_t elem = 0;
    int channels = 0;
    bool normalized_read = false;  // 8- and 16-bit integers read as floats in [0, 1] or [-1, 1]
    uint64_t generation = 0;                  // of the allocation base lies in
    mutable std::atomic<uint64_t> checked{0};  // memory().frees() when the generation last held
    bool float_result() const { return fmt.f == cudaChannelFormatKindFloat || normalized_read; }
};

// The table of objects: chunks made as needed, read without a lock (a handle reaches a
// kernel only after its entry was written)
class TextureTable {
  public:
    static constexpr unsigned long long CHUNK = 4096, CHUNKS = 4096;
    unsigned long long add(TextureObject* t) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (next_ >= CHUNK * CHUNKS) return 0;
        auto& chunk = chunks_[next_ / CHUNK];
        if (!chunk.load()) chunk.store(new std::atomic<TextureObject*>[CHUNK]());
        chunk.load()[next_ % CHUNK].store(t, std::memory_order_release);
        return next_++;
    }
    TextureObject* at(unsigned long long handle) const {
        if (handle == 0 || handle >= CHUNK * CHUNKS) return nullptr;
        std::atomic<TextureObject*>* chunk = chunks_[handle / CHUNK].load(std::memory_order_acquire);
        return chunk ? chunk[handle % CHUNK].load(std::memory_order_acquire) : nullptr;
    }

  private:
    std::mutex mutex_;
    unsigned long long next_ = 1;
    std::atomic<std::atomic<TextureObject*>*> chunks_[CHUNKS] = {};
};
inline TextureTable& texture_table() {
    static TextureTable t;
    return t;
}

[[noreturn]] inline void fetch_failed(const std::string& why) {
    if (current_block) current_block->fail(why);
    fprintf(stderr, "cpu_cuda: %s (called outside a kernel)\n", why.c_str());
    abort();
}
inline const TextureObject& texture_object(unsigned long long handle, bool surface, const char* call) {
    const TextureObject* t = texture_table().at(handle);
    char h[32];
    snprintf(h, sizeof h, "0x%llx", handle);
    if (!t || t->state != TextureObject::kLive || t->surface != surface)
        fetch_failed(std::string(call) + ": " + h + " is not a live " + (surface ? "surface" : "texture") + " object" +
                     (!t ? " (no object was made with it)" : t->state == TextureObject::kDead ? " (it was destroyed)" : ""));
    const uint64_t frees = memory().frees();
    if (t->checked.load(std::memory_order_relaxed) != frees) {  // memory was freed since: is ours still there?
        if (memory().generation(t->base) != t->generation)
            fetch_failed(std::string(call) + ": the memory of " + (surface ? "surface" : "texture") + " object " + h +
                         " was freed after the object was made" +
                         (t->res.resType == cudaResourceTypeArray ? " (its CUDA array was freed)" : ""));
        t->checked.store(frees, std::memory_order_relaxed);
    }
    return *t;
}

// Component k of the element at p, as the format stores it (integers exactly: a double holds
// every 32-bit value)
inline double raw_component(const TextureObject& t, const char* p, int k) {
    const int bits = t.fmt.x;
    p += (size_t)k * bits / 8;
    if (t.fmt.f == cudaChannelFormatKindFloat) {
        if (bits == 32) return *(const float*)p;
        __half_raw h;
        memcpy(&h.x, p, 2);
        return __half2float(__half(h));
    }
    const bool s = t.fmt.f == cudaChannelFormatKindSigned;
    switch (bits) {
        case 8: return s ? (double)*(const int8_t*)p : (double)*(const uint8_t*)p;
        case 16: return s ? (double)*(const int16_t*)p : (double)*(const uint16_t*)p;
        default: return s ? (double)*(const int32_t*)p : (double)*(const uint32_t*)p;
    }
}
// ... and as a texture fetch returns it: normalized-float reads map an unsigned n-bit integer
// to [0, 1] (v / (2^n - 1)) and a signed one to [-1, 1] (v / (2^(n-1) - 1), -2^(n-1) to -1)
inline double read_component(const TextureObject& t, const char* p, int k) {
    double v = raw_component(t, p, k);
    if (!t.normalized_read) return v;
    const double top = t.fmt.f == cudaChannelFormatKindSigned ? std::ldexp(1.0, t.fmt.x - 1) - 1 : std::ldexp(1.0, t.fmt.x) - 1;
    return std::max(v / top, -1.0);
}

// Index i of n texels under an address mode; -1 when it falls on the border. Wrap and mirror
// are for normalized coordinates only (the Programming Guide); otherwise they clamp.
inline long address(long i, long n, cudaTextureAddressMode mode, bool normalized) {
    if (i >= 0 && i < n) return i;
    if (!normalized && (mode == cudaAddressModeWrap || mode == cudaAddressModeMirror)) mode = cudaAddressModeClamp;
    switch (mode) {
        case cudaAddressModeWrap: return ((i % n) + n) % n;
        case cudaAddressModeMirror: {
            long p = ((i % (2 * n)) + 2 * n) % (2 * n);
            return p < n ? p : 2 * n - 1 - p;
        }
        case cudaAddressModeBorder: return -1;
        default: return i < 0 ? 0 : n - 1;
    }
}
// A coordinate in texels: normalized ones scaled by the size, after wrap and mirror take the
// fraction (the Programming Guide: frac(x) for wrap; frac(x) or 1 - frac(x) by floor(x)'s
// parity for mirror)
inline double texel_coordinate(float x, size_t n, cudaTextureAddressMode mode, bool normalized) {
    if (!normalized) return x;
    const double whole = std::floor((double)x), frac = (double)x - whole;
    if (mode == cudaAddressModeWrap) return frac * (double)n;
    if (mode == cudaAddressModeMirror) return ((long long)whole & 1 ? 1.0 - frac : frac) * (double)n;
    return (double)x * (double)n;
}
// The texel at (i, j) after addressing, component by component, into v[0..3] (0 past the
// format's channels; the border colour on the border)
inline void texel(const TextureObject& t, long i, long j, double v[4]) {
    const bool norm = t.desc.normalizedCoords;
    i = address(i, (long)t.width, t.desc.addressMode[0], norm);
    j = address(j, (long)t.height, t.desc.addressMode[1], norm);
    for (int k = 0; k < 4; k++) v[k] = 0.0;
    if (i < 0 || j < 0) {
        for (int k = 0; k < 4; k++) v[k] = t.desc.borderColor[k];
        return;
    }
    const char* p = t.base + (size_t)j * t.pitch + (size_t)i * t.elem;
    for (int k = 0; k < t.channels; k++) v[k] = read_component(t, p, k);
}
// A linear filter's weight: the fraction in 9-bit fixed point with 8 fractional bits
inline double filter_weight(double f) { return std::nearbyint(f * 256.0) / 256.0; }

// A 1-D or 2-D fetch at texel coordinates (x, y) (y unused for 1-D), into v[0..3]
inline void sample(const TextureObject& t, float x, float y, bool two_d, double v[4]) {
    const bool norm = t.desc.normalizedCoords;
    const double u = texel_coordinate(x, t.width, t.desc.addressMode[0], norm);
    const double w = two_d ? texel_coordinate(y, t.height, t.desc.addressMode[1], norm) : 0.0;
    if (t.desc.filterMode == cudaFilterModePoint) {
        texel(t, (long)std::floor(u), two_d ? (long)std::floor(w) : 0, v);
        return;
    }
    // linear: tex(x) = (1-a) T[i] + a T[i+1], i = floor(x - 0.5), a = frac(x - 0.5); in 2-D,
    // the same across rows j and j+1 with weight b
    const double ub = u - 0.5, wb = two_d ? w - 0.5 : 0.0;
    const long i = (long)std::floor(ub), j = (long)std::floor(wb);
    const double a = filter_weight(ub - (double)i), b = two_d ? filter_weight(wb - (double)j) : 0.0;
    double t00[4], t10[4], t01[4] = {}, t11[4] = {};
    texel(t, i, j, t00);
    texel(t, i + 1, j, t10);
    if (two_d) texel(t, i, j + 1, t01), texel(t, i + 1, j + 1, t11);
    for (int k = 0; k < 4; k++)
        v[k] = (1 - b) * ((1 - a) * t00[k] + a * t10[k]) + b * ((1 - a) * t01[k] + a * t11[k]);
}

// The types a fetch or a surface access returns: CUDA's 1- to 4-component char, short, int,
// float (and long long for surfaces) types
template <class T>
struct Texel {
    static constexpr int n = 0;
};
#define CPU_CUDA_TEXEL(T, S, N)          \
    template <>                          \
    struct Texel<T> {                    \
        using scalar = S;                \
        static constexpr int n = N;      \
    };
#define CPU_CUDA_TEXELS(S, V)                                                                      \
    CPU_CUDA_TEXEL(S, S, 1) CPU_CUDA_TEXEL(V##1, S, 1) CPU_CUDA_TEXEL(V##2, S, 2) CPU_CUDA_TEXEL(V##4, S, 4)
CPU_CUDA_TEXELS(char, char)
CPU_CUDA_TEXELS(unsigned char, uchar)
CPU_CUDA_TEXELS(short, short)
CPU_CUDA_TEXELS(unsigned short, ushort)
CPU_CUDA_TEXELS(int, int)
CPU_CUDA_TEXELS(unsigned int, uint)
CPU_CUDA_TEXELS(float, float)
CPU_CUDA_TEXEL(signed char, signed char, 1)
#undef CPU_CUDA_TEXELS
#undef CPU_CUDA_TEXEL

// A fetch's result as T: floats for float formats and normalized reads, the integers as they
// are otherwise; a T of the other family fails the launch, naming both
template <class T>
T fetch_result(const TextureObject& t, const double v[4], const char* call) {
    static_assert(Texel<T>::n > 0, "a texture fetch returns a 1- to 4-component char, short, int or float type");
    using S = typename Texel<T>::scalar;
    if (std::is_floating_point<S>::value != t.float_result())
        fetch_failed(std::string(call) + ": a texture of " + format_name(t.fmt) +
                     (t.normalized_read ? " read as normalized floats" : " read as elements") + " returns " +
                     (t.float_result() ? "float" : "integer") + " types, not " + (std::is_floating_point<S>::value ? "float" : "integer") + " ones");
    T out;
    S* c = reinterpret_cast<S*>(&out);
    for (int k = 0; k < Texel<T>::n; k++) c[k] = (S)v[k];
    return out;
}

inline const TextureObject& texture_2d(cudaTextureObject_t obj, const char* call) {
    const TextureObject& t = texture_object(obj, false, call);
    if (t.res.resType == cudaResourceTypeLinear)
        fetch_failed(std::string(call) + ": a texture over linear memory is read with tex1Dfetch");
    return t;
}

// A surface access of sizeof(T) bytes at byte x of row y: its address, or nullptr when the
// boundary mode says to drop it (cudaBoundaryModeZero); clamp moves it inside, trap fails the
// launch
// The programming guide's surface functions (surf1Dread, surf2Dwrite, ...) take x in bytes, not
// elements; an access of n bytes at a byte offset that is not a multiple of n is misaligned, which
// a GPU does not carry out: the launch fails. Here too, with one line naming the call, the offset
// and the element size (whatever the boundary mode: the offset is wrong, not the bounds).
inline void misaligned_surface_access(int x, size_t bytes, const char* call) {
    if (x % (long)bytes == 0) return;
    fetch_failed(std::string(call) + ": x = " + std::to_string(x) + " is not a multiple of the element's " +
                 std::to_string(bytes) + " bytes (a surface's x is a byte offset: write x * sizeof(element)); misaligned access");
}
template <class T>
char* surface_element(cudaSurfaceObject_t obj, int x, int y, cudaSurfaceBoundaryMode mode, const char* call) {
    const TextureObject& s = texture_object(obj, true, call);
    misaligned_surface_access(x, sizeof(T), call);
    const long row = (long)(s.width * s.elem), last_x = row - (long)sizeof(T);
    if (x < 0 || x > last_x || y < 0 || y >= (long)s.height) {
        if (mode == cudaBoundaryModeZero) return nullptr;
        if (mode == cudaBoundaryModeTrap)
            fetch_failed(std::string(call) + ": " + std::to_string(sizeof(T)) + " bytes at byte " + std::to_string(x) +
                         " of row " + std::to_string(y) + " fall outside the surface of " + std::to_string(row) +
                         " bytes x " + std::to_string(s.height) + " rows (cudaBoundaryModeTrap)");
        x = (int)std::min(std::max<long>(x, 0), last_x), y = (int)std::min(std::max<long>(y, 0), (long)s.height - 1);
    }
    return const_cast<char*>(s.base) + (size_t)y * s.pitch + (size_t)x;
}

}  // namespace cpu_cuda

// ----------------------------------------------------------------------------
// Device side: fetches and surface accesses (CUDA's texture and surface object API)

template <class T>
T tex1Dfetch(cudaTextureObject_t obj, int x) {  // linear memory: no filtering, 0 outside
    const cpu_cuda::TextureObject& t = cpu_cuda::texture_object(obj, false, "tex1Dfetch");
    if (t.res.resType != cudaResourceTypeLinear)
        cpu_cuda::fetch_failed("tex1Dfetch: reads textures over linear memory; this one is 2-D or an array (tex1D, tex2D)");
    double v[4] = {0, 0, 0, 0};
    if (x >= 0 && (size_t)x < t.width)
        for (int k = 0; k < t.channels; k++) v[k] = cpu_cuda::read_component(t, t.base + (size_t)x * t.elem, k);
    return cpu_cuda::fetch_result<T>(t, v, "tex1Dfetch");
}
template <class T>
T tex1D(cudaTextureObject_t obj, float x) {
    const cpu_cuda::TextureObject& t = cpu_cuda::texture_2d(obj, "tex1D");
    double v[4];
    cpu_cuda::sample(t, x, 0.0f, false, v);
    return cpu_cuda::fetch_result<T>(t, v, "tex1D");
}
template <class T>
T tex2D(cudaTextureObject_t obj, float x, float y) {
    const cpu_cuda::TextureObject& t = cpu_cuda::texture_2d(obj, "tex2D");
    double v[4];
    cpu_cuda::sample(t, x, y, true, v);
    return cpu_cuda::fetch_result<T>(t, v, "tex2D");
}
template <class T>
void tex1Dfetch(T* out, cudaTextureObject_t obj, int x) { *out = tex1Dfetch<T>(obj, x); }
template <class T>
void tex1D(T* out, cudaTextureObject_t obj, float x) { *out = tex1D<T>(obj, x); }
template <class T>
void tex2D(T* out, cudaTextureObject_t obj, float x, float y) { *out = tex2D<T>(obj, x, y); }

// Surfaces address x in bytes (the Programming Guide: "x ... in bytes"), y in rows
template <class T>
void surf2Dwrite(T data, cudaSurfaceObject_t obj, int x, int y, cudaSurfaceBoundaryMode mode = cudaBoundaryModeTrap) {
    if (char* p = cpu_cuda::surface_element<T>(obj, x, y, mode, "surf2Dwrite")) memcpy(p, &data, sizeof(T));
}
template <class T>
void surf1Dwrite(T data, cudaSurfaceObject_t obj, int x, cudaSurfaceBoundaryMode mode = cudaBoundaryModeTrap) {
    if (char* p = cpu_cuda::surface_element<T>(obj, x, 0, mode, "surf1Dwrite")) memcpy(p, &data, sizeof(T));
}
template <class T>
void surf2Dread(T* out, cudaSurfaceObject_t obj, int x, int y, cudaSurfaceBoundaryMode mode = cudaBoundaryModeTrap) {
    const char* p = cpu_cuda::surface_element<T>(obj, x, y, mode, "surf2Dread");
    if (p) memcpy(out, p, sizeof(T));
    else memset(out, 0, sizeof(T));
}
template <class T>
T surf2Dread(cudaSurfaceObject_t obj, int x, int y, cudaSurfaceBoundaryMode mode = cudaBoundaryModeTrap) {
    T v;
    surf2Dread(&v, obj, x, y, mode);
    return v;
}
template <class T>
void surf1Dread(T* out, cudaSurfaceObject_t obj, int x, cudaSurfaceBoundaryMode mode = cudaBoundaryModeTrap) {
    surf2Dread(out, obj, x, 0, mode);
}
template <class T>
T surf1Dread(cudaSurfaceObject_t obj, int x, cudaSurfaceBoundaryMode mode = cudaBoundaryModeTrap) {
    T v;
    surf2Dread(&v, obj, x, 0, mode);
    return v;
}

// What is not here stops the compile, naming the call (instead of "'tex3D' was not declared")
namespace cpu_cuda {
template <class T>
struct texture_fetch_unsupported : std::false_type {};
}  // namespace cpu_cuda
#define CPU_CUDA_NO_TEXTURE_FETCH(name)                                                                        \
    template <class T = void, class... A>                                                                      \
    T name(A...) {                                                                                             \
        static_assert(cpu_cuda::texture_fetch_unsupported<T>::value,                                           \
                      #name ": the CPU runtime has 1-D and 2-D textures and surfaces only (no 3-D, layered, " \
                      "cubemap, mipmapped or gather fetches); docs/cpu-runtime.md");                            \
        return T();                                                                                            \
    }
CPU_CUDA_NO_TEXTURE_FETCH(tex3D)
CPU_CUDA_NO_TEXTURE_FETCH(tex1DLayered)
CPU_CUDA_NO_TEXTURE_FETCH(tex2DLayered)
CPU_CUDA_NO_TEXTURE_FETCH(tex1DLod)
CPU_CUDA_NO_TEXTURE_FETCH(tex2DLod)
CPU_CUDA_NO_TEXTURE_FETCH(tex2Dgather)
CPU_CUDA_NO_TEXTURE_FETCH(tex2DGrad)
CPU_CUDA_NO_TEXTURE_FETCH(texCubemap)
CPU_CUDA_NO_TEXTURE_FETCH(surf3Dread)
CPU_CUDA_NO_TEXTURE_FETCH(surf3Dwrite)
CPU_CUDA_NO_TEXTURE_FETCH(surf2DLayeredread)
CPU_CUDA_NO_TEXTURE_FETCH(surf2DLayeredwrite)
#undef CPU_CUDA_NO_TEXTURE_FETCH

// ----------------------------------------------------------------------------
// Host side: pitched memory and 2-D copies

// The pitch is the row rounded up to cudaDeviceProp::textureAlignment (512 bytes), so that any
// row may start a pitch-linear texture
inline cudaError_t cudaMallocPitch(void** p, size_t* pitch, size_t width, size_t height) {
    if (!p || !pitch) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *pitch = (width + 511) / 512 * 512;
    return cudaMalloc(p, *pitch * height);
}
inline cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                                cudaMemcpyKind kind) {
    return cpu_cuda::copy_rows(dst, dpitch, src, spitch, width, height, kind, "cudaMemcpy2D");
}
inline cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
    if (!cpu_cuda::valid_stream(stream)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (cpu_cuda::capturing(stream))
        return cpu_cuda::capture(stream, cudaGraphNodeTypeMemcpy, [=](cudaStream_t) {
            return cpu_cuda::copy_rows(dst, dpitch, src, spitch, width, height, kind, "cudaMemcpy2DAsync (a graph's node)");
        });
    return cpu_cuda::copy_rows(dst, dpitch, src, spitch, width, height, kind, "cudaMemcpy2DAsync", true, stream);
}
inline cudaError_t cudaMemset2D(void* p, size_t pitch, int value, size_t width, size_t height) {
    if (width > pitch) return cpu_cuda::texture_error(cudaErrorInvalidPitchValue, "cudaMemset2D", "width exceeds the pitch");
    for (size_t r = 0; r < height; r++)
        if (cudaError_t e = cpu_cuda::fill((char*)p + r * pitch, value, width, "cudaMemset2D")) return e;
    return cudaSuccess;
}
inline cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream) {
    if (!cpu_cuda::valid_stream(stream)) return cpu_cuda::set_error(cudaErrorInvalidResourceHandle);
    if (cpu_cuda::capturing(stream))
        return cpu_cuda::capture(stream, cudaGraphNodeTypeMemset,
                                 [=](cudaStream_t) { return cudaMemset2D(p, pitch, value, width, height); });
    return cudaMemset2D(p, pitch, value, width, height);  // (at once, as cudaMemsetAsync)
}

// ----------------------------------------------------------------------------
// Host side: CUDA arrays

inline cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, cudaChannelFormatKind f) {
    return {x, y, z, w, f};
}
inline cudaError_t cudaMallocArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, size_t width,
                                   size_t height, unsigned int flags) {
    if (!array || !desc) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *array = nullptr;
    const size_t elem = cpu_cuda::format_bytes(*desc);
    if (elem == 0)
        return cpu_cuda::texture_error(cudaErrorInvalidChannelDescriptor, "cudaMallocArray",
                                       "no CUDA array holds " + cpu_cuda::format_name(*desc) +
                                           " (1, 2 or 4 components of 8, 16 or 32 bits)");
    if (width == 0) return cpu_cuda::texture_error(cudaErrorInvalidValue, "cudaMallocArray", "width 0");
    auto* a = new cudaArray{*desc, width, height, flags, elem, nullptr};
    void* data = nullptr;
    if (cudaError_t e = cudaMalloc(&data, a->row_bytes() * a->rows())) {
        delete a;
        return e;
    }
    a->data = (char*)data;
    std::lock_guard<std::mutex> lock(cpu_cuda::arrays_mutex());
    cpu_cuda::live_arrays().insert(a);
    *array = a;
    return cudaSuccess;
}
inline cudaError_t cudaFreeArray(cudaArray_t array) {
    if (!array) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lock(cpu_cuda::arrays_mutex());
        if (!cpu_cuda::live_arrays().erase(array))
            return cpu_cuda::texture_error(cudaErrorInvalidValue, "cudaFreeArray", "not a live CUDA array");
    }
    cudaError_t e = cudaFree(array->data);  // (waits for queued work, as cudaFree)
    delete array;
    return e;
}
inline cudaError_t cudaArrayGetInfo(cudaChannelFormatDesc* desc, cudaExtent* extent, unsigned int* flags,
                                    cudaArray_t array) {
    if (!cpu_cuda::live_array(array))
        return cpu_cuda::texture_error(cudaErrorInvalidResourceHandle, "cudaArrayGetInfo", "not a live CUDA array");
    if (desc) *desc = array->desc;
    if (extent) *extent = {array->width, array->height, 0};
    if (flags) *flags = array->flags;
    return cudaSuccess;
}
inline cudaError_t cudaGetChannelDesc(cudaChannelFormatDesc* desc, cudaArray_const_t array) {
    if (!desc) return cpu_cuda::set_error(cudaErrorInvalidValue);
    if (!cpu_cuda::live_array(array))
        return cpu_cuda::texture_error(cudaErrorInvalidResourceHandle, "cudaGetChannelDesc", "not a live CUDA array");
    *desc = array->desc;
    return cudaSuccess;
}
// wOffset and width in bytes, hOffset and height in rows (the Runtime API's convention)
inline cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t w_offset, size_t h_offset, const void* src,
                                       size_t spitch, size_t width, size_t height, cudaMemcpyKind kind) {
    if (cudaError_t e = cpu_cuda::array_window(dst, w_offset, h_offset, width, height, "cudaMemcpy2DToArray")) return e;
    return cpu_cuda::copy_rows(dst->data + h_offset * dst->row_bytes() + w_offset, dst->row_bytes(), src, spitch,
                               width, height, kind, "cudaMemcpy2DToArray");
}
inline cudaError_t cudaMemcpy2DFromArray(void* dst, size_t dpitch, cudaArray_const_t src, size_t w_offset,
                                         size_t h_offset, size_t width, size_t height, cudaMemcpyKind kind) {
    if (cudaError_t e = cpu_cuda::array_window(src, w_offset, h_offset, width, height, "cudaMemcpy2DFromArray")) return e;
    return cpu_cuda::copy_rows(dst, dpitch, src->data + h_offset * src->row_bytes() + w_offset, src->row_bytes(),
                               width, height, kind, "cudaMemcpy2DFromArray");
}
// The older linear forms (deprecated since CUDA 10.1, still in teaching code): count bytes from
// (wOffset, hOffset) on, row after row
inline cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t w_offset, size_t h_offset, const void* src, size_t count,
                                     cudaMemcpyKind kind) {
    if (!dst || !cpu_cuda::live_array(dst))
        return cpu_cuda::texture_error(cudaErrorInvalidResourceHandle, "cudaMemcpyToArray", "not a live CUDA array");
    const size_t start = h_offset * dst->row_bytes() + w_offset, size = dst->row_bytes() * dst->rows();
    if (w_offset > dst->row_bytes() || start + count > size)
        return cpu_cuda::texture_error(cudaErrorInvalidValue, "cudaMemcpyToArray",
                                       std::to_string(count) + " bytes from (" + std::to_string(w_offset) + ", " +
                                           std::to_string(h_offset) + ") run past the array's " + std::to_string(size));
    return cpu_cuda::copy(dst->data + start, src, count, kind, "cudaMemcpyToArray");
}
inline cudaError_t cudaMemcpyFromArray(void* dst, cudaArray_const_t src, size_t w_offset, size_t h_offset,
                                       size_t count, cudaMemcpyKind kind) {
    if (!src || !cpu_cuda::live_array(src))
        return cpu_cuda::texture_error(cudaErrorInvalidResourceHandle, "cudaMemcpyFromArray", "not a live CUDA array");
    const size_t start = h_offset * src->row_bytes() + w_offset, size = src->row_bytes() * src->rows();
    if (w_offset > src->row_bytes() || start + count > size)
        return cpu_cuda::texture_error(cudaErrorInvalidValue, "cudaMemcpyFromArray",
                                       std::to_string(count) + " bytes from (" + std::to_string(w_offset) + ", " +
                                           std::to_string(h_offset) + ") run past the array's " + std::to_string(size));
    return cpu_cuda::copy(dst, src->data + start, count, kind, "cudaMemcpyFromArray");
}

// ----------------------------------------------------------------------------
// Host side: texture and surface objects

namespace cpu_cuda {
// Where a resource's texels are, checked: a live array, or device memory that holds them all
inline cudaError_t bind_resource(TextureObject& t, const cudaResourceDesc& r, const char* call) {
    switch (r.resType) {
        case cudaResourceTypeArray: {
            const cudaArray* a = r.res.array.array;
            if (!a || !live_array(a)) return texture_error(cudaErrorInvalidResourceHandle, call, "res.array.array is not a live CUDA array");
            t.base = a->data, t.pitch = a->row_bytes(), t.width = a->width, t.height = a->rows(), t.fmt = a->desc;
            return cudaSuccess;
        }
        case cudaResourceTypeLinear:
            t.base = (const char*)r.res.linear.devPtr, t.fmt = r.res.linear.desc;
            t.elem = format_bytes(t.fmt);
            if (t.elem == 0) break;
            t.width = r.res.linear.sizeInBytes / t.elem, t.pitch = r.res.linear.sizeInBytes;
            if (!check_range(t.base, r.res.linear.sizeInBytes, call, "res.linear.devPtr"))
                return set_error(cudaErrorInvalidValue);
            return cudaSuccess;
        case cudaResourceTypePitch2D: {
            const auto& p = r.res.pitch2D;
            t.base = (const char*)p.devPtr, t.fmt = p.desc, t.width = p.width, t.height = p.height, t.pitch = p.pitchInBytes;
            t.elem = format_bytes(t.fmt);
            if (t.elem == 0) break;
            // cudaDeviceProp::texturePitchAlignment: 32 bytes, for the start and the pitch
            if ((uintptr_t)p.devPtr % 32 || p.pitchInBytes % 32 || p.pitchInBytes < p.width * t.elem || !p.width || !p.height)
                return texture_error(cudaErrorInvalidValue, call,
                                     "res.pitch2D: pitch " + std::to_string(p.pitchInBytes) + " for a row of " +
                                         std::to_string(p.width * t.elem) +
                                         " bytes (the pitch and devPtr must be multiples of texturePitchAlignment, 32)");
            if (!check_range(t.base, (p.height - 1) * p.pitchInBytes + p.width * t.elem, call, "res.pitch2D.devPtr"))
                return set_error(cudaErrorInvalidValue);
            return cudaSuccess;
        }
        default:
            return texture_error(cudaErrorNotSupported, call, "mipmapped arrays are not supported on the CPU runtime");
    }
    return texture_error(cudaErrorInvalidChannelDescriptor, call, "no texture holds " + format_name(t.fmt));
}
inline unsigned long long make_object(TextureObject* t) {
    t->generation = memory().generation(t->base), t->checked = memory().frees();
    return texture_table().add(t);
}
inline cudaError_t destroy_object(unsigned long long handle, bool surface, const char* call) {
    if (!handle) return cudaSuccess;
    TextureObject* t = texture_table().at(handle);
    if (!t)
        return texture_error(cudaErrorInvalidValue, call, std::string("no ") + (surface ? "surface" : "texture") + " object was made with this handle");
    if (t->state != TextureObject::kLive || t->surface != surface)
        return texture_error(cudaErrorInvalidValue, call, std::string("not a live ") + (surface ? "surface" : "texture") + " object");
    settle();  // kernels still queued may read it
    t->state = TextureObject::kDead;  // (kept: a stale handle is then named, not read)
    return cudaSuccess;
}
}  // namespace cpu_cuda

inline cudaError_t cudaCreateTextureObject(cudaTextureObject_t* tex, const cudaResourceDesc* res,
                                           const cudaTextureDesc* desc, const cudaResourceViewDesc* view) {
    const char* call = "cudaCreateTextureObject";
    if (!tex || !res || !desc) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *tex = 0;
    if (view) return cpu_cuda::texture_error(cudaErrorNotSupported, call, "resource views are not supported on the CPU runtime");
    if (desc->sRGB) return cpu_cuda::texture_error(cudaErrorNotSupported, call, "sRGB textures are not supported on the CPU runtime");
    auto* t = new cpu_cuda::TextureObject;
    t->res = *res, t->desc = *desc;
    if (cudaError_t e = cpu_cuda::bind_resource(*t, *res, call)) {
        delete t;
        return e;
    }
    t->elem = cpu_cuda::format_bytes(t->fmt), t->channels = cpu_cuda::format_channels(t->fmt);
    // normalized-float reads apply to 8- and 16-bit integers (32-bit ones read as they are)
    t->normalized_read = desc->readMode == cudaReadModeNormalizedFloat && t->fmt.f != cudaChannelFormatKindFloat && t->fmt.x <= 16;
    if (desc->filterMode == cudaFilterModeLinear && !t->float_result()) {
        delete t;
        return cpu_cuda::texture_error(cudaErrorInvalidValue, call,
                                       "linear filtering needs a float result: a float format or cudaReadModeNormalizedFloat");
    }
    if (!(*tex = cpu_cuda::make_object(t))) {
        delete t;
        return cpu_cuda::texture_error(cudaErrorMemoryAllocation, call, "16,777,215 texture and surface objects made already");
    }
    return cudaSuccess;
}
inline cudaError_t cudaDestroyTextureObject(cudaTextureObject_t tex) {
    return cpu_cuda::destroy_object(tex, false, "cudaDestroyTextureObject");
}
inline cudaError_t cudaGetTextureObjectResourceDesc(cudaResourceDesc* res, cudaTextureObject_t tex) {
    const cpu_cuda::TextureObject* t = cpu_cuda::texture_table().at(tex);
    if (!res || !t || t->state != cpu_cuda::TextureObject::kLive || t->surface) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *res = t->res;
    return cudaSuccess;
}
inline cudaError_t cudaGetTextureObjectTextureDesc(cudaTextureDesc* desc, cudaTextureObject_t tex) {
    const cpu_cuda::TextureObject* t = cpu_cuda::texture_table().at(tex);
    if (!desc || !t || t->state != cpu_cuda::TextureObject::kLive || t->surface) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *desc = t->desc;
    return cudaSuccess;
}
// A surface is a CUDA array made with cudaArraySurfaceLoadStore (the Runtime API's condition)
inline cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t* surf, const cudaResourceDesc* res) {
    const char* call = "cudaCreateSurfaceObject";
    if (!surf || !res) return cpu_cuda::set_error(cudaErrorInvalidValue);
    *surf = 0;
    if (res->resType != cudaResourceTypeArray)
        return cpu_cuda::texture_error(cudaErrorInvalidValue, call, "a surface's resource must be a CUDA array");
    const cudaArray* a = res->res.array.array;
    if (a && cpu_cuda::live_array(a) && !(a->flags & cudaArraySurfaceLoadStore))
        return cpu_cuda::texture_error(cudaErrorInvalidValue, call, "the array was not made with cudaArraySurfaceLoadStore");
    auto* s = new cpu_cuda::TextureObject;
    s->surface = true, s->res = *res;
    if (cudaError_t e = cpu_cuda::bind_resource(*s, *res, call)) {
        delete s;
        return e;
    }
    s->elem = cpu_cuda::format_bytes(s->fmt), s->channels = cpu_cuda::format_channels(s->fmt);
    if (!(*surf = cpu_cuda::make_object(s))) {
        delete s;
        return cpu_cuda::texture_error(cudaErrorMemoryAllocation, call, "16,777,215 texture and surface objects made already");
    }
    return cudaSuccess;
}
inline cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t surf) {
    return cpu_cuda::destroy_object(surf, true, "cudaDestroySurfaceObject");
}
