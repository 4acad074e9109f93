// EnsureDemoModel: the demo model in the user's cache directory, generated on first use.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <system_error>

#include "base/logging.h"
#include "model/demo_model.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> Env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

}  // namespace

base::StatusOr<fs::path> DeepinferCacheDir() {
  if (auto dir = Env("DEEPINFER_CACHE_DIR")) return fs::path(*dir);
  if (auto xdg = Env("XDG_CACHE_HOME")) return fs::path(*xdg) / "deepinfer";
  if (auto home = Env("HOME")) return fs::path(*home) / ".cache" / "deepinfer";
  return base::NotFoundError("no cache directory: set DEEPINFER_CACHE_DIR, XDG_CACHE_HOME or HOME");
}

base::StatusOr<std::string> EnsureDemoModel() {
  DI_ASSIGN_OR_RETURN(const fs::path cache, DeepinferCacheDir());
  const fs::path target = cache / ("demo-v41-" + std::to_string(kDemoModelVersion));
  std::error_code ec;
  if (fs::is_directory(target, ec)) return target.string();

  fs::create_directories(cache, ec);
  if (ec) return base::UnavailableError("cannot create " + cache.string() + ": " + ec.message());
  const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
  const fs::path tmp = cache / (target.filename().string() + ".tmp-" + std::to_string(::getpid()) +
                                "-" + std::to_string(stamp));
  LOG_INFO("generating the demo model (random weights) in {}", target.string());
  const base::Status written = WriteDemoModel(tmp, DemoModelOptions{});
  if (!written.ok()) {
    fs::remove_all(tmp, ec);
    return written.WithContext("generating the demo model");
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    // Another process may have won the race; its directory is complete.
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    if (fs::is_directory(target, ignored)) return target.string();
    return base::UnavailableError("cannot move the demo model into " + target.string() + ": " +
                                  ec.message());
  }
  return target.string();
}

}  // namespace deepinfer::model
