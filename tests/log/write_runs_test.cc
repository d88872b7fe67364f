// WriteRuns: writes contiguous on disk and in memory merge into one request,
// split at the chunk size; anything else starts a new request.
#include "log/write_runs.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(WriteRuns, MergesContiguousWritesAndSplitsAtTheChunk) {
  uint8_t mem[64 * 1024];
  File* a = reinterpret_cast<File*>(0x1000);  // only compared, never used
  File* b = reinterpret_cast<File*>(0x2000);
  WriteRuns runs(16 * 1024);
  runs.Add(a, 4096, mem, 4096);
  runs.Add(a, 8192, mem + 4096, 8192);            // follows on disk and in memory: merged
  ASSERT_EQ(runs.requests().size(), 1u);
  EXPECT_EQ(runs.requests()[0].len, 12288u);
  runs.Add(a, 20480, mem + 12288, 4096);          // a gap on disk: new request
  runs.Add(b, 24576, mem + 16384, 4096);          // another file: new request
  runs.Add(b, 28672, mem + 40960, 4096);          // a gap in memory: new request
  ASSERT_EQ(runs.requests().size(), 4u);
  runs.Clear();
  runs.Add(a, 0, mem, 40 * 1024);                 // split at 16 KiB
  ASSERT_EQ(runs.requests().size(), 3u);
  EXPECT_EQ(runs.requests()[0].len, 16u * 1024);
  EXPECT_EQ(runs.requests()[2].offset, 32u * 1024);
  EXPECT_EQ(runs.requests()[2].buf, mem + 32 * 1024);
  EXPECT_EQ(runs.requests()[2].len, 8u * 1024);
  runs.Add(a, 40 * 1024, mem + 40 * 1024, 12 * 1024);  // tops up the last chunk, then a new one
  ASSERT_EQ(runs.requests().size(), 4u);
  EXPECT_EQ(runs.requests()[2].len, 16u * 1024);
  EXPECT_EQ(runs.requests()[3].len, 4u * 1024);
  for (const IoRequest& r : runs.requests()) EXPECT_EQ(r.op, IoRequest::Op::kWrite);
}

}  // namespace
}  // namespace kvtier
