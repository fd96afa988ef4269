// safetensors reader (zero-copy, single or sharded) and writer.
// Test partner: tests/unit/formats/safetensors_test.cpp,
// tests/python/formats/test_safetensors_interop.py.
#include "formats/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace flint::formats {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the safetensors package's own limit

struct DtypeName {
  const char* name;
  DType dtype;
};
constexpr DtypeName kDtypes[] = {
    {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16}, {"F8_E4M3", DType::kF8E4M3},
    {"U8", DType::kU8},   {"I8", DType::kI8},   {"I32", DType::kI32},   {"I64", DType::kI64},
};

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDtypes)
    if (d.dtype == t) return d.name;
  return nullptr;
}

Error bad(const std::string& name, const std::string& what) {
  return make_error(ErrorCode::kInvalidFile, "safetensors: {}: {}", name, what);
}

struct ParsedFile {
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
};

Result<SafetensorsTensor> parse_entry(const std::string& name, const std::string& tname,
                                      const json& e, const uint8_t* data, uint64_t data_size) {
  if (!e.is_object()) return bad(name, fmt::format("tensor '{}' is not a JSON object", tname));
  SafetensorsTensor t;
  t.name = tname;
  t.file = name;
  const auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) {
    return bad(name, fmt::format("tensor '{}' has no dtype string", tname));
  }
  const std::string& dts = dt->get_ref<const std::string&>();
  bool found = false;
  for (const auto& d : kDtypes) {
    if (dts == d.name) {
      t.dtype = d.dtype;
      found = true;
    }
  }
  if (!found) {
    return make_error(ErrorCode::kUnsupported,
                      "safetensors: {}: tensor '{}' has dtype {}, expected one of BF16, F16, F32, "
                      "F8_E4M3, U8, I8, I32, I64",
                      name, tname, dts);
  }
  const auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) {
    return bad(name, fmt::format("tensor '{}' has no shape array", tname));
  }
  int64_t numel = 1;
  for (const json& d : *sh) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) {
      return bad(name, fmt::format("tensor '{}' has a shape entry {} that is not a non-negative "
                                   "integer",
                                   tname, d.dump()));
    }
    const uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (v != 0 && numel > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(v))) {
      return bad(name, fmt::format("tensor '{}' element count overflows", tname));
    }
    numel *= static_cast<int64_t>(v);
    t.shape.push_back(static_cast<int64_t>(v));
  }
  const auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return bad(name, fmt::format("tensor '{}' needs data_offsets [begin, end] of non-negative "
                                 "integers",
                                 tname));
  }
  const uint64_t begin = (*off)[0].get<uint64_t>();
  const uint64_t end = (*off)[1].get<uint64_t>();
  if (begin > end || end > data_size) {
    return bad(name, fmt::format("tensor '{}' data_offsets [{}, {}] are outside the {}-byte data "
                                 "section",
                                 tname, begin, end, data_size));
  }
  const int64_t want = dtype_bytes_for(t.dtype, numel);
  if (want < 0 || static_cast<uint64_t>(want) != end - begin) {
    return bad(name, fmt::format("tensor '{}' spans {} bytes, but shape {} of {} needs {}", tname,
                                 end - begin, sh->dump(), dts, want));
  }
  t.data = data + begin;
  t.nbytes = end - begin;
  return t;
}

