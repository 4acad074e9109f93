// Protocol-specific translation of generated tokens into an HTTP response (one JSON body or
// an SSE stream). One adapter serves one request; its methods are called in order and never
// concurrently: Begin, OnTokens*, Finish.
#pragma once

#include <span>
#include <string>

#include "base/status.h"
#include "server/generation_service.h"
#include "server/http_server.h"

namespace deepinfer::server {

class OutputAdapter {
 public:
  virtual ~OutputAdapter() = default;
  // The generation was accepted: a stream sends its headers and opening events here.
  virtual void Begin(ResponseChannel& channel) = 0;
  // New tokens (may include the stop token that ends the generation). Returns true when the
  // output is complete (e.g. a stop string matched): the generation is then cancelled and
  // Finish follows with kStop.
  virtual bool OnTokens(std::span<const TokenId> tokens, ResponseChannel& channel) = 0;
  // Ends the response (kCancelled: the client is gone, or the server is shutting down; kError:
  // `status` says why). Returns the HTTP status to record in the metrics.
  virtual int Finish(GenerationFinish finish, const base::Status& status,
                     ResponseChannel& channel) = 0;
  // Number of generated tokens counted so far (usage).
  virtual int64_t completion_tokens() const = 0;
};

}  // namespace deepinfer::server
