// See gemma4_processor_config.h. Hugging Face's image_processing_base.get_image_processor_dict
// (nested section first, then preprocessor_config.json) and Gemma4ImageProcessor's fields are
// the reference.
#include "model/gemma4_processor_config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/logging.h"
#include "io/json_file.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;

// Fields Gemma 4's image processor reads (gemmaserve applies each).
const std::set<std::string> kAppliedFields = {
    "patch_size", "pooling_kernel_size", "max_soft_tokens", "do_resize",
    "resample",   "do_rescale",          "rescale_factor",  "do_normalize",
    "image_mean", "image_std",           "do_convert_rgb"};

// Fields Hugging Face's base classes keep but Gemma4ImageProcessor's _preprocess never reads
// (its resize is its own; no crop, no pad), so they change nothing there either.
const std::set<std::string> kInertFields = {"image_processor_type",
                                            "processor_class",
                                            "_processor_class",
                                            "size",
                                            "default_to_square",
                                            "do_pad",
                                            "pad_size",
                                            "do_center_crop",
                                            "crop_size",
                                            "size_divisor",
                                            "data_format",
                                            "input_data_format",
                                            "device",
                                            "disable_grouping",
                                            "return_tensors"};

const char* resample_name(int64_t filter) {
  switch (filter) {
    case 0:
      return "NEAREST";
    case 1:
      return "LANCZOS";
    case 2:
      return "BILINEAR";
    case 3:
      return "BICUBIC";
    case 4:
      return "BOX";
    case 5:
      return "HAMMING";
    default:
      return "unknown";
  }
}

// Reads one section's fields into `o`; `where` names the file (and section) in errors.
class FieldReader {
 public:
  FieldReader(const nlohmann::json& section, std::string where)
      : section_(section), where_(std::move(where)) {}

  [[noreturn]] void refuse(const std::string& field, const std::string& why) const {
    throw InputError(where_ + ": " + field + " " + why);
  }

  const nlohmann::json* find(const std::string& field) const {
    const auto it = section_.find(field);
    return it == section_.end() ? nullptr : &*it;
  }

  void read_bool(const std::string& field, bool* out) const {
    const nlohmann::json* v = find(field);
    if (v == nullptr) return;
    if (!v->is_boolean()) refuse(field, "must be true or false, got " + v->dump());
    *out = v->get<bool>();
  }

  void read_positive_int(const std::string& field, int* out) const {
    const nlohmann::json* v = find(field);
    if (v == nullptr) return;
    if (!v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() > (1 << 20)) {
      refuse(field, "must be a positive integer, got " + v->dump());
    }
    *out = static_cast<int>(v->get<int64_t>());
  }

  void read_finite(const std::string& field, double* out) const {
    const nlohmann::json* v = find(field);
    if (v == nullptr) return;
    if (!v->is_number() || !std::isfinite(v->get<double>())) {
      refuse(field, "must be a finite number, got " + v->dump());
    }
    *out = v->get<double>();
  }

  // A number (used for all three channels, as HF does) or a list of 3 numbers.
  void read_channels(const std::string& field, std::array<double, 3>* out, bool nonzero) const {
    const nlohmann::json* v = find(field);
    if (v == nullptr) return;
    std::vector<nlohmann::json> values;
    if (v->is_array()) {
      values.assign(v->begin(), v->end());
    } else {
      values.assign(3, *v);
    }
    if (values.size() != 3) {
      refuse(field, "must have 3 elements (one per RGB channel), got " + v->dump());
    }
    for (size_t c = 0; c < 3; ++c) {
      if (!values[c].is_number() || !std::isfinite(values[c].get<double>()) ||
          (nonzero && values[c].get<double>() == 0.0)) {
        refuse(field, std::string("must be ") + (nonzero ? "non-zero " : "") +
                          "finite numbers, got " + v->dump());
      }
      (*out)[c] = values[c].get<double>();
    }
  }

 private:
  const nlohmann::json& section_;
  std::string where_;
};

