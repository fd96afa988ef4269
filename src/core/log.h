// Logging setup: spdlog to stderr, configured once by the CLI. Call spdlog::info(...) directly.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace flint {

// Sets the global level ("trace".."critical", "off") and the stderr sink. Not thread-safe: call
// once at startup before other threads exist.
void init_logging(std::string_view level = "info");

}  // namespace flint
