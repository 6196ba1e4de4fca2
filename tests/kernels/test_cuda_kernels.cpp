// tests/kernels/test_cuda_kernels.cpp - every CUDA kernel family against its CPU twin (src/cpu)
// on seeded random inputs: odd sizes, non-multiples of tiles, ties in router scores, duplicate
// experts across rows, padding rows; batch invariance of the products, bitwise.
#include "gpu_test_util.h"
#include "digits_test_util.h"
#include "quant_test_util.h"
#include "split_test_util.h"
#include "kv_cache_test_util.h"

#include "cuda/attention.h"
#include "cuda/attention_mma.h"
#include "cuda/matvec.h"
#include "cuda/matvec_plan.h"
#include "cuda/moe.h"
#include "cuda/norm.h"
#include "src/cpu/cpu_ops.h"
#include "tandem/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace tandem;
using tandem::test::device_buffer;
using tandem::test::rel_err;
using tandem::test::tolerance;
using tandem::test::host_matrix;
using tandem::test::random_matrix;

namespace {

const ggml_type all_types[] = {ggml_type::f32,    ggml_type::f16,     ggml_type::bf16,    ggml_type::q8_0,   ggml_type::q4_k,
                               ggml_type::q6_k,   ggml_type::q5_k,    ggml_type::q3_k,    ggml_type::q2_k,   ggml_type::q4_0,
                               ggml_type::q4_1,   ggml_type::q5_0,    ggml_type::q5_1,    ggml_type::iq4_nl, ggml_type::iq4_xs,
                               ggml_type::mxfp4,  ggml_type::iq2_xxs, ggml_type::iq2_xs,  ggml_type::iq2_s,  ggml_type::iq3_xxs,
                               ggml_type::iq3_s,  ggml_type::iq1_s,   ggml_type::iq1_m};

// The worst error of a product's outputs against their own scale, sum_i |w_i x_i|: a single
// output's relative error is unbounded where its sum cancels, as on a random one-output row.
double scaled_err(const std::vector<uint8_t> &w, ggml_type type, int32_t n_in, int32_t n_out, const float *x, const float *got,
                  const float *ref) {
    std::vector<float> row(static_cast<size_t>(n_in));
    double worst = 0;
    for (int32_t o = 0; o < n_out; ++o) {
        dequantize_row(type, w.data() + size_t(o) * ggml_row_bytes(type, n_in), row.data(), n_in);
        double scale = 0;
        for (int32_t i = 0; i < n_in; ++i) scale += std::fabs(double(row[size_t(i)]) * x[i]);
        if (scale > 0) worst = std::max(worst, std::fabs(double(got[o]) - ref[o]) / scale);
    }
    return worst;
}

}  // namespace

