// formats_dump: drives the formats library from the interop pytests (tests/python/formats/).
//   gguf-dump FILE | gguf-copy IN OUT | st-dump PATH | st-copy IN OUT
//   quantize TYPE IN.f32 OUT | dequantize TYPE IN N OUT.f32 | nvfp4-modelopt IN.blocks ROWS COLS
//   OUT
// Dumps are JSON on stdout; failures print the error to stderr and exit 1.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/nvfp4.h"
#include "formats/quant.h"
#include "formats/safetensors.h"

namespace {

using flint::DType;
using nlohmann::json;
namespace f = flint::formats;

std::string hex(const uint8_t* p, uint64_t n) {
  static const char* const kDigits = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (uint64_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

json value_json(const f::GgufValue& v) {
  json j;
  j["type"] = static_cast<int>(v.type);
  if (const f::GgufArray* a = v.as_array()) {
    j["elem"] = static_cast<int>(v.array_type);
    json items = json::array();
    for (const auto& item : *a) items.push_back(value_json(item));
    j["value"] = items;
  } else if (auto s = v.as_string()) {
    j["value"] = hex(reinterpret_cast<const uint8_t*>(s->data()), s->size());
  } else if (auto b = v.as_bool()) {
    j["value"] = *b;
  } else if (const auto* d = std::get_if<double>(&v.v)) {
    j["value"] = *d;
  } else if (const auto* i = std::get_if<int64_t>(&v.v)) {
    j["value"] = *i;
  } else {
    j["value"] = std::get<uint64_t>(v.v);
  }
  return j;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const void* p, size_t n) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
}

int fail(const flint::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.message.c_str());
  return 1;
}

DType parse_type(const std::string& s) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kU8, DType::kI8,
                  DType::kI32, DType::kQ8_0, DType::kQ4_1, DType::kNVFP4}) {
    if (flint::dtype_name(t) == s) return t;
  }
  std::fprintf(stderr, "error: unknown type %s\n", s.c_str());
  std::exit(2);
}

int gguf_dump(const std::string& path) {
  auto g = f::GgufFile::open(path);
  if (!g) return fail(g.error());
  json j;
  j["version"] = g->version();
  j["alignment"] = g->alignment();
  j["metadata"] = json::object();
  for (const auto& [k, v] : g->metadata()) j["metadata"][k] = value_json(v);
  j["tensors"] = json::array();
  for (const auto& t : g->tensors()) {
    json tj{{"name", t.name},
            {"ggml_type", t.ggml_type},
            {"dtype", flint::dtype_name(t.dtype)},
            {"ne", t.ne},
            {"offset", t.offset},
            {"nbytes", t.nbytes},
            {"data", hex(t.data, t.nbytes)}};
    if (flint::formats::can_dequantize(t.dtype)) {
      int64_t n = 1;
      for (int64_t d : t.ne) n *= d;
      std::vector<float> out(static_cast<size_t>(n));
      f::dequantize_row(t.dtype, t.data, out.data(), n);
      tj["f32"] = hex(reinterpret_cast<const uint8_t*>(out.data()), out.size() * 4);
    }
    j["tensors"].push_back(tj);
  }
  std::puts(j.dump().c_str());
  return 0;
}

int gguf_copy(const std::string& in, const std::string& out) {
  auto g = f::GgufFile::open(in);
  if (!g) return fail(g.error());
  f::GgufWriter w;
  for (const auto& [k, v] : g->metadata()) w.set(k, v);
  if (g->alignment() != 32) w.set_alignment(g->alignment());
  for (const auto& t : g->tensors()) w.add_tensor(t.name, t.dtype, t.ne, t.data);
  auto st = w.write(out);
  return st ? 0 : fail(st.error());
}

int st_dump(const std::string& path) {
  auto m = f::SafetensorsModel::open(path);
  if (!m) return fail(m.error());
  json j;
  j["metadata"] = m->metadata();
  j["tensors"] = json::object();
  for (const auto& [name, t] : m->tensors()) {
    j["tensors"][name] = {
        {"dtype", flint::dtype_name(t.dtype)}, {"shape", t.shape}, {"data", hex(t.data, t.nbytes)}};
  }
  std::puts(j.dump().c_str());
  return 0;
}

int st_copy(const std::string& in, const std::string& out) {
  auto m = f::SafetensorsModel::open(in);
  if (!m) return fail(m.error());
  std::vector<f::SafetensorsWriteTensor> ts;
  for (const auto& [name, t] : m->tensors()) ts.push_back({name, t.dtype, t.shape, t.data});
  auto st = f::write_safetensors(out, ts, m->metadata());
  return st ? 0 : fail(st.error());
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 2 && a[0] == "gguf-dump") return gguf_dump(a[1]);
  if (a.size() == 3 && a[0] == "gguf-copy") return gguf_copy(a[1], a[2]);
  if (a.size() == 2 && a[0] == "st-dump") return st_dump(a[1]);
  if (a.size() == 3 && a[0] == "st-copy") return st_copy(a[1], a[2]);
  if (a.size() == 4 && a[0] == "quantize") {
    const DType t = parse_type(a[1]);
    const std::vector<uint8_t> in = read_bytes(a[2]);
    const auto n = static_cast<int64_t>(in.size() / 4);
    std::vector<float> x(static_cast<size_t>(n));
    std::memcpy(x.data(), in.data(), x.size() * 4);
    std::vector<uint8_t> out(static_cast<size_t>(flint::dtype_bytes_for(t, n)));
    f::quantize_row(t, x.data(), out.data(), n);
    write_bytes(a[3], out.data(), out.size());
    return 0;
  }
  if (a.size() == 5 && a[0] == "dequantize") {
    const DType t = parse_type(a[1]);
    const std::vector<uint8_t> in = read_bytes(a[2]);
    const int64_t n = std::stoll(a[3]);
    std::vector<float> out(static_cast<size_t>(n));
    f::dequantize_row(t, in.data(), out.data(), n);
    write_bytes(a[4], out.data(), out.size() * 4);
    return 0;
  }
  if (a.size() == 5 && a[0] == "nvfp4-modelopt") {  // writes codes then scales
    const std::vector<uint8_t> in = read_bytes(a[1]);
    const int64_t rows = std::stoll(a[2]);
    const int64_t cols = std::stoll(a[3]);
    std::vector<uint8_t> out(static_cast<size_t>(rows * cols / 2 + rows * cols / 16));
    auto st =
        f::nvfp4_ggml_to_modelopt(in.data(), rows, cols, out.data(), out.data() + rows * cols / 2);
    if (!st) return fail(st.error());
    write_bytes(a[4], out.data(), out.size());
    return 0;
  }
  std::fprintf(stderr,
               "usage: formats_dump "
               "gguf-dump|gguf-copy|st-dump|st-copy|quantize|dequantize|nvfp4-modelopt ...\n");
  return 2;
}
