#include "tokenizer/gguf_vocab.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/piece_index.h"
#include "tokenizer/text_pipeline.h"

namespace gemmaserve {

namespace {

std::optional<int32_t> optional_id(const GgufFile& gguf, const char* key, size_t n_tokens) {
  const GgufValue* v = gguf.find(key);
  if (v == nullptr) return std::nullopt;
  int64_t id = v->as_int();
  if (id < 0 || static_cast<size_t>(id) >= n_tokens) {
    // llama.cpp writes -1 (as uint32 0xFFFFFFFF) for "none"; anything else out of range is bad.
    if (id == -1 || id == int64_t{0xFFFFFFFF}) return std::nullopt;
    throw InputError(gguf.path().string() + ": " + key + " " + std::to_string(id) +
                     " is outside the vocabulary of " + std::to_string(n_tokens) + " tokens");
  }
  return static_cast<int32_t>(id);
}

bool optional_bool(const GgufFile& gguf, const char* key, bool fallback) {
  const GgufValue* v = gguf.find(key);
  return v == nullptr ? fallback : v->as_bool();
}

}  // namespace

TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& gguf) {
  const std::string file = gguf.path().string();
  TokenizerSpec spec;
  spec.source = file;

  const std::string_view model = gguf.get("tokenizer.ggml.model").as_string();
  if (model != "gemma4") {
    throw InputError(file + ": tokenizer.ggml.model '" + std::string(model) +
                     "' is not supported (only 'gemma4' BPE vocabularies)");
  }
  const std::vector<std::string_view> tokens = gguf.get("tokenizer.ggml.tokens").as_string_array();
  std::vector<int64_t> types(tokens.size(), static_cast<int64_t>(GgufTokenType::kNormal));
  if (const GgufValue* t = gguf.find("tokenizer.ggml.token_type")) {
    types = t->as_int_array();
    if (types.size() != tokens.size()) {
      throw InputError(file + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                       " entries but tokenizer.ggml.tokens has " + std::to_string(tokens.size()));
    }
  }

  spec.vocab.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!utf8::is_valid(tokens[i])) {
      throw InputError(file + ": tokenizer.ggml.tokens[" + std::to_string(i) +
                       "] is not valid UTF-8");
    }
    spec.vocab.emplace_back(tokens[i]);
    const auto type = static_cast<GgufTokenType>(types[i]);
    if (type == GgufTokenType::kControl || type == GgufTokenType::kUnknown ||
        type == GgufTokenType::kUserDefined) {
      AddedToken t;
      t.id = static_cast<int32_t>(i);
      t.content = std::string(tokens[i]);
      t.special = type != GgufTokenType::kUserDefined;
      t.normalized = false;
      spec.added_tokens.push_back(std::move(t));
    }
  }

  // The flat index with batched lookups, as for tokenizer.json: a node map made loading slow.
  PieceIndex ids(spec.vocab);
  for (size_t i = 0; i < spec.vocab.size(); ++i) ids.insert(static_cast<int32_t>(i));
  const std::vector<std::string_view> merges = gguf.get("tokenizer.ggml.merges").as_string_array();
  std::vector<std::string_view> halves;
  halves.reserve(2 * merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    // "a b": pieces never contain a space (it is escaped to ▁), so the first one splits them.
    const std::string_view m = merges[i];
    const size_t space = m.find(' ', 1);
    if (space == std::string_view::npos || space + 1 >= m.size()) {
      throw InputError(file + ": tokenizer.ggml.merges[" + std::to_string(i) + "] '" +
                       std::string(m) + "' is not two pieces separated by a space");
    }
    halves.push_back(m.substr(0, space));
    halves.push_back(m.substr(space + 1));
  }
  std::vector<int32_t> found(halves.size());
  ids.find_all(halves, found);
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    // A merge of a piece the vocabulary lacks can never apply (llama.cpp keeps it unused);
    // trimmed vocabularies carry such merges.
    if (found[2 * i] < 0 || found[2 * i + 1] < 0) continue;
    spec.merges.emplace_back(found[2 * i], found[2 * i + 1]);
  }

  spec.bpe.byte_fallback = true;
  spec.bpe.fuse_unk = true;
  const auto unk = optional_id(gguf, "tokenizer.ggml.unknown_token_id", tokens.size());
  if (unk) {
    spec.bpe.unk_token = spec.vocab[static_cast<size_t>(*unk)];
  } else if (ids.find("<unk>") >= 0) {
    spec.bpe.unk_token = "<unk>";
  }
  spec.normalizer = gemma_normalizer();
  spec.pre_tokenizer = gemma_pre_tokenizer();
  spec.decoder = gemma_decoder();

  spec.bos_id = optional_id(gguf, "tokenizer.ggml.bos_token_id", tokens.size());
  if (auto eos = optional_id(gguf, "tokenizer.ggml.eos_token_id", tokens.size())) {
    spec.eos_ids.push_back(*eos);
  }
  if (auto eot = optional_id(gguf, "tokenizer.ggml.eot_token_id", tokens.size())) {
    if (spec.eos_ids.empty() || spec.eos_ids.front() != *eot) spec.eos_ids.push_back(*eot);
  }
  spec.pad_id = optional_id(gguf, "tokenizer.ggml.padding_token_id", tokens.size());
  // GemmaTokenizer defaults: add <bos>, no <eos>.
  if (optional_bool(gguf, "tokenizer.ggml.add_bos_token", true) && spec.bos_id) {
    spec.prefix_ids.push_back(*spec.bos_id);
  }
  if (optional_bool(gguf, "tokenizer.ggml.add_eos_token", false) && !spec.eos_ids.empty()) {
    spec.suffix_ids.push_back(spec.eos_ids.front());
  }
  return spec;
}

