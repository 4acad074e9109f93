// `deepinfer tokenize` and `deepinfer detokenize`: the DeepSeek tokenizer on the command line.
// deepinfer-cmd-requires: tokenizer
//
//   deepinfer tokenize [--tokenizer PATH|deepseek-v4.1|deepseek-v4] [--no-special] < text
//       -> one line, a JSON array of ids (no BOS/EOS added)
//   deepinfer tokenize --jsonl < lines
//       each input line {"id": <any JSON>, "text": "..."} -> {"id": <same>, "ids": [...]};
//       a bad line -> {"id": <id or null>, "error": "..."} (exit status 2 at the end)
//   deepinfer detokenize [--tokenizer ...] [--skip-special] < '[1, 2, 3]'
//       -> the decoded text, exactly (no newline added)
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "tokenizer/tokenizer.h"

namespace {

using deepinfer::tokenizer::DefaultTokenizerPath;
using deepinfer::tokenizer::Tokenizer;
using nlohmann::json;

// A path, or the name of a shipped tokenizer ("deepseek-v4.1", "deepseek-v4").
std::unique_ptr<Tokenizer> LoadTokenizerOrReport(const std::string& path_or_name) {
  std::string path = path_or_name.empty() ? DefaultTokenizerPath() : path_or_name;
  std::error_code error;
  if (!std::filesystem::exists(path, error) &&
      (path_or_name == "deepseek-v4.1" || path_or_name == "deepseek-v4")) {
    path = DefaultTokenizerPath(path_or_name);
  }
  auto tok = Tokenizer::FromFile(path);
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s\n", tok.status().ToString().c_str());
    return nullptr;
  }
  return std::move(tok).value();
}

std::string ReadAllStdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

void WriteStdout(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

// One JSONL request -> one response line (without newline). Sets *failed on a bad line.
std::string TokenizeJsonLine(const Tokenizer& tok, const std::string& line, size_t line_number,
                             bool match_special, bool* failed) {
  nlohmann::ordered_json response = nlohmann::ordered_json::object();
  response["id"] = nullptr;
  try {
    const json request = json::parse(line);
    if (request.is_object() && request.contains("id")) response["id"] = request["id"];
    if (!request.is_object() || !request.contains("text") || !request["text"].is_string()) {
      throw std::invalid_argument("expected an object with a string \"text\"");
    }
    response["ids"] = tok.Encode(request["text"].get<std::string>(), match_special);
  } catch (const std::exception& e) {
    *failed = true;
    response["error"] = "line " + std::to_string(line_number) + ": " + e.what();
    response.erase("ids");
  }
  return response.dump(-1, ' ', false, json::error_handler_t::replace);
}

int RunTokenize(int argc, char** argv) {
  CLI::App app("Encode UTF-8 text from stdin to DeepSeek token ids (JSON array on stdout).");
  std::string tokenizer_path;
  bool no_special = false;
  bool jsonl = false;
  app.add_option("--tokenizer", tokenizer_path,
                 "tokenizer.json path or shipped name (default: shipped deepseek-v4.1)");
  app.add_flag("--no-special", no_special,
               "do not match added/special-token text (plain BPE for everything)");
  app.add_flag("--jsonl", jsonl,
               "stdin: lines {\"id\":..,\"text\":..}; stdout: lines {\"id\":..,\"ids\":[..]}");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::unique_ptr<Tokenizer> tok = LoadTokenizerOrReport(tokenizer_path);
  if (!tok) return 2;
  if (!jsonl) {
    WriteStdout(json(tok->Encode(ReadAllStdin(), !no_special)).dump() + "\n");
    return 0;
  }
  std::ios::sync_with_stdio(false);
  bool failed = false;
  std::string line;
  size_t line_number = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::string out = TokenizeJsonLine(*tok, line, line_number, !no_special, &failed);
    out.push_back('\n');
    WriteStdout(out);
  }
  std::fflush(stdout);
  return failed ? 2 : 0;
}

int RunDetokenize(int argc, char** argv) {
  CLI::App app("Decode a JSON array of DeepSeek token ids from stdin to text on stdout.");
  std::string tokenizer_path;
  bool skip_special = false;
  app.add_option("--tokenizer", tokenizer_path,
                 "tokenizer.json path or shipped name (default: shipped deepseek-v4.1)");
  app.add_flag("--skip-special", skip_special, "drop tokens flagged special");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::vector<int32_t> ids;
  try {
    const json input = json::parse(ReadAllStdin());
    ids = input.get<std::vector<int32_t>>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: stdin is not a JSON array of token ids: %s\n", e.what());
    return 2;
  }
  std::unique_ptr<Tokenizer> tok = LoadTokenizerOrReport(tokenizer_path);
  if (!tok) return 2;
  auto text = tok->Decode(ids, skip_special);
  if (!text.ok()) {
    std::fprintf(stderr, "error: %s\n", text.status().ToString().c_str());
    return 2;
  }
  WriteStdout(*text);
  return 0;
}

}  // namespace

DEEPINFER_REGISTER_COMMAND(tokenize, "text on stdin -> JSON array of token ids", RunTokenize);
DEEPINFER_REGISTER_COMMAND(detokenize, "JSON array of token ids on stdin -> text", RunDetokenize);
