// Puts from memory the client never registered are read by the service
// straight from the client (process_vm_readv): one host copy, into the RAM
// tier, instead of two through staging (issue 19). A store without a tier
// writes a staged put from staging, one copy already: there puts stay staged.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <future>
#include <tuple>

#include "service/service_util.h"

namespace kvtier::testing {
namespace {

// A store for 3 MiB blocks with a RAM tier of `ram_bytes`.
Options StoreWithTier(uint64_t ram_bytes) {
  Options o = SmallOptions();
  o.segment_size_bytes = 8 << 20;
  o.capacity_bytes = 64 << 20;
  o.write_queue_bytes = 16 << 20;
  o.ram_tier_bytes = ram_bytes;
  return o;
}

// The tier holds the blocks (they are read into it), or is smaller than a
// block (they are read into the service's own buffer); each put is read by
// the connection's thread alone, or split among three.
class ClientMemoryPuts : public ::testing::TestWithParam<std::tuple<uint64_t, int32_t>> {
 protected:
  uint64_t TierBytes() const { return std::get<0>(GetParam()); }
  Options StoreOptions() const { return StoreWithTier(TierBytes()); }
  ServiceOptions Service() const {
    ServiceOptions so;
    so.client_read_threads = std::get<1>(GetParam());
    return so;
  }
  TempDir dir_;
};

uint64_t ClientMemoryPutsSoFar(ServedStore& served) { return served.service()->GetStats().client_memory_puts; }

TEST_P(ClientMemoryPuts, PrivateMemoryIsReadOnceByTheServiceNotStaged) {
  ServedStore served(dir_.path(), Service(), StoreOptions());
  ServiceClientOptions co;
  co.staging_bytes = 2 << 20;  // smaller than the blocks: staging could not carry them
  auto c = served.Client(co);
  ASSERT_NE(c, nullptr);
  const NamespaceId ns = c->RegisterNamespace(TestSpec()).value();
  constexpr size_t kBlock = 3 << 20;
  // A blocking put from a private vector.
  auto one = Payload(ns, Key(1), kBlock);
  Status st = c->Put(ns, Key(1), one.data(), one.size());
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ClientMemoryPutsSoFar(served), 1u);
  EXPECT_EQ(served.store()->GetVector(ns, Key(1)).value(), one);
  // A batch whose payloads are two pieces each, gathered in order.
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<std::array<Fragment, 2>> frags(3);
  std::vector<PutItem> items;
  for (int i = 0; i < 3; ++i) payloads.push_back(Payload(ns, Key(10 + i), kBlock));
  std::vector<std::string> keys;
  for (int i = 0; i < 3; ++i) keys.push_back(Key(10 + i));
  for (int i = 0; i < 3; ++i) {
    frags[i] = {Fragment{payloads[i].data(), 4096}, Fragment{payloads[i].data() + 4096, kBlock - 4096}};
    items.push_back(PutItem{keys[i], frags[i]});
  }
  for (const Status& s : c->PutBatch(ns, items)) ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(ClientMemoryPutsSoFar(served), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(served.store()->GetVector(ns, keys[i]).value(), payloads[i]) << i;
  // A borrowed asynchronous put: its buffer stays valid until the callback.
  auto borrowed = Payload(ns, Key(20), kBlock);
  std::promise<Status> done;
  const Fragment bf{borrowed.data(), borrowed.size()};
  c->PutAsyncBorrowed(ns, Key(20), {&bf, 1}, [&done](Status s) { done.set_value(std::move(s)); });
  st = done.get_future().get();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ClientMemoryPutsSoFar(served), 5u);
  EXPECT_EQ(served.store()->GetVector(ns, Key(20)).value(), borrowed);
  // PutAsync lets its caller reuse the buffer at once, so it still copies
  // into staging: here too small for the block.
  std::promise<Status> copied;
  c->PutAsync(ns, Key(21), {&bf, 1}, [&copied](Status s) { copied.set_value(std::move(s)); });
  EXPECT_EQ(copied.get_future().get().code(), Code::kNotAdmitted);
  EXPECT_EQ(ClientMemoryPutsSoFar(served), 5u);
  // One client, one put at a time: with helpers, each was split.
  EXPECT_EQ(served.service()->GetStats().client_memory_split_puts, std::get<1>(GetParam()) > 1 ? 5u : 0u);
  // A tier smaller than a block holds none: each was read into the
  // service's own buffer and written from there.
  if (TierBytes() < kBlock) {
    EXPECT_EQ(served.store()->GetStats().ram_blocks, 0u);
  }
  // Where the tier holds them, the puts' blocks are there (read into it,
  // not copied again): a get of one is a RAM hit.
  if (TierBytes() > kBlock) {
    const uint64_t before = served.store()->GetStats().hits_ram;
    std::vector<uint8_t> back(kBlock);
    ASSERT_EQ(c->Get(ns, Key(1), back.data(), back.size()).value(), kBlock);
    EXPECT_EQ(back, one);
    EXPECT_EQ(served.store()->GetStats().hits_ram, before + 1);
    // The hash states the service recorded as it read (RamTier marks), by
    // which a read shares a block's copy out, held: no copy failed its check.
    EXPECT_EQ(served.store()->GetStats().ram_checksum_failures, 0u);
  }
}

// Puts of a client of `served` (with 2 MiB of staging) go through staging:
// a 3 MiB block is refused for want of room, a 1 MiB one lands, and the
// service read none from the client.
void ExpectPutsStaged(ServedStore& served, ServiceClientOptions co) {
  co.staging_bytes = 2 << 20;
  auto c = served.Client(co);
  ASSERT_NE(c, nullptr);
  const NamespaceId ns = c->RegisterNamespace(TestSpec()).value();
  auto big = Payload(ns, Key(1), 3 << 20);
  EXPECT_EQ(c->Put(ns, Key(1), big.data(), big.size()).code(), Code::kNotAdmitted);
  auto small = Payload(ns, Key(2), 1 << 20);
  ASSERT_TRUE(c->Put(ns, Key(2), small.data(), small.size()).ok());
  EXPECT_EQ(served.store()->GetVector(ns, Key(2)).value(), small);
  EXPECT_EQ(ClientMemoryPutsSoFar(served), 0u);
}

TEST_P(ClientMemoryPuts, AClientThatDeclinesHasItsPutsStaged) {
  ServedStore served(dir_.path(), Service(), StoreOptions());
  ServiceClientOptions co;
  co.service_reads_memory = false;
  ExpectPutsStaged(served, co);
}

// As root, a process becomes nobody: the kernel then checks the service's
// reads against the client's state (root may read any process). A change
// of user leaves a process not dumpable, which no other process may read:
// made dumpable again, as a process that never changed user is.
bool BecomeNobodyIfRoot() {
  if (::geteuid() != 0) return true;
  return ::setresgid(65534, 65534, 65534) == 0 && ::setresuid(65534, 65534, 65534) == 0 &&
         ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0;
}

// A client that stops being readable after hello (PR_SET_DUMPABLE 0, as a
// process may for its own reasons) has its puts refused unread by the
// service, sent again through staging, and then staged from the start:
// blocking and borrowed ones alike, every one stored whole. Service and
// client are processes of one (non-root) user. Each put read by one thread,
// or split among three.
class ClientMemoryPutsFallBack : public ::testing::TestWithParam<int32_t> {};

TEST_P(ClientMemoryPutsFallBack, APutTheServiceCanNoLongerReadIsStagedInstead) {
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0777), 0);
  const std::string sock = dir.path() + "/s.sock";
  int done_pipe[2];
  ASSERT_EQ(::pipe(done_pipe), 0);
  constexpr size_t kBlock = 512 << 10;
  const pid_t service = ::fork();
  ASSERT_GE(service, 0);
  if (service == 0) {  // the service: serves until the client is done, then checks what it stored
    ::close(done_pipe[1]);
    if (!BecomeNobodyIfRoot()) ::_exit(10);
    int code = 0;
    {
      Options o = SmallOptions();
      o.ram_tier_bytes = 8 << 20;
      ServiceOptions so;
      so.client_read_threads = GetParam();
      ServedStore served(dir.path(), so, o);
      if (served.service() == nullptr) ::_exit(11);
      char c;
      if (::read(done_pipe[0], &c, 1) != 1) ::_exit(12);
      const NamespaceId ns = served.store()->RegisterNamespace(TestSpec()).value();
      for (int k = 1; k <= 3; ++k) {
        auto got = served.store()->GetVector(ns, Key(k));
        if (!got.ok() || *got != Payload(ns, Key(k), kBlock)) code = 20 + k;
      }
      // The first put only was read from the client's memory.
      if (code == 0 && served.service()->GetStats().client_memory_puts != 1) code = 30;
      if (code == 0 && served.service()->GetStats().client_memory_split_puts != (GetParam() > 1 ? 1u : 0u)) code = 31;
    }
    ::_exit(code);
  }
  ::close(done_pipe[0]);
  const pid_t client = ::fork();
  ASSERT_GE(client, 0);
  if (client == 0) {
    if (!BecomeNobodyIfRoot()) ::_exit(10);
    for (int i = 0; i < 1000 && ::access(sock.c_str(), F_OK) != 0; ++i) ::usleep(10000);
    Options o;
    o.client.staging_bytes = 4 << 20;
    auto c = Store::Open("unix:" + sock, o);
    if (!c.ok()) ::_exit(11);
    const NamespaceId ns = (*c)->RegisterNamespace(TestSpec()).value();
    auto one = Payload(ns, Key(1), kBlock);
    Status first = (*c)->Put(ns, Key(1), one.data(), one.size());
    if (!first.ok()) {
      std::fprintf(stderr, "first put: %s\n", first.ToString().c_str());
      ::_exit(21);
    }
    if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) ::_exit(12);
    auto two = Payload(ns, Key(2), kBlock);
    if (!(*c)->Put(ns, Key(2), two.data(), two.size()).ok()) ::_exit(22);
    auto three = Payload(ns, Key(3), kBlock);
    std::promise<Status> done;
    const Fragment f{three.data(), three.size()};
    (*c)->PutAsyncBorrowed(ns, Key(3), {&f, 1}, [&done](Status s) { done.set_value(std::move(s)); });
    if (!done.get_future().get().ok()) ::_exit(23);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(client, &status, 0), client);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "client: " << status;
  ASSERT_EQ(::write(done_pipe[1], "x", 1), 1);
  ::close(done_pipe[1]);
  ASSERT_EQ(::waitpid(service, &status, 0), service);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "service: " << status;
}

INSTANTIATE_TEST_SUITE_P(Readers, ClientMemoryPutsFallBack, ::testing::Values(int32_t{1}, int32_t{3}),
                         [](const auto& info) { return info.param > 1 ? "SplitAmongThree" : "OneReader"; });

INSTANTIATE_TEST_SUITE_P(RamTier, ClientMemoryPuts,
                         ::testing::Combine(::testing::Values(uint64_t{32} << 20, uint64_t{2} << 20),
                                            ::testing::Values(int32_t{1}, int32_t{3})),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) > (3u << 20) ? "HoldsTheBlocks"
                                                                                    : "SmallerThanABlock") +
                                  (std::get<1>(info.param) > 1 ? "SplitAmongThree" : "OneReader");
                         });

TEST(ClientMemoryPutsWithoutATier, AreStagedSinceStagingIsOneCopyThere) {
  TempDir dir;
  ServedStore served(dir.path(), ServiceOptions{}, StoreWithTier(0));
  ExpectPutsStaged(served, ServiceClientOptions{});
}

}  // namespace
}  // namespace kvtier::testing
