#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {
namespace {

std::filesystem::path ExecutableDir() {
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::filesystem::path() : exe.parent_path();
}

}  // namespace

std::string DefaultTokenizerPath(std::string_view version) {
  namespace fs = std::filesystem;
  const std::string name(version);
  std::vector<fs::path> candidates;
  if (const char* dir = std::getenv("DEEPINFER_TOKENIZER_DIR"); dir != nullptr && *dir) {
    candidates.push_back(fs::path(dir) / name / "tokenizer.json");
    candidates.push_back(fs::path(dir) / "tokenizer.json");
  }
  if (const fs::path exe_dir = ExecutableDir(); !exe_dir.empty()) {
    candidates.push_back(exe_dir / ".." / "share" / "deepinfer" / "tokenizers" / name /
                         "tokenizer.json");
    candidates.push_back(exe_dir / ".." / "assets" / "tokenizers" / name / "tokenizer.json");
    candidates.push_back(exe_dir / ".." / ".." / "assets" / "tokenizers" / name / "tokenizer.json");
  }
#ifdef DEEPINFER_SOURCE_DIR
  candidates.push_back(fs::path(DEEPINFER_SOURCE_DIR) / "assets" / "tokenizers" / name /
                       "tokenizer.json");
#endif
  std::error_code error;
  for (const fs::path& candidate : candidates) {
    if (fs::is_regular_file(candidate, error)) return candidate.lexically_normal().string();
  }
  return candidates.empty() ? name + "/tokenizer.json" : candidates.back().string();
}

}  // namespace deepinfer::tokenizer
