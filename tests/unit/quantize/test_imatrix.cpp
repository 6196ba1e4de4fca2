// tests/unit/quantize/test_imatrix.cpp - importance matrices in llama-imatrix's GGUF and legacy
// .dat formats: values are the sums divided by the counts, as llama-quantize computes them.
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/quantize.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>

using namespace tandem;

namespace {

std::string temp_path(const char *name) { return std::string(P_tmpdir) + "/tandem_test_imatrix_" + name; }

// NAME.in_sum2 [ne0][n_mat] and NAME.counts [1][n_mat] per entry, as llama-imatrix writes them.
void write_gguf_imatrix(const std::string &path, const std::string &name, std::vector<float> sums,
                        std::vector<float> counts, bool with_counts = true) {
    gguf_writer w;
    w.set_string("general.type", "imatrix");
    w.set_array_string("imatrix.datasets", {"calibration.txt"});
    w.set_u32("imatrix.chunk_count", 42);
    w.set_u32("imatrix.chunk_size", 512);
    const int64_t n_mat = int64_t(counts.size()), ne0 = int64_t(sums.size()) / n_mat;
    w.add_tensor(name + ".in_sum2", ggml_type::f32, {ne0, n_mat},
                 [sums](uint8_t *dst) { std::memcpy(dst, sums.data(), sums.size() * 4); });
    if (with_counts)
        w.add_tensor(name + ".counts", ggml_type::f32, {1, n_mat},
                     [counts](uint8_t *dst) { std::memcpy(dst, counts.data(), counts.size() * 4); });
    w.write(path, 1);
}

template <class T>
void put(std::ofstream &out, T v) {
    out.write(reinterpret_cast<const char *>(&v), sizeof v);
}

}  // namespace

TEST_CASE("imatrix GGUF: sums over counts per matrix, weight 1 where nothing was seen", "[quantize][imatrix]") {
    const std::string path = temp_path("a.gguf");
    // Two experts of four columns: the first saw 4 rows, the second none.
    write_gguf_imatrix(path, "blk.0.ffn_down_exps.weight", {4, 8, 2, 6, 5, 5, 5, 5}, {4, 0});
    const imatrix_data im = imatrix_read(path);
    REQUIRE(im.values.size() == 1);
    CHECK(im.values.at("blk.0.ffn_down_exps.weight") == std::vector<float>{1, 2, 0.5f, 1.5f, 1, 1, 1, 1});
    CHECK(im.datasets == std::vector<std::string>{"calibration.txt"});
    CHECK(im.chunk_count == 42);
    write_gguf_imatrix(path, "blk.0.attn_q.weight", {1, 2}, {1}, false);
    CHECK_THROWS_WITH(imatrix_read(path), Catch::Contains("blk.0.attn_q.weight"));
    std::remove(path.c_str());
}

TEST_CASE("legacy imatrix .dat: sums over the call count, then chunks and dataset", "[quantize][imatrix]") {
    const std::string path = temp_path("b.dat");
    {
        std::ofstream out(path, std::ios::binary);
        put<int32_t>(out, 1);
        const std::string name = "blk.1.attn_v.weight";
        put<int32_t>(out, int32_t(name.size()));
        out.write(name.data(), std::streamsize(name.size()));
        put<int32_t>(out, 10);  // ncall
        put<int32_t>(out, 3);   // nval
        for (float v : {10.0f, 25.0f, 0.5f}) put(out, v);
        put<int32_t>(out, 7);  // chunks
        const std::string dataset = "wiki.train.raw";
        put<int32_t>(out, int32_t(dataset.size()));
        out.write(dataset.data(), std::streamsize(dataset.size()));
    }
    const imatrix_data im = imatrix_read(path);
    CHECK(im.values.at("blk.1.attn_v.weight") == std::vector<float>{1.0f, 2.5f, 0.05f});
    CHECK(im.chunk_count == 7);
    CHECK(im.datasets == std::vector<std::string>{"wiki.train.raw"});
    {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        put<int32_t>(out, 2);  // two entries promised, none written
    }
    CHECK_THROWS_AS(imatrix_read(path), tandem::error);
    std::remove(path.c_str());
}
