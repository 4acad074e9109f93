// POST /v1/completions: OpenAI legacy text completion on a raw prompt (no chat template).
//
// Accepted: model, prompt (string, or an array of token ids), max_tokens (default 16),
// temperature [0, 2], top_p (0, 1], top_k, seed, stop (string or up to 16 strings),
// stream, stream_options.include_usage, n (must be 1), presence/frequency_penalty [-2, 2].
// Generation ends at EOS (not part of the text), max_tokens, or the first stop string (not
// part of the text; "finish_reason": "stop").
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "server/api_server.h"
#include "server/sse.h"
#include "server/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {
namespace {

constexpr const char* kPath = "/v1/completions";

std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct CompletionRequest {
  std::vector<TokenId> prompt;
  GenerationParams params;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
};

// Reads an optional number field within [lo, hi]; returns an error message naming the field.
std::optional<std::string> ReadNumber(const Json& body, const char* name, double lo, double hi,
                                      bool lo_open, float* out) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return fmt::format("{} must be a number", name);
  const double value = it->get<double>();
  if (value > hi || value < lo || (lo_open && value == lo)) {
    return fmt::format("{} must be in {}{}, {}]", name, lo_open ? "(" : "[", lo, hi);
  }
  *out = static_cast<float>(value);
  return std::nullopt;
}

// Validates the body; on failure returns (message, param).
std::optional<std::pair<std::string, std::string>> ParseCompletion(
    const Json& body, const tokenizer::Tokenizer& tokenizer, CompletionRequest* out) {
  using Error = std::pair<std::string, std::string>;
  if (!body.contains("model")) return Error{"model is required", "model"};
  const auto prompt = body.find("prompt");
  if (prompt == body.end()) return Error{"prompt is required", "prompt"};
  if (prompt->is_string()) {
    out->prompt = tokenizer.Encode(prompt->get<std::string>());
  } else if (prompt->is_array() && !prompt->empty() &&
             std::all_of(prompt->begin(), prompt->end(),
                         [](const Json& v) { return v.is_number_integer(); })) {
    for (const Json& v : *prompt) {
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id >= tokenizer.vocab_size()) {
        return Error{fmt::format("prompt token id {} is out of range", id), "prompt"};
      }
      out->prompt.push_back(static_cast<TokenId>(id));
    }
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    out->prompt = tokenizer.Encode((*prompt)[0].get<std::string>());
  } else {
    return Error{"prompt must be a string or an array of token ids", "prompt"};
  }
  if (out->prompt.empty()) return Error{"prompt must not be empty", "prompt"};
  if (const auto it = body.find("max_tokens"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 ||
        it->get<int64_t>() > (int64_t{1} << 30)) {
      return Error{"max_tokens must be an integer greater than zero", "max_tokens"};
    }
    out->params.max_tokens = static_cast<int>(it->get<int64_t>());
  }
  GenerationParams& p = out->params;
  if (auto e = ReadNumber(body, "temperature", 0, 2, false, &p.temperature)) {
    return Error{*e, "temperature"};
  }
  if (auto e = ReadNumber(body, "top_p", 0, 1, true, &p.top_p)) return Error{*e, "top_p"};
  if (auto e = ReadNumber(body, "presence_penalty", -2, 2, false, &p.presence_penalty)) {
    return Error{*e, "presence_penalty"};
  }
  if (auto e = ReadNumber(body, "frequency_penalty", -2, 2, false, &p.frequency_penalty)) {
    return Error{*e, "frequency_penalty"};
  }
  if (const auto it = body.find("top_k"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) return Error{"top_k must be an integer", "top_k"};
    p.top_k = static_cast<int>(std::clamp<int64_t>(it->get<int64_t>(), -1, 1 << 30));
  }
  if (const auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) return Error{"seed must be an integer", "seed"};
    p.seed = static_cast<uint64_t>(it->get<int64_t>());
  }
  if (const auto it = body.find("n"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() != 1) {
      return Error{"Invalid n value (currently only n = 1 is supported)", "n"};
    }
  }
  if (const auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      out->stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= 16 &&
               std::all_of(it->begin(), it->end(), [](const Json& v) { return v.is_string(); })) {
      for (const Json& v : *it) out->stop.push_back(v.get<std::string>());
    } else {
      return Error{"stop must be a string or an array of at most 16 strings", "stop"};
    }
    std::erase(out->stop, std::string());
  }
  if (const auto it = body.find("stream"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return Error{"stream must be a boolean", "stream"};
    out->stream = it->get<bool>();
  }
  if (const auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return Error{"stream_options must be an object", "stream_options"};
    if (!out->stream)
      return Error{"stream_options should be set along with stream = true", "stream_options"};
    out->include_usage = it->value("include_usage", false);
  }
  return std::nullopt;
}

