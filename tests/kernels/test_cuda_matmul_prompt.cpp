// tests/kernels/test_cuda_matmul_prompt.cpp - the tensor-core products of prompt rows against the
// CPU twin (cpu::matmul, cpu::moe_grouped) for every weight type, and their invariance: a row's
// outputs are bitwise the same alone, in any batch, at any offset, dense or grouped by expert.
#include "gpu_test_util.h"
#include "quant_test_util.h"

#include "cuda/matmul_prompt.h"
#include "cuda/matvec_digits.h"
#include "cuda/moe.h"
#include "tandem/quant_blocks.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

using namespace tandem;
using tandem::test::device_buffer;
using tandem::test::host_matrix;
using tandem::test::random_matrix;
using tandem::test::rel_err;
using tandem::test::tolerance;

namespace {

bool same_bits(const float *a, const float *b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// A step's rows routed to experts on the device (moe_route): ids, weights, and the groups and
// pair lists the grouped products take.
struct routed_step {
    int32_t n, k, max_groups;
    device_buffer<float> logits, weights;
    device_buffer<int32_t> slots, ids, group_expert, group_off, n_groups, pair_x, pair_y;
    cuda::moe_route_args args;
    routed_step(const std::vector<float> &router_logits, const std::vector<int32_t> &row_slots, int32_t n_expert, int32_t k_)
        : n(int32_t(row_slots.size())), k(k_), max_groups(cuda::moe_max_groups(n, n_expert, k_)), logits(router_logits),
          weights(size_t(n) * size_t(k_)), slots(row_slots), ids(size_t(n) * size_t(k_)), group_expert(size_t(max_groups)),
          group_off(size_t(max_groups) + 1), n_groups(size_t(1)), pair_x(size_t(n) * size_t(k_)), pair_y(size_t(n) * size_t(k_)) {
        args.logits = logits.ptr;
        args.slots = slots.ptr;
        args.ids = ids.ptr;
        args.weights = weights.ptr;
        args.group_expert = group_expert.ptr;
        args.group_off = group_off.ptr;
        args.n_groups = n_groups.ptr;
        args.pair_x = pair_x.ptr;
        args.pair_y = pair_y.ptr;
        args.n_rows = n;
        args.n_expert = n_expert;
        args.k = k;
        args.renormalise = true;
        cuda::moe_route(args, nullptr);
    }
    test::route_groups groups() const {
        return {pair_x.ptr, pair_y.ptr, group_expert.ptr, group_off.ptr, n_groups.ptr, max_groups};
    }
};

// Q4_K rows of random quants and scales (valid blocks, no quantiser run: fast at bench sizes).
std::vector<uint8_t> random_q4_k(std::mt19937_64 &rng, int64_t n_in, int64_t n_out) {
    std::vector<uint8_t> bytes(size_t(ggml_row_bytes(ggml_type::q4_k, n_in)) * size_t(n_out));
    for (size_t i = 0; i < bytes.size(); i += 8) {
        const uint64_t r = rng();
        std::memcpy(bytes.data() + i, &r, std::min<size_t>(8, bytes.size() - i));
    }
    std::uniform_real_distribution<float> scale(0.5e-3f, 2e-3f);
    for (size_t b = 0; b < bytes.size(); b += sizeof(block_q4_k)) {
        const uint16_t d = fp32_to_fp16(scale(rng)), dmin = fp32_to_fp16(scale(rng));
        std::memcpy(bytes.data() + b, &d, 2);
        std::memcpy(bytes.data() + b + 2, &dmin, 2);
    }
    return bytes;
}

// Median milliseconds of `reps` timed runs of `fn` after 3 warm-ups (device events).
template <class F>
double median_ms(F &&fn, int reps = 21) {
    for (int i = 0; i < 3; ++i) fn();
    cudaEvent_t t0, t1;
    TANDEM_CUDA_CHECK(cudaEventCreate(&t0));
    TANDEM_CUDA_CHECK(cudaEventCreate(&t1));
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
        TANDEM_CUDA_CHECK(cudaEventRecord(t0));
        fn();
        TANDEM_CUDA_CHECK(cudaEventRecord(t1));
        TANDEM_CUDA_CHECK(cudaEventSynchronize(t1));
        float m = 0;
        TANDEM_CUDA_CHECK(cudaEventElapsedTime(&m, t0, t1));
        ms.push_back(m);
    }
    TANDEM_CUDA_CHECK(cudaEventDestroy(t0));
    TANDEM_CUDA_CHECK(cudaEventDestroy(t1));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// FNV-1a of the output bits: equal across builds when the arithmetic is.
uint64_t bits_hash(const std::vector<float> &v) {
    uint64_t h = 1469598103934665603ull;
    for (float f : v) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        h = (h ^ u) * 1099511628211ull;
    }
    return h;
}

void bench_report(const char *what, double ms, double flop, const std::vector<float> &out) {
    std::printf("bench %-44s %8.3f ms %7.1f TFLOP/s useful  hash %016llx\n", what, ms, flop / ms * 1e-9,
                static_cast<unsigned long long>(bits_hash(out)));
    std::fflush(stdout);
}

// Q4_K products run twice in the tests below: by the dequantising kernel, and (g_exact) by the
// exact-quant kernel, which matmul_prompt takes when it is given split scratch
// (matmul_prompt_q4k.cu). split_rows: rows of x that x_rows can name.
bool g_exact = false;
void run_prompt(cuda::matvec_args a, int32_t split_rows) {
    static device_buffer<uint4> split(size_t(4) << 20);  // 64 MB: the [.bench] shapes' largest input
    static device_buffer<float> sums(size_t(1) << 19);
    if (g_exact && a.type == ggml_type::q4_k) {
        REQUIRE(size_t(split_rows) * size_t(a.x_stride) <= 4 * split.count);
        a.prompt_split = split.ptr;
        a.prompt_sums = sums.ptr;
        a.prompt_split_rows = split_rows;
        REQUIRE(cuda::matmul_prompt_q4k_applies(a));
    }
    cuda::matmul_prompt(a, nullptr);
}

}  // namespace

