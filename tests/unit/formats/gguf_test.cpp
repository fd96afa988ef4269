// GGUF reader/writer: round trips of every metadata type, and a clear error (never a crash) for
// each kind of malformed file. Interop with the gguf package: tests/python/formats.
#include "formats/gguf.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <vector>

#include "formats/nvfp4.h"
#include "test_bytes.h"

namespace flint::formats {
namespace {

using testing_support::Bytes;

constexpr uint32_t kF32 = 0;

Bytes header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Bytes b;
  b.put<uint32_t>(0x46554747).put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  return b;
}

void kv_string(Bytes& b, const std::string& key, const std::string& value) {
  b.str(key).put<uint32_t>(8).str(value);
}

void tensor_info(Bytes& b, const std::string& name, std::vector<uint64_t> ne, uint32_t type,
                 uint64_t offset) {
  b.str(name).put<uint32_t>(static_cast<uint32_t>(ne.size()));
  for (uint64_t d : ne) b.put<uint64_t>(d);
  b.put<uint32_t>(type).put<uint64_t>(offset);
}

// Two F32 [4] tensors at data offsets 0 and 32.
Bytes valid_file() {
  Bytes b = header(2, 1);
  kv_string(b, "general.architecture", "flint");
  tensor_info(b, "a", {4}, kF32, 0);
  tensor_info(b, "b", {4}, kF32, 32);
  b.pad(32);
  for (int i = 0; i < 12; ++i) b.put<float>(static_cast<float>(i));  // ends with tensor b
  return b;
}

std::string parse_error(const Bytes& b) {
  auto r = GgufFile::parse(b.b.data(), b.b.size(), "test.gguf");
  if (r) return "";
  EXPECT_NE(r.error().message.find("test.gguf"), std::string::npos) << r.error().message;
  return r.error().message;
}

#define EXPECT_GGUF_ERROR(bytes, needle)                                          \
  do {                                                                            \
    const std::string msg = parse_error(bytes);                                   \
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: '" << msg << "'"; \
  } while (0)

TEST(Gguf, ParsesHandBuiltFile) {
  const Bytes b = valid_file();
  auto g = GgufFile::parse(b.b.data(), b.b.size(), "test.gguf");
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(*g->find("general.architecture")->as_string(), "flint");
  const GgufTensorInfo* t = g->find_tensor("b");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kF32);
  EXPECT_EQ(t->nbytes, 16u);
  float v[4];
  std::memcpy(v, t->data, 16);
  EXPECT_EQ(v[0], 8.0f);
  EXPECT_EQ(v[3], 11.0f);
}

TEST(Gguf, WriterRoundTripsEveryValueType) {
  GgufWriter w;
  GgufValue u8;
  u8.type = GgufValueType::kU8;
  u8.v = uint64_t{250};
  GgufValue i16;
  i16.type = GgufValueType::kI16;
  i16.v = int64_t{-1234};
  GgufValue f64;
  f64.type = GgufValueType::kF64;
  f64.v = 1.0 / 3.0;
  GgufValue i64;
  i64.type = GgufValueType::kI64;
  i64.v = std::numeric_limits<int64_t>::min();
  w.set("k.u8", u8);
  w.set("k.i16", i16);
  w.set("k.u32", GgufValue::u32(4000000000u));
  w.set("k.i32", GgufValue::i32(-7));
  w.set("k.u64", GgufValue::u64(~uint64_t{0}));
  w.set("k.i64", i64);
  w.set("k.f32", GgufValue::f32(0.1f));
  w.set("k.f64", f64);
  w.set("k.bool", GgufValue::boolean(true));
  w.set("k.str", GgufValue::string("héllo"));
  w.set("k.arr",
        GgufValue::array(GgufValueType::kString, {GgufValue::string("a"), GgufValue::string("")}));
  w.set("k.nested", GgufValue::array(GgufValueType::kArray,
                                     {GgufValue::array(GgufValueType::kI32,
                                                       {GgufValue::i32(1), GgufValue::i32(2)}),
                                      GgufValue::array(GgufValueType::kI32, {GgufValue::i32(3)})}));
  std::vector<float> a(6);
  for (int i = 0; i < 6; ++i) a[i] = static_cast<float>(i) * 0.5f;
  std::vector<float> x(128);
  for (int i = 0; i < 128; ++i) x[i] = std::sin(static_cast<float>(i));
  std::vector<uint8_t> nv(2 * kNvfp4BlockBytes);
  nvfp4_quantize_row(x.data(), nv.data(), 128);
  const float scale = 0.25f;
  w.add_tensor("a", DType::kF32, {3, 2}, a.data());
  w.add_tensor("w", DType::kNVFP4, {64, 2}, nv.data());
  w.add_tensor("w.scale", DType::kF32, {1}, &scale);
  w.set_alignment(64);
  const std::string path = testing_support::temp_path("rt.gguf");
  ASSERT_TRUE(w.write(path));

  auto g = GgufFile::open(path);
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(g->alignment(), 64u);
  EXPECT_EQ(*g->find("k.u8")->as_uint(), 250u);
  EXPECT_EQ(g->find("k.u8")->type, GgufValueType::kU8);
  EXPECT_EQ(*g->find("k.i16")->as_int(), -1234);
  EXPECT_EQ(*g->find("k.u32")->as_uint(), 4000000000u);
  EXPECT_EQ(*g->find("k.i32")->as_int(), -7);
  EXPECT_EQ(*g->find("k.u64")->as_uint(), ~uint64_t{0});
  EXPECT_FALSE(g->find("k.u64")->as_int());
  EXPECT_EQ(*g->find("k.i64")->as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*g->find("k.f32")->as_float(), static_cast<double>(0.1f));
  EXPECT_EQ(*g->find("k.f64")->as_float(), 1.0 / 3.0);
  EXPECT_TRUE(*g->find("k.bool")->as_bool());
  EXPECT_EQ(*g->find("k.str")->as_string(), "héllo");
  EXPECT_FALSE(g->find("k.str")->as_int());
  const GgufArray* arr = g->find("k.arr")->as_array();
  ASSERT_NE(arr, nullptr);
  ASSERT_EQ(arr->size(), 2u);
  EXPECT_EQ(*(*arr)[0].as_string(), "a");
  const GgufArray* nested = g->find("k.nested")->as_array();
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->size(), 2u);
  EXPECT_EQ(*(*(*nested)[0].as_array())[1].as_int(), 2);
  EXPECT_EQ(*(*(*nested)[1].as_array())[0].as_int(), 3);

