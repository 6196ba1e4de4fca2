// tests/kernels/test_cuda_logits_rules.cpp - cuda/logits_rules against its host twin,
// row_rules_apply: bitwise the same rows for every mix of adjustments and masks, on whole rows and
// on a shard of the head's columns (a tensor-parallel device's), with NaN, infinities, zeros and
// ties in the logits; rows without rules keep their bits; rows are independent of each other.
#include "cuda/logits_rules.h"
#include "gpu_test_util.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

using namespace tandem;
using namespace tandem::test;

namespace {

// One row's rules kept on the host (the spans of row_rules point into these).
struct host_rules {
    std::vector<token_adjust> adjust;
    std::vector<uint32_t> allowed;
    row_rules view() const { return {adjust, allowed}; }
};

// kind 0: none; 1: adjustments only; 2: a mask only; 3: both (some adjusted tokens masked).
host_rules random_rules(std::mt19937_64 &rng, int32_t n_vocab, int kind) {
    host_rules r;
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    if (kind == 1 || kind == 3) {
        const float p = u(rng) < 0.5f ? 0.01f : 0.3f;
        for (int32_t id = 0; id < n_vocab; ++id) {
            if (u(rng) >= p) continue;
            token_adjust a;
            a.id = id;
            a.bias = u(rng) < 0.3f ? (u(rng) < 0.5f ? -100.0f : 100.0f) : (u(rng) - 0.5f) * 8.0f;
            a.repeat = u(rng) < 0.5f ? 1.0f : 1.0f + u(rng);
            a.subtract = u(rng) < 0.5f ? 0.0f : float(1 + rng() % 5) * 0.25f + 1.5f;
            r.adjust.push_back(a);
        }
        if (r.adjust.empty()) r.adjust.push_back({n_vocab - 1, 1.0f, 1.5f, 0.5f});
    }
    if (kind == 2 || kind == 3) {
        r.allowed.assign(size_t(n_vocab + 31) / 32, 0u);
        const float p = u(rng) < 0.3f ? 0.002f : 0.5f;  // a grammar's few tokens, or half the vocabulary
        for (int32_t id = 0; id < n_vocab; ++id)
            if (u(rng) < p) r.allowed[size_t(id) / 32] |= 1u << (id % 32);
        r.allowed[0] |= 1u;  // never empty
    }
    return r;
}

// Logits with the values that test the formula's branches: NaN, both infinities, +0 and -0,
// exact ties, and ordinary values of both signs.
std::vector<float> tricky_logits(std::mt19937_64 &rng, size_t n) {
    std::vector<float> v = random_floats(rng, n, 4.0f);
    for (size_t i = 0; i < n; ++i) {
        switch (rng() % 40) {
        case 0: v[i] = std::numeric_limits<float>::quiet_NaN(); break;
        case 1: v[i] = std::numeric_limits<float>::infinity(); break;
        case 2: v[i] = -std::numeric_limits<float>::infinity(); break;
        case 3: v[i] = 0.0f; break;
        case 4: v[i] = -0.0f; break;
        case 5: v[i] = 1.25f; break;
        default: break;
        }
    }
    return v;
}

// The rows [n_rows][n_vocab] with rules, through the kernel over the columns [first, first +
// n_cols) of each row (a device's shard of the head).
std::vector<float> run_kernel(const std::vector<float> &logits, int32_t n_rows, int32_t n_vocab, int32_t first, int32_t n_cols,
                              const std::vector<host_rules> &rules) {
    std::vector<float> shard;
    for (int32_t r = 0; r < n_rows; ++r)
        shard.insert(shard.end(), logits.begin() + std::ptrdiff_t(size_t(r) * size_t(n_vocab) + size_t(first)),
                     logits.begin() + std::ptrdiff_t(size_t(r) * size_t(n_vocab) + size_t(first + n_cols)));
    // The rules packed as the engine packs them: one buffer, descriptors pointing into it.
    std::vector<uint8_t> pool;
    std::vector<std::pair<size_t, size_t>> at;
    for (const host_rules &h : rules) {
        const size_t a = pool.size();
        pool.resize(a + h.adjust.size() * sizeof(token_adjust));
        if (!h.adjust.empty()) std::memcpy(pool.data() + a, h.adjust.data(), h.adjust.size() * sizeof(token_adjust));
        pool.resize((pool.size() + 15) / 16 * 16);
        const size_t m = pool.size();
        pool.resize(m + h.allowed.size() * sizeof(uint32_t));
        if (!h.allowed.empty()) std::memcpy(pool.data() + m, h.allowed.data(), h.allowed.size() * sizeof(uint32_t));
        pool.resize((pool.size() + 15) / 16 * 16);
        at.emplace_back(a, m);
    }
    device_buffer<uint8_t> d_pool(pool);
    std::vector<cuda::logits_rules_row> desc(rules.size());
    for (size_t i = 0; i < rules.size(); ++i) {
        if (!rules[i].adjust.empty()) desc[i].adjust = reinterpret_cast<const token_adjust *>(d_pool.ptr + at[i].first);
        if (!rules[i].allowed.empty()) desc[i].allowed = reinterpret_cast<const uint32_t *>(d_pool.ptr + at[i].second);
        desc[i].n_adjust = int32_t(rules[i].adjust.size());
    }
    device_buffer<cuda::logits_rules_row> d_desc(desc);
    device_buffer<float> d_logits(shard);
    cuda::logits_rules({.logits = d_logits.ptr, .n_rows = n_rows, .n_cols = n_cols, .first_id = first, .rules = d_desc.ptr}, nullptr);
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
    return d_logits.download();
}

// The first differing column of row r (-1: bitwise equal), kernel shard against the twin's row.
int64_t first_difference(const std::vector<float> &got, const std::vector<float> &want, int32_t r, int32_t n_vocab, int32_t first,
                         int32_t n_cols) {
    for (int32_t c = 0; c < n_cols; ++c) {
        const float a = got[size_t(r) * size_t(n_cols) + size_t(c)], b = want[size_t(r) * size_t(n_vocab) + size_t(first + c)];
        if (std::memcmp(&a, &b, sizeof a) != 0) return c;
    }
    return -1;
}

void check_shape(uint64_t seed, int32_t n_rows, int32_t n_vocab, int32_t first, int32_t n_cols) {
    std::mt19937_64 rng(seed);
    const std::vector<float> logits = tricky_logits(rng, size_t(n_rows) * size_t(n_vocab));
    std::vector<host_rules> rules;
    for (int32_t r = 0; r < n_rows; ++r) rules.push_back(random_rules(rng, n_vocab, int(rng() % 4)));
    std::vector<float> want = logits;
    for (int32_t r = 0; r < n_rows; ++r)
        row_rules_apply(rules[size_t(r)].view(), {want.data() + size_t(r) * size_t(n_vocab), size_t(n_vocab)});
    const std::vector<float> got = run_kernel(logits, n_rows, n_vocab, first, n_cols, rules);
    for (int32_t r = 0; r < n_rows; ++r) {
        const int64_t c = first_difference(got, want, r, n_vocab, first, n_cols);
        INFO("seed " << seed << ", " << n_rows << " rows of " << n_vocab << " tokens, columns [" << first << ", "
                     << first + n_cols << "), row " << r << " (" << rules[size_t(r)].adjust.size() << " adjustments, "
                     << (rules[size_t(r)].allowed.empty() ? "no mask" : "a mask") << "), first differing column " << c);
        if (c >= 0) {
            const size_t i = size_t(r) * size_t(n_vocab) + size_t(first + c);
            UNSCOPED_INFO("logit " << logits[i] << ": kernel " << got[size_t(r) * size_t(n_cols) + size_t(c)] << ", host twin " << want[i]);
        }
        CHECK(c == -1);
    }
}

}  // namespace

