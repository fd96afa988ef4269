// SHA-256 (FIPS 180-4) and SHA-1, written from the standard.
#include "hub/sha.h"

#include <cstring>

namespace flint::hub {
namespace {

constexpr uint32_t kK256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
inline uint32_t rotl(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }
inline uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string to_hex(const uint32_t* words, int n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  s.reserve(n * 8);
  for (int i = 0; i < n; ++i)
    for (int shift = 28; shift >= 0; shift -= 4) s += kDigits[(words[i] >> shift) & 0xf];
  return s;
}

// Shared Merkle-Damgard padding: 0x80, zeros, 64-bit big-endian bit length.
template <typename Hash>
void pad_and_finish(Hash& h, uint64_t total_bytes) {
  const uint64_t bits = total_bytes * 8;
  const uint8_t one = 0x80;
  h.update(&one, 1);
  const uint8_t zero = 0;
  while ((total_bytes + 1 + 0) % 64 != 56) {  // count bytes appended so far
    h.update(&zero, 1);
    ++total_bytes;
  }
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  h.update(len, 8);
}

// Feeds bytes through a 64-byte block buffer: full blocks go to `block` straight from the input,
// the tail waits in `buf` for the next update. Shared by SHA-256 and SHA-1.
template <typename BlockFn>
void absorb(std::array<uint8_t, 64>& buf, size_t& buf_len, const uint8_t* p, size_t n,
            BlockFn&& block) {
  while (n > 0) {
    if (buf_len == 0 && n >= 64) {
      block(p);
      p += 64;
      n -= 64;
      continue;
    }
    const size_t take = std::min(n, 64 - buf_len);
    std::memcpy(buf.data() + buf_len, p, take);
    buf_len += take;
    p += take;
    n -= take;
    if (buf_len == 64) {
      block(buf.data());
      buf_len = 0;
    }
  }
}

}  // namespace

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::block(const uint8_t* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) w[i] = load_be32(p + 4 * i);
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t t1 =
        h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK256[i] + w[i];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a;
  h_[1] += b;
  h_[2] += c;
  h_[3] += d;
  h_[4] += e;
  h_[5] += f;
  h_[6] += g;
  h_[7] += h;
}

void Sha256::update(const void* data, size_t n) {
  total_ += n;
  absorb(buf_, buf_len_, static_cast<const uint8_t*>(data), n,
         [this](const uint8_t* p) { block(p); });
}

std::string Sha256::hex_digest() {
  pad_and_finish(*this, total_);
  return to_hex(h_.data(), 8);
}

Sha1::Sha1() : h_{0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0} {}

void Sha1::block(const uint8_t* p) {
  uint32_t w[80];
  for (int i = 0; i < 16; ++i) w[i] = load_be32(p + 4 * i);
  for (int i = 16; i < 80; ++i) w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4];
  for (int i = 0; i < 80; ++i) {
    uint32_t f, k;
    if (i < 20) {
      f = (b & c) | (~b & d);
      k = 0x5A827999;
    } else if (i < 40) {
      f = b ^ c ^ d;
      k = 0x6ED9EBA1;
    } else if (i < 60) {
      f = (b & c) | (b & d) | (c & d);
      k = 0x8F1BBCDC;
    } else {
      f = b ^ c ^ d;
      k = 0xCA62C1D6;
    }
    const uint32_t t = rotl(a, 5) + f + e + k + w[i];
    e = d;
    d = c;
    c = rotl(b, 30);
    b = a;
    a = t;
  }
  h_[0] += a;
  h_[1] += b;
  h_[2] += c;
  h_[3] += d;
  h_[4] += e;
}

void Sha1::update(const void* data, size_t n) {
  total_ += n;
  absorb(buf_, buf_len_, static_cast<const uint8_t*>(data), n,
         [this](const uint8_t* p) { block(p); });
}

std::string Sha1::hex_digest() {
  pad_and_finish(*this, total_);
  return to_hex(h_.data(), 5);
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data.data(), data.size());
  return h.hex_digest();
}

std::string git_blob_sha1_hex(std::string_view data) {
  Sha1 h;
  const std::string header = "blob " + std::to_string(data.size()) + std::string(1, '\0');
  h.update(header.data(), header.size());
  h.update(data.data(), data.size());
  return h.hex_digest();
}

}  // namespace flint::hub
