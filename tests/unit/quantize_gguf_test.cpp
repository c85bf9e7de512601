// `gemmaserve quantize --format gguf` (model/gemma4_gguf_writer.h): the GGUF loads as the same
// model as the quantized safetensors folder (same tensors, same kernels: bit-identical logits and
// image soft tokens), its metadata, tensors and tokenizer are what llama.cpp's converter writes
// for the same checkpoint (../shared/fixtures/gguf), the real Gemma 4 vocabulary round-trips,
// and bad outputs are refused with their reason.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>

#include "gemma4_golden_harness.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "model/weights.h"
#include "test_support.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using testing::cli_binary;
using testing::run_command;

// A golden tiny model with the fixtures' 512-id vocabulary (tests/data/gguf_writer/tiny-vocab,
// exported from them), in a folder named as the converter's files name the model.
fs::path tiny_with_vocab(const fs::path& tmp, const std::string& model) {
  const fs::path dir = tmp / ("gemma4-tiny-" + model);
  fs::create_directories(dir);
  for (const fs::path& from : {golden::golden_dir() / "models" / model,
                               testing::source_dir() / "tests/data/gguf_writer/tiny-vocab"}) {
    for (const auto& e : fs::directory_iterator(from))
      fs::copy_file(e.path(), dir / e.path().filename());
  }
  return dir;
}

testing::CommandResult quantize(const std::string& args) {
  return run_command(cli_binary().string() + " quantize " + args + " 2>&1");
}

size_t matrix_bytes(const WeightMatrix& m) {
  return static_cast<size_t>(m.rows) * dtype_row_bytes(m.dtype, m.cols);
}

// The same prompt through both models: every position's logits bit for bit.
void expect_same_logits(Gemma4Model& a, Gemma4Model& b, const std::vector<int32_t>& prompt) {
  std::vector<float> logits[2];
  Gemma4Model* models[2] = {&a, &b};
  for (int i = 0; i < 2; ++i) {
    golden::PagedRunner runner(*models[i], 16, 256);
    logits[i] = runner.step1(runner.add_sequence(), prompt, LogitsWanted::kAll).logits;
  }
  ASSERT_FALSE(logits[0].empty());
  ASSERT_EQ(logits[0].size(), logits[1].size());
  EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0);
}