Gemma4ImageProcessorOptions read_section(const nlohmann::json& section, const std::string& where,
                                         const ImageProcessorGeometry& vision) {
  if (!section.is_object()) throw InputError(where + " must be a JSON object");
  const FieldReader r(section, where);
  // Absent patch and pooling sizes are the tower's (vLLM counts placeholders with those).
  Gemma4ImageProcessorOptions o;
  o.rescale_in_float32 = vision.rescale_in_float32;
  o.patch_size = vision.patch_size;
  o.pooling_kernel_size = vision.pooling_kernel_size;
  if (const nlohmann::json* type = r.find("image_processor_type")) {
    if (!type->is_string() || type->get<std::string>().rfind(vision.processor_type, 0) != 0) {
      r.refuse("image_processor_type", type->dump() + " is not this model's image processor (" +
                                           vision.processor_type + ")");
    }
  }
  r.read_positive_int("patch_size", &o.patch_size);
  if (o.patch_size != vision.patch_size) {
    r.refuse("patch_size", std::to_string(o.patch_size) +
                               " differs from the vision tower's patch_size " +
                               std::to_string(vision.patch_size) +
                               " (config.json), whose patch embedding takes 3 x " +
                               std::to_string(vision.patch_size) + "² values per patch");
  }
  r.read_positive_int("pooling_kernel_size", &o.pooling_kernel_size);
  if (o.pooling_kernel_size != vision.pooling_kernel_size) {
    r.refuse("pooling_kernel_size", std::to_string(o.pooling_kernel_size) +
                                        " differs from the vision tower's pooling_kernel_size " +
                                        std::to_string(vision.pooling_kernel_size) +
                                        " (config.json), which decides its soft tokens");
  }
  if (const nlohmann::json* v = r.find("max_soft_tokens")) {
    if (!v->is_number_integer())
      r.refuse("max_soft_tokens", "must be an integer, got " + v->dump());
    try {
      validate_gemma4_max_soft_tokens(
          static_cast<int>(std::clamp<int64_t>(v->get<int64_t>(), -1, int64_t{1} << 30)));
    } catch (const InputError& e) {
      throw InputError(where + ": " + e.what());
    }
    o.max_soft_tokens = static_cast<int>(v->get<int64_t>());
  }
  r.read_bool("do_resize", &o.do_resize);
  if (const nlohmann::json* v = r.find("resample")) {
    if (!v->is_number_integer()) r.refuse("resample", "must be an integer, got " + v->dump());
    const int64_t filter = v->get<int64_t>();
    if (filter < 1 || filter > 5) {
      r.refuse("resample", std::to_string(filter) + " (" + resample_name(filter) +
                               ") is not implemented; gemmaserve resizes with Pillow's LANCZOS "
                               "(1), BILINEAR (2), BICUBIC (3, Gemma 4's default), BOX (4) or "
                               "HAMMING (5)");
    }
    o.resample = static_cast<int>(filter);
  }
  r.read_bool("do_rescale", &o.do_rescale);
  r.read_finite("rescale_factor", &o.rescale_factor);
  r.read_bool("do_normalize", &o.do_normalize);
  r.read_channels("image_mean", &o.image_mean, /*nonzero=*/false);
  r.read_channels("image_std", &o.image_std, /*nonzero=*/true);
  r.read_bool("do_convert_rgb", &o.do_convert_rgb);
  for (const auto& [key, value] : section.items()) {
    if (kAppliedFields.count(key) == 0 && kInertFields.count(key) == 0) {
      GS_LOG_WARNING << where << ": field '" << key
                     << "' is not one of Gemma 4's image processor fields; it has no effect (as "
                        "in Hugging Face)";
    }
  }
  return o;
}

}  // namespace

ImageProcessorGeometry image_processor_geometry(const VisionConfig& vision) {
  return {vision.patch_size, vision.pooling_kernel_size, "Gemma4ImageProcessor"};
}

ImageProcessorGeometry image_processor_geometry(const UnifiedVisionConfig& vision) {
  return {vision.patch_size, vision.pooling_kernel_size, "Gemma4UnifiedImageProcessor", true};
}

Gemma4ImageProcessorOptions load_gemma4_image_processor_config(
    const fs::path& dir, const ImageProcessorGeometry& vision) {
  const fs::path processor_file = dir / "processor_config.json";
  const fs::path preprocessor_file = dir / "preprocessor_config.json";
  if (fs::exists(processor_file)) {
    const nlohmann::json processor = read_json_file(processor_file);
    if (processor.is_object() && processor.contains("image_processor")) {
      return read_section(processor["image_processor"],
                          processor_file.filename().string() + " image_processor", vision);
    }
    if (processor.is_object() && !fs::exists(preprocessor_file)) {
      for (const auto& [key, value] : processor.items()) {
        if (kAppliedFields.count(key) != 0) {
          GS_LOG_WARNING << processor_file.filename().string() << ": top-level '" << key
                         << "' is not read (Hugging Face reads the image processor from the "
                            "\"image_processor\" section or preprocessor_config.json)";
        }
      }
    }
  }
  if (fs::exists(preprocessor_file)) {
    return read_section(read_json_file(preprocessor_file), preprocessor_file.filename().string(),
                        vision);
  }
  return read_section(nlohmann::json::object(), "built-in defaults", vision);
}

Gemma4AudioFeatureOptions load_gemma4_audio_feature_config(const fs::path& dir) {
  const fs::path processor_file = dir / "processor_config.json";
  const fs::path preprocessor_file = dir / "preprocessor_config.json";
  if (fs::exists(processor_file)) {
    const nlohmann::json processor = read_json_file(processor_file);
    if (processor.is_object() && processor.contains("feature_extractor")) {
      return parse_gemma4_audio_feature_options(
          processor["feature_extractor"],
          processor_file.filename().string() + " feature_extractor");
    }
  }
  if (fs::exists(preprocessor_file)) {
    const nlohmann::json flat = read_json_file(preprocessor_file);
    if (flat.is_object() &&
        flat.value("feature_extractor_type", "") == "Gemma4AudioFeatureExtractor") {
      return parse_gemma4_audio_feature_options(flat, preprocessor_file.filename().string());
    }
  }
  return Gemma4AudioFeatureOptions{};
}

}  // namespace gemmaserve
