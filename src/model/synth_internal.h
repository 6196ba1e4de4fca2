// src/model/synth_internal.h - what the synthetic-model writers share: the seeded generator,
// random tensor contents of a given spread, and the metadata every synthetic file carries.
#pragma once

#include "tandem/gguf.h"
#include "tandem/synth.h"

#include <cstdint>
#include <cstring>
#include <string>

namespace tandem::synth_detail {

// splitmix64: a tiny, fast, well-mixed generator; one stream per tensor so the file does not
// depend on the thread count.
struct rng64 {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
    void fill(uint8_t *dst, size_t n) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const uint64_t r = next();
            std::memcpy(dst + i, &r, 8);
        }
        for (; i < n; ++i) dst[i] = uint8_t(next());
    }
};

uint64_t name_hash(const std::string &s, uint64_t seed);

// Fills n_elems of `type` with random values of mean ~0 and standard deviation ~std.
void fill_random(ggml_type type, uint8_t *dst, int64_t n_elems, float std, rng64 &rng);

// Adds a tensor of random contents (std; `mean` added to f32 values, for norm weights ~1).
void add_random(gguf_writer &w, const std::string &name, ggml_type t, std::vector<int64_t> ne, float std, uint64_t seed,
                float mean = 0.0f);

// general.* keys (name, file type, quantization version) and the synthetic tokenizer.
void write_common(gguf_writer &w, const synth_options &options);

// The deepseek2 writer (synth_deepseek2.cpp).
std::vector<std::string> write_deepseek2(const synth_options &options, const std::string &path);

}  // namespace tandem::synth_detail