// A valid header nests at most 3 deep ({"t": {"shape": [..]}}); refusing deeper input up front
// keeps a hostile header from costing deep recursion in the JSON library.
bool nesting_within(const uint8_t* p, size_t n, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = static_cast<char>(p[i]);
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

Result<ParsedFile> parse_file(const uint8_t* bytes, size_t size, const std::string& name) {
  if (size < 8) return bad(name, fmt::format("file of {} bytes is too short for a header", size));
  uint64_t header_len;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > kMaxHeaderBytes) {
    return bad(name, fmt::format("header length {} exceeds the {} byte limit", header_len,
                                 kMaxHeaderBytes));
  }
  if (header_len > size - 8) {
    return bad(name, fmt::format("header length {} runs past the end of the {}-byte file",
                                 header_len, size));
  }
  if (!nesting_within(bytes + 8, header_len, 8)) return bad(name, "header nests deeper than 8");
  json header;
  try {
    header = json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const std::exception& ex) {
    return bad(name, fmt::format("header is not valid JSON: {}", ex.what()));
  }
  if (!header.is_object()) return bad(name, "header is not a JSON object");
  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  ParsedFile out;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return bad(name, "__metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          return bad(name, fmt::format("__metadata__ value of '{}' is not a string", mk));
        }
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    FLINT_ASSIGN_OR_RETURN(SafetensorsTensor t, parse_entry(name, key, value, data, data_size));
    out.tensors.emplace(key, std::move(t));
  }
  std::vector<const SafetensorsTensor*> by_offset;
  for (const auto& [k, t] : out.tensors)
    if (t.nbytes > 0) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->data < by_offset[i - 1]->data + by_offset[i - 1]->nbytes) {
      return bad(name, fmt::format("tensors '{}' and '{}' overlap", by_offset[i - 1]->name,
                                   by_offset[i]->name));
    }
  }
  return out;
}

Result<std::string> read_text(const std::string& path) {
  FLINT_ASSIGN_OR_RETURN(MappedFile f, MappedFile::open(path));
  return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

}  // namespace

Result<SafetensorsModel> SafetensorsModel::parse(const uint8_t* bytes, size_t size,
                                                 const std::string& name) {
  FLINT_ASSIGN_OR_RETURN(ParsedFile pf, parse_file(bytes, size, name));
  SafetensorsModel m;
  m.tensors_ = std::move(pf.tensors);
  m.metadata_ = std::move(pf.metadata);
  return m;
}

Result<SafetensorsModel> SafetensorsModel::open(const std::string& path) {
  std::vector<std::string> shards;
  std::map<std::string, std::string> weight_map;  // tensor -> shard path
  std::string index_path;
  try {
    const fs::path p(path);
    if (fs::is_directory(p)) {
      if (fs::exists(p / "model.safetensors.index.json")) {
        index_path = (p / "model.safetensors.index.json").string();
      } else {
        for (const auto& entry : fs::directory_iterator(p)) {
          if (entry.path().extension() == ".safetensors") shards.push_back(entry.path().string());
        }
        std::sort(shards.begin(), shards.end());
        if (shards.empty()) {
          return make_error(ErrorCode::kNotFound, "safetensors: {}: no .safetensors files", path);
        }
      }
    } else if (p.string().ends_with(".json")) {
      index_path = path;
    } else {
      shards.push_back(path);
    }
  } catch (const std::exception& ex) {
    return make_error(ErrorCode::kIo, "safetensors: {}: {}", path, ex.what());
  }

  if (!index_path.empty()) {
    FLINT_ASSIGN_OR_RETURN(std::string text, read_text(index_path));
    json index;
    try {
      index = json::parse(text);
    } catch (const std::exception& ex) {
      return bad(index_path, fmt::format("index is not valid JSON: {}", ex.what()));
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return bad(index_path, "index has no weight_map object");
    }
    const fs::path dir = fs::path(index_path).parent_path();
    std::set<std::string> unique;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string())
        return bad(index_path, fmt::format("weight_map['{}'] is not a string", tensor));
      const std::string shard = (dir / file.get<std::string>()).string();
      weight_map[tensor] = shard;
      if (unique.insert(shard).second) shards.push_back(shard);
    }
    std::sort(shards.begin(), shards.end());
  }

  SafetensorsModel m;
  for (size_t i = 0; i < shards.size(); ++i) {
    auto mf = MappedFile::open(shards[i]);
    if (!mf) {
      if (!index_path.empty())
        return mf.error().with_context("safetensors: shard listed in {}", index_path);
      return mf.error();
    }
    auto file = std::make_shared<MappedFile>(std::move(*mf));
    FLINT_ASSIGN_OR_RETURN(ParsedFile pf, parse_file(file->data(), file->size(), shards[i]));
    if (i == 0) m.metadata_ = std::move(pf.metadata);
    for (auto& [tname, t] : pf.tensors) {
      if (auto it = m.tensors_.find(tname); it != m.tensors_.end()) {
        return make_error(ErrorCode::kInvalidFile, "safetensors: tensor '{}' is in both {} and {}",
                          tname, it->second.file, shards[i]);
      }
      m.tensors_.emplace(tname, std::move(t));
    }
    m.files_.push_back(std::move(file));
  }
  for (const auto& [tname, t] : m.tensors_) {
    if (weight_map.empty()) break;
    auto wm = weight_map.find(tname);
    if (wm == weight_map.end()) {
      return bad(index_path,
                 fmt::format("tensor '{}' in {} is missing from weight_map", tname, t.file));
    }
    if (wm->second != t.file) {
      return bad(index_path, fmt::format("weight_map puts '{}' in {}, but it is in {}", tname,
                                         wm->second, t.file));
    }
  }
  for (const auto& [tname, shard] : weight_map) {
    if (m.tensors_.count(tname) == 0) {
      return bad(index_path,
                 fmt::format("weight_map lists '{}' in {}, which does not hold it", tname, shard));
    }
  }
  return m;
}

