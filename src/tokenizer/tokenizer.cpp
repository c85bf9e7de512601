#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <system_error>

#include "core/error.h"
#include "core/logging.h"
#include "io/gguf.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/text_pipeline.h"

namespace gemmaserve {

namespace fs = std::filesystem;

struct Tokenizer::Impl {
  explicit Impl(TokenizerSpec spec);

  // The piece of `id`; InputError when the id is not a token.
  std::string_view piece(int32_t id) const;
  bool is_byte_token(int32_t id) const {
    return decoder.has_byte_fallback() && Decoder::byte_of_piece(piece(id)).has_value();
  }

  std::string source;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  Decoder decoder;
  AddedVocabulary added;
  BpeModel model;
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;
  std::vector<std::string_view> pieces;  // by id: added-token content, else model piece
  std::vector<bool> present;             // by id: whether the id is a token at all
  std::vector<bool> special;             // by id
};

Tokenizer::Impl::Impl(TokenizerSpec spec)
    : source(spec.source),
      normalizer(std::move(spec.normalizer)),
      pre_tokenizer(std::move(spec.pre_tokenizer)),
      decoder(std::move(spec.decoder)),
      added(std::move(spec.added_tokens), normalizer),
      model(std::move(spec.vocab), spec.merges, std::move(spec.bpe), spec.source),
      prefix_ids(std::move(spec.prefix_ids)),
      suffix_ids(std::move(spec.suffix_ids)),
      bos_id(spec.bos_id),
      eos_ids(std::move(spec.eos_ids)) {
  size_t size = model.pieces().size();
  for (const AddedToken& t : added.tokens()) {
    if (t.id < 0) throw InputError(source + ": added token '" + t.content + "' has a negative id");
    size = std::max(size, static_cast<size_t>(t.id) + 1);
  }
  pieces.assign(size, std::string_view());
  present.assign(size, false);
  special.assign(size, false);
  for (size_t i = 0; i < model.pieces().size(); ++i) {
    pieces[i] = model.pieces()[i];
    present[i] = true;
  }
  for (const AddedToken& t : added.tokens()) {
    const auto i = static_cast<size_t>(t.id);
    pieces[i] = t.content;
    present[i] = true;
    special[i] = special[i] || t.special;
  }
  auto check = [&](int32_t id, const char* what) {
    if (id < 0 || static_cast<size_t>(id) >= size || !present[static_cast<size_t>(id)]) {
      throw InputError(source + ": " + what + " id " + std::to_string(id) + " is not a token");
    }
  };
  for (int32_t id : prefix_ids) check(id, "special token");
  for (int32_t id : suffix_ids) check(id, "special token");
  if (bos_id) check(*bos_id, "bos token");
  for (int32_t id : eos_ids) check(id, "eos token");
}

std::string_view Tokenizer::Impl::piece(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces.size()) {
    throw InputError("token id " + std::to_string(id) + " is out of range (vocabulary size " +
                     std::to_string(pieces.size()) + ")");
  }
  if (!present[static_cast<size_t>(id)]) {
    throw InputError("token id " + std::to_string(id) + " is not in the vocabulary");
  }
  return pieces[static_cast<size_t>(id)];
}

Tokenizer::Tokenizer(TokenizerSpec spec) : impl_(std::make_shared<const Impl>(std::move(spec))) {}

Tokenizer Tokenizer::from_gguf(const GgufFile& gguf) {
  return Tokenizer(tokenizer_spec_from_gguf(gguf));
}

Tokenizer Tokenizer::from_json(const nlohmann::json& tokenizer_json, const nlohmann::json* config,
                               const std::string& source, const std::string& config_source) {
  return Tokenizer(spec_from_hf_json(tokenizer_json, config, source, config_source));
}

std::optional<Tokenizer> Tokenizer::from_model_dir(const fs::path& dir) {
  const fs::path json_path = dir / "tokenizer.json";
  std::error_code ec;
  if (!fs::exists(json_path, ec)) return std::nullopt;
  std::optional<fs::path> config_path = dir / "tokenizer_config.json";
  if (!fs::exists(*config_path, ec)) config_path.reset();
  return Tokenizer(spec_from_hf_json_file(json_path, config_path));
}

