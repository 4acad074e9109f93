// Shared body of the request fuzzers: arbitrary bytes -> JSON -> conversion -> rendering ->
// a short parsed stream. Any crash, sanitizer report or exception is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "recipe/convert.h"
#include "recipe/render.h"
#include "recipe/stream_processor.h"

namespace deepinfer::recipe {

inline void FuzzRequest(Protocol protocol, const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool strict : {false, true}) {
    ConvertOptions options;
    options.strict_recipe = strict;
    auto converted = ConvertRequestText(protocol, text, options);
    if (!converted.ok()) {
      (void)ErrorResponseFor(converted.status());
      continue;
    }
    (void)DumpConversion(*converted);
    (void)RenderPrompt(converted->conversation, Encoding::kV41);
    (void)RenderPrompt(converted->conversation, Encoding::kV4);
    StreamProcessorOptions stream_options;
    stream_options.response_id = "fuzz";
    stream_options.model = "m";
    stream_options.accumulate = true;
    StreamProcessor processor(*converted, std::move(stream_options));
    processor.OnText(text.substr(0, 64), 1);
    processor.OnFinish(BackendFinish::kStop);
    (void)WriteJson(processor.FinalResponse());
  }
}

}  // namespace deepinfer::recipe
