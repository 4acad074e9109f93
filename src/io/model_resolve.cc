#include "io/model_resolve.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <vector>

namespace deepinfer::io {
namespace {

namespace fs = std::filesystem;
using base::NotFoundError;
using base::StatusOr;

std::optional<std::string> GetEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool IsDirectory(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::string Trim(std::string s) {
  const char* space = " \t\r\n";
  const size_t begin = s.find_first_not_of(space);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(space) - begin + 1);
}

// "org/name" -> "models--org--name"; nullopt if `id` is not of that form.
std::optional<std::string> CacheFolderName(std::string_view id) {
  const size_t slash = id.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == id.size() ||
      id.find('/', slash + 1) != std::string_view::npos ||
      id.find("..") != std::string_view::npos) {
    return std::nullopt;
  }
  return fmt::format("models--{}--{}", id.substr(0, slash), id.substr(slash + 1));
}

StatusOr<fs::path> ResolveSnapshot(const fs::path& repo, std::string_view id) {
  const fs::path snapshots = repo / "snapshots";
  std::ifstream ref_file(repo / "refs" / "main");
  if (ref_file) {
    std::string revision;
    std::getline(ref_file, revision);
    revision = Trim(revision);
    const fs::path snapshot = snapshots / revision;
    if (revision.empty() || revision.find('/') != std::string::npos || !IsDirectory(snapshot)) {
      return NotFoundError(
          fmt::format("model '{}': refs/main names revision '{}' but {} does not exist", id,
                      revision, snapshot.string()));
    }
    return snapshot;
  }
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(snapshots, ec)) {
    if (entry.is_directory()) found.push_back(entry.path());
  }
  if (found.size() == 1) return found[0];
  return NotFoundError(
      fmt::format("model '{}': {} has no refs/main and {} snapshots in {} (need exactly one)", id,
                  repo.string(), found.size(), snapshots.string()));
}

}  // namespace

ResolveEnv ResolveEnv::FromProcess() {
  ResolveEnv env;
  env.deepinfer_hf_model_dir = GetEnv("DEEPINFER_HF_MODEL_DIR");
  env.hf_hub_cache = GetEnv("HF_HUB_CACHE");
  env.hf_home = GetEnv("HF_HOME");
  env.home = GetEnv("HOME");
  return env;
}

StatusOr<fs::path> HfHubCacheDir(const ResolveEnv& env) {
  if (env.hf_hub_cache) return fs::path(*env.hf_hub_cache);
  if (env.hf_home) return fs::path(*env.hf_home) / "hub";
  if (env.home) return fs::path(*env.home) / ".cache" / "huggingface" / "hub";
  return NotFoundError("no Hugging Face cache: HF_HUB_CACHE, HF_HOME and HOME are all unset");
}

StatusOr<fs::path> ResolveModelDir(std::string_view model, const ResolveEnv& env) {
  if (!model.empty() && IsDirectory(fs::path(model))) return fs::path(model);
  const std::string_view id = model.empty() ? kDefaultModelId : model;
  if (id == kDefaultModelId && env.deepinfer_hf_model_dir) {
    const fs::path dir(*env.deepinfer_hf_model_dir);
    if (!IsDirectory(dir)) {
      return NotFoundError(
          fmt::format("DEEPINFER_HF_MODEL_DIR={} is not a directory", dir.string()));
    }
    return dir;
  }
  const std::optional<std::string> folder = CacheFolderName(id);
  if (!folder) {
    return NotFoundError(fmt::format(
        "model '{}' is neither a directory nor a Hugging Face id of the form org/name", id));
  }
  DI_ASSIGN_OR_RETURN(fs::path hub, HfHubCacheDir(env));
  const fs::path repo = hub / *folder;
  if (!IsDirectory(repo)) {
    return NotFoundError(fmt::format(
        "model '{}' not found: not a directory, and {} does not exist in the Hugging Face cache{}",
        id, repo.string(),
        id == kDefaultModelId ? " (DEEPINFER_HF_MODEL_DIR is not set either)" : ""));
  }
  return ResolveSnapshot(repo, id);
}

}  // namespace deepinfer::io