std::optional<std::string> gguf_chat_template(const GgufFile& gguf) {
  const GgufValue* v = gguf.find("tokenizer.chat_template");
  if (v == nullptr) return std::nullopt;
  return std::string(v->as_string());
}

namespace {

// Markers convert_hf_to_gguf always makes USER_DEFINED so that llama.cpp renders them for its
// chat parsers.
constexpr std::array<std::string_view, 7> kVisibleMarkers = {
    "<|channel>",       "<channel|>",       "<|tool_call>", "<tool_call|>",
    "<|tool_response>", "<tool_response|>", "<|\"|>"};

}  // namespace

void add_gguf_vocab(const TokenizerSpec& spec, const GgufVocabExtras& extras, GgufMetadata& out) {
  size_t n = spec.vocab.size();
  for (const AddedToken& t : spec.added_tokens) n = std::max(n, static_cast<size_t>(t.id) + 1);
  std::vector<std::string> tokens(n);
  std::vector<int32_t> types(n, static_cast<int32_t>(GgufTokenType::kNormal));
  std::vector<bool> covered(n, false);
  for (size_t i = 0; i < spec.vocab.size(); ++i) {
    tokens[i] = spec.vocab[i];
    covered[i] = true;
    if (Decoder::byte_of_piece(tokens[i])) types[i] = static_cast<int32_t>(GgufTokenType::kByte);
  }
  for (const AddedToken& t : spec.added_tokens) {
    const auto i = static_cast<size_t>(t.id);
    tokens[i] = t.content;
    covered[i] = true;
    types[i] =
        static_cast<int32_t>(t.special ? GgufTokenType::kControl : GgufTokenType::kUserDefined);
  }
  for (size_t i = 0; i < n; ++i) {
    if (!covered[i]) {
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = static_cast<int32_t>(GgufTokenType::kUnused);
    } else if (std::find(kVisibleMarkers.begin(), kVisibleMarkers.end(), tokens[i]) !=
               kVisibleMarkers.end()) {
      types[i] = static_cast<int32_t>(GgufTokenType::kUserDefined);
    }
  }
  std::vector<std::string> merges;
  merges.reserve(spec.merges.size());
  for (const auto& [a, b] : spec.merges) {
    merges.push_back(tokens.at(static_cast<size_t>(a)) + " " + tokens.at(static_cast<size_t>(b)));
  }
  out.set_string("tokenizer.ggml.model", "gemma4");
  out.set_array("tokenizer.ggml.tokens", GgufArray::strings(tokens));
  out.set_array("tokenizer.ggml.scores", GgufArray::numbers(std::vector<float>(n, -1000.0f)));
  out.set_array("tokenizer.ggml.token_type", GgufArray::numbers(types));
  out.set_array("tokenizer.ggml.merges", GgufArray::strings(merges));
  auto id_key = [&](const char* key, std::optional<int32_t> id) {
    if (id) out.set_uint32(key, static_cast<uint32_t>(*id));
  };
  id_key("tokenizer.ggml.bos_token_id", spec.bos_id);
  id_key("tokenizer.ggml.eos_token_id",
         spec.eos_ids.empty() ? std::nullopt : std::optional(spec.eos_ids.front()));
  std::optional<int32_t> unk;
  if (spec.bpe.unk_token) {
    for (size_t i = 0; i < n && !unk; ++i) {
      if (tokens[i] == *spec.bpe.unk_token) unk = static_cast<int32_t>(i);
    }
  }
  id_key("tokenizer.ggml.unknown_token_id", unk);
  id_key("tokenizer.ggml.padding_token_id", spec.pad_id);
  id_key("tokenizer.ggml.mask_token_id", extras.mask_id);
  out.set_bool("tokenizer.ggml.add_bos_token",
               spec.bos_id && !spec.prefix_ids.empty() && spec.prefix_ids.front() == *spec.bos_id);
  out.set_bool("tokenizer.ggml.add_eos_token", !spec.suffix_ids.empty());
  if (extras.chat_template) out.set_string("tokenizer.chat_template", *extras.chat_template);
  out.set_bool("tokenizer.ggml.add_space_prefix", false);
}

}  // namespace gemmaserve
