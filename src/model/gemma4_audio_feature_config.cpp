// The audio feature extractor's settings from a checkpoint's JSON section (Hugging Face's
// Gemma4AudioFeatureExtractor fields): each applied, checked against what HF derives, or refused
// with an InputError naming the field.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/logging.h"
#include "model/gemma4_audio_features.h"

namespace gemmaserve {
namespace {

// The fields parse_gemma4_audio_feature_options reads (applied, checked or inert).
const std::set<std::string> kKnownFields = {"feature_size",
                                            "sampling_rate",
                                            "frame_length_ms",
                                            "hop_length_ms",
                                            "fft_overdrive",
                                            "frame_length",
                                            "hop_length",
                                            "fft_length",
                                            "min_frequency",
                                            "max_frequency",
                                            "mel_floor",
                                            "padding_value",
                                            "padding_side",
                                            "pad_to_multiple_of",
                                            "max_length",
                                            "preemphasis",
                                            "preemphasis_htk_flavor",
                                            "dither",
                                            "input_scale_factor",
                                            "per_bin_mean",
                                            "per_bin_stddev",
                                            "return_attention_mask",
                                            "feature_extractor_type",
                                            "processor_class"};

class AudioFieldReader {
 public:
  AudioFieldReader(const nlohmann::json& section, std::string where)
      : section_(section), where_(std::move(where)) {}

  [[noreturn]] void refuse(const std::string& field, const std::string& why) const {
    throw InputError(where_ + ": " + field + " " + why);
  }
  const nlohmann::json* find(const std::string& field) const {
    const auto it = section_.find(field);
    return it == section_.end() || it->is_null() ? nullptr : &*it;
  }
  void read_bool(const std::string& field, bool* out) const {
    if (const nlohmann::json* v = find(field)) {
      if (!v->is_boolean()) refuse(field, "must be true or false, got " + v->dump());
      *out = v->get<bool>();
    }
  }
  void read_positive_int(const std::string& field, std::int64_t limit, std::int64_t* out) const {
    if (const nlohmann::json* v = find(field)) {
      if (!v->is_number_integer() || v->get<std::int64_t>() <= 0 ||
          v->get<std::int64_t>() > limit) {
        refuse(field, "must be a positive integer (at most " + std::to_string(limit) + "), got " +
                          v->dump());
      }
      *out = v->get<std::int64_t>();
    }
  }
  void read_int(const std::string& field, int* out) const {
    std::int64_t v = *out;
    read_positive_int(field, 1 << 20, &v);
    *out = static_cast<int>(v);
  }
  enum class Sign { kAny, kNonNegative, kPositive };
  void read_number(const std::string& field, Sign sign, double* out) const {
    if (const nlohmann::json* v = find(field)) {
      const double x = v->is_number() ? v->get<double>() : 0.0;
      if (!v->is_number() || !std::isfinite(x) || (sign == Sign::kNonNegative && x < 0) ||
          (sign == Sign::kPositive && x <= 0)) {
        const char* kind = sign == Sign::kAny           ? "a finite number"
                           : sign == Sign::kNonNegative ? "a finite number >= 0"
                                                        : "a finite number > 0";
        refuse(field, std::string("must be ") + kind + ", got " + v->dump());
      }
      *out = x;
    }
  }
  void read_bins(const std::string& field, int size,
                 std::optional<std::vector<double>>* out) const {
    if (const nlohmann::json* v = find(field)) {
      if (!v->is_array() || v->size() != static_cast<size_t>(size)) {
        refuse(field,
               "must be null or a list of feature_size (" + std::to_string(size) + ") numbers");
      }
      std::vector<double> bins;
      for (const nlohmann::json& x : *v) {
        if (!x.is_number() || !std::isfinite(x.get<double>())) {
          refuse(field, "must hold finite numbers, got " + x.dump());
        }
        bins.push_back(x.get<double>());
      }
      *out = std::move(bins);
    }
  }