TEST_CASE("matvec matches the CPU matmul for every weight type, and rows are batch invariant", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    cpu::cpu_context ctx{4};
    struct shape { int32_t n_in, n_out, n_rows; };
    uint64_t seed = 1000;
    for (ggml_type type : all_types) {
        const int64_t blk = ggml_type_info(type).block_elems;
        // K split by the matrix's blocks of 16 rows: n_out 4500 (282 blocks) 4 ways, 1000 (63) and
        // the narrower shapes (under 264 blocks) 16 ways.
        std::vector<shape> shapes = {{256, 1, 1}, {512, 37, 3}, {768, 129, 13}, {2048, 67, 16}, {256, 5, 40}, {4352, 19, 3},
                                     {512, 4500, 9}, {1024, 1000, 5}};
        if (blk == 1 || blk == 32) shapes.push_back({96, 33, 7});
        // A head-sized Q6_K matrix (4,100 blocks: its own launch shape, two-warp blocks playing four).
        if (type == ggml_type::q6_k) shapes.push_back({256, 65600, 3});
        for (const shape &sh : shapes) {
            ++seed;
            INFO("type " << ggml_type_name(type) << " n_in " << sh.n_in << " n_out " << sh.n_out << " rows " << sh.n_rows
                         << " seed " << seed);
            std::mt19937_64 rng(seed);
            const auto w = random_matrix(rng, type, sh.n_in, sh.n_out, 0.05f);
            const auto x = test::random_floats(rng, size_t(sh.n_in) * sh.n_rows);
            std::vector<float> ref(size_t(sh.n_out) * sh.n_rows);
            cpu::matmul(ctx, host_matrix(w, type, sh.n_in, sh.n_out), x.data(), ref.data(), sh.n_rows);

            device_buffer<uint8_t> dw(w);
            device_buffer<float> dx(x), dy(ref.size());
            dy.poison();
            cuda::matvec_args a = test::dense_product_args(dw.ptr, type, sh.n_in, sh.n_out, dx.ptr, dy.ptr, sh.n_rows);
            cuda::matvec(a, nullptr);
            const auto got = dy.download();
            for (int32_t r = 0; r < sh.n_rows; ++r) {
                const float *g = got.data() + size_t(r) * sh.n_out, *c = ref.data() + size_t(r) * sh.n_out;
                CHECK((sh.n_out < 8 ? scaled_err(w, type, sh.n_in, sh.n_out, x.data() + size_t(r) * sh.n_in, g, c)
                                    : rel_err(g, c, size_t(sh.n_out))) <= tolerance::matvec);
            }

            // x handed over pre-split (cuda/x_split.cuh) with its 32-element sums: bitwise what
            // the product computes from the fp32 rows itself.
            {
                device_buffer<uint16_t> dsplit(test::host_split(x));
                device_buffer<float> dsums(test::host_sums32(x)), ys(ref.size());
                ys.poison();
                cuda::matvec_args p = a;
                p.x_split = reinterpret_cast<const uint4 *>(dsplit.ptr);
                p.x_sums = dsums.ptr;
                p.y = ys.ptr;
                cuda::matvec(p, nullptr);
                CHECK(std::memcmp(ys.download().data(), got.data(), got.size() * sizeof(float)) == 0);
            }
            // Pre-split rows 32 elements wider than n_in: a stride that is not a multiple of 64
            // (its sums rows are not 8-byte aligned), which matvec() splits in the kernel instead.
            // Still bitwise the same.
            if (sh.n_in % 64 == 0) {
                const int32_t wide = sh.n_in + 32;
                std::vector<float> xw(size_t(wide) * sh.n_rows, 0.0f);
                for (int32_t r = 0; r < sh.n_rows; ++r)
                    std::copy_n(x.data() + size_t(r) * sh.n_in, sh.n_in, xw.data() + size_t(r) * wide);
                device_buffer<float> dxw(xw), ys(ref.size());
                device_buffer<uint16_t> dsplit(test::host_split(xw));
                device_buffer<float> dsums(test::host_sums32(xw));
                ys.poison();
                cuda::matvec_args p = a;
                p.x = dxw.ptr;
                p.x_stride = wide;
                p.x_split = reinterpret_cast<const uint4 *>(dsplit.ptr);
                p.x_sums = dsums.ptr;
                p.y = ys.ptr;
                cuda::matvec(p, nullptr);
                CHECK(std::memcmp(ys.download().data(), got.data(), got.size() * sizeof(float)) == 0);
            }
            // Two launch shapes against the default, each bitwise the same: rows one n8 tile a pass
            // (matvec_forced::col_tiles; more than 8 rows take two by default where the type has a
            // two-tile path), and weights streamed a chunk a warp at a time instead of staged where
            // the plan stages them (matvec_forced::staged; dense Q4_K above 8 rows, on sm_90).
            for (const int variant : {0, 1}) {
                INFO((variant == 0 ? "one column tile a pass" : "weights streamed"));
                device_buffer<float> yc(ref.size());
                yc.poison();
                cuda::matvec_args p = a;
                cuda::matvec_forced forced;
                if (variant == 0)
                    forced.col_tiles = 1;
                else
                    forced.staged = 0;
                p.y = yc.ptr;
                cuda::matvec(p, cuda::plan_matvec(p, cuda::current_device_facts(), forced), nullptr);
                CHECK(std::memcmp(yc.download().data(), got.data(), got.size() * sizeof(float)) == 0);
            }

            // Each row alone: bitwise what it was in the batch.
            for (int32_t r = 0; r < sh.n_rows; r += std::max(1, sh.n_rows / 4)) {
                device_buffer<float> one(size_t(sh.n_out));
                cuda::matvec_args b = a;
                b.x = dx.ptr + size_t(r) * sh.n_in;
                b.y = one.ptr;
                b.n_pairs = 1;
                cuda::matvec(b, nullptr);
                const auto alone = one.download();
                CHECK(std::memcmp(alone.data(), got.data() + size_t(r) * sh.n_out, alone.size() * sizeof(float)) == 0);
            }

            // Fused launch (Q, K, V style): two more matrices over the same x, each bitwise
            // what its own launch gives.
            if (sh.n_out > 1) {
                const int32_t n1 = sh.n_out / 2 + 1, n2 = 3;
                const auto w1 = random_matrix(rng, type, sh.n_in, n1, 0.05f), w2 = random_matrix(rng, type, sh.n_in, n2, 0.05f);
                device_buffer<uint8_t> dw1(w1), dw2(w2);
                device_buffer<float> y0(ref.size()), y1(size_t(n1) * sh.n_rows), y2(size_t(n2) * sh.n_rows), s1(y1.count), s2(y2.count);
                cuda::matvec_args f = a;
                f.y = y0.ptr;
                f.extra[0] = {dw1.ptr, n1, y1.ptr, n1};
                f.extra[1] = {dw2.ptr, n2, y2.ptr, n2};
                f.n_extra = 2;
                cuda::matvec(f, nullptr);
                cuda::matvec_args s = a;
                s.w = dw1.ptr; s.n_out = n1; s.y = s1.ptr; s.y_stride = n1;
                cuda::matvec(s, nullptr);
                s.w = dw2.ptr; s.n_out = n2; s.y = s2.ptr; s.y_stride = n2;
                cuda::matvec(s, nullptr);
                CHECK(std::memcmp(y0.download().data(), got.data(), got.size() * sizeof(float)) == 0);
                CHECK(std::memcmp(y1.download().data(), s1.download().data(), s1.count * sizeof(float)) == 0);
                CHECK(std::memcmp(y2.download().data(), s2.download().data(), s2.count * sizeof(float)) == 0);
            }

            // K in parts on blocks of their own (the router's launch): the parts added in order
            // match the CPU; a row's parts alone are bitwise its parts in the batch.
            if (sh.n_in / 256 >= 2) {
                const int32_t n_parts = sh.n_in / 256 >= 4 ? 4 : 2;
                const int64_t part_stride = int64_t(sh.n_out) * sh.n_rows;
                device_buffer<float> yp(size_t(part_stride) * n_parts), yp1(size_t(sh.n_out) * n_parts);
                yp.poison();
                cuda::matvec_args k = a;
                k.y = yp.ptr;
                k.k_parts = n_parts;
                k.y_part_stride = part_stride;
                cuda::matvec(k, nullptr);
                const auto parts = yp.download();
                std::vector<float> summed(ref.size());
                for (size_t i = 0; i < summed.size(); ++i) {
                    float v = parts[i];
                    for (int32_t q = 1; q < n_parts; ++q) v += parts[size_t(q) * size_t(part_stride) + i];
                    summed[i] = v;
                }
                for (int32_t r = 0; r < sh.n_rows; ++r)
                    CHECK(rel_err(summed.data() + size_t(r) * sh.n_out, ref.data() + size_t(r) * sh.n_out, size_t(sh.n_out)) <=
                          tolerance::matvec);
                const int32_t r = sh.n_rows - 1;
                k.x = dx.ptr + size_t(r) * sh.n_in;
                k.y = yp1.ptr;
                k.n_pairs = 1;
                k.y_part_stride = sh.n_out;
                cuda::matvec(k, nullptr);
                const auto alone = yp1.download();
                for (int32_t q = 0; q < n_parts; ++q)
                    CHECK(std::memcmp(alone.data() + size_t(q) * sh.n_out, parts.data() + size_t(q) * part_stride + size_t(r) * sh.n_out,
                                      size_t(sh.n_out) * sizeof(float)) == 0);
            }

            // accumulate: y += W x.
            const auto base = test::random_floats(rng, ref.size());
            dy.upload(base);
            a.accumulate = true;
            cuda::matvec(a, nullptr);
            const auto acc = dy.download();
            // Measured against the terms' size: base + W x may cancel (one output of one row can
            // come out near zero), while the kernel's error scales with |base| and |W x|.
            double err = 0, scale = 0;
            for (size_t i = 0; i < ref.size(); ++i) {
                const double want = double(base[i]) + double(ref[i]), mag = std::fabs(double(base[i])) + std::fabs(double(ref[i]));
                err += (double(acc[i]) - want) * (double(acc[i]) - want);
                scale += mag * mag;
            }
            CHECK(std::isfinite(err));
            CHECK(std::sqrt(err / scale) <= tolerance::matvec);
        }
    }
}

