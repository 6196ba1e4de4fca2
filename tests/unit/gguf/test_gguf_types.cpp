// tests/unit/gguf/test_gguf_types.cpp - the ggml type table: every enum id known, names parse
// back, sizes agree with the bits-per-weight figures ggml documents for each block layout.
#include "tandem/types.h"

#include <catch2/catch.hpp>

#include <cctype>
#include <string>

using tandem::ggml_type;

TEST_CASE("types: every id of the enum is known and its name parses back", "[gguf]") {
    const ggml_type all[] = {
        ggml_type::f32,     ggml_type::f16,    ggml_type::q4_0,    ggml_type::q4_1,   ggml_type::q5_0,
        ggml_type::q5_1,    ggml_type::q8_0,   ggml_type::q8_1,    ggml_type::q2_k,   ggml_type::q3_k,
        ggml_type::q4_k,    ggml_type::q5_k,   ggml_type::q6_k,    ggml_type::q8_k,   ggml_type::iq2_xxs,
        ggml_type::iq2_xs,  ggml_type::iq3_xxs, ggml_type::iq1_s,  ggml_type::iq4_nl, ggml_type::iq3_s,
        ggml_type::iq2_s,   ggml_type::iq4_xs, ggml_type::i8,      ggml_type::i16,    ggml_type::i32,
        ggml_type::i64,     ggml_type::f64,    ggml_type::iq1_m,   ggml_type::bf16,   ggml_type::tq1_0,
        ggml_type::tq2_0,   ggml_type::mxfp4,
    };
    for (ggml_type t : all) {
        const auto id = static_cast<uint32_t>(t);
        INFO("id " << id);
        const auto info = tandem::ggml_type_info(id);
        REQUIRE(info.has_value());
        CHECK(info->name == tandem::ggml_type_name(t));
        CHECK(tandem::ggml_type_from_name(info->name) == t);
        std::string upper(info->name);
        for (char &c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        CHECK(tandem::ggml_type_from_name(upper) == t);
        CHECK(info->block_elems >= 1);
        CHECK(info->block_bytes >= 1);
    }
    // Ids ggml retired (q4_2, q4_3, the repacked q4_0/iq4_nl variants) or does not have.
    for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 1000u}) CHECK_FALSE(tandem::ggml_type_info(id));
    CHECK_FALSE(tandem::ggml_type_from_name("q4_k_m"));
    CHECK_FALSE(tandem::ggml_type_from_name(""));
}

TEST_CASE("types: block sizes give ggml's documented bits per weight", "[gguf]") {
    // Bits per weight as stated in ggml-common.h's block comments and llama-quantize's help.
    const std::pair<ggml_type, double> bpw[] = {
        {ggml_type::f32, 32},       {ggml_type::f16, 16},        {ggml_type::bf16, 16},
        {ggml_type::q4_0, 4.5},     {ggml_type::q4_1, 5},        {ggml_type::q5_0, 5.5},
        {ggml_type::q5_1, 6},       {ggml_type::q8_0, 8.5},      {ggml_type::q8_1, 9},
        {ggml_type::q2_k, 2.625},   {ggml_type::q3_k, 3.4375},   {ggml_type::q4_k, 4.5},
        {ggml_type::q5_k, 5.5},     {ggml_type::q6_k, 6.5625},   {ggml_type::iq2_xxs, 2.0625},
        {ggml_type::iq2_xs, 2.3125}, {ggml_type::iq3_xxs, 3.0625}, {ggml_type::iq1_s, 1.5625},
        {ggml_type::iq4_nl, 4.5},   {ggml_type::iq3_s, 3.4375},  {ggml_type::iq2_s, 2.5625},
        {ggml_type::iq4_xs, 4.25},  {ggml_type::iq1_m, 1.75},    {ggml_type::tq1_0, 1.6875},
        {ggml_type::tq2_0, 2.0625}, {ggml_type::mxfp4, 4.25},
    };
    for (const auto &[t, bits] : bpw) {
        const auto &info = tandem::ggml_type_info(t);
        INFO(info.name);
        CHECK(8.0 * static_cast<double>(info.block_bytes) / static_cast<double>(info.block_elems) == bits);
    }
}

TEST_CASE("types: computable types and row bytes", "[gguf]") {
    for (uint32_t id = 0; id < 64; ++id) {
        const auto info = tandem::ggml_type_info(id);
        if (!info) continue;
        const auto t = static_cast<ggml_type>(id);
        // Everything but the activation-only q8_1/q8_K, the integer and f64 types and the ternary TQ types.
        const bool want = !(t == ggml_type::q8_1 || t == ggml_type::q8_k || t == ggml_type::i8 || t == ggml_type::i16 ||
                            t == ggml_type::i32 || t == ggml_type::i64 || t == ggml_type::f64 || t == ggml_type::tq1_0 ||
                            t == ggml_type::tq2_0);
        CHECK(info->computable == want);
    }
    CHECK(tandem::ggml_row_bytes(ggml_type::q4_k, 2048) == 8 * 144);
    CHECK(tandem::ggml_row_bytes(ggml_type::q8_0, 96) == 3 * 34);
    CHECK(tandem::ggml_row_bytes(ggml_type::f32, 7) == 28);
    CHECK(tandem::ggml_row_bytes(ggml_type::q6_k, 0) == 0);
}
