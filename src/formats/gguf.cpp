// GGUF v3 reader (zero-copy, every field validated) and writer.
// Test partner: tests/unit/formats/gguf_test.cpp, tests/python/formats/test_gguf_interop.py.
#include "formats/gguf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "core/check.h"

namespace flint::formats {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 8;
constexpr uint64_t kDefaultAlignment = 32;

const char* value_type_name(uint32_t t) {
  static const char* const kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  return t < 13 ? kNames[t] : "?";
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    int len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else
      return false;
    if (i + len > s.size()) return false;
    for (int k = 1; k < len; ++k) {
      const auto cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

// Bounds-checked little-endian cursor over the file image.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n, const std::string& name) : p_(p), n_(n), name_(name) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return n_ - pos_; }

  template <typename T>
  Result<T> get(std::string_view what) {
    if (remaining() < sizeof(T)) return truncated(what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string> string(std::string_view what) {
    FLINT_ASSIGN_OR_RETURN(uint64_t len, get<uint64_t>(what));
    if (len > remaining()) {
      return make_error(ErrorCode::kInvalidFile,
                        "gguf: {}: {} has length {} at offset {}, but only {} bytes remain", name_,
                        what, len, pos_ - 8, remaining());
    }
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }

  Error truncated(std::string_view what) const {
    return make_error(ErrorCode::kInvalidFile, "gguf: {}: truncated while reading {} at offset {}",
                      name_, what, pos_);
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& name_;
};

// Smallest encoded size of one value of type t (for count-vs-size checks).
uint64_t min_value_bytes(uint32_t t) {
  switch (static_cast<GgufValueType>(t)) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kString:
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
      return 8;
    case GgufValueType::kArray:
      return 12;
  }
  return 1;
}

// A scalar stored as T, kept widened to W (the member of GgufValue::v for its family).
template <typename T, typename W>
Result<GgufValue> read_scalar(Reader& r, const std::string& key, GgufValue v) {
  FLINT_ASSIGN_OR_RETURN(T x, r.get<T>(key));
  v.v = static_cast<W>(x);
  return v;
}

Result<GgufValue> read_value(Reader& r, uint32_t type, const std::string& key, int depth,
                             const std::string& name) {
  GgufValue v;
  v.type = static_cast<GgufValueType>(type);
  switch (v.type) {
    case GgufValueType::kU8:
      return read_scalar<uint8_t, uint64_t>(r, key, std::move(v));
    case GgufValueType::kI8:
      return read_scalar<int8_t, int64_t>(r, key, std::move(v));
    case GgufValueType::kU16:
      return read_scalar<uint16_t, uint64_t>(r, key, std::move(v));
    case GgufValueType::kI16:
      return read_scalar<int16_t, int64_t>(r, key, std::move(v));
    case GgufValueType::kU32:
      return read_scalar<uint32_t, uint64_t>(r, key, std::move(v));
    case GgufValueType::kI32:
      return read_scalar<int32_t, int64_t>(r, key, std::move(v));
    case GgufValueType::kU64:
      return read_scalar<uint64_t, uint64_t>(r, key, std::move(v));
    case GgufValueType::kI64:
      return read_scalar<int64_t, int64_t>(r, key, std::move(v));
    case GgufValueType::kF32:
      return read_scalar<float, double>(r, key, std::move(v));
    case GgufValueType::kF64:
      return read_scalar<double, double>(r, key, std::move(v));
    case GgufValueType::kBool: {
      FLINT_ASSIGN_OR_RETURN(auto x, r.get<uint8_t>(key));
      if (x > 1) {
        return make_error(ErrorCode::kInvalidFile, "gguf: {}: key '{}' has bool value {}", name,
                          key, x);
      }
      v.v = x != 0;
      break;
    }
    case GgufValueType::kString: {
      FLINT_ASSIGN_OR_RETURN(auto s, r.string(fmt::format("string value of '{}'", key)));
      v.v = std::move(s);
      break;
    }
    case GgufValueType::kArray: {
      if (depth >= kMaxArrayDepth) {
        return make_error(ErrorCode::kInvalidFile, "gguf: {}: key '{}' nests arrays deeper than {}",
                          name, key, kMaxArrayDepth);
      }
      FLINT_ASSIGN_OR_RETURN(uint32_t elem, r.get<uint32_t>(key));
      if (elem > 12) {
        return make_error(ErrorCode::kInvalidFile,
                          "gguf: {}: key '{}' has array element type {}, expected 0..12", name, key,
                          elem);
      }
      FLINT_ASSIGN_OR_RETURN(uint64_t count, r.get<uint64_t>(key));
      if (count > r.remaining() / min_value_bytes(elem)) {
        return make_error(ErrorCode::kInvalidFile,
                          "gguf: {}: key '{}' claims {} {} elements, more than the {} bytes left "
                          "can hold",
                          name, key, count, value_type_name(elem), r.remaining());
      }
      auto items = std::make_shared<GgufArray>();
      items->reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        FLINT_ASSIGN_OR_RETURN(auto item, read_value(r, elem, key, depth + 1, name));
        items->push_back(std::move(item));
      }
      v.array_type = static_cast<GgufValueType>(elem);
      v.v = std::move(items);
      break;
    }
    default:
      return make_error(ErrorCode::kInvalidFile,
                        "gguf: {}: key '{}' has value type {}, expected 0..12", name, key, type);
  }
  return v;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

Result<DType> dtype_from_ggml(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kF32:
      return DType::kF32;
    case GgmlType::kF16:
      return DType::kF16;
    case GgmlType::kBF16:
      return DType::kBF16;
    case GgmlType::kQ8_0:
      return DType::kQ8_0;
    case GgmlType::kQ4_1:
      return DType::kQ4_1;
    case GgmlType::kNVFP4:
      return DType::kNVFP4;
    case GgmlType::kI8:
      return DType::kI8;
    case GgmlType::kI32:
      return DType::kI32;
    case GgmlType::kI64:
      return DType::kI64;
    default:
      break;
  }
  return make_error(ErrorCode::kUnsupported,
                    "ggml type {} is not supported (flint reads F32, F16, BF16, Q8_0, Q4_1, NVFP4, "
                    "I8, I32, I64)",
                    ggml_type);
}

GgmlType ggml_from_dtype(DType t) {
  switch (t) {
    case DType::kF32:
      return GgmlType::kF32;
    case DType::kF16:
      return GgmlType::kF16;
    case DType::kBF16:
      return GgmlType::kBF16;
    case DType::kQ8_0:
      return GgmlType::kQ8_0;
    case DType::kQ4_1:
      return GgmlType::kQ4_1;
    case DType::kNVFP4:
      return GgmlType::kNVFP4;
    case DType::kI8:
      return GgmlType::kI8;
    case DType::kI32:
      return GgmlType::kI32;
    case DType::kI64:
      return GgmlType::kI64;
    default:
      break;
  }
  FLINT_FAIL("gguf: dtype {} has no ggml type", t);
}

bool ggml_type_supported(DType t) {
  switch (t) {
    case DType::kF8E4M3:
    case DType::kU8:
      return false;
    default:
      return true;
  }
}

// ---- GgufValue ----

GgufValue GgufValue::u32(uint32_t x) {
  GgufValue v;
  v.type = GgufValueType::kU32;
  v.v = uint64_t{x};
  return v;
}
GgufValue GgufValue::u64(uint64_t x) {
  GgufValue v;
  v.type = GgufValueType::kU64;
  v.v = x;
  return v;
}
GgufValue GgufValue::i32(int32_t x) {
  GgufValue v;
  v.type = GgufValueType::kI32;
  v.v = int64_t{x};
  return v;
}
GgufValue GgufValue::f32(float x) {
  GgufValue v;
  v.type = GgufValueType::kF32;
  v.v = double{x};
  return v;
}
GgufValue GgufValue::boolean(bool x) {
  GgufValue v;
  v.type = GgufValueType::kBool;
  v.v = x;
  return v;
}
GgufValue GgufValue::string(std::string s) {
  GgufValue v;
  v.type = GgufValueType::kString;
  v.v = std::move(s);
  return v;
}
GgufValue GgufValue::array(GgufValueType elem, GgufArray items) {
  GgufValue v;
  v.type = GgufValueType::kArray;
  v.array_type = elem;
  v.v = std::make_shared<GgufArray>(std::move(items));
  return v;
}

Result<uint64_t> GgufValue::as_uint() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v); i != nullptr && *i >= 0)
    return static_cast<uint64_t>(*i);
  return make_error(ErrorCode::kInvalidArgument, "expected a non-negative integer, found {}",
                    value_type_name(static_cast<uint32_t>(type)));
}

