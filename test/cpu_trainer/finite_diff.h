// What the CPU trainer's doctest suites (trainer.cpp, llama.cpp) compare with: double vectors,
// the normalised error of a float result against one, and central finite differences.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

using Vec = std::vector<double>;

inline Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// ‖ours − ref‖ / ‖ref‖; NaN when anything is NaN, which fails every "<=" check.
inline double norm_error(const std::vector<float>& ours, const Vec& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) num += (ours[i] - ref[i]) * (ours[i] - ref[i]), den += ref[i] * ref[i];
    return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// Gradient of f with respect to every element of x, by central differences in double.
// h = 1e-5 balances truncation (~h²·f''' ≈ 1e-10) against rounding (~1e-16/h ≈ 1e-11).
inline Vec finite_diff(const std::function<double()>& f, Vec& x, double h = 1e-5) {
    Vec g(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        double keep = x[i];
        x[i] = keep + h;
        double up = f();
        x[i] = keep - h;
        double down = f();
        x[i] = keep;
        g[i] = (up - down) / (2 * h);
    }
    return g;
}
