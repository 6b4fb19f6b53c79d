// A small deterministic random number generator (SplitMix64). The whole state is one
// uint64, so it is trivially saved in a checkpoint and identical on every platform,
// which the bit-exact resume test and the replicas' shared shuffling rely on.
#pragma once
#include <cmath>
#include <cstdint>

struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed = 0) : state(seed) {}

    uint64_t next_u64() {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    // uniform in [0, 1) with 24 random bits, exactly representable in float
    float uniform() { return (next_u64() >> 40) * (1.0f / 16777216.0f); }
    // uniform integer in [0, n)
    uint64_t below(uint64_t n) { return next_u64() % n; }
    // standard normal (Box-Muller); computed in double so init is the same everywhere
    double normal() {
        double u1 = ((next_u64() >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0, 1]
        double u2 = (next_u64() >> 11) * (1.0 / 9007199254740992.0);          // [0, 1)
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
};

// Mix several integers into one seed, so that (seed, epoch, shard) give unrelated streams.
inline uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0) {
    Rng r(a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) ^ (c * 0xd6e8feb86659fd93ull));
    return r.next_u64();
}
