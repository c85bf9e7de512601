// Image decoding against Debian's python3-pil: sample PNG/JPEG/WebP/GIF files written by
// tests/python/pil_image_reference.py must decode to exactly the pixels of Pillow's
// convert("RGB"), of vLLM's RGBA-on-white rule and of ImageOps.exif_transpose; bad, truncated,
// oversized and mutated files must give an InputError with a clear message and never crash.
#include "io/image/image_decode.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using image::AlphaHandling;
using image::decode_image;
using image::DecodeOptions;
using Bytes = std::vector<std::uint8_t>;

constexpr const char* kPython = "/usr/bin/python3";

Bytes read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

bool have_pil() {
  return testing::run_command(std::string(kPython) + " -c 'import PIL, numpy' 2>/dev/null")
             .exit_code == 0;
}

std::string decode_error(const Bytes& bytes, const DecodeOptions& options = {}) {
  try {
    decode_image(bytes, options);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// Sample files and Pillow's pixels, written once for the whole suite.
class ImageDecodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_pil()) return;
    dir_ = std::make_unique<testing::TempDir>();
    const testing::CommandResult result = testing::run_command(
        std::string(kPython) + " '" +
        (testing::source_dir() / "tests/python/pil_image_reference.py").string() + "' files '" +
        dir_->path().string() + "'");
    if (result.exit_code != 0) return;
    std::ifstream in(dir_->path() / "manifest.json");
    manifest_ = nlohmann::json::parse(in);
  }
  static void TearDownTestSuite() { dir_.reset(); }

  void SetUp() override {
    if (manifest_.is_null()) {
      if (testing::running_in_ci()) FAIL() << "python3-pil / python3-numpy missing (scripts/setup)";
      GTEST_SKIP() << "python3-pil / python3-numpy missing (run scripts/setup)";
    }
  }

  static Bytes file(const std::string& name) { return read_bytes(dir_->path() / name); }

  static std::unique_ptr<testing::TempDir> dir_;
  static nlohmann::json manifest_;
};

std::unique_ptr<testing::TempDir> ImageDecodeTest::dir_;
nlohmann::json ImageDecodeTest::manifest_;

int max_abs_diff(const Bytes& a, const Bytes& b) {
  int worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(int(a[i]) - int(b[i])));
  }
  return worst;
}

TEST_F(ImageDecodeTest, EveryFormatAndModeDecodesToPillowsPixels) {
  int checked = 0;
  for (const auto& c : manifest_["cases"]) {
    const std::string name = c["file"];
    SCOPED_TRACE(name + " (Pillow mode " + c["mode"].get<std::string>() + ")");
    const Bytes bytes = file(name);

    DecodeOptions drop;
    drop.alpha = AlphaHandling::kDrop;
    const image::RgbImage plain = decode_image(bytes, drop);
    ASSERT_EQ(plain.width, c["width"].get<int>());
    ASSERT_EQ(plain.height, c["height"].get<int>());
    const Bytes want_drop = file(c["drop"]);
    ASSERT_EQ(plain.pixels.size(), want_drop.size());
    EXPECT_EQ(max_abs_diff(plain.pixels, want_drop), 0) << "vs Image.open(f).convert('RGB')";
    EXPECT_TRUE(plain.pixels == want_drop);

    const image::RgbImage vllm = decode_image(bytes);  // default: vLLM's RGBA on white
    EXPECT_TRUE(vllm.pixels == file(c["vllm"])) << "vs vLLM's rgba_to_rgb / convert('RGB')";

    DecodeOptions oriented = drop;
    oriented.apply_exif_orientation = true;
    const image::RgbImage turned = decode_image(bytes, oriented);
    EXPECT_EQ(turned.width, c["oriented_width"].get<int>());
    EXPECT_EQ(turned.height, c["oriented_height"].get<int>());
    EXPECT_TRUE(turned.pixels == file(c["oriented"])) << "vs ImageOps.exif_transpose";
    ++checked;
  }
  EXPECT_GE(checked, 30);
  std::cout << "[ image ] " << checked << " files decoded identically to Pillow 9.4\n";
}

