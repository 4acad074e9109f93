#include "base/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <string>

namespace deepinfer::base {
namespace {

std::shared_ptr<spdlog::logger> MakeLogger() {
  auto logger = spdlog::stderr_color_mt("deepinfer");
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  logger->set_level(spdlog::level::info);
  if (const char* env = std::getenv("DEEPINFER_LOG_LEVEL")) {
    logger->set_level(spdlog::level::from_str(env));
  }
  return logger;
}

}  // namespace

spdlog::logger& Logger() {
  static std::shared_ptr<spdlog::logger> logger = MakeLogger();
  return *logger;
}

void SetLogLevel(std::string_view level) {
  auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed != spdlog::level::off || level == "off") Logger().set_level(parsed);
}

}  // namespace deepinfer::base
