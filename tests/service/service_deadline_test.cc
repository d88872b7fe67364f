// get_batch through the service with a deadline: the service starts no read
// after it, and answers only once the reads under way have landed, so the
// client's memory (registered with the store, which the service writes
// itself) is never written after the client's call has returned. Without a
// caller's deadline the same holds for the client's own reply timeout, and
// for lone gets and puts: a put the service has not started when the client
// stops waiting never reads the memory its caller then reuses.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "doubles/fault_injection.h"
#include "doubles/io_gate.h"
#include "service/service_util.h"

namespace kvtier::testing {
namespace {

constexpr size_t kBytes = 20000;
constexpr int kBlocks = 6;
constexpr uint8_t kUntouched = 0xEE;

// A served store whose segment reads the test can hold: one reader, one
// read at a time, so a held read keeps every later one from starting.
struct GatedService {
  explicit GatedService(const std::string& dir, ServiceClientOptions co = {})
      : fs(std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem(IoBackend::kPosix))),
        served(dir, ServiceOptions{}, GatedOptions(fs)),
        buf(kBlocks * kBytes) {
    client = served.Client(co);
    ns = client->RegisterNamespace(TestSpec()).value();
    for (int i = 0; i < kBlocks; ++i) {
      auto p = Payload(ns, Key(i), kBytes);
      EXPECT_TRUE(client->Put(ns, Key(i), p.data(), p.size()).ok()) << i;
      keys.push_back(Key(i));
    }
    std::memset(buf.mem, kUntouched, buf.bytes);
    EXPECT_TRUE(client->RegisterMemory(buf.mem, buf.bytes, buf.fd, 0).ok());
    frags.resize(kBlocks);
    for (int i = 0; i < kBlocks; ++i) frags[i] = MutableFragment{buf.mem + i * kBytes, kBytes};
    for (int i = 0; i < kBlocks; ++i) items.push_back(GetItem{keys[i], {&frags[i], 1}});
  }
  static Options GatedOptions(const std::shared_ptr<FaultInjectionFileSystem>& fs) {
    Options o = SmallOptions();
    o.file_system = fs;
    o.read_threads = 1;
    o.queue_depth = 1;
    o.max_pending_reads = 8;
    return o;
  }
  bool Untouched(int i) const {
    for (size_t b = 0; b < kBytes; ++b)
      if (buf.mem[i * kBytes + b] != kUntouched) return false;
    return true;
  }
  bool Holds(int i) const {
    const auto want = Payload(ns, keys[i], kBytes);
    return std::memcmp(buf.mem + i * kBytes, want.data(), kBytes) == 0;
  }
  std::shared_ptr<FaultInjectionFileSystem> fs;
  ServedStore served;
  SharedBuffer buf;
  std::unique_ptr<Store> client;
  NamespaceId ns = 0;
  std::vector<std::string> keys;
  std::vector<MutableFragment> frags;
  std::vector<GetItem> items;
};

// A client that stops waiting for any reply after 2 s: the service is then
// told to start nothing on its memory after 1.5 s.
ServiceClientOptions TwoSecondReplies() {
  ServiceClientOptions co;
  co.op_timeout_ms = 2000;
  return co;
}

// Runs the batch on another thread while the first read is held on the
// "device" until `open_at`; says whether the call returned before that.
std::vector<Result<size_t>> HeldBatch(GatedService& g, Clock::time_point deadline, Clock::time_point open_at,
                                      bool* returned_early) {
  IoGate gate;
  gate.HoldReads(*g.fs);
  std::atomic<bool> returned{false};
  auto batch = std::async(std::launch::async, [&] {
    auto r = g.client->GetBatch(g.ns, g.items, deadline);
    returned.store(true);
    return r;
  });
  EXPECT_TRUE(gate.WaitHeld(1));
  std::this_thread::sleep_until(open_at);
  *returned_early = returned.load();
  gate.Open();
  auto res = batch.get();
  g.fs->SetBeforeRead(nullptr);
  return res;
}

TEST(ServiceGetBatchDeadline, ReadsNotStartedByTheDeadlineMissAndNothingLandsAfterTheReply) {
  TempDir dir;
  GatedService g(dir.path());
  const auto deadline = Clock::now() + std::chrono::milliseconds(300);
  bool early = false;
  auto res = HeldBatch(g, deadline, deadline + std::chrono::milliseconds(300), &early);
  EXPECT_FALSE(early) << "the client returned while the service could still write its memory";
  ASSERT_TRUE(res[0].ok()) << res[0].status().ToString();
  EXPECT_TRUE(g.Holds(0));
  for (int i = 1; i < kBlocks; ++i) {
    EXPECT_EQ(res[i].status().code(), Code::kTimedOut) << i << ": " << res[i].status().ToString();
    EXPECT_TRUE(g.Untouched(i)) << i;
  }
  // Nothing trails the reply: the memory stays as it was answered.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int i = 1; i < kBlocks; ++i) EXPECT_TRUE(g.Untouched(i)) << i;
}

// No deadline from the caller: the service is told to start no read later
// than the client's reply timeout less a margin (a quarter of it here), so
// that the reads under way land before the client stops waiting.
TEST(ServiceGetBatchDeadline, TheClientsReplyTimeoutBoundsWhenTheServiceStartsReads) {
  TempDir dir;
  GatedService g(dir.path(), TwoSecondReplies());
  const auto t0 = Clock::now();
  bool early = false;
  auto res = HeldBatch(g, kNoDeadline, t0 + std::chrono::milliseconds(1700), &early);
  EXPECT_FALSE(early);
  ASSERT_TRUE(res[0].ok()) << res[0].status().ToString();
  EXPECT_TRUE(g.Holds(0));
  for (int i = 1; i < kBlocks; ++i) {
    EXPECT_EQ(res[i].status().code(), Code::kTimedOut) << i << ": " << res[i].status().ToString();
    EXPECT_TRUE(g.Untouched(i)) << i;
  }
  // With the device quick again, the same batch reads everything.
  std::memset(g.buf.mem, kUntouched, g.buf.bytes);
  res = g.client->GetBatch(g.ns, g.items);
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_TRUE(res[i].ok()) << i << ": " << res[i].status().ToString();
    EXPECT_TRUE(g.Holds(i)) << i;
  }
}

