// ChunkReader (src/remote/chunk_reader.*): the uploads' read-ahead of local
// segment chunks.
#include <gtest/gtest.h>

#ifdef KVTIER_WITH_CEPH

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "remote/chunk_reader.h"

namespace kvtier::remote {
namespace {

// The byte a chunk of (seg, off) holds at i: distinct per segment and offset.
uint8_t Byte(uint32_t seg, uint64_t off, size_t i) { return static_cast<uint8_t>(seg * 31 + off / 4096 + i); }

TEST(ChunkReader, EachTicketGetsItsOwnReadAndStatus) {
  std::atomic<int> reads{0};
  ChunkReader reader(
      [&](uint32_t seg, uint32_t, uint64_t off, void* buf, size_t len) -> Status {
        reads.fetch_add(1);
        if (seg == 7) return Status::NotFound("segment 7 was reclaimed");
        auto* p = static_cast<uint8_t*>(buf);
        for (size_t i = 0; i < len; ++i) p[i] = Byte(seg, off, i);
        return Status::OK();
      },
      3);
  constexpr size_t kLen = 8192;
  std::vector<std::vector<uint8_t>> bufs(40, std::vector<uint8_t>(kLen));
  std::vector<uint64_t> tickets;
  for (size_t i = 0; i < bufs.size(); ++i) {
    const uint32_t seg = i % 10 == 3 ? 7 : static_cast<uint32_t>(i % 4);
    tickets.push_back(reader.Start(seg, 1, i * 4096, bufs[i].data(), kLen));
  }
  // Waited for out of order: each ticket still finds its own answer.
  for (size_t j = bufs.size(); j-- > 0;) {
    const uint32_t seg = j % 10 == 3 ? 7 : static_cast<uint32_t>(j % 4);
    Status st = reader.Wait(tickets[j]);
    if (seg == 7) {
      EXPECT_EQ(st.code(), Code::kNotFound) << j;
      continue;
    }
    ASSERT_TRUE(st.ok()) << j << ": " << st.ToString();
    for (size_t i = 0; i < kLen; ++i) ASSERT_EQ(bufs[j][i], Byte(seg, j * 4096, i)) << j << " byte " << i;
  }
  EXPECT_EQ(reads.load(), 40);
}

TEST(ChunkReader, DestructionWaitsForReadsUnderWay) {
  // An upload that fails returns with reads queued and under way; the
  // buffers they write must not be written after the reader is gone.
  std::atomic<int> finished{0};
  std::vector<uint8_t> buf(4 * 4096, 0);
  {
    ChunkReader reader(
        [&](uint32_t, uint32_t, uint64_t off, void* b, size_t len) -> Status {
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          std::memset(b, 0xab, len);
          finished.fetch_add(1);
          (void)off;
          return Status::OK();
        },
        2);
    for (int i = 0; i < 4; ++i) reader.Start(0, 0, 0, buf.data() + i * 4096, 4096);
  }
  EXPECT_EQ(finished.load(), 4);
  for (uint8_t b : buf) ASSERT_EQ(b, 0xab);
}

}  // namespace
}  // namespace kvtier::remote

#endif  // KVTIER_WITH_CEPH
