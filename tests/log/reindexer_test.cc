// The re-indexing that recovery and Repair share: a scanned record is taken
// only if nothing newer for its key is in the index or earlier in the same
// uncommitted batch, whatever the order the scan meets them in.
#include "log/reindexer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

namespace kvtier {
namespace {

class ReindexerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvtier_reindexer_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto r = Index::Open(dir_ + "/index", IndexOpenOptions{});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    index_ = std::move(r).value();
  }
  // A scanned record of `key` in namespace 1 at `offset`, put as `sequence`.
  static ScannedRecord Rec(const std::string& key, uint64_t sequence, uint64_t offset) {
    ScannedRecord rec;
    rec.offset = offset;
    rec.header.ns_id = 1;
    rec.header.key_len = static_cast<uint16_t>(key.size());
    rec.header.sequence = sequence;
    rec.header.payload_len = 4096;
    rec.header.payload_checksum = sequence * 7;
    rec.key = key;
    rec.record_bytes = format::RecordBytes(rec.header.key_len, 4096, 0);
    return rec;
  }
  uint64_t IndexedSequence(const std::string& key) {
    auto e = index_->Get(1, key);
    EXPECT_TRUE(e.ok() && e->has_value()) << key;
    return e.ok() && e->has_value() ? (*e)->sequence : 0;
  }

  void TearDown() override {
    index_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string dir_;
  std::unique_ptr<Index> index_;
};

// A reinserted block keeps its put's sequence, so the older version can lie
// after the newer one in the same scan: the newer one stays indexed.
TEST_F(ReindexerTest, AnOlderVersionLaterInTheScanDoesNotReplaceANewerOne) {
  Reindexer r(index_.get());
  EXPECT_TRUE(*r.Offer(Rec("a", 20, 4096), 3, 1));
  EXPECT_FALSE(*r.Offer(Rec("a", 10, 16384), 3, 1));
  EXPECT_TRUE(*r.Offer(Rec("b", 11, 20480), 3, 1));
  EXPECT_TRUE(*r.Offer(Rec("b", 21, 24576), 3, 1));  // newer after older: replaces it
  ASSERT_TRUE(r.Finish().ok());
  EXPECT_EQ(IndexedSequence("a"), 20u);
  EXPECT_EQ(IndexedSequence("b"), 21u);
  auto e = index_->Get(1, "a");
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_EQ((*e)->segment, 3u);
  EXPECT_EQ((*e)->offset, 4096u);
}

// The same across a commit (small batches) and against what the index held
// before the scan.
TEST_F(ReindexerTest, CommittedAndEarlierEntriesAreHonoured) {
  {
    Reindexer first(index_.get());
    EXPECT_TRUE(*first.Offer(Rec("held", 50, 4096), 2, 1));
    ASSERT_TRUE(first.Finish().ok());
  }
  Reindexer r(index_.get(), /*remove_marks=*/false, /*commit_every=*/1);
  EXPECT_FALSE(*r.Offer(Rec("held", 40, 8192), 4, 1));  // older than the index's
  EXPECT_FALSE(*r.Offer(Rec("held", 50, 8192), 4, 1));  // the same put, seen again
  EXPECT_TRUE(*r.Offer(Rec("x", 30, 12288), 4, 1));     // committed at once
  EXPECT_FALSE(*r.Offer(Rec("x", 25, 16384), 4, 1));
  ASSERT_TRUE(r.Finish().ok());
  EXPECT_EQ(IndexedSequence("held"), 50u);
  EXPECT_EQ(IndexedSequence("x"), 30u);
}

// A remove's mark (left while a failed write held the checkpoint back)
// keeps out the records of the key written before the remove, and only
// those; marks are read only when asked for.
TEST_F(ReindexerTest, ARemoveMarkKeepsOutTheRecordsBeforeTheRemove) {
  IndexBatch b;
  b.MarkRemoved(1, "gone", 40);
  ASSERT_TRUE(index_->Commit(b, false).ok());
  ASSERT_TRUE(*index_->HasRemoveMarks());
  EXPECT_EQ(**index_->RemovedBelow(1, "gone"), 40u);
  EXPECT_FALSE(index_->RemovedBelow(2, "gone")->has_value());  // another namespace's key
  {
    Reindexer r(index_.get(), /*remove_marks=*/true);
    EXPECT_FALSE(*r.Offer(Rec("gone", 39, 4096), 3, 1));  // written before the remove
    EXPECT_TRUE(*r.Offer(Rec("other", 12, 8192), 3, 1));
    ASSERT_TRUE(r.Finish().ok());
    EXPECT_FALSE(index_->Get(1, "gone")->has_value());
    Reindexer later(index_.get(), /*remove_marks=*/true);
    EXPECT_TRUE(*later.Offer(Rec("gone", 40, 12288), 3, 1));  // put again after it
    ASSERT_TRUE(later.Finish().ok());
    EXPECT_EQ(IndexedSequence("gone"), 40u);
  }
  {
    Reindexer ignoring(index_.get());
    EXPECT_FALSE(*ignoring.Offer(Rec("gone", 39, 4096), 3, 1));  // older than the entry now
  }
  ASSERT_TRUE(index_->DropRemoveMarks().ok());
  EXPECT_FALSE(*index_->HasRemoveMarks());
  EXPECT_FALSE(index_->RemovedBelow(1, "gone")->has_value());
}

}  // namespace
}  // namespace kvtier
