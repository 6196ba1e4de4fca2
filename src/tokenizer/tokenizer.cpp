// src/tokenizer/tokenizer.cpp - vocab validation, encoding (special-token split, NFC, regex
// split, byte-level BPE with merge ranks) and decoding. Follows Hugging Face `tokenizers`.
#include "tandem/tokenizer.h"

#include "byte_level.h"
#include "pre_tokenizer.h"
#include "utf8.h"

#include "tandem/error.h"

#include <algorithm>
#include <array>
#include <functional>
#include <mutex>
#include <queue>
#include <unordered_map>

namespace tandem {

namespace {

struct merge_info {
    int32_t rank;
    int32_t result;  // id of left+right
};

uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Texts llama.cpp treats as end of generation (llama-vocab.cpp, by token text), plus the FIM
// separators it also adds; a model that emits one of them has finished its turn.
constexpr std::array<std::string_view, 12> eog_texts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
    "_<EOT>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek's <｜end▁of▁sentence｜>
    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
};

// Pieces longer than this are not cached: they are rare and would bloat the cache.
constexpr size_t cache_max_piece = 64;
// Entries before the cache is cleared (bounded memory for a long-running server).
constexpr size_t cache_max_entries = 1 << 16;

}  // namespace

struct tokenizer::impl {
    std::vector<std::string> texts;
    std::vector<std::string> bytes;
    std::vector<token_type> types;
    // Entry text -> id for all but unused padding; the keys view `texts`, which never changes
    // after loading (impl lives behind a shared_ptr and is never moved).
    std::unordered_map<std::string_view, int32_t> ids;
    std::array<int32_t, 256> byte_ids{};           // id of each byte's single-symbol token
    std::unordered_map<uint64_t, merge_info> merges;
    std::array<std::vector<int32_t>, 256> specials;  // control/user-defined by first byte, longest first
    std::vector<int32_t> eog;
    std::string pre;
    int32_t bos = -1, eos = -1, pad = -1;
    bool add_bos = false;
    std::unique_ptr<pre_tokenizer> splitter;
    bool nfc = true;  // the tokenizer.json normalizes to NFC (Qwen2) or not at all (DeepSeek)

    mutable std::mutex cache_mutex;
    mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

    void check_id(int32_t id) const {
        if (id < 0 || id >= static_cast<int32_t>(texts.size()))
            fail(error_kind::invalid_request, "token id {} is out of range [0, {})", id, texts.size());
    }
    bool is_special(int32_t id) const {
        return types[id] == token_type::control || types[id] == token_type::user_defined;
    }
    void bpe(std::string_view piece, std::vector<int32_t> &out) const;
    void bpe_uncached(std::string_view piece, std::vector<int32_t> &out) const;
    // Stops early once `out` holds more than `limit` ids.
    void encode_text(std::string_view text, std::vector<int32_t> &out, size_t limit = SIZE_MAX) const;
    // Control tokens are split out only inside `runs` (sorted, disjoint [begin, end) ranges).
    std::vector<int32_t> encode_marked(std::string_view text, const std::vector<std::pair<size_t, size_t>> &runs,
                                       bool add_special, size_t max_tokens = SIZE_MAX) const;
};

// Byte-level decoding of a vocab entry. As HF's ByteLevel decoder: when a character is not in
// the alphabet, the entry's own UTF-8 bytes are used.
static std::string byte_level_decode(const std::string &text) {
    const auto &alpha = byte_level::get();
    std::string out;
    size_t i = 0;
    while (i < text.size()) {
        const uint8_t b0 = static_cast<uint8_t>(text[i]);
        uint32_t cp;
        size_t len;
        if (b0 < 0x80) {
            cp = b0;
            len = 1;
        } else if ((b0 & 0xE0) == 0xC0 && i + 1 < text.size()) {
            cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu);
            len = 2;
        } else {
            return text;  // the alphabet only has code points below U+0800
        }
        if (cp >= alpha.byte_of.size() || alpha.byte_of[cp] < 0) return text;
        out.push_back(static_cast<char>(alpha.byte_of[cp]));
        i += len;
    }
    return out;
}

