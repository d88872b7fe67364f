// The service against clients that die, a service that dies, hostile bytes
// on its socket, and two users (issue 19).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include "client/service_store.h"
#include "service/service_util.h"
#include "wire/frame_reader.h"
#include "wire/messages.h"
#include "wire/region.h"
#include "wire/requests.h"
#include "wire/socket_io.h"
#include "wire/wire.h"

namespace kvtier::testing {
namespace {

TEST(ServiceFaults, AClientKilledMidRequestLeavesNothingBehind) {
  TempDir dir;
  ServedStore served(dir.path());
  const NamespaceId ns = served.store()->RegisterNamespace(TestSpec()).value();
  for (int round = 0; round < 5; ++round) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    ReapOnExit reap(&child);
    if (child == 0) {
      Options o;
      o.client.staging_bytes = 8 << 20;
      auto c = Store::Open(served.address(), o);
      if (!c.ok()) _exit(2);
      (void)(*c)->RegisterNamespace(TestSpec());
      auto p = Payload(ns, Key(round), 300000);
      for (int i = 0;; ++i) {  // puts and gets until killed
        Fragment f{p.data(), p.size()};
        (*c)->PutAsync(ns, Key(1000 * round + i), {&f, 1}, nullptr);
        std::vector<uint8_t> buf(300000);
        (void)(*c)->Get(ns, Key(1000 * round + i / 2), buf.data(), buf.size());
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + 20 * round));
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    // Its connection ends, its requests finish, its regions go.
    ASSERT_TRUE(Eventually([&] { return served.service()->GetStats().clients == 0; }));
    EXPECT_EQ(served.service()->GetStats().regions, 0u);
  }
  // Whatever it put is whole: every block the store holds verifies.
  auto rep = served.store()->Verify(VerifyOptions{true, nullptr});
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok());
  size_t blocks = 0;
  ASSERT_TRUE(served.store()->ListBlocks(ns, "", [&](const BlockInfo& b) {
                ++blocks;
                auto got = served.store()->GetVector(ns, b.key);
                EXPECT_TRUE(got.ok());
                return true;
              }).ok());
  EXPECT_GT(blocks, 0u);
  // And the service still serves.
  auto c = served.Client();
  ASSERT_NE(c, nullptr);
  auto p = Payload(ns, Key(1), 5000);
  EXPECT_TRUE(c->Put(ns, Key(1), p.data(), p.size()).ok());
}

// `kvtier serve` for `store_dir` in a process of its own.
pid_t ServeInChild(const std::string& store_dir, const std::string& socket) {
  const pid_t child = fork();
  if (child != 0) return child;
  execl(KVTIER_CLI, KVTIER_CLI, "serve", store_dir.c_str(), "--socket", socket.c_str(), "--metrics-listen", "off",
        "--segment-size", "4M", "--capacity", "64M", "--log", (store_dir + ".log").c_str(), nullptr);
  _exit(127);
}

// `spin_us`: the caller sleeps for its reply (0), or spins reading the
// socket itself (then the service's death reaches it there, not through
// the reader thread).
void ServiceKilledGivesErrorsNotHangsThenClientsReconnect(int32_t spin_us) {
  TempDir dir;
  const std::string socket = dir.Sub("s.sock"), store = dir.Sub("store");
  pid_t server = ServeInChild(store, socket);
  ReapOnExit reap(&server);
  Options o;
  o.client.staging_bytes = 4 << 20;
  o.client.op_timeout_ms = 5000;
  o.client.reply_spin_us = spin_us;
  std::unique_ptr<Store> c;
  ASSERT_TRUE(Eventually([&] {
    auto s = Store::Open("unix:" + socket, o);
    if (s.ok()) c = std::move(s).value();
    return c != nullptr;
  }));
  const NamespaceId ns = c->RegisterNamespace(TestSpec()).value();
  for (int i = 0; i < 30; ++i) {
    auto p = Payload(ns, Key(i), 7000);
    ASSERT_TRUE(c->Put(ns, Key(i), p.data(), p.size()).ok());  // acknowledged: durable
  }
  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);
  // Every call fails promptly; nothing hangs.
  const auto t0 = Clock::now();
  EXPECT_FALSE(c->GetVector(ns, Key(1)).ok());
  auto p = Payload(ns, Key(100), 7000);
  EXPECT_FALSE(c->Put(ns, Key(100), p.data(), p.size()).ok());
  EXPECT_FALSE(c->LookupPrefix(ns, std::vector<std::string_view>{Key(1)}).ok());
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  // The service is back (recovering the store): the same client goes on,
  // with every acknowledged block intact.
  server = ServeInChild(store, socket);
  ASSERT_TRUE(Eventually([&] { return c->GetVector(ns, Key(0)).ok(); }));
  for (int i = 0; i < 30; ++i) EXPECT_EQ(c->GetVector(ns, Key(i)).value(), Payload(ns, Key(i), 7000)) << i;
  EXPECT_TRUE(c->Put(ns, Key(100), p.data(), p.size()).ok());
  c.reset();
  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);
}

