// tests/server/scripted_engine.cpp - a test-only engine for tandem-server-test: instead of running
// the model it replies from a script, so every output format (tool calls, reasoning, harmony
// channels) reaches the parsers and the APIs as a real model's tokens would. The script is a JSON
// file (TANDEM_TEST_SCRIPT), read again for every request:
//   {"replies": [{"when": ["text in the prompt", ...], "reply": "text"}, ...], "default": "text",
//    "prompt_log": "file"}
// The first reply whose `when` texts all occur in the rendered prompt is tokenized (special-token
// texts as those tokens) and emitted token by token, then end-of-generation; every prompt is
// appended to prompt_log as a JSON line, so tests can check what the template rendered.
#include "tandem/engine.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/log.h"
#include "tandem/model.h"
#include "tandem/tokenizer.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <mutex>

namespace {

using namespace tandem;

// The chosen token's logit over every other's 0: no draw at any temperature picks another.
constexpr float chosen_logit = 60.0f;

class scripted_engine : public engine {
public:
    scripted_engine(std::shared_ptr<const gguf_file> file, const engine_options &o, std::string script)
        : hp_(model_hparams_read(*file)), tok_(tokenizer::from_gguf(*file)), n_ctx_(o.n_ctx), script_(std::move(script)),
          slots_(static_cast<size_t>(o.n_slots)) {
        eos_ = tok_.eos_id() >= 0 ? tok_.eos_id() : tok_.eog_ids().at(0);
    }

    const model_hparams &hparams() const override { return hp_; }
    int32_t n_slots() const override { return static_cast<int32_t>(slots_.size()); }
    int32_t n_ctx() const override { return n_ctx_; }

    void forward(std::span<const engine_row> rows, engine_outputs &out) override {
        std::lock_guard lock(mutex_);
        out.top.clear();
        out.logits.clear();
        for (const engine_row &r : rows) {
            slot &s = slots_.at(static_cast<size_t>(r.slot));
            TANDEM_ASSERT(r.pos == static_cast<int32_t>(s.history.size()));
            s.history.push_back(r.token);
            if (r.want == row_output::none) continue;
            if (r.prompt) start_reply(s);
            else ++s.cursor;
            const int32_t next = s.cursor < s.reply.size() ? s.reply[s.cursor] : eos_;
            const size_t at = out.logits.size();
            out.logits.resize(at + static_cast<size_t>(hp_.n_vocab), 0.0f);
            out.logits[at + static_cast<size_t>(next)] = chosen_logit;
        }
        engine_outputs_from_logits(rows, hp_.n_vocab, false, out);
    }

    int32_t slot_length(int32_t slot) const override {
        std::lock_guard lock(mutex_);
        return static_cast<int32_t>(slots_.at(static_cast<size_t>(slot)).history.size());
    }
    void slot_truncate(int32_t slot, int32_t n_keep) override {
        std::lock_guard lock(mutex_);
        slots_.at(static_cast<size_t>(slot)).history.resize(static_cast<size_t>(n_keep));
    }
    std::string layout() const override { return "layout: scripted test engine (no model computation)"; }

private:
    struct slot {
        std::vector<int32_t> history;
        std::vector<int32_t> reply;
        size_t cursor = 0;
    };

    void start_reply(slot &s) {
        const std::string prompt = tok_.decode(s.history);
        std::ifstream in(script_, std::ios::binary);
        if (!in) fail(error_kind::config, "TANDEM_TEST_SCRIPT {}: cannot read it", script_);
        const auto script = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
        std::string reply = script.value("default", "");
        for (const auto &r : script.value("replies", nlohmann::json::array())) {
            bool all = true;
            const auto when = r["when"].is_array() ? r["when"] : nlohmann::json::array({r["when"]});
            for (const auto &w : when) all = all && prompt.find(w.get<std::string>()) != std::string::npos;
            if (all) {
                reply = r["reply"].get<std::string>();
                break;
            }
        }
        if (script.contains("prompt_log")) {
            std::ofstream log(script["prompt_log"].get<std::string>(), std::ios::app);
            log << nlohmann::json({{"prompt", prompt}, {"reply", reply}}).dump() << "\n";
        }
        s.reply = tok_.encode(reply, /*parse_special=*/true);
        s.cursor = 0;
    }

    model_hparams hp_;
    tokenizer tok_;
    int32_t n_ctx_;
    std::string script_;
    int32_t eos_ = 0;
    mutable std::mutex mutex_;
    std::vector<slot> slots_;
};

}  // namespace

// Declared in src/tools/server_main.cpp under TANDEM_TEST_HOOKS.
std::unique_ptr<tandem::engine> scripted_engine_open(std::shared_ptr<const tandem::gguf_file> file,
                                                     const tandem::engine_options &options, const std::string &script) {
    tandem::log_warn("TANDEM_TEST_SCRIPT: replies come from {}, not from the model (a test build)", script);
    return std::make_unique<scripted_engine>(std::move(file), options, script);
}
