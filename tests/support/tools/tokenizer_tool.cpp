// tokenizer_tool: drives flint::tokenizer from Python. Usage: tokenizer_tool (--json F | --gguf F).
// Reads one JSON request per stdin line, writes one JSON reply per line. Requests:
//   {"op":"encode","text":S | "text_hex":H,"add_special":B}  -> {"ids":[..],"offsets":[[b,e],..]}
//   {"op":"decode","ids":[..],"skip_special":B}              -> {"text":S}
//   {"op":"stream","ids":[..],"skip_special":B}              -> {"chunks":[S,..]} (last = flush)
//   {"op":"info"}                                            -> {"vocab_size":N,"bos":..,"eos":..}
//   {"op":"bench","text":S | "texts":[S,..],"iters":N} -> {"seconds":T,"num_tokens":K}
//                                          (single thread, best of N, documents encoded one by one)
// Errors reply {"error":S}. Used by tests/python/tokenizer/test_tokenizer*.py and bench/tokenizer.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

using flint::tokenizer::StreamingDetokenizer;
using flint::tokenizer::Tokenizer;
using nlohmann::json;

namespace {

std::string from_hex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  }
  return out;
}

json handle(const Tokenizer& tok, const json& req) {
  const std::string op = req.value("op", "");
  if (op == "encode") {
    const std::string text = req.contains("text_hex") ? from_hex(req["text_hex"].get<std::string>())
                                                      : req["text"].get<std::string>();
    auto enc = tok.encode_with_offsets(text, req.value("add_special", false));
    if (!enc) return {{"error", enc.error().message}};
    json offsets = json::array();
    for (const auto& [b, e] : enc->offsets) offsets.push_back({b, e});
    return {{"ids", enc->ids}, {"offsets", offsets}};
  }
  if (op == "decode") {
    const auto ids = req["ids"].get<std::vector<int32_t>>();
    return {{"text", tok.decode(ids, req.value("skip_special", false))}};
  }
  if (op == "stream") {
    StreamingDetokenizer s(tok, req.value("skip_special", false));
    json chunks = json::array();
    for (int32_t id : req["ids"].get<std::vector<int32_t>>()) chunks.push_back(s.add(id));
    chunks.push_back(s.flush());
    return {{"chunks", chunks}};
  }
  if (op == "info") {
    json j = {{"vocab_size", tok.vocab_size()}};
    j["bos"] = tok.bos_id() ? json(*tok.bos_id()) : json(nullptr);
    j["eos"] = tok.eos_id() ? json(*tok.eos_id()) : json(nullptr);
    return j;
  }
  if (op == "bench") {
    // One text, or a list of documents encoded one by one.
    const std::vector<std::string> texts =
        req.contains("texts") ? req["texts"].get<std::vector<std::string>>()
                              : std::vector<std::string>{req["text"].get<std::string>()};
    const int iters = req.value("iters", 3);
    double best = 1e30;
    size_t n = 0;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      n = 0;
      for (const std::string& text : texts) {
        auto ids = tok.encode(text, false);
        if (!ids) return {{"error", ids.error().message}};
        n += ids->size();
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
    }
    return {{"seconds", best}, {"num_tokens", n}};
  }
  return {{"error", "unknown op '" + op + "'"}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tokenizer_tool (--json FILE | --gguf FILE)\n");
    return 2;
  }
  const std::string mode = argv[1], path = argv[2];
  flint::Result<Tokenizer> tok = flint::make_error(flint::ErrorCode::kInvalidArgument, "bad mode");
  if (mode == "--json") {
    tok = Tokenizer::from_json_file(path);
  } else if (mode == "--gguf") {
    auto g = flint::formats::GgufFile::open(path);
    if (!g) {
      std::fprintf(stderr, "error: %s\n", g.error().message.c_str());
      return 1;
    }
    tok = Tokenizer::from_gguf(*g);
  }
  if (!tok) {
    std::fprintf(stderr, "error: %s\n", tok.error().message.c_str());
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    json reply;
    try {
      reply = handle(*tok, json::parse(line));
    } catch (const std::exception& e) {
      reply = {{"error", std::string("bad request: ") + e.what()}};
    }
    std::cout << reply.dump() << "\n" << std::flush;
  }
  return 0;
}
