#include "engine/structured/json_schema_compiler.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/structured/gemma4_tool_call_grammar.h"
#include "engine/structured/regex_compiler.h"

namespace gemmaserve::structured {

namespace {

using json = nlohmann::ordered_json;  // properties keep the schema's order
using Seq = Grammar::Sequence;
using Sym = Grammar::Symbol;

constexpr int kMaxSchemaDepth = 64;

// Keywords that describe and never constrain.
const std::set<std::string> kAnnotations = {
    "title", "description", "default",    "examples",         "$schema",
    "$id",   "$comment",    "deprecated", "readOnly",         "writeOnly",
    "$defs", "definitions", "$anchor",    "contentMediaType", "contentEncoding"};

const std::set<std::string> kSupported = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "enum",
                                          "const",
                                          "items",
                                          "minItems",
                                          "maxItems",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "format"};

// Regexes for the string formats (content between the quotes; none needs JSON escapes).
const std::map<std::string, std::string> kFormats = {
    {"date", R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))"},
    {"time",
     R"(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
    {"date-time",
     R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
    {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
    {"email",
     R"([a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+(\.[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)*@[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)+)"},
    {"ipv4",
     R"(((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))"},
};

ByteSet digits() {
  ByteSet d;
  for (uint8_t c = '0'; c <= '9'; ++c) d.set(c);
  return d;
}

ByteSet of(std::string_view chars) {
  ByteSet s;
  for (char c : chars) s.set(static_cast<uint8_t>(c));
  return s;
}

// Blank space between tokens: xgrammar's any_whitespace, runs capped.
Sym whitespace(Grammar& g) { return g.repeat({g.bytes(of(" \n\t"))}, 0, kMaxWhitespaceRun); }

// One character of JSON string content: plain, or an escape.
Sym json_char(Grammar& g) {
  const ByteSet hex = of("0123456789abcdefABCDEF");
  const Sym plain = g.codepoints(complement_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}));
  return g.choice(
      {{plain},
       {g.byte('\\'), g.bytes(of("\"\\/bfnrt"))},
       {g.byte('\\'), g.byte('u'), g.bytes(hex), g.bytes(hex), g.bytes(hex), g.bytes(hex)}},
      "json_char");
}

Seq integer_seq(Grammar& g) {
  ByteSet nonzero = digits();
  nonzero.reset('0');
  return {g.optional(g.literal("-")),
          g.choice({g.literal("0"), {g.bytes(nonzero), g.star({g.bytes(digits())})}})};
}

Sym number(Grammar& g) {
  Seq seq = integer_seq(g);
  seq.push_back(g.optional({g.byte('.'), g.plus({g.bytes(digits())})}));
  seq.push_back(g.optional(
      {g.bytes(of("eE")), g.optional({g.bytes(of("+-"))}), g.plus({g.bytes(digits())})}));
  return g.choice({std::move(seq)}, "number");
}

// Digits of an equal-length range [a, b] whose ends are aligned (split_range below).
std::string aligned_pattern(const std::string& a, const std::string& b) {
  std::string p;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) {
      p += a[i];
    } else {
      p.push_back('[');
      p.push_back(a[i]);
      p.push_back('-');
      p.push_back(b[i]);
      p.push_back(']');
    }
  }
  return p;
}

// [a, b] of non-negative integers as alternatives of digit patterns (a stop at every run of
// trailing nines from a and of trailing zeros from b + 1, so each piece is aligned).
std::string range_alternatives(uint64_t a, uint64_t b) {
  std::set<uint64_t> stops = {b};
  uint64_t p10 = 10;
  for (int i = 1; i <= 18; ++i, p10 *= 10) {
    const uint64_t nines = a - a % p10 + (p10 - 1);
    if (nines >= a && nines < b) stops.insert(nines);
    const uint64_t zeros = (b + 1) - (b + 1) % p10;
    if (zeros > a && zeros - 1 <= b && zeros - 1 >= a) stops.insert(zeros - 1);
  }
  std::string out;
  uint64_t start = a;
  for (uint64_t stop : stops) {
    if (stop < start) continue;
    std::string s = std::to_string(start), e = std::to_string(stop);
    if (!out.empty()) out.push_back('|');
    out.append(aligned_pattern(s, e));
    start = stop + 1;
  }
  return out;
}