 private:
  const nlohmann::json& section_;
  std::string where_;
};

}  // namespace

Gemma4AudioFeatureOptions parse_gemma4_audio_feature_options(const nlohmann::json& section,
                                                             const std::string& where) {
  if (!section.is_object()) throw InputError(where + " must be a JSON object");
  const AudioFieldReader r(section, where);
  using Sign = AudioFieldReader::Sign;
  Gemma4AudioFeatureOptions o;
  if (const nlohmann::json* type = r.find("feature_extractor_type")) {
    if (!type->is_string() || type->get<std::string>() != "Gemma4AudioFeatureExtractor") {
      r.refuse("feature_extractor_type",
               type->dump() + " is not Gemma 4's audio feature extractor");
    }
  }
  r.read_int("feature_size", &o.feature_size);
  r.read_int("sampling_rate", &o.sampling_rate);
  // HF's __init__ derives frame, hop and FFT lengths (overwriting any saved value) like this.
  double frame_ms = 20.0, hop_ms = 10.0;
  r.read_number("frame_length_ms", Sign::kPositive, &frame_ms);
  r.read_number("hop_length_ms", Sign::kPositive, &hop_ms);
  bool overdrive = false;
  r.read_bool("fft_overdrive", &overdrive);
  const double frame = std::nearbyint(o.sampling_rate * frame_ms / 1000.0);  // Python's round()
  const double hop = std::nearbyint(o.sampling_rate * hop_ms / 1000.0);
  if (frame < 2 || frame > (1 << 20))
    r.refuse("frame_length_ms", "gives a frame length out of range");
  if (hop < 1 || hop > (1 << 20)) r.refuse("hop_length_ms", "gives a hop length out of range");
  o.frame_length = static_cast<int>(frame);
  o.hop_length = static_cast<int>(hop);
  o.fft_length = 1;
  while (o.fft_length < o.frame_length) o.fft_length *= 2;
  if (overdrive) o.fft_length *= 2;
  for (const auto& [field, derived] : {std::pair<std::string, int>{"frame_length", o.frame_length},
                                       {"hop_length", o.hop_length},
                                       {"fft_length", o.fft_length}}) {
    if (const nlohmann::json* v = r.find(field)) {
      if (!v->is_number_integer() || v->get<std::int64_t>() != derived) {
        r.refuse(field, v->dump() + " differs from the " + std::to_string(derived) +
                            " Hugging Face derives from sampling_rate, frame_length_ms, "
                            "hop_length_ms and fft_overdrive (and uses instead)");
      }
    }
  }
  r.read_number("min_frequency", Sign::kNonNegative, &o.min_frequency);
  r.read_number("max_frequency", Sign::kPositive, &o.max_frequency);
  if (o.min_frequency >= o.max_frequency) {
    r.refuse("min_frequency", "must be below max_frequency");
  }
  r.read_number("mel_floor", Sign::kPositive, &o.mel_floor);
  r.read_number("padding_value", Sign::kAny, &o.padding_value);
  if (const nlohmann::json* v = r.find("padding_side")) {
    if (*v != "right") {
      r.refuse("padding_side", v->dump() + " is not implemented; Gemma 4 pads clips on the right");
    }
  }
  std::int64_t multiple = o.pad_to_multiple_of;
  r.read_positive_int("pad_to_multiple_of", 1 << 20, &multiple);
  o.pad_to_multiple_of = static_cast<int>(multiple);
  r.read_positive_int("max_length", std::int64_t{1} << 40, &o.max_length);
  r.read_number("preemphasis", Sign::kNonNegative, &o.preemphasis);
  if (o.preemphasis > 1) r.refuse("preemphasis", "must be at most 1");
  r.read_bool("preemphasis_htk_flavor", &o.preemphasis_htk_flavor);
  if (const nlohmann::json* v = r.find("dither")) {
    if (!v->is_number() || v->get<double>() != 0.0) {
      r.refuse("dither", v->dump() +
                             " is not implemented: Hugging Face adds random Gaussian noise of "
                             "that scale, which cannot be reproduced; only 0 is accepted");
    }
  }
  r.read_number("input_scale_factor", Sign::kAny, &o.input_scale_factor);
  r.read_bins("per_bin_mean", o.feature_size, &o.per_bin_mean);
  r.read_bins("per_bin_stddev", o.feature_size, &o.per_bin_stddev);
  if (o.per_bin_stddev && std::find(o.per_bin_stddev->begin(), o.per_bin_stddev->end(), 0.0) !=
                              o.per_bin_stddev->end()) {
    r.refuse("per_bin_stddev", "must not hold zeros");
  }
  bool return_mask = true;  // the processor always asks for the mask; checked for its type
  r.read_bool("return_attention_mask", &return_mask);
  for (const auto& [key, value] : section.items()) {
    if (kKnownFields.count(key) == 0) {
      GS_LOG_WARNING << where << ": field '" << key
                     << "' is not one of Gemma 4's audio feature extractor fields; it has no "
                        "effect (as in Hugging Face)";
    }
  }
  validate_gemma4_audio_feature_options(o);
  return o;
}

}  // namespace gemmaserve
