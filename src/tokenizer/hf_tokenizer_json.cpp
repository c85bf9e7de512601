#include "tokenizer/hf_tokenizer_json.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <unordered_map>

#include "core/error.h"
#include "core/python_text.h"
#include "core/utf8.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer_json_tables.h"

namespace gemmaserve {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

// Field access with errors of the form "<file>: 'model.vocab' must be an object".
class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  [[noreturn]] void fail(const std::string& message) const {
    throw InputError(source_ + ": " + message);
  }

  const json& member(const json& obj, const char* key, const std::string& path) const {
    if (!obj.is_object()) fail("'" + path + "' must be an object");
    auto it = obj.find(key);
    if (it == obj.end()) fail("missing field '" + join(path, key) + "'");
    return *it;
  }
  const json* optional_member(const json& obj, const char* key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  std::string string(const json& j, const std::string& path) const {
    if (!j.is_string()) fail("'" + path + "' must be a string");
    return j.get<std::string>();
  }
  bool boolean(const json& obj, const char* key, bool fallback, const std::string& path) const {
    const json* j = optional_member(obj, key);
    if (j == nullptr) return fallback;
    if (!j->is_boolean()) fail("'" + join(path, key) + "' must be true or false");
    return j->get<bool>();
  }
  int64_t integer(const json& j, const std::string& path) const {
    if (!j.is_number_integer()) fail("'" + path + "' must be an integer");
    return j.get<int64_t>();
  }
  std::string type_of(const json& obj, const std::string& path) const {
    return string(member(obj, "type", path), join(path, "type"));
  }
  // A tokenizers Pattern: {"String": "..."}; a Regex pattern is refused by name.
  std::string literal_pattern(const json& obj, const std::string& path,
                              const std::string& component) const {
    const json& pattern = member(obj, "pattern", path);
    if (pattern.is_object() && pattern.contains("String")) {
      return string(pattern["String"], path + ".pattern.String");
    }
    if (pattern.is_object() && pattern.contains("Regex")) {
      fail(component + " with a Regex pattern is not supported (only literal String patterns)");
    }
    fail("'" + path + ".pattern' must be {\"String\": ...}");
  }

  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : path + "." + key;
  }

 private:
  const std::string& source_;
};

void read_normalizer(const Reader& r, const json& j, const std::string& path,
                     std::vector<NormalizerStep>& out) {
  if (j.is_null()) return;
  const std::string type = r.type_of(j, path);
  if (type == "Sequence") {
    const json& list = r.member(j, "normalizers", path);
    if (!list.is_array()) r.fail("'" + path + ".normalizers' must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      read_normalizer(r, list[i], path + ".normalizers[" + std::to_string(i) + "]", out);
    }
  } else if (type == "Replace") {
    out.push_back({NormalizerStep::Kind::kReplace, r.literal_pattern(j, path, "normalizer Replace"),
                   r.string(r.member(j, "content", path), path + ".content")});
  } else if (type == "Prepend") {
    out.push_back({NormalizerStep::Kind::kPrepend, "",
                   r.string(r.member(j, "prepend", path), path + ".prepend")});
  } else {
    r.fail("normalizer type '" + type +
           "' is not supported (supported: Replace, Prepend, Sequence)");
  }
}

SplitBehavior read_behavior(const Reader& r, const json& j, const std::string& path) {
  const std::string name = r.string(r.member(j, "behavior", path), path + ".behavior");
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  r.fail("unknown Split behavior '" + name + "' in '" + path + "'");
}

void read_pre_tokenizer(const Reader& r, const json& j, const std::string& path,
                        std::vector<PreTokenizerStep>& out) {
  if (j.is_null()) return;
  const std::string type = r.type_of(j, path);
  if (type == "Sequence") {
    const json& list = r.member(j, "pretokenizers", path);
    if (!list.is_array()) r.fail("'" + path + ".pretokenizers' must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      read_pre_tokenizer(r, list[i], path + ".pretokenizers[" + std::to_string(i) + "]", out);
    }
  } else if (type == "Split") {
    PreTokenizerStep step;
    step.pattern = r.literal_pattern(j, path, "pre_tokenizer Split");
    if (step.pattern.empty()) r.fail("'" + path + ".pattern' must not be empty");
    step.behavior = read_behavior(r, j, path);
    step.invert = r.boolean(j, "invert", false, path);
    out.push_back(std::move(step));
  } else {
    r.fail("pre_tokenizer type '" + type + "' is not supported (supported: Split, Sequence)");
  }
}