TEST_CASE("matmul_prompt matches the CPU matmul for every weight type; rows are invariant to the batch", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    cpu::cpu_context ctx{4};
    struct shape { int32_t n_in, n_out, n_rows; };
    uint64_t seed = 7000;
    double worst = 0;
    for (const bool exact : {false, true})
    for (ggml_type type : {ggml_type::f32, ggml_type::f16, ggml_type::bf16, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k,
                           ggml_type::q5_k, ggml_type::q3_k, ggml_type::q2_k, ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0,
                           ggml_type::q5_1, ggml_type::iq4_nl, ggml_type::iq4_xs, ggml_type::mxfp4, ggml_type::iq2_xxs,
                           ggml_type::iq2_xs, ggml_type::iq2_s, ggml_type::iq3_xxs, ggml_type::iq3_s, ggml_type::iq1_s,
                           ggml_type::iq1_m}) {
        if (exact && type != ggml_type::q4_k) continue;
        g_exact = exact;
        const int64_t blk = ggml_type_info(type).block_elems;
        // Rows: 1, partial tiles (13, 64, 65: the kernel's tile is 128 rows, its warps 64 and
        // mma tiles 16), two tiles (130); outputs: 1, odd, a tile and one (129); K: one block,
        // several K steps, a partial last step (96, 4352).
        std::vector<shape> shapes = {{256, 1, 1}, {512, 37, 65}, {768, 129, 13}, {2048, 67, 130}, {4352, 19, 3}, {256, 64, 64}};
        if (blk == 1 || blk == 32) shapes.push_back({96, 33, 70});
        for (const shape &sh : shapes) {
            ++seed;
            INFO("type " << ggml_type_name(type) << (exact ? " (exact quants)" : "") << " n_in " << sh.n_in << " n_out "
                         << sh.n_out << " rows " << sh.n_rows << " seed " << seed);
            std::mt19937_64 rng(seed);
            const auto w = random_matrix(rng, type, sh.n_in, sh.n_out, 0.05f);
            auto x = test::random_floats(rng, size_t(sh.n_in) * sh.n_rows);
            // Rows of very different scales: the split keeps relative precision per element.
            for (size_t i = 0; i < size_t(sh.n_in); ++i) x[i] *= 1e-3f;
            std::vector<float> ref(size_t(sh.n_out) * sh.n_rows);
            cpu::matmul(ctx, host_matrix(w, type, sh.n_in, sh.n_out), x.data(), ref.data(), sh.n_rows);

            device_buffer<uint8_t> dw(w);
            device_buffer<float> dx(x), dy(ref.size());
            dy.poison();
            cuda::matvec_args a = test::dense_product_args(dw.ptr, type, sh.n_in, sh.n_out, dx.ptr, dy.ptr, sh.n_rows);
            run_prompt(a, sh.n_rows);
            const auto got = dy.download();
            for (int32_t r = 0; r < sh.n_rows; ++r) {
                const double e = rel_err(got.data() + size_t(r) * sh.n_out, ref.data() + size_t(r) * sh.n_out, size_t(sh.n_out));
                worst = std::max(worst, e);
                CHECK(e <= tolerance::matmul_prompt);
            }

            // Both block tile shapes (16 and 128 rows; the step's size picks one): bitwise the same.
            for (const int32_t tile_rows : {16, 128}) {
                INFO("tile rows " << tile_rows);
                device_buffer<float> yt(ref.size());
                cuda::matvec_args b = a;
                b.y = yt.ptr;
                b.prompt_tile_rows = tile_rows;
                run_prompt(b, sh.n_rows);
                CHECK(same_bits(yt.download().data(), got.data(), got.size()));
            }

            // K parts (matvec_args::k_parts; the router's prompt rows): part s's sums at y + s *
            // stride, both tiles bitwise the same, added in part order within the bound of the CPU,
            // and the last row alone bitwise its parts in the batch.
            const int32_t k_steps = (sh.n_in + 127) / 128;
            for (const int32_t parts : {2, 4}) {
                if (exact || parts > k_steps) continue;
                INFO("k parts " << parts);
                const size_t stride = ref.size();
                std::vector<float> first;
                for (const int32_t tile_rows : {16, 128}) {
                    device_buffer<float> yp(stride * size_t(parts));
                    yp.poison();
                    cuda::matvec_args b = a;
                    b.y = yp.ptr;
                    b.k_parts = parts;
                    b.y_part_stride = int64_t(stride);
                    b.prompt_tile_rows = tile_rows;
                    run_prompt(b, sh.n_rows);
                    const auto got_p = yp.download();
                    if (first.empty())
                        first = got_p;
                    else
                        CHECK(same_bits(got_p.data(), first.data(), got_p.size()));
                }
                std::vector<float> sum(stride, 0.0f);
                for (int32_t part = 0; part < parts; ++part)
                    for (size_t i = 0; i < stride; ++i) sum[i] += first[size_t(part) * stride + i];
                for (int32_t r = 0; r < sh.n_rows; ++r)
                    CHECK(rel_err(sum.data() + size_t(r) * sh.n_out, ref.data() + size_t(r) * sh.n_out, size_t(sh.n_out)) <=
                          tolerance::matmul_prompt);
                const int32_t last = sh.n_rows - 1;
                device_buffer<float> yo(size_t(sh.n_out) * size_t(parts));
                cuda::matvec_args b = a;
                b.x = dx.ptr + size_t(last) * sh.n_in;
                b.y = yo.ptr;
                b.n_pairs = 1;
                b.k_parts = parts;
                b.y_part_stride = sh.n_out;
                run_prompt(b, 1);
                const auto alone = yo.download();
                for (int32_t part = 0; part < parts; ++part)
                    CHECK(same_bits(alone.data() + size_t(part) * sh.n_out, first.data() + size_t(part) * stride + size_t(last) * sh.n_out,
                                    size_t(sh.n_out)));
            }

            // Each row alone, and the rows from 3 on as one batch (every row at another offset of
            // its tile): bitwise what they were.
            for (int32_t r = 0; r < sh.n_rows; r += std::max(1, sh.n_rows / 5)) {
                device_buffer<float> one(size_t(sh.n_out));
                cuda::matvec_args b = a;
                b.x = dx.ptr + size_t(r) * sh.n_in;
                b.y = one.ptr;
                b.n_pairs = 1;
                run_prompt(b, 1);
                CHECK(same_bits(one.download().data(), got.data() + size_t(r) * sh.n_out, size_t(sh.n_out)));
            }
            if (sh.n_rows > 3) {
                device_buffer<float> rest(size_t(sh.n_out) * (sh.n_rows - 3));
                cuda::matvec_args b = a;
                b.x = dx.ptr + size_t(3) * sh.n_in;
                b.y = rest.ptr;
                b.n_pairs = sh.n_rows - 3;
                run_prompt(b, sh.n_rows - 3);
                CHECK(same_bits(rest.download().data(), got.data() + size_t(3) * sh.n_out, rest.count));
            }

            // Rows through index lists (reversed): bitwise the direct result.
            {
                std::vector<int32_t> rev(size_t(sh.n_rows));
                for (int32_t i = 0; i < sh.n_rows; ++i) rev[size_t(i)] = sh.n_rows - 1 - i;
                device_buffer<int32_t> drev(rev);
                device_buffer<float> yr(ref.size());
                cuda::matvec_args b = a;
                b.x_rows = drev.ptr;
                b.y_rows = drev.ptr;
                b.y = yr.ptr;
                run_prompt(b, sh.n_rows);
                CHECK(same_bits(yr.download().data(), got.data(), got.size()));
            }

            // Extra matrices (Q, K, V style): each bitwise its own launch.
            if (sh.n_out > 1) {
                const int32_t n1 = sh.n_out / 2 + 1;
                const auto w1 = random_matrix(rng, type, sh.n_in, n1, 0.05f);
                device_buffer<uint8_t> dw1(w1);
                device_buffer<float> y0(ref.size()), y1(size_t(n1) * sh.n_rows), s1(y1.count);
                cuda::matvec_args f = a;
                f.y = y0.ptr;
                f.extra[0] = {dw1.ptr, n1, y1.ptr, n1};
                f.n_extra = 1;
                run_prompt(f, sh.n_rows);
                cuda::matvec_args s = a;
                s.w = dw1.ptr;
                s.n_out = n1;
                s.y = s1.ptr;
                s.y_stride = n1;
                run_prompt(s, sh.n_rows);
                CHECK(same_bits(y0.download().data(), got.data(), got.size()));
                CHECK(same_bits(y1.download().data(), s1.download().data(), s1.count));
            }

            // accumulate: y += W x.
            const auto base = test::random_floats(rng, ref.size());
            dy.upload(base);
            a.accumulate = true;
            run_prompt(a, sh.n_rows);
            const auto acc = dy.download();
            std::vector<float> want(ref.size());
            for (size_t i = 0; i < want.size(); ++i) want[i] = base[i] + ref[i];
            CHECK(rel_err(acc.data(), want.data(), want.size()) <= tolerance::matmul_prompt);
        }
    }
    WARN("matmul_prompt: worst relative L2 error per row vs the CPU " << worst);
}

