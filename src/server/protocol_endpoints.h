// Registers the recipe-backed endpoints on an ApiServer (needs the recipe module):
//   POST /v1/chat/completions, /v1/responses, /v1/messages, /v1/messages/count_tokens.
// Limits: a prompt that fills the context, or max_tokens beyond the room left, is a 400;
// without max_tokens the recipe default (65536 thinking / 8192 otherwise) is cut to the room
// left. n must be 1. Image input is rejected (400).
#pragma once

#include "server/api_server.h"

namespace deepinfer::server {

void RegisterProtocolEndpoints(ApiServer& server);

}  // namespace deepinfer::server