void read_decoder(const Reader& r, const json& j, const std::string& path,
                  std::vector<DecoderStep>& out) {
  const std::string type = r.type_of(j, path);
  if (type == "Sequence") {
    const json& list = r.member(j, "decoders", path);
    if (!list.is_array()) r.fail("'" + path + ".decoders' must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      read_decoder(r, list[i], path + ".decoders[" + std::to_string(i) + "]", out);
    }
  } else if (type == "Replace") {
    DecoderStep step{DecoderStep::Kind::kReplace, r.literal_pattern(j, path, "decoder Replace"),
                     r.string(r.member(j, "content", path), path + ".content"), 0, 0};
    out.push_back(std::move(step));
  } else if (type == "ByteFallback") {
    out.push_back({DecoderStep::Kind::kByteFallback, "", "", 0, 0});
  } else if (type == "Fuse") {
    out.push_back({DecoderStep::Kind::kFuse, "", "", 0, 0});
  } else if (type == "Strip") {
    DecoderStep step{DecoderStep::Kind::kStrip, "",
                     r.string(r.member(j, "content", path), path + ".content"), 0, 0};
    if (step.content.empty() || utf8::sequence_length(step.content, 0) != step.content.size()) {
      r.fail("'" + path + ".content' must be a single character");
    }
    int64_t start = r.integer(r.member(j, "start", path), path + ".start");
    int64_t stop = r.integer(r.member(j, "stop", path), path + ".stop");
    if (start < 0 || stop < 0) r.fail("'" + path + "' start/stop must not be negative");
    step.start = static_cast<size_t>(start);
    step.stop = static_cast<size_t>(stop);
    out.push_back(std::move(step));
  } else {
    r.fail("decoder type '" + type +
           "' is not supported (supported: Replace, ByteFallback, Fuse, Strip, Sequence)");
  }
}

