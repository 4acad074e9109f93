// Shared helpers of the tokenizer tests: the shipped tokenizers, loaded once per process.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer::testing {

// "deepseek-v4.1" or "deepseek-v4", loaded from the shipped assets (aborts the test binary if
// missing: every test needs it).
inline const Tokenizer& Shipped(const std::string& version) {
  static std::unique_ptr<Tokenizer> v41, v4;
  std::unique_ptr<Tokenizer>& slot = version == "deepseek-v4" ? v4 : v41;
  if (!slot) {
    auto tok = Tokenizer::FromFile(DefaultTokenizerPath(version));
    if (!tok.ok()) {
      ADD_FAILURE() << tok.status();
      std::abort();
    }
    slot = std::move(tok).value();
  }
  return *slot;
}

inline std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot open " << path;
    return "";
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace deepinfer::tokenizer::testing