TEST_CASE("matmul_prompt grouped SwiGLU experts match the CPU and the dense product, bitwise", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    struct shape { int32_t n_expert, k, n_rows, d_model, d_ff; ggml_type type; };
    uint64_t seed = 7500;
    // 300 rows of 8 experts of 16: groups of 100-200 pairs (several row tiles); 128 experts of
    // k 8 over 40 rows: most groups hold 1-5 pairs; 600 rows: more than the engine's step.
    for (const bool exact : {false, true})
    for (const shape &sh : {shape{16, 8, 300, 256, 256, ggml_type::q4_k}, shape{128, 8, 40, 512, 256, ggml_type::q4_k},
                            shape{8, 2, 33, 256, 256, ggml_type::q6_k}, shape{40, 3, 70, 96, 64, ggml_type::q8_0},
                            shape{64, 4, 600, 256, 32, ggml_type::f32}}) {
        ++seed;
        if (exact && sh.type != ggml_type::q4_k) continue;
        g_exact = exact;
        INFO("experts " << sh.n_expert << " k " << sh.k << " rows " << sh.n_rows << " type " << ggml_type_name(sh.type)
                        << (exact ? " (exact quants)" : "") << " seed " << seed);
        std::mt19937_64 rng(seed);
        const int32_t n = sh.n_rows, ne = sh.n_expert, k = sh.k, d = sh.d_model, ff = sh.d_ff;
        const auto logits = test::random_floats(rng, size_t(n) * ne);
        std::vector<int32_t> slots(size_t(n), 0);
        if (n > 3) slots[2] = -1;  // a padding row is routed nowhere
        routed_step rs(logits, slots, ne, k);
        const auto ids = rs.ids.download();

        const auto gate = random_matrix(rng, sh.type, d, int64_t(ff) * ne, 0.06f);
        const auto up = random_matrix(rng, sh.type, d, int64_t(ff) * ne, 0.06f);
        const auto down = random_matrix(rng, sh.type, ff, int64_t(d) * ne, 0.06f);
        const auto h = test::random_floats(rng, size_t(n) * d);
        const std::vector<float> out_ref = test::cpu_grouped_ffn(gate, up, down, sh.type, ne, d, ff, h, ids, k);

        device_buffer<uint8_t> dgate(gate), dup(up), ddown(down);
        device_buffer<float> dh(h), dact(size_t(n) * k * ff), dout(out_ref.size());
        dact.poison();
        dout.poison();
        const test::grouped_ffn_args f =
            test::grouped_ffn(dgate.ptr, dup.ptr, ddown.ptr, sh.type, d, ff, dh.ptr, dact.ptr, dout.ptr, rs.groups(), n, k);
        const cuda::matvec_args &g = f.gate_up;
        run_prompt(g, n);
        run_prompt(f.down, n * k);
        const auto act = dact.download(), out = dout.download();
        for (int32_t p = 0; p < n * k; ++p) {
            if (ids[size_t(p)] < 0) continue;
            INFO("pair " << p);
            CHECK(rel_err(out.data() + size_t(p) * d, out_ref.data() + size_t(p) * d, size_t(d)) <= 2 * tolerance::matmul_prompt);
        }

        // Both block tile shapes: gate/up and down bitwise the same (pairs routed nowhere and
        // their rows are not written).
        for (const int32_t tile_rows : {16, 128}) {
            INFO("tile rows " << tile_rows);
            device_buffer<float> act_t(dact.count), out_t(dout.count);
            cuda::matvec_args gt = g, dt = f.down;
            gt.y = act_t.ptr;
            gt.prompt_tile_rows = tile_rows;
            dt.x = act_t.ptr;
            dt.y = out_t.ptr;
            dt.prompt_tile_rows = tile_rows;
            run_prompt(gt, n);
            run_prompt(dt, n * k);
            const auto at = act_t.download(), ot = out_t.download();
            for (int32_t p = 0; p < n * k; ++p) {
                if (ids[size_t(p)] < 0) continue;
                INFO("pair " << p);
                CHECK(same_bits(at.data() + size_t(p) * ff, act.data() + size_t(p) * ff, size_t(ff)));
                CHECK(same_bits(ot.data() + size_t(p) * d, out.data() + size_t(p) * d, size_t(d)));
            }
        }

        // Each pair's down product is bitwise the dense product of its expert's matrix on its
        // activations, whatever group tile it fell in: checked for a few experts.
        const size_t down_row = ggml_row_bytes(sh.type, ff);
        for (int32_t e : {0, ne / 2, ne - 1}) {
            std::vector<int32_t> pairs;
            for (int32_t p = 0; p < n * k; ++p)
                if (ids[size_t(p)] == e) pairs.push_back(p);
            if (pairs.empty()) continue;
            device_buffer<int32_t> dpairs(pairs);
            device_buffer<float> yd(size_t(n) * k * d);
            cuda::matvec_args s;
            s.w = ddown.ptr + size_t(e) * size_t(d) * down_row;
            s.type = sh.type; s.n_in = ff; s.n_out = d; s.x = dact.ptr; s.x_stride = ff;
            s.y = yd.ptr; s.y_stride = d; s.x_rows = dpairs.ptr; s.y_rows = dpairs.ptr; s.n_pairs = int32_t(pairs.size());
            run_prompt(s, n * k);
            const auto dense = yd.download();
            INFO("expert " << e << " pairs " << pairs.size());
            for (int32_t p : pairs) CHECK(same_bits(dense.data() + size_t(p) * d, out.data() + size_t(p) * d, size_t(d)));
        }

        // The first half of the rows routed alone: their pairs' SwiGLU activations are bitwise the same.
        const int32_t half = std::max(1, n / 2);
        device_buffer<int32_t> dng2{1};
        device_buffer<float> dact2(size_t(half) * k * ff);
        cuda::moe_route_args rb = rs.args;
        rb.n_rows = half;
        rb.n_groups = dng2.ptr;
        rb.ids = rs.ids.ptr;  // the same ids for those rows (routing is per row)
        cuda::moe_route(rb, nullptr);
        cuda::matvec_args gb = g;
        gb.y = dact2.ptr;
        gb.n_groups = dng2.ptr;
        gb.n_pairs = half * k;
        gb.max_groups = cuda::moe_max_groups(half, ne, k);
        run_prompt(gb, half);
        const auto act2 = dact2.download();
        for (int32_t p = 0; p < half * k; ++p) {
            if (ids[size_t(p)] < 0) continue;
            INFO("pair " << p << " of the half batch");
            CHECK(same_bits(act2.data() + size_t(p) * ff, act.data() + size_t(p) * ff, size_t(ff)));
        }
    }
}

