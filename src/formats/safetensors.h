// safetensors reader (zero-copy over MappedFile), single file or sharded via
// model.safetensors.index.json, plus a writer for tools and tests.
// Test partner: tests/unit/formats/safetensors_test.cpp,
// tests/python/formats/test_safetensors_interop.py.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"
#include "formats/mmap_file.h"

namespace flint::formats {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // PyTorch order
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  std::string file;  // which shard it came from (for error messages)
};

// One or more safetensors files viewed as one name -> tensor table.
class SafetensorsModel {
 public:
  // `path` is a .safetensors file, a model.safetensors.index.json, or a directory holding either.
  static Result<SafetensorsModel> open(const std::string& path);
  // Parses one in-memory file image (used by the fuzzer); `bytes` must outlive the model.
  static Result<SafetensorsModel> parse(const uint8_t* bytes, size_t size, const std::string& name);

  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;
  // The "__metadata__" string map of the first file.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::map<std::string, SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsWriteTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;  // dtype_bytes_for(dtype, prod(shape)) bytes
};

Status write_safetensors(const std::string& path,
                         const std::vector<SafetensorsWriteTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace flint::formats