  const GgufTensorInfo* t = g->find_tensor("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kNVFP4);
  EXPECT_EQ(t->torch_shape(), (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(t->offset % 64, 0u);
  EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->nbytes), nv);
  const GgufTensorInfo* s = g->find_scale("w");
  ASSERT_NE(s, nullptr);
  float sv;
  std::memcpy(&sv, s->data, 4);
  EXPECT_EQ(sv, 0.25f);
  EXPECT_EQ(g->find_scale("a"), nullptr);
  std::remove(path.c_str());
}

TEST(Gguf, RejectsEveryTruncation) {
  const Bytes full = valid_file();
  for (size_t n = 0; n < full.b.size(); ++n) {
    Bytes cut;
    cut.b.assign(full.b.begin(), full.b.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_NE(parse_error(cut), "") << "prefix of " << n << " bytes parsed";
  }
}

TEST(Gguf, RejectsWrongMagic) {
  Bytes b = valid_file();
  b.b[0] = 'X';
  EXPECT_GGUF_ERROR(b, "bad magic");
}

TEST(Gguf, RejectsBadVersion) {
  Bytes b = valid_file();
  b.b[4] = 7;
  EXPECT_GGUF_ERROR(b, "unsupported version 7");
  Bytes be = header(0, 0, 0x03000000);
  EXPECT_GGUF_ERROR(be, "big-endian");
}

TEST(Gguf, RejectsAbsurdCounts) {
  EXPECT_GGUF_ERROR(header(uint64_t{1} << 63, 0), "tensor count 9223372036854775808");
  EXPECT_GGUF_ERROR(header(0, uint64_t{1} << 63), "metadata count");
  Bytes arr = header(0, 1);
  arr.str("k").put<uint32_t>(9).put<uint32_t>(0).put<uint64_t>(uint64_t{1} << 62);
  EXPECT_GGUF_ERROR(arr, "claims 4611686018427387904 u8 elements");
  Bytes str = header(0, 1);
  str.str("k").put<uint32_t>(8).put<uint64_t>(~uint64_t{0});
  EXPECT_GGUF_ERROR(str, "has length 18446744073709551615");
}

TEST(Gguf, RejectsAbsurdDims) {
  Bytes huge = header(1, 0);
  tensor_info(huge, "t", {uint64_t{1} << 63}, kF32, 0);
  EXPECT_GGUF_ERROR(huge, "dim 0 of 9223372036854775808");
  Bytes overflow = header(1, 0);
  tensor_info(overflow, "t", {uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0);
  EXPECT_GGUF_ERROR(overflow, "element count overflows");
  Bytes bytes_overflow = header(1, 0);
  tensor_info(bytes_overflow, "t", {uint64_t{1} << 31, uint64_t{1} << 31}, kF32, 0);
  EXPECT_GGUF_ERROR(bytes_overflow, "byte size overflows");
  Bytes five = header(1, 0);
  tensor_info(five, "t", {1, 1, 1, 1, 1}, kF32, 0);
  EXPECT_GGUF_ERROR(five, "has 5 dims");
  Bytes zero = header(1, 0);
  tensor_info(zero, "t", {4, 0}, kF32, 0);
  EXPECT_GGUF_ERROR(zero, "dim 1 of 0");
  Bytes q8 = header(1, 0);
  tensor_info(q8, "t", {33}, 8, 0);
  EXPECT_GGUF_ERROR(q8, "not a multiple of the Q8_0 block size 32");
}

TEST(Gguf, RejectsDataPastTheEnd) {
  Bytes b = header(1, 0);
  tensor_info(b, "t", {4}, kF32, 32);
  b.pad(32).zeros(40);
  EXPECT_GGUF_ERROR(b, "runs past the end");
  Bytes far = header(1, 0);
  tensor_info(far, "t", {4}, kF32, ~uint64_t{0} - 31);
  far.pad(32).zeros(64);
  EXPECT_NE(parse_error(far), "");
}

TEST(Gguf, RejectsOverlappingTensors) {
  Bytes b = header(2, 0);
  tensor_info(b, "a", {16}, kF32, 0);
  tensor_info(b, "b", {4}, kF32, 32);
  b.pad(32).zeros(64);
  EXPECT_GGUF_ERROR(b, "tensors 'a' and 'b' overlap");
}

TEST(Gguf, RejectsMisalignedOffset) {
  Bytes b = header(1, 0);
  tensor_info(b, "a", {4}, kF32, 4);
  b.pad(32).zeros(64);
  EXPECT_GGUF_ERROR(b, "not a multiple of the alignment 32");
}

TEST(Gguf, RejectsDuplicateNames) {
  Bytes t = header(2, 0);
  tensor_info(t, "a", {4}, kF32, 0);
  tensor_info(t, "a", {4}, kF32, 32);
  t.pad(32).zeros(64);
  EXPECT_GGUF_ERROR(t, "duplicate tensor name 'a'");
  Bytes k = header(0, 2);
  kv_string(k, "x", "1");
  kv_string(k, "x", "2");
  EXPECT_GGUF_ERROR(k, "duplicate metadata key 'x'");
}

TEST(Gguf, RejectsNonUtf8Key) {
  Bytes b = header(0, 1);
  kv_string(b, std::string("bad\xff\xfekey"), "v");
  EXPECT_GGUF_ERROR(b, "not valid UTF-8");
  Bytes t = header(1, 0);
  tensor_info(t, std::string("\xc0\x80"), {4}, kF32, 0);  // overlong encoding
  t.pad(32).zeros(32);
  EXPECT_GGUF_ERROR(t, "not valid UTF-8");
}

TEST(Gguf, RejectsBadValues) {
  Bytes type = header(0, 1);
  type.str("k").put<uint32_t>(13).put<uint32_t>(0);
  EXPECT_GGUF_ERROR(type, "value type 13");
  Bytes boolean = header(0, 1);
  boolean.str("k").put<uint32_t>(7).put<uint8_t>(2);
  EXPECT_GGUF_ERROR(boolean, "bool value 2");
  Bytes align = header(0, 1);
  align.str("general.alignment").put<uint32_t>(4).put<uint32_t>(24);
  EXPECT_GGUF_ERROR(align, "power of two");
  Bytes deep = header(0, 1);
  deep.str("k");
  deep.put<uint32_t>(9);
  for (int i = 0; i < 20; ++i) deep.put<uint32_t>(9).put<uint64_t>(1);
  deep.zeros(64);
  EXPECT_GGUF_ERROR(deep, "nests arrays deeper");
  Bytes q4k = header(1, 0);
  tensor_info(q4k, "t", {256}, 12, 0);
  EXPECT_GGUF_ERROR(q4k, "ggml type 12 is not supported");
}

TEST(Gguf, WriterRejectsBadTensors) {
  GgufWriter w;
  const float x[4] = {};
  w.add_tensor("a", DType::kQ8_0, {4}, x);
  EXPECT_FALSE(w.write(testing_support::temp_path("bad.gguf")));
  GgufWriter dup;
  dup.add_tensor("a", DType::kF32, {4}, x);
  dup.add_tensor("a", DType::kF32, {4}, x);
  EXPECT_FALSE(dup.write(testing_support::temp_path("bad.gguf")));
  GgufWriter f8;
  f8.add_tensor("a", DType::kF8E4M3, {4}, x);
  EXPECT_FALSE(f8.write(testing_support::temp_path("bad.gguf")));
  std::remove(testing_support::temp_path("bad.gguf").c_str());
}

TEST(Gguf, OpeningLargeSparseFileDoesNotReadIt) {
  // One 4 GiB F32 tensor in a sparse file: mapping it must not make it resident.
  const uint64_t numel = uint64_t{1} << 30;
  Bytes b = header(1, 0);
  tensor_info(b, "big", {numel}, kF32, 0);
  b.pad(32);
  const std::string path = testing_support::write_temp("sparse.gguf", b.b);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(b.b.size() + numel * 4)), 0);
  const int64_t before = testing_support::rss_bytes();
  {
    auto g = GgufFile::open(path);
    ASSERT_TRUE(g) << g.error().message;
    ASSERT_EQ(g->tensors()[0].nbytes, numel * 4);
    const int64_t grown = testing_support::rss_bytes() - before;
    RecordProperty("rss_growth_bytes", std::to_string(grown));
    EXPECT_LT(grown, 8 << 20) << "opening a 4 GiB file grew RSS by " << grown << " bytes";
  }
  std::remove(path.c_str());
}

TEST(Gguf, MissingFileIsNotFound) {
  auto g = GgufFile::open("/nonexistent/flint.gguf");
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code, ErrorCode::kNotFound);
  EXPECT_NE(g.error().message.find("/nonexistent/flint.gguf"), std::string::npos);
}

}  // namespace
}  // namespace flint::formats