class CompletionAdapter final : public OutputAdapter {
 public:
  CompletionAdapter(const tokenizer::Tokenizer& tokenizer, CompletionRequest request,
                    std::string id, std::string model)
      : text_(tokenizer, request.params.stop_token_ids, request.stop),
        request_(std::move(request)),
        id_(std::move(id)),
        model_(std::move(model)),
        created_(UnixNow()) {}

  void Begin(ResponseChannel& channel) override {
    if (request_.stream) channel.BeginStream(200, kEventStreamContentType);
  }

  bool OnTokens(std::span<const TokenId> tokens, ResponseChannel& channel) override {
    const bool complete = text_.Push(tokens);
    Emit(text_.TakeReady(), channel);
    return complete;
  }

  int Finish(GenerationFinish finish, const base::Status& status,
             ResponseChannel& channel) override {
    Emit(text_.Flush(), channel);
    if (finish == GenerationFinish::kError) {
      const std::string message = fmt::format("generation failed: {}", status.message());
      if (request_.stream) {
        channel.Write(
            SseData(Dump(Json{{"error", {{"message", message}, {"type", "internal_error"}}}})));
        channel.End();
      } else {
        channel.Send(500, "application/json",
                     Dump(Json{{"error",
                                {{"message", message},
                                 {"type", "internal_error"},
                                 {"param", nullptr},
                                 {"code", nullptr}}}}));
      }
      return 500;
    }
    const char* reason = finish == GenerationFinish::kLength ? "length" : "stop";
    const Json usage = {{"prompt_tokens", request_.prompt.size()},
                        {"completion_tokens", text_.tokens()},
                        {"total_tokens", request_.prompt.size() + text_.tokens()}};
    if (request_.stream) {
      Json last = Chunk("", reason);
      if (!request_.include_usage) {
        channel.Write(SseData(Dump(last)));
      } else {
        last["usage"] = nullptr;
        channel.Write(SseData(Dump(last)));
        Json usage_chunk = Chunk("", nullptr);
        usage_chunk["choices"] = Json::array();
        usage_chunk["usage"] = usage;
        channel.Write(SseData(Dump(usage_chunk)));
      }
      channel.Write(SseData("[DONE]"));
      channel.End();
    } else {
      Json body = Chunk(full_text_, reason);
      body["usage"] = usage;
      channel.Send(200, "application/json", Dump(body));
    }
    return 200;
  }

  int64_t completion_tokens() const override { return text_.tokens(); }

 private:
  Json Chunk(const std::string& text, Json finish_reason) const {
    Json choice = {{"index", 0},
                   {"text", text},
                   {"logprobs", nullptr},
                   {"finish_reason", std::move(finish_reason)}};
    Json chunk = {
        {"id", id_},       {"object", "text_completion"},   {"created", created_},
        {"model", model_}, {"system_fingerprint", nullptr}, {"choices", Json::array({choice})}};
    return chunk;
  }

  void Emit(const std::string& text, ResponseChannel& channel) {
    if (text.empty()) return;
    if (!request_.stream) {
      full_text_ += text;
      return;
    }
    Json chunk = Chunk(text, nullptr);
    if (request_.include_usage) chunk["usage"] = nullptr;
    channel.Write(SseData(Dump(chunk)));
  }

  TextStream text_;
  CompletionRequest request_;
  std::string id_;
  std::string model_;
  int64_t created_;
  std::string full_text_;
};

}  // namespace

void RegisterCompletionsEndpoint(ApiServer& server) {
  server.AddPostEndpoint(kPath, [](ApiServer& s, Json body, const HttpRequest&,
                                   std::shared_ptr<ResponseChannel> channel) {
    const auto arrival = Clock::now();
    CompletionRequest request;
    if (auto error = ParseCompletion(body, s.tokenizer(), &request)) {
      return s.RespondError(*channel, kPath, 400, error->first, error->second);
    }
    request.params.stop_token_ids = {EosTokenId(s.tokenizer())};
    GenerationRequest generation{request.prompt, request.params};
    auto adapter = std::make_unique<CompletionAdapter>(
        s.tokenizer(), std::move(request), "cmpl-" + s.NewResponseId(), s.served_model_name());
    s.Generate(kPath, std::move(generation), std::move(adapter), std::move(channel), arrival);
  });
}

}  // namespace deepinfer::server