Result<int64_t> GgufValue::as_int() const {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return static_cast<int64_t>(*u);
    return make_error(ErrorCode::kInvalidArgument, "integer {} does not fit in int64", *u);
  }
  return make_error(ErrorCode::kInvalidArgument, "expected an integer, found {}",
                    value_type_name(static_cast<uint32_t>(type)));
}

Result<double> GgufValue::as_float() const {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  return make_error(ErrorCode::kInvalidArgument, "expected a number, found {}",
                    value_type_name(static_cast<uint32_t>(type)));
}

Result<bool> GgufValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  return make_error(ErrorCode::kInvalidArgument, "expected a bool, found {}",
                    value_type_name(static_cast<uint32_t>(type)));
}

Result<std::string> GgufValue::as_string() const {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  return make_error(ErrorCode::kInvalidArgument, "expected a string, found {}",
                    value_type_name(static_cast<uint32_t>(type)));
}

const GgufArray* GgufValue::as_array() const {
  if (const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v)) return a->get();
  return nullptr;
}

std::vector<int64_t> GgufTensorInfo::torch_shape() const { return {ne.rbegin(), ne.rend()}; }

// ---- GgufFile ----

Result<GgufFile> GgufFile::open(const std::string& path) {
  FLINT_ASSIGN_OR_RETURN(MappedFile mf, MappedFile::open(path));
  auto file = std::make_shared<MappedFile>(std::move(mf));
  FLINT_ASSIGN_OR_RETURN(GgufFile g, parse(file->data(), file->size(), path));
  g.file_ = std::move(file);
  return g;
}