TEST_CASE("rmsnorm, the row split and embed are bitwise the CPU's", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    std::mt19937_64 rng(7);
    // 1, 2, 4 and 8 elements per thread; 1500 and 5000 leave part of the last pass idle.
    for (int32_t n : {32, 96, 256, 1500, 2048, 4096, 5000, 8192}) {
        for (int32_t rows : {1, 5}) {
            INFO("n " << n << " rows " << rows);
            const auto x = test::random_floats(rng, size_t(n) * rows, 3.0f);
            const auto w = test::random_floats(rng, size_t(n));
            std::vector<float> ref(x.size());
            cpu::rmsnorm(x.data(), w.data(), ref.data(), rows, n, 1e-6f);
            device_buffer<float> dx(x), dw(w), dy(x.size());
            dy.poison();
            cuda::rmsnorm({dx.ptr, dw.ptr, dy.ptr, rows, n, 1e-6f}, nullptr);
            const auto got = dy.download();
            CHECK(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);
            if (n % 32 == 0) {  // the split twin for the decode products, and the same y
                device_buffer<uint16_t> ds(x.size() * 2);
                device_buffer<float> dm(x.size() / 32);
                dy.poison();
                cuda::rmsnorm_args na{dx.ptr, dw.ptr, dy.ptr, rows, n, 1e-6f};
                na.y_split = reinterpret_cast<uint4 *>(ds.ptr);
                na.y_sums = dm.ptr;
                cuda::rmsnorm(na, nullptr);
                CHECK(std::memcmp(dy.download().data(), ref.data(), ref.size() * sizeof(float)) == 0);
                CHECK(ds.download() == test::host_split(ref));
                const auto sums = dm.download(), want = test::host_sums32(ref);
                CHECK(std::memcmp(sums.data(), want.data(), want.size() * sizeof(float)) == 0);
            }
        }
    }
    // The FFN norm with the F32 router (decode rows): h, its split twin and the logits bitwise the
    // CPU's rmsnorm and cpu::matmul (dot_f32) of that h. 4, 2 and 1 experts a block (n 2048, 3072,
    // 4096); expert counts that leave the last block part idle; more h groups than blocks' warps.
    for (const int32_t n : {32, 96, 2048, 3072, 4096}) {
        for (const int32_t n_expert : {128, 6, 1}) {
            const int32_t rows = n_expert == 6 ? 17 : 3;
            INFO("norm+router n " << n << " experts " << n_expert << " rows " << rows);
            const auto x = test::random_floats(rng, size_t(n) * rows, 3.0f);
            const auto w = test::random_floats(rng, size_t(n));
            const auto router = test::random_floats(rng, size_t(n) * n_expert, 0.05f);
            std::vector<float> h_ref(x.size()), logits_ref(size_t(rows) * n_expert);
            cpu::rmsnorm(x.data(), w.data(), h_ref.data(), rows, n, 1e-6f);
            for (int32_t r = 0; r < rows; ++r)
                for (int32_t e = 0; e < n_expert; ++e)
                    logits_ref[size_t(r) * n_expert + e] = dot_f32(router.data() + size_t(e) * n, h_ref.data() + size_t(r) * n, n);
            device_buffer<float> dx(x), dw(w), drt(router), dh(x.size()), dl(logits_ref.size()), dm(x.size() / 32);
            device_buffer<uint16_t> ds(x.size() * 2);
            dh.poison();
            dl.poison();
            ds.poison();
            dm.poison();
            cuda::rmsnorm_router_args a;
            a.x = dx.ptr;
            a.w_norm = dw.ptr;
            a.router = drt.ptr;
            a.h = dh.ptr;
            a.h_split = reinterpret_cast<uint4 *>(ds.ptr);
            a.h_sums = dm.ptr;
            a.logits = dl.ptr;
            a.n_rows = rows;
            a.n = n;
            a.n_expert = n_expert;
            REQUIRE(cuda::rmsnorm_router_applies(n, n_expert));
            cuda::rmsnorm_router(a, nullptr);
            const auto h = dh.download(), logits = dl.download(), sums = dm.download(), want_sums = test::host_sums32(h_ref);
            CHECK(std::memcmp(h.data(), h_ref.data(), h_ref.size() * sizeof(float)) == 0);
            CHECK(std::memcmp(logits.data(), logits_ref.data(), logits_ref.size() * sizeof(float)) == 0);
            CHECK(ds.download() == test::host_split(h_ref));
            CHECK(std::memcmp(sums.data(), want_sums.data(), want_sums.size() * sizeof(float)) == 0);
            if (n % 256 == 0) {  // h as int8 digits for the experts' gate/up instead of the split twin
                device_buffer<int8_t> dd(size_t(rows) * cuda::digits_per_element * n);
                device_buffer<float> dds(size_t(rows) * n / 256), dl2(logits_ref.size()), dh2(x.size());
                device_buffer<uint16_t> ddm(size_t(rows) * n / 256 * 16);
                dd.poison();
                cuda::rmsnorm_router_args b = a;
                b.h = dh2.ptr;
                b.logits = dl2.ptr;
                b.h_split = nullptr;
                b.h_sums = nullptr;
                b.h_digits = {dd.ptr, dds.ptr, ddm.ptr};
                cuda::rmsnorm_router(b, nullptr);
                const test::host_digits want = test::quantize_host(h_ref, rows, n);
                CHECK(dd.download() == want.digits);
                CHECK(dds.download() == want.scales);
                CHECK(ddm.download() == want.sums);
                CHECK(std::memcmp(dl2.download().data(), logits_ref.data(), logits_ref.size() * sizeof(float)) == 0);
                CHECK(std::memcmp(dh2.download().data(), h_ref.data(), h_ref.size() * sizeof(float)) == 0);
            }
        }
    }
    CHECK_FALSE(cuda::rmsnorm_router_applies(100, 8));    // n not a multiple of 32
    CHECK_FALSE(cuda::rmsnorm_router_applies(4128, 8));   // shared memory beyond 48 KiB
    // The split twin of rows without a norm (the SwiGLU outputs): bitwise the host split, rows
    // of a wider stride untouched past n.
    for (const int32_t n : {32, 768, 1000 / 32 * 32}) {
        const int32_t rows = 7;
        const int64_t stride = n + 64;
        INFO("split rows n " << n);
        const auto x = test::random_floats(rng, size_t(rows) * size_t(stride), 2.0f);
        device_buffer<float> dx(x);
        device_buffer<uint16_t> ds(x.size() * 2);
        device_buffer<float> dm(x.size() / 32);
        ds.poison();
        dm.poison();
        cuda::split_rows({dx.ptr, rows, n, stride, reinterpret_cast<uint4 *>(ds.ptr), dm.ptr}, nullptr);
        const auto split = ds.download(), want_split = test::host_split(x);
        const auto sums = dm.download(), want_sums = test::host_sums32(x);
        for (int32_t r = 0; r < rows; ++r) {
            CHECK(std::memcmp(split.data() + size_t(r) * stride * 2, want_split.data() + size_t(r) * stride * 2,
                              size_t(n) * 2 * sizeof(uint16_t)) == 0);
            CHECK(std::memcmp(sums.data() + size_t(r) * stride / 32, want_sums.data() + size_t(r) * stride / 32,
                              size_t(n) / 32 * sizeof(float)) == 0);
        }
    }
    for (ggml_type type : all_types) {
        INFO("type " << ggml_type_name(type));
        const int32_t d = 512, vocab = 11;
        const auto table = random_matrix(rng, type, d, vocab, 1.0f);
        const std::vector<int32_t> tokens = {3, 0, 10, 3, 7};
        std::vector<float> ref(tokens.size() * d);
        for (size_t i = 0; i < tokens.size(); ++i)
            dequantize_row(type, table.data() + size_t(tokens[i]) * ggml_row_bytes(type, d), ref.data() + i * d, d);
        device_buffer<uint8_t> dt(table);
        device_buffer<int32_t> dtok(tokens);
        device_buffer<float> dx(ref.size());
        dx.poison();
        cuda::embed({dt.ptr, type, dtok.ptr, dx.ptr, int32_t(tokens.size()), d}, nullptr);
        const auto got = dx.download();
        CHECK(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);
    }
}