tokenizer tokenizer::from_vocab(tokenizer_vocab v) {
    if (v.model != "gpt2")
        fail(error_kind::unsupported, "tokenizer.ggml.model '{}' is not supported (only 'gpt2' byte-level BPE)", v.model);
    const size_t n = v.tokens.size();
    if (n == 0) fail(error_kind::file_format, "tokenizer.ggml.tokens is empty");
    if (n > static_cast<size_t>(INT32_MAX)) fail(error_kind::file_format, "tokenizer.ggml.tokens has {} entries", n);
    if (v.types.empty()) v.types.assign(n, token_type::normal);
    if (v.types.size() != n)
        fail(error_kind::file_format, "tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}",
             v.types.size(), n);
    for (size_t i = 0; i < n; ++i) {
        const auto t = static_cast<int32_t>(v.types[i]);
        if (t < 0 || t > 6) fail(error_kind::file_format, "tokenizer.ggml.token_type[{}] = {} is not a token type", i, t);
    }
    const std::pair<const char *, int32_t> special_ids[] = {
        {"bos_token_id", v.bos_id}, {"eos_token_id", v.eos_id}, {"padding_token_id", v.pad_id},
        {"eot_token_id", v.eot_id}, {"eom_token_id", v.eom_id}};
    for (const auto &[key, id] : special_ids)
        if (id < -1 || id >= static_cast<int64_t>(n))
            fail(error_kind::file_format, "tokenizer.ggml.{} = {} is outside the vocabulary of {} tokens", key, id, n);

    auto p = std::make_shared<impl>();
    p->pre = v.pre;
    const pre_tokenizer_spec spec = pre_tokenizer_spec_for(v.pre);
    p->splitter = std::make_unique<pre_tokenizer>(spec.patterns);
    p->nfc = spec.nfc;
    p->bos = v.bos_id;
    p->eos = v.eos_id;
    p->pad = v.pad_id;
    p->add_bos = v.add_bos;
    p->types = std::move(v.types);
    p->texts = std::move(v.tokens);
    p->bytes.resize(n);
    p->ids.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        const auto id = static_cast<int32_t>(i);
        const token_type t = p->types[i];
        if (t == token_type::unused) continue;  // padding: never looked up, decodes to ""
        p->bytes[i] = p->is_special(id) ? p->texts[i] : byte_level_decode(p->texts[i]);
        auto [it, fresh] = p->ids.emplace(p->texts[i], id);
        if (!fresh)
            fail(error_kind::file_format, "tokenizer.ggml.tokens: '{}' appears at ids {} and {}", p->texts[i], it->second, i);
        if (p->is_special(id) && !p->texts[i].empty())
            p->specials[static_cast<uint8_t>(p->texts[i][0])].push_back(id);
    }
    for (auto &bucket : p->specials)  // longest first, then by id for a deterministic order
        std::sort(bucket.begin(), bucket.end(), [&](int32_t a, int32_t b) {
            const size_t la = p->texts[a].size(), lb = p->texts[b].size();
            return la != lb ? la > lb : a < b;
        });

    const auto &alpha = byte_level::get();
    for (int b = 0; b < 256; ++b) {
        auto it = p->ids.find(alpha.text[b]);
        if (it == p->ids.end() || p->is_special(it->second))
            fail(error_kind::file_format, "tokenizer.ggml.tokens lacks the byte-level symbol '{}' of byte 0x{:02X}",
                 alpha.text[b], b);
        p->byte_ids[b] = it->second;
    }

    p->merges.reserve(v.merges.size());
    std::string joined;
    for (size_t r = 0; r < v.merges.size(); ++r) {
        const std::string &m = v.merges[r];
        const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
        if (space == std::string::npos || space + 1 >= m.size())
            fail(error_kind::file_format, "tokenizer.ggml.merges[{}] '{}' is not 'left right'", r, m);
        const std::string_view left = std::string_view(m).substr(0, space), right = std::string_view(m).substr(space + 1);
        joined.assign(left).append(right);
        const auto lookup = [&](std::string_view sym) {
            auto it = p->ids.find(sym);
            if (it == p->ids.end())
                fail(error_kind::file_format, "tokenizer.ggml.merges[{}] '{}' names '{}', which is not in the vocabulary",
                     r, m, sym);
            return it->second;
        };
        const int32_t l = lookup(left), rt = lookup(right), res = lookup(joined);
        // A later duplicate overrides an earlier one, as HF's merge map is built.
        p->merges[pair_key(l, rt)] = merge_info{static_cast<int32_t>(r), res};
    }

    for (int32_t id : {v.eos_id, v.eot_id, v.eom_id})
        if (id >= 0) p->eog.push_back(id);
    for (size_t i = 0; i < n; ++i)
        if (p->is_special(static_cast<int32_t>(i)) &&
            std::find(eog_texts.begin(), eog_texts.end(), p->texts[i]) != eog_texts.end())
            p->eog.push_back(static_cast<int32_t>(i));
    std::sort(p->eog.begin(), p->eog.end());
    p->eog.erase(std::unique(p->eog.begin(), p->eog.end()), p->eog.end());
    return tokenizer(std::move(p));
}

