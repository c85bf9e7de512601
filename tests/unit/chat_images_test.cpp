// Image content parts in chat messages (server/chat_images): the forms vLLM's parser accepts,
// the template's view of them and the decoding through the media room, with exact messages.
#include "server/shared/chat_images.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string url_error(const char* part) {
  try {
    image_part_url(ordered_json::parse(part));
  } catch (const InputError& e) {
    EXPECT_EQ(e.param().value_or(""), "messages");
    return e.what();
  }
  return "no error";
}

TEST(ChatImages, AcceptsVllmsImagePartForms) {
  const char* forms[] = {
      R"({"type":"image_url","image_url":{"url":"data:x"}})",
      R"({"type":"image_url","image_url":{"url":"data:x","detail":"auto"}})",
      R"({"type":"image_url","image_url":{"url":"data:x","detail":"high"}})",
      R"({"type":"input_image","image_url":"data:x"})",
      R"({"image_url":"data:x"})",
      R"({"image_url":{"url":"data:x"}})",
  };
  for (const char* f : forms) {
    const ordered_json part = ordered_json::parse(f);
    EXPECT_TRUE(is_image_part(part)) << f;
    EXPECT_EQ(image_part_url(part), "data:x") << f;
  }
  EXPECT_FALSE(is_image_part(ordered_json::parse(R"({"type":"text","text":"x"})")));
  EXPECT_FALSE(is_image_part(ordered_json::parse(R"({"type":"image"})")));
}

TEST(ChatImages, MalformedImagePartsAre400s) {
  EXPECT_EQ(url_error(R"({"type":"image_url","image_url":"data:x"})"),
            "image_url content parts need image_url.url (a string)");
  EXPECT_EQ(url_error(R"({"type":"image_url","image_url":{"url":5}})"),
            "image_url content parts need image_url.url (a string)");
  EXPECT_EQ(url_error(R"({"type":"image_url"})"),
            "image_url content parts need image_url.url (a string)");
  EXPECT_EQ(url_error(R"({"type":"input_image","image_url":{"url":"data:x"}})"),
            "input_image content parts need image_url (a string)");
  EXPECT_EQ(url_error(R"({"type":"image_url","image_url":{"url":"data:x","detail":"max"}})"),
            "image_url.detail: Input should be 'auto', 'low' or 'high'");
}

TEST(ChatImages, TemplateSeesImagePlaceholdersInOrder) {
  const ordered_json messages = ordered_json::parse(R"([
    {"role":"system","content":"be brief"},
    {"role":"user","content":[{"type":"text","text":"a"},
                              {"type":"image_url","image_url":{"url":"u1"}},
                              {"image_url":"u2"},
                              {"type":"text","text":"b"}]}])");
  EXPECT_EQ(image_urls_of(messages), (std::vector<std::string>{"u1", "u2"}));
  const ordered_json expected = ordered_json::parse(R"([
    {"role":"system","content":"be brief"},
    {"role":"user","content":[{"type":"text","text":"a"},{"type":"image"},{"type":"image"},
                              {"type":"text","text":"b"}]}])");
  EXPECT_EQ(messages_for_template(messages), expected);
}

TEST(ChatImages, LoadsAndDecodesOrReportsTheDecoder) {
  media::MediaConnector media;
  // A 1x1 PNG.
  const std::string png =
      "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AA"
      "AAMBAQDJ/pLvAAAAAElFTkSuQmCC";
  const auto images = load_chat_images(media, {png, png});
  ASSERT_EQ(images.size(), 2u);
  EXPECT_EQ(images[1].width, 1);
  EXPECT_EQ(images[1].pixels.size(), 3u);
  try {
    load_chat_images(media, {png, "data:image/png;base64,iVBORw0KGgo="});
    ADD_FAILURE() << "a PNG signature alone decoded";
  } catch (const InputError& e) {
    EXPECT_EQ(e.param().value_or(""), "messages");
    EXPECT_EQ(std::string(e.what()).rfind("invalid PNG image: ", 0), 0u) << e.what();
  }
}

// The server's path is vLLM's media loader (ImageMediaIO: RGBA pasted on white with its alpha),
// not Hugging Face's convert("RGB"), which the offline API's decoded pictures get.
TEST(ChatImages, RgbaImageIsCompositedOnWhiteAsVllmsMediaLoader) {
  media::MediaConnector media;
  // A 2x1 RGBA PNG: (200, 30, 60) fully transparent, then (10, 200, 10) opaque.
  const std::string png =
      "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAYAAAD0In+KAAAAEUlEQVR4nGM4IWfDwHWC"
      "6z8ADBYC/jId5+gAAAAASUVORK5CYII=";
  const auto images = load_chat_images(media, {png});
  ASSERT_EQ(images.size(), 1u);
  EXPECT_EQ(images[0].pixels, (std::vector<std::uint8_t>{255, 255, 255, 10, 200, 10}));
}

}  // namespace
}  // namespace gemmaserve
