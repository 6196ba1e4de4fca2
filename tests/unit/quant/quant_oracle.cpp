// tests/unit/quant/quant_oracle.cpp - a command-line window on quant.h for the Python reference
// test (tests/tools/test_quant_reference.py): `quant_oracle dequantize TYPE IN OUT` reads blocks
// of TYPE and writes float32; `quant_oracle quantize TYPE IN OUT [ROW_LEN [IMPORTANCE]]` the
// other way round, as rows of ROW_LEN (default: one row) with ROW_LEN float32 importance values.
#include "tandem/error.h"
#include "tandem/quant.h"
#include "tandem/types.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char **argv) {
    using namespace tandem;
    if (argc < 5 || argc > 7) {
        std::fprintf(stderr, "usage: quant_oracle dequantize|quantize TYPE IN OUT [ROW_LEN [IMPORTANCE]]\n");
        return 2;
    }
    const std::string op = argv[1];
    const auto type = ggml_type_from_name(argv[2]);
    if (!type || (op != "dequantize" && op != "quantize")) {
        std::fprintf(stderr, "quant_oracle: bad operation or type\n");
        return 2;
    }
    std::ifstream in(argv[3], std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto &traits = ggml_type_info(*type);
    std::vector<char> out;
    try {
        if (op == "dequantize") {
            const auto n = static_cast<int64_t>(bytes.size()) / traits.block_bytes * traits.block_elems;
            out.resize(static_cast<size_t>(n) * sizeof(float));
            dequantize_row(*type, bytes.data(), reinterpret_cast<float *>(out.data()), n);
        } else {
            const auto n = static_cast<int64_t>(bytes.size() / sizeof(float));
            std::vector<float> x(static_cast<size_t>(n));
            std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char *>(x.data()));
            const int64_t row_len = argc > 5 ? std::stoll(argv[5]) : n;
            std::vector<float> importance;
            if (argc > 6) {
                std::ifstream f(argv[6], std::ios::binary);
                const std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
                importance.resize(raw.size() / sizeof(float));
                std::copy(raw.begin(), raw.end(), reinterpret_cast<char *>(importance.data()));
                if (static_cast<int64_t>(importance.size()) != row_len) {
                    std::fprintf(stderr, "quant_oracle: %zu importance values for rows of %lld\n", importance.size(),
                                 static_cast<long long>(row_len));
                    return 2;
                }
            }
            const int64_t n_rows = row_len > 0 ? n / row_len : 0;
            out.resize(ggml_row_bytes(*type, row_len) * static_cast<size_t>(n_rows));
            quantize_rows(*type, x.data(), out.data(), n_rows, row_len, importance.empty() ? nullptr : importance.data());
        }
    } catch (const error &e) {
        std::fprintf(stderr, "quant_oracle: %s\n", e.what());
        return 1;
    }
    std::ofstream(argv[4], std::ios::binary).write(out.data(), static_cast<std::streamsize>(out.size()));
    return 0;
}
