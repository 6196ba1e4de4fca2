// tests/fuzz/fuzz_gguf.cpp - libFuzzer target for the GGUF reader: any input must either parse
// (and then every KV, getter and tensor byte must be safe to touch) or throw file_format.
// Also compiled into test_gguf, which replays the seed corpus through the same function.
#include "tandem/error.h"
#include "tandem/gguf.h"

#include <cstdint>
#include <cstdlib>
#include <span>

namespace {

// Calls a getter and ignores the typed error it may throw for a key of another type.
template <class Fn>
void try_get(Fn &&fn) {
    try {
        fn();
    } catch (const tandem::error &e) {
        if (e.kind() != tandem::error_kind::file_format) std::abort();
    }
}

uint64_t touch_value(const tandem::gguf_value &v) {
    uint64_t h = static_cast<uint64_t>(v.type);
    if (const auto *s = std::get_if<std::string>(&v.data))
        for (char c : *s) h = h * 31 + static_cast<uint8_t>(c);
    if (const auto *a = std::get_if<tandem::gguf_array>(&v.data)) {
        for (int64_t x : a->ints) h = h * 31 + static_cast<uint64_t>(x);
        for (double x : a->floats) h += static_cast<uint64_t>(x == x);
        for (const auto &s : a->strings) h = h * 31 + s.size() + (s.empty() ? 0 : static_cast<uint8_t>(s.back()));
        h += a->size();
    }
    return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    volatile uint64_t sink = 0;
    try {
        const auto f = tandem::gguf_file::from_memory(std::span<const uint8_t>(data, size));
        for (const auto &kv : f->kvs()) {
            sink = sink + touch_value(kv.value);
            if (f->find(kv.key) != &kv.value) std::abort();  // the index must agree with the list
            try_get([&] { sink = sink + static_cast<uint64_t>(f->get_int(kv.key)); });
            try_get([&] { sink = sink + static_cast<uint64_t>(f->get_float(kv.key) != 0); });
            try_get([&] { sink = sink + f->get_bool(kv.key, false); });
            try_get([&] { sink = sink + f->get_string(kv.key).size(); });
            try_get([&] { sink = sink + f->get_array(kv.key).size(); });
        }
        for (const auto &t : f->tensors()) {
            if (f->find_tensor(t.name) != &t) std::abort();
            // Every byte the reader vouches for must be inside the input (ASan checks the reads).
            for (uint64_t i = 0; i < t.n_bytes; ++i) sink = sink + t.data[i];
            const size_t row = tandem::ggml_row_bytes(t.type, t.ne[0]);
            if (row * static_cast<uint64_t>(t.n_rows()) != t.n_bytes) std::abort();
            sink = sink + tandem::ggml_type_name(t.type).size();
        }
    } catch (const tandem::error &e) {
        if (e.kind() != tandem::error_kind::file_format) std::abort();
    }
    return 0;
}