// Resolves a vocabulary piece to its id (the first, as the pieces of a JSON object are unique).
class IdLookup {
 public:
  explicit IdLookup(const TokenizerSpec& spec) {
    vocab_.reserve(spec.vocab.size());
    for (size_t i = 0; i < spec.vocab.size(); ++i) {
      vocab_.emplace(spec.vocab[i], static_cast<int32_t>(i));
    }
  }
  std::optional<int32_t> find_vocab(std::string_view content) const {
    auto it = vocab_.find(content);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::unordered_map<std::string_view, int32_t> vocab_;
};

// A token's content to its id, added tokens first; a scan, as it runs a few times per file.
std::optional<int32_t> find_token_id(const TokenizerSpec& spec, std::string_view content) {
  for (const AddedToken& t : spec.added_tokens) {
    if (t.content == content) return t.id;
  }
  auto it = std::find(spec.vocab.begin(), spec.vocab.end(), content);
  if (it == spec.vocab.end()) return std::nullopt;
  return static_cast<int32_t>(it - spec.vocab.begin());
}

// `tables`, when given, hold model.vocab and model.merges already read (they are empty in `model`).
void read_model(const Reader& r, const json& model, TokenizerSpec& spec,
                TokenizerJsonTables* tables) {
  const std::string path = "model";
  if (!model.is_object()) r.fail("'model' must be an object");
  if (const json* type = r.optional_member(model, "type")) {
    const std::string name = r.string(*type, "model.type");
    if (name != "BPE") r.fail("model type '" + name + "' is not supported (only BPE)");
  }
  if (const json* dropout = r.optional_member(model, "dropout")) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      r.fail("'model.dropout' is not supported (BPE dropout must be null)");
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* v = r.optional_member(model, key)) {
      if (!v->is_string() || !v->get<std::string>().empty()) {
        r.fail("'model." + std::string(key) + "' is not supported (must be null)");
      }
    }
  }
  if (const json* unk = r.optional_member(model, "unk_token")) {
    spec.bpe.unk_token = r.string(*unk, "model.unk_token");
  }
  spec.bpe.fuse_unk = r.boolean(model, "fuse_unk", false, path);
  spec.bpe.byte_fallback = r.boolean(model, "byte_fallback", false, path);
  spec.bpe.ignore_merges = r.boolean(model, "ignore_merges", false, path);
  if (tables != nullptr) {
    spec.vocab = std::move(tables->vocab);
    spec.merges = std::move(tables->merges);
    return;
  }

  const json& vocab = r.member(model, "vocab", path);
  if (!vocab.is_object()) r.fail("'model.vocab' must be an object of piece: id");
  spec.vocab.assign(vocab.size(), std::string());
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& [piece, id_json] : vocab.items()) {
    int64_t id = r.integer(id_json, "model.vocab[\"" + piece + "\"]");
    if (id < 0 || id >= static_cast<int64_t>(vocab.size()) || seen[static_cast<size_t>(id)]) {
      r.fail("'model.vocab' ids must be 0..N-1 without gaps or repeats (piece '" + piece +
             "' has id " + std::to_string(id) + ")");
    }
    seen[static_cast<size_t>(id)] = true;
    spec.vocab[static_cast<size_t>(id)] = piece;
  }

  const json& merges = r.member(model, "merges", path);
  if (!merges.is_array()) r.fail("'model.merges' must be an array");
  IdLookup ids(spec);
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string where = "model.merges[" + std::to_string(i) + "]";
    std::string a;
    std::string b;
    if (m.is_string()) {
      // The legacy "a b" form: exactly one space, as tokenizers requires.
      const std::string s = m.get<std::string>();
      size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        r.fail("'" + where + "' must be two pieces separated by one space");
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = r.string(m[0], where + "[0]");
      b = r.string(m[1], where + "[1]");
    } else {
      r.fail("'" + where + "' must be \"a b\" or [\"a\", \"b\"]");
    }
    auto ia = ids.find_vocab(a);
    auto ib = ids.find_vocab(b);
    if (!ia || !ib)
      r.fail("'" + where + "' uses '" + (ia ? b : a) + "', which is not in model.vocab");
    spec.merges.emplace_back(*ia, *ib);
  }
}

AddedToken read_added_token(const Reader& r, const json& j, const std::string& path, int64_t id) {
  AddedToken t;
  t.id = static_cast<int32_t>(id);
  t.content = r.string(r.member(j, "content", path), path + ".content");
  t.special = r.boolean(j, "special", false, path);
  t.normalized = r.boolean(j, "normalized", !t.special, path);
  t.lstrip = r.boolean(j, "lstrip", false, path);
  t.rstrip = r.boolean(j, "rstrip", false, path);
  if (r.boolean(j, "single_word", false, path)) {
    r.fail("added token '" + t.content + "' uses single_word, which is not supported");
  }
  if (id < 0 || id > INT32_MAX) r.fail("'" + path + ".id' is out of range");
  return t;
}

void read_post_processor(const Reader& r, const json& j, TokenizerSpec& spec) {
  const std::string path = "post_processor";
  const std::string type = r.type_of(j, path);
  if (type != "TemplateProcessing") {
    r.fail("post_processor type '" + type + "' is not supported (only TemplateProcessing)");
  }
  const json& single = r.member(j, "single", path);
  const json& specials = r.member(j, "special_tokens", path);
  if (!single.is_array()) r.fail("'post_processor.single' must be an array");
  bool after_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string where = "post_processor.single[" + std::to_string(i) + "]";
    const json& item = single[i];
    if (item.is_object() && item.contains("Sequence")) {
      after_sequence = true;
      continue;
    }
    const json& st = r.member(item, "SpecialToken", where);
    const std::string name = r.string(r.member(st, "id", where + ".SpecialToken"), where);
    const json& entry = r.member(specials, name.c_str(), "post_processor.special_tokens");
    const json& ids = r.member(entry, "ids", "post_processor.special_tokens." + name);
    if (!ids.is_array())
      r.fail("'post_processor.special_tokens." + name + ".ids' must be an array");
    for (const json& id : ids) {
      int64_t v = r.integer(id, "post_processor.special_tokens." + name + ".ids");
      (after_sequence ? spec.suffix_ids : spec.prefix_ids).push_back(static_cast<int32_t>(v));
    }
  }
}

