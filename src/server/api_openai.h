// src/server/api_openai.h - the OpenAI API: /v1/chat/completions, /v1/completions, /v1/models.
#pragma once

#include "src/server/api_common.h"

#include <memory>

namespace tandem::server {

// Maps a request body; throws error(invalid_request) naming the bad field.
api_request openai_parse_chat(const json &body);
api_request openai_parse_completion(const json &body);

// The formatter for a chat or completion request (by req.route).
std::unique_ptr<generation_job> openai_make_job(const api_request &req, response_context ctx);

json openai_models_body(const std::string &model_id, int64_t created, const json &meta);

}  // namespace tandem::server
