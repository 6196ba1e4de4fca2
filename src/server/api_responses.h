// src/server/api_responses.h - the OpenAI Responses API (POST /v1/responses): input items to a
// chat conversation, function tools, previous_response_id through a bounded store, and the reply
// as output items (reasoning, message, function_call), streamed as OpenAI's typed events.
#pragma once

#include "src/server/api_common.h"
#include "src/server/response_store.h"

#include <memory>
#include <string_view>

namespace tandem::server {

// Maps a request body; throws error(invalid_request) naming the bad field. Fields the API defines
// that Tandem does not implement are refused by name. raw_body, when given, is the body's text:
// text.format's schema is read from it in its own property order.
api_request responses_parse(const json &body, std::string_view raw_body = {});

// Continues the stored conversation of previous_response_id (a 400 naming it when unknown) and
// checks the function_call_output items that answer its calls.
void responses_resolve(api_request &r, const response_store &store);

// The formatter; with store true the finished response's conversation is kept in `store`.
std::unique_ptr<generation_job> responses_make_job(const api_request &req, response_context ctx, response_store *store);

}  // namespace tandem::server