// A special token named in tokenizer_config.json: "<bos>" or {"content": "<bos>", ...}.
std::optional<std::string> config_token(const Reader& r, const json& config, const char* key) {
  const json* j = r.optional_member(config, key);
  if (j == nullptr) return std::nullopt;
  if (j->is_object()) return r.string(r.member(*j, "content", key), std::string(key) + ".content");
  return r.string(*j, key);
}

void apply_config(const Reader& r, const json& config, TokenizerSpec& spec) {
  if (!config.is_object()) r.fail("tokenizer_config.json must be an object");
  if (const json* decoder = r.optional_member(config, "added_tokens_decoder")) {
    if (!decoder->is_object()) r.fail("'added_tokens_decoder' must be an object");
    for (const auto& [key, entry] : decoder->items()) {
      int64_t id = 0;
      try {
        id = std::stoll(key);
      } catch (const std::exception&) {
        r.fail("'added_tokens_decoder' key '" + key + "' is not a token id");
      }
      AddedToken t = read_added_token(r, entry, "added_tokens_decoder." + key, id);
      auto it = std::find_if(spec.added_tokens.begin(), spec.added_tokens.end(),
                             [&](const AddedToken& a) { return a.id == t.id; });
      if (it == spec.added_tokens.end()) {
        spec.added_tokens.push_back(std::move(t));
      } else {
        it->special = it->special || t.special;
      }
    }
  }
  auto resolve = [&](const char* key) -> std::optional<int32_t> {
    auto content = config_token(r, config, key);
    if (!content) return std::nullopt;
    auto id = find_token_id(spec, *content);
    if (!id) r.fail("'" + std::string(key) + "' names '" + *content + "', which is not a token");
    return id;
  };
  if (auto bos = resolve("bos_token")) spec.bos_id = bos;
  if (auto eos = resolve("eos_token")) spec.eos_ids = {*eos};
  if (auto pad = resolve("pad_token")) spec.pad_id = pad;
  // transformers rebuilds the post-processor from these flags when the config has them.
  const json* add_bos = r.optional_member(config, "add_bos_token");
  const json* add_eos = r.optional_member(config, "add_eos_token");
  if (add_bos != nullptr || add_eos != nullptr) {
    spec.prefix_ids.clear();
    spec.suffix_ids.clear();
    if (r.boolean(config, "add_bos_token", false, "")) {
      if (!spec.bos_id) r.fail("'add_bos_token' is true but there is no bos_token");
      spec.prefix_ids.push_back(*spec.bos_id);
    }
    if (r.boolean(config, "add_eos_token", false, "")) {
      if (spec.eos_ids.empty()) r.fail("'add_eos_token' is true but there is no eos_token");
      spec.suffix_ids.push_back(spec.eos_ids.front());
    }
  }
}

