// Model, --tokenizer and --hf-config-path arguments: a local file or directory, or a Hugging Face
// repo reference (org/name[@revision][:TAG]) resolved through the shared HF cache (src/hub); and
// --device, shared by serve and generate.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"
#include "model/config.h"

namespace flint::cli {

enum class ArgKind { kModel, kConfig, kTokenizer };

// Returns a local path for `spec`. Without the hub layer (no libcurl), only local paths work.
Result<std::string> resolve_model_arg(const std::string& spec, ArgKind kind);

// Resolves MODEL, --tokenizer and --hf-config-path in place; empty optional arguments stay empty.
Status resolve_model_args(std::string& model, std::string& tokenizer, std::string& hf_config_path);

// The config of --hf-config-path (a config.json or its directory), which replaces the model's own;
// none when the flag is empty. Errors name the command and the flag.
Result<std::optional<model::FlintConfig>> load_config_override(std::string_view command,
                                                               const std::string& hf_config_path);

enum class Device { kCpu, kCuda };

// --device auto|cuda|cpu (vLLM's --device). auto: CUDA when this build has it and a GPU is visible,
// else the CPU. Logs the choice (and the GPU's name). Errors: an unknown value, or cuda on a build
// without CUDA or a machine without a GPU.
Result<Device> resolve_device(const std::string& flag);

}  // namespace flint::cli