// Host arithmetic only (runs without a GPU): every row's chunks fit the partial scratch of any slot
// that holds its position, and chunk lengths are what the kernel's tiles expect.
TEST_CASE("decode attention chunks depend on the row's position and fit every slot", "[kernels]") {
    for (int32_t pos = 0; pos < 300000; pos += pos < 10000 ? 1 : 97) {
        const int32_t chunk = cuda::attention_row_chunk(pos), count = pos / chunk + 1;
        INFO("pos " << pos << " chunk " << chunk);
        REQUIRE(chunk % 32 == 0);
        REQUIRE(chunk >= 64);
        REQUIRE(count <= cuda::attention_max_chunks);
        REQUIRE(count <= cuda::attention_chunks(pos + 1));  // the smallest slot that holds pos
        REQUIRE(cuda::attention_chunks(pos + 1) <= cuda::attention_chunks(pos + 2));  // larger slots hold at least as many
        // At most 31 positions past the shortest chunk that splits the row into attention_max_chunks.
        REQUIRE(chunk <= std::max(64, (pos + cuda::attention_max_chunks) / cuda::attention_max_chunks + 31));
    }
    CHECK(cuda::attention_row_chunk(0) == 64);
    CHECK(cuda::attention_row_chunk(2047) == 64);
    CHECK(cuda::attention_row_chunk(2048) == 96);
    CHECK(cuda::attention_row_chunk(4999) == 160);
    CHECK(cuda::attention_chunks(700) == 11);
    CHECK(cuda::attention_chunks(2049) == 32);
    CHECK(cuda::attention_chunks(32768) == 32);
}

// Host arithmetic only: the tensor-core partial's blocks along z stay within one wave, give every
// block the shortest run of chunks that wave allows, and take no more blocks than that run needs.
TEST_CASE("the tensor-core attention's chunk blocks fill one wave with the shortest runs", "[kernels]") {
    for (int wave : {1, 8, 132, 396, 528})
        for (int row_blocks = 1; row_blocks <= 512; row_blocks += row_blocks < 40 ? 1 : 37)
            for (int n_chunks = 1; n_chunks <= cuda::attention_max_chunks; ++n_chunks) {
                INFO("wave " << wave << " row blocks " << row_blocks << " chunks " << n_chunks);
                const int z = cuda::attention_mma_chunk_blocks(row_blocks, n_chunks, wave);
                REQUIRE(z >= 1);
                REQUIRE(z <= n_chunks);
                REQUIRE((z == 1 || z * row_blocks <= wave));  // one wave, unless the rows alone fill it
                const int run = (n_chunks + z - 1) / z, most = std::max(1, std::min(n_chunks, wave / row_blocks));
                REQUIRE(run == (n_chunks + most - 1) / most);  // as short as the wave allows
                REQUIRE((z - 1) * run < n_chunks);             // every block has a chunk
            }
    // An H200 (132 SMs x 3 blocks) with Qwen3-30B's 4 head groups a row and 32 chunks: 1 / 4 / 8 /
    // 16 rows take 32 / 16 / 11 / 6 blocks a group (runs of 1 / 2 / 3 / 6 chunks).
    CHECK(cuda::attention_mma_chunk_blocks(4, 32, 396) == 32);
    CHECK(cuda::attention_mma_chunk_blocks(16, 32, 396) == 16);
    CHECK(cuda::attention_mma_chunk_blocks(32, 32, 396) == 11);
    CHECK(cuda::attention_mma_chunk_blocks(64, 32, 396) == 6);
}

// A KV cache on the device as the engine holds it: floats, halves or q8_0 blocks made from (and
// read back as) floats.
struct device_cache {
    test::cache_elem elem;
    size_t n;
    device_buffer<uint8_t> b;
    device_cache(const std::vector<float> &c, test::cache_elem e) : elem(e), n(c.size()), b(test::cache_encode(c, e)) {}
    void *ptr() const { return b.ptr; }
    std::vector<uint8_t> raw() const { return b.download(); }
    std::vector<float> download() const { return test::cache_decode(b.download(), elem, n); }
};

