// src/tools/cmd_info.cpp - `tandem info`: architecture, shapes, types and bytes by tensor class.
#include "commands.h"

#include "tandem/gguf.h"
#include "tandem/model.h"

#include <fmt/format.h>

#include <map>

namespace {

// deepseek2's attention, routing and rope, as the engine reads them.
void print_deepseek2(const tandem::gguf_file &file, const tandem::model_hparams &hp) {
    using namespace tandem;
    const bool split = file.find_tensor("blk.0.attn_k_b.weight") != nullptr;
    fmt::print("mla         {}   latent {} + rope key {} cached   heads: keys {} + {} rope, values {}   {}\n",
               hp.q_lora_rank > 0 ? fmt::format("q LoRA {}", hp.q_lora_rank) : std::string("plain q"), hp.kv_lora_rank,
               hp.d_rope, hp.d_nope(), hp.d_rope, hp.d_head_v, split ? "attn_k_b/attn_v_b" : "attn_kv_b");
    fmt::print("experts     {} routed ({} used{}), {} shared, ffn {}   {}{}   norm_topk {}   scale {}\n", hp.n_expert,
               hp.n_expert_used,
               hp.n_expert_group > 1 ? fmt::format(", {} of {} groups", hp.n_expert_group_used, hp.n_expert_group) : "",
               hp.n_expert_shared, hp.d_ff_expert, hp.gating == expert_gating::sigmoid ? "sigmoid" : "softmax",
               file.find_tensor(fmt::format("blk.{}.exp_probs_b.bias", hp.n_dense_lead)) ? " + bias" : "", hp.norm_topk,
               hp.expert_weights_scale);
    if (hp.n_dense_lead > 0) fmt::print("dense       layers 0-{} ffn {}\n", hp.n_dense_lead - 1, hp.d_ff);
    fmt::print("rope        pairs theta {}{}   rms eps {}\n", hp.rope_theta,
               hp.yarn ? fmt::format("   yarn factor {} of {} positions, mscale_all_dim {}", hp.yarn_params.factor,
                                     hp.yarn_params.n_ctx_orig, hp.yarn_params.mscale_all_dim)
                       : std::string(),
               hp.rms_eps);
}

}  // namespace

TANDEM_COMMAND(info, "Print a model's architecture, shapes, tensor types and bytes by class", [](CLI::App &sub) {
    auto path = std::make_shared<std::string>();
    auto tensors = std::make_shared<bool>(false);
    sub.add_option("-m,--model", *path, "GGUF file")->required();
    sub.add_flag("--tensors", *tensors, "Also list every tensor");
    return [path, tensors] {
        using namespace tandem;
        auto file = gguf_file::open(*path);
        const model_hparams hp = model_hparams_read(*file);
        const model_bytes bytes = model_bytes_read(*file, hp, 4);
        fmt::print("file        {} ({:.3f} GB, GGUF v{}, {} tensors, {} keys)\n", *path, file->file_bytes() / 1e9,
                   file->version(), file->tensors().size(), file->kvs().size());
        fmt::print("arch        {} \"{}\"\n", hp.arch_name, hp.name);
        fmt::print("layers      {}   d_model {}   heads {}/{} kv of {}   vocab {}   ctx {}\n", hp.n_layer, hp.d_model,
                   hp.n_head, hp.n_head_kv, hp.d_head, hp.n_vocab, hp.n_ctx_train);
        if (hp.arch == model_arch::deepseek2) {
            print_deepseek2(*file, hp);
        } else {
            fmt::print("experts     {} routed, {} used, ffn {}   norm_topk {}\n", hp.n_expert, hp.n_expert_used,
                       hp.d_ff_expert, hp.norm_topk);
            fmt::print("rope        neox theta {}   rms eps {}\n", hp.rope_theta, hp.rms_eps);
        }
        std::map<std::string, std::pair<int, uint64_t>> by_type;
        for (const auto &t : file->tensors()) {
            auto &e = by_type[std::string(ggml_type_name(t.type))];
            ++e.first;
            e.second += t.n_bytes;
        }
        for (const auto &[name, e] : by_type)
            fmt::print("type        {:6} {:5} tensors {:10.3f} GB\n", name, e.first, e.second / 1e9);
        uint64_t rep = 0, exp = 0;
        for (uint64_t b : bytes.layer_replicated) rep += b;
        for (uint64_t b : bytes.layer_experts) exp += b;
        fmt::print("bytes       embedding {:.3f} GB, head {:.3f} GB, layers: replicated {:.3f} GB + routed experts {:.3f} GB\n",
                   bytes.embedding / 1e9, bytes.head / 1e9, rep / 1e9, exp / 1e9);
        const double active = double(exp) * hp.n_expert_used / hp.n_expert;
        fmt::print("per token   active weights {:.3f} GB (replicated + {}/{} of routed experts + head)\n",
                   (rep + active + bytes.head) / 1e9, hp.n_expert_used, hp.n_expert);
        const model_kv_shape kv = model_kv_shape_of(hp);
        fmt::print("kv          {} bytes per token (f32), {} (f16), {} (q8_0): {} layers x {}\n", bytes.kv_per_token,
                   bytes.kv_per_token / 2, bytes.kv_per_token / 128 * 34, hp.n_layer,
                   hp.arch == model_arch::deepseek2
                       ? fmt::format("MLA cache of {} values (latent {} + rope key {})", kv.width, hp.kv_lora_rank, hp.d_rope)
                       : fmt::format("K and V of {} values", kv.width));
        if (*tensors)
            for (const auto &t : file->tensors()) {
                std::string shape;
                for (size_t i = 0; i < t.ne.size(); ++i) shape += (i ? " x " : "") + std::to_string(t.ne[i]);
                fmt::print("  {:40} {:6} [{}] {} bytes\n", t.name, ggml_type_name(t.type), shape, t.n_bytes);
            }
        return 0;
    };
});
