// The recipe-backed endpoints: POST /v1/chat/completions, /v1/responses, /v1/messages and
// /v1/messages/count_tokens.
//
// request JSON -> recipe::ConvertRequest -> RenderPrompt -> EncodePrompt -> generation ->
// recipe::StreamProcessor (token ids in, protocol events out) -> SSE frames, or the
// accumulated FinalResponse() for non-streaming requests (spec recipe.md §4).
#include "server/protocol_endpoints.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "recipe/convert.h"
#include "recipe/render.h"
#include "recipe/stream_events.h"
#include "recipe/stream_processor.h"
#include "recipe/tokens.h"
#include "server/api_errors.h"
#include "server/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {
namespace {

using recipe::Protocol;

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string ResponseIdPrefix(Protocol protocol) {
  switch (protocol) {
    case Protocol::kChatCompletions:
      return "chatcmpl-";
    case Protocol::kResponses:
      return "resp_";
    case Protocol::kMessages:
      return "msg_";
  }
  return "";
}

// A mid-stream failure, in the protocol's streaming error form.
std::string StreamErrorFrame(Protocol protocol, std::string_view message) {
  if (protocol == Protocol::kChatCompletions) {
    return "data: " + ErrorBody(ErrorStyle::kOpenAI, 500, message) + "\n\n";
  }
  if (protocol == Protocol::kMessages) {
    return "event: error\ndata: " + ErrorBody(ErrorStyle::kAnthropic, 500, message) + "\n\n";
  }
  recipe::Json event = {
      {"type", "error"}, {"code", "server_error"}, {"message", message}, {"param", nullptr}};
  return "event: error\ndata: " + recipe::WriteJson(event) + "\n\n";
}

class RecipeAdapter final : public OutputAdapter {
 public:
  RecipeAdapter(const recipe::ConvertedRequest& request, recipe::StreamProcessorOptions options,
                TokenId eos, int64_t prompt_tokens)
      : protocol_(request.protocol),
        stream_(request.stream),
        eos_(eos),
        prompt_tokens_(prompt_tokens),
        processor_(request, std::move(options)) {}

  void Begin(ResponseChannel& channel) override {
    if (stream_) channel.BeginStream(200, "text/event-stream");
    processor_.OnReady(std::nullopt, {prompt_tokens_, 0});
    Flush(channel);
  }

  bool OnTokens(std::span<const TokenId> tokens, ResponseChannel& channel) override {
    for (const TokenId token : tokens) {
      ++completion_tokens_;
      if (token == eos_) break;  // EOS ends the text; it is not part of it (spec §3.1)
      if (const base::Status status = processor_.OnToken(token); !status.ok()) {
        error_ = status;
        return true;
      }
      if (processor_.done()) break;
    }
    Flush(channel);
    return processor_.done();
  }

  int Finish(GenerationFinish finish, const base::Status& status,
             ResponseChannel& channel) override {
    if (finish == GenerationFinish::kError && error_.ok()) error_ = status;
    if (!error_.ok()) {
      const std::string message = fmt::format("generation failed: {}", error_.message());
      if (stream_) {
        Flush(channel);
        channel.Write(StreamErrorFrame(protocol_, message));
        channel.End();
      } else {
        channel.Send(500, "application/json",
                     ErrorBody(protocol_ == Protocol::kMessages ? ErrorStyle::kAnthropic
                                                                : ErrorStyle::kOpenAI,
                               500, message));
      }
      return 500;
    }
    if (!processor_.done()) {
      switch (finish) {
        case GenerationFinish::kStop:
          processor_.OnFinish(recipe::BackendFinish::kStop);
          break;
        case GenerationFinish::kLength:
          processor_.OnFinish(recipe::BackendFinish::kLength);
          break;
        default:
          processor_.OnEnd();
          break;
      }
    }
    if (stream_) {
      Flush(channel);
      channel.Write(recipe::SseDone(protocol_));
      channel.End();
    } else {
      channel.Send(200, "application/json", recipe::WriteJson(processor_.FinalResponse()));
    }
    return 200;
  }

  int64_t completion_tokens() const override { return completion_tokens_; }

 private:
  void Flush(ResponseChannel& channel) {
    std::vector<recipe::Json> events = processor_.TakeEvents();
    if (!stream_ || events.empty()) return;
    std::string frames;
    for (const recipe::Json& event : events) frames += recipe::SseFrame(protocol_, event);
    channel.Write(std::move(frames));
  }