TEST_F(ImageDecodeTest, ExifOrientationSixAndEightRotateTheImage) {
  DecodeOptions oriented;
  oriented.apply_exif_orientation = true;
  for (const char* name : {"jpeg_exif6.jpg", "jpeg_exif8.jpg", "png_exif6.png"}) {
    SCOPED_TRACE(name);
    const image::RgbImage as_stored = decode_image(file(name));
    const image::RgbImage turned = decode_image(file(name), oriented);
    EXPECT_EQ(as_stored.width, 37);
    EXPECT_EQ(as_stored.height, 23);
    EXPECT_EQ(turned.width, 23);
    EXPECT_EQ(turned.height, 37);
  }
}

TEST(ImageDecodeErrors, EmptyRandomAndUnknownDataAreRejected) {
  EXPECT_EQ(decode_error({}), "image data is empty");
  std::mt19937 rng(5);
  Bytes random(1000);
  for (auto& b : random) b = static_cast<std::uint8_t>(rng());
  random[0] = 0x13;  // no format starts with this byte
  EXPECT_EQ(decode_error(random), "unsupported image format: expected PNG, JPEG, WebP or GIF data");
  const std::string bmp = "BM\x36\x00\x00\x00";
  EXPECT_EQ(decode_error(Bytes(bmp.begin(), bmp.end())),
            "unsupported image format: expected PNG, JPEG, WebP or GIF data");
}

std::uint32_t crc32(const std::uint8_t* data, std::size_t n) {
  std::uint32_t crc = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= data[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void put_u32be(Bytes& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(v >> s));
}

void put_chunk(Bytes& out, const std::string& type, const Bytes& data) {
  put_u32be(out, static_cast<std::uint32_t>(data.size()));
  const std::size_t body = out.size();
  for (char ch : type) out.push_back(static_cast<std::uint8_t>(ch));
  out.insert(out.end(), data.begin(), data.end());
  put_u32be(out, crc32(&out[body], out.size() - body));
}

// A PNG whose IHDR declares width x height (8-bit RGB), with a token IDAT and IEND.
Bytes png_header(std::uint32_t width, std::uint32_t height) {
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes ihdr;
  put_u32be(ihdr, width);
  put_u32be(ihdr, height);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", {0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01});
  put_chunk(out, "IEND", {});
  return out;
}

TEST(ImageDecodeErrors, DecompressionBombsAreRejectedFromTheHeader) {
  EXPECT_EQ(decode_error(png_header(100000, 100000)),
            "PNG image is 100000x100000 (10000000000 pixels), over the limit of 89478485 pixels");
  // GIF89a, logical screen 65535 x 65535, no palette.
  const Bytes gif = {'G', 'I', 'F', '8', '9', 'a', 0xff, 0xff, 0xff, 0xff, 0,    0,    0, ',', 0,
                     0,   0,   0,   1,   0,   1,   0,    0,    2,    2,    0x4c, 0x01, 0, ';'};
  EXPECT_EQ(decode_error(gif),
            "GIF image is 65535x65535 (4294836225 pixels), over the limit of 89478485 pixels");
  DecodeOptions small;
  small.max_pixels = 100;
  EXPECT_EQ(decode_error(png_header(11, 10), small),
            "PNG image is 11x10 (110 pixels), over the limit of 100 pixels");
}

TEST(ImageDecodeErrors, CorruptPngChunkIsAnInputError) {
  Bytes png = png_header(4, 4);
  png[20] ^= 0x01;  // inside IHDR's width: the CRC no longer matches
  EXPECT_EQ(decode_error(png), "invalid PNG image: IHDR: CRC error");
}

TEST_F(ImageDecodeTest, OverTheByteLimitIsRejected) {
  const Bytes png = file("png_rgb.png");
  DecodeOptions options;
  options.max_bytes = 100;
  EXPECT_EQ(decode_error(png, options),
            "image is " + std::to_string(png.size()) + " bytes, over the limit of 100 bytes");
}

TEST_F(ImageDecodeTest, TruncatedFilesAreRejected) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"png_rgb.png", "invalid PNG image: the data is truncated"},
      {"jpeg_420.jpg", "invalid JPEG image: the data is truncated"},
      {"jpeg_progressive.jpg", "invalid JPEG image: the data is truncated"},
      {"webp_lossy.webp", "invalid WebP image: the data is truncated"},
      {"webp_lossless.webp", "invalid WebP image: the data is truncated"},
      {"gif_palette.gif", "invalid GIF image: the data is truncated"},
  };
  for (const auto& [name, message] : cases) {
    SCOPED_TRACE(name);
    const Bytes whole = file(name);
    for (std::size_t keep : {whole.size() / 2, whole.size() - 40, std::size_t{30}}) {
      EXPECT_EQ(decode_error(Bytes(whole.begin(), whole.begin() + keep)), message)
          << "kept " << keep << " of " << whole.size() << " bytes";
    }
  }
}