// Standard BPE over one piece: start from its bytes' symbols and repeatedly merge the adjacent
// pair of lowest rank (leftmost on a tie) until no pair has a merge. HF keeps a min-heap of
// (rank, position) and skips stale entries; so does this.
void tokenizer::impl::bpe_uncached(std::string_view piece, std::vector<int32_t> &out) const {
    struct symbol {
        int32_t id;
        int32_t prev, next;  // -1 at the ends
    };
    const auto n = static_cast<int32_t>(piece.size());
    std::vector<symbol> sym(n);
    for (int32_t i = 0; i < n; ++i) sym[i] = {byte_ids[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};

    using entry = std::pair<int32_t, int32_t>;  // (rank, left position)
    std::priority_queue<entry, std::vector<entry>, std::greater<entry>> heap;
    const auto push_pair = [&](int32_t left) {
        if (left < 0 || sym[left].next < 0) return;
        auto it = merges.find(pair_key(sym[left].id, sym[sym[left].next].id));
        if (it != merges.end()) heap.emplace(it->second.rank, left);
    };
    for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

    while (!heap.empty()) {
        const auto [rank, left] = heap.top();
        heap.pop();
        const int32_t right = sym[left].next;
        if (sym[left].id < 0 || right < 0) continue;  // merged away, or now last
        auto it = merges.find(pair_key(sym[left].id, sym[right].id));
        if (it == merges.end() || it->second.rank != rank) continue;  // the pair changed
        sym[left].id = it->second.result;
        sym[left].next = sym[right].next;
        if (sym[right].next >= 0) sym[sym[right].next].prev = left;
        sym[right].id = -1;
        push_pair(sym[left].prev);
        push_pair(left);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

void tokenizer::impl::bpe(std::string_view piece, std::vector<int32_t> &out) const {
    if (piece.size() == 1) {
        out.push_back(byte_ids[static_cast<uint8_t>(piece[0])]);
        return;
    }
    if (piece.size() > cache_max_piece) {
        bpe_uncached(piece, out);
        return;
    }
    const std::string key(piece);
    {
        std::lock_guard lock(cache_mutex);
        auto it = cache.find(key);
        if (it != cache.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    const size_t start = out.size();
    bpe_uncached(piece, out);
    std::lock_guard lock(cache_mutex);
    if (cache.size() >= cache_max_entries) cache.clear();
    cache.emplace(key, std::vector<int32_t>(out.begin() + static_cast<ptrdiff_t>(start), out.end()));
}

// One stretch of text between special tokens: NFC where the vocab's pre says so, regex splits,
// BPE per piece.
void tokenizer::impl::encode_text(std::string_view text, std::vector<int32_t> &out, size_t limit) const {
    if (text.empty()) return;
    const std::string normal = nfc ? tandem::nfc(text) : std::string(text);
    std::vector<std::pair<size_t, size_t>> pieces;
    splitter->split(normal, pieces);
    const std::string_view s(normal);
    for (const auto &[begin, end] : pieces) {
        if (out.size() > limit) return;
        bpe(s.substr(begin, end - begin), out);
    }
}

std::vector<int32_t> tokenizer::encode(std::string_view text, bool parse_special, bool add_special) const {
    const std::vector<std::pair<size_t, size_t>> all = {{0, text.size()}};
    return impl_->encode_marked(text, parse_special ? all : std::vector<std::pair<size_t, size_t>>{}, add_special);
}

std::vector<int32_t> tokenizer::encode(std::span<const text_piece> pieces, bool add_special, size_t max_tokens) const {
    std::string text;
    std::vector<std::pair<size_t, size_t>> runs;  // maximal [begin, end) runs of parse_special pieces
    for (const auto &piece : pieces) {
        const size_t begin = text.size();
        text.append(piece.text);
        if (!piece.parse_special || piece.text.empty()) continue;
        if (!runs.empty() && runs.back().second == begin) runs.back().second = text.size();
        else runs.emplace_back(begin, text.size());
    }
    return impl_->encode_marked(text, runs, add_special, max_tokens);
}

std::vector<int32_t> tokenizer::impl::encode_marked(std::string_view text, const std::vector<std::pair<size_t, size_t>> &runs,
                                                    bool add_special, size_t max_tokens) const {
    const impl &p = *this;
    const size_t bad = utf8::first_invalid(text);
    if (bad != std::string_view::npos)
        fail(error_kind::invalid_request, "text is not valid UTF-8 (byte 0x{:02X} at offset {})",
             static_cast<uint8_t>(text[bad]), bad);

    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (add_special && p.add_bos && p.bos >= 0) out.push_back(p.bos);

    // Leftmost-longest matching of special tokens (HF's added-vocabulary split). The special
    // texts are matched on the raw text, before NFC, as HF does for non-normalized added tokens.
    size_t seg = 0;
    size_t run = 0;  // the first run that does not end before i (i only grows)
    for (size_t i = 0; i < text.size();) {
        while (run < runs.size() && runs[run].second <= i) ++run;
        const bool in_run = run < runs.size() && runs[run].first <= i;
        int32_t hit = -1;
        for (int32_t id : p.specials[static_cast<uint8_t>(text[i])]) {
            const std::string &t = p.texts[id];
            if (p.types[id] == token_type::control && !(in_run && i + t.size() <= runs[run].second)) continue;
            if (text.compare(i, t.size(), t) == 0) {
                hit = id;
                break;
            }
        }
        if (hit < 0) {
            ++i;
            continue;
        }
        p.encode_text(text.substr(seg, i - seg), out, max_tokens);
        out.push_back(hit);
        if (out.size() > max_tokens) break;
        i += p.texts[hit].size();
        seg = i;
    }
    if (out.size() <= max_tokens) p.encode_text(text.substr(seg), out, max_tokens);
    if (out.size() > max_tokens) out.resize(max_tokens + 1);
    return out;
}

const std::string &tokenizer::token_bytes(int32_t id) const {
    impl_->check_id(id);
    return impl_->bytes[id];
}

std::string tokenizer::decode(std::span<const int32_t> ids) const {
    std::string out;
    for (int32_t id : ids) out += token_bytes(id);
    return out;
}

int32_t tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->texts.size()); }

const std::string &tokenizer::token_text(int32_t id) const {
    impl_->check_id(id);
    return impl_->texts[id];
}

token_type tokenizer::type(int32_t id) const {
    impl_->check_id(id);
    return impl_->types[id];
}

std::optional<int32_t> tokenizer::find(std::string_view token_text) const {
    auto it = impl_->ids.find(token_text);
    if (it == impl_->ids.end()) return std::nullopt;
    return it->second;
}

int32_t tokenizer::bos_id() const { return impl_->bos; }
int32_t tokenizer::eos_id() const { return impl_->eos; }
int32_t tokenizer::pad_id() const { return impl_->pad; }
bool tokenizer::add_bos() const { return impl_->add_bos; }
const std::string &tokenizer::pre() const { return impl_->pre; }
const std::vector<int32_t> &tokenizer::eog_ids() const { return impl_->eog; }

bool tokenizer::is_eog(int32_t id) const {
    return std::binary_search(impl_->eog.begin(), impl_->eog.end(), id);
}

}  // namespace tandem
