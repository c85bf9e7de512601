// Test inputs of the `unified` golden fixture: its media files through the model's own
// processor settings and embedders, placed into the prompt as HF's processor does
// (<|image> + N x <|image|> + <image|>, <|audio> + N x <|audio|> + <audio|>).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "gemma4_golden_harness.h"
#include "io/audio/audio_decode.h"
#include "io/image/image_decode.h"
#include "model/gemma4_image_processor.h"
#include "model/gemma4_model.h"
#include "model/gemma4_processor_config.h"

namespace gemmaserve::golden {

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return nlohmann::json::parse(in);
}

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::vector<float> read_f32(const std::filesystem::path& path) {
  const std::vector<uint8_t> bytes = read_bytes(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// A suite's fixture model (models/NAME) and its reference (ref/NAME.json), loaded once;
// Fixture::kName names them.
template <typename Fixture>
class MediaGoldenSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ref_ = new nlohmann::json(
        read_json(golden_dir() / "ref" / (std::string(Fixture::kName) + ".json")));
    model_ = load_model(golden_dir() / "models" / Fixture::kName, 2).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete ref_;
  }

  static const nlohmann::json& case_json(const std::string& name) {
    for (const auto& c : ref_->at("cases")) {
      if (c.at("name") == name) return c;
    }
    throw std::runtime_error("no case " + name);
  }

  static inline nlohmann::json* ref_ = nullptr;
  static inline Gemma4Model* model_ = nullptr;
};

// A fixture PNG (by file name) through the unified processor; HF's processor given a PIL image
// drops the alpha (fixture README).
inline Gemma4ImagePatches unified_patches(const std::string& file,
                                          const Gemma4ImageProcessorOptions& options) {
  const std::vector<uint8_t> bytes =
      read_bytes(golden_dir() / "media" / std::filesystem::path(file).filename());
  image::DecodeOptions decode;
  decode.alpha = image::AlphaHandling::kDrop;
  const image::RgbImage rgb = image::decode_image(bytes, decode);
  return gemma4_preprocess_image(rgb.pixels, rgb.width, rgb.height, options);
}

class UnifiedInputs {
 public:
  UnifiedInputs(Gemma4Model& model, const std::filesystem::path& dir)
      : model_(model),
        options_(merged_patch_options(load_gemma4_image_processor_config(
            dir, image_processor_geometry(*model.config().unified_vision)))) {}

  struct Prompt {
    std::vector<int32_t> tokens;
    PagedRunner::ImageInputs inputs;
    std::vector<std::vector<float>> rows;  // soft tokens per media item, owned here
  };

  // The case's placeholder prompt with each media item expanded and embedded.
  Prompt prompt(const nlohmann::json& c) const {
    const ModelConfig& mc = model_.config();
    const int32_t image = *mc.image_token_id, audio = *mc.audio_token_id;
    const auto placeholder = c.at("prompt_ids_placeholder").get<std::vector<int32_t>>();
    Prompt p;
    p.rows.reserve(placeholder.size());
    size_t next_image = 0, next_audio = 0;
    for (int32_t t : placeholder) {
      if (t != image && t != audio) {
        p.tokens.push_back(t);
        continue;
      }
      std::vector<float> rows;
      if (t == image) {
        const auto& file = c.at("images").at(next_image++).at("file").get<std::string>();
        const Gemma4ImagePatches patches = unified_patches(file, options_);
        model_.encode_image({patches.pixel_values, patches.position_ids}, &rows);
      } else {
        const auto& file = c.at("audio").at(next_audio++).at("file").get<std::string>();
        rows = audio_rows(file);
      }
      const auto n = static_cast<int32_t>(rows.size() / mc.text.hidden_size);
      p.tokens.push_back(t == image ? *mc.boi_token_id : *mc.boa_token_id);
      const auto first = static_cast<int32_t>(p.tokens.size());
      p.tokens.insert(p.tokens.end(), static_cast<size_t>(n), t);
      p.tokens.push_back(t == image ? *mc.eoi_token_id : *mc.eoa_token_id);
      p.rows.push_back(std::move(rows));
      p.inputs.embeddings.push_back({first, n, p.rows.back().data()});
      if (t == image) p.inputs.blocks.push_back({first, first + n});
    }
    return p;
  }

 private:
  // A fixture WAV (tests/data/audio) decoded to 16 kHz mono as vLLM does, then embedded.
  std::vector<float> audio_rows(const std::string& file) const {
    const std::vector<uint8_t> bytes =
        read_bytes(::gemmaserve::testing::source_dir() / "tests" / "data" / "audio" /
                   std::filesystem::path(file).filename());
    const audio::DecodedAudio decoded = audio::load_audio(bytes, 16000);
    std::vector<float> rows;
    model_.encode_audio(decoded.samples, &rows);
    return rows;
  }

  Gemma4Model& model_;
  Gemma4ImageProcessorOptions options_;
};

}  // namespace gemmaserve::golden
