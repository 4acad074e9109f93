#include "recipe/conformance.h"

#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>

#include "recipe/convert.h"
#include "recipe/render.h"
#include "recipe/stream_processor.h"

#if DEEPINFER_RECIPE_HAS_TOKENIZER
#include "recipe/tokens.h"
#include "tokenizer/tokenizer.h"
#endif

namespace deepinfer::recipe {
namespace {

constexpr const char* kMockId = "mock-id";
constexpr const char* kMockModel = "deepseek-flash";

// A case failure carried as (kind, detail), like the reference's ConversionError.
struct CaseError {
  std::string kind;
  std::string detail;
};

CaseError FromStatus(const base::Status& status) {
  return {status.code() == base::StatusCode::kInvalidArgument ? "bad_request" : "internal",
          status.message()};
}

Json Failure(const CaseError& error) {
  Json out = Json::object();
  out["ok"] = false;
  out["error"] = Json{{"kind", error.kind}, {"detail", error.detail}};
  return out;
}

Json Success(Json result) {
  Json out = Json::object();
  out["ok"] = true;
  out["result"] = std::move(result);
  return out;
}

std::string Field(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

BackendFinish ParseFinish(const std::string& name) {
  if (name == "length") return BackendFinish::kLength;
  if (name == "content_filter") return BackendFinish::kContentFilter;
  return BackendFinish::kStop;
}

// Replaces "created"/"created_at"/"completed_at" integers by 0.
std::string ZeroTimestamps(const std::string& text) {
  static const std::regex kTimestamp("\"(created|created_at|completed_at)\":[0-9]+");
  return std::regex_replace(text, kTimestamp, "\"$1\":0");
}

bool IsArgumentDelta(const Json& event, std::string* fragment) {
  if (!event.is_object()) return false;
  const std::string type = Field(event, "type");
  if (type == "response.function_call_arguments.delta") {
    *fragment = Field(event, "delta");
    return true;
  }
  if (type == "content_block_delta" && event["delta"].is_object() &&
      Field(event["delta"], "type") == "input_json_delta") {
    *fragment = Field(event["delta"], "partial_json");
    return true;
  }
  if (event.contains("choices") && event["choices"].is_array() && !event["choices"].empty()) {
    const Json& delta = event["choices"][0].value("delta", Json::object());
    if (delta.contains("tool_calls") && delta["tool_calls"].is_array() &&
        delta["tool_calls"].size() == 1 && !delta["tool_calls"][0].contains("id")) {
      *fragment = delta["tool_calls"][0]["function"].value("arguments", "");
      return true;
    }
  }
  return false;
}

void SetFragment(Json* event, const std::string& fragment) {
  const std::string type = Field(*event, "type");
  if (type == "response.function_call_arguments.delta") {
    (*event)["delta"] = fragment;
  } else if (type == "content_block_delta") {
    (*event)["delta"]["partial_json"] = fragment;
  } else {
    (*event)["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] = fragment;
  }
}

// Merges each run of consecutive tool-argument delta events into one and renumbers
// Responses sequence numbers.
void MergeArgumentDeltas(Json* record) {
  if (!record->is_object() || !record->value("ok", false)) return;
  Json& result = (*record)["result"];
  if (!result.is_object() || !result.contains("events")) return;
  Json merged = Json::array();
  bool previous_is_delta = false;
  for (const Json& event : result["events"]) {
    std::string fragment;
    const bool is_delta = IsArgumentDelta(event, &fragment);
    if (is_delta && previous_is_delta) {
      std::string combined;
      IsArgumentDelta(merged.back(), &combined);
      SetFragment(&merged.back(), combined + fragment);
    } else {
      merged.push_back(event);
    }
    previous_is_delta = is_delta;
  }
  int64_t sequence = 0;
  for (Json& event : merged) {
    if (event.is_object() && event.contains("sequence_number"))
      event["sequence_number"] = sequence++;
  }
  result["events"] = std::move(merged);
}

// Serde wording after "invalid request body: " is not part of the contract.
void MaskSerdeDetail(Json* record) {
  if (!record->is_object() || record->value("ok", true)) return;
  Json& error = (*record)["error"];
  const std::string detail = Field(error, "detail");
  constexpr std::string_view kPrefix = "invalid request body: ";
  if (Field(error, "kind") == "bad_request" && detail.rfind(kPrefix, 0) == 0) {
    error["detail"] = std::string(kPrefix) + "*";
  }
}

std::string Normalize(Json record, bool merge_deltas) {
  if (merge_deltas) MergeArgumentDeltas(&record);
  MaskSerdeDetail(&record);
  return ZeroTimestamps(WriteJson(record));
}

// A window of `text` around byte `at`, cut at UTF-8 character boundaries.
std::string Window(const std::string& text, size_t at) {
  auto is_continuation = [&](size_t i) {
    return i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
  };
  size_t begin = at > 40 ? at - 40 : 0;
  while (begin > 0 && is_continuation(begin)) --begin;
  size_t end = std::min(text.size(), at + 80);
  while (end < text.size() && is_continuation(end)) ++end;
  return text.substr(begin, end - begin);
}

std::string DescribeDifference(const std::string& expected, const std::string& actual) {
  size_t at = 0;
  while (at < expected.size() && at < actual.size() && expected[at] == actual[at]) ++at;
  std::ostringstream out;
  out << "first difference at byte " << at << ": expected ..." << Window(expected, at)
      << "... | actual ..." << Window(actual, at) << "...";
  return out.str();
}

}  // namespace

struct ConformanceRunner::Tokenizers {
#if DEEPINFER_RECIPE_HAS_TOKENIZER
  std::map<std::string, std::unique_ptr<tokenizer::Tokenizer>> loaded;
#endif
  std::string dir;

  // "v41" / "v4" -> tokenizer.
  base::StatusOr<const void*> Get(const std::string& name) {
#if DEEPINFER_RECIPE_HAS_TOKENIZER
    auto it = loaded.find(name);
    if (it != loaded.end()) return static_cast<const void*>(it->second.get());
    const std::string version = name == "v4" ? "deepseek-v4" : "deepseek-v4.1";
    const std::string path = dir.empty() ? tokenizer::DefaultTokenizerPath(version)
                                         : dir + "/" + version + "/tokenizer.json";
    auto tok = tokenizer::Tokenizer::FromFile(path);
    if (!tok.ok()) return tok.status();
    const void* raw = tok->get();
    loaded[name] = std::move(tok).value();
    return raw;
#else
    (void)name;
    return base::UnimplementedError("deepinfer was built without the tokenizer module");
#endif
  }
};

ConformanceRunner::ConformanceRunner(ConformanceOptions options)
    : options_(std::move(options)), tokenizers_(std::make_unique<Tokenizers>()) {
  tokenizers_->dir = options_.tokenizers_dir;
}

ConformanceRunner::~ConformanceRunner() = default;

Json ConformanceRunner::RunCase(const Json& test_case) {
  const std::string op = Field(test_case, "op");
  const std::string protocol_name = Field(test_case, "protocol");
  const Json body = test_case.value("body", Json(nullptr));
  const std::string encoding_name = Field(test_case, "encoding");
  const Encoding encoding = encoding_name == "v4" ? Encoding::kV4 : Encoding::kV41;
  const std::string tokenizer_name = Field(test_case, "tokenizer");

  auto convert = [&](ConvertedRequest* request) -> std::optional<CaseError> {
    Protocol protocol;
    if (!ParseProtocol(protocol_name, &protocol)) {
      return CaseError{"bad_request", "unknown protocol: " + protocol_name};
    }
    ConvertOptions options;
    options.strict_recipe = true;
    auto converted = ConvertRequest(protocol, body, options);
    if (!converted.ok()) return FromStatus(converted.status());
    *request = std::move(converted).value();
    return std::nullopt;
  };
#if DEEPINFER_RECIPE_HAS_TOKENIZER
  auto tokenizer_for = [&](const std::string& name,
                           const tokenizer::Tokenizer** out) -> std::optional<CaseError> {
    auto loaded = tokenizers_->Get(name);
    if (!loaded.ok()) return CaseError{"internal", loaded.status().message()};
    *out = static_cast<const tokenizer::Tokenizer*>(*loaded);
    return std::nullopt;
  };
#endif

  std::optional<CaseError> error;
  Json result;
  if (op == "convert" || op == "render" || op == "encode") {
    ConvertedRequest request;
    error = convert(&request);
    if (!error && op == "convert") result = DumpConversion(request);
    if (!error && op == "render") {
      RenderedPrompt rendered = RenderPrompt(request.conversation, encoding);
      result =
          Json{{"prompt", rendered.prompt}, {"image_sources", DumpImages(rendered.image_sources)}};
    }
    if (!error && op == "encode") {
#if DEEPINFER_RECIPE_HAS_TOKENIZER
      const tokenizer::Tokenizer* tok = nullptr;
      error = tokenizer_for(
          tokenizer_name.empty() ? (encoding == Encoding::kV4 ? "v4" : "v41") : tokenizer_name,
          &tok);
      if (!error) {
        const std::string prompt = RenderPrompt(request.conversation, encoding).prompt;
        result = Json{{"ids", EncodePrompt(*tok, prompt)}};
      }
#else
      error = CaseError{"internal", "built without the tokenizer module"};
#endif
    }
  } else if (op == "stream" || op == "complete") {
    ConvertedRequest request;
    error = convert(&request);
    StreamProcessorOptions options;
    options.response_id = kMockId;
    options.model = kMockModel;
    options.accumulate = op == "complete";
    const Json chunks = test_case.value("chunks", Json::array());
    bool uses_token_text = false;
    for (const Json& chunk : chunks) uses_token_text |= Field(chunk, "kind") == "token_text";
    const bool with_tokenizer = op == "stream" && !tokenizer_name.empty();
#if DEEPINFER_RECIPE_HAS_TOKENIZER
    const tokenizer::Tokenizer* tok = nullptr;
    if (!error && with_tokenizer) error = tokenizer_for(tokenizer_name, &tok);
    if (!error && tok != nullptr) options.decoder = MakeTokenDecoder(*tok);
#else
    if (!error && with_tokenizer)
      error = CaseError{"internal", "built without the tokenizer module"};
#endif
    if (!error && uses_token_text && !with_tokenizer) {
      error = CaseError{"bad_request", "token_text chunk requires a tokenizer"};
    }
    if (!error) {
      StreamProcessor processor(request, std::move(options));
      Json events = Json::array();
      for (const Json& chunk : chunks) {
        const std::string kind = Field(chunk, "kind");
        base::Status status;
        if (kind == "ready") {
          std::optional<std::string> fingerprint;
          if (chunk.contains("system_fingerprint") && chunk["system_fingerprint"].is_string()) {
            fingerprint = chunk["system_fingerprint"].get<std::string>();
          }
          processor.OnReady(fingerprint, {chunk.value("prompt_tokens", int64_t{0}),
                                          chunk.value("prompt_cache_hit_tokens", int64_t{0})});
        } else if (kind == "text") {
          processor.OnText(Field(chunk, "content"), chunk.value("content_tokens", int64_t{0}));
        } else if (kind == "token") {
          status = processor.OnToken(chunk.value("token_id", int32_t{0}));
        } else if (kind == "token_text") {
#if DEEPINFER_RECIPE_HAS_TOKENIZER
          for (int32_t id : tok->Encode(Field(chunk, "text"), true)) {
            status = processor.OnToken(id);
            if (!status.ok()) break;
          }
#endif
        } else if (kind == "finish") {
          processor.OnFinish(ParseFinish(Field(chunk, "finish_reason")));
        }
        for (Json& event : processor.TakeEvents()) events.push_back(std::move(event));
        if (!status.ok()) {
          error = CaseError{"internal", status.message()};
          break;
        }
      }
      if (!error) {
        processor.OnEnd();
        for (Json& event : processor.TakeEvents()) events.push_back(std::move(event));
        result = op == "stream" ? Json{{"events", std::move(events)}} : processor.FinalResponse();
      }
    }
  } else if (op == "tokenize" || op == "detokenize") {
#if DEEPINFER_RECIPE_HAS_TOKENIZER
    const tokenizer::Tokenizer* tok = nullptr;
    error = tokenizer_for(tokenizer_name.empty() ? "v41" : tokenizer_name, &tok);
    if (!error && op == "tokenize")
      result = Json{{"ids", tok->Encode(Field(test_case, "text"), true)}};
    if (!error && op == "detokenize") {
      std::vector<int32_t> ids;
      for (const Json& id : test_case.value("ids", Json::array())) ids.push_back(id.get<int32_t>());
      auto text = tok->Decode(ids, test_case.value("skip_special_tokens", false));
      if (text.ok()) {
        result = Json{{"text", *text}};
      } else {
        error = CaseError{"internal", text.status().message()};
      }
    }
#else
    error = CaseError{"internal", "built without the tokenizer module"};
#endif
  } else if (op == "stringify") {
    result = Json{{"text", WriteJson(test_case.value("value", Json(nullptr)), JsonStyle::kPython)}};
  } else if (op == "numbers") {
    Json compact = Json::array();
    Json python = Json::array();
    for (const Json& number : test_case.value("numbers", Json::array())) {
      Json value;
      if (!number.is_string() || !ParseJson(number.get<std::string>(), &value)) {
        error = CaseError{"bad_request", "invalid number"};
        break;
      }
      compact.push_back(WriteJson(value));
      python.push_back(WriteJson(value, JsonStyle::kPython));
    }
    result = Json{{"compact", compact}, {"python", python}};
  } else {
    error = CaseError{"bad_request", "unknown op: " + op};
  }
  Json record = error ? Failure(*error) : Success(std::move(result));
  record["name"] = Field(test_case, "name");
  return record;
}

std::string ConformanceRunner::Compare(const Json& test_case, const Json& actual,
                                       const std::string& golden) {
  Json expected;
  if (!ParseJson(golden, &expected)) return "golden line is not valid JSON";
  const bool merge = Field(test_case, "op") == "stream";
  const std::string expected_text = Normalize(expected, merge);
  const std::string actual_text = Normalize(actual, merge);
  if (expected_text == actual_text) return "";
  return DescribeDifference(expected_text, actual_text);
}

base::StatusOr<ConformanceReport> RunConformance(const std::string& corpus_path,
                                                 const std::string& goldens_path,
                                                 const ConformanceOptions& options) {
  std::ifstream goldens_file(goldens_path);
  if (!goldens_file) return base::NotFoundError("cannot open goldens file " + goldens_path);
  std::map<std::string, std::string> goldens;
  std::string line;
  while (std::getline(goldens_file, line)) {
    if (line.empty()) continue;
    Json parsed;
    if (!ParseJson(line, &parsed) || !parsed.is_object()) {
      return base::InvalidArgumentError("goldens file " + goldens_path + ": malformed line");
    }
    goldens[Field(parsed, "name")] = line;
  }
  std::ifstream corpus_file(corpus_path);
  if (!corpus_file) return base::NotFoundError("cannot open corpus file " + corpus_path);
  ConformanceRunner runner(options);
  ConformanceReport report;
  while (std::getline(corpus_file, line)) {
    if (line.empty() || line.rfind("//", 0) == 0) continue;
    Json test_case;
    if (!ParseJson(line, &test_case) || !test_case.is_object()) {
      return base::InvalidArgumentError("corpus file " + corpus_path + ": malformed line");
    }
    CaseOutcome outcome;
    outcome.name = Field(test_case, "name");
    auto golden = goldens.find(outcome.name);
    if (golden == goldens.end()) {
      outcome.difference = "no golden with this name";
    } else {
      const Json actual = runner.RunCase(test_case);
      outcome.difference = ConformanceRunner::Compare(test_case, actual, golden->second);
      outcome.passed = outcome.difference.empty();
    }
    (outcome.passed ? report.passed : report.failed) += 1;
    report.cases.push_back(std::move(outcome));
  }
  return report;
}

}  // namespace deepinfer::recipe
