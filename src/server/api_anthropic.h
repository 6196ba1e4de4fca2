// src/server/api_anthropic.h - the Anthropic Messages API: /v1/messages (with its SSE event
// sequence) and /v1/messages/count_tokens.
#pragma once

#include "src/server/api_common.h"

#include <memory>

namespace tandem::server {

// Maps a request body; throws error(invalid_request) naming the bad field. count_tokens needs
// no max_tokens.
api_request anthropic_parse_messages(const json &body, bool count_tokens);

std::unique_ptr<generation_job> anthropic_make_job(const api_request &req, response_context ctx);

}  // namespace tandem::server