Result<GgufFile> GgufFile::parse(const uint8_t* bytes, size_t size, const std::string& name) {
  Reader r(bytes, size, name);
  GgufFile g;
  g.path_ = name;

  FLINT_ASSIGN_OR_RETURN(uint32_t magic, r.get<uint32_t>("magic"));
  if (magic != kMagic) {
    return make_error(ErrorCode::kInvalidFile,
                      "gguf: {}: bad magic 0x{:08x}, expected 0x{:08x} (\"GGUF\")", name, magic,
                      kMagic);
  }
  FLINT_ASSIGN_OR_RETURN(uint32_t version, r.get<uint32_t>("version"));
  if (version == 0x03000000 || version == 0x02000000) {
    return make_error(ErrorCode::kUnsupported, "gguf: {}: big-endian GGUF files are not supported",
                      name);
  }
  if (version != 2 && version != 3) {
    return make_error(ErrorCode::kUnsupported, "gguf: {}: unsupported version {}, expected 3", name,
                      version);
  }
  g.version_ = version;
  FLINT_ASSIGN_OR_RETURN(uint64_t n_tensors, r.get<uint64_t>("tensor count"));
  FLINT_ASSIGN_OR_RETURN(uint64_t n_kv, r.get<uint64_t>("metadata count"));
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes, a tensor info 8+4+8+4+8.
  if (n_kv > r.remaining() / 13) {
    return make_error(ErrorCode::kInvalidFile,
                      "gguf: {}: metadata count {} cannot fit in a {}-byte file", name, n_kv, size);
  }
  if (n_tensors > r.remaining() / 32) {
    return make_error(ErrorCode::kInvalidFile,
                      "gguf: {}: tensor count {} cannot fit in a {}-byte file", name, n_tensors,
                      size);
  }

  for (uint64_t i = 0; i < n_kv; ++i) {
    FLINT_ASSIGN_OR_RETURN(std::string key, r.string(fmt::format("key of metadata entry {}", i)));
    if (!valid_utf8(key))
      return make_error(ErrorCode::kInvalidFile, "gguf: {}: metadata key {} is not valid UTF-8",
                        name, i);
    if (key.empty())
      return make_error(ErrorCode::kInvalidFile, "gguf: {}: metadata key {} is empty", name, i);
    FLINT_ASSIGN_OR_RETURN(uint32_t type, r.get<uint32_t>(key));
    FLINT_ASSIGN_OR_RETURN(GgufValue value, read_value(r, type, key, 0, name));
    if (g.metadata_.count(key) != 0)
      return make_error(ErrorCode::kInvalidFile, "gguf: {}: duplicate metadata key '{}'", name,
                        key);
    g.metadata_.emplace(std::move(key), std::move(value));
  }

  g.alignment_ = kDefaultAlignment;
  if (const GgufValue* a = g.find("general.alignment")) {
    auto al = a->as_uint();
    if (a->type != GgufValueType::kU32 || !al || *al == 0 || (*al & (*al - 1)) != 0) {
      return make_error(ErrorCode::kInvalidFile,
                        "gguf: {}: general.alignment must be a u32 power of two", name);
    }
    g.alignment_ = *al;
  }

  g.tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    FLINT_ASSIGN_OR_RETURN(t.name, r.string(fmt::format("name of tensor {}", i)));
    if (!valid_utf8(t.name))
      return make_error(ErrorCode::kInvalidFile, "gguf: {}: name of tensor {} is not valid UTF-8",
                        name, i);
    FLINT_ASSIGN_OR_RETURN(uint32_t n_dims, r.get<uint32_t>(t.name));
    if (n_dims == 0 || n_dims > 4) {
      return make_error(ErrorCode::kInvalidFile, "gguf: {}: tensor '{}' has {} dims, expected 1..4",
                        name, t.name, n_dims);
    }
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      FLINT_ASSIGN_OR_RETURN(uint64_t ne, r.get<uint64_t>(t.name));
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return make_error(ErrorCode::kInvalidFile,
                          "gguf: {}: tensor '{}' has dim {} of {}, expected a positive size", name,
                          t.name, d, ne);
      }
      if (numel > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(ne)) {
        return make_error(ErrorCode::kInvalidFile, "gguf: {}: tensor '{}' element count overflows",
                          name, t.name);
      }
      numel *= static_cast<int64_t>(ne);
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    FLINT_ASSIGN_OR_RETURN(t.ggml_type, r.get<uint32_t>(t.name));
    FLINT_ASSIGN_OR_RETURN(t.offset, r.get<uint64_t>(t.name));
    auto dt = dtype_from_ggml(t.ggml_type);
    if (!dt) return dt.error().with_context("gguf: {}: tensor '{}'", name, t.name);
    t.dtype = *dt;
    if (t.ne[0] % dtype_block_size(t.dtype) != 0) {
      return make_error(
          ErrorCode::kInvalidFile,
          "gguf: {}: tensor '{}' has ne[0] = {}, not a multiple of the {} block size {}", name,
          t.name, t.ne[0], t.dtype, dtype_block_size(t.dtype));
    }
    const int64_t nbytes = dtype_bytes_for(t.dtype, numel);
    if (nbytes < 0)
      return make_error(ErrorCode::kInvalidFile, "gguf: {}: tensor '{}' byte size overflows", name,
                        t.name);
    t.nbytes = static_cast<uint64_t>(nbytes);
    if (t.offset % g.alignment_ != 0) {
      return make_error(ErrorCode::kInvalidFile,
                        "gguf: {}: tensor '{}' offset {} is not a multiple of the alignment {}",
                        name, t.name, t.offset, g.alignment_);
    }
    if (g.tensor_index_.count(t.name) != 0) {
      return make_error(ErrorCode::kInvalidFile, "gguf: {}: duplicate tensor name '{}'", name,
                        t.name);
    }
    g.tensor_index_.emplace(t.name, g.tensors_.size());
    g.tensors_.push_back(std::move(t));
  }

  const uint64_t data_start = align_up(r.pos(), g.alignment_);
  if (!g.tensors_.empty() && data_start > size) {
    return make_error(ErrorCode::kInvalidFile,
                      "gguf: {}: data section starts at {}, past the end of the {}-byte file", name,
                      data_start, size);
  }
  const uint64_t data_size = data_start <= size ? size - data_start : 0;
  std::vector<const GgufTensorInfo*> by_offset;
  for (GgufTensorInfo& t : g.tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return make_error(
          ErrorCode::kInvalidFile,
          "gguf: {}: tensor '{}' data [{}, {}) runs past the end of the data section ({} "
          "bytes)",
          name, t.name, t.offset, t.offset + t.nbytes, data_size);
    }
    t.data = bytes + data_start + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    if (by_offset[i]->offset < prev->offset + prev->nbytes) {
      return make_error(ErrorCode::kInvalidFile, "gguf: {}: tensors '{}' and '{}' overlap", name,
                        prev->name, by_offset[i]->name);
    }
  }
  return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo* GgufFile::find_scale(const std::string& tensor_name) const {
  const GgufTensorInfo* t = find_tensor(tensor_name + ".scale");
  return t != nullptr && t->dtype == DType::kF32 ? t : nullptr;
}