const SafetensorsTensor* SafetensorsModel::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status write_safetensors(const std::string& path,
                         const std::vector<SafetensorsWriteTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::string header_text;
  std::vector<uint64_t> sizes;
  try {
    json header = json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t offset = 0;
    for (const auto& t : tensors) {
      const char* dt = safetensors_dtype_name(t.dtype);
      if (dt == nullptr) {
        return make_error(ErrorCode::kUnsupported, "safetensors: tensor '{}': {} cannot be stored",
                          t.name, t.dtype);
      }
      if (header.contains(t.name)) {
        return make_error(ErrorCode::kInvalidArgument, "safetensors: duplicate tensor name '{}'",
                          t.name);
      }
      int64_t numel = 1;
      for (int64_t d : t.shape) {
        if (d < 0) {
          return make_error(ErrorCode::kInvalidArgument, "safetensors: tensor '{}' has dim {}",
                            t.name, d);
        }
        numel *= d;
      }
      const auto nbytes = static_cast<uint64_t>(dtype_bytes_for(t.dtype, numel));
      header[t.name] = {
          {"dtype", dt}, {"shape", t.shape}, {"data_offsets", {offset, offset + nbytes}}};
      offset += nbytes;
      sizes.push_back(nbytes);
    }
    header_text = header.dump();
  } catch (const std::exception& ex) {
    return make_error(ErrorCode::kInvalidArgument, "safetensors: {}: cannot build header: {}", path,
                      ex.what());
  }
  // Pad with spaces so the data section starts 8-byte aligned, as the safetensors package does.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return make_error(ErrorCode::kIo, "safetensors: {}: cannot create: {}", path,
                      std::strerror(errno));
  }
  const uint64_t len = header_text.size();
  bool good = std::fwrite(&len, 8, 1, f) == 1 &&
              std::fwrite(header_text.data(), 1, header_text.size(), f) == header_text.size();
  for (size_t i = 0; i < tensors.size() && good; ++i) {
    good = sizes[i] == 0 || std::fwrite(tensors[i].data, 1, sizes[i], f) == sizes[i];
  }
  if (std::fclose(f) != 0) good = false;
  if (!good) {
    return make_error(ErrorCode::kIo, "safetensors: {}: write failed: {}", path,
                      std::strerror(errno));
  }
  return ok();
}

}  // namespace flint::formats
