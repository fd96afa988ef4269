// Accepted spellings of the UNCONFIRMED tensor names (spec section 3).
#include "model/tensor_names.h"

#include <fmt/format.h>

namespace flint::model {

std::vector<std::string> hf_sink_names(int64_t layer) {
  std::vector<std::string> out;
  for (const char* parent : {"self_attn.", "self_attn.attn.", "self_attn.sink."}) {
    for (const char* leaf : {"sinks", "softmax_offset", "sinks.weight", "softmax_offset.weight"}) {
      out.push_back(fmt::format("model.layers.{}.{}{}", layer, parent, leaf));
    }
  }
  return out;
}

std::vector<std::string> hf_expert_bias_names(int64_t layer) {
  std::vector<std::string> out;
  for (const char* name :
       {"mlp.gate.e_score_correction_bias", "mlp.e_score_correction_bias",
        "mlp.router.e_score_correction_bias", "mlp.gate.e_score_correction.bias"}) {
    out.push_back(fmt::format("model.layers.{}.{}", layer, name));
  }
  return out;
}

std::vector<std::string> gguf_expert_bias_names(int64_t layer) {
  std::vector<std::string> out;
  for (const char* name : {"exp_probs_b.bias", "exp_probs_b.weight", "exp_probs_b"}) {
    out.push_back(fmt::format("blk.{}.{}", layer, name));
  }
  return out;
}

}  // namespace flint::model
