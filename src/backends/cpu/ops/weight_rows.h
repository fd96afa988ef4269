// Reading weights as FP32: one row of a (possibly block-quantized) matrix, or a whole vector.
// Everything the CPU backend reads from FlintWeights goes through here.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace flint::cpu {

// Dequantizes row `row` of w ([rows, cols] in any supported dtype) into out[cols].
void weight_row(ConstTensorView w, int64_t row, float* out);
// A whole 1-D weight (norm weights, sinks, biases) as FP32.
std::vector<float> weight_vector(ConstTensorView w);

}  // namespace flint::cpu