TEST_CASE("QK norm, RoPE, KV write and chunked attention match the CPU", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    struct shape { int32_t n_head, n_head_kv, d_head, n_ctx; };
    for (const test::cache_elem elem : {test::cache_elem::f32, test::cache_elem::f16, test::cache_elem::q8_0}) {
        const bool q8 = elem == test::cache_elem::q8_0;
        uint64_t seed = 50;
        // Chunks of 64 positions (one tile a chunk) up to position 2,047; position 4,999 has chunks of
        // 160, two full tiles of 64 (five of 32 for d_head 256) and a partial one; positions on and next
        // to chunk and tile edges.
        for (const shape &sh : {shape{4, 2, 32, 700}, shape{4, 2, 64, 700}, shape{8, 8, 64, 700}, shape{8, 2, 128, 700},
                                shape{32, 4, 128, 700}, shape{4, 4, 256, 700}, shape{32, 4, 128, 5000}, shape{8, 2, 256, 5000},
                                shape{16, 2, 32, 5000}, shape{64, 4, 128, 700}, shape{32, 2, 64, 5000}}) {  // last two: 16 query heads per KV head (qwen3-235b-a22b)
            ++seed;
            INFO("heads " << sh.n_head << "/" << sh.n_head_kv << " d_head " << sh.d_head << " n_ctx " << sh.n_ctx << " seed " << seed
                          << " kv " << test::cache_elem_name(elem));
            std::mt19937_64 rng(seed);
            const int32_t n_slots = 3, n_ctx = sh.n_ctx, dh = sh.d_head, kv_dim = sh.n_head_kv * dh, q_dim = sh.n_head * dh;
            const float theta = 1e6f, eps = 1e-6f;
            // Rows: several slots, consecutive positions in slot 1, chunk boundaries, a padding row.
            std::vector<int32_t> slots = {0, 1, 2, 1, -1, 2};
            std::vector<int32_t> pos = {0, 299, 127, 300, 0, 128};
            if (n_ctx > 700) {
                slots.insert(slots.end(), {0, 0, 1});
                pos.insert(pos.end(), {4999, 95, 2000});
                pos[0] = 96;
            }
            const int32_t n = int32_t(slots.size());
            std::vector<float> cache_k = test::random_floats(rng, size_t(n_slots) * n_ctx * kv_dim);
            std::vector<float> cache_v = test::random_floats(rng, cache_k.size());
            cache_k = test::cache_round(cache_k, elem);
            cache_v = test::cache_round(cache_v, elem);
            auto q = test::random_floats(rng, size_t(n) * q_dim, 2.0f);
            const auto k = test::random_floats(rng, size_t(n) * kv_dim, 2.0f);
            const auto v = test::random_floats(rng, size_t(n) * kv_dim);
            const auto qn = test::random_floats(rng, size_t(dh), 0.3f), kn = test::random_floats(rng, size_t(dh), 0.3f);
            std::vector<float> inv_freq(size_t(dh / 2));
            for (int i = 0; i < dh / 2; ++i)
                inv_freq[size_t(i)] = 1.0f / static_cast<float>(std::pow(double(theta), double(float(2 * i) / float(dh))));
            const std::vector<float> q_raw = q, cache_k0 = cache_k, cache_v0 = cache_v;  // before the step

            device_buffer<float> dq(q), dk(k), dv(v), dqn(qn), dkn(kn), dfreq(inv_freq);
            const device_cache dck(cache_k, elem), dcv(cache_v, elem);
            device_buffer<int32_t> dslots(slots), dpos(pos);
            cuda::qk_rope_kv_args ra;
            ra.q = dq.ptr; ra.k = dk.ptr; ra.v = dv.ptr; ra.q_norm = dqn.ptr; ra.k_norm = dkn.ptr; ra.inv_freq = dfreq.ptr;
            ra.slots = dslots.ptr; ra.positions = dpos.ptr; ra.k_cache = dck.ptr(); ra.v_cache = dcv.ptr();
            test::cache_flags(ra, elem);
            ra.n_rows = n; ra.n_head = sh.n_head; ra.n_head_kv = sh.n_head_kv; ra.d_head = dh; ra.n_ctx = n_ctx; ra.eps = eps;
            cuda::qk_rope_kv(ra, nullptr);

            // CPU twin: per-head norm, rope, cache write (padding row: no write; an f16 or q8_0 cache rounds).
            std::vector<float> kk = k, vr = v;
            cpu::rmsnorm(q.data(), qn.data(), q.data(), int64_t(n) * sh.n_head, dh, eps);
            cpu::rmsnorm(kk.data(), kn.data(), kk.data(), int64_t(n) * sh.n_head_kv, dh, eps);
            cpu::rope_neox(q.data(), pos.data(), n, sh.n_head, dh, theta);
            cpu::rope_neox(kk.data(), pos.data(), n, sh.n_head_kv, dh, theta);
            kk = test::cache_round(kk, elem);
            vr = test::cache_round(vr, elem);
            for (int32_t i = 0; i < n; ++i) {
                if (slots[size_t(i)] < 0) continue;
                const size_t at = (size_t(slots[size_t(i)]) * n_ctx + size_t(pos[size_t(i)])) * kv_dim;
                std::copy_n(kk.data() + size_t(i) * kv_dim, kv_dim, cache_k.data() + at);
                std::copy_n(vr.data() + size_t(i) * kv_dim, kv_dim, cache_v.data() + at);
            }
            const auto gq = dq.download(), gk = dck.download(), gv = dcv.download();
            CHECK(rel_err(gq.data(), q.data(), q.size()) <= tolerance::rope);
            if (!q8) CHECK(rel_err(gk.data(), cache_k.data(), cache_k.size()) <= tolerance::rope);
            CHECK(std::memcmp(gv.data(), cache_v.data(), gv.size() * sizeof(float)) == 0);
            if (q8) {
                // A key one rounding away from the CPU's may take the next quant, so the writer is
                // checked on the device's own keys: the same step into a float cache, whose written
                // rows quantize_row_q8_0 must turn into the q8_0 cache's blocks byte for byte.
                device_buffer<float> dq2(q_raw);
                const device_cache fk(cache_k0, test::cache_elem::f32), fv(cache_v0, test::cache_elem::f32);
                cuda::qk_rope_kv_args rf = ra;
                rf.q = dq2.ptr; rf.k_cache = fk.ptr(); rf.v_cache = fv.ptr();
                test::cache_flags(rf, test::cache_elem::f32);
                cuda::qk_rope_kv(rf, nullptr);
                const auto fk_rows = fk.download(), fv_rows = fv.download();
                const auto qk_raw = dck.raw(), qv_raw = dcv.raw();
                const size_t row_bytes = size_t(kv_dim) / 32 * sizeof(block_q8_0);
                std::vector<uint8_t> want(row_bytes);
                for (int32_t i = 0; i < n; ++i) {
                    if (slots[size_t(i)] < 0) continue;
                    INFO("row " << i);
                    const size_t at = size_t(slots[size_t(i)]) * n_ctx + size_t(pos[size_t(i)]);
                    quantize_row(ggml_type::q8_0, fk_rows.data() + at * kv_dim, want.data(), kv_dim);
                    CHECK(std::memcmp(want.data(), qk_raw.data() + at * row_bytes, row_bytes) == 0);
                    quantize_row(ggml_type::q8_0, fv_rows.data() + at * kv_dim, want.data(), kv_dim);
                    CHECK(std::memcmp(want.data(), qv_raw.data() + at * row_bytes, row_bytes) == 0);
                }
                // The attention below then compares the kernels and their twins on the device's
                // step: its queries and its caches.
                q = gq;
                cache_k = gk;
            }

            // Attention on the device's own q and caches; the CPU on its own.
            device_buffer<float> dpart(size_t(n) * sh.n_head * cuda::attention_max_chunks * (dh + 2)), dout(size_t(n) * q_dim);
            dout.poison();
            cuda::attention_args aa;
            aa.q = dq.ptr; aa.k_cache = dck.ptr(); aa.v_cache = dcv.ptr(); test::cache_flags(aa, elem); aa.slots = dslots.ptr; aa.positions = dpos.ptr;
            aa.partial = dpart.ptr; aa.out = dout.ptr; aa.n_rows = n; aa.n_head = sh.n_head; aa.n_head_kv = sh.n_head_kv;
            aa.d_head = dh; aa.n_ctx = n_ctx; aa.scale = 1.0f / std::sqrt(float(dh));
            REQUIRE(cuda::attention_chunks(n_ctx) <= cuda::attention_max_chunks);
            device_buffer<uint16_t> dsplit(size_t(n) * q_dim * 2);
            device_buffer<float> dsums(size_t(n) * q_dim / 32);
            aa.out_split = reinterpret_cast<uint4 *>(dsplit.ptr);
            aa.out_sums = dsums.ptr;
            cuda::attention(aa, nullptr);
            const auto got = dout.download();
            // The split twin of the output (padding rows: zeros) for the wo product.
            CHECK(dsplit.download() == test::host_split(got));
            {
                const auto sums = dsums.download(), want = test::host_sums32(got);
                CHECK(std::memcmp(sums.data(), want.data(), want.size() * sizeof(float)) == 0);
            }

            std::vector<const float *> kc, vc;
            std::vector<const block_q8_0 *> kq, vq;  // q8_0: the twin reads the device's blocks
            const std::vector<uint8_t> k_blocks = dck.raw(), v_blocks = dcv.raw();
            std::vector<int32_t> real_pos;
            std::vector<float> real_q;
            std::vector<int32_t> real_rows;
            for (int32_t i = 0; i < n; ++i) {
                if (slots[size_t(i)] < 0) continue;
                kc.push_back(cache_k.data() + size_t(slots[size_t(i)]) * n_ctx * kv_dim);
                vc.push_back(cache_v.data() + size_t(slots[size_t(i)]) * n_ctx * kv_dim);
                kq.push_back(reinterpret_cast<const block_q8_0 *>(k_blocks.data()) + size_t(slots[size_t(i)]) * n_ctx * kv_dim / 32);
                vq.push_back(reinterpret_cast<const block_q8_0 *>(v_blocks.data()) + size_t(slots[size_t(i)]) * n_ctx * kv_dim / 32);
                real_pos.push_back(pos[size_t(i)]);
                real_q.insert(real_q.end(), q.begin() + size_t(i) * q_dim, q.begin() + size_t(i + 1) * q_dim);
                real_rows.push_back(i);
            }
            std::vector<float> ref(real_q.size());
            cpu::attention_args ca{real_q.data(), kc.data(), vc.data(), real_pos.data(), ref.data(), int64_t(real_rows.size()),
                                   sh.n_head, sh.n_head_kv, dh, 1.0f / std::sqrt(float(dh))};
            if (q8) {
                ca.k_q8 = kq.data();
                ca.v_q8 = vq.data();
            }
            cpu::attention(cpu::cpu_context{4}, ca);
            for (size_t j = 0; j < real_rows.size(); ++j) {
                INFO("row " << real_rows[j] << " pos " << real_pos[j]);
                CHECK(rel_err(got.data() + size_t(real_rows[j]) * q_dim, ref.data() + j * q_dim, size_t(q_dim)) <= tolerance::attention);
            }
            for (int32_t i = 0; i < n; ++i)
                if (slots[size_t(i)] < 0)
                    for (int32_t e = 0; e < q_dim; ++e) CHECK(got[size_t(i) * q_dim + e] == 0.0f);

            // Fused (attention_args::k_new) on a decode step: each slot's first row and the padding
            // row. Output, split twin and both caches bitwise qk_rope_kv then attention on the same rows.
            std::vector<int32_t> f_slots, f_pos;
            std::vector<float> f_q, f_k, f_v;
            for (int32_t i = 0; i < n; ++i) {
                const int32_t sl = slots[size_t(i)];
                if (sl >= 0 && std::find(f_slots.begin(), f_slots.end(), sl) != f_slots.end()) continue;
                f_slots.push_back(sl);
                f_pos.push_back(pos[size_t(i)]);
                f_q.insert(f_q.end(), q_raw.begin() + size_t(i) * q_dim, q_raw.begin() + size_t(i + 1) * q_dim);
                f_k.insert(f_k.end(), k.begin() + size_t(i) * kv_dim, k.begin() + size_t(i + 1) * kv_dim);
                f_v.insert(f_v.end(), v.begin() + size_t(i) * kv_dim, v.begin() + size_t(i + 1) * kv_dim);
            }
            const int32_t fn = int32_t(f_slots.size());
            REQUIRE(fn >= 4);
            struct step_out { std::vector<float> out, sums; std::vector<uint8_t> ck, cv; std::vector<uint16_t> split; };
            auto run_step = [&](bool fused) {
                device_buffer<float> sq(f_q), sk(f_k), sv(f_v), sout(size_t(fn) * q_dim), ssums(size_t(fn) * q_dim / 32);
                const device_cache sck(cache_k0, elem), scv(cache_v0, elem);
                device_buffer<float> spart(size_t(fn) * sh.n_head * cuda::attention_max_chunks * (dh + 2));
                device_buffer<uint16_t> ssplit(size_t(fn) * q_dim * 2);
                device_buffer<int32_t> sslots(f_slots), spos(f_pos);
                sout.poison();
                cuda::attention_args fa = aa;
                fa.q = sq.ptr; fa.k_cache = sck.ptr(); fa.v_cache = scv.ptr(); fa.slots = sslots.ptr; fa.positions = spos.ptr;
                fa.partial = spart.ptr; fa.out = sout.ptr; fa.n_rows = fn;
                fa.out_split = reinterpret_cast<uint4 *>(ssplit.ptr); fa.out_sums = ssums.ptr;
                if (fused) {
                    fa.k_new = sk.ptr; fa.v_new = sv.ptr; fa.q_norm = dqn.ptr; fa.k_norm = dkn.ptr; fa.inv_freq = dfreq.ptr; fa.eps = eps;
                } else {
                    cuda::qk_rope_kv_args fr = ra;
                    fr.q = sq.ptr; fr.k = sk.ptr; fr.v = sv.ptr; fr.slots = sslots.ptr; fr.positions = spos.ptr;
                    fr.k_cache = sck.ptr(); fr.v_cache = scv.ptr(); fr.n_rows = fn;
                    cuda::qk_rope_kv(fr, nullptr);
                }
                cuda::attention(fa, nullptr);
                return step_out{sout.download(), ssums.download(), sck.raw(), scv.raw(), ssplit.download()};
            };
            const step_out two = run_step(false), one = run_step(true);
            CHECK(std::memcmp(one.out.data(), two.out.data(), two.out.size() * sizeof(float)) == 0);
            CHECK(std::memcmp(one.sums.data(), two.sums.data(), two.sums.size() * sizeof(float)) == 0);
            CHECK(one.split == two.split);
            CHECK(one.ck == two.ck);
            CHECK(one.cv == two.cv);
            CHECK(two.ck != test::cache_encode(cache_k0, elem));  // the step wrote keys
        }
    }
}

