// GLM-4.7 tool-call and reasoning parsers on recorded model text: whole-text results against
// expectations written from vLLM's behaviour (json.dumps separators, schema typing), and streaming
// fed at every byte boundary must add up to the whole-text result without leaking partial tags.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "server/glm47_reasoning_parser.h"
#include "server/glm47_tool_parser.h"
#include "server/py_json.h"

namespace flint::server {
namespace {

ToolSchemas weather_schemas() {
  ToolSchemas s;
  s.string_args["get_weather"] = {"city", "unit"};
  s.string_args["search"] = {"query"};
  s.string_args["get_time"] = {};
  return s;
}

struct Accumulated {
  std::string content;
  std::vector<std::string> names;
  std::vector<std::string> args;
};

// Feeds `pieces` through the streaming parser and accumulates like the openai client does.
Accumulated stream_tools(const std::vector<std::string>& pieces, const ToolSchemas& schemas) {
  Glm47ToolStreamParser p(schemas);
  Accumulated acc;
  auto apply = [&](const ToolStreamDelta& d) {
    acc.content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (t.name) {
        EXPECT_EQ(t.index, static_cast<int>(acc.names.size())) << "calls start in order";
        acc.names.push_back(*t.name);
        acc.args.emplace_back();
      }
      EXPECT_LT(t.index, static_cast<int>(acc.names.size())) << "fragment before the name";
      if (t.index < static_cast<int>(acc.args.size())) acc.args[t.index] += t.arguments;
    }
  };
  for (const std::string& piece : pieces) apply(p.feed(piece));
  apply(p.finish());
  return acc;
}

// Every way to cut `text` in two, plus byte by byte.
std::vector<std::vector<std::string>> splits(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  for (size_t i = 0; i <= text.size(); ++i) out.push_back({text.substr(0, i), text.substr(i)});
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  out.push_back(bytes);
  for (size_t i = 0; i + 3 <= text.size(); i += 7) {  // three pieces, a spread of cut points
    for (size_t j = i; j <= text.size(); j += 5) {
      out.push_back({text.substr(0, i), text.substr(i, j - i), text.substr(j)});
    }
  }
  return out;
}

void expect_stream_matches(const std::string& text, const ToolSchemas& schemas) {
  ToolParseResult whole = glm47_parse_tool_calls(text, schemas);
  for (const auto& pieces : splits(text)) {
    SCOPED_TRACE("first cut at " + std::to_string(pieces[0].size()) + " of " +
                 std::to_string(pieces.size()) + " pieces");
    Accumulated acc = stream_tools(pieces, schemas);
    ASSERT_EQ(acc.names.size(), whole.tool_calls.size());
    for (size_t i = 0; i < acc.names.size(); ++i) {
      EXPECT_EQ(acc.names[i], whole.tool_calls[i].name);
      EXPECT_EQ(acc.args[i], whole.tool_calls[i].arguments);
    }
    if (!whole.tool_calls.empty()) {
      EXPECT_EQ(acc.content, whole.content.value_or(""));
    }
    EXPECT_EQ(acc.content.find("<tool_call"), std::string::npos) << acc.content;
    EXPECT_EQ(acc.content.find("</tool_call"), std::string::npos) << acc.content;
  }
}

TEST(Glm47ToolParser, ParsesTypedArguments) {
  auto r = glm47_parse_tool_calls(
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
      "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
      weather_schemas());
  EXPECT_FALSE(r.content.has_value());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"city": "Paris", "days": 3})");
}

TEST(Glm47ToolParser, ZeroArgumentCall) {
  auto r = glm47_parse_tool_calls("<tool_call>get_time</tool_call>", weather_schemas());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "get_time");
  EXPECT_EQ(r.tool_calls[0].arguments, "{}");
}

TEST(Glm47ToolParser, Glm45NewlineLayoutAndLiteralBackslashN) {
  auto r = glm47_parse_tool_calls(
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
      "<arg_key>days</arg_key>\\n<arg_value>2</arg_value>\n</tool_call>",
      weather_schemas());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"city": "Paris", "days": 2})");
}

TEST(Glm47ToolParser, StringSchemaKeepsValueVerbatim) {
  auto r = glm47_parse_tool_calls(
      "<tool_call>search<arg_key>query</arg_key><arg_value> 42 </arg_value>"
      "<arg_key>limit</arg_key><arg_value> 42 </arg_value></tool_call>",
      weather_schemas());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"query": " 42 ", "limit": 42})");
}

TEST(Glm47ToolParser, UntypedValuesTryJsonThenPythonThenString) {
  auto r = glm47_parse_tool_calls(
      "<tool_call>f<arg_key>a</arg_key><arg_value>{\"x\":[1,2.5,\"y\"],\"b\":null}</arg_value>"
      "<arg_key>b</arg_key><arg_value>True</arg_value>"
      "<arg_key>c</arg_key><arg_value>None</arg_value>"
      "<arg_key>d</arg_key><arg_value> hello world </arg_value>"
      "<arg_key>e</arg_key><arg_value>1.0</arg_value></tool_call>",
      weather_schemas());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments,
            R"({"a": {"x": [1, 2.5, "y"], "b": null}, "b": true, "c": null, "d": "hello world", )"
            R"("e": 1.0})");
}

