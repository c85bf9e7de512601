// The chat page's routes without a model: every file of src/server/chat_page/assets/ is compiled
// in and served with its content type, GET / is the page, and the page fetches nothing from
// another origin (it must work offline), and its example questions are ones the README shows the
// demo model answering. The browser behaviour (a click sends the example) is
// tests/scripts/chat_page.sh's.
#include "server/chat_page/chat_page.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "server/chat_page/web_assets.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ChatPageTest, EveryWebFileIsEmbeddedByteForByte) {
  const std::filesystem::path web = testing::source_dir() / "src/server/chat_page/assets";
  std::set<std::string> on_disk, embedded;
  for (const auto& entry : std::filesystem::directory_iterator(web)) {
    on_disk.insert("/" + entry.path().filename().string());
  }
  for (const WebAsset& a : web_assets()) {
    embedded.insert(std::string(a.path));
    EXPECT_EQ(a.body, read_file(web / std::string(a.path.substr(1)))) << a.path;
  }
  EXPECT_EQ(embedded, on_disk);
}

TEST(ChatPageTest, PageReferencesNothingOutsideTheServer) {
  const std::regex external(R"((src|href)\s*=\s*["']?(https?:)?//|@import|fetch\(\s*["']https?:)");
  for (const WebAsset& a : web_assets()) {
    const std::string body(a.body);
    EXPECT_FALSE(std::regex_search(body, external)) << a.path << " loads from another origin";
  }
}

TEST(ChatPageTest, ExampleQuestionsAreOnesTheReadmeShowsTheDemoModelAnswering) {
  const std::string page = read_file(testing::source_dir() / "src/server/chat_page/assets/index.html");
  const std::string readme = read_file(testing::source_dir() / "README.md");
  // The README's answer list: the lines between the demo's "```text" fence and the next fence.
  const size_t start = readme.find("```text\n\"What is 47 + 38?\"");
  ASSERT_NE(start, std::string::npos) << "README.md has no demo answer list";
  const std::string answers = readme.substr(start, readme.find("```\n", start + 8) - start);
  const std::regex example(R"rx(class="example" data-prompt="([^"]+)")rx");
  int count = 0;
  for (std::sregex_iterator it(page.begin(), page.end(), example), end; it != end; ++it) {
    const std::string question = (*it)[1];
    EXPECT_NE(answers.find("\"" + question + "\""), std::string::npos)
        << question << " is on the chat page but not in README.md's demo answers";
    ++count;
  }
  EXPECT_GE(count, 5);
}

TEST(ChatPageTest, RootIsThePageAndItsFilesAreServedWithTheirTypes) {
  httplib::Server server;
  register_chat_page(server);
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread listener([&] { server.listen_after_bind(); });
  // bind_to_any_port already listens: the kernel queues the client until accept() runs.
  httplib::Client client("127.0.0.1", port);

  auto root = client.Get("/");
  ASSERT_TRUE(root);
  EXPECT_EQ(root->status, 200);
  EXPECT_EQ(root->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(root->body.find("<title>gemmaserve chat</title>"), std::string::npos);
  // Every script and stylesheet the page names is served, with the type a browser accepts.
  const std::pair<const char*, const char*> linked[] = {
      {"/chat.js", "text/javascript; charset=utf-8"}, {"/chat.css", "text/css; charset=utf-8"}};
  for (const auto& [path, type] : linked) {
    EXPECT_NE(root->body.find(std::string("\"") + path + "\""), std::string::npos) << path;
    auto r = client.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_EQ(r->get_header_value("Content-Type"), type) << path;
    EXPECT_EQ(r->get_header_value("Cache-Control"), "no-cache") << path;
  }
  auto missing = client.Get("/nope.js");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);

  server.stop();
  listener.join();
}

}  // namespace
}  // namespace gemmaserve
