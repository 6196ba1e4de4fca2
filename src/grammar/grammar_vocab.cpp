// src/grammar/grammar_vocab.cpp - a tokenizer's byte strings as a preorder trie (built once per
// vocabulary): one walk visits each shared prefix once, and a dead prefix skips its whole subtree.
#include "token_index.h"

#include "tandem/error.h"
#include "tandem/grammar.h"

#include <algorithm>

namespace tandem {

using namespace grammar_detail;

namespace {

void build_trie(vocab_index &v) {
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < v.n_vocab; ++i) {
        if (v.kind[size_t(i)] == token_kind::text) ids.push_back(i);
    }
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return v.bytes[size_t(a)] < v.bytes[size_t(b)]; });
    v.nodes.push_back({0, 0, 0});
    v.parent.push_back(0);
    std::vector<uint32_t> path{0};  // path[d]: the open node at depth d
    std::vector<uint32_t> token_node;
    const std::string *prev = nullptr;
    for (int32_t id : ids) {
        const std::string &s = v.bytes[size_t(id)];
        size_t lcp = 0;
        if (prev) {
            while (lcp < prev->size() && lcp < s.size() && (*prev)[lcp] == s[lcp]) ++lcp;
        }
        for (size_t d = path.size() - 1; d > lcp; --d) v.nodes[path[d]].end = uint32_t(v.nodes.size());
        path.resize(lcp + 1);
        for (size_t d = lcp + 1; d <= s.size(); ++d) {
            const uint32_t n = uint32_t(v.nodes.size());
            v.nodes.push_back({0, uint16_t(d), uint8_t(s[d - 1])});
            v.parent.push_back(path[d - 1]);
            path.push_back(n);
        }
        token_node.push_back(path[s.size()]);
        v.max_depth = std::max(v.max_depth, uint32_t(s.size()));
        prev = &s;
    }
    for (uint32_t n : path) v.nodes[n].end = uint32_t(v.nodes.size());
    // Tokens come in lexicographic order, so their end nodes are in preorder already.
    v.token_begin.assign(v.nodes.size() + 1, 0);
    for (uint32_t n : token_node) ++v.token_begin[n + 1];
    for (size_t j = 1; j < v.token_begin.size(); ++j) v.token_begin[j] += v.token_begin[j - 1];
    v.token_ids = std::move(ids);
}

}  // namespace

grammar_vocab::grammar_vocab(std::span<const std::string> token_bytes, std::span<const int32_t> special_ids,
                             std::span<const int32_t> eog_ids) {
    auto v = std::make_shared<vocab_index>();
    if (token_bytes.empty()) throw error(error_kind::invalid_request, "grammar vocabulary: no tokens");
    if (token_bytes.size() > size_t(INT32_MAX)) throw error(error_kind::invalid_request, "grammar vocabulary: too many tokens");
    v->n_vocab = int32_t(token_bytes.size());
    v->n_words = uint32_t((token_bytes.size() + 31) / 32);
    v->bytes.assign(token_bytes.begin(), token_bytes.end());
    v->kind.assign(token_bytes.size(), token_kind::text);
    for (size_t i = 0; i < token_bytes.size(); ++i) {
        if (token_bytes[i].empty()) v->kind[i] = token_kind::never;
        if (token_bytes[i].size() > UINT16_MAX) {
            fail(error_kind::invalid_request, "grammar vocabulary: token {} is longer than {} bytes", i, UINT16_MAX);
        }
    }
    const auto check = [&](int32_t id, const char *what) {
        if (id < 0 || id >= v->n_vocab) fail(error_kind::invalid_request, "grammar vocabulary: {} id {} out of range", what, id);
    };
    for (int32_t id : special_ids) check(id, "special token"), v->kind[size_t(id)] = token_kind::never;
    for (int32_t id : eog_ids) check(id, "end-of-generation token"), v->kind[size_t(id)] = token_kind::eog;
    for (size_t i = 0; i < v->kind.size(); ++i) {
        if (v->kind[i] == token_kind::eog) v->eog_ids.push_back(int32_t(i));
    }
    build_trie(*v);
    impl_ = std::move(v);
}

int32_t grammar_vocab::n_vocab() const { return impl_->n_vocab; }
int32_t grammar_vocab::n_mask_words() const { return int32_t(impl_->n_words); }

}  // namespace tandem