TokenizerSpec spec_from_root(const json& root, const json* config, const std::string& source,
                             const std::string& config_source, TokenizerJsonTables* tables) {
  Reader r(source);
  TokenizerSpec spec;
  spec.source = source;
  if (!root.is_object()) r.fail("tokenizer.json must be a JSON object");
  read_model(r, r.member(root, "model", ""), spec, tables);

  if (const json* added = r.optional_member(root, "added_tokens")) {
    if (!added->is_array()) r.fail("'added_tokens' must be an array");
    for (size_t i = 0; i < added->size(); ++i) {
      const std::string path = "added_tokens[" + std::to_string(i) + "]";
      const json& j = (*added)[i];
      spec.added_tokens.push_back(
          read_added_token(r, j, path, r.integer(r.member(j, "id", path), path + ".id")));
    }
  }
  if (const json* n = r.optional_member(root, "normalizer")) {
    read_normalizer(r, *n, "normalizer", spec.normalizer);
  }
  if (const json* p = r.optional_member(root, "pre_tokenizer")) {
    read_pre_tokenizer(r, *p, "pre_tokenizer", spec.pre_tokenizer);
  }
  if (const json* d = r.optional_member(root, "decoder")) {
    spec.decoder.emplace();
    read_decoder(r, *d, "decoder", *spec.decoder);
  }
  if (const json* p = r.optional_member(root, "post_processor")) read_post_processor(r, *p, spec);

  // Without a config, BOS is what the post-processor puts first, else a special "<bos>"; EOS is a
  // special "<eos>" (the names every Gemma tokenizer uses).
  auto special_named = [&](std::string_view name) -> std::optional<int32_t> {
    for (const AddedToken& t : spec.added_tokens) {
      if (t.special && t.content == name) return t.id;
    }
    return std::nullopt;
  };
  spec.bos_id = spec.prefix_ids.empty() ? special_named("<bos>") : spec.prefix_ids.front();
  if (auto eos = special_named("<eos>")) spec.eos_ids = {*eos};
  spec.pad_id = special_named("<pad>");
  if (config != nullptr) apply_config(Reader(config_source), *config, spec);
  return spec;
}

}  // namespace

TokenizerSpec spec_from_hf_json(const json& root, const json* config, const std::string& source,
                                const std::string& config_source) {
  return spec_from_root(root, config, source, config_source, nullptr);
}

namespace {

// JSON string literal with UTF-8 kept as is (HF writes tokenizer.json unescaped).
void append_json_string(std::string& out, std::string_view s, const std::string& source) {
  if (!utf8::is_valid(s)) {
    throw InputError(source + ": token '" + std::string(s) + "' is not valid UTF-8");
  }
  out += python_json_quote(s);
}

ordered_json pattern_json(const std::string& s) { return ordered_json{{"String", s}}; }

ordered_json normalizer_json(const NormalizerStep& step) {
  if (step.kind == NormalizerStep::Kind::kPrepend) {
    return ordered_json{{"type", "Prepend"}, {"prepend", step.content}};
  }
  return ordered_json{
      {"type", "Replace"}, {"pattern", pattern_json(step.pattern)}, {"content", step.content}};
}

std::string_view behavior_name(SplitBehavior b) {
  switch (b) {
    case SplitBehavior::kRemoved:
      return "Removed";
    case SplitBehavior::kIsolated:
      return "Isolated";
    case SplitBehavior::kMergedWithPrevious:
      return "MergedWithPrevious";
    case SplitBehavior::kMergedWithNext:
      return "MergedWithNext";
    case SplitBehavior::kContiguous:
      return "Contiguous";
  }
  return "Isolated";
}

ordered_json pre_tokenizer_json(const PreTokenizerStep& step) {
  return ordered_json{{"type", "Split"},
                      {"pattern", pattern_json(step.pattern)},
                      {"behavior", behavior_name(step.behavior)},
                      {"invert", step.invert}};
}

ordered_json decoder_json(const DecoderStep& step) {
  switch (step.kind) {
    case DecoderStep::Kind::kReplace:
      return ordered_json{
          {"type", "Replace"}, {"pattern", pattern_json(step.pattern)}, {"content", step.content}};
    case DecoderStep::Kind::kByteFallback:
      return ordered_json{{"type", "ByteFallback"}};
    case DecoderStep::Kind::kFuse:
      return ordered_json{{"type", "Fuse"}};
    case DecoderStep::Kind::kStrip:
      return ordered_json{
          {"type", "Strip"}, {"content", step.content}, {"start", step.start}, {"stop", step.stop}};
  }
  return nullptr;
}

// One component, a Sequence of several, or null for none (how tokenizers serializes them).
template <typename Step, typename ToJson>
ordered_json component_json(const std::vector<Step>& steps, const char* list_key, ToJson to_json) {
  if (steps.empty()) return nullptr;
  if (steps.size() == 1) return to_json(steps.front());
  ordered_json list = ordered_json::array();
  for (const Step& s : steps) list.push_back(to_json(s));
  return ordered_json{{"type", "Sequence"}, {list_key, list}};
}

std::string content_of(const TokenizerSpec& spec, int32_t id) {
  for (const AddedToken& t : spec.added_tokens) {
    if (t.id == id) return t.content;
  }
  if (id >= 0 && static_cast<size_t>(id) < spec.vocab.size())
    return spec.vocab[static_cast<size_t>(id)];
  throw InputError(spec.source + ": special token id " + std::to_string(id) +
                   " is not in the vocabulary");
}

ordered_json post_processor_json(const TokenizerSpec& spec) {
  if (spec.prefix_ids.empty() && spec.suffix_ids.empty()) return nullptr;
  ordered_json special_tokens = ordered_json::object();
  auto special = [&](int32_t id, int type_id) {
    const std::string name = content_of(spec, id);
    special_tokens[name] = ordered_json{{"id", name}, {"ids", {id}}, {"tokens", {name}}};
    return ordered_json{{"SpecialToken", {{"id", name}, {"type_id", type_id}}}};
  };
  auto sequence = [](const char* name, int type_id) {
    return ordered_json{{"Sequence", {{"id", name}, {"type_id", type_id}}}};
  };
  ordered_json single = ordered_json::array();
  ordered_json pair = ordered_json::array();
  for (int32_t id : spec.prefix_ids) single.push_back(special(id, 0));
  single.push_back(sequence("A", 0));
  for (int32_t id : spec.suffix_ids) single.push_back(special(id, 0));
  pair = single;
  for (int32_t id : spec.prefix_ids) pair.push_back(special(id, 1));
  pair.push_back(sequence("B", 1));
  for (int32_t id : spec.suffix_ids) pair.push_back(special(id, 1));
  return ordered_json{{"type", "TemplateProcessing"},
                      {"single", single},
                      {"pair", pair},
                      {"special_tokens", special_tokens}};
}

}  // namespace