TEST(QuantizeGguf, LoadsBitIdenticalToTheQuantizedSafetensorsFolder) {
  testing::TempDir tmp;
  for (const std::string m : {"dense", "moe", "keqv", "vision"}) {
    const fs::path in = tiny_with_vocab(tmp.path(), m);
    const std::vector<int32_t> prompt =
        golden::load_ref(golden::golden_dir() / "ref" / (m + ".json")).cases.at(1).prompt;
    for (const std::string type : {"q8_0", "q4_0", "q4_k"}) {
      SCOPED_TRACE(m + " " + type);
      const fs::path folder = tmp.path() / (m + "-" + type),
                     gguf = tmp.path() / (m + "-" + type + "-gguf");
      auto r = quantize(in.string() + " " + folder.string() + " --type " + type);
      ASSERT_EQ(r.exit_code, 0) << r.out;
      r = quantize(in.string() + " " + gguf.string() + " --format gguf --type " + type);
      ASSERT_EQ(r.exit_code, 0) << r.out;
      // A folder output gets "<IN_DIR name>-<TYPE>.gguf" and, with a tower, its mmproj.
      std::string upper = type;
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      const fs::path model_file = gguf / ("gemma4-tiny-" + m + "-" + upper + ".gguf");
      EXPECT_TRUE(fs::exists(model_file));
      EXPECT_EQ(fs::exists(gguf / ("mmproj-" + model_file.filename().string())), m == "vision");

      auto from_folder = golden::load_model(folder, 2);
      auto from_gguf = golden::load_model(gguf, 2);  // the folder's model GGUF and its mmproj
      const ModelWeights &a = from_folder->weights(), &b = from_gguf->weights();
      for (auto [x, y] : {std::pair{&a.embed_tokens, &b.embed_tokens},
                          {&a.layers[0].q_proj, &b.layers[0].q_proj},
                          {&a.layers[1].down_proj, &b.layers[1].down_proj},
                          {&a.layers[1].experts_gate_up, &b.layers[1].experts_gate_up}}) {
        if (!*x) continue;
        ASSERT_EQ(x->dtype, y->dtype) << x->name;
        ASSERT_EQ(matrix_bytes(*x), matrix_bytes(*y));
        EXPECT_EQ(std::memcmp(x->data, y->data, matrix_bytes(*x)), 0) << x->name;
      }
      expect_same_logits(*from_folder, *from_gguf, prompt);
      if (m != "vision") continue;
      // Both formats keep the vision tower quantized, as --quantization does at load.
      const DType want = type == "q8_0" ? DType::kQ8_0 : DType::kQ4_0;  // rows of 32: Q4_K -> Q4_0
      EXPECT_EQ(a.vision.layers[0].q_proj.w.dtype, want);
      EXPECT_EQ(b.vision.layers[0].q_proj.w.dtype, want);
      EXPECT_EQ(a.vision.embedding_projection.dtype, want);
      EXPECT_EQ(b.vision.embedding_projection.dtype, want);
      const VisionConfig& v = *from_folder->config().vision;
      const int side = 8, patch = 3 * v.patch_size * v.patch_size;
      std::vector<float> pixels(static_cast<size_t>(side * side * patch));
      for (size_t i = 0; i < pixels.size(); ++i)
        pixels[i] = static_cast<float>((i * 37) % 101) / 100;
      std::vector<int32_t> positions;
      for (int y = 0; y < side; ++y) {
        for (int x = 0; x < side; ++x) positions.insert(positions.end(), {x, y});
      }
      std::vector<float> soft[2];
      from_folder->encode_image({pixels, positions}, &soft[0]);
      from_gguf->encode_image({pixels, positions}, &soft[1]);
      ASSERT_FALSE(soft[0].empty());
      ASSERT_EQ(soft[0].size(), soft[1].size());
      EXPECT_EQ(std::memcmp(soft[0].data(), soft[1].data(), soft[0].size() * sizeof(float)), 0);
    }
  }
}

// A metadata value as comparable text: its type and contents.
std::string value_text(const GgufValue& v) {
  std::string t(gguf_type_name(v.type()));
  switch (v.type()) {
    case GgufType::kString:
      return t + " " + std::string(v.as_string());
    case GgufType::kBool:
      return t + (v.as_bool() ? " true" : " false");
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      return t + " " + std::to_string(v.as_float());
    case GgufType::kArray: {
      t += " of " + std::string(gguf_type_name(v.array_type())) + ":";
      if (v.array_type() == GgufType::kString) {
        for (std::string_view s : v.as_string_array()) t += std::string(s) + "\x1f";
      } else if (v.array_type() == GgufType::kBool) {
        for (bool b : v.as_bool_array()) t += b ? "1" : "0";
      } else {
        for (double x : v.as_float_array()) t += std::to_string(x) + ",";
      }
      return t;
    }
    default:
      return t + " " + std::to_string(v.as_int());
  }
}

// The merges the loader keeps: both pieces in the vocabulary (the tiny vocabulary is trimmed, so
// the converter's file lists merges of absent pieces that no tokenizer.json can carry).
std::string kept_merges(const GgufFile& f) {
  const std::vector<std::string_view> tokens = f.get("tokenizer.ggml.tokens").as_string_array();
  const std::set<std::string_view> vocab(tokens.begin(), tokens.end());
  std::string out = "array of string:";
  for (std::string_view m : f.get("tokenizer.ggml.merges").as_string_array()) {
    const size_t space = m.find(' ', 1);
    if (vocab.count(m.substr(0, space)) && vocab.count(m.substr(space + 1))) {
      out += std::string(m) + "\x1f";
    }
  }
  return out;
}

// Every key of `ours` equals the converter's (`theirs`), with the same key set; `in_order` also
// asks for the same order.
void expect_same_metadata(const GgufFile& ours, const GgufFile& theirs, bool in_order) {
  ASSERT_EQ(ours.metadata().size(), theirs.metadata().size());
  for (size_t i = 0; i < ours.metadata().size(); ++i) {
    const GgufValue& v = ours.metadata()[i];
    SCOPED_TRACE(v.key());
    if (in_order) {
      EXPECT_EQ(v.key(), theirs.metadata()[i].key());
    }
    const GgufValue* want = theirs.find(v.key());
    ASSERT_NE(want, nullptr);
    if (v.key() == "tokenizer.ggml.merges") {
      EXPECT_EQ(value_text(v), kept_merges(theirs));
    } else {
      EXPECT_EQ(value_text(v), value_text(*want));
    }
  }
}

