// Model, --tokenizer and --hf-config-path arguments: a local file or directory, or a Hugging Face
// repo reference (org/name[@revision][:TAG]) resolved through the shared HF cache (src/hub).
#pragma once

#include <string>

#include "core/result.h"

namespace flint::cli {

enum class ArgKind { kModel, kConfig, kTokenizer };

// Returns a local path for `spec`. Without the hub layer (no libcurl), only local paths work.
Result<std::string> resolve_model_arg(const std::string& spec, ArgKind kind);

// Resolves MODEL, --tokenizer and --hf-config-path in place; empty optional arguments stay empty.
Status resolve_model_args(std::string& model, std::string& tokenizer, std::string& hf_config_path);

}  // namespace flint::cli