// Non-negative integers from `a` (and up to `b` when given), no leading zeros.
std::string non_negative(uint64_t a, std::optional<uint64_t> b) {
  if (b) return range_alternatives(a, *b);
  const std::string digits = std::to_string(a);
  uint64_t top = 9;
  for (size_t i = 1; i < digits.size(); ++i) top = top * 10 + 9;
  std::string out = range_alternatives(a, top);
  out.append("|[1-9][0-9]{").append(std::to_string(digits.size())).append(",}");
  return out;
}

}  // namespace

std::string integer_range_regex(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> parts;
  if (!lo || *lo < 0) {  // the negative part, as -(magnitudes)
    const uint64_t from = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
    std::optional<uint64_t> to;
    if (lo) to = static_cast<uint64_t>(-*lo);
    if (!to || from <= *to)
      parts.push_back(std::string("-(").append(non_negative(from, to)).append(")"));
  }
  if (!hi || *hi >= 0) {
    const uint64_t from = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    std::optional<uint64_t> to;
    if (hi) to = static_cast<uint64_t>(*hi);
    parts.push_back(non_negative(from, to));
  }
  std::string out;
  for (const std::string& p : parts) out.append(out.empty() ? "(" : "|(").append(p).append(")");
  return out;
}

namespace {

class SchemaCompiler {
 public:
  SchemaCompiler(Grammar* g, const json& document, const SchemaSyntax& syntax)
      : g_(*g), doc_(document), syntax_(syntax) {
    if (syntax.gemma4 || !syntax.any_whitespace) {
      ws_ = g_.choice(std::vector<Seq>(1), "no_space");
    } else if (syntax.whitespace_pattern) {
      ws_ = compile_regex(&g_, *syntax.whitespace_pattern);
    } else {
      ws_ = whitespace(g_);
    }
  }

  Sym value(const json& s, int depth) {
    if (depth > kMaxSchemaDepth) {
      throw InputError("the JSON schema is nested deeper than " + std::to_string(kMaxSchemaDepth) +
                       " levels");
    }
    if (s.is_boolean()) {
      if (!s.get<bool>()) throw InputError("the JSON schema false matches nothing");
      return any();
    }
    if (!s.is_object()) throw InputError("a JSON schema must be an object or a boolean");
    std::vector<std::string> unsupported;
    for (const auto& [k, v] : s.items()) {
      if (!kAnnotations.count(k) && !kSupported.count(k)) unsupported.push_back(k);
    }
    if (!unsupported.empty()) {
      std::string list;
      for (const std::string& k : unsupported) list += (list.empty() ? "" : ", ") + k;
      throw InputError("unsupported JSON Schema keyword(s): " + list);
    }
    if (s.contains("$ref")) return reference(s["$ref"], depth);
    if (s.contains("const")) return g_.choice({g_.literal(literal(s["const"]))}, "const");
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) throw InputError("'enum' must be a non-empty array");
      std::vector<std::string> texts;
      for (const json& v : e) texts.push_back(literal(v));
      return g_.one_of(std::move(texts));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& list = s[key];
      if (!list.is_array() || list.empty()) {
        throw InputError(std::string("'") + key + "' must be a non-empty array");
      }
      std::vector<Seq> alts;
      for (const json& sub : list) alts.push_back({value(sub, depth + 1)});
      return g_.choice(std::move(alts), key);
    }
    if (s.contains("allOf")) {
      const json& list = s["allOf"];
      if (!list.is_array() || list.size() != 1) {
        throw InputError("unsupported JSON Schema keyword(s): allOf (of more than one schema)");
      }
      return value(list[0], depth + 1);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array()) {
        for (const json& x : t) {
          if (!x.is_string()) throw InputError("'type' entries must be strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        throw InputError("'type' must be a string or an array of strings");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") ||
               s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") ||
               s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return any();
    }
    std::vector<Seq> alts;
    for (const std::string& t : types) alts.push_back({typed(t, s, depth)});
    return g_.choice(std::move(alts), "type");
  }

