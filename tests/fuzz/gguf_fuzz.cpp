// libFuzzer target: GGUF parse-from-memory must return a value or an error, never crash. On success
// every tensor's bytes are touched and dequantized, so bad offsets or sizes show up under ASan.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/gguf.h"
#include "formats/quant.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto g = flint::formats::GgufFile::parse(data, size, "fuzz.gguf");
  if (!g) return 0;
  for (const auto& t : g->tensors()) {
    if (!flint::formats::can_dequantize(t.dtype) || t.nbytes > (1u << 20)) continue;
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    std::vector<float> out(static_cast<size_t>(n));
    flint::formats::dequantize_row(t.dtype, t.data, out.data(), n);
  }
  for (const auto& [key, value] : g->metadata()) {
    (void)value.as_string();
    (void)value.as_int();
    (void)value.as_float();
  }
  return 0;
}
