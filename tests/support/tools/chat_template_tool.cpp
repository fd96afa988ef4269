// chat_template_tool TEMPLATE CASES.json [NOW_UNIX_SECONDS]: renders each context of the JSON list
// CASES with the template and prints a JSON list of {"ok": true, "text": ...} or
// {"ok": false, "error": ...}. A case {"__template__": src, "context": {...}} brings its own
// template (TEMPLATE is then ignored). Driver for tests/python/tokenizer/test_chat_template_*.py.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tokenizer/chat_template.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: chat_template_tool TEMPLATE CASES.json [NOW_UNIX_SECONDS]\n");
    return 2;
  }
  auto slurp = [](const char* path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  flint::tokenizer::ChatTemplateRenderOptions options;
  if (argc > 3) options.now_unix_seconds = std::stoll(argv[3]);
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  auto tmpl = flint::tokenizer::ChatTemplate::parse(slurp(argv[1]));
  nlohmann::ordered_json cases;
  try {
    cases = nlohmann::ordered_json::parse(slurp(argv[2]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bad cases file: %s\n", e.what());
    return 2;
  }
  for (const auto& c : cases) {
    nlohmann::ordered_json r;
    if (c.is_object() && c.contains("__template__")) {
      auto own = flint::tokenizer::ChatTemplate::parse(c["__template__"].get<std::string>());
      auto out = own ? own->render(c["context"], options) : flint::Result<std::string>(own.error());
      r["ok"] = out.has_value();
      if (out)
        r["text"] = *out;
      else
        r["error"] = out.error().message;
    } else if (!tmpl) {
      r["ok"] = false;
      r["error"] = tmpl.error().message;
    } else {
      auto out = tmpl->render(c, options);
      r["ok"] = out.has_value();
      if (out)
        r["text"] = *out;
      else
        r["error"] = out.error().message;
    }
    results.push_back(std::move(r));
  }
  std::cout << results.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
            << "\n";
  return 0;
}
