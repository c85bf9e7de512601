#include "cli/preprocess_image_command.h"

#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/arg_parser.h"
#include "core/error.h"
#include "io/image/image_decode.h"
#include "model/gemma4_image_processor.h"

namespace gemmaserve {
namespace {

constexpr const char* kUsage =
    "usage: gemmaserve preprocess-image FILE [--max-soft-tokens 70|140|280|560|1120]\n"
    "                                   [--patch-size 16] [--pooling-kernel-size 3]\n"
    "                                   [--apply-exif-orientation] [--json]\n"
    "  decodes FILE (PNG, JPEG, WebP, GIF) as the server does and prints its size, the size\n"
    "  Gemma 4's image processor resizes it to and the number of soft tokens it becomes.\n";

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

int run_preprocess_image(const std::vector<std::string>& args, std::ostream& out) {
  ArgParser p;
  p.value("--max-soft-tokens").value("--patch-size").value("--pooling-kernel-size");
  p.flag("--apply-exif-orientation").flag("--json").flag("--help", {"-h"});
  p.parse(args, 1);
  if (p.get_flag("--help")) {
    out << kUsage;
    return 0;
  }
  if (p.positionals().empty()) throw InputError(std::string("missing FILE\n") + kUsage);
  const std::string path = p.positionals().front();
  Gemma4ImageProcessorOptions options;
  options.max_soft_tokens = p.get_positive_int("--max-soft-tokens", options.max_soft_tokens);
  options.patch_size = p.get_positive_int("--patch-size", options.patch_size);
  options.pooling_kernel_size =
      p.get_positive_int("--pooling-kernel-size", options.pooling_kernel_size);
  validate_gemma4_max_soft_tokens(options.max_soft_tokens);

  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  image::DecodeOptions decode_options;
  decode_options.apply_exif_orientation = p.get_flag("--apply-exif-orientation");
  const auto start = std::chrono::steady_clock::now();
  const auto format = image::detect_image_format(bytes);
  const image::RgbImage decoded = image::decode_image(bytes, decode_options);
  const double decode_ms = ms_since(start);
  const auto middle = std::chrono::steady_clock::now();
  const Gemma4ImagePatches patches =
      gemma4_preprocess_image(decoded.pixels, decoded.width, decoded.height, options);
  const double preprocess_ms = ms_since(middle);

  if (p.get_flag("--json")) {
    out << nlohmann::json{{"format", std::string(image::format_name(*format))},
                          {"width", decoded.width},
                          {"height", decoded.height},
                          {"resized_width", patches.resized_width},
                          {"resized_height", patches.resized_height},
                          {"num_patches", patches.num_patches},
                          {"max_patches", patches.max_patches},
                          {"num_soft_tokens", patches.num_soft_tokens},
                          {"decode_ms", decode_ms},
                          {"preprocess_ms", preprocess_ms}}
               .dump()
        << "\n";
    return 0;
  }
  out << path << ": " << image::format_name(*format) << " " << decoded.width << "x"
      << decoded.height << " -> resized " << patches.resized_width << "x" << patches.resized_height
      << ", " << patches.num_patches << " of " << patches.max_patches << " patches, "
      << patches.num_soft_tokens << " soft tokens (decode " << decode_ms << " ms, preprocess "
      << preprocess_ms << " ms)\n";
  return 0;
}

int run_preprocess_image_command(const std::vector<std::string>& args) {
  return run_preprocess_image(args, std::cout);
}

}  // namespace gemmaserve
