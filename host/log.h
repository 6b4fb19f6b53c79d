// Logging: the per-step console line and a machine-readable JSON Lines file with the same
// fields (one object per line: "config", "train", "val", "hellaswag" and "sample" records), which
// scripts/plot.py reads.
#pragma once
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "error.h"
#include "file.h"  // file_kind; open, fstat, fcntl

// "1:02:03" or "4:05"
inline std::string format_duration(double seconds) {
    if (!(seconds >= 0) || seconds > 1e8) return "?";
    long s = (long)(seconds + 0.5);
    return s >= 3600 ? strf("%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60) : strf("%ld:%02ld", s / 60, s % 60);
}

// Escapes text for a JSON string (samples may hold any byte).
inline std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') out += '\\', out += (char)c;
        else if (c == '\n') out += "\\n";
        else if (c < 0x20 || c >= 0x7f) out += strf("\\u%04x", c);  // bytes as code points; keeps the file ASCII
        else out += (char)c;
    }
    return out + "\"";
}

class RunLog {
public:
    RunLog() = default;
    RunLog(const RunLog&) = delete;
    RunLog& operator=(const RunLog&) = delete;
    ~RunLog() {
        if (f_) fclose(f_);
    }
    // append = true when resuming, so the log of the earlier part is kept
    // A log that is not a regular file is refused: a named pipe would block the run until a
    // reader comes (opened without blocking, it fails at once when none is there).
    void open(const std::string& path, bool append) {
        int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
        struct stat st;
        if (fd < 0) {  // (a named pipe without a reader: ENXIO, which says little)
            int err = errno;
            if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
                throw Error(strf("log file '%s' is %s, not a regular file", path.c_str(), file_kind(st.st_mode)));
            throw Error(strf("cannot write log file '%s': %s", path.c_str(), strerror(err)));
        }
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            throw Error(strf("log file '%s' is %s, not a regular file", path.c_str(), file_kind(st.st_mode)));
        }
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        f_ = fdopen(fd, append ? "a" : "w");
        if (!f_) {
            close(fd);
            throw Error(strf("cannot write log file '%s': %s", path.c_str(), strerror(errno)));
        }
    }
    void write(const std::string& json_object) {
        if (!f_) return;
        fprintf(f_, "%s\n", json_object.c_str());
        fflush(f_);  // a crash loses at most the line being written
    }
    // sync_ms: the part of ms spent in the gradient sync (host/comm.h); flops_per_s: model
    // FLOPs per second of one replica (host/cost.h); mfu: their fraction of the device's peak,
    // < 0 when no peak was given (then it is left out); extra: more fields, each after a comma
    // (the noise scale's, host/noise.h)
    void train(int step, int steps, long long tokens, double loss, float lr, float norm, double ms, double sync_ms,
               double tps, double flops_per_s, double mfu, const std::string& extra = "") {
        write(strf("{\"type\":\"train\",\"step\":%d,\"steps\":%d,\"tokens\":%lld,\"loss\":%.6f,\"lr\":%.6e,"
                   "\"grad_norm\":%.6f,\"ms\":%.3f,\"sync_ms\":%.3f,\"tokens_per_s\":%.1f,\"flops_per_s\":%.4e%s%s}",
                   step, steps, tokens, loss, lr, norm, ms, sync_ms, tps, flops_per_s,
                   mfu >= 0 ? strf(",\"mfu\":%.5f", mfu).c_str() : "", extra.c_str()));
    }
    void val(int step, long long tokens, double val_loss) {
        write(strf("{\"type\":\"val\",\"step\":%d,\"tokens\":%lld,\"val_loss\":%.6f}", step, tokens, val_loss));
    }
    void hellaswag(int step, long long tokens, double acc_norm, double acc, long long examples) {
        write(strf("{\"type\":\"hellaswag\",\"step\":%d,\"tokens\":%lld,\"acc_norm\":%.6f,\"acc\":%.6f,"
                   "\"examples\":%lld}",
                   step, tokens, acc_norm, acc, examples));
    }
    // the prompt and the sampled continuation, as exact bytes
    void sample(int step, const std::string& prompt, const std::string& text) {
        write(strf("{\"type\":\"sample\",\"step\":%d,\"prompt\":", step) + json_string(prompt) +
              ",\"text\":" + json_string(text) + "}");
    }

private:
    FILE* f_ = nullptr;
};
