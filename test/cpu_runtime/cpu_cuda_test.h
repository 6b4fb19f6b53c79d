// Helpers shared by the CPU runtime's own tests (execution.cu, kernel_features.cu,
// wmma.cu, cublas.cpp): device memory that frees itself, and stderr captured
// while a call reports an error, in this process or in a child that may die of it, and the
// source line that holds a given text.
// Built with the runtime (g++ -include cpu_cuda/cuda_cpu.h) and doctest.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

// A device copy of a host vector, or n uninitialized elements; freed at scope end.
template <class T>
struct Dev {
    T* p = nullptr;
    size_t n;
    explicit Dev(size_t n) : n(n) { REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess); }
    explicit Dev(const std::vector<T>& h) : Dev(h.size()) {
        REQUIRE(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
    }
    ~Dev() { cudaFree(p); }
    Dev& fill_nan() {  // 0xFF bytes: NaN in float, bf16 and fp16
        REQUIRE(cudaMemset(p, 0xFF, n * sizeof(T)) == cudaSuccess);
        return *this;
    }
    Dev(const Dev&) = delete;
    Dev& operator=(const Dev&) = delete;
    std::vector<T> host() const {
        std::vector<T> h(n);
        REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
        return h;
    }
};

// Runs f with stderr going to a string, which it returns.
inline std::string capture_stderr(const std::function<void()>& f) {
    fflush(stderr);
    FILE* tmp = tmpfile();
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    f();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::string text;
    rewind(tmp);
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, tmp)) text.append(buf, n);
    fclose(tmp);
    return text;
}

// Runs f in a child process; returns its wait status and what it wrote to stderr.
inline int in_child(const std::function<void()>& f, std::string* err) {
    fflush(stdout), fflush(stderr);
    int fd[2];
    REQUIRE(pipe(fd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        f();
        _exit(0);
    }
    close(fd[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(fd[0], buf, sizeof buf)) > 0) err->append(buf, (size_t)n);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The first line of the calling test's source file that holds `text`, for messages that name a
// line (the file is read from where the tests run, the checkout's top).
inline int line_of(const std::string& text, const char* file = __builtin_FILE()) {
    FILE* f = fopen(file, "r");
    REQUIRE(f);
    char buf[1024];
    int line = 0, found = 0;
    while (!found && fgets(buf, sizeof buf, f)) line++, found = strstr(buf, text.c_str()) ? line : 0;
    fclose(f);
    REQUIRE(found > 0);
    return found;
}