// Same tensor names, dims (and, with `same_data`, types and bytes); file order may differ.
void expect_same_tensors(const GgufFile& ours, const GgufFile& theirs, bool same_data) {
  ASSERT_EQ(ours.tensors().size(), theirs.tensors().size());
  std::map<std::string, const GgufTensorInfo*> by_name;
  for (const GgufTensorInfo& t : theirs.tensors()) by_name[t.name] = &t;
  for (const GgufTensorInfo& t : ours.tensors()) {
    SCOPED_TRACE(t.name);
    auto it = by_name.find(t.name);
    ASSERT_NE(it, by_name.end());
    EXPECT_EQ(t.dims, it->second->dims);
    if (!same_data) continue;
    EXPECT_EQ(t.ggml_type, it->second->ggml_type);
    ASSERT_EQ(t.byte_size, it->second->byte_size);
    EXPECT_EQ(std::memcmp(t.data, it->second->data, *t.byte_size), 0);
  }
}

TEST(QuantizeGguf, WritesWhatLlamaCppsConverterWrites) {
  GS_REQUIRE_SHARED(shared);
  const fs::path fixtures = shared / "fixtures" / "gguf" / "models";
  testing::TempDir tmp;
  for (const std::string m : {"dense", "moe", "keqv", "vision"}) {
    const fs::path in = tiny_with_vocab(tmp.path(), m);
    for (const std::string type : {"f32", "bf16", "Q8_0"}) {
      SCOPED_TRACE(m + " " + type);
      const fs::path out = tmp.path() / (m + "-" + type + ".gguf");
      const auto r = quantize(in.string() + " " + out.string() + " --type " + type);
      ASSERT_EQ(r.exit_code, 0) << r.out;
      const GgufFile ours(out), theirs(fixtures / (m + "-" + type + ".gguf"));
      // llama-quantize moves general.file_type and orders tensors its own way; the converter's
      // f32 / bf16 files are the checkpoint's tensors, so ours equal them byte for byte.
      const bool converter = type != "Q8_0";
      expect_same_metadata(ours, theirs, converter);
      expect_same_tensors(ours, theirs, converter);
      if (converter) {
        for (size_t i = 0; i < ours.tensors().size(); ++i) {
          EXPECT_EQ(ours.tensors()[i].name, theirs.tensors()[i].name);
        }
      }
      if (m != "vision" || type != "f32") continue;
      const GgufFile ours_mm(tmp.path() / ("mmproj-" + out.filename().string()));
      const GgufFile theirs_mm(fixtures / "vision-mmproj-f32.gguf");
      expect_same_metadata(ours_mm, theirs_mm, true);
      expect_same_tensors(ours_mm, theirs_mm, true);
    }
  }
  // The converter's F16 mmproj: F16 matrices and patch kernel, F32 position table and bounds.
  const fs::path in = tmp.path() / "gemma4-tiny-vision";
  const fs::path out = tmp.path() / "vision-f16.gguf";
  const auto r = quantize(in.string() + " " + out.string() + " --type f16");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const GgufFile ours(tmp.path() / "mmproj-vision-f16.gguf");
  const GgufFile theirs(fixtures / "vision-mmproj-f16.gguf");
  expect_same_metadata(ours, theirs, true);
  expect_same_tensors(ours, theirs, true);
}

