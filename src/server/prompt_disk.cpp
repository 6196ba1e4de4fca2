// src/server/prompt_disk.cpp - the disk tier's index, its LRU bound, the start-up scan and the
// writer thread.
#include "src/server/prompt_disk.h"

#include "tandem/error.h"
#include "tandem/log.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <utility>

namespace tandem::server {

namespace {

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    const size_t n = std::min(a.size(), b.size());
    return size_t(std::mismatch(a.begin(), a.begin() + ptrdiff_t(n), b.begin()).first - a.begin());
}

// The file's name: a hash of its tokens (FNV-1a), so a conversation stored again by a later run
// lands on its earlier file instead of beside it.
std::string file_name_of(std::span<const int32_t> tokens) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int32_t t : tokens)
        for (int i = 0; i < 4; ++i) h = (h ^ ((uint32_t(t) >> (8 * i)) & 0xff)) * 0x100000001b3ull;
    return fmt::format("{:016x}.bin", h);
}

}  // namespace

prompt_disk::prompt_disk(std::string folder, slot_file_identity id, uint64_t capacity_bytes, uint64_t max_pending_bytes)
    : folder_(std::move(folder)), id_(std::move(id)), capacity_(capacity_bytes), max_pending_(max_pending_bytes) {
    std::error_code ec;
    std::filesystem::create_directories(folder_, ec);
    if (ec || !std::filesystem::is_directory(folder_, ec))
        fail(error_kind::config, "--cache-disk: cannot use the folder {}: {}", folder_, ec ? ec.message() : "not a directory");
    scan();
    writer_ = std::thread([this] { write_loop(); });
}

prompt_disk::~prompt_disk() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (writer_.joinable()) writer_.join();
}

std::string prompt_disk::path(const std::string &name) const { return (std::filesystem::path(folder_) / name).string(); }

// Files of this model and KV layout are indexed, the most recently written first; anything else
// is left alone with a log line, and the oldest go when they exceed the bound.
void prompt_disk::scan() {
    struct found {
        file f;
        std::filesystem::file_time_type written;
    };
    std::vector<found> all;
    std::error_code ec;
    for (const auto &de : std::filesystem::directory_iterator(folder_, ec)) {
        const std::string name = de.path().filename().string();
        std::error_code fec;
        if (!de.is_regular_file(fec)) continue;
        if (name.find(".partial-") != std::string::npos) {
            std::filesystem::remove(de.path(), fec);
            log_info("prompt cache: removed {}, a write that an earlier run did not finish", name);
            continue;
        }
        try {
            found x;
            x.f.name = name;
            x.f.tokens = slot_file_tokens(de.path().string(), id_, x.f.bytes);
            x.written = std::filesystem::last_write_time(de.path());
            if (x.f.tokens.empty()) fail(error_kind::invalid_request, "it holds no tokens");
            all.push_back(std::move(x));
        } catch (const std::exception &e) {
            log_warn("prompt cache: skipping {} in {}: {}", name, folder_, e.what());
            ++scanned_.n_skipped;
        }
    }
    if (ec) log_warn("prompt cache: cannot list {}: {}", folder_, ec.message());
    std::sort(all.begin(), all.end(), [](const found &a, const found &b) { return a.written > b.written; });
    for (found &x : all) {
        bytes_ += x.f.bytes;
        scanned_.n_tokens += x.f.tokens.size();
        files_.push_back(std::move(x.f));
    }
    scanned_.n_reused = files_.size();
    while (bytes_ > capacity_) {
        scanned_.n_tokens -= files_.back().tokens.size();
        drop(std::prev(files_.end()));
        --scanned_.n_reused;
        ++scanned_.n_evicted;
    }
}

uint64_t prompt_disk::bytes() const {
    std::lock_guard lock(mutex_);
    return bytes_;
}

size_t prompt_disk::size() const {
    std::lock_guard lock(mutex_);
    return files_.size();
}

std::list<prompt_disk::file>::iterator prompt_disk::find(const std::string &name) {
    return std::find_if(files_.begin(), files_.end(), [&](const file &f) { return f.name == name; });
}

void prompt_disk::drop(std::list<file>::iterator it) {
    bytes_ -= it->bytes;
    ops_.push_back({it->name, nullptr, 0});
    files_.erase(it);
    wake_.notify_one();
}

