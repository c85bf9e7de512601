// Images in a prompt, before the scheduler sees them: Hugging Face's Gemma 4 processor rule that
// turns each bare <|image|> token into <|image> + N x <|image|> + <image|> for the next image
// (N = the image's soft tokens at its budget), the soft-token count, the budget from
// mm_processor_kwargs, the --limit-mm-per-prompt table and an image's content hash. Pure
// functions: the engine and the server (/tokenize, usage) call the same ones.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/image/image_decode.h"
#include "model/config.h"

namespace gemmaserve {

// The checkpoint's image_token_id (<|image|>), boi_token_id (<|image>), eoi_token_id (<image|>).
struct ImageTokenIds {
  int32_t image = -1;
  int32_t boi = -1;
  int32_t eoi = -1;
};

// One image's soft tokens in an expanded prompt: positions [offset, offset + length), the
// <|image|> tokens between <|image> and <image|> (HF's mm_token_type_ids == 1 positions).
struct ImagePlaceholder {
  int32_t offset = 0;
  int32_t length = 0;
};

struct ExpandedPrompt {
  std::vector<int32_t> token_ids;
  std::vector<ImagePlaceholder> placeholders;  // one per image, in prompt order
};

// What a modality's placeholders are: the bare token a caller puts, and the tokens its
// expansion is wrapped in; `name` and `item` name them in messages ("<|audio|>", "audio clip").
struct MediaTokens {
  int32_t placeholder = -1;
  int32_t begin = -1;
  int32_t end = -1;
  const char* name = "<|image|>";
  const char* begin_name = "<|image>";
  const char* item = "image";
};

// expand_image_placeholders for any modality's tokens.
ExpandedPrompt expand_media_placeholders(std::span<const int32_t> ids,
                                         std::span<const int> soft_tokens,
                                         const MediaTokens& tokens);

// `ids` with the i-th bare placeholder replaced by replacements[i] (a video's whole layout);
// InputError for a count mismatch or an expanded item, worded as expand_media_placeholders.
std::vector<int32_t> replace_media_placeholders(std::span<const int32_t> ids,
                                                std::span<const std::vector<int32_t>> replacements,
                                                const MediaTokens& tokens);

// The runs of `placeholder` in `ids`, in order: where each expanded item's soft tokens are.
std::vector<ImagePlaceholder> placeholder_runs(std::span<const int32_t> ids, int32_t placeholder);

// Replaces the i-th bare <|image|> of `ids` with <|image> + soft_tokens[i] x <|image|> +
// <image|>, nothing else added (HF's replace_image_token). InputError when the number of
// <|image|> tokens differs from soft_tokens.size() ("Found 2 <|image|> tokens in the prompt but
// 1 image was given; ...") or when an <|image|> follows <|image> (an already expanded prompt).
ExpandedPrompt expand_image_placeholders(std::span<const int32_t> ids,
                                         std::span<const int> soft_tokens,
                                         const ImageTokenIds& tokens);

struct Gemma4ImageProcessorOptions;  // model/gemma4_image_processor.h

// Soft tokens of a width x height image under `options` (HF's _get_num_multimodal_tokens:
// resize target / patch, / pooling²). InputError where HF's processor raises, or when the patch
// grid has more patches per side than the tower's position table (position_embedding_size).
int gemma4_image_soft_tokens(const Gemma4ImageProcessorOptions& options,
                             int position_embedding_size, int width, int height);

// max_soft_tokens of an mm_processor_kwargs object (null or {} -> nullopt; num_frames and fps
// are the video loader's, read by server/shared/chat_video.h). InputError, naming
// `where` ("--mm-processor-kwargs", "mm_processor_kwargs"), for a non-object, an unknown key or
// a value outside {70, 140, 280, 560, 1120}.
std::optional<int> parse_mm_processor_kwargs(const nlohmann::json& kwargs,
                                             const std::string& where);

// --limit-mm-per-prompt '{"image": N, "audio": M, "video": V}' (also {"image": {"count": N}}):
// modality -> most items per prompt. InputError for bad JSON,
// keys or counts.
std::map<std::string, int> parse_limit_mm_per_prompt(const std::string& json_text);

// vLLM's "At most N image(s) may be provided in one prompt." (+ the flag hint) when `count`
// exceeds limits["image"]; nothing when there is no image limit.
void check_image_limit(const std::map<std::string, int>& limits, size_t count);
// The same for limits["audio"] ("At most N audio(s) ...", vLLM's wording).
void check_audio_limit(const std::map<std::string, int>& limits, size_t count);
// The same for limits["video"] ("At most N video(s) ...").
void check_video_limit(const std::map<std::string, int>& limits, size_t count);

// Hex SHA-256 of (width, height, RGB bytes, max_soft_tokens): equal hashes mean equal soft
// tokens (vLLM's MultiModalHasher idea); the prefix-cache key and the encoder cache's key.
std::string image_content_hash(const image::RgbImage& rgb, int max_soft_tokens);

// Hex SHA-256 of an audio clip's samples (a different domain from images' hashes).
std::string audio_content_hash(std::span<const float> samples);

}  // namespace gemmaserve
