#include "engine/structured/gemma4_tool_call_grammar.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "core/error.h"
#include "engine/structured/json_schema_compiler.h"

namespace gemmaserve::structured {

namespace {

using json = nlohmann::ordered_json;
using Seq = Grammar::Sequence;
using Sym = Grammar::Symbol;

// The ASCII bytes string text may hold (no controls but tab, newline, carriage return).
bool text_byte(uint8_t b) { return b == '\t' || b == '\n' || b == '\r' || (b >= 0x20 && b < 0x7F); }

bool contains_marker(std::string_view s, const std::vector<std::string>& markers) {
  return std::any_of(markers.begin(), markers.end(),
                     [&](const std::string& m) { return s.find(m) != std::string_view::npos; });
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// What the tool parser reads as a call's name: [A-Za-z0-9_.-] and non-ASCII bytes.
bool name_byte(unsigned char c) {
  return std::isalnum(c) || c == '_' || c == '.' || c == '-' || c >= 0x80;
}

}  // namespace

Grammar::Symbol gemma4_free_text(Grammar* g, const std::vector<std::string>& markers) {
  // One rule per "text since the last '<' is this proper prefix of a marker" (markers have no
  // other '<', so that is all an automaton avoiding them needs to remember); "" is none.
  std::map<std::string, uint32_t> states = {{"", 0}};
  for (const std::string& m : markers) {
    if (m.empty() || m[0] != '<' || m.find('<', 1) != std::string::npos) {
      throw std::invalid_argument("gemma4_free_text: a marker must start with its only '<'");
    }
    for (size_t n = 1; n < m.size(); ++n) states.emplace(m.substr(0, n), 0);
  }
  auto is_marker = [&](const std::string& t) {
    return std::find(markers.begin(), markers.end(), t) != markers.end();
  };
  for (auto& [prefix, rule] : states) rule = g->add_rule(std::string("text after ").append(prefix));
  const Sym wide = g->codepoints({{0x80, 0x10FFFF}});
  const auto after_lt = states.find("<");  // none without markers
  for (const auto& [prefix, rule] : states) {
    std::map<uint32_t, ByteSet> next;  // target rule -> the bytes that lead there
    for (int b = 0; b < 0x80; ++b) {
      if (!text_byte(static_cast<uint8_t>(b))) continue;
      const std::string t = prefix + static_cast<char>(b);
      if (is_marker(t)) continue;
      const auto it = states.find(t);
      uint32_t to = states.at("");
      if (it != states.end()) {
        to = it->second;
      } else if (b == '<' && after_lt != states.end()) {
        to = after_lt->second;
      }
      next[to].set(static_cast<size_t>(b));
    }
    std::vector<Seq> alts = {{}, {wide, Grammar::ref(states.at(""))}};
    for (const auto& [to, bytes] : next) alts.push_back({g->bytes(bytes), Grammar::ref(to)});
    g->set_alternatives(rule, std::move(alts));
  }
  return Grammar::ref(states.at(""));
}

Grammar::Symbol gemma4_bounded_text(Grammar* g, int min, int max) {
  const Sym c = g->codepoints(
      {{'\t', '\n'}, {'\r', '\r'}, {0x20, '<' - 1}, {'<' + 1, 0x7E}, {0x80, 0x10FFFF}});
  return g->repeat({c}, min, max);
}

std::string gemma4_literal(const json& v, const SchemaSyntax& syntax) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (contains_marker(s, syntax.gemma4_markers)) {
      throw InputError("a Gemma 4 tool argument cannot hold the marker text in '" + s + "'");
    }
    std::string out(syntax.gemma4_delimiter);
    out.append(s).append(syntax.gemma4_delimiter);
    return out;
  }
  if (v.is_object()) {
    std::vector<std::string> keys;
    for (const auto& [k, _] : v.items()) keys.push_back(k);
    std::stable_sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
      return lower(a) < lower(b);
    });
    std::string out = "{";
    for (const std::string& k : keys) {
      if (out.size() > 1) out += ',';
      out.append(gemma4_key(k, syntax)).append(":").append(gemma4_literal(v.at(k), syntax));
    }
    return out + '}';
  }
  if (v.is_array()) {
    std::string out = "[";
    for (const json& x : v) {
      if (out.size() > 1) out.push_back(',');
      out.append(gemma4_literal(x, syntax));
    }
    return out + ']';
  }
  return v.dump();  // numbers, true, false, null
}