TEST(Glm47ToolParser, EscapesStringsLikePythonJsonDumps) {
  auto r = glm47_parse_tool_calls(
      "<tool_call>search<arg_key>query</arg_key><arg_value>say \"hi\"\\\n\tcaf\xc3\xa9 "
      "\xf0\x9f\x8c\x8d\x01</arg_value></tool_call>",
      weather_schemas());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments,
            "{\"query\": \"say \\\"hi\\\"\\\\\\n\\tcaf\xc3\xa9 \xf0\x9f\x8c\x8d\\u0001\"}");
}

TEST(Glm47ToolParser, ContentBeforeAndBetweenParallelCalls) {
  auto r = glm47_parse_tool_calls(
      "Let me check.\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value>"
      "</tool_call>\nand<tool_call>get_time</tool_call>",
      weather_schemas());
  EXPECT_EQ(r.content.value_or("<none>"), "Let me check.\n\nand");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(r.tool_calls[1].name, "get_time");
}

TEST(Glm47ToolParser, PlainTextIsContent) {
  auto r = glm47_parse_tool_calls("The weather is <b>fine</b>.", weather_schemas());
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content.value_or(""), "The weather is <b>fine</b>.");
}

TEST(Glm47ToolParser, CallCutOffByMaxTokensKeepsWhatWasGenerated) {
  auto r = glm47_parse_tool_calls("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par",
                                  weather_schemas());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"city": "Par"})");
}

TEST(Glm47ToolParser, StreamingMatchesWholeTextAtEveryByteBoundary) {
  const ToolSchemas schemas = weather_schemas();
  for (std::string text : {
           std::string("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
                       "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"),
           std::string("Sure \xc3\xa9\xf0\x9f\x8c\x8d <tool_call>get_time</tool_call>"),
           std::string("<tool_call>get_time</tool_call><tool_call>search<arg_key>query</arg_key>"
                       "<arg_value>a </arg_value</arg_value></tool_call> tail <"),
           std::string("Let me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
                       "<arg_value>S\xc3\xa3o \"P\"</arg_value>\n</tool_call>\nand"
                       "<tool_call>f<arg_key>x</arg_key><arg_value>[1, 2]</arg_value></tool_call>"),
           std::string("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par"),
       }) {
    SCOPED_TRACE(text);
    expect_stream_matches(text, schemas);
  }
}

TEST(Glm47ToolParser, StreamsStringValuesInsideAnOpenQuote) {
  Glm47ToolStreamParser p(weather_schemas());
  std::string args;
  std::vector<std::string> seen;
  const std::string text =
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
      "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>";
  for (char c : text) {
    for (const auto& d : p.feed(std::string(1, c)).tool_calls) {
      args += d.arguments;
      seen.push_back(args);
    }
  }
  for (const auto& d : p.finish().tool_calls) args += d.arguments;
  EXPECT_NE(std::find(seen.begin(), seen.end(), R"({"city": "Pa)"), seen.end());
  // The number is sent only once complete, and the brace only with </tool_call>.
  EXPECT_EQ(std::find(seen.begin(), seen.end(), R"({"city": "Paris", "days": )"), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), R"({"city": "Paris", "days": 3)"), seen.end());
  EXPECT_EQ(args, R"({"city": "Paris", "days": 3})");
}

TEST(Glm47ToolParser, PartialOpenTagIsHeldBackThenReleased) {
  Glm47ToolStreamParser p(weather_schemas());
  EXPECT_EQ(p.feed("Hello <tool").content, "Hello ");
  EXPECT_EQ(p.feed("box>").content, "<toolbox>");
  EXPECT_EQ(p.feed(" <").content, " ");
  EXPECT_EQ(p.finish().content, "<");
}

TEST(Glm47ToolParser, FirstDeltaCarriesNameOnce) {
  Glm47ToolStreamParser p(weather_schemas());
  auto d1 = p.feed("<tool_call>get_wea");
  EXPECT_TRUE(d1.tool_calls.empty());
  auto d2 = p.feed("ther<arg_key>");
  ASSERT_EQ(d2.tool_calls.size(), 1u);
  EXPECT_EQ(d2.tool_calls[0].name.value_or(""), "get_weather");
  EXPECT_EQ(d2.tool_calls[0].arguments, "{");
  auto d3 = p.feed("city</arg_key><arg_value>Oslo</arg_value></tool_call>");
  ASSERT_EQ(d3.tool_calls.size(), 1u);
  EXPECT_FALSE(d3.tool_calls[0].name.has_value());
  EXPECT_EQ(d3.tool_calls[0].arguments, R"("city": "Oslo"})");
  EXPECT_EQ(p.num_calls(), 1);
}

TEST(PyJson, DumpsWithPythonSeparators) {
  auto j = nlohmann::ordered_json::parse(R"({"z":1,"a":[true,{"k":"v"}],"f":2.0})");
  EXPECT_EQ(py_json_dumps(j), R"({"z": 1, "a": [true, {"k": "v"}], "f": 2.0})");
}