// The real Gemma 4 vocabulary (262144 tokens, 514906 merges) through tokenizer.json and back
// into GGUF keys equals llama.cpp's own vocabulary file, and encodes every text the same.
TEST(QuantizeGguf, RealVocabularyRoundTrips) {
  GS_REQUIRE_SHARED(shared);
  const fs::path vocab = shared / "data" / "gemma4-tokenizer" / "ggml-vocab-gemma-4.gguf";
  testing::TempDir tmp;
  const fs::path dir = tmp.path() / "tok";
  auto r = run_command(cli_binary().string() + " export-tokenizer --from " + vocab.string() +
                       " --out " + dir.string() + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const TokenizerSpec spec =
      spec_from_hf_json_file(dir / "tokenizer.json", dir / "tokenizer_config.json");
  const GgufFile original(vocab);
  GgufMetadata m;
  GgufVocabExtras extras;
  extras.mask_id = 4;
  extras.chat_template = std::string(original.get("tokenizer.chat_template").as_string());
  add_gguf_vocab(spec, extras, m);
  const fs::path out = tmp.path() / "vocab.gguf";
  write_gguf(plan_gguf(out, m, {}), {}, nullptr);
  const GgufFile written(out);
  for (const GgufValue& v : original.metadata()) {
    if (v.key().rfind("tokenizer.", 0) != 0) continue;
    SCOPED_TRACE(v.key());
    const GgufValue* got = written.find(v.key());
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(value_text(*got), value_text(v));
  }
  const Tokenizer from_gguf = Tokenizer::from_gguf(written);
  const Tokenizer from_json = Tokenizer::from_path(dir);
  for (const std::string text :
       {"Hello world", "  leading spaces and\ttabs\n\nnewlines", "<start_of_turn>user\nHi<eos>",
        "<|image|> <|tool_call>call:f{x:<|\"|>1<|\"|>}<tool_call|>", "naïve café 日本語 🙂",
        "def f(x):\n    return x ** 2  # comment", "\xff\xfe invalid bytes", ""}) {
    SCOPED_TRACE(text);
    for (bool special : {false, true}) {
      EXPECT_EQ(from_gguf.encode(text, true, special), from_json.encode(text, true, special));
    }
    const std::vector<int32_t> ids = from_json.encode(text, false, true);
    EXPECT_EQ(from_gguf.decode(ids, false), from_json.decode(ids, false));
  }
  EXPECT_EQ(from_gguf.bos_id(), from_json.bos_id());
  EXPECT_EQ(from_gguf.eos_ids(), from_json.eos_ids());
}

testing::CommandResult quantize_err(const std::string& args) {
  return run_command(cli_binary().string() + " quantize " + args + " 2>&1 >/dev/null");
}

TEST(QuantizeGguf, RefusesBadOutputs) {
  testing::TempDir tmp;
  const fs::path in = tiny_with_vocab(tmp.path(), "dense");
  const std::string usage_hint = "usage: gemmaserve quantize";
  // An existing, non-empty GGUF is never overwritten; an empty one (mktemp) is.
  const fs::path taken = tmp.path() / "taken.gguf";
  std::ofstream(taken) << "x";
  auto r = quantize_err(in.string() + " " + taken.string() + " --type q8_0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "quantize: " + taken.string() +
                       ": already exists and is not empty; remove it or choose another name "
                       "(quantize does not overwrite)\n");
  std::ofstream(tmp.path() / "empty.gguf").close();
  EXPECT_EQ(quantize_err(in.string() + " " + (tmp.path() / "empty.gguf").string() + " --type q8_0")
                .exit_code,
            0);
  // A GGUF folder output must be new or empty.
  fs::create_directories(tmp.path() / "full");
  std::ofstream(tmp.path() / "full" / "notes.txt") << "keep";
  r = quantize_err(in.string() + " " + (tmp.path() / "full").string() +
                   " --format gguf --type q4_0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out,
            "quantize: " + (tmp.path() / "full").string() + ": folder exists and is not empty\n");
  // A folder that cannot be created (a file is in the way).
  const fs::path blocked = tmp.path() / "taken.gguf" / "sub" / "model.gguf";
  r = quantize_err(in.string() + " " + blocked.string() + " --type q8_0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "quantize: " + blocked.parent_path().string() +
                       ": cannot create folder: Not a directory\n");
  // Flags that belong to the other format.
  r = quantize_err(in.string() + " " + (tmp.path() / "f").string() + " --type bf16");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("quantize: --type bf16 writes no quantized weights; it is for --format "
                       "gguf only\n" +
                       usage_hint),
            std::string::npos)
      << r.out;
  r = quantize_err(in.string() + " " + (tmp.path() / "g.gguf").string() +
                   " --type q8_0 --max-shard-mb 100");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("quantize: --max-shard-mb is for --format safetensors; GGUF output splits "
                       "with --split-max-size\n"),
            std::string::npos)
      << r.out;
  r = quantize_err(in.string() + " " + (tmp.path() / "h").string() +
                   " --type q8_0 --split-max-size 1G");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("quantize: --split-max-size is for --format gguf\n"), std::string::npos)
      << r.out;
  r = quantize_err(in.string() + " " + (tmp.path() / "i.gguf").string() +
                   " --type q8_0 --split-max-size 12X");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("quantize: --split-max-size: expected a size such as 500M or 2G, got "
                       "'12X'\n"),
            std::string::npos)
      << r.out;
  r = quantize_err(in.string() + " " + (tmp.path() / "j.gguf").string() + " --type q5_k");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("quantize: --type: unknown quantization type 'q5_k' (expected q8_0, q4_0 "
                       "or q4_k)\n"),
            std::string::npos)
      << r.out;
  // A quantized checkpoint is not quantized again.
  const fs::path q = tmp.path() / "q8";
  ASSERT_EQ(quantize_err(in.string() + " " + q.string() + " --type q8_0").exit_code, 0);
  r = quantize_err(q.string() + " " + (tmp.path() / "k.gguf").string() + " --type q4_0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "quantize: " + q.string() +
                       ": checkpoint is already quantized; quantize the original\n");
  // Nothing half-written is left behind.
  for (const auto& e : fs::recursive_directory_iterator(tmp.path())) {
    EXPECT_NE(e.path().extension(), ".partial") << e.path();
  }
}