TEST(ServiceFaults, ServiceKilledGivesErrorsNotHangsThenClientsReconnect) {
  ServiceKilledGivesErrorsNotHangsThenClientsReconnect(0);
}

TEST(ServiceFaults, ServiceKilledGivesErrorsNotHangsToSpinningCallersToo) {
  ServiceKilledGivesErrorsNotHangsThenClientsReconnect(2000);
}

// A spin of 1 us: the calls go on to sleep on the socket and their eventfd,
// where the service's death must reach them too.
TEST(ServiceFaults, ServiceKilledGivesErrorsNotHangsToCallersSleepingOnTheSocket) {
  ServiceKilledGivesErrorsNotHangsThenClientsReconnect(1);
}

// Raw frames on the socket, as a hostile or broken client sends them.
class RawClient {
 public:
  explicit RawClient(const std::string& socket)
      : fd_(wire::ConnectUnix(socket).value()), frames_(fd_.get(), /*idle_forever=*/false) {
    wire::SetTimeouts(fd_.get(), 2000, 2000).IgnoreError();
  }
  Status Send(std::string_view bytes, const std::vector<int>& fds = {}) {
    return wire::SendFrames(fd_.get(), bytes, fds);
  }
  Status Recv(wire::Frame* f) { return frames_.Next(f); }
  Status Hello() {
    wire::WireWriter w;
    wire::Encode(w, wire::HelloRequest{"raw", 0, 0, {}});
    KVTIER_RETURN_IF_ERROR(Send(w.Frame(static_cast<uint16_t>(wire::Op::kHello), 1)));
    wire::Frame f;
    KVTIER_RETURN_IF_ERROR(Recv(&f));
    wire::WireReader r(f.body);
    return r.Status();
  }
  // Hello offering `probe` at `address`; *reads: whether the reply says the
  // service reads this client's memory.
  Status HelloWithProbe(const void* address, const std::string& probe, bool* reads) {
    wire::WireWriter w;
    wire::Encode(w, wire::HelloRequest{"raw", 0, reinterpret_cast<uintptr_t>(address), probe});
    KVTIER_RETURN_IF_ERROR(Send(w.Frame(static_cast<uint16_t>(wire::Op::kHello), 1)));
    wire::Frame f;
    KVTIER_RETURN_IF_ERROR(Recv(&f));
    wire::WireReader r(f.body);
    KVTIER_RETURN_IF_ERROR(r.Status());
    (void)r.U64();
    (void)r.U32();
    StoreDescription d;
    wire::Decode(r, &d);
    *reads = r.Bool();
    return r.Finish("hello reply");
  }
  // The status of the reply to one frame.
  Status Ask(uint16_t op, std::string_view body) {
    wire::FrameHeader h;
    h.op = op;
    h.id = 7;
    h.body_bytes = static_cast<uint32_t>(body.size());
    std::string frame(wire::kHeaderBytes, '\0');
    wire::EncodeHeader(h, reinterpret_cast<uint8_t*>(frame.data()));
    frame += body;
    KVTIER_RETURN_IF_ERROR(Send(frame));
    wire::Frame f;
    KVTIER_RETURN_IF_ERROR(Recv(&f));
    wire::WireReader r(f.body);
    return r.Status();
  }