// Expected text from Python: json.dumps("a\"b\\c\n\t\x01\x1f\x7f é😀\b\f\r", ensure_ascii=False).
TEST(PyJson, StringEscapesAsPythonAndKeepsNonAscii) {
  EXPECT_EQ(py_json_string("a\"b\\c\n\t\x01\x1f\x7f é😀\b\f\r"),
            "\"a\\\"b\\\\c\\n\\t\\u0001\\u001f\x7f é😀\\b\\f\\r\"");
  EXPECT_EQ(py_json_string(""), "\"\"");
  // A byte that is not UTF-8 cannot pass into JSON text: it becomes U+FFFD.
  EXPECT_EQ(py_json_string("x\xffy"), "\"x\xef\xbf\xbdy\"");
}

TEST(Glm47Reasoning, SplitsAtThinkClose) {
  auto r = glm47_split_reasoning("I should answer.</think>Hello!", true);
  EXPECT_EQ(r.reasoning, "I should answer.");
  EXPECT_EQ(r.content, "Hello!");
}

TEST(Glm47Reasoning, SwallowsLeadingThinkOpen) {
  auto r = glm47_split_reasoning("<think>hmm</think>\nok", true);
  EXPECT_EQ(r.reasoning, "hmm");
  EXPECT_EQ(r.content, "\nok");
}

TEST(Glm47Reasoning, DisabledThinkingIsAllContent) {
  auto r = glm47_split_reasoning("hmm</think>ok", false);
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "hmm</think>ok");
}

TEST(Glm47Reasoning, ToolCallEndsReasoning) {
  auto r = glm47_split_reasoning("need weather<tool_call>get_time</tool_call>", true);
  EXPECT_EQ(r.reasoning, "need weather");
  EXPECT_EQ(r.content, "<tool_call>get_time</tool_call>");
}

TEST(Glm47Reasoning, DropsStrayThinkCloseInContent) {
  auto r = glm47_split_reasoning("a</think>b</think>c", true);
  EXPECT_EQ(r.reasoning, "a");
  EXPECT_EQ(r.content, "bc");
}

TEST(Glm47Reasoning, UnterminatedIsAllReasoning) {
  auto r = glm47_split_reasoning("still thinking </thi", true);
  EXPECT_EQ(r.reasoning, "still thinking </thi");
  EXPECT_EQ(r.content, "");
}

TEST(Glm47Reasoning, StreamingMatchesWholeTextAtEveryByteBoundary) {
  for (bool enabled : {true, false}) {
    for (std::string text : {std::string("<think>I think \xc3\xa9.</think>Hello</think> world"),
                             std::string("reason <b> </thin>k<tool_call>get_time</tool_call>after"),
                             std::string("<thin"), std::string("all reasoning \xf0\x9f\x8c\x8d")}) {
      SCOPED_TRACE(text);
      ReasoningSplit whole = glm47_split_reasoning(text, enabled);
      for (const auto& pieces : splits(text)) {
        Glm47ReasoningStreamParser p(enabled);
        ReasoningSplit acc;
        for (const std::string& piece : pieces) {
          ReasoningSplit d = p.feed(piece);
          acc.reasoning += d.reasoning;
          acc.content += d.content;
          // Never sent ahead of the truth: a held-back tag must not leak into reasoning.
          EXPECT_EQ(whole.reasoning.substr(0, acc.reasoning.size()), acc.reasoning);
          EXPECT_EQ(whole.content.substr(0, acc.content.size()), acc.content);
        }
        ReasoningSplit d = p.finish();
        acc.reasoning += d.reasoning;
        acc.content += d.content;
        EXPECT_EQ(acc.reasoning, whole.reasoning);
        EXPECT_EQ(acc.content, whole.content);
      }
    }
  }
}

TEST(Glm47Reasoning, PipelineIntoToolParserStreamsLikeWholeText) {
  const std::string text =
      "The user wants weather.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris"
      "</arg_value></tool_call>";
  ReasoningSplit whole = glm47_split_reasoning(text, true);
  ToolParseResult calls = glm47_parse_tool_calls(whole.content, weather_schemas());
  Glm47ReasoningStreamParser rp(true);
  Glm47ToolStreamParser tp(weather_schemas());
  std::string reasoning, args;
  for (char c : text) {
    ReasoningSplit d = rp.feed(std::string(1, c));
    reasoning += d.reasoning;
    for (const auto& t : tp.feed(d.content).tool_calls) args += t.arguments;
  }
  ReasoningSplit d = rp.finish();
  reasoning += d.reasoning;
  for (const auto& t : tp.feed(d.content).tool_calls) args += t.arguments;
  for (const auto& t : tp.finish().tool_calls) args += t.arguments;
  EXPECT_EQ(reasoning, "The user wants weather.");
  ASSERT_EQ(calls.tool_calls.size(), 1u);
  EXPECT_EQ(args, calls.tool_calls[0].arguments);
  EXPECT_EQ(args, R"({"city": "Paris"})");
}

}  // namespace
}  // namespace flint::server