  // Any value (what {} and additionalProperties true allow).
  Sym any() {
    if (any_) return *any_;
    const uint32_t value = g_.add_rule("value");
    any_ = Grammar::ref(value);
    const Sym member = g_.choice({{ws_, any_key(), ws_, g_.byte(':'), ws_, *any_}}, "member");
    const Sym object =
        g_.choice({{g_.byte('{'), g_.optional({member, g_.star({ws_, g_.byte(','), member})}), ws_,
                    g_.byte('}')}},
                  "object");
    const Sym array = g_.choice(
        {{g_.byte('['), ws_, g_.optional({*any_, g_.star({ws_, g_.byte(','), ws_, *any_})}), ws_,
          g_.byte(']')}},
        "array");
    g_.set_alternatives(value, {{object},
                                {array},
                                {string_any()},
                                {number_rule()},
                                g_.literal("true"),
                                g_.literal("false"),
                                g_.literal("null")});
    return *any_;
  }

 private:
  std::string literal(const json& v) const {
    return syntax_.gemma4 ? gemma4_literal(v, syntax_) : v.dump();
  }

  Sym number_rule() {
    if (!number_) number_ = syntax_.gemma4 ? gemma4_number(&g_) : number(g_);
    return *number_;
  }

  // A key of additionalProperties: any string (JSON), a bare identifier (Gemma 4).
  Sym any_key() { return syntax_.gemma4 ? gemma4_any_key(&g_) : string_any(); }

  Seq key(const std::string& name) {
    return g_.literal(syntax_.gemma4 ? gemma4_key(name, syntax_) : json(name).dump());
  }

