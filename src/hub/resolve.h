// Turns a model, --tokenizer or --hf-config-path argument into a local path: a local file or
// directory as it is, or a Hugging Face repo reference resolved through the shared HF cache,
// downloading what is missing unless offline. Test partner: tests/python/hub/.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"
#include "hub/hf_cache.h"

namespace flint::hub {

// What the caller needs from a repo.
enum class Need {
  kModel,      // weights (the chosen GGUF, or safetensors + config), plus tokenizer and configs
  kConfig,     // config.json and generation_config.json
  kTokenizer,  // tokenizer.json, tokenizer_config.json, chat_template.jinja,
               // special_tokens_map.json
};

struct ResolveOptions {
  HubSettings settings = HubSettings::from_env();
  int parallel_downloads = 4;
  bool progress_bar = false;  // a terminal progress bar; otherwise periodic log lines
};

// Returns a local path: the argument itself if it exists locally; for a repo, the snapshot
// directory, or the chosen .gguf file (first shard) when the repo holds GGUF weights and
// need == kModel. Errors say what to do (HF_TOKEN, unknown repo/revision, offline mode, disk full).
Result<std::string> resolve(const std::string& spec, Need need, const ResolveOptions& opts = {});

// Files of a repo listing that `need` requires; `tag` picks among GGUF files. Exposed for tests.
Result<std::vector<std::string>> select_files(const std::vector<std::string>& repo_files, Need need,
                                              const std::string& tag);

}  // namespace flint::hub
