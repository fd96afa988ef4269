// ChatTemplate behaviour that the Jinja2 parity pytests cannot show: limits, errors with positions,
// key order, thread safety, and finding the template source. Rendering parity itself is checked
// against Python Jinja2 in tests/python/tokenizer/test_chat_template_*.py.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "formats/gguf.h"

namespace flint::tokenizer {
namespace {

namespace fs = std::filesystem;

std::string render_or_die(const std::string& src, const nlohmann::ordered_json& ctx) {
  auto t = ChatTemplate::parse(src);
  EXPECT_TRUE(t.has_value()) << (t ? "" : t.error().message);
  if (!t) return "";
  auto out = t->render(ctx);
  EXPECT_TRUE(out.has_value()) << (out ? "" : out.error().message);
  return out ? *out : "";
}

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() /
                 ("flint_chat_template_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

TEST(ChatTemplate, SyntaxErrorNamesLineAndColumn) {
  auto t = ChatTemplate::parse("hello\n{% for m in messages %}\n  {{ m.content | }}\n{% endfor %}");
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find("line 3, column 18"), std::string::npos) << t.error().message;
  auto u = ChatTemplate::parse("{% if x %}never closed");
  ASSERT_FALSE(u.has_value());
  EXPECT_NE(u.error().message.find("'endif'"), std::string::npos) << u.error().message;
}

TEST(ChatTemplate, RuntimeErrorNamesLine) {
  auto t = ChatTemplate::parse("a\nb {{ messages[0].content.nope.deeper }}");
  ASSERT_TRUE(t.has_value());
  auto out = t->render(nlohmann::ordered_json{{"messages", {{{"content", "x"}}}}});
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.error().message.find("line 2"), std::string::npos) << out.error().message;
}

TEST(ChatTemplate, RaiseExceptionMessageIsKept) {
  auto t = ChatTemplate::parse("{{ raise_exception('Conversation roles must alternate') }}");
  ASSERT_TRUE(t.has_value());
  auto out = t->render(nlohmann::ordered_json::object());
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(out.error().message, "chat template: Conversation roles must alternate");
}

TEST(ChatTemplate, StepCapStopsRunawayLoops) {
  // 100000 x 100000 iterations would take hours; the cap ends it quickly with an error.
  auto t = ChatTemplate::parse(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  ASSERT_TRUE(t.has_value());
  ChatTemplateRenderOptions o;
  o.max_steps = 100000;
  auto out = t->render(nlohmann::ordered_json::object(), o);
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.error().message.find("steps"), std::string::npos) << out.error().message;
}

TEST(ChatTemplate, OutputCapStopsStringDoubling) {
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}{{ ns.s }}");
  ASSERT_TRUE(t.has_value());
  ChatTemplateRenderOptions o;
  o.max_output_bytes = 1 << 20;
  auto out = t->render(nlohmann::ordered_json::object(), o);
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.error().message.find("exceeded"), std::string::npos) << out.error().message;
}

TEST(ChatTemplate, RecursionIsCapped) {
  auto t = ChatTemplate::parse("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_TRUE(t.has_value());
  auto out = t->render(nlohmann::ordered_json::object());
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.error().message.find("recursion"), std::string::npos) << out.error().message;
}

TEST(ChatTemplate, DeepNestingIsAnErrorNotACrash) {
  std::string src = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  auto t = ChatTemplate::parse(src);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find("nested too deeply"), std::string::npos);
}

TEST(ChatTemplate, DeepValuesAreAnErrorNotACrash) {
  // Built in the template: each step wraps the list once more.
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}{{ ns.x|length }}");
  ASSERT_TRUE(t.has_value());
  auto out = t->render(nlohmann::ordered_json::object());
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.error().message.find("nested deeper"), std::string::npos) << out.error().message;
  // Given in the context.
  nlohmann::ordered_json deep = "leaf";
  for (int k = 0; k < 1000; ++k) deep = nlohmann::ordered_json::array({deep});
  auto u = ChatTemplate::parse("{{ messages|length }}");
  ASSERT_TRUE(u.has_value());
  auto v = u->render(nlohmann::ordered_json{{"messages", deep}});
  ASSERT_FALSE(v.has_value());
  EXPECT_NE(v.error().message.find("nested deeper"), std::string::npos) << v.error().message;
}