  Protocol protocol_;
  bool stream_;
  TokenId eos_;
  int64_t prompt_tokens_;
  int64_t completion_tokens_ = 0;
  base::Status error_;
  recipe::StreamProcessor processor_;
};

struct Prepared {
  recipe::ConvertedRequest request;
  std::vector<TokenId> prompt;
};

// Conversion + rendering + tokenization. On failure answers the client and returns nullopt.
std::optional<Prepared> Prepare(ApiServer& server, Protocol protocol, const std::string& path,
                                const Json& body, ResponseChannel& channel) {
  auto converted = recipe::ConvertRequest(protocol, body);
  if (!converted.ok()) {
    const recipe::ErrorResponse error = recipe::ErrorResponseFor(converted.status());
    server.RespondError(channel, path, error.http_status, converted.status().message());
    return std::nullopt;
  }
  Prepared prepared{std::move(*converted), {}};
  const recipe::RenderedPrompt rendered = recipe::RenderPrompt(prepared.request.conversation);
  if (!rendered.image_sources.empty()) {
    server.RespondError(channel, path, 400, "image input is not supported by this server");
    return std::nullopt;
  }
  prepared.prompt = recipe::EncodePrompt(server.tokenizer(), rendered.prompt);
  return prepared;
}

// max_tokens within the context; answers 400 and returns nullopt when it cannot fit.
std::optional<int> ResolveMaxTokens(ApiServer& server, const std::string& path,
                                    const Prepared& prepared, ResponseChannel& channel) {
  const int64_t context = server.service().context_length();
  const auto prompt = static_cast<int64_t>(prepared.prompt.size());
  const int64_t room = context > 0 ? context - prompt : (int64_t{1} << 30);
  if (room <= 0) {
    server.RespondError(channel, path, 400,
                        fmt::format("This model's maximum context length is {} tokens. However, "
                                    "your messages resulted in {} tokens.",
                                    context, prompt),
                        "messages");
    return std::nullopt;
  }
  const recipe::ConvertedRequest& request = prepared.request;
  std::optional<uint32_t> asked = request.sampling.max_tokens;
  if (!asked) asked = request.inference_options.max_tokens;
  if (asked) {
    if (*asked > room) {
      server.RespondError(
          channel, path, 400,
          fmt::format("max_tokens ({}) plus the prompt ({} tokens) exceeds the model's maximum "
                      "context length of {} tokens",
                      *asked, prompt, context),
          "max_tokens");
      return std::nullopt;
    }
    return static_cast<int>(*asked);
  }
  // recipe 0.2 defaults: 65536 in thinking mode, 8192 otherwise; bounded by the context.
  const int64_t fallback = request.conversation.thinking_mode ? 65536 : 8192;
  return static_cast<int>(std::min(fallback, room));
}

GenerationParams ToGenerationParams(const recipe::SamplingParams& sampling, int max_tokens,
                                    TokenId eos) {
  GenerationParams params;
  params.max_tokens = max_tokens;
  params.temperature = sampling.temperature.value_or(1.0f);
  params.top_p = sampling.top_p.value_or(1.0f);
  params.top_k = sampling.top_k.value_or(0);
  params.min_p = sampling.min_p.value_or(0.0f);
  params.presence_penalty = sampling.presence_penalty.value_or(0.0f);
  params.frequency_penalty = sampling.frequency_penalty.value_or(0.0f);
  params.repetition_penalty = sampling.repetition_penalty.value_or(1.0f);
  params.seed = sampling.seed;
  params.stop_token_ids = {eos};
  return params;
}

void HandleGeneration(Protocol protocol, const std::string& path, ApiServer& server, Json body,
                      std::shared_ptr<ResponseChannel> channel) {
  const auto arrival = Clock::now();
  auto prepared = Prepare(server, protocol, path, body, *channel);
  if (!prepared) return;
  if (prepared->request.sampling.n != 1) {
    return server.RespondError(*channel, path, 400,
                               "Invalid n value (currently only n = 1 is supported)", "n");
  }
  const auto max_tokens = ResolveMaxTokens(server, path, *prepared, *channel);
  if (!max_tokens) return;
  const TokenId eos = EosTokenId(server.tokenizer());
  recipe::StreamProcessorOptions options;
  options.response_id = ResponseIdPrefix(protocol) + server.NewResponseId();
  options.model = server.served_model_name();
  options.created = UnixNow();
  options.decoder = recipe::MakeTokenDecoder(server.tokenizer());
  const auto prompt_tokens = static_cast<int64_t>(prepared->prompt.size());
  GenerationRequest generation{std::move(prepared->prompt),
                               ToGenerationParams(prepared->request.sampling, *max_tokens, eos)};
  auto adapter =
      std::make_unique<RecipeAdapter>(prepared->request, std::move(options), eos, prompt_tokens);
  server.Generate(path, std::move(generation), std::move(adapter), std::move(channel), arrival);
}

void RegisterGeneration(ApiServer& server, Protocol protocol, const std::string& path) {
  server.AddPostEndpoint(path, [protocol, path](ApiServer& s, Json body, const HttpRequest&,
                                                std::shared_ptr<ResponseChannel> channel) {
    HandleGeneration(protocol, path, s, std::move(body), std::move(channel));
  });
}

}  // namespace

void RegisterProtocolEndpoints(ApiServer& server) {
  RegisterGeneration(server, Protocol::kChatCompletions, "/v1/chat/completions");
  RegisterGeneration(server, Protocol::kResponses, "/v1/responses");
  RegisterGeneration(server, Protocol::kMessages, "/v1/messages");
  const std::string count_path = "/v1/messages/count_tokens";
  server.AddPostEndpoint(count_path, [count_path](ApiServer& s, Json body, const HttpRequest&,
                                                  std::shared_ptr<ResponseChannel> channel) {
    // count_tokens bodies carry no max_tokens; the conversion does not need one.
    auto prepared = Prepare(s, Protocol::kMessages, count_path, body, *channel);
    if (!prepared) return;
    s.RespondJson(*channel, count_path,
                  Json{{"input_tokens", static_cast<int64_t>(prepared->prompt.size())}});
  });
}

}  // namespace deepinfer::server
