// safetensors reader/writer: round trips, sharded checkpoints, and a clear error (never a crash)
// for each kind of malformed header. Interop with the safetensors package: tests/python/formats.
#include "formats/safetensors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "test_bytes.h"

namespace flint::formats {
namespace {

using testing_support::Bytes;

Bytes file_with_header(const std::string& json, size_t data_bytes) {
  Bytes b;
  b.put<uint64_t>(json.size()).raw(json).zeros(data_bytes);
  return b;
}

std::string parse_error(const Bytes& b) {
  auto r = SafetensorsModel::parse(b.b.data(), b.b.size(), "test.safetensors");
  if (r) return "";
  EXPECT_NE(r.error().message.find("test.safetensors"), std::string::npos) << r.error().message;
  return r.error().message;
}

#define EXPECT_ST_ERROR(bytes, needle)                                            \
  do {                                                                            \
    const std::string msg = parse_error(bytes);                                   \
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: '" << msg << "'"; \
  } while (0)

std::string temp_dir(const std::string& name) {
  const std::string dir = testing_support::temp_path(name);
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

TEST(Safetensors, WriterRoundTripsEveryDtype) {
  std::vector<uint8_t> payload(256);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7);
  std::vector<SafetensorsWriteTensor> ts = {
      {"f32", DType::kF32, {2, 3}, payload.data()},
      {"f16", DType::kF16, {5}, payload.data() + 24},
      {"bf16", DType::kBF16, {1, 4}, payload.data()},
      {"f8", DType::kF8E4M3, {16}, payload.data()},
      {"u8", DType::kU8, {3}, payload.data() + 1},
      {"i8", DType::kI8, {2, 2}, payload.data()},
      {"i32", DType::kI32, {2}, payload.data() + 8},
      {"i64", DType::kI64, {1}, payload.data()},
      {"empty", DType::kF32, {0, 7}, payload.data()},
      {"scalar", DType::kF32, {}, payload.data() + 4},
  };
  const std::string path = testing_support::temp_path("rt.safetensors");
  ASSERT_TRUE(write_safetensors(path, ts, {{"format", "pt"}}));
  auto m = SafetensorsModel::open(path);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->metadata().at("format"), "pt");
  ASSERT_EQ(m->tensors().size(), ts.size());
  for (const auto& t : ts) {
    const SafetensorsTensor* got = m->find(t.name);
    ASSERT_NE(got, nullptr) << t.name;
    EXPECT_EQ(got->dtype, t.dtype) << t.name;
    EXPECT_EQ(got->shape, t.shape) << t.name;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    ASSERT_EQ(got->nbytes, static_cast<uint64_t>(dtype_bytes_for(t.dtype, n))) << t.name;
    EXPECT_EQ(std::memcmp(got->data, t.data, got->nbytes), 0) << t.name;
    EXPECT_EQ(got->file, path);
  }
  // The data section starts 8-byte aligned, as the safetensors package writes it.
  uint64_t header_len;
  std::memcpy(&header_len, testing_support::read_file(path).data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  std::remove(path.c_str());
}

TEST(Safetensors, RejectsEveryTruncation) {
  const std::string json =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I8","shape":[3],"data_offsets":[8,11]}})";
  const Bytes full = file_with_header(json, 11);
  ASSERT_EQ(parse_error(full), "");
  for (size_t n = 0; n < full.b.size(); ++n) {
    Bytes cut;
    cut.b.assign(full.b.begin(), full.b.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_NE(parse_error(cut), "") << "prefix of " << n << " bytes parsed";
  }
}

TEST(Safetensors, RejectsBadHeaderLength) {
  Bytes huge;
  huge.put<uint64_t>(uint64_t{1} << 63).zeros(16);
  EXPECT_ST_ERROR(huge, "exceeds");
  Bytes past;
  past.put<uint64_t>(100).raw("{}");
  EXPECT_ST_ERROR(past, "runs past the end");
}

TEST(Safetensors, RejectsMalformedJson) {
  EXPECT_ST_ERROR(file_with_header("{\"a\":", 0), "not valid JSON");
  EXPECT_ST_ERROR(file_with_header("[1,2]", 0), "not a JSON object");
  EXPECT_ST_ERROR(file_with_header(std::string("{\"a\xff\":{}}"), 0), "not valid JSON");
  EXPECT_ST_ERROR(file_with_header(std::string(100, '[') + std::string(100, ']'), 0),
                  "nests deeper");
  EXPECT_ST_ERROR(file_with_header(R"({"a":3})", 0), "not a JSON object");
  EXPECT_ST_ERROR(file_with_header(R"({"__metadata__":{"k":1}})", 0), "not a string");
}

TEST(Safetensors, RejectsBadTensorEntries) {
  const auto one = [](const std::string& entry, size_t data) {
    return file_with_header("{\"t\":" + entry + "}", data);
  };
  EXPECT_ST_ERROR(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,32]})", 16), "outside");
  EXPECT_ST_ERROR(one(R"({"dtype":"F32","shape":[4],"data_offsets":[8,4]})", 16), "outside");
  EXPECT_ST_ERROR(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,16]})", 16), "needs 12");
  EXPECT_ST_ERROR(one(R"({"dtype":"F64","shape":[2],"data_offsets":[0,16]})", 16), "dtype F64");
  EXPECT_ST_ERROR(one(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,16]})", 16), "non-negative");
  EXPECT_ST_ERROR(one(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,16]})", 16),
                  "non-negative");
  EXPECT_ST_ERROR(
      one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]})", 16),
      "overflows");
  EXPECT_ST_ERROR(one(R"({"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,16]})", 16),
                  "needs -1");
  EXPECT_ST_ERROR(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,18446744073709551615]})", 16),
                  "outside");
  EXPECT_ST_ERROR(one(R"({"shape":[4],"data_offsets":[0,16]})", 16), "no dtype");
  EXPECT_ST_ERROR(one(R"({"dtype":"F32","data_offsets":[0,16]})", 16), "no shape");
  EXPECT_ST_ERROR(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0]})", 16), "data_offsets");
}