Tokenizer Tokenizer::from_path(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::optional<Tokenizer> t = from_model_dir(path);
    if (!t) throw InputError(path.string() + ": no tokenizer.json in this folder");
    return std::move(*t);
  }
  if (!fs::exists(path, ec)) throw InputError(path.string() + ": no such file or directory");
  if (GgufFile::has_gguf_magic(path)) return from_gguf(GgufFile(path));
  return Tokenizer(spec_from_hf_json_file(path, std::nullopt));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special) ids.insert(ids.end(), m.prefix_ids.begin(), m.prefix_ids.end());

  std::vector<AddedVocabulary::Piece> raw_pieces;
  std::vector<AddedVocabulary::Piece> normalized_pieces;
  std::vector<std::string_view> words;
  m.added.split(text, /*normalized_pass=*/false, !parse_special, raw_pieces);
  for (const AddedVocabulary::Piece& p : raw_pieces) {
    if (p.id >= 0) {
      ids.push_back(p.id);
      continue;
    }
    const std::string normalized = m.normalizer.apply(text.substr(p.begin, p.end - p.begin));
    const std::string_view view = normalized;
    normalized_pieces.clear();
    m.added.split(view, /*normalized_pass=*/true, !parse_special, normalized_pieces);
    for (const AddedVocabulary::Piece& q : normalized_pieces) {
      if (q.id >= 0) {
        ids.push_back(q.id);
        continue;
      }
      words.clear();
      m.pre_tokenizer.split(view.substr(q.begin, q.end - q.begin), words);
      for (std::string_view word : words) m.model.tokenize(word, ids);
    }
  }

  if (add_special) ids.insert(ids.end(), m.suffix_ids.begin(), m.suffix_ids.end());
  return ids;
}

std::string Tokenizer::decode_impl(std::span<const int32_t> ids, bool skip_special,
                                   bool raw_bytes) const {
  const Impl& m = *impl_;
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (int32_t id : ids) {
    std::string_view piece = m.piece(id);
    if (skip_special && m.special[static_cast<size_t>(id)]) continue;
    pieces.emplace_back(piece);
  }
  return m.decoder.decode(std::move(pieces), raw_bytes);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  return decode_impl(ids, skip_special, /*raw_bytes=*/false);
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids, bool skip_special) const {
  return decode_impl(ids, skip_special, /*raw_bytes=*/true);
}

std::string_view Tokenizer::id_to_piece(int32_t id) const { return impl_->piece(id); }

std::optional<int32_t> Tokenizer::piece_to_id(std::string_view piece) const {
  if (const AddedToken* t = impl_->added.find_content(piece)) return t->id;
  return impl_->model.piece_to_id(piece);
}

size_t Tokenizer::vocab_size() const { return impl_->pieces.size(); }

bool Tokenizer::contains(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->present.size() &&
         impl_->present[static_cast<size_t>(id)];
}

int32_t Tokenizer::bos_id() const { return impl_->bos_id.value_or(-1); }

const std::vector<int32_t>& Tokenizer::eos_ids() const { return impl_->eos_ids; }

bool Tokenizer::is_special(int32_t id) const {
  return contains(id) && impl_->special[static_cast<size_t>(id)];
}

bool Tokenizer::adds_bos() const {
  return impl_->bos_id && !impl_->prefix_ids.empty() && impl_->prefix_ids.front() == *impl_->bos_id;
}

const std::string& Tokenizer::source() const { return impl_->source; }

bool Tokenizer::streamable_decoder() const { return impl_->decoder.streamable(); }

bool Tokenizer::holds_back(int32_t id) const { return impl_->is_byte_token(id); }

std::optional<std::string_view> Tokenizer::added_content(int32_t id) const {
  const AddedToken* t = impl_->added.find_id(id);
  if (t == nullptr) return std::nullopt;
  return std::string_view(t->content);
}

}  // namespace gemmaserve
