// Logging through spdlog. Format strings use fmt syntax:
//   LOG_INFO("loaded {} tensors in {:.1f} s", n, seconds);
// The level comes from DEEPINFER_LOG_LEVEL (trace|debug|info|warn|error|off), default info.
// Logs go to stderr so stdout stays clean for machine-readable command output.
#pragma once

#include <spdlog/spdlog.h>

namespace deepinfer::base {

// The process-wide logger (created on first use, thread-safe).
spdlog::logger& Logger();

// Overrides the level at run time ("debug", "warn", ...). Unknown names are ignored.
void SetLogLevel(std::string_view level);

}  // namespace deepinfer::base

#define LOG_TRACE(...) ::deepinfer::base::Logger().trace(__VA_ARGS__)
#define LOG_DEBUG(...) ::deepinfer::base::Logger().debug(__VA_ARGS__)
#define LOG_INFO(...) ::deepinfer::base::Logger().info(__VA_ARGS__)
#define LOG_WARN(...) ::deepinfer::base::Logger().warn(__VA_ARGS__)
#define LOG_ERROR(...) ::deepinfer::base::Logger().error(__VA_ARGS__)