TEST_CASE("routing, grouping by expert, grouped SwiGLU experts and the combine match the CPU", "[gpu][kernels]") {
    if (!test::gpu_present()) return;
    struct shape { int32_t n_expert, k, n_rows, d_model, d_ff; ggml_type type; };
    uint64_t seed = 300;
    // Also: 600 rows (several routing batches; more pairs than the route kernel keeps in shared
    // memory), 512 experts with k 32 (the largest), d_model 2048 and 4352 (2 and 5 combine
    // elements per thread), d_ff 768 in Q4_K and Q6_K (down in three-warp blocks), and Q4_K
    // SwiGLU over more than 64 pairs (one-warp blocks of virtual warps) with K of 8 chunks; 256
    // experts (8 a lane in the routing kernels), in a step and alone.
    for (const shape &sh : {shape{4, 2, 1, 256, 256, ggml_type::q4_k}, shape{8, 2, 5, 256, 512, ggml_type::q8_0},
                            shape{128, 8, 16, 512, 256, ggml_type::q4_k}, shape{64, 4, 33, 256, 256, ggml_type::q6_k},
                            shape{40, 3, 9, 96, 64, ggml_type::f32}, shape{128, 8, 600, 64, 32, ggml_type::f32},
                            shape{512, 32, 11, 64, 32, ggml_type::f32}, shape{128, 8, 3, 2048, 64, ggml_type::q8_0},
                            shape{16, 4, 2, 4352, 32, ggml_type::f32}, shape{16, 4, 7, 256, 768, ggml_type::q4_k},
                            shape{8, 2, 3, 256, 768, ggml_type::q6_k}, shape{32, 8, 12, 2048, 256, ggml_type::q4_k},
                            shape{256, 8, 5, 64, 32, ggml_type::f32}, shape{256, 8, 1, 64, 32, ggml_type::f32}}) {
        ++seed;
        INFO("experts " << sh.n_expert << " k " << sh.k << " rows " << sh.n_rows << " type " << ggml_type_name(sh.type)
                        << " seed " << seed);
        std::mt19937_64 rng(seed);
        const int32_t n = sh.n_rows, ne = sh.n_expert, k = sh.k, d = sh.d_model, ff = sh.d_ff;
        auto logits = test::random_floats(rng, size_t(n) * ne);
        // Ties: row 0 all equal (top-k must be 0..k-1); row 1 duplicates the best value.
        std::fill(logits.begin(), logits.begin() + ne, 0.5f);
        if (n > 1) {
            float *l1 = logits.data() + ne;
            const int32_t best = int32_t(std::max_element(l1, l1 + ne) - l1);
            l1[(best + ne / 2) % ne] = l1[best];
        }
        // Duplicate experts across rows: the last row repeats the second.
        if (n > 2) std::copy_n(logits.data() + ne, ne, logits.data() + size_t(n - 1) * ne);
        std::vector<int32_t> slots(size_t(n), 0);
        if (n > 3) slots[2] = -1;  // a padding row is routed nowhere

        std::vector<int32_t> ids_ref(size_t(n) * k);
        std::vector<float> w_ref(ids_ref.size());
        cpu::moe_route(logits.data(), n, ne, k, true, ids_ref.data(), w_ref.data());

        const int32_t max_groups = cuda::moe_max_groups(n, ne, k);
        device_buffer<float> dlog(logits), dw(ids_ref.size());
        device_buffer<int32_t> dslots(slots), dids(ids_ref.size()), dge{size_t(max_groups)}, dgo{size_t(max_groups) + 1},
            dng{1}, dpx{ids_ref.size()}, dpy{ids_ref.size()};
        cuda::moe_route_args ra;
        ra.logits = dlog.ptr; ra.slots = dslots.ptr; ra.ids = dids.ptr; ra.weights = dw.ptr; ra.group_expert = dge.ptr;
        ra.group_off = dgo.ptr; ra.n_groups = dng.ptr; ra.pair_x = dpx.ptr; ra.pair_y = dpy.ptr;
        ra.n_rows = n; ra.n_expert = ne; ra.k = k; ra.renormalise = true;
        cuda::moe_route(ra, nullptr);
        const auto ids = dids.download();
        const auto wts = dw.download();
        for (int32_t r = 0; r < n; ++r) {
            INFO("row " << r);
            for (int32_t s = 0; s < k; ++s) {
                const size_t p = size_t(r) * k + s;
                if (slots[size_t(r)] < 0) {
                    CHECK(ids[p] == -1);
                    continue;
                }
                CHECK(ids[p] == ids_ref[p]);
            }
            if (slots[size_t(r)] >= 0)
                CHECK(rel_err(wts.data() + size_t(r) * k, w_ref.data() + size_t(r) * k, size_t(k)) <= tolerance::route_weights);
        }
        for (int32_t s = 0; s < k; ++s) CHECK(ids[size_t(s)] == s);  // row 0: all tied, lower ids first

        // Grouping: experts ascending, every valid pair exactly once, in its expert's group.
        const int32_t ng = dng.download()[0];
        const auto ge = dge.download(), go = dgo.download(), px = dpx.download(), py = dpy.download();
        std::vector<int> seen(ids.size(), 0);
        int32_t valid = 0;
        for (int32_t p = 0; p < n * k; ++p) valid += ids[size_t(p)] >= 0;
        REQUIRE(ng >= 1);
        CHECK(go[0] == 0);
        CHECK(go[size_t(ng)] == valid);
        for (int32_t g = 0; g < ng; ++g) {
            if (g > 0) CHECK(ge[size_t(g)] > ge[size_t(g) - 1]);
            for (int32_t i = go[size_t(g)]; i < go[size_t(g) + 1]; ++i) {
                CHECK(ids[size_t(py[size_t(i)])] == ge[size_t(g)]);
                CHECK(px[size_t(i)] == py[size_t(i)] / k);
                ++seen[size_t(py[size_t(i)])];
            }
        }
        for (int32_t p = 0; p < n * k; ++p) CHECK(seen[size_t(p)] == (ids[size_t(p)] >= 0 ? 1 : 0));
        {
            // The router's K parts (matvec_args::k_parts): three parts routed as their sum in part
            // order, bitwise the routing of that sum.
            const auto p0 = test::random_floats(rng, logits.size()), p1 = test::random_floats(rng, logits.size()),
                       p2 = test::random_floats(rng, logits.size());
            std::vector<float> parts(logits.size() * 3), summed(logits.size());
            for (size_t i = 0; i < logits.size(); ++i) {
                parts[i] = p0[i];
                parts[logits.size() + i] = p1[i];
                parts[2 * logits.size() + i] = p2[i];
                summed[i] = (p0[i] + p1[i]) + p2[i];
            }
            device_buffer<float> dparts(parts), dsum(summed), w1(ids_ref.size()), w2(ids_ref.size());
            device_buffer<int32_t> i1(ids_ref.size()), i2(ids_ref.size()), ge2{size_t(max_groups)}, go2{size_t(max_groups) + 1},
                ng2{1}, px2{ids_ref.size()}, py2{ids_ref.size()};
            cuda::moe_route_args rp = ra;
            rp.group_expert = ge2.ptr; rp.group_off = go2.ptr; rp.n_groups = ng2.ptr; rp.pair_x = px2.ptr; rp.pair_y = py2.ptr;
            rp.logits = dsum.ptr; rp.ids = i1.ptr; rp.weights = w1.ptr;
            cuda::moe_route(rp, nullptr);
            rp.logits = dparts.ptr; rp.ids = i2.ptr; rp.weights = w2.ptr;
            rp.n_logit_parts = 3;
            rp.logit_part_stride = int64_t(logits.size());
            cuda::moe_route(rp, nullptr);
            CHECK(i2.download() == i1.download());
            const auto wa = w1.download(), wb = w2.download();
            CHECK(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)) == 0);
        }

        // Grouped experts: gate+up (SwiGLU) then down, against cpu::moe_grouped on the same ids.
        const auto gate = random_matrix(rng, sh.type, d, int64_t(ff) * ne, 0.06f);
        const auto up = random_matrix(rng, sh.type, d, int64_t(ff) * ne, 0.06f);
        const auto down = random_matrix(rng, sh.type, ff, int64_t(d) * ne, 0.06f);
        const auto h = test::random_floats(rng, size_t(n) * d);
        const std::vector<float> out_ref = test::cpu_grouped_ffn(gate, up, down, sh.type, ne, d, ff, h, ids, k);

        device_buffer<uint8_t> dgate(gate), dup(up), ddown(down);
        device_buffer<float> dh(h), dact(size_t(n) * k * ff), dout(out_ref.size());
        dout.poison();
        const test::route_groups rg{dpx.ptr, dpy.ptr, dge.ptr, dgo.ptr, dng.ptr, max_groups};
        const test::grouped_ffn_args f =
            test::grouped_ffn(dgate.ptr, dup.ptr, ddown.ptr, sh.type, d, ff, dh.ptr, dact.ptr, dout.ptr, rg, n, k);
        cuda::matvec(f.gate_up, nullptr);
        cuda::matvec(f.down, nullptr);
        auto out = dout.download();
        for (int32_t p = 0; p < n * k; ++p) {
            if (ids[size_t(p)] < 0) continue;
            INFO("pair " << p);
            CHECK(rel_err(out.data() + size_t(p) * d, out_ref.data() + size_t(p) * d, size_t(d)) <= tolerance::moe);
        }
        {
            // gate/up over pre-split rows (cuda/x_split.cuh): the same SwiGLU outputs, bitwise.
            device_buffer<uint16_t> dsplit(test::host_split(h));
            device_buffer<float> dsums(test::host_sums32(h)), dact2(dact.count);
            cuda::matvec_args gs = f.gate_up;
            gs.x_split = reinterpret_cast<const uint4 *>(dsplit.ptr);
            gs.x_sums = dsums.ptr;
            gs.y = dact2.ptr;
            cuda::matvec(gs, nullptr);
            const auto act = dact.download(), act2 = dact2.download();
            for (int32_t p = 0; p < n * k; ++p) {
                if (ids[size_t(p)] < 0) continue;
                INFO("pair " << p);
                CHECK(std::memcmp(act2.data() + size_t(p) * ff, act.data() + size_t(p) * ff, size_t(ff) * sizeof(float)) == 0);
            }
        }
        if (sh.type == ggml_type::q4_k) {
            // Several weight-row tiles a block (matvec_forced::row_tiles), weights staged in shared
            // memory or streamed (matvec_forced::staged): the same outputs, bitwise, also where a block's last
            // tile runs past n_out (n_out cut so 16 * tiles does not divide it).
            for (const bool swiglu : {true, false}) {
                cuda::matvec_args base = swiglu ? f.gate_up : f.down;
                base.n_out -= swiglu ? 40 : 24;
                const int32_t width = swiglu ? ff : d;
                std::vector<float> first;
                for (const int32_t tiles : {1, 2}) for (const int32_t stage : {0, 1}) {
                    INFO((swiglu ? "gate/up" : "down") << " row tiles " << tiles << " staged " << stage);
                    device_buffer<float> y(size_t(n) * k * width);
                    y.poison();
                    cuda::matvec_args ta = base;
                    ta.y = y.ptr;
                    const cuda::matvec_plan plan = cuda::plan_matvec(ta, cuda::current_device_facts(), {.row_tiles = tiles, .staged = stage});
                    CHECK(plan.row_tiles == tiles);
                    cuda::matvec(ta, plan, nullptr);
                    auto got = y.download();
                    for (int32_t p = 0; p < n * k; ++p)  // pairs routed nowhere and columns past n_out: not written
                        for (int32_t j = 0; j < width; ++j)
                            if (ids[size_t(p)] < 0 || j >= base.n_out) got[size_t(p) * width + j] = 0.0f;
                    if (first.empty())
                        first = got;
                    else
                        CHECK(std::memcmp(got.data(), first.data(), got.size() * sizeof(float)) == 0);
                }
            }
        }

        // Combine + next norm: bitwise the CPU's moe_combine then rmsnorm, on the same inputs.
        for (int32_t p = 0; p < n * k; ++p)
            if (ids[size_t(p)] < 0) std::fill_n(out.data() + size_t(p) * d, d, 0.0f);
        const auto x0 = test::random_floats(rng, size_t(n) * d);
        const auto norm_w = test::random_floats(rng, size_t(d));
        std::vector<float> x_ref = x0, h_ref(x0.size());
        std::vector<float> w_cpu = wts;
        for (int32_t r = 0; r < n; ++r)
            if (slots[size_t(r)] < 0) std::fill_n(w_cpu.data() + size_t(r) * k, k, 0.0f);
        cpu::moe_combine(x_ref.data(), out.data(), w_cpu.data(), n, k, d);
        for (int32_t r = 0; r < n; ++r)
            if (slots[size_t(r)] < 0) std::copy_n(x0.data() + size_t(r) * d, d, x_ref.data() + size_t(r) * d);
        cpu::rmsnorm(x_ref.data(), norm_w.data(), h_ref.data(), n, d, 1e-6f);
        device_buffer<float> dx(x0), dout2(out), dnorm(norm_w), dh2(x0.size());
        cuda::moe_combine_args ca;
        ca.x = dx.ptr; ca.out = dout2.ptr; ca.weights = dw.ptr; ca.slots = dslots.ptr; ca.norm = dnorm.ptr; ca.h = dh2.ptr;
        ca.n_rows = n; ca.k = k; ca.d_model = d; ca.eps = 1e-6f;
        device_buffer<uint16_t> dhs(x0.size() * 2);
        device_buffer<float> dhm(x0.size() / 32);
        if (d % 32 == 0) {
            ca.h_split = reinterpret_cast<uint4 *>(dhs.ptr);
            ca.h_sums = dhm.ptr;
        }
        cuda::moe_combine(ca, nullptr);
        const auto gx = dx.download(), gh = dh2.download();
        CHECK(std::memcmp(gx.data(), x_ref.data(), gx.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(gh.data(), h_ref.data(), gh.size() * sizeof(float)) == 0);
        if (d % 32 == 0) {  // h's split twin for the next layer's products
            CHECK(dhs.download() == test::host_split(h_ref));
            const auto sums = dhm.download(), want = test::host_sums32(h_ref);
            CHECK(std::memcmp(sums.data(), want.data(), want.size() * sizeof(float)) == 0);
        }
    }
}
