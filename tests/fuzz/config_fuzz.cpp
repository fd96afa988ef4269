// libFuzzer target: arbitrary bytes as config.json, then as generation_config.json. Any input must
// give a config or an error, never a crash. Partner: src/model/config.cpp.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;
  auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto cfg = flint::model::FlintConfig::from_hf_json(j);
  if (cfg) {
    (void)cfg->total_params();
    (void)cfg->active_params();
    (void)cfg->kv_bytes_per_token(2);
    (void)cfg->apply_generation_config(j);
    (void)cfg->validate();
  }
  return 0;
}