TEST_F(ImageDecodeTest, JpegDimensionsOverTheLimitAreRejectedBeforeDecoding) {
  Bytes jpeg = file("jpeg_444.jpg");
  // Baseline SOF0: FF C0, length (2), precision (1), height (2), width (2).
  for (std::size_t i = 0; i + 9 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xff && jpeg[i + 1] == 0xc0) {
      jpeg[i + 5] = 0xfd;
      jpeg[i + 6] = 0xe8;  // height 65000
      jpeg[i + 7] = 0xfd;
      jpeg[i + 8] = 0xe8;  // width 65000
      break;
    }
  }
  EXPECT_EQ(decode_error(jpeg),
            "JPEG image is 65000x65000 (4225000000 pixels), over the limit of 89478485 pixels");
}

TEST_F(ImageDecodeTest, PreprocessImageCommandPrintsSizesAndSoftTokens) {
  const fs::path png = dir_->path() / "png_rgb.png";
  const testing::CommandResult result =
      testing::run_command(testing::cli_binary().string() + " preprocess-image '" + png.string() +
                           "' --max-soft-tokens 70 --json");
  ASSERT_EQ(result.exit_code, 0);
  const nlohmann::json got = nlohmann::json::parse(result.out);
  EXPECT_EQ(got["format"], "PNG");
  EXPECT_EQ(got["width"], 37);
  EXPECT_EQ(got["height"], 23);
  // 37x23 at 70 soft tokens: factor sqrt(630*256/851), sides floored to multiples of 48.
  EXPECT_EQ(got["resized_width"], 480);
  EXPECT_EQ(got["resized_height"], 288);
  EXPECT_EQ(got["num_patches"], 540);
  EXPECT_EQ(got["max_patches"], 630);
  EXPECT_EQ(got["num_soft_tokens"], 60);
  const testing::CommandResult bad =
      testing::run_command(testing::cli_binary().string() + " preprocess-image '" + png.string() +
                           "' --max-soft-tokens 100 2>&1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("`max_soft_tokens` must be one of (70, 140, 280, 560, 1120), got 100."),
            std::string::npos)
      << bad.out;
}

// Deterministic mutations of valid files (flipped bytes, runs of 0x00/0xff, cut tails): each
// decode either succeeds or throws InputError; nothing may crash (run under ASan in CI).
TEST_F(ImageDecodeTest, MutatedFilesNeverCrash) {
  std::mt19937 rng(2026);
  int decoded = 0, rejected = 0;
  for (const char* name :
       {"png_rgba.png", "png_palette4.png", "png_rgb16.png", "jpeg_420.jpg", "jpeg_progressive.jpg",
        "jpeg_cmyk.jpg", "webp_lossy.webp", "webp_lossless_alpha.webp", "webp_animated.webp",
        "gif_transparency.gif", "gif_interlaced.gif"}) {
    const Bytes original = file(name);
    for (int round = 0; round < 60; ++round) {
      Bytes mutated = original;
      const int edits = 1 + static_cast<int>(rng() % 8);
      for (int e = 0; e < edits; ++e) {
        const std::size_t at = rng() % mutated.size();
        switch (rng() % 4) {
          case 0:
            mutated[at] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
            break;
          case 1:
            mutated[at] = static_cast<std::uint8_t>(rng());
            break;
          case 2:
            for (std::size_t i = at; i < std::min(mutated.size(), at + 8); ++i) {
              mutated[i] = (rng() & 1) ? 0xff : 0x00;
            }
            break;
          default:
            if (at > 16) mutated.resize(at);
        }
      }
      try {
        const image::RgbImage out = decode_image(mutated);
        EXPECT_EQ(out.pixels.size(), std::size_t(out.width) * out.height * 3);
        ++decoded;
      } catch (const InputError&) {
        ++rejected;
      }
    }
  }
  std::cout << "[ image ] mutated files: " << decoded << " decoded, " << rejected
            << " rejected with InputError\n";
  EXPECT_EQ(decoded + rejected, 11 * 60);
}

}  // namespace
}  // namespace gemmaserve
