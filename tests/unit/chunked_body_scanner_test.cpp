// ChunkedBodyScanner: where a chunked request body ends (RFC 9112 7.1), strictly, so the server
// knows whether httplib's lenient reader stopped at the body's end or left part of it unread.
#include <gtest/gtest.h>

#include <string>

#include "server/http/client_stream.h"

namespace gemmaserve {
namespace {

bool done_after(const std::string& body, bool byte_by_byte = false) {
  ChunkedBodyScanner scanner;
  if (byte_by_byte) {
    for (char c : body) scanner.feed(&c, 1);
  } else {
    scanner.feed(body.data(), body.size());
  }
  return scanner.done();
}

TEST(ChunkedBodyScanner, EndsAfterTheLastChunkAndTheEmptyLine) {
  const std::string body =
      "5\r\nhello\r\n1A;name=value\r\n" + std::string(26, 'x') + "\r\n0\r\n\r\n";
  EXPECT_TRUE(done_after(body));
  EXPECT_TRUE(done_after(body, true));
  EXPECT_FALSE(done_after(body.substr(0, body.size() - 1)));
  EXPECT_TRUE(done_after("0\r\n\r\n"));
  EXPECT_TRUE(done_after("3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n"));
}

TEST(ChunkedBodyScanner, ChunkDataMayHoldAnything) {
  EXPECT_TRUE(done_after("7\r\n0\r\n\r\n\r\n\r\n0\r\n\r\n"));
  EXPECT_FALSE(done_after("7\r\n0\r\n\r\n\r\n"));
}

TEST(ChunkedBodyScanner, RefusesWhatHttplibReadsLeniently) {
  // httplib ends the body at a chunk not followed by CRLF, and reads "0x5" as 5.
  EXPECT_FALSE(done_after("2\r\n{}XX\r\n0\r\n\r\n"));
  EXPECT_FALSE(done_after("0x5\r\nhello\r\n0\r\n\r\n"));
  EXPECT_FALSE(done_after("-1\r\n0\r\n\r\n"));
  EXPECT_FALSE(done_after("\r\n0\r\n\r\n"));
  EXPECT_FALSE(done_after("5\nhello\r\n0\r\n\r\n"));
  EXPECT_FALSE(done_after("0\r\n\n"));
  EXPECT_FALSE(done_after("fffffffffffffffff\r\n"));
  // Read past the end: what httplib took as the body was not this one.
  EXPECT_FALSE(done_after("0\r\n\r\nG"));
}

}  // namespace
}  // namespace gemmaserve