 private:
  wire::UniqueFd fd_;
  wire::FrameReader frames_;
};

TEST(ServiceFaults, MalformedAndHostileFramesGetErrorsAndTheServiceCarriesOn) {
  TempDir dir;
  ServedStore served(dir.path());
  auto good = served.Client();
  ASSERT_NE(good, nullptr);
  const NamespaceId ns = good->RegisterNamespace(TestSpec()).value();
  auto p = Payload(ns, Key(1), 5000);
  ASSERT_TRUE(good->Put(ns, Key(1), p.data(), p.size()).ok());
  {  // Not a frame at all: the connection is closed.
    RawClient r(served.socket());
    ASSERT_TRUE(r.Send(std::string(64, 'x')).ok());
    wire::Frame f;
    EXPECT_FALSE(r.Recv(&f).ok());
  }
  {  // A body larger than any frame may be: closed before reading it.
    RawClient r(served.socket());
    wire::FrameHeader h;
    h.op = static_cast<uint16_t>(wire::Op::kHello);
    std::string frame(wire::kHeaderBytes, '\0');
    wire::EncodeHeader(h, reinterpret_cast<uint8_t*>(frame.data()));
    frame[16] = frame[17] = frame[18] = frame[19] = '\xff';  // 4 GiB body
    ASSERT_TRUE(r.Send(frame).ok());
    wire::Frame f;
    EXPECT_FALSE(r.Recv(&f).ok());
  }
  {  // Requests before hello: refused and closed.
    RawClient r(served.socket());
    EXPECT_FALSE(r.Ask(static_cast<uint16_t>(wire::Op::kGetStats), "").ok());
  }
  {  // After hello: each malformed body is answered InvalidArgument and the
     // connection goes on.
    RawClient r(served.socket());
    ASSERT_TRUE(r.Hello().ok());
    std::mt19937_64 rng(7);
    const uint16_t ops[] = {10, 11, 12, 13, 20, 21, 22, 23, 24, 25, 26, 27, 30, 31, 32, 40, 41, 42, 43, 3, 999};
    for (int i = 0; i < 400; ++i) {
      std::string body(rng() % 64, '\0');
      for (char& ch : body) ch = static_cast<char>(rng());
      const uint16_t op = ops[rng() % (sizeof ops / sizeof ops[0])];
      Status st = r.Ask(op, body);
      EXPECT_NE(st.code(), Code::kIOError) << "op " << op << ": " << st.ToString();
    }
    // Fragments outside any region, or into a region that does not exist.
    wire::PutRequest put;
    put.ns = ns;
    put.key = Key(5);
    put.payload = {wire::WireFragment{1, 0, 4096}};
    wire::WireWriter w;
    wire::Encode(w, put);
    EXPECT_EQ(r.Ask(static_cast<uint16_t>(wire::Op::kPut), w.body()).code(), Code::kInvalidArgument);
    // A get_batch whose second item names memory in no region: refused as a
    // whole, nothing written anywhere.
    wire::GetBatchRequest gb;
    gb.ns = ns;
    gb.items = {{Key(1), {wire::WireFragment{0, 0, 8192}}}, {Key(1), {wire::WireFragment{7, 0, 8192}}}};
    wire::WireWriter gw;
    wire::Encode(gw, gb);
    EXPECT_EQ(r.Ask(static_cast<uint16_t>(wire::Op::kGetBatch), gw.body()).code(), Code::kInvalidArgument);
    // A get_batch claiming more items than its body holds, or more than any may.
    for (uint32_t n : {3u, wire::kMaxBatchGets + 1}) {
      wire::WireWriter glie;
      glie.U64(ns);
      glie.I64(-1);
      glie.U32(n);
      EXPECT_EQ(r.Ask(static_cast<uint16_t>(wire::Op::kGetBatch), glie.body()).code(), Code::kInvalidArgument);
    }
    // A lookup claiming more keys than its body holds.
    wire::WireWriter lie;
    lie.U64(ns);
    lie.U32(4000);
    EXPECT_EQ(r.Ask(static_cast<uint16_t>(wire::Op::kLookupPrefix), lie.body()).code(), Code::kInvalidArgument);
  }
  EXPECT_GT(served.service()->GetStats().malformed, 300u);
  // The well-behaved client never noticed.
  EXPECT_EQ(good->GetVector(ns, Key(1)).value(), p);
  EXPECT_TRUE(Eventually([&] { return served.service()->GetStats().clients == 1; }));
}

