#include "engine/structured/compiled_grammar.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/json_object_grammar.h"
#include "engine/structured/ebnf_compiler.h"
#include "engine/structured/gemma4_tool_call_grammar.h"
#include "engine/structured/json_schema_compiler.h"
#include "engine/structured/regex_compiler.h"
#include "io/json_shape.h"

namespace gemmaserve::structured {

namespace {

// Bytes a cached mask holds: its words, the vector and the shared_ptr block around them.
uint64_t mask_bytes(const TokenBits& bits) {
  return heap_bytes(bits) + sizeof(TokenBits) + kSharedControlBytes;
}
uint64_t shared_mask_bytes(const SharedMask& m) {
  uint64_t bytes = heap_bytes(m.certain) + heap_bytes(m.escapes) + sizeof(SharedMask);
  for (const EscapeNode& e : m.escapes) bytes += heap_bytes(e.stacks);
  return bytes + kSharedControlBytes;
}

}  // namespace

std::string CompiledGrammar::mask_key(char kind, std::string_view state_key) const {
  std::string key(1, kind);
  key.append(reinterpret_cast<const char*>(&id_), sizeof(id_));
  key.append(state_key);
  return key;
}

std::shared_ptr<const TokenBits> CompiledGrammar::allowed(const JsonTokenTrie& trie, int vocab_size,
                                                          const GrammarState& state,
                                                          GrammarMatcher* matcher) const {
  const std::shared_ptr<StructuredOutputCache> cache = cache_.lock();
  const std::string key = mask_key('M', state.key());
  if (cache) {
    if (auto hit = cache->find<TokenBits>(key)) return hit;
  }
  const size_t words = (static_cast<size_t>(vocab_size) + 63) / 64;
  auto set_bits = [](const std::vector<int32_t>& ids, TokenBits* bits) {
    for (int32_t id : ids) (*bits)[static_cast<size_t>(id) / 64] |= 1ull << (id % 64);
  };
  // The shared part (one walk for every state with these top frames), then what lies below.
  const GrammarState cut = GrammarMatcher::truncate(state, kKeptFrames);
  const std::string cut_key = mask_key('S', cut.key());
  std::shared_ptr<const SharedMask> shared;
  if (cache) shared = cache->find<SharedMask>(cut_key);
  if (!shared) {
    auto made = std::make_shared<SharedMask>();
    made->certain.assign(words, 0);
    std::vector<int32_t> ids;
    matcher->walk_truncated(trie, cut, &ids, &made->escapes);
    set_bits(ids, &made->certain);
    if (cache) cache->put(cut_key, made, shared_mask_bytes(*made));
    shared = std::move(made);
  }
  auto bits = std::make_shared<TokenBits>(shared->certain);
  std::vector<int32_t> ids;
  for (const EscapeNode& e : shared->escapes)
    matcher->walk_escape(trie, state, kKeptFrames, e, &ids);
  GrammarState next;
  for (const auto& [id, bytes] : grammar_.private_tokens()) {
    if (id < vocab_size && matcher->advance(state, static_cast<uint8_t>(bytes[0]), &next)) {
      ids.push_back(id);
    }
  }
  set_bits(ids, bits.get());
  if (cache) cache->put(key, bits, mask_bytes(*bits));
  return bits;
}

std::string_view CompiledGrammar::token_bytes(const JsonTokenTrie& trie, int32_t id) const {
  for (const auto& [token, bytes] : grammar_.private_tokens()) {
    if (token == id) return bytes;
  }
  return trie.bytes(id);
}

namespace {

// {"schema": TEXT, "any_whitespace": BOOL, "whitespace_pattern": REGEX or null}: vLLM's
// disable_any_whitespace and whitespace_pattern. The pattern may match blank space only, or the
// JSON would not be JSON.
void compile_json_with_whitespace(Grammar* g, const nlohmann::ordered_json& wrapped) {
  SchemaSyntax syntax;
  syntax.any_whitespace = wrapped.value("any_whitespace", true);
  if (wrapped.contains("whitespace_pattern") && !wrapped["whitespace_pattern"].is_null()) {
    const std::string pattern = wrapped["whitespace_pattern"].get<std::string>();
    Grammar check;
    try {
      check.set_root(compile_regex(&check, pattern).index);
      check.finish();
    } catch (const InputError& e) {
      throw InputError(std::string("whitespace_pattern: ") + e.what());
    }
    ByteSet blank;
    for (char c : {' ', '\t', '\n', '\r'}) blank.set(static_cast<uint8_t>(c));
    for (uint32_t e : check.elements()) {
      if ((e & Grammar::kTagMask) == Grammar::kBytesTag &&
          (check.byte_set(e & ~Grammar::kTagMask) & ~blank).any()) {
        throw InputError("whitespace_pattern '" + pattern +
                         "' matches more than blank space (space, tab, newline, carriage return)");
      }
    }
    syntax.whitespace_pattern = pattern;
  }
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(wrapped.at("schema").get<std::string>());
  } catch (const nlohmann::ordered_json::exception&) {
    throw InputError("the JSON schema is not valid JSON");
  }
  compile_json_schema(g, schema, syntax);
}

}  // namespace