// The unified Gemma 4 has no GGUF layout to write; its safetensors quantization works and loads
// with the embedders quantized beside the decoder.
TEST(QuantizeGguf, UnifiedModelIsRefusedWithTheWayThatWorks) {
  testing::TempDir tmp;
  const fs::path in = tiny_with_vocab(tmp.path(), "unified");
  const fs::path out = tmp.path() / "u.gguf";
  const auto r = quantize_err(in.string() + " " + out.string() + " --type q8_0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "quantize: " + in.string() +
                       ": Gemma4UnifiedForConditionalGeneration (the unified Gemma 4): gemmaserve "
                       "writes GGUF files in llama.cpp's gemma4 layout only, which has no place "
                       "for its embedders; quantize it to a safetensors folder (--format "
                       "safetensors) instead\n");
  EXPECT_FALSE(fs::exists(out));
  const fs::path folder = tmp.path() / "u-q8";
  ASSERT_EQ(quantize_err(in.string() + " " + folder.string() + " --type q8_0").exit_code, 0);
  const ModelWeights w = load_model_weights(folder);
  EXPECT_EQ(w.unified.audio_projection.dtype, DType::kQ8_0);
  EXPECT_EQ(w.unified.patch_dense.dtype, DType::kQ8_0);
}

// --split-max-size parts load as one model; the summary names every file.
TEST(QuantizeGguf, SplitPartsLoadAsOneModel) {
  testing::TempDir tmp;
  const fs::path in = tiny_with_vocab(tmp.path(), "moe");
  const fs::path out = tmp.path() / "split" / "moe.gguf";
  const auto r = quantize(in.string() + " " + out.string() + " --type q4_0 --split-max-size 200K");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::vector<fs::path> parts;
  for (const auto& e : fs::directory_iterator(out.parent_path())) parts.push_back(e.path());
  ASSERT_GT(parts.size(), 1u);
  const std::string first = (out.parent_path() / "moe-00001-of-0000").string();
  EXPECT_NE(r.out.find(first), std::string::npos) << r.out;
  for (const fs::path& p : parts) EXPECT_LE(GgufFile(p).tensors().size(), 200u) << p;
  auto split = golden::load_model(out.parent_path(), 2);
  const fs::path whole = tmp.path() / "whole.gguf";
  ASSERT_EQ(quantize(in.string() + " " + whole.string() + " --type q4_0").exit_code, 0);
  auto one = golden::load_model(whole, 2);
  expect_same_logits(
      *split, *one, golden::load_ref(golden::golden_dir() / "ref" / "moe.json").cases.at(0).prompt);
}

}  // namespace
}  // namespace gemmaserve
