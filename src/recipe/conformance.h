// Conformance runner for the recipe reference vectors (../shared/recipe/README.md): runs
// every case of a corpus (convert / render / encode / stream / complete / tokenize /
// detokenize / stringify / numbers) and compares the result record with the golden as the
// README prescribes (timestamps zeroed; tool-argument fragments compared after merging runs;
// serde wording after "invalid request body: " ignored).
#pragma once

#include <string>
#include <vector>

#include "base/statusor.h"
#include "recipe/json_writer.h"

namespace deepinfer::recipe {

struct ConformanceOptions {
  // Folder holding deepseek-v4.1/tokenizer.json and deepseek-v4/tokenizer.json; empty = the
  // tokenizers shipped with deepinfer (tokenizer::DefaultTokenizerPath).
  std::string tokenizers_dir;
};

struct CaseOutcome {
  std::string name;
  bool passed = false;
  std::string difference;  // first difference, for failures
};

struct ConformanceReport {
  std::vector<CaseOutcome> cases;
  int passed = 0;
  int failed = 0;
};

// Runs one case record and returns its result record ({"ok",...,"name"}), as the reference
// generator would write it.
class ConformanceRunner {
 public:
  explicit ConformanceRunner(ConformanceOptions options);
  ~ConformanceRunner();

  Json RunCase(const Json& test_case);
  // Compares a result record with the golden line; returns "" when they match, otherwise a
  // description of the first difference.
  static std::string Compare(const Json& test_case, const Json& actual, const std::string& golden);

 private:
  struct Tokenizers;
  ConformanceOptions options_;
  std::unique_ptr<Tokenizers> tokenizers_;
};

// Runs every case of `corpus_path` against `goldens_path` (JSON lines, joined by name).
base::StatusOr<ConformanceReport> RunConformance(const std::string& corpus_path,
                                                 const std::string& goldens_path,
                                                 const ConformanceOptions& options);

}  // namespace deepinfer::recipe
