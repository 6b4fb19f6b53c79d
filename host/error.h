// Errors: every failure the user can cause (bad option, missing or malformed file,
// impossible batch split) is reported as one line and a non-zero exit, never a crash.
// Code throws; main() catches, prints "error: <message>" and exits.
#pragma once
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>

// A problem with the input files or the numbers given: exit status 1.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// A malformed command line: exit status 2, like other Unix tools.
struct UsageError : Error {
    using Error::Error;
};
// A UsageError found in the command line alone, which every replica of a job is given: every rank
// meets it, at the same place, before any collective; one of them prints it (host/run.h).
struct CommandLineError : UsageError {
    using UsageError::UsageError;
};

inline std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string strf(const char* fmt, ...) {
    char buf[1024];  // most messages; a longer one (a sample's text) is formatted again at its size
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::string out = buf;
    if (n >= (int)sizeof buf) {
        out.resize((size_t)n + 1);
        vsnprintf(&out[0], out.size(), fmt, again);
        out.resize((size_t)n);
    }
    va_end(again);
    return out;
}

// 1234567 -> "1,234,567": token counts are easier to read with separators.
inline std::string with_commas(long long n) {
    // the magnitude in unsigned arithmetic: -n overflows for the most negative long long
    std::string digits = std::to_string(n < 0 ? 0ull - (unsigned long long)n : (unsigned long long)n), out;
    for (size_t i = 0; i < digits.size(); i++) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return n < 0 ? "-" + out : out;
}

// a·b·c…, exact in 64-bit arithmetic, or -1 when the product does not fit (or a factor is
// negative). Counts read from a file or the command line are multiplied through here
// before anything is allocated or narrowed to int.
inline long long checked_product(std::initializer_list<long long> factors) {
    long long p = 1;
    for (long long f : factors)
        if (f < 0 || __builtin_mul_overflow(p, f, &p)) return -1;
    return p;
}

// 3460300 -> "3.3 MiB"
inline std::string format_bytes(double bytes) {
    const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (bytes >= 1024 && u < 6) bytes /= 1024, u++;
    return u == 0 ? strf("%.0f bytes", bytes) : strf("%.1f %s", bytes, units[u]);
}

// The program's name as error lines begin with it: argv[0] without its directory.
inline const char* program_name(const char* argv0) {
    const char* slash = strrchr(argv0, '/');
    return slash ? slash + 1 : argv0;
}