Grammar build_grammar(std::string_view kind, std::string_view spec) {
  Grammar g;
  if (kind == "json") {
    const JsonShape shape = json_shape(spec);
    if (shape.widest_object > kMaxJsonObjectMembers) {
      throw InputError("the JSON schema has an object with more than " +
                       std::to_string(kMaxJsonObjectMembers) + " members");
    }
    if (shape.key_comparisons > kMaxJsonKeyComparisons) {
      throw InputError("the JSON schema has objects this large in all (parsing their " +
                       std::to_string(shape.key_comparisons) + " key comparisons exceeds " +
                       std::to_string(kMaxJsonKeyComparisons) + ")");
    }
    nlohmann::ordered_json schema;
    try {
      schema = nlohmann::ordered_json::parse(spec);
    } catch (const nlohmann::ordered_json::exception&) {
      throw InputError("the JSON schema is not valid JSON");
    }
    compile_json_schema(&g, schema);
  } else if (kind == "json_with_whitespace") {  // the server's wrapping of "json" with options
    compile_json_with_whitespace(&g, nlohmann::ordered_json::parse(spec));
  } else if (kind == "regex") {
    g.set_root(compile_regex(&g, spec).index);
  } else if (kind == "choice") {
    const nlohmann::json list = nlohmann::json::parse(spec, nullptr, /*allow_exceptions=*/false);
    if (!list.is_array() || list.empty()) {
      throw InputError("choice must be a non-empty list of strings");
    }
    std::vector<std::string> texts;
    for (const auto& c : list) {
      if (!c.is_string()) throw InputError("choice must be a non-empty list of strings");
      texts.push_back(c.get<std::string>());
    }
    g.set_root(g.one_of(std::move(texts)).index);
  } else if (kind == "grammar") {
    compile_ebnf(&g, spec);
  } else if (kind == "gemma4_tool_call") {  // the server's own spec (tool_choice), never a client's
    compile_gemma4_tool_calls(&g, nlohmann::ordered_json::parse(spec));
  } else {
    throw InputError("unknown structured output kind '" + std::string(kind) + "'");
  }
  g.finish();
  return g;
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(std::string_view kind,
                                                                std::string_view spec) {
  std::string key = "G";
  key.append(kind);
  key.push_back('\0');
  key.append(spec);
  if (auto hit = cache_->find<CompiledGrammar>(key)) return hit;
  auto compiled = std::make_shared<const CompiledGrammar>(build_grammar(kind, spec), cache_);
  cache_->put(std::move(key), compiled,
              compiled->grammar().memory_bytes() + sizeof(CompiledGrammar) + kSharedControlBytes);
  return compiled;
}

}  // namespace gemmaserve::structured