TEST(ChatTemplate, OrderedContextKeepsClientKeyOrder) {
  auto ctx =
      nlohmann::ordered_json::parse(R"({"tools": [{"zeta": 1, "alpha": {"y": 2, "b": 3}}]})");
  EXPECT_EQ(render_or_die("{{ tools[0]|tojson }}", ctx),
            R"({"zeta": 1, "alpha": {"y": 2, "b": 3}})");
  // The plain-json overload sees std::map order.
  auto t = ChatTemplate::parse("{{ tools[0]|tojson }}");
  ASSERT_TRUE(t.has_value());
  auto out = t->render(nlohmann::json::parse(R"({"tools": [{"zeta": 1, "alpha": 2}]})"));
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, R"({"alpha": 2, "zeta": 1})");
}

TEST(ChatTemplate, StrftimeNowUsesInjectedClock) {
  auto t = ChatTemplate::parse("{{ strftime_now('%Y') }}");
  ASSERT_TRUE(t.has_value());
  ChatTemplateRenderOptions o;
  o.now_unix_seconds = 86400 * 400;  // 1971-02-05
  auto out = t->render(nlohmann::ordered_json::object(), o);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, "1971");
}

TEST(ChatTemplate, ConcurrentRendersMatchSerialRender) {
  std::ifstream f("/work/shared/data/chat-templates/GLM-4.7.jinja", std::ios::binary);
  std::string src((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (src.empty()) {
    src = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}";
  }
  auto t = ChatTemplate::parse(src);
  ASSERT_TRUE(t.has_value()) << t.error().message;
  std::vector<nlohmann::ordered_json> ctxs;
  for (int k = 0; k < 8; ++k) {
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    for (int m = 0; m <= k; ++m) {
      msgs.push_back(
          {{"role", m % 2 ? "assistant" : "user"}, {"content", "turn " + std::to_string(m)}});
    }
    ctxs.push_back({{"messages", msgs}, {"add_generation_prompt", true}});
  }
  std::vector<std::string> want;
  for (const auto& c : ctxs) want.push_back(*t->render(c));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(ctxs.size(), 0);
  for (size_t k = 0; k < ctxs.size(); ++k) {
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 50; ++rep) {
        auto out = t->render(ctxs[k]);
        if (!out || *out != want[k]) ++mismatches[k];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t k = 0; k < ctxs.size(); ++k) EXPECT_EQ(mismatches[k], 0) << "context " << k;
}

TEST(ChatTemplateSource, TokenizerConfigStringAndNamedList) {
  auto s = chat_template_from_tokenizer_config(
      nlohmann::ordered_json::parse(R"({"chat_template": "{{ x }}"})"));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, "{{ x }}");
  auto l = chat_template_from_tokenizer_config(nlohmann::ordered_json::parse(
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})"));
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(*l, "D");
  auto none = chat_template_from_tokenizer_config(nlohmann::ordered_json::parse(R"({"x": 1})"));
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
}

TEST(ChatTemplateSource, DirectoryPrefersChatTemplateJinja) {
  fs::path dir = temp_dir("dir");
  write_file(dir / "tokenizer_config.json", R"({"chat_template": "from config"})");
  auto a = load_chat_template_source(dir.string());
  ASSERT_TRUE(a.has_value()) << a.error().message;
  EXPECT_EQ(*a, "from config");
  write_file(dir / "chat_template.jinja", "from jinja file\n");
  auto b = load_chat_template_source(dir.string());
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(*b, "from jinja file\n");
  fs::remove_all(dir);
}

TEST(ChatTemplateSource, OverrideIsAFileOrALiteralTemplate) {
  fs::path dir = temp_dir("override");
  write_file(dir / "custom.jinja", "custom {{ 1 }}");
  auto f = load_chat_template_source(dir.string(), (dir / "custom.jinja").string());
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(*f, "custom {{ 1 }}");
  auto lit = load_chat_template_source(dir.string(), "{% for m in messages %}{% endfor %}");
  ASSERT_TRUE(lit.has_value());
  EXPECT_EQ(*lit, "{% for m in messages %}{% endfor %}");
  auto bad = load_chat_template_source(dir.string(), (dir / "missing.jinja").string());
  EXPECT_FALSE(bad.has_value());
  auto none = load_chat_template_source(dir.string());
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
  fs::remove_all(dir);
}

TEST(ChatTemplateSource, GgufMetadata) {
  fs::path dir = temp_dir("gguf");
  formats::GgufWriter w;
  w.set("general.architecture", formats::GgufValue::string("flint"));
  w.set("tokenizer.chat_template", formats::GgufValue::string("{{ bos_token }}gguf"));
  ASSERT_TRUE(w.write((dir / "m.gguf").string()).has_value());
  auto s = load_chat_template_source((dir / "m.gguf").string());
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(*s, "{{ bos_token }}gguf");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace flint::tokenizer
