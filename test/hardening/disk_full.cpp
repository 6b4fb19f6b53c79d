// An LD_PRELOAD library for test/hardening/crash_safety.sh: a disk that fills up, without mount
// or root. fwrite() to files under the directory DISK_FULL_DIR (a path as /proc/self/fd
// shows it) succeeds until DISK_FULL_FREE bytes have been written there in all; after that it
// writes nothing and fails with ENOSPC, as a full disk does. Everything else passes through.
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" size_t fwrite(const void* data, size_t size, size_t count, FILE* f) {
    using Fwrite = size_t (*)(const void*, size_t, size_t, FILE*);
    static Fwrite real_fwrite = (Fwrite)dlsym(RTLD_NEXT, "fwrite");
    static const char* dir = getenv("DISK_FULL_DIR");
    static long long free_bytes = getenv("DISK_FULL_FREE") ? atoll(getenv("DISK_FULL_FREE")) : -1;
    if (dir && free_bytes >= 0) {
        char link[64], path[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fileno(f));
        ssize_t n = readlink(link, path, sizeof path - 1);
        size_t dir_len = strlen(dir);
        if (n > (ssize_t)dir_len && !strncmp(path, dir, dir_len) && path[dir_len] == '/') {
            long long bytes = (long long)(size * count);
            if (bytes > free_bytes) {
                free_bytes = 0;
                errno = ENOSPC;
                return 0;
            }
            free_bytes -= bytes;
        }
    }
    return real_fwrite(data, size, count, f);
}