// Timing, not run by default: `test_cuda_matmul_prompt "[.bench]"`. The shapes of one layer of a
// 2,048-row qwen3-30b-a3b prefill step (Q4_K): a dense 2048 -> 5120 product, Q/K/V as one fused
// launch, the grouped SwiGLU gate/up of 128 experts (8 per row, d_ff 768) and their down product.
TEST_CASE("matmul_prompt speed on prefill shapes", "[.bench][gpu]") {
    if (!test::gpu_present()) return;
    for (const bool exact : {false, true}) {
    g_exact = exact;
    std::printf("%s\n", exact ? "exact quants (matmul_prompt_q4k.cu):" : "dequantised and split (matmul_prompt.cu):");
    std::mt19937_64 rng(9100);
    const int32_t n = 2048, d = 2048, ne = 128, k = 8, ff = 768;
    const auto x = test::random_floats(rng, size_t(n) * 4096);
    device_buffer<float> dx(x);

    {
        const auto w = random_q4_k(rng, d, 5120);
        device_buffer<uint8_t> dw(w);
        device_buffer<float> dy(size_t(n) * 5120);
        cuda::matvec_args a;
        a.w = dw.ptr; a.type = ggml_type::q4_k; a.n_in = d; a.n_out = 5120;
        a.x = dx.ptr; a.x_stride = d; a.y = dy.ptr; a.y_stride = 5120; a.n_pairs = n;
        const double ms = median_ms([&] { run_prompt(a, n); });
        bench_report("dense 2048 rows 2048 -> 5120", ms, 2.0 * n * d * 5120, dy.download());
    }
    {
        const auto wq = random_q4_k(rng, d, 4096), wk = random_q4_k(rng, d, 512), wv = random_q4_k(rng, d, 512);
        device_buffer<uint8_t> dq(wq), dk(wk), dv(wv);
        device_buffer<float> yq(size_t(n) * 4096), yk(size_t(n) * 512), yv(size_t(n) * 512);
        cuda::matvec_args a;
        a.w = dq.ptr; a.type = ggml_type::q4_k; a.n_in = d; a.n_out = 4096;
        a.x = dx.ptr; a.x_stride = d; a.y = yq.ptr; a.y_stride = 4096; a.n_pairs = n;
        a.extra[0] = {dk.ptr, 512, yk.ptr, 512};
        a.extra[1] = {dv.ptr, 512, yv.ptr, 512};
        a.n_extra = 2;
        const double ms = median_ms([&] { run_prompt(a, n); });
        auto out = yq.download();
        for (const auto *b : {&yk, &yv}) {
            const auto part = b->download();
            out.insert(out.end(), part.begin(), part.end());
        }
        bench_report("dense Q/K/V 2048 -> 4096 + 512 + 512", ms, 2.0 * n * d * 5120, out);
    }
    {
        const auto w = random_q4_k(rng, 4096, d);
        device_buffer<uint8_t> dw(w);
        device_buffer<float> dy(size_t(n) * d);
        cuda::matvec_args a;
        a.w = dw.ptr; a.type = ggml_type::q4_k; a.n_in = 4096; a.n_out = d;
        a.x = dx.ptr; a.x_stride = 4096; a.y = dy.ptr; a.y_stride = d; a.n_pairs = n;
        const double ms = median_ms([&] { run_prompt(a, n); });
        bench_report("dense wo 2048 rows 4096 -> 2048", ms, 2.0 * n * 4096 * d, dy.download());
    }
    if (exact) {
        // The dense products on the int8 digit tiles (one_group, as prompt rows' Q/K/V and wo take them).
        std::printf("dense products on int8 digit tiles (one group), quantize launch included:\n");
        device_buffer<int8_t> dig(size_t(n) * 4096 * cuda::digits_per_element);
        device_buffer<float> scales(size_t(n) * 4096 / 256);
        device_buffer<uint16_t> sums(size_t(n) * 4096 / 256 * 16);
        const cuda::digit_rows rows{dig.ptr, scales.ptr, sums.ptr};
        for (const int32_t n_in : {d, 4096}) {
            const int32_t n_out = n_in == d ? 5120 : d;
            const auto w = random_q4_k(rng, n_in, n_out);
            device_buffer<uint8_t> dw(w);
            device_buffer<float> dy(size_t(n) * n_out);
            const cuda::matvec_digits_args a = cuda::one_group_args(dw.ptr, n_in, n_out, rows, n, dy.ptr, n_out);
            const double ms = median_ms([&] {
                cuda::digits_quantize({dx.ptr, n, n_in, rows}, nullptr);
                cuda::matmul_digits(a, nullptr);
            });
            bench_report(n_in == d ? "dense 2048 rows 2048 -> 5120" : "dense wo 2048 rows 4096 -> 2048", ms, 2.0 * n * n_in * n_out,
                         dy.download());
        }
    }
    {
        const auto logits = test::random_floats(rng, size_t(n) * ne);
        const std::vector<int32_t> slots(size_t(n), 0);
        routed_step rs(logits, slots, ne, k);
        const auto gate = random_q4_k(rng, d, int64_t(ff) * ne), up = random_q4_k(rng, d, int64_t(ff) * ne);
        const auto down = random_q4_k(rng, ff, int64_t(d) * ne);
        device_buffer<uint8_t> dgate(gate), dup(up), ddown(down);
        device_buffer<float> dact(size_t(n) * k * ff), dout(size_t(n) * k * d);
        const test::grouped_ffn_args f = test::grouped_ffn(dgate.ptr, dup.ptr, ddown.ptr, ggml_type::q4_k, d, ff, dx.ptr,
                                                           dact.ptr, dout.ptr, rs.groups(), n, k);
        const double ms_gu = median_ms([&] { run_prompt(f.gate_up, n); });
        bench_report("grouped SwiGLU 128 experts 2048 -> 2 x 768", ms_gu, 2.0 * n * k * d * 2 * ff, dact.download());
        const double ms_dn = median_ms([&] { run_prompt(f.down, n * k); });
        bench_report("grouped down 128 experts 768 -> 2048", ms_dn, 2.0 * n * k * ff * d, dout.download());
        if (exact) {
            // The same products on int8 digits (matmul_digits), each with its digits_quantize launch.
            std::printf("int8 digit tiles (matmul_prompt_digits.cu), quantize launch included:\n");
            device_buffer<int8_t> dig(size_t(n) * k * ff * cuda::digits_per_element);
            device_buffer<float> scales(size_t(n) * k * ff / 256);
            device_buffer<uint16_t> sums(size_t(n) * k * ff / 256 * 16);
            const cuda::digit_rows rows{dig.ptr, scales.ptr, sums.ptr};
            const cuda::matvec_digits_args gu = cuda::digit_args_of(f.gate_up, rows), dn = cuda::digit_args_of(f.down, rows);
            const double ms_dgu = median_ms([&] {
                cuda::digits_quantize({dx.ptr, n, d, rows}, nullptr);
                cuda::matmul_digits(gu, nullptr);
            });
            bench_report("grouped SwiGLU 128 experts 2048 -> 2 x 768", ms_dgu, 2.0 * n * k * d * 2 * ff, dact.download());
            const double ms_ddn = median_ms([&] {
                cuda::digits_quantize({dact.ptr, n * k, ff, rows}, nullptr);
                cuda::matmul_digits(dn, nullptr);
            });
            bench_report("grouped down 128 experts 768 -> 2048", ms_ddn, 2.0 * n * k * ff * d, dout.download());
        }
    }
    }
    g_exact = false;
}
