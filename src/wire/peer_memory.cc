#include "wire/peer_memory.h"

#include <poll.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "wire/requests.h"

namespace kvtier::wire {

namespace {

// process_vm_readv takes at most IOV_MAX (1024) vectors a side; a put has
// at most kMaxFragments remote pieces and a RAM-tier reservation few more.
constexpr size_t kMaxIov = 1024;

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// Moves the cursor (*at, into v[*at]) `n` bytes on.
void Advance(std::vector<iovec>& v, size_t* at, uint64_t n) {
  while (n > 0) {
    iovec& io = v[*at];
    const uint64_t take = std::min<uint64_t>(n, io.iov_len);
    io.iov_base = static_cast<char*>(io.iov_base) + take;
    io.iov_len -= take;
    n -= take;
    if (io.iov_len == 0) ++*at;
  }
}

}  // namespace

Result<std::unique_ptr<PeerMemory>> PeerMemory::Open(pid_t pid, uint64_t probe_address, std::string_view probe) {
  if (pid <= 0) return Status::NotSupported("the client's pid is not visible here (another pid namespace)");
  if (probe_address == 0 || probe.empty() || probe.size() > kMaxProbeBytes)
    return Status::InvalidArgument("hello's memory probe is empty or longer than 64 bytes");
  UniqueFd pidfd(PidfdOpen(pid));
  if (!pidfd) return Status::FromErrno(errno, "pidfd_open of the client");
  std::string got(probe.size(), '\0');
  const iovec local{got.data(), got.size()};
  const iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(probe_address)), probe.size()};
  const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (n < 0) return Status::FromErrno(errno, "reading the client's memory probe");
  if (static_cast<size_t>(n) != probe.size() || std::memcmp(got.data(), probe.data(), probe.size()) != 0)
    return Status::InvalidArgument("the client's memory probe does not match (not the process that connected)");
  auto pm = std::unique_ptr<PeerMemory>(new PeerMemory(pid, std::move(pidfd)));
  // Checked after the read too: the pid named the client when it was read.
  if (!pm->Alive()) return Status::IOError("the client exited during hello");
  return pm;
}

bool PeerMemory::Alive() const {
  pollfd p{pidfd_.get(), POLLIN, 0};
  // A pidfd polls readable once its process has exited.
  return ::poll(&p, 1, 0) == 0;
}

Status PeerMemory::Read(std::span<const Fragment> remote, std::span<const MutableFragment> local) const {
  if (remote.size() > kMaxIov || local.size() > kMaxIov)
    return Status::InvalidArgument("too many pieces to read from the client at once");
  std::vector<iovec> r, l;
  uint64_t want = 0, room = 0;
  for (const Fragment& f : remote) {
    r.push_back(iovec{const_cast<void*>(f.data), f.size});
    want += f.size;
  }
  for (const MutableFragment& f : local) {
    l.push_back(iovec{f.data, f.size});
    room += f.size;
  }
  if (want != room) return Status::InvalidArgument("the client's pieces and the destination differ in size");
  if (!Alive()) return Status::IOError("the client has exited");
  // The kernel stops at the first piece it cannot read and reports what it
  // copied; a short count leaves the rest unread, so it is an error, never
  // a payload.
  uint64_t done = 0;
  size_t ri = 0, li = 0;
  while (done < want) {
    const ssize_t n = ::process_vm_readv(pid_, l.data() + li, l.size() - li, r.data() + ri, r.size() - ri, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "reading the client's memory");
    }
    if (n == 0) return Status::IOError("reading the client's memory: a piece it does not map");
    done += static_cast<uint64_t>(n);
    // Partial progress: both sides move past the bytes read.
    Advance(r, &ri, static_cast<uint64_t>(n));
    Advance(l, &li, static_cast<uint64_t>(n));
  }
  return Status::OK();
}

}  // namespace kvtier::wire
