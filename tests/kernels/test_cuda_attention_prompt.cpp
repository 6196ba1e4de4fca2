// tests/kernels/test_cuda_attention_prompt.cpp - prompt attention on tensor cores
// (cuda/attention_prompt.h) against the CPU twin cpu::attention on seeded random caches: prompt
// chunks of 1, 17, 64 and 300 rows at tile and non-tile starts, several slots in one launch,
// interleaved slots, padding rows; a row's output bitwise independent of the other rows of the
// launch and of its block shape (four warps, or eight from 512 rows); every cache type (floats,
// halves on the f16 mma path, q8_0 blocks dequantized into the float path); and a hidden [.bench]
// case timing a 2,048-token prompt.
#include "gpu_test_util.h"
#include "kv_cache_test_util.h"

#include "cuda/attention_prompt.h"
#include "src/cpu/cpu_ops.h"
#include "tandem/quant.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

using namespace tandem;
using tandem::test::device_buffer;
using tandem::test::rel_err;
using tandem::test::tolerance;
using tandem::test::cache_elem;

namespace {

struct shape {
    int32_t n_head, n_head_kv, d_head, n_ctx;
};

// The rows of one launch: slot (< 0: padding) and position of each, and its query.
struct row_set {
    std::vector<int32_t> slots, pos;
    std::vector<float> q;  // [n_rows][n_head][d_head]
    int32_t size() const { return int32_t(slots.size()); }
};

// One layer's caches for n_slots slots, on the host and the device in the cache's type (the host
// keeps the values the cache holds as floats for the CPU twin).
struct layer_cache {
    shape sh;
    int32_t n_slots;
    cache_elem elem;
    std::vector<float> k, v;          // [n_slots][n_ctx][n_head_kv][d_head]
    std::vector<uint8_t> bk, bv;      // the same in the cache's layout
    device_buffer<uint8_t> dk, dv;
    layer_cache(std::mt19937_64 &rng, shape s, int32_t slots, cache_elem e = cache_elem::f32)
        : sh(s), n_slots(slots), elem(e),
          k(test::cache_round(test::random_floats(rng, size_t(slots) * s.n_ctx * s.n_head_kv * s.d_head), e)),
          v(test::cache_round(test::random_floats(rng, k.size()), e)), bk(test::cache_encode(k, e)), bv(test::cache_encode(v, e)),
          dk(bk), dv(bv) {}
    size_t q_dim() const { return size_t(sh.n_head) * sh.d_head; }
    size_t kv_dim() const { return size_t(sh.n_head_kv) * sh.d_head; }
};

// Appends rows of `slot` at positions start, start + step, ... (len rows), queries drawn from rng.
void add_rows(row_set &rs, std::mt19937_64 &rng, const layer_cache &c, int32_t slot, int32_t start, int32_t len,
              int32_t step = 1) {
    for (int32_t i = 0; i < len; ++i) {
        rs.slots.push_back(slot);
        rs.pos.push_back(slot < 0 ? 0 : start + i * step);
        const auto q = test::random_floats(rng, c.q_dim(), 2.0f);
        rs.q.insert(rs.q.end(), q.begin(), q.end());
    }
}

cuda::attention_args gpu_args(const layer_cache &c, const float *q, const int32_t *slots, const int32_t *pos, float *out,
                              int32_t n_rows) {
    cuda::attention_args a;
    a.q = q;
    a.k_cache = c.dk.ptr;
    a.v_cache = c.dv.ptr;
    test::cache_flags(a, c.elem);
    a.slots = slots;
    a.positions = pos;
    a.out = out;
    a.n_rows = n_rows;
    a.n_head = c.sh.n_head;
    a.n_head_kv = c.sh.n_head_kv;
    a.d_head = c.sh.d_head;
    a.n_ctx = c.sh.n_ctx;
    a.scale = 1.0f / std::sqrt(float(c.sh.d_head));
    return a;
}

// attention_prompt over all rows of rs in one launch; out poisoned first. `one_by_one`: one launch
// per row instead (n_rows 1, pointers offset). Shapes that fall back to attention() get scratch.
std::vector<float> run_gpu(const layer_cache &c, const row_set &rs, bool one_by_one = false) {
    const int32_t n = rs.size();
    device_buffer<float> dq(rs.q), dout(size_t(n) * c.q_dim());
    device_buffer<int32_t> dslots(rs.slots), dpos(rs.pos);
    const bool fallback = c.sh.d_head == 256;
    const int32_t n_chunks = cuda::attention_chunks(c.sh.n_ctx);
    device_buffer<float> dpart(fallback ? size_t(n) * c.sh.n_head * n_chunks * (c.sh.d_head + 2) : 1);
    dout.poison();
    if (!one_by_one) {
        auto a = gpu_args(c, dq.ptr, dslots.ptr, dpos.ptr, dout.ptr, n);
        a.partial = dpart.ptr;
        cuda::attention_prompt(a, nullptr);
    } else {
        for (int32_t r = 0; r < n; ++r) {
            auto a = gpu_args(c, dq.ptr + r * c.q_dim(), dslots.ptr + r, dpos.ptr + r, dout.ptr + r * c.q_dim(), 1);
            a.partial = dpart.ptr + size_t(r) * c.sh.n_head * n_chunks * (c.sh.d_head + 2);
            cuda::attention_prompt(a, nullptr);
        }
    }
    return dout.download();
}

// cpu::attention over the real rows of rs: ref [n_rows][q_dim] (padding rows left zero).
std::vector<float> run_cpu(const layer_cache &c, const row_set &rs) {
    std::vector<const float *> kc, vc;
    std::vector<const block_q8_0 *> kq, vq;  // a q8_0 cache: the twin reads the blocks
    std::vector<int32_t> pos, rows;
    std::vector<float> q;
    const size_t slot_stride = size_t(c.sh.n_ctx) * c.kv_dim();
    for (int32_t r = 0; r < rs.size(); ++r) {
        if (rs.slots[size_t(r)] < 0) continue;
        kc.push_back(c.k.data() + size_t(rs.slots[size_t(r)]) * slot_stride);
        vc.push_back(c.v.data() + size_t(rs.slots[size_t(r)]) * slot_stride);
        kq.push_back(reinterpret_cast<const block_q8_0 *>(c.bk.data()) + size_t(rs.slots[size_t(r)]) * slot_stride / 32);
        vq.push_back(reinterpret_cast<const block_q8_0 *>(c.bv.data()) + size_t(rs.slots[size_t(r)]) * slot_stride / 32);
        pos.push_back(rs.pos[size_t(r)]);
        q.insert(q.end(), rs.q.begin() + ptrdiff_t(r * c.q_dim()), rs.q.begin() + ptrdiff_t((r + 1) * c.q_dim()));
        rows.push_back(r);
    }
    std::vector<float> packed(q.size()), ref(size_t(rs.size()) * c.q_dim(), 0.0f);
    cpu::attention_args ca{q.data(), kc.data(), vc.data(), pos.data(), packed.data(), int64_t(rows.size()),
                           c.sh.n_head, c.sh.n_head_kv, c.sh.d_head, 1.0f / std::sqrt(float(c.sh.d_head))};
    if (c.elem == cache_elem::q8_0) {
        ca.k_q8 = kq.data();
        ca.v_q8 = vq.data();
    }
    cpu::attention(cpu::cpu_context{int32_t(std::max(1u, std::thread::hardware_concurrency()))}, ca);
    for (size_t j = 0; j < rows.size(); ++j)
        std::copy_n(packed.data() + j * c.q_dim(), c.q_dim(), ref.data() + size_t(rows[j]) * c.q_dim());
    return ref;
}

bool same_row(const std::vector<float> &a, int32_t ra, const std::vector<float> &b, int32_t rb, size_t q_dim) {
    return std::memcmp(a.data() + ra * q_dim, b.data() + rb * q_dim, q_dim * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("attention_prompt matches the CPU for prompt chunks, mixed slots and padding rows", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    const cache_elem elem = GENERATE(cache_elem::f32, cache_elem::f16, cache_elem::q8_0);
    uint64_t seed = 700;
    // Group sizes 1, 2, 4, 8 and 16 (qwen3-235b-a22b: 64/4); d_head 32, 64, 128; the last shape
    // (d_head 256) takes the attention() fallback.
    for (const shape &sh : {shape{32, 4, 128, 700}, shape{8, 2, 64, 700}, shape{64, 4, 128, 700}, shape{4, 4, 64, 5000},
                            shape{32, 4, 128, 5000}, shape{8, 2, 64, 5000}, shape{32, 2, 64, 700}, shape{4, 2, 32, 700},
                            shape{16, 1, 128, 5000}, shape{4, 2, 256, 700}}) {
        ++seed;
        INFO("heads " << sh.n_head << "/" << sh.n_head_kv << " d_head " << sh.d_head << " n_ctx " << sh.n_ctx << " seed " << seed
                      << " kv " << test::cache_elem_name(elem));
        std::mt19937_64 rng(seed);
        const int32_t n_ctx = sh.n_ctx;
        const layer_cache c(rng, sh, 4, elem);
        row_set rs;
        add_rows(rs, rng, c, 0, 0, 300);                // a prompt from position 0
        add_rows(rs, rng, c, -1, 0, 1);                 // padding
        add_rows(rs, rng, c, 1, 45, 17);                // a chunk at a non-tile start
        add_rows(rs, rng, c, 2, n_ctx - 69, 64);        // 64 rows straddling tiles
        add_rows(rs, rng, c, -1, 0, 2);
        add_rows(rs, rng, c, 1, n_ctx - 1, 1);          // one row at the last position
        for (int32_t i = 0; i < 12; ++i) {              // two slots interleaved row by row
            add_rows(rs, rng, c, 0, 300 + i, 1);
            add_rows(rs, rng, c, 2, 100 + 3 * i, 1);
        }
        add_rows(rs, rng, c, 3, n_ctx - 300, 300);      // a prompt chunk ending at the last position
        add_rows(rs, rng, c, 3, 0, 1);                  // position 0 alone
        const auto got = run_gpu(c, rs);
        const auto ref = run_cpu(c, rs);
        double worst = 0;
        for (int32_t r = 0; r < rs.size(); ++r) {
            INFO("row " << r << " slot " << rs.slots[size_t(r)] << " pos " << rs.pos[size_t(r)]);
            const float *g = got.data() + size_t(r) * c.q_dim();
            if (rs.slots[size_t(r)] < 0) {
                CHECK(std::all_of(g, g + c.q_dim(), [](float x) { return x == 0.0f && !std::signbit(x); }));
                continue;
            }
            const double err = rel_err(g, ref.data() + size_t(r) * c.q_dim(), c.q_dim());
            worst = std::max(worst, err);
            CHECK(err <= tolerance::attention_prompt);
        }
        std::printf("attention_prompt heads %d/%d d_head %d n_ctx %d kv %s: worst row rel L2 error %.2e\n", sh.n_head,
                    sh.n_head_kv, sh.d_head, n_ctx, test::cache_elem_name(elem), worst);
    }
}

TEST_CASE("attention_prompt rows are bitwise independent of the other rows of the launch", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    const cache_elem elem = GENERATE(cache_elem::f32, cache_elem::f16, cache_elem::q8_0);
    uint64_t seed = 800;
    for (const shape &sh : {shape{32, 4, 128, 700}, shape{4, 4, 64, 700}, shape{64, 4, 128, 700}, shape{8, 2, 64, 5000}}) {
        ++seed;
        INFO("heads " << sh.n_head << "/" << sh.n_head_kv << " d_head " << sh.d_head << " n_ctx " << sh.n_ctx << " seed " << seed
                      << " kv " << test::cache_elem_name(elem));
        std::mt19937_64 rng(seed);
        const layer_cache c(rng, sh, 3, elem);
        const int32_t base = sh.n_ctx - 400;
        row_set rs;  // (a): a chunk of slot 0, one of slot 1, the two interleaved, a padding row
        add_rows(rs, rng, c, 0, base, 100);
        add_rows(rs, rng, c, 1, 7, 31);
        for (int32_t i = 0; i < 10; ++i) {
            add_rows(rs, rng, c, 0, base + 100 + i, 1);
            add_rows(rs, rng, c, 1, 38 + i, 1);
        }
        add_rows(rs, rng, c, -1, 0, 1);
        const size_t q_dim = c.q_dim();
        const int32_t n = rs.size();
        const auto together = run_gpu(c, rs);
        const auto alone = run_gpu(c, rs, true);  // (b): one row per launch
        row_set shifted;                          // (c): 5 rows of slot 2 and a padding row first
        add_rows(shifted, rng, c, 2, 3, 5);
        add_rows(shifted, rng, c, -1, 0, 1);
        const int32_t shift = shifted.size();
        shifted.slots.insert(shifted.slots.end(), rs.slots.begin(), rs.slots.end());
        shifted.pos.insert(shifted.pos.end(), rs.pos.begin(), rs.pos.end());
        shifted.q.insert(shifted.q.end(), rs.q.begin(), rs.q.end());
        const auto after = run_gpu(c, shifted);
        row_set reversed;                         // (d): the rows in reverse order
        for (int32_t r = n - 1; r >= 0; --r) {
            reversed.slots.push_back(rs.slots[size_t(r)]);
            reversed.pos.push_back(rs.pos[size_t(r)]);
            reversed.q.insert(reversed.q.end(), rs.q.begin() + ptrdiff_t(r * q_dim), rs.q.begin() + ptrdiff_t((r + 1) * q_dim));
        }
        const auto backwards = run_gpu(c, reversed);
        // (e): 420 rows of slot 2 after them: 572 rows, past attention_prompt.cu's ap_wide_rows (512), so
        // eight-warp blocks (keep the total above it if that bound moves)
        row_set wide = rs;
        add_rows(wide, rng, c, 2, 0, 420);
        const auto wide_out = run_gpu(c, wide);
        int32_t differ_alone = 0, differ_shift = 0, differ_rev = 0, differ_wide = 0;
        for (int32_t r = 0; r < n; ++r) {
            differ_alone += !same_row(together, r, alone, r, q_dim);
            differ_shift += !same_row(together, r, after, r + shift, q_dim);
            differ_rev += !same_row(together, r, backwards, n - 1 - r, q_dim);
            differ_wide += !same_row(together, r, wide_out, r, q_dim);
        }
        CHECK(differ_wide == 0);
        CHECK(differ_alone == 0);
        CHECK(differ_shift == 0);
        CHECK(differ_rev == 0);
        // And right: equal rows that were all wrong would pass the memcmp checks above.
        const auto ref = run_cpu(c, rs);
        for (int32_t r = 0; r < n; ++r)
            if (rs.slots[size_t(r)] >= 0)
                CHECK(rel_err(together.data() + r * q_dim, ref.data() + r * q_dim, q_dim) <= tolerance::attention_prompt);
    }
}

// Timing: ./test_cuda_attention_prompt "[.bench]". A prompt of 2,048 rows at positions 0..2047 of
// one slot (and a later 512-row chunk), per layer; the decode kernel attention() for comparison.
TEST_CASE("attention_prompt timing of a 2048-token prompt", "[.bench][gpu]") {
    if (!test::gpu_present()) return;
    std::mt19937_64 rng(900);
    for (const shape &sh : {shape{32, 4, 128, 4096}, shape{64, 4, 128, 4096}}) {
        const layer_cache c(rng, sh, 1);
        for (const int32_t first : {0, 3584}) {
            const int32_t n = first == 0 ? 2048 : 512;
            row_set rs;
            add_rows(rs, rng, c, 0, first, n);
            device_buffer<float> dq(rs.q), dout(size_t(n) * c.q_dim());
            device_buffer<int32_t> dslots(rs.slots), dpos(rs.pos);
            const int32_t n_chunks = cuda::attention_chunks(sh.n_ctx);
            device_buffer<float> dpart(size_t(n) * sh.n_head * n_chunks * (sh.d_head + 2));
            auto a = gpu_args(c, dq.ptr, dslots.ptr, dpos.ptr, dout.ptr, n);
            a.partial = dpart.ptr;
            cudaEvent_t e0, e1;
            TANDEM_CUDA_CHECK(cudaEventCreate(&e0));
            TANDEM_CUDA_CHECK(cudaEventCreate(&e1));
            auto median_ms = [&](auto &&fn, int reps) {
                for (int i = 0; i < 3; ++i) fn();
                std::vector<float> ms(static_cast<size_t>(reps));
                for (float &m : ms) {
                    TANDEM_CUDA_CHECK(cudaEventRecord(e0));
                    fn();
                    TANDEM_CUDA_CHECK(cudaEventRecord(e1));
                    TANDEM_CUDA_CHECK(cudaEventSynchronize(e1));
                    TANDEM_CUDA_CHECK(cudaEventElapsedTime(&m, e0, e1));
                }
                std::sort(ms.begin(), ms.end());
                return ms[ms.size() / 2];
            };
            const float t_prompt = median_ms([&] { cuda::attention_prompt(a, nullptr); }, 21);
            const float t_decode = median_ms([&] { cuda::attention(a, nullptr); }, 5);
            double flops = 0;  // Q.K^T and P.V: 4 * d_head per (row, head, key)
            for (int32_t p = first; p < first + n; ++p) flops += 4.0 * sh.d_head * (p + 1) * sh.n_head;
            std::printf("heads %d/%d d_head %d rows %d at %d..%d: attention_prompt %.3f ms (%.1f TFLOP/s useful), "
                        "attention %.3f ms\n", sh.n_head, sh.n_head_kv, sh.d_head, n, first, first + n - 1, t_prompt,
                        flops / (t_prompt * 1e-3) / 1e12, t_decode);
            TANDEM_CUDA_CHECK(cudaEventDestroy(e0));
            TANDEM_CUDA_CHECK(cudaEventDestroy(e1));
            CHECK(t_prompt > 0.0f);
        }
    }
}
