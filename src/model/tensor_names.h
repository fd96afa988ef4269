// Accepted tensor-name spellings where the spec marks a name UNCONFIRMED (spec section 3), shared
// by weight binding and `flint convert`. Test partner: tests/unit/model/weights_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flint::model {

// HF names of layer i's attention sinks, most likely first.
std::vector<std::string> hf_sink_names(int64_t layer);
// HF names of layer i's expert-score correction bias.
std::vector<std::string> hf_expert_bias_names(int64_t layer);
// GGUF names of layer i's expert-score correction bias.
std::vector<std::string> gguf_expert_bias_names(int64_t layer);

}  // namespace flint::model
