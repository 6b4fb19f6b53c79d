// A host-only source file of the multi-file example (named in SOURCES): reference code of the
// kind a samples collection keeps beside its kernels. It defines a umin of its own, as host code
// may: nvcc shows CUDA's device function umin to .cu files only, and the CPU build must too.
#include <cuda_runtime.h>

unsigned int umin(unsigned int a, unsigned int b) { return a < b ? a : b; }

// the smallest of n values, on the host
unsigned int smallest_on_host(const unsigned int* v, int n) {
    unsigned int m = ~0u;
    for (int i = 0; i < n; i++) m = umin(m, v[i]);
    return m;
}
