// Files: opening inputs with checks, and writing outputs so that a crash never leaves a
// half-written file under the real name.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "error.h"

// What a file that is not a regular one is, for an error line ("a named pipe (FIFO)").
inline const char* file_kind(mode_t mode) {
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a named pipe (FIFO)" : S_ISSOCK(mode) ? "a socket"
         : S_ISCHR(mode) || S_ISBLK(mode) ? "a device" : "not a regular file";
}

// An input file, open for reading, with its size. The errors name the path and what the
// file should have been ("model file", "token shard"); anything but a regular file is
// refused here: a directory or a device gives nonsense sizes further on, and a named pipe
// blocks its reader until a writer comes, perhaps never. It is opened without blocking
// (O_NONBLOCK: opening a FIFO waits for a writer otherwise), checked, then read as usual.
class InputFile {
public:
    InputFile(const std::string& path, const char* what) : path_(path) {
        int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) throw Error(strf("cannot open %s '%s': %s", what, path.c_str(), strerror(errno)));
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            throw Error(strf("'%s' is %s, not a %s", path.c_str(), file_kind(st.st_mode), what));
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        f_ = fdopen(fd, "rb");
        if (!f_) {
            close(fd);
            throw Error(strf("cannot open %s '%s': %s", what, path.c_str(), strerror(errno)));
        }
        size_ = st.st_size;
    }
    ~InputFile() { fclose(f_); }
    InputFile(const InputFile&) = delete;
    InputFile& operator=(const InputFile&) = delete;

    long long size() const { return size_; }
    const std::string& path() const { return path_; }
    // Reads exactly `bytes` from the current position; false when the file ends first.
    bool read(void* dst, size_t bytes) { return fread(dst, 1, bytes, f_) == bytes; }
    void seek(long long offset) { fseeko(f_, offset, SEEK_SET); }

private:
    std::string path_;
    FILE* f_ = nullptr;
    long long size_ = 0;
};

inline bool file_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

inline std::string parent_dir(const std::string& path) {
    size_t slash = path.rfind('/');
    return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// Makes a rename in `dir` durable: until the directory itself is flushed, a power loss can
// bring back the old entry (or none) even though the file's data were synced.
inline void sync_dir(const std::string& dir) {
    int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    bool ok = fd >= 0 && (fsync(fd) == 0 || errno == EINVAL);  // EINVAL: the filesystem cannot sync directories
    if (fd >= 0) close(fd);
    if (!ok) throw Error(strf("could not flush directory '%s' to disk: %s", dir.c_str(), strerror(errno)));
}

// Writes blocks of bytes to path: first to "<path>.tmp", flushed to disk, then renamed over
// path and the directory flushed. An interrupted write leaves the old file untouched.
inline void write_file_atomic(const std::string& path, const std::vector<std::pair<const void*, size_t>>& blocks) {
    std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) throw Error(strf("cannot create '%s': %s", tmp.c_str(), strerror(errno)));
    bool ok = true;
    for (const auto& b : blocks) ok = ok && fwrite(b.first, 1, b.second, f) == b.second;
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = ok ? 0 : errno;  // the first failure's reason, before fclose can change errno
    if (fclose(f) != 0 && ok) ok = false, err = errno;
    if (!ok) {
        remove(tmp.c_str());
        throw Error(strf("could not write '%s': %s; the previous checkpoint is untouched", tmp.c_str(),
                         err ? strerror(err) : "short write"));
    }
    if (rename(tmp.c_str(), path.c_str()) != 0) {
        err = errno;
        remove(tmp.c_str());
        throw Error(strf("could not rename '%s' to '%s': %s", tmp.c_str(), path.c_str(), strerror(err)));
    }
    sync_dir(parent_dir(path));
}

// Creates dir and the directories above it that are missing (out/r1 on a fresh checkout).
inline void make_dir(const std::string& dir) {
    if (dir.empty()) return;
    struct stat st;
    if (stat(dir.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode)) throw Error("--out-dir '" + dir + "' exists and is not a directory");
        return;
    }
    size_t slash = dir.find_last_of('/', dir.find_last_not_of('/'));
    if (slash != std::string::npos && slash > 0) make_dir(dir.substr(0, slash));
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)  // (another replica may have made it)
        throw Error(strf("cannot create directory '%s': %s", dir.c_str(), strerror(errno)));
}