TEST_CASE("logits_rules: bitwise the host twin on whole rows of many shapes", "[gpu][kernels][rules]") {
    if (!gpu_present()) return;
    uint64_t seed = 1;
    for (int32_t n_rows : {1, 3, 16, 64})
        for (int32_t n_vocab : {1, 31, 32, 33, 1000, 2048, 2049, 151936}) {
            if (n_vocab > 4096 && n_rows > 16) continue;  // the largest rows: 16 of them are enough
            check_shape(seed++, n_rows, n_vocab, 0, n_vocab);
        }
}

TEST_CASE("logits_rules: a shard of the head's columns applies the rules of its own ids", "[gpu][kernels][rules]") {
    if (!gpu_present()) return;
    // A tensor-parallel pair's halves of an odd vocabulary, and a shard not aligned to a word.
    check_shape(101, 5, 151937, 0, 75969);
    check_shape(102, 5, 151937, 75969, 151937 - 75969);
    check_shape(103, 7, 5000, 33, 1234);
}

TEST_CASE("logits_rules: rows without rules keep their bits beside ruled rows", "[gpu][kernels][rules]") {
    if (!gpu_present()) return;
    std::mt19937_64 rng(7);
    const int32_t n_rows = 9, n_vocab = 40000;
    const std::vector<float> logits = tricky_logits(rng, size_t(n_rows) * size_t(n_vocab));
    std::vector<host_rules> rules(size_t(n_rows));
    for (int32_t r = 1; r < n_rows; r += 2) rules[size_t(r)] = random_rules(rng, n_vocab, 3);
    const std::vector<float> got = run_kernel(logits, n_rows, n_vocab, 0, n_vocab, rules);
    for (int32_t r = 0; r < n_rows; r += 2) {
        INFO("row " << r << " has no rules");
        CHECK(std::memcmp(got.data() + size_t(r) * size_t(n_vocab), logits.data() + size_t(r) * size_t(n_vocab),
                          size_t(n_vocab) * sizeof(float)) == 0);
    }
    // A ruled row alone gives its bits in the batch.
    const std::vector<host_rules> one{rules[3]};
    const std::vector<float> row3(logits.begin() + 3 * n_vocab, logits.begin() + 4 * n_vocab);
    const std::vector<float> alone = run_kernel(row3, 1, n_vocab, 0, n_vocab, one);
    CHECK(std::memcmp(alone.data(), got.data() + 3 * size_t(n_vocab), size_t(n_vocab) * sizeof(float)) == 0);
}