TokenizerSpec spec_from_hf_json_file(const std::filesystem::path& path,
                                     const std::optional<std::filesystem::path>& config_path) {
  const std::string source = path.string();
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw InputError(source + ": cannot open (missing file?)");
  std::string text(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  if (!in.read(text.data(), static_cast<std::streamsize>(text.size()))) {
    throw InputError(source + ": cannot read");
  }
  json root;
  std::optional<TokenizerJsonTables> tables = scan_tokenizer_json_tables(text);
  if (tables) {
    // The scan checked the rest's syntax too; anything nlohmann still refuses goes the slow way.
    root = json::parse(tables->rest, nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) tables.reset();
  }
  if (!tables) {
    try {
      root = json::parse(text);
    } catch (const json::exception& e) {
      throw InputError(source + ": malformed JSON: " + e.what());
    }
  }
  std::optional<json> config;
  if (config_path) config = read_json_file(*config_path);
  return spec_from_root(root, config ? &*config : nullptr, source,
                        config_path ? config_path->string() : std::string(),
                        tables ? &*tables : nullptr);
}

std::string to_hf_tokenizer_json(const TokenizerSpec& spec) {
  std::string out;
  out.reserve(spec.vocab.size() * 24 + spec.merges.size() * 24);
  out += "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n";
  out += "  \"added_tokens\": [";
  std::vector<AddedToken> added = spec.added_tokens;
  std::stable_sort(added.begin(), added.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& t = added[i];
    out += i == 0 ? "\n    {\"id\": " : ",\n    {\"id\": ";
    out += std::to_string(t.id) + ", \"content\": ";
    append_json_string(out, t.content, spec.source);
    out += std::string(", \"single_word\": false, \"lstrip\": ") + (t.lstrip ? "true" : "false") +
           ", \"rstrip\": " + (t.rstrip ? "true" : "false") +
           ", \"normalized\": " + (t.normalized ? "true" : "false") +
           ", \"special\": " + (t.special ? "true" : "false") + "}";
  }
  out += added.empty() ? "],\n" : "\n  ],\n";
  out += "  \"normalizer\": " +
         component_json(spec.normalizer, "normalizers", normalizer_json).dump() + ",\n";
  out += "  \"pre_tokenizer\": " +
         component_json(spec.pre_tokenizer, "pretokenizers", pre_tokenizer_json).dump() + ",\n";
  out += "  \"post_processor\": " + post_processor_json(spec).dump() + ",\n";
  if (!spec.decoder) {
    out += "  \"decoder\": null,\n";
  } else if (spec.decoder->size() == 1) {
    out += "  \"decoder\": " + decoder_json(spec.decoder->front()).dump() + ",\n";
  } else {
    ordered_json list = ordered_json::array();
    for (const DecoderStep& s : *spec.decoder) list.push_back(decoder_json(s));
    out +=
        "  \"decoder\": " + ordered_json{{"type", "Sequence"}, {"decoders", list}}.dump() + ",\n";
  }

  out += "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": ";
  if (spec.bpe.unk_token) {
    append_json_string(out, *spec.bpe.unk_token, spec.source);
  } else {
    out += "null";
  }
  out += ",\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n";
  out += std::string("    \"fuse_unk\": ") + (spec.bpe.fuse_unk ? "true" : "false") + ",\n";
  out +=
      std::string("    \"byte_fallback\": ") + (spec.bpe.byte_fallback ? "true" : "false") + ",\n";
  out +=
      std::string("    \"ignore_merges\": ") + (spec.bpe.ignore_merges ? "true" : "false") + ",\n";
  out += "    \"vocab\": {";
  for (size_t i = 0; i < spec.vocab.size(); ++i) {
    out += i == 0 ? "\n      " : ",\n      ";
    append_json_string(out, spec.vocab[i], spec.source);
    out += ": " + std::to_string(i);
  }
  out += "\n    },\n    \"merges\": [";
  for (size_t i = 0; i < spec.merges.size(); ++i) {
    out += i == 0 ? "\n      [" : ",\n      [";
    append_json_string(out, spec.vocab[static_cast<size_t>(spec.merges[i].first)], spec.source);
    out += ", ";
    append_json_string(out, spec.vocab[static_cast<size_t>(spec.merges[i].second)], spec.source);
    out += "]";
  }
  out += "\n    ]\n  }\n}\n";
  return out;
}

std::string to_hf_tokenizer_config_json(const TokenizerSpec& spec,
                                        const std::optional<std::string>& chat_template) {
  ordered_json config = ordered_json::object();
  const bool add_bos =
      !spec.prefix_ids.empty() && spec.bos_id && spec.prefix_ids.front() == *spec.bos_id;
  config["add_bos_token"] = add_bos;
  config["add_eos_token"] = !spec.suffix_ids.empty();
  ordered_json decoder = ordered_json::object();
  std::vector<AddedToken> added = spec.added_tokens;
  std::stable_sort(added.begin(), added.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  for (const AddedToken& t : added) {
    decoder[std::to_string(t.id)] =
        ordered_json{{"content", t.content}, {"lstrip", t.lstrip},   {"normalized", t.normalized},
                     {"rstrip", t.rstrip},   {"single_word", false}, {"special", t.special}};
  }
  config["added_tokens_decoder"] = decoder;
  if (spec.bos_id) config["bos_token"] = content_of(spec, *spec.bos_id);
  if (!spec.eos_ids.empty()) config["eos_token"] = content_of(spec, spec.eos_ids.front());
  if (spec.pad_id) config["pad_token"] = content_of(spec, *spec.pad_id);
  if (spec.bpe.unk_token) config["unk_token"] = *spec.bpe.unk_token;
  config["clean_up_tokenization_spaces"] = false;
  config["tokenizer_class"] = "GemmaTokenizer";
  if (chat_template) config["chat_template"] = *chat_template;
  try {
    return config.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    throw InputError(spec.source + ": cannot write tokenizer_config.json: " + e.what());
  }
}

}  // namespace gemmaserve