std::string gemma4_key(const std::string& name, const SchemaSyntax& syntax) {
  const bool bare = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return name_byte(static_cast<unsigned char>(c)) || c == '$';
  });
  return bare ? name : gemma4_literal(json(name), syntax);
}

Grammar::Symbol gemma4_any_key(Grammar* g) {
  ByteSet first, rest;
  for (int c = 0; c < 256; ++c) {
    if (std::isalpha(c) || c == '_') first.set(static_cast<size_t>(c));
    if (std::isalnum(c) || c == '_') rest.set(static_cast<size_t>(c));
  }
  return g->choice({{g->bytes(first), g->star({g->bytes(rest)})}}, "key");
}

Grammar::Symbol gemma4_number(Grammar* g) {
  ByteSet digit, nonzero;
  for (char c = '0'; c <= '9'; ++c) digit.set(static_cast<uint8_t>(c));
  nonzero = digit;
  nonzero.reset('0');
  const Sym d = g->bytes(digit);
  ByteSet e;
  e.set('e');
  e.set('E');
  ByteSet sign;
  sign.set('+');
  sign.set('-');
  return g->choice(
      {{g->optional(g->literal("-")),
        g->choice({g->literal("0"), {g->bytes(nonzero), g->repeat({d}, 0, 15)}}),
        g->optional({g->byte('.'), g->plus({d})}),
        g->optional({g->bytes(e), g->optional({g->bytes(sign)}), g->repeat({d}, 1, 2)})}},
      "number");
}

void compile_gemma4_tool_calls(Grammar* g, const json& spec) {
  SchemaSyntax syntax;
  syntax.gemma4 = true;
  if (spec.contains("markers")) {
    for (const json& m : spec.at("markers")) syntax.gemma4_markers.push_back(m.get<std::string>());
  }
  // A marker's text in the grammar: its token's private byte when the spec names the token.
  auto marker = [&](std::string_view text) {
    const json* tokens = spec.contains("marker_tokens") ? &spec.at("marker_tokens") : nullptr;
    if (tokens == nullptr || !tokens->contains(text)) return std::string(text);
    return std::string(1, static_cast<char>(g->private_byte(tokens->at(text).get<int32_t>())));
  };
  syntax.gemma4_delimiter = marker(kGemma4StringDelimiter);
  const json& tools = spec.at("tools");
  if (!tools.is_array() || tools.empty()) throw InputError("tool_choice needs at least one tool");
  std::vector<Seq> calls;
  for (const json& tool : tools) {
    const std::string name = tool.at("name").get<std::string>();
    if (name.empty() || name.size() > 200 || !std::all_of(name.begin(), name.end(), [](char c) {
          return name_byte(static_cast<unsigned char>(c));
        })) {
      throw InputError("tool name '" + name +
                       "' cannot be written in a Gemma 4 tool call (letters, digits, '_', '.', "
                       "'-', at most 200 bytes)");
    }
    const json* params = tool.contains("parameters") ? &tool.at("parameters") : nullptr;
    json schema;
    if (params == nullptr || params->is_null() || (params->is_object() && params->empty())) {
      schema = {
          {"type", "object"}, {"properties", json::object()}, {"additionalProperties", false}};
    } else if (!params->is_object() ||
               (params->contains("type") && params->at("type") != "object")) {
      throw InputError("tool '" + name + "': parameters must be a JSON Schema of type object");
    } else {
      schema = *params;
      schema["type"] = "object";
    }
    Seq call = g->literal(marker(kGemma4ToolCallStart) + "call:" + name);
    call.push_back(compile_schema_value(g, schema, syntax));
    const Seq end = g->literal(marker(kGemma4ToolCallEnd));
    call.insert(call.end(), end.begin(), end.end());
    calls.push_back(std::move(call));
  }
  const Sym one = g->choice(std::move(calls), "tool_call");
  const std::string count = spec.value("calls", "one");
  if (count != "one" && count != "one_or_more") {
    throw std::invalid_argument("compile_gemma4_tool_calls: calls must be one or one_or_more");
  }
  g->set_root(g->choice({{count == "one" ? one : g->plus({one})}}, "root").index);
}

}  // namespace gemmaserve::structured
