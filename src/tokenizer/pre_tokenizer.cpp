// src/tokenizer/pre_tokenizer.cpp - the pre-tokenizer regexes (PCRE2) and NFC (ICU).
#include "pre_tokenizer.h"

#include "tandem/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

namespace tandem {

namespace {

// HF runs these regexes with Oniguruma, whose Unicode `\s` is the White_Space property. PCRE2's
// UCP `\s` is \p{Z}+\h+\v, which adds U+180E (no longer White_Space since Unicode 6.3), so `\s`
// is spelled out as the White_Space set and `\S` as its complement.
#define TANDEM_WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

// Qwen2/Qwen3 tokenizer.json: Split(pattern, Isolated) before ByteLevel(use_regex=false).
constexpr const char *qwen2_pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^" TANDEM_WS "\\p{L}\\p{N}]+[\\r\\n]*|[" TANDEM_WS "]*[\\r\\n]+"
    "|[" TANDEM_WS "]+(?![^" TANDEM_WS "])|[" TANDEM_WS "]+";

// GPT-2's own pattern (what HF's ByteLevel(use_regex=true) runs), for vocabs whose pre is
// "default" or missing. llama.cpp's "default" differs: it first splits punctuation runs and
// 3-digit groups; files we write always say "qwen2", so this is a best effort for others.
// Note it joins digit runs (" ?\p{N}+") where qwen2 splits them.
constexpr const char *gpt2_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" TANDEM_WS "\\p{L}\\p{N}]+"
    "|[" TANDEM_WS "]+(?![^" TANDEM_WS "])|[" TANDEM_WS "]+";

#undef TANDEM_WS

pcre2_code *as_code(void *p) { return static_cast<pcre2_code *>(p); }

}  // namespace

std::string pre_tokenizer_pattern(std::string_view pre) {
    if (pre == "qwen2") return qwen2_pattern;
    if (pre.empty() || pre == "default" || pre == "gpt-2" || pre == "gpt2") return gpt2_pattern;
    fail(error_kind::unsupported,
         "tokenizer.ggml.pre '{}' is not supported (supported: qwen2, default/gpt-2)", pre);
}

pre_tokenizer::pre_tokenizer(const std::string &pattern) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    pcre2_code *code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_offset, nullptr);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        fail(error_kind::internal, "pre-tokenizer regex does not compile at {}: {}", err_offset,
             reinterpret_cast<const char *>(msg));
    }
    // JIT is an optimisation only: when unavailable pcre2_match interprets the same pattern.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    code_ = code;
}

pre_tokenizer::~pre_tokenizer() { pcre2_code_free(as_code(code_)); }

void pre_tokenizer::split(std::string_view text, std::vector<std::pair<size_t, size_t>> &pieces) const {
    if (text.empty()) return;
    pcre2_code *code = as_code(code_);
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
    const auto *subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos < text.size()) {
        // The caller validated the UTF-8; without NO_UTF_CHECK PCRE2 would rescan the whole
        // subject on every call (quadratic in the text length).
        int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            fail(error_kind::invalid_request, "pre-tokenizer failed at byte {}: {}", pos,
                 reinterpret_cast<const char *>(msg));
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md.get());
        const size_t begin = ov[0], end = ov[1];
        if (begin > pos) pieces.emplace_back(pos, begin);
        if (end == begin) {
            // None of our patterns can match empty; guard anyway so a pattern change cannot
            // loop forever. Advance one whole character.
            size_t next = end + 1;
            while (next < text.size() && (static_cast<uint8_t>(text[next]) & 0xC0) == 0x80) ++next;
            pieces.emplace_back(end, next);
            pos = next;
            continue;
        }
        pieces.emplace_back(begin, end);
        pos = end;
    }
    if (pos < text.size()) pieces.emplace_back(pos, text.size());
}

std::string nfc(std::string_view text) {
    bool ascii = true;
    for (char c : text) ascii &= static_cast<uint8_t>(c) < 0x80;
    if (ascii) return std::string(text);  // ASCII is always in NFC

    UErrorCode status = U_ZERO_ERROR;
    const UNormalizer2 *norm = unorm2_getNFCInstance(&status);
    if (U_FAILURE(status)) fail(error_kind::internal, "ICU NFC normalizer unavailable: {}", u_errorName(status));

    std::u16string wide(text.size(), u'\0');  // UTF-16 never needs more units than UTF-8 bytes
    int32_t wide_len = 0;
    u_strFromUTF8(reinterpret_cast<UChar *>(wide.data()), static_cast<int32_t>(wide.size()), &wide_len,
                  text.data(), static_cast<int32_t>(text.size()), &status);
    if (U_FAILURE(status)) fail(error_kind::invalid_request, "text is not valid UTF-8 ({})", u_errorName(status));
    wide.resize(wide_len);
    if (unorm2_quickCheck(norm, reinterpret_cast<const UChar *>(wide.data()), wide_len, &status) == UNORM_YES &&
        U_SUCCESS(status))
        return std::string(text);

    status = U_ZERO_ERROR;
    std::u16string normal(wide.size() + 16, u'\0');
    int32_t n = unorm2_normalize(norm, reinterpret_cast<const UChar *>(wide.data()), wide_len,
                                 reinterpret_cast<UChar *>(normal.data()), static_cast<int32_t>(normal.size()), &status);
    if (status == U_BUFFER_OVERFLOW_ERROR) {  // NFC can expand (composition exclusions)
        status = U_ZERO_ERROR;
        normal.assign(n, u'\0');
        n = unorm2_normalize(norm, reinterpret_cast<const UChar *>(wide.data()), wide_len,
                             reinterpret_cast<UChar *>(normal.data()), n, &status);
    }
    if (U_FAILURE(status)) fail(error_kind::internal, "NFC normalization failed: {}", u_errorName(status));

    std::string out(static_cast<size_t>(n) * 3, '\0');  // a UTF-16 unit is at most 3 UTF-8 bytes
    int32_t out_len = 0;
    u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &out_len, reinterpret_cast<const UChar *>(normal.data()), n,
                &status);
    if (U_FAILURE(status)) fail(error_kind::internal, "UTF-16 to UTF-8 failed: {}", u_errorName(status));
    out.resize(out_len);
    return out;
}

}  // namespace tandem
