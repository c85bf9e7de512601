// Video content parts and the video loader's options (server/shared/chat_video.h): the part
// forms, vLLM's media_io_kwargs keys and their refusals, mm_processor_kwargs' num_frames / fps,
// timestamps from the decoded frames' indices, and vLLM's data:video/jpeg frame lists.
#include "server/shared/chat_video.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "server/shared/chat_images.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;
using testing::input_error_of;

TEST(ChatVideo, VideoUrlPartsAndTheirUrls) {
  const ordered_json messages = ordered_json::parse(R"([
    {"role": "user", "content": [
      {"type": "text", "text": "what happens?"},
      {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}},
      {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
      {"type": "video_url", "video_url": {"url": "http://example.com/b.webm"}}]}])");
  EXPECT_EQ(video_urls_of(messages),
            (std::vector<std::string>{"data:video/mp4;base64,AAAA", "http://example.com/b.webm"}));
  EXPECT_FALSE(is_video_part(messages[0]["content"][2]));
  const ordered_json bad = {{"type", "video_url"}, {"video_url", "x.mp4"}};
  EXPECT_EQ(input_error_of([&] { video_part_url(bad); }),
            "video_url content parts need video_url.url (a string)");
  const ordered_json rendered = messages_for_template(messages);
  EXPECT_EQ(rendered[0]["content"][1], (ordered_json{{"type", "video"}}));
  EXPECT_EQ(rendered[0]["content"][3], (ordered_json{{"type", "video"}}));
}

TEST(ChatVideo, MediaIoKwargsAreVllmsKeysOverTheBase) {
  video::VideoSampling base;
  EXPECT_EQ(apply_media_io_kwargs(nullptr, "f", base).num_frames, 32);
  const video::VideoSampling s = apply_media_io_kwargs(
      json::parse(R"({"video": {"num_frames": 8, "fps": 2.5, "video_backend": "opencv",
                      "frame_recovery": false}, "image": {}, "audio": {}})"),
      "--media-io-kwargs", base);
  EXPECT_EQ(s.num_frames, 8);
  EXPECT_EQ(s.fps, 2.5);
  EXPECT_EQ(
      apply_media_io_kwargs(json::parse(R"({"video": {"num_frames": -1}})"), "f", s).num_frames,
      -1);
  EXPECT_EQ(apply_media_io_kwargs(json::parse(R"({"video": {"fps": 1}})"), "f", s).num_frames, 8);
  const auto error = [](const char* text) {
    return input_error_of([&] { apply_media_io_kwargs(json::parse(text), "media_io_kwargs", {}); });
  };
  EXPECT_EQ(error(R"([1])"), "media_io_kwargs must be a JSON object");
  EXPECT_EQ(error(R"({"pdf": {}})"),
            "media_io_kwargs: unknown modality 'pdf' (image, video or audio)");
  EXPECT_EQ(error(R"({"image": {"image_mode": "RGBA"}})"),
            "media_io_kwargs: the image loader takes no options, got {\"image_mode\":\"RGBA\"}");
  EXPECT_EQ(error(R"({"video": 3})"), "media_io_kwargs: \"video\" must be a JSON object");
  EXPECT_EQ(error(R"({"video": {"num_frames": 0}})"),
            "media_io_kwargs.video: num_frames must be -1 (every frame) or an integer from 1 to "
            "100000, got 0");
  EXPECT_EQ(error(R"({"video": {"fps": "2"}})"),
            "media_io_kwargs.video: fps must be -1 (the clip's own) or a number of frames per "
            "second above 0 and at most 1000, got \"2\"");
  EXPECT_EQ(error(R"({"video": {"video_backend": "decord"}})"),
            "media_io_kwargs.video: video_backend \"decord\" is not available; gemmaserve decodes "
            "with FFmpeg's libraries as vLLM's opencv backend does, and accepts only \"opencv\"");
  EXPECT_EQ(error(R"({"video": {"frame_recovery": true}})"),
            "media_io_kwargs.video: frame_recovery is not available; a frame that cannot be "
            "decoded makes the video a 400 instead (false is accepted)");
  EXPECT_EQ(error(R"({"video": {"max_duration": 10}})"),
            "media_io_kwargs.video: unsupported key 'max_duration' (num_frames, fps, "
            "video_backend, frame_recovery)");
}

TEST(ChatVideo, ProcessorKwargsSetFramesAndFps) {
  const video::VideoSampling s = apply_video_processor_kwargs(
      json::parse(R"({"max_soft_tokens": 140, "num_frames": 4, "fps": 1})"), "mm", {});
  EXPECT_EQ(s.num_frames, 4);
  EXPECT_EQ(s.fps, 1);
  EXPECT_EQ(input_error_of([] {
              apply_video_processor_kwargs(json::parse(R"({"num_frames": 1.5})"),
                                           "mm_processor_kwargs", {});
            }),
            "mm_processor_kwargs: num_frames must be -1 (every frame) or an integer from 1 to "
            "100000, got 1.5");
}

TEST(ChatVideo, TimestampsAreIndicesOverTheClipsFps) {
  video::DecodedVideo d;
  d.info.fps = 29.97;
  d.frames.resize(3, image::RgbImage{2, 2, std::vector<uint8_t>(12, 7)});
  d.frame_indices = {0, 450, 1799};
  const PromptVideo v = prompt_video_of(d);
  ASSERT_EQ(v.timestamps.size(), 3u);
  EXPECT_DOUBLE_EQ(v.timestamps[1], 450 / 29.97);
  EXPECT_EQ(v.frames.size(), 3u);
  d.info.fps = 0;  // no rate in the clip: Hugging Face's 24
  EXPECT_DOUBLE_EQ(prompt_video_of(d).timestamps[2], 1799 / 24.0);
}

TEST(ChatVideo, JpegFrameListsAreVllmsVideoJpeg) {
  const media::MediaConnector media;
  VideoLoadOptions options;
  const auto error = [&](const std::string& url) {
    return input_error_of([&] { load_chat_videos(media, {url}, options); });
  };
  EXPECT_EQ(error("data:video/jpeg,AAAA"),
            "Invalid video/jpeg data URL: expected data:video/jpeg;base64,F1,F2,...");
  EXPECT_EQ(error("data:video/jpeg;base64,!!!!"),
            "Invalid video/jpeg data URL: frame 0 is not valid base64");
  EXPECT_EQ(error("data:video/jpeg;base64,aGVsbG8="),
            "video/jpeg frame 0: unsupported image format: expected PNG, JPEG, WebP or GIF data");
}

}  // namespace
}  // namespace gemmaserve
