// SHA-256 and SHA-1 digests for verifying downloaded blobs: LFS files are named by their SHA-256,
// plain git files by their git blob SHA-1 ("blob <size>\0" + content).
// Test partner: tests/unit/hub/sha_test.cpp (checked against Python's hashlib).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace flint::hub {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  // Lowercase hex digest. The object must not be updated afterwards.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

class Sha1 {
 public:
  Sha1();
  void update(const void* data, size_t n);
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 5> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);
// The id git gives a file's contents: sha1("blob " + size + "\0" + data).
std::string git_blob_sha1_hex(std::string_view data);

}  // namespace flint::hub