void prompt_disk::store(prompt_cache::entry e) {
    if (e.tokens.empty() || e.tokens.size() >= size_t(id_.n_ctx) || e.kv.size() != e.tokens.size() * id_.kv_token_bytes) return;
    const uint64_t size = slot_file_bytes(e.tokens.size(), id_.kv_token_bytes);
    if (size > capacity_) return;
    const std::string name = file_name_of(e.tokens);
    std::lock_guard lock(mutex_);
    for (const file &f : files_)
        if (common_prefix(f.tokens, e.tokens) == e.tokens.size()) return;  // a file holds it already
    if (pending_bytes_ + size > max_pending_) {
        log_warn("prompt cache: the disk is {} MiB behind; a conversation of {} tokens is not kept", pending_bytes_ >> 20,
                 e.tokens.size());
        return;
    }
    if (find(name) != files_.end()) return;  // another conversation with the same name's hash
    // The files this conversation extends are held by it.
    for (auto it = files_.begin(); it != files_.end();) {
        auto next = std::next(it);
        if (common_prefix(it->tokens, e.tokens) == it->tokens.size()) drop(it);
        it = next;
    }
    while (bytes_ + size > capacity_) drop(std::prev(files_.end()));
    auto snap = std::make_shared<slot_snapshot>();
    snap->tokens = e.tokens;
    snap->kv = std::move(e.kv);
    files_.push_front({name, std::move(e.tokens), size, snap});
    bytes_ += size;
    pending_bytes_ += size;
    ops_.push_back({name, std::move(snap), size});
    wake_.notify_one();
}

size_t prompt_disk::longest_common(std::span<const int32_t> prompt) const {
    std::lock_guard lock(mutex_);
    size_t best = 0;
    for (const file &f : files_) best = std::max(best, common_prefix(f.tokens, prompt));
    return best;
}

std::optional<prompt_cache::entry> prompt_disk::load(std::span<const int32_t> prompt) {
    std::string name;
    std::vector<int32_t> indexed;
    {
        std::lock_guard lock(mutex_);
        auto best = files_.end();
        size_t best_common = 0;
        for (auto it = files_.begin(); it != files_.end(); ++it)
            if (const size_t c = common_prefix(it->tokens, prompt); c > best_common) {
                best = it;
                best_common = c;
            }
        if (best == files_.end()) return std::nullopt;
        files_.splice(files_.begin(), files_, best);
        const file &f = files_.front();
        if (f.pending) return prompt_cache::entry{f.pending->tokens, f.pending->kv};  // not on disk yet
        name = f.name;
        indexed = f.tokens;
    }
    // Only this thread drops indexed files, and a written one is no longer the writer's: it stays
    // while it is read without the lock.
    try {
        uint64_t n_read = 0;
        slot_snapshot s = slot_file_read(path(name), id_, n_read);
        if (s.tokens != indexed) fail(error_kind::invalid_request, "its tokens changed since it was indexed");
        std::error_code ec;
        std::filesystem::last_write_time(path(name), std::filesystem::file_time_type::clock::now(), ec);  // its age across restarts
        return prompt_cache::entry{std::move(s.tokens), std::move(s.kv)};
    } catch (const std::exception &e) {
        log_warn("prompt cache: dropping {} from the disk cache: {}", name, e.what());
        std::lock_guard lock(mutex_);
        if (auto it = find(name); it != files_.end() && !it->pending) drop(it);
        return std::nullopt;
    }
}

void prompt_disk::flush() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return ops_.empty() && !busy_; });
}

void prompt_disk::write_loop() {
    for (;;) {
        op o;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || !ops_.empty(); });
            if (ops_.empty()) return;
            o = std::move(ops_.front());
            ops_.pop_front();
            busy_ = true;
        }
        std::string failure;
        std::error_code ec;
        if (o.data) {
            try {
                slot_file_write(path(o.name), id_, *o.data);
            } catch (const std::exception &e) {
                failure = e.what();
            }
        } else if (!std::filesystem::remove(path(o.name), ec) && ec) {
            log_warn("prompt cache: cannot delete {}: {}", path(o.name), ec.message());
        }
        if (!failure.empty()) log_warn("prompt cache: {}; the conversation is not kept on disk", failure);
        std::lock_guard lock(mutex_);
        if (o.data) {
            pending_bytes_ -= o.bytes;
            if (auto it = find(o.name); it != files_.end() && it->pending == o.data) {
                if (failure.empty()) {
                    it->pending.reset();
                } else {
                    bytes_ -= it->bytes;
                    files_.erase(it);
                }
            }
        }
        busy_ = false;
        idle_.notify_all();
    }
}

}  // namespace tandem::server
