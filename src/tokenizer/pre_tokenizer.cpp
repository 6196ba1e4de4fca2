// src/tokenizer/pre_tokenizer.cpp - the pre-tokenizer regex sequences (PCRE2) and NFC (ICU).
#include "pre_tokenizer.h"

#include "tandem/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <cstdint>
#include <iterator>

namespace tandem {

namespace {

// HF runs these regexes with Oniguruma, whose Unicode `\s` is the White_Space property. PCRE2's
// UCP `\s` is \p{Z}+\h+\v, which adds U+180E (no longer White_Space since Unicode 6.3), so `\s`
// is spelled out as the White_Space set and `\S` as its complement.
//
// \p{..} classes follow the Unicode tables of the PCRE2 build (10.42: Unicode 14); letters assigned
// later (e.g. U+A7CB-U+A7CD, Unicode 16) are unassigned to it where newer Oniguruma knows them.
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

// DeepSeek-V3/R1/V3.1 tokenizer.json ("deepseek-v3"): three Splits, no normalizer. The CJK class
// is U+4E00-U+9FA5 (CJK ideographs to 龥), Hiragana U+3040-U+309F, Katakana U+30A0-U+30FF.
const char *const deepseek_v3_patterns[] = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\\r\\n]*|[" TANDEM_WS "]*[\\r\\n]+|[" TANDEM_WS "]+(?![^" TANDEM_WS "])|[" TANDEM_WS "]+",
};

// DeepSeek-LLM and DeepSeek-V2/V2-Lite tokenizer.json ("deepseek-llm"): five Splits, then
// Digits(individual_digits), which isolates every numeric character as \p{N} does; no normalizer.
// The letter class lists cased letters code point by code point as the file does (written as
// escapes: several of them, e.g. U+2126 OHM SIGN, would change under NFC in an editor).
// `$` is PCRE2's (before a final newline or at the end) where Oniguruma's is before any newline:
// no piece reaching that stage holds a newline other than a lone "\n", so the two agree.
const char *const deepseek_llm_patterns[] = {
    "[\\r\\n]",
    "[" TANDEM_WS "]?[\\x{41}-\\x{5A}\\x{61}-\\x{7A}\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}"
    "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}"
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}"
    "\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}"
    "\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}"
    "\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}"
    "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
    "[" TANDEM_WS "]?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "[" TANDEM_WS "]+$",
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}",
};

#undef TANDEM_WS

pcre2_code *as_code(void *p) { return static_cast<pcre2_code *>(p); }

size_t next_char(std::string_view s, size_t i) {
    ++i;
    while (i < s.size() && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) ++i;
    return i;
}

}  // namespace

pre_tokenizer_spec pre_tokenizer_spec_for(std::string_view pre) {
    if (pre == "qwen2") return {{qwen2_pattern}, true};
    if (pre == "deepseek-v3")
        return {{std::begin(deepseek_v3_patterns), std::end(deepseek_v3_patterns)}, false};
    if (pre == "deepseek-llm")
        return {{std::begin(deepseek_llm_patterns), std::end(deepseek_llm_patterns)}, false};
    if (pre.empty() || pre == "default" || pre == "gpt-2" || pre == "gpt2") return {{gpt2_pattern}, true};
    fail(error_kind::unsupported,
         "tokenizer.ggml.pre '{}' is not supported (supported: qwen2, deepseek-v3, deepseek-llm, default/gpt-2)", pre);
}

pre_tokenizer::pre_tokenizer(const std::vector<std::string> &patterns) {
    if (patterns.empty()) fail(error_kind::internal, "pre-tokenizer without a pattern");
    for (size_t i = 0; i < patterns.size(); ++i) {
        const std::string &pattern = patterns[i];
        int err = 0;
        PCRE2_SIZE err_offset = 0;
        pcre2_code *code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                         PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_offset, nullptr);
        if (!code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            for (void *c : codes_) pcre2_code_free(as_code(c));
            fail(error_kind::internal, "pre-tokenizer regex {} does not compile at {}: {}", i, err_offset,
                 reinterpret_cast<const char *>(msg));
        }
        // JIT is an optimisation only: when unavailable pcre2_match interprets the same pattern.
        pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
        codes_.push_back(code);
    }
}

pre_tokenizer::~pre_tokenizer() {
    for (void *c : codes_) pcre2_code_free(as_code(c));
}

// HF's Split over one piece, with its regex iterator's rule for empty matches (Oniguruma's
// find_iter): an empty match right where the previous match ended is skipped and the search
// resumes one character later; any other empty match cuts the gap there and makes no piece.
void pre_tokenizer::split_one(size_t stage, void *match_data, std::string_view text, size_t begin, size_t end,
                              std::vector<std::pair<size_t, size_t>> &out) const {
    pcre2_code *code = as_code(codes_[stage]);
    auto *md = static_cast<pcre2_match_data *>(match_data);
    // The piece is its own subject, as in HF: anchors and lookarounds end at its edges.
    const std::string_view piece = text.substr(begin, end - begin);
    const auto *subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
    size_t search = 0, prev = 0;
    bool matched = false;
    size_t last_end = 0;
    while (search <= piece.size()) {
        // The caller validated the UTF-8; without NO_UTF_CHECK PCRE2 would rescan the whole
        // subject on every call (quadratic in the text length).
        int rc = pcre2_match(code, subject, piece.size(), search, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(code, subject, piece.size(), search, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            fail(error_kind::invalid_request, "pre-tokenizer failed at byte {}: {}", begin + search,
                 reinterpret_cast<const char *>(msg));
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        const size_t s = ov[0], e = ov[1];
        if (s == e && matched && last_end == e) {
            search = next_char(piece, search);
            continue;
        }
        matched = true;
        last_end = search = e;
        if (s > prev) out.emplace_back(begin + prev, begin + s);
        if (e > s) out.emplace_back(begin + s, begin + e);
        prev = e;
    }
    if (prev < piece.size()) out.emplace_back(begin + prev, end);
}

void pre_tokenizer::split(std::string_view text, std::vector<std::pair<size_t, size_t>> &pieces) const {
    if (text.empty()) return;
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
    std::vector<std::pair<size_t, size_t>> cur{{0, text.size()}}, next;
    for (size_t stage = 0; stage < codes_.size(); ++stage) {
        std::vector<std::pair<size_t, size_t>> &dst = stage + 1 == codes_.size() ? pieces : next;
        for (const auto &[b, e] : cur) split_one(stage, md.get(), text, b, e, dst);
        if (&dst == &pieces) break;
        cur.swap(next);
        next.clear();
    }
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
