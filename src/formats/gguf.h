// GGUF v3 reader (zero-copy over MappedFile) and writer. Knows the container only, no model.
// Test partner: tests/unit/formats/gguf_test.cpp and tests/python/formats/test_gguf_interop.py.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"
#include "formats/mmap_file.h"

namespace flint::formats {

// GGUF metadata value types, numbered as in the file format.
enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// ggml tensor types we read (numbered as in ggml.h).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
  kNVFP4 = 40,
};

// The DType for a ggml type, or an error naming the type for ones we cannot use.
Result<DType> dtype_from_ggml(uint32_t ggml_type);
// The ggml type of `t`; aborts for F8_E4M3 and U8, which ggml lacks (see ggml_type_supported).
GgmlType ggml_from_dtype(DType t);
bool ggml_type_supported(DType t);

struct GgufValue;
using GgufArray = std::vector<GgufValue>;

// One metadata value. Integers keep their declared width in `type`; `v` holds the widest C++ type
// of their family. Arrays hold their element type and elements (nested arrays allowed).
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  GgufValueType array_type = GgufValueType::kU8;  // element type when type == kArray
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> v;

  static GgufValue u32(uint32_t x);
  static GgufValue u64(uint64_t x);
  static GgufValue i32(int32_t x);
  static GgufValue f32(float x);
  static GgufValue boolean(bool x);
  static GgufValue string(std::string s);
  static GgufValue array(GgufValueType elem, GgufArray items);

  // Checked accessors: an error names what was expected and what was found.
  Result<uint64_t> as_uint() const;  // any unsigned/signed integer >= 0
  Result<int64_t> as_int() const;    // any integer that fits
  Result<double> as_float() const;   // f32/f64 or integer
  Result<bool> as_bool() const;
  Result<std::string> as_string() const;
  const GgufArray* as_array() const;  // nullptr unless an array
};

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;
  DType dtype = DType::kF32;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the innermost (contiguous) dim
  uint64_t offset = 0;      // relative to the data section
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;

  // PyTorch-order shape (ne reversed): a ggml [in, out] weight becomes {out, in}.
  std::vector<int64_t> torch_shape() const;
};

class GgufFile {
 public:
  // Opens and validates `path`. Every structural problem (magic, version, counts, string lengths,
  // UTF-8 keys, alignment, offsets, overlaps, sizes) is an error naming the file and the field.
  static Result<GgufFile> open(const std::string& path);
  // Parses an in-memory image (used by the fuzzer); `bytes` must outlive the GgufFile.
  static Result<GgufFile> parse(const uint8_t* bytes, size_t size, const std::string& name);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // The F32 `<tensor_name>.scale` companion (an NVFP4 tensor's global scale: {1}, or {n_expert}
  // for merged expert tensors), or nullptr if there is none.
  const GgufTensorInfo* find_scale(const std::string& tensor_name) const;
  const std::string& path() const { return path_; }

 private:
  std::shared_ptr<MappedFile> file_;  // shared so GgufFile stays cheap to move
  std::string path_;
  uint32_t version_ = 3;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Writes GGUF v3 files. Tensor data is copied at write(); ne is in ggml order.
class GgufWriter {
 public:
  void set(const std::string& key, GgufValue value);
  // `data` must hold dtype_bytes_for(dtype, prod(ne)) bytes and stay valid until write().
  void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> ne, const void* data);
  void set_alignment(uint64_t alignment);
  Status write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> ne;
    const void* data;
  };
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
  uint64_t alignment_ = 32;
};

}  // namespace flint::formats