// A put naming the client's own memory (wire::kClientMemoryRegion) is read
// only from a client whose hello probe the service read back, never from a
// mix with registered regions, and an address the client does not map is
// an error that stores nothing (the service is in this process here, so the
// client's memory is the test's own).
TEST(ServiceFaults, PutsNamingTheClientsOwnMemoryAreCheckedAndABadAddressStoresNothing) {
  TempDir dir;
  Options o = SmallOptions();
  o.ram_tier_bytes = 8 << 20;  // (without a tier puts stay staged: one copy that way)
  ServedStore served(dir.path(), ServiceOptions{}, o);
  auto good = served.Client();
  ASSERT_NE(good, nullptr);
  const NamespaceId ns = good->RegisterNamespace(TestSpec()).value();
  const std::string probe = "0123456789abcdef", other = "fedcba9876543210";
  auto put_of = [&](const std::string& key, std::vector<wire::WireFragment> frags) {
    wire::PutRequest put;
    put.ns = ns;
    put.key = key;
    put.blocking = true;
    put.payload = std::move(frags);
    wire::WireWriter w;
    wire::Encode(w, put);
    return w;
  };
  auto p = Payload(ns, Key(3), 8192);
  const uint64_t at = reinterpret_cast<uintptr_t>(p.data());
  const uint64_t malformed = served.service()->GetStats().malformed;
  {  // A probe that does not read back: the service says no, and holds to it.
    RawClient r(served.socket());
    bool reads = true;
    ASSERT_TRUE(r.HelloWithProbe(other.data(), probe, &reads).ok());
    EXPECT_FALSE(reads);
    auto w = put_of(Key(3), {{wire::kClientMemoryRegion, at, p.size()}});
    EXPECT_EQ(r.Ask(static_cast<uint16_t>(wire::Op::kPut), w.body()).code(), Code::kInvalidArgument);
  }
  {
    RawClient r(served.socket());
    bool reads = false;
    ASSERT_TRUE(r.HelloWithProbe(probe.data(), probe, &reads).ok());
    EXPECT_TRUE(reads);
    // An address nothing maps: NotSupported (the client's cue to stage it).
    auto bad = put_of(Key(4), {{wire::kClientMemoryRegion, 4096, 8192}});
    EXPECT_EQ(r.Ask(static_cast<uint16_t>(wire::Op::kPut), bad.body()).code(), Code::kNotSupported);
    // Half mapped: the same, nothing of it stored.
    auto half = put_of(Key(5), {{wire::kClientMemoryRegion, at, 4096}, {wire::kClientMemoryRegion, 4096, 4096}});
    EXPECT_EQ(r.Ask(static_cast<uint16_t>(wire::Op::kPut), half.body()).code(), Code::kNotSupported);
    // Mixed with a registered region's fragment: refused.
    auto mixed = put_of(Key(6), {{wire::kClientMemoryRegion, at, 4096}, {1, 0, 4096}});
    EXPECT_EQ(r.Ask(static_cast<uint16_t>(wire::Op::kPut), mixed.body()).code(), Code::kInvalidArgument);
    // A well-formed one lands whole.
    auto ok = put_of(Key(3), {{wire::kClientMemoryRegion, at, 4096}, {wire::kClientMemoryRegion, at + 4096, 4096}});
    EXPECT_TRUE(r.Ask(static_cast<uint16_t>(wire::Op::kPut), ok.body()).ok());
  }
  for (int k : {4, 5, 6}) EXPECT_FALSE(good->Contains(ns, Key(k)).value()) << k;
  EXPECT_EQ(good->GetVector(ns, Key(3)).value(), p);
  EXPECT_EQ(served.service()->GetStats().client_memory_puts, 1u);
  EXPECT_EQ(served.service()->GetStats().malformed, malformed + 2);
}