// ---- GgufWriter ----

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> ne,
                            const void* data) {
  tensors_.push_back(PendingTensor{name, dtype, std::move(ne), data});
}

void GgufWriter::set_alignment(uint64_t alignment) {
  FLINT_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
              "gguf: alignment {} is not a power of two", alignment);
  alignment_ = alignment;
  set("general.alignment", GgufValue::u32(static_cast<uint32_t>(alignment)));
}

namespace {

class ByteSink {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    buf_.insert(buf_.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) { buf_.resize(align_up(buf_.size(), alignment), 0); }
  std::vector<uint8_t>& bytes() { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};

Error type_mismatch(const GgufValue& v, const std::string& key) {
  return make_error(ErrorCode::kInvalidArgument, "gguf: value of '{}' does not match its type {}",
                    key, value_type_name(static_cast<uint32_t>(v.type)));
}

// A scalar kept widened as W (see read_scalar), stored as T.
template <typename T, typename W>
Status write_scalar(ByteSink& out, const GgufValue& v, const std::string& key) {
  const W* x = std::get_if<W>(&v.v);
  if (!x) return type_mismatch(v, key);
  out.put<T>(static_cast<T>(*x));
  return ok();
}

Status write_value(ByteSink& out, const GgufValue& v, const std::string& key) {
  switch (v.type) {
    case GgufValueType::kU8:
      return write_scalar<uint8_t, uint64_t>(out, v, key);
    case GgufValueType::kU16:
      return write_scalar<uint16_t, uint64_t>(out, v, key);
    case GgufValueType::kU32:
      return write_scalar<uint32_t, uint64_t>(out, v, key);
    case GgufValueType::kU64:
      return write_scalar<uint64_t, uint64_t>(out, v, key);
    case GgufValueType::kI8:
      return write_scalar<int8_t, int64_t>(out, v, key);
    case GgufValueType::kI16:
      return write_scalar<int16_t, int64_t>(out, v, key);
    case GgufValueType::kI32:
      return write_scalar<int32_t, int64_t>(out, v, key);
    case GgufValueType::kI64:
      return write_scalar<int64_t, int64_t>(out, v, key);
    case GgufValueType::kF32:
      return write_scalar<float, double>(out, v, key);
    case GgufValueType::kF64:
      return write_scalar<double, double>(out, v, key);
    case GgufValueType::kBool:
      return write_scalar<uint8_t, bool>(out, v, key);
    case GgufValueType::kString: {
      const auto* s = std::get_if<std::string>(&v.v);
      if (!s) return type_mismatch(v, key);
      out.str(*s);
      break;
    }
    case GgufValueType::kArray: {
      const GgufArray* a = v.as_array();
      if (!a) return type_mismatch(v, key);
      out.put<uint32_t>(static_cast<uint32_t>(v.array_type));
      out.put<uint64_t>(a->size());
      for (const GgufValue& item : *a) {
        if (item.type != v.array_type) {
          return make_error(ErrorCode::kInvalidArgument,
                            "gguf: array '{}' of {} holds a {} element", key,
                            value_type_name(static_cast<uint32_t>(v.array_type)),
                            value_type_name(static_cast<uint32_t>(item.type)));
        }
        FLINT_TRY(write_value(out, item, key));
      }
      break;
    }
    default:
      return type_mismatch(v, key);
  }
  return ok();
}

}  // namespace

Status GgufWriter::write(const std::string& path) const {
  ByteSink out;
  out.put<uint32_t>(kMagic);
  out.put<uint32_t>(3);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(kv_.size());
  for (const auto& [key, value] : kv_) {
    out.str(key);
    out.put<uint32_t>(static_cast<uint32_t>(value.type));
    FLINT_TRY(write_value(out, value, key));
  }
  std::vector<uint64_t> offsets;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const PendingTensor& t : tensors_) {
    if (!names.insert(t.name).second) {
      return make_error(ErrorCode::kInvalidArgument, "gguf: duplicate tensor name '{}'", t.name);
    }
    if (!ggml_type_supported(t.dtype)) {
      return make_error(ErrorCode::kUnsupported, "gguf: tensor '{}': {} has no ggml type", t.name,
                        t.dtype);
    }
    if (t.ne.empty() || t.ne.size() > 4) {
      return make_error(ErrorCode::kInvalidArgument, "gguf: tensor '{}' has {} dims, expected 1..4",
                        t.name, t.ne.size());
    }
    int64_t numel = 1;
    for (int64_t d : t.ne) {
      if (d <= 0) {
        return make_error(ErrorCode::kInvalidArgument, "gguf: tensor '{}' has a dim of {}", t.name,
                          d);
      }
      numel *= d;
    }
    if (t.ne[0] % dtype_block_size(t.dtype) != 0 || dtype_bytes_for(t.dtype, numel) < 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        "gguf: tensor '{}' ne[0] = {} is not a multiple of the {} block size",
                        t.name, t.ne[0], t.dtype);
    }
    out.str(t.name);
    out.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) out.put<uint64_t>(static_cast<uint64_t>(d));
    out.put<uint32_t>(static_cast<uint32_t>(ggml_from_dtype(t.dtype)));
    out.put<uint64_t>(offset);
    offsets.push_back(offset);
    offset = align_up(offset + static_cast<uint64_t>(dtype_bytes_for(t.dtype, numel)), alignment_);
  }
  out.pad_to(alignment_);

  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return make_error(ErrorCode::kIo, "gguf: {}: cannot create: {}", path, std::strerror(errno));
  }
  bool good = std::fwrite(out.bytes().data(), 1, out.bytes().size(), f) == out.bytes().size();
  const std::vector<uint8_t> zeros(alignment_, 0);
  for (const PendingTensor& t : tensors_) {
    if (!good) break;
    int64_t numel = 1;
    for (int64_t d : t.ne) numel *= d;
    const auto nbytes = static_cast<size_t>(dtype_bytes_for(t.dtype, numel));
    good = std::fwrite(t.data, 1, nbytes, f) == nbytes;
    const size_t pad = static_cast<size_t>(align_up(nbytes, alignment_) - nbytes);
    if (good && pad > 0) good = std::fwrite(zeros.data(), 1, pad, f) == pad;
  }
  if (std::fclose(f) != 0) good = false;
  if (!good)
    return make_error(ErrorCode::kIo, "gguf: {}: write failed: {}", path, std::strerror(errno));
  return ok();
}

}  // namespace flint::formats