// A lone get with no deadline of its own, queued behind a read the "device"
// holds past the client's reply timeout (2 s here): the client tells the
// service to start it by the timeout less the landing margin, so it misses
// and its memory stays as it was, also once the device is quick again.
// (The held read itself was under way: it lands when the device lets it,
// which only a device slower than the margin makes late.)
TEST(ServiceGetDeadline, ALoneGetNotStartedBeforeTheClientGivesUpNeverWritesItsMemory) {
  TempDir dir;
  GatedService g(dir.path(), TwoSecondReplies());
  const auto t0 = Clock::now();
  IoGate gate;
  gate.HoldReads(*g.fs);
  auto first = std::async(std::launch::async, [&] { return g.client->Get(g.ns, g.keys[0], {&g.frags[0], 1}); });
  ASSERT_TRUE(gate.WaitHeld(1));
  auto second = std::async(std::launch::async, [&] { return g.client->Get(g.ns, g.keys[1], {&g.frags[1], 1}); });
  std::this_thread::sleep_until(t0 + std::chrono::milliseconds(2300));
  gate.Open();
  auto r1 = first.get();
  auto r2 = second.get();
  EXPECT_EQ(r2.status().code(), Code::kTimedOut) << r2.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // what a late read would take to land
  EXPECT_TRUE(g.Untouched(1)) << "the service wrote a get's memory after the client had given up on it";
  g.fs->SetBeforeRead(nullptr);
  // Quick again: the same get lands.
  auto again = g.client->Get(g.ns, g.keys[1], {&g.frags[1], 1});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(g.Holds(1));
  (void)r1;
}

// A put from registered memory that waits for room in a full write queue
// (the record ahead of it held on the "device") past the client's reply
// timeout: the service refuses it once its start deadline passes, so when
// the caller reuses the memory (as an engine does after a failed put), the
// new bytes never land under the old key.
TEST(ServicePutDeadline, APutNotStartedBeforeTheClientGivesUpNeverReadsItsMemory) {
  TempDir dir;
  auto fs = std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem(IoBackend::kPosix));
  Options o = SmallOptions();
  o.file_system = fs;
  o.write_queue_bytes = 1 << 20;  // room for one of these records, not two
  constexpr size_t kPut = 600000;
  ServedStore served(dir.path(), ServiceOptions{}, o);
  auto client = served.Client(TwoSecondReplies());
  const NamespaceId ns = client->RegisterNamespace(TestSpec()).value();
  SharedBuffer buf(2 * kPut);
  ASSERT_NE(buf.mem, nullptr);
  const auto a = Payload(ns, "a", kPut), b = Payload(ns, "b", kPut), reused = Payload(ns, "b", kPut, 7);
  std::memcpy(buf.mem, a.data(), kPut);
  std::memcpy(buf.mem + kPut, b.data(), kPut);
  ASSERT_TRUE(client->RegisterMemory(buf.mem, buf.bytes, buf.fd, 0).ok());
  const auto t0 = Clock::now();
  IoGate gate;
  gate.HoldWrites(*fs);
  auto put_a = std::async(std::launch::async, [&] { return client->Put(ns, "a", buf.mem, kPut); });
  ASSERT_TRUE(gate.WaitHeld(1));
  Status put_b = client->Put(ns, "b", buf.mem + kPut, kPut);
  EXPECT_EQ(put_b.code(), Code::kTimedOut) << put_b.ToString();
  std::memcpy(buf.mem + kPut, reused.data(), kPut);  // the caller reuses its memory
  std::this_thread::sleep_until(t0 + std::chrono::milliseconds(2300));
  gate.Open();
  (void)put_a.get();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // what a late put would take to be queued
  ASSERT_TRUE(client->Flush().ok());
  fs->SetBeforeWrite(nullptr);
  std::vector<uint8_t> got(kPut);
  auto r = client->Get(ns, "b", got.data(), got.size());
  EXPECT_FALSE(r.ok()) << "a put the client gave up on stored the bytes its caller wrote afterwards";
  if (r.ok()) {
    EXPECT_NE(0, std::memcmp(got.data(), reused.data(), kPut));
  }
  // The record ahead of it is whole either way.
  auto ra = client->Get(ns, "a", got.data(), got.size());
  if (ra.ok()) {
    EXPECT_EQ(0, std::memcmp(got.data(), a.data(), kPut));
  }
}

}  // namespace
}  // namespace kvtier::testing
