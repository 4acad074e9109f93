// Recipe throughput:
//   * converting + rendering a Chat Completions request with 200 messages and 50 tools;
//   * parsing 1 MB of model output (reasoning, answer, a DSML tool-call block), both the bare
//     state machine and the full Chat stream processor, fed in token-sized pieces.
#include <benchmark/benchmark.h>

#include <string>

#include "recipe/convert.h"
#include "recipe/render.h"
#include "recipe/state_machine.h"
#include "recipe/stream_processor.h"

namespace deepinfer::recipe {
namespace {

Json LargeChatRequest() {
  Json tools = Json::array();
  for (int t = 0; t < 50; ++t) {
    Json schema = Json::parse(R"({"type":"object","properties":{
        "location":{"type":"string","description":"City and country, e.g. Paris, France"},
        "days":{"type":"integer","minimum":1,"maximum":14,"default":3},
        "units":{"type":"string","enum":["metric","imperial"]}},
        "required":["location"],"additionalProperties":false})");
    tools.push_back({{"type", "function"},
                     {"function",
                      {{"name", "tool_" + std::to_string(t)},
                       {"description", "Looks up forecast data number " + std::to_string(t)},
                       {"parameters", schema}}}});
  }
  Json messages = Json::array();
  messages.push_back({{"role", "system"}, {"content", "You are a careful assistant."}});
  int call = 0;
  while (messages.size() < 200) {
    messages.push_back({{"role", "user"},
                        {"content",
                         "What is the weather going to be like in Paris this week? "
                         "Please also compare it with Lyon and explain the trend."}});
    if (messages.size() % 4 == 0) {
      const std::string id = "call_" + std::to_string(call++);
      messages.push_back(
          {{"role", "assistant"},
           {"content", ""},
           {"reasoning_content", "I should call the forecast tool for both cities."},
           {"tool_calls",
            Json::array({{{"id", id},
                          {"type", "function"},
                          {"function",
                           {{"name", "tool_" + std::to_string(call % 50)},
                            {"arguments", R"({"location": "Paris, France", "days": 7})"}}}}})}});
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", id},
                          {"content", R"({"forecast": [18, 19, 21, 17, 16, 20, 22]})"}});
    } else {
      messages.push_back({{"role", "assistant"},
                          {"content",
                           "Paris will be mild, around 18-22 degrees, with light rain "
                           "midweek; Lyon is a little warmer."},
                          {"reasoning_content", "Summarise the tool output briefly."}});
    }
  }
  return {{"model", "deepseek-v4.1-flash"}, {"messages", messages}, {"tools", tools}};
}

void BM_ConvertAndRender_200Messages_50Tools(benchmark::State& state) {
  const Json body = LargeChatRequest();
  size_t prompt_bytes = 0;
  for (auto _ : state) {
    auto converted = ConvertRequest(Protocol::kChatCompletions, body);
    if (!converted.ok()) {
      state.SkipWithError(converted.status().message().c_str());
      return;
    }
    RenderedPrompt rendered = RenderPrompt(converted->conversation, Encoding::kV41);
    prompt_bytes = rendered.prompt.size();
    benchmark::DoNotOptimize(rendered);
  }
  state.counters["prompt_bytes"] = static_cast<double>(prompt_bytes);
  state.counters["messages"] = static_cast<double>(body["messages"].size());
}
BENCHMARK(BM_ConvertAndRender_200Messages_50Tools)->Unit(benchmark::kMicrosecond);

// ~1 MB: long reasoning, then an answer with markdown and stray '<', then a DSML tool block.
std::string ModelOutput() {
  std::string out;
  const std::string reasoning =
      "Let me think about the problem step by step. The user wants a comparison of the two "
      "options, so I should weigh cost < benefit and check edge cases.\n";
  while (out.size() < 600 * 1024) out += reasoning;
  out += "\n</think>\n\n";
  const std::string answer =
      "## Result\n\nThe first option is cheaper (`a < b`), while the second one scales better. "
      "In short: pick **option B** when load > 10k rps.\n";
  while (out.size() < 1024 * 1024 - 400) out += answer;
  out +=
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"record\">\n"
      "<｜DSML｜ parameter name=\"choice\" string=\"true\">B</｜DSML｜ parameter>\n"
      "<｜DSML｜ parameter name=\"score\" string=\"false\">0.93</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  return out;
}

ParsingOptions ThinkingToolOptions() {
  ParsingOptions options;
  options.parse_tool_calls = true;
  options.reasoning_initial_stage = ReasoningStage::kStart;
  options.stop_sequences = {"<|stop|>"};
  return options;
}

void BM_StateMachine_1MB(benchmark::State& state) {
  const std::string output = ModelOutput();
  const size_t piece = static_cast<size_t>(state.range(0));
  std::vector<ActionSegment> segments;
  for (auto _ : state) {
    StateMachine machine(ThinkingToolOptions());
    for (size_t at = 0; at < output.size(); at += piece) {
      segments.clear();
      machine.Feed(std::string_view(output).substr(at, piece), &segments);
    }
    machine.Finish(&segments);
    benchmark::DoNotOptimize(segments);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * output.size()));
}
BENCHMARK(BM_StateMachine_1MB)->Arg(4)->Arg(64)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

void BM_ChatStream_1MB(benchmark::State& state) {
  const std::string output = ModelOutput();
  const size_t piece = static_cast<size_t>(state.range(0));
  auto request =
      ConvertRequestText(Protocol::kChatCompletions,
                         R"({"model":"m","stream":true,"messages":[{"role":"user","content":"q"}],
          "stop":["<|stop|>"],
          "tools":[{"type":"function","function":{"name":"record","parameters":{"type":"object"}}}]})");
  if (!request.ok()) {
    state.SkipWithError(request.status().message().c_str());
    return;
  }
  size_t events = 0;
  for (auto _ : state) {
    StreamProcessorOptions options;
    options.response_id = "chatcmpl-bench";
    options.model = "m";
    options.created = 1;
    StreamProcessor processor(*request, std::move(options));
    processor.OnReady("fp", {100, 0});
    events = 0;
    for (size_t at = 0; at < output.size(); at += piece) {
      processor.OnText(std::string_view(output).substr(at, piece), 1);
      for (const Json& event : processor.TakeEvents()) {
        benchmark::DoNotOptimize(SseFrame(Protocol::kChatCompletions, event));
        ++events;
      }
    }
    processor.OnFinish(BackendFinish::kStop);
    events += processor.TakeEvents().size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * output.size()));
  state.counters["events"] = static_cast<double>(events);
}
BENCHMARK(BM_ChatStream_1MB)->Arg(4)->Arg(64)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace deepinfer::recipe

BENCHMARK_MAIN();
