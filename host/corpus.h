// The built-in corpus: training data that needs no download.
//
// Sentences come from a tiny random grammar, one per line, as byte-level tokens
// (vocabulary 256), e.g. "the happy frogs pull the lamp." or "cleo sailed to the castle
// at dawn." Subject and verb agree in number, so a model must learn a dependency across
// words, not only spelling. Because every sentence parses one way only, the entropy of
// the text is known exactly: H(sentence) / E[bytes per sentence]. That is the loss a
// perfect model would reach, printed at start so the reader can see how close training gets.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rng.h"

namespace corpus {

using Words = std::vector<std::string>;
const Words ADJ = {"red", "small", "old", "happy", "quiet", "brave", "green", "lazy"};
const Words NOUN = {"cat", "dog", "bird", "frog", "girl", "farmer", "king", "robot"};
const Words VERB = {"see", "help", "like", "find", "call", "meet", "greet", "pull"};
const Words THING = {"apple", "river", "house", "tree", "ball", "hill", "lamp", "boat"};
const Words NAME = {"anna", "ben", "cleo", "dan", "eva", "finn", "gus", "hana"};
const Words WENT = {"went", "ran", "walked", "sailed"};
const Words PLACE = {"market", "forest", "castle", "harbor", "school", "garden", "bridge", "village"};
const Words WHEN = {"today", "at dawn", "at night", "yesterday"};

// A template is a sequence of parts: literal text (words == nullptr) or a uniform choice.
struct Part {
    const char* text;
    const Words* words;
};
struct Template {
    double probability;
    std::vector<Part> parts;
};
inline const std::vector<Template>& templates() {
    static const std::vector<Template> t = {
        // singular subject: the verb takes an "s"
        {0.25, {{"the ", nullptr}, {"", &ADJ}, {" ", nullptr}, {"", &NOUN}, {" ", nullptr}, {"", &VERB},
                {"s the ", nullptr}, {"", &THING}, {".\n", nullptr}}},
        // plural subject: the noun takes the "s"
        {0.25, {{"the ", nullptr}, {"", &ADJ}, {" ", nullptr}, {"", &NOUN}, {"s ", nullptr}, {"", &VERB},
                {" the ", nullptr}, {"", &THING}, {".\n", nullptr}}},
        {0.50, {{"", &NAME}, {" ", nullptr}, {"", &WENT}, {" to the ", nullptr}, {"", &PLACE}, {" ", nullptr},
                {"", &WHEN}, {".\n", nullptr}}},
    };
    return t;
}

inline std::string sentence(Rng& rng) {
    double u = (rng.next_u64() >> 11) * (1.0 / 9007199254740992.0), acc = 0;
    const auto& all = templates();
    const Template* t = &all.back();
    for (const Template& cand : all)
        if (u < (acc += cand.probability)) {
            t = &cand;
            break;
        }
    std::string s;
    for (const Part& p : t->parts) s += p.words ? (*p.words)[rng.below(p.words->size())] : p.text;
    return s;
}

// n byte tokens of the corpus; different seeds give the train and validation splits.
inline std::vector<uint16_t> generate(size_t n, uint64_t seed) {
    Rng rng(seed);
    std::vector<uint16_t> tokens;
    tokens.reserve(n + 64);
    while (tokens.size() < n)
        for (unsigned char c : sentence(rng)) tokens.push_back(c);
    tokens.resize(n);
    return tokens;
}

// Entropy of the text in nats per byte token: H(sentence) / E[sentence length].
inline double entropy_per_token() {
    double h = 0, len = 0;
    for (const Template& t : templates()) {
        h -= t.probability * std::log(t.probability);
        for (const Part& p : t.parts) {
            if (!p.words) {
                len += t.probability * std::string(p.text).size();
                continue;
            }
            double mean = 0;
            for (const std::string& w : *p.words) mean += w.size();
            len += t.probability * mean / p.words->size();
            h += t.probability * std::log((double)p.words->size());
        }
    }
    return h / len;
}

}  // namespace corpus
