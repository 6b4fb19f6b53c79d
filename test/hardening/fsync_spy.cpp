// An LD_PRELOAD library for test/hardening/crash_safety.sh: passes every fsync() through and
// appends the path of each directory it flushes to the file named by FSYNC_SPY_LOG, so the
// test can see that a checkpoint's rename is made durable.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

extern "C" int fsync(int fd) {
    static auto real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    struct stat st;
    const char* log = getenv("FSYNC_SPY_LOG");
    if (log && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        char link[64], path[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, path, sizeof path - 1);
        if (FILE* f = n > 0 ? fopen(log, "a") : nullptr) {
            fprintf(f, "%.*s\n", (int)n, path);
            fclose(f);
        }
    }
    return real_fsync(fd);
}