  // A string value around `body`.
  Sym quoted(Sym body) {
    if (!syntax_.gemma4) return g_.choice({{g_.byte('"'), body, g_.byte('"')}}, "string");
    Seq seq = g_.literal(syntax_.gemma4_delimiter);
    seq.push_back(body);
    const Seq close = g_.literal(syntax_.gemma4_delimiter);
    seq.insert(seq.end(), close.begin(), close.end());
    return g_.choice({std::move(seq)}, "string");
  }
  Sym typed(const std::string& t, const json& s, int depth) {
    if (t == "object") return object(s, depth);
    if (t == "array") return array(s, depth);
    if (t == "string") return string(s);
    if (t == "integer") return integer(s);
    if (t == "number") {
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (s.contains(k)) {
          throw InputError(std::string("unsupported JSON Schema keyword(s): ") + k +
                           " on a number (integers take it)");
        }
      }
      return number_rule();
    }
    if (t == "boolean") return g_.choice({g_.literal("true"), g_.literal("false")}, "boolean");
    if (t == "null") return g_.choice({g_.literal("null")}, "null");
    throw InputError("unknown JSON Schema type '" + t + "'");
  }

  Sym integer(const json& s) {
    std::optional<int64_t> lo, hi;
    auto bound = [&](const char* key, bool lower, bool exclusive) {
      if (!s.contains(key)) return;
      const json& v = s[key];
      if (!v.is_number()) throw InputError(std::string("'") + key + "' must be a number");
      const double d = v.get<double>();
      if (std::abs(d) > 1e15) throw InputError(std::string("'") + key + "' is out of range");
      int64_t b = static_cast<int64_t>(lower ? std::ceil(d) : std::floor(d));
      if (exclusive && static_cast<double>(b) == d) b += lower ? 1 : -1;
      if (lower) {
        lo = lo ? std::max(*lo, b) : b;
      } else {
        hi = hi ? std::min(*hi, b) : b;
      }
    };
    bound("minimum", true, false);
    bound("exclusiveMinimum", true, true);
    bound("maximum", false, false);
    bound("exclusiveMaximum", false, true);
    if (!lo && !hi) return g_.choice({integer_seq(g_)}, "integer");
    if (lo && hi && *lo > *hi) throw InputError("the integer range is empty (minimum > maximum)");
    return compile_regex(&g_, integer_range_regex(lo, hi));
  }

  static int count(const json& s, const char* key, int fallback) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      throw InputError(std::string("'") + key + "' must be a non-negative integer");
    }
    return static_cast<int>(std::min<int64_t>(v.get<int64_t>(), 1 << 30));
  }

  Sym string(const json& s) {
    const int min = count(s, "minLength", 0), max = count(s, "maxLength", -1);
    if (max >= 0 && max < min) throw InputError("'maxLength' is less than 'minLength'");
    const bool patterned = s.contains("pattern") || s.contains("format");
    if (patterned && (s.contains("minLength") || s.contains("maxLength"))) {
      throw InputError(
          "unsupported JSON Schema keyword(s): minLength/maxLength together with pattern or "
          "format");
    }
    Sym body;
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) throw InputError("'pattern' must be a string");
      body = compile_regex(&g_, s["pattern"].get<std::string>(), !syntax_.gemma4);
    } else if (s.contains("format")) {
      const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
      const auto it = kFormats.find(f);
      if (it == kFormats.end()) {
        throw InputError("unsupported JSON Schema format '" + f +
                         "' (supported: date, date-time, email, ipv4, time, uuid)");
      }
      body = compile_regex(&g_, it->second, !syntax_.gemma4);
    } else if (!syntax_.gemma4) {
      body = g_.repeat({char_rule()}, min, max);
    } else if (min == 0 && max < 0) {
      body = gemma4_free_text(&g_, syntax_.gemma4_markers);
    } else {
      body = gemma4_bounded_text(&g_, min, max);
    }
    return quoted(body);
  }

  Sym char_rule() {
    if (!json_char_) json_char_ = json_char(g_);
    return *json_char_;
  }

  Sym string_any() {
    if (!string_any_) {
      string_any_ = quoted(syntax_.gemma4 ? gemma4_free_text(&g_, syntax_.gemma4_markers)
                                          : g_.star({char_rule()}));
    }
    return *string_any_;
  }

  Sym object(const json& s, int depth) {
    struct Property {
      std::string name;
      const json* schema;
      bool required;
    };
    std::vector<Property> props;
    static const json kAny = json::object();
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) throw InputError("'properties' must be an object");
      for (const auto& [name, sub] : s["properties"].items()) props.push_back({name, &sub, false});
    }
    if (s.contains("required")) {
      const json& req = s["required"];
      if (!req.is_array()) throw InputError("'required' must be an array of strings");
      for (const json& r : req) {
        if (!r.is_string()) throw InputError("'required' must be an array of strings");
        const std::string name = r.get<std::string>();
        bool found = false;
        for (Property& p : props) {
          if (p.name == name) found = p.required = true;
        }
        if (!found) props.push_back({name, &kAny, true});
      }
    }
    if (syntax_.gemma4) {  // the chat template writes arguments through dictsort
      std::stable_sort(props.begin(), props.end(), [](const Property& a, const Property& b) {
        return lower(a.name) < lower(b.name);
      });
    }
    // xgrammar's strict default: listed properties close the object unless it says otherwise.
    std::optional<Sym> extra;
    const json* ap = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (ap == nullptr) {
      if (props.empty()) extra = any();
    } else if (ap->is_boolean()) {
      if (ap->get<bool>()) extra = any();
    } else {
      extra = value(*ap, depth + 1);
    }
    auto member = [&](Seq key, Sym v) {
      Seq kv = {ws_};
      kv.insert(kv.end(), key.begin(), key.end());
      kv.insert(kv.end(), {ws_, g_.byte(':'), ws_, v});
      return kv;
    };
    // Rules for "the members from i on": first (no comma yet) and after (one came before).
    Sym first, after;
    if (extra) {
      const Seq kv = member({any_key()}, *extra);
      Seq more = {ws_, g_.byte(',')};
      more.insert(more.end(), kv.begin(), kv.end());
      after = g_.star(std::move(more));
      Seq one = kv;
      one.push_back(after);
      first = g_.optional(std::move(one));
    } else {
      first = after = g_.choice(std::vector<Seq>(1), "end");
    }
    for (size_t i = props.size(); i-- > 0;) {
      const Seq kv = member(key(props[i].name), value(*props[i].schema, depth + 1));
      Seq first_alt = kv;
      first_alt.push_back(after);
      Seq after_alt = {ws_, g_.byte(',')};
      after_alt.insert(after_alt.end(), kv.begin(), kv.end());
      after_alt.push_back(after);
      std::vector<Seq> firsts = {std::move(first_alt)}, afters = {std::move(after_alt)};
      if (!props[i].required) {
        firsts.push_back({first});
        afters.push_back({after});
      }
      first = g_.choice(std::move(firsts), "members");
      after = g_.choice(std::move(afters), "members");
    }
    return g_.choice({{g_.byte('{'), first, ws_, g_.byte('}')}}, "object");
  }

  Sym array(const json& s, int depth) {
    const int min = count(s, "minItems", 0), max = count(s, "maxItems", -1);
    if (max >= 0 && max < min) throw InputError("'maxItems' is less than 'minItems'");
    if (s.contains("items") && s["items"].is_array()) {
      throw InputError("unsupported JSON Schema keyword(s): items as an array (tuples)");
    }
    const Sym item = s.contains("items") ? value(s["items"], depth + 1) : any();
    std::vector<Seq> alts;
    if (min == 0) alts.push_back({g_.byte('['), ws_, g_.byte(']')});
    if (max != 0) {
      Sym rest =
          g_.repeat({ws_, g_.byte(','), ws_, item}, std::max(min, 1) - 1, max < 0 ? -1 : max - 1);
      alts.push_back({g_.byte('['), ws_, item, rest, ws_, g_.byte(']')});
    }
    return g_.choice(std::move(alts), "array");
  }

  Sym reference(const json& ref, int depth) {
    if (!ref.is_string()) throw InputError("'$ref' must be a string");
    const std::string r = ref.get<std::string>();
    if (const auto it = refs_.find(r); it != refs_.end()) return Grammar::ref(it->second);
    if (r != "#" && !r.starts_with("#/")) {
      throw InputError("unsupported $ref '" + r + "' (only local references: #/$defs/...)");
    }
    const json* target = &doc_;
    try {
      if (r != "#") target = &doc_.at(json::json_pointer(r.substr(1)));
    } catch (const json::exception&) {
      throw InputError("$ref '" + r + "' does not resolve in the schema");
    }
    const uint32_t rule = g_.add_rule("ref " + r);  // before the body: recursion refers to it
    refs_.emplace(r, rule);
    g_.set_alternatives(rule, {{value(*target, depth + 1)}});
    return Grammar::ref(rule);
  }

  static std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }

  Grammar& g_;
  const json& doc_;
  const SchemaSyntax& syntax_;
  Sym ws_;
  std::optional<Sym> any_, json_char_, string_any_, number_;
  std::map<std::string, uint32_t> refs_;
};

}  // namespace

Grammar::Symbol any_json_value(Grammar* g) {
  const SchemaSyntax syntax;
  return SchemaCompiler(g, json(), syntax).any();
}

Grammar::Symbol compile_schema_value(Grammar* g, const nlohmann::ordered_json& schema,
                                     const SchemaSyntax& syntax) {
  SchemaCompiler c(g, schema, syntax);
  return c.value(schema, 0);
}

void compile_json_schema(Grammar* g, const nlohmann::ordered_json& schema,
                         const SchemaSyntax& syntax) {
  const Sym root = compile_schema_value(g, schema, syntax);
  g->set_root(g->choice({{root}}, "root").index);
}

}  // namespace gemmaserve::structured