TEST(ServiceFaults, RepliesMoreThanTheSocketHoldsReachAClientThatReadsLateWholeAndEachOnce) {
  // Store threads send what the socket takes and leave the rest to the
  // connection's writer: no reply may be cut, interleaved or lost.
  TempDir dir;
  ServedStore served(dir.path());
  auto good = served.Client();
  ASSERT_NE(good, nullptr);
  const NamespaceId ns = good->RegisterNamespace(TestSpec()).value();
  RawClient r(served.socket());
  ASSERT_TRUE(r.Hello().ok());
  const int fd = memfd_create("raw-region", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  wire::WireWriter reg;
  wire::Encode(reg, wire::RegisterRegionRequest{1 << 20});
  ASSERT_TRUE(r.Send(reg.Frame(static_cast<uint16_t>(wire::Op::kRegisterRegion), 2), {fd}).ok());
  wire::Frame f;
  ASSERT_TRUE(r.Recv(&f).ok());
  wire::WireReader rr(f.body);
  ASSERT_TRUE(rr.Status().ok());
  const uint32_t region = rr.U32();
  // Batches of misses, each reply about 40 KiB: 48 of them are several
  // times what the socket buffers while the client is not reading.
  wire::GetBatchRequest gb;
  gb.ns = ns;
  for (uint32_t i = 0; i < wire::kMaxBatchGets; ++i) gb.items.push_back({Key(100000 + i), {{region, 0, 4096}}});
  wire::WireWriter gw;
  wire::Encode(gw, gb);
  constexpr uint64_t kRequests = 48;
  std::string burst;
  for (uint64_t id = 100; id < 100 + kRequests; ++id) burst += gw.Frame(static_cast<uint16_t>(wire::Op::kGetBatch), id);
  ASSERT_TRUE(r.Send(burst).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::set<uint64_t> seen;
  for (uint64_t i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(r.Recv(&f).ok()) << i;
    EXPECT_EQ(f.header.op, static_cast<uint16_t>(wire::Op::kGetBatch) | wire::kReplyBit);
    wire::WireReader br(f.body);
    ASSERT_TRUE(br.Status().ok());
    std::vector<Result<size_t>> got;
    wire::DecodeGetBatchReply(br, wire::kMaxBatchGets, &got);
    ASSERT_TRUE(br.Finish("get_batch reply").ok()) << i;
    for (const auto& g : got) EXPECT_EQ(g.status().code(), Code::kNotFound);
    EXPECT_TRUE(seen.insert(f.header.id).second) << "reply " << f.header.id << " twice";
  }
  EXPECT_EQ(seen.size(), kRequests);
  EXPECT_EQ(*seen.begin(), 100u);
  EXPECT_EQ(*seen.rbegin(), 100 + kRequests - 1);
  close(fd);
}

TEST(ServiceFaults, ARegionOfAnotherUserMustBeSealed) {
  TempDir dir;
  ServedStore served(dir.path());
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  // The child is another user (nobody, in the socket's group): an unsealed
  // memfd could be truncated under the service's mapping, so it is refused;
  // a sealed one is taken.
  InKilledChild([&] {
    if (setgid(0) != 0 || setuid(65534) != 0) _exit(10);
    RawClient r(served.socket());
    if (!r.Hello().ok()) _exit(11);
    const int loose = memfd_create("loose", MFD_CLOEXEC);
    if (loose < 0 || ftruncate(loose, 1 << 20) != 0) _exit(12);
    wire::WireWriter w;
    wire::Encode(w, wire::RegisterRegionRequest{1 << 20});
    if (!r.Send(w.Frame(static_cast<uint16_t>(wire::Op::kRegisterRegion), 2), {loose}).ok()) _exit(13);
    wire::Frame f;
    if (!r.Recv(&f).ok()) _exit(14);
    wire::WireReader rr(f.body);
    if (rr.Status().code() != Code::kInvalidArgument) _exit(15);
    auto sealed = wire::SharedRegion::CreateMemfd("sealed", 1 << 20);
    if (!sealed.ok()) _exit(16);
    if (!r.Send(w.Frame(static_cast<uint16_t>(wire::Op::kRegisterRegion), 3), {(*sealed)->fd()}).ok()) _exit(17);
    if (!r.Recv(&f).ok()) _exit(18);
    wire::WireReader ok(f.body);
    if (!ok.Status().ok()) _exit(19);
  });
}

// Neither through requests nor through the RAM tier's file, which holds
// every tenant's blocks: with tenancy the tier is lent to the service's own
// user and root only.
TEST(ServiceFaults, TenantsByUidNeverSeeEachOthersBlocks) {
  TempDir dir;
  ServiceOptions so;
  so.tenancy = ServiceOptions::Tenancy::kUid;
  Options with_ram = SmallOptions();
  with_ram.ram_tier_bytes = 8 << 20;
  ServedStore served(dir.path(), so, with_ram);
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  // Root (an admin) writes a block in its namespace.
  auto admin = served.Client();
  ASSERT_NE(admin, nullptr);
  const NamespaceId mine = admin->RegisterNamespace(TestSpec("shared/model")).value();
  auto p = Payload(mine, Key(1), 6000);
  ASSERT_TRUE(admin->Put(mine, Key(1), p.data(), p.size()).ok());
  InKilledChild([&] {
    if (setgid(0) != 0 || setuid(65534) != 0) _exit(10);
    Options o;
    o.client.staging_bytes = 4 << 20;
    auto c = Store::Open(served.address(), o);
    if (!c.ok()) _exit(11);
    // The same spec is another namespace for this tenant: nothing in it.
    auto theirs = (*c)->RegisterNamespace(TestSpec("shared/model"));
    if (!theirs.ok() || *theirs == mine) _exit(12);
    if (!(*c)->GetVector(*theirs, Key(1)).status().IsNotFound()) _exit(13);
    // Naming the other tenant's id directly is answered as unknown.
    if (!(*c)->GetVector(mine, Key(1)).status().IsNotFound()) _exit(14);
    if (!(*c)->Stat(mine, Key(1)).status().IsNotFound()) _exit(15);
    auto q = Payload(mine, Key(2), 6000);
    if ((*c)->Put(mine, Key(2), q.data(), q.size()).ok()) _exit(16);
    if ((*c)->ListNamespaces().value().size() != 1) _exit(17);
    // Its own blocks work.
    if (!(*c)->Put(*theirs, Key(1), q.data(), q.size()).ok()) _exit(18);
    if ((*c)->GetVector(*theirs, Key(1)).value() != q) _exit(19);
    // Admin operations are the service owner's.
    if ((*c)->EvictTo(0).ok()) _exit(20);
    // The RAM tier is not lent; without it pin_tier is refused too (it would
    // name the other tenant's block's place and checksum).
    auto* lender = dynamic_cast<client::ServiceStore*>(c->get());
    if (lender == nullptr || lender->MapTier().status().code() != Code::kNotSupported) _exit(21);
    const std::string k1 = Key(1);
    const std::vector<std::string_view> keys = {k1};
    if (lender->PinTier(1, mine, keys).ok()) _exit(22);
    // Nor may it remove the other tenant's blocks.
    if ((*c)->Remove(mine, Key(1)).ok()) _exit(23);
    if ((*c)->RemoveBatch(mine, keys, nullptr).ok()) _exit(24);
    std::vector<bool> there;
    if ((*c)->ContainsBatch(mine, keys, &there).ok()) _exit(25);
    if ((*c)->TouchBatch(mine, keys, &there).ok()) _exit(26);  // nor learn of, or warm, them
  });
  // The admin's block is untouched; the admin sees both namespaces, and may
  // borrow the tier.
  EXPECT_EQ(admin->GetVector(mine, Key(1)).value(), p);
  EXPECT_EQ(admin->ListNamespaces().value().size(), 2u);
  EXPECT_TRUE(dynamic_cast<client::ServiceStore*>(admin.get())->MapTier().ok());
  EXPECT_EQ(served.service()->GetStats().tier_pinned_bytes, 0u);
}

}  // namespace
}  // namespace kvtier::testing