TEST(Safetensors, RejectsOverlappingTensors) {
  const std::string json =
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  EXPECT_ST_ERROR(file_with_header(json, 16), "tensors 'a' and 'b' overlap");
}

void write_shard(const std::string& path, const std::vector<std::string>& names) {
  static const float data[4] = {1, 2, 3, 4};
  std::vector<SafetensorsWriteTensor> ts;
  for (const auto& n : names) ts.push_back({n, DType::kF32, {4}, data});
  ASSERT_TRUE(write_safetensors(path, ts));
}

void write_index(const std::string& dir, const std::string& body) {
  std::ofstream(dir + "/model.safetensors.index.json") << body;
}

TEST(Safetensors, ReadsShardedCheckpoint) {
  const std::string dir = temp_dir("sharded");
  write_shard(dir + "/s1.safetensors", {"a", "b"});
  write_shard(dir + "/s2.safetensors", {"c"});
  write_index(
      dir,
      R"({"metadata":{},"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors"}})");
  for (const std::string& p : {dir, dir + "/model.safetensors.index.json"}) {
    auto m = SafetensorsModel::open(p);
    ASSERT_TRUE(m) << m.error().message;
    EXPECT_EQ(m->tensors().size(), 3u);
    EXPECT_EQ(m->find("c")->file, dir + "/s2.safetensors");
    float v[4];
    std::memcpy(v, m->find("b")->data, 16);
    EXPECT_EQ(v[3], 4.0f);
  }
}

TEST(Safetensors, ShardedErrorsNameTheProblem) {
  const std::string dir = temp_dir("sharded_bad");
  write_shard(dir + "/s1.safetensors", {"a", "b"});
  write_shard(dir + "/s2.safetensors", {"b"});
  write_index(dir, R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  auto both = SafetensorsModel::open(dir);
  ASSERT_FALSE(both);
  EXPECT_NE(both.error().message.find("'b' is in both"), std::string::npos) << both.error().message;

  write_index(dir, R"({"weight_map":{"a":"s1.safetensors","z":"missing.safetensors"}})");
  auto missing = SafetensorsModel::open(dir);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("missing.safetensors"), std::string::npos);

  write_shard(dir + "/s2.safetensors", {"c"});
  write_index(dir,
              R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s1.safetensors"}})");
  auto wrong = SafetensorsModel::open(dir);
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message.find("does not hold it"), std::string::npos)
      << wrong.error().message;

  write_index(dir, R"({"weight_map":[]})");
  EXPECT_FALSE(SafetensorsModel::open(dir));
  write_index(dir, "not json");
  EXPECT_FALSE(SafetensorsModel::open(dir));
}

TEST(Safetensors, OpeningLargeSparseFileDoesNotReadIt) {
  const uint64_t nbytes = uint64_t{4} << 30;
  const std::string json = R"({"big":{"dtype":"BF16","shape":[65536,32768],"data_offsets":[0,)" +
                           std::to_string(nbytes) + "]}}";
  Bytes b;
  b.put<uint64_t>(json.size()).raw(json);
  const std::string path = testing_support::write_temp("sparse.safetensors", b.b);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(b.b.size() + nbytes)), 0);
  const int64_t before = testing_support::rss_bytes();
  {
    auto m = SafetensorsModel::open(path);
    ASSERT_TRUE(m) << m.error().message;
    ASSERT_EQ(m->find("big")->nbytes, nbytes);
    const int64_t grown = testing_support::rss_bytes() - before;
    RecordProperty("rss_growth_bytes", std::to_string(grown));
    EXPECT_LT(grown, 8 << 20) << "opening a 4 GiB file grew RSS by " << grown << " bytes";
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace flint::formats
