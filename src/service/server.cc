// kvtier::Service: the listening socket, its accept loop, and the
// connections it serves (service/connection.h).
#include <grp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <list>

#include "kvtier/service.h"
#include "service/connection.h"

namespace kvtier {
namespace service {
namespace {

Result<gid_t> GroupId(const std::string& group) {
  char* end = nullptr;
  const unsigned long n = std::strtoul(group.c_str(), &end, 10);
  if (!group.empty() && end != nullptr && *end == '\0') return static_cast<gid_t>(n);
  struct group* g = ::getgrnam(group.c_str());
  if (g == nullptr) return Status::NotFound("no group named '" + group + "'");
  return g->gr_gid;
}

// Binds, sets the mode and group of, and listens on a socket at `path`.
Status BindAndListen(int fd, const std::string& path, const ServiceOptions& o) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    return Status::FromErrno(errno, "binding " + path);
  if (!o.socket_group.empty()) {
    auto gid = GroupId(o.socket_group);
    if (!gid.ok()) return gid.status().WithContext("socket group");
    if (::chown(path.c_str(), static_cast<uid_t>(-1), *gid) != 0)
      return Status::FromErrno(errno, "giving " + path + " to group " + o.socket_group);
  }
  if (::chmod(path.c_str(), static_cast<mode_t>(o.socket_mode & 0777)) != 0)
    return Status::FromErrno(errno, "chmod " + path);
  if (::listen(fd, 128) != 0) return Status::FromErrno(errno, "listen on " + path);
  return Status::OK();
}

// A socket listening on `path`, with its mode and group. A socket file
// nobody answers on is left by a crashed service: replaced. The socket is
// made ready under a temporary name and renamed into place, so a client
// that sees the path can connect (a bound socket refuses until listen).
Result<wire::UniqueFd> Listen(const ServiceOptions& o) {
  auto probe = wire::ConnectUnix(o.socket_path);
  if (probe.ok()) return Status::Busy("a kvtier service already listens on " + o.socket_path);
  if (probe.status().code() == Code::kInvalidArgument) return probe.status();
  struct stat st {};
  if (::lstat(o.socket_path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return Status::InvalidArgument(o.socket_path + " exists and is not a socket: not replacing it");
    if (::unlink(o.socket_path.c_str()) != 0) return Status::FromErrno(errno, "removing stale socket " + o.socket_path);
  }
  wire::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Status::FromErrno(errno, "socket");
  const std::string tmp = o.socket_path + ".new";
  if (tmp.size() >= sizeof(sockaddr_un{}.sun_path)) {  // no room for the suffix: bind in place
    if (Status st = BindAndListen(fd.get(), o.socket_path, o); !st.ok()) return st;
    return fd;
  }
  ::unlink(tmp.c_str());  // left by a service that died here
  Status ready = BindAndListen(fd.get(), tmp, o);
  if (ready.ok() && ::rename(tmp.c_str(), o.socket_path.c_str()) != 0)
    ready = Status::FromErrno(errno, "renaming " + tmp + " to " + o.socket_path);
  if (!ready.ok()) {
    ::unlink(tmp.c_str());
    return ready;
  }
  return fd;
}

class ServiceImpl final : public Service {
 public:
  ServiceImpl(Store* store, const ServiceOptions& o, wire::UniqueFd listener, wire::UniqueFd wake)
      : core_(store, o, ::geteuid()), listener_(std::move(listener)), wake_(std::move(wake)) {}
  ~ServiceImpl() override { Stop(); }

  void StartAccepting() { acceptor_ = std::thread([this] { AcceptLoop(); }); }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    const uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof one);
    if (acceptor_.joinable()) acceptor_.join();
    for (auto& c : connections_) c->Shutdown();
    for (auto& c : connections_) c->Join();
    connections_.clear();
    ::unlink(core_.opt.socket_path.c_str());
  }

  ServiceStats GetStats() override {
    ServiceStats s;
    s.clients = clients_.load();
    s.connections = accepted_.load();
    s.disconnects = disconnects_.load();
    s.requests = core_.requests.load();
    s.malformed = core_.malformed.load();
    s.over_cap = core_.over_cap.load();
    s.pooled_gets = core_.pooled_gets.load();
    s.pooled_puts = core_.pooled_puts.load();
    s.client_memory_puts = core_.client_memory_puts.load();
    s.client_memory_split_puts = core_.client_memory_split_puts.load();
    s.polled_requests = core_.polled.load();
    s.regions = core_.regions.load();
    s.region_bytes_populated = core_.populated.load();
    s.tier_maps = core_.tier_maps.load();
    s.tier_lent_blocks = core_.tier_lent_blocks.load();
    s.tier_pinned_bytes = core_.tier_pinned_bytes.load();
    s.namespaces = core_.access.Stats();
    return s;
  }

 private:
  void AcceptLoop() {
    uint64_t next_id = 1;
    for (;;) {
      pollfd p[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      // Wakes now and then to reap connections that ended.
      const int r = ::poll(p, 2, 200);
      Reap();
      if (r < 0 && errno != EINTR) break;
      if (p[1].revents != 0) break;
      if (r <= 0 || !(p[0].revents & POLLIN)) continue;
      wire::UniqueFd sock(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!sock) continue;
      auto creds = wire::PeerOf(sock.get());
      if (!creds.ok()) continue;
      if (connections_.size() >= core_.opt.max_clients) {
        core_.Log("refused a client (pid " + std::to_string(creds->pid) + "): " +
                  std::to_string(core_.opt.max_clients) + " clients are connected");
        continue;
      }
      auto c = std::make_shared<Connection>(&core_, std::move(sock), core_.access.PeerFor(*creds), next_id++);
      c->Start();
      connections_.push_back(std::move(c));
      ++accepted_;
      clients_.store(static_cast<uint32_t>(connections_.size()));
    }
  }

  void Reap() {
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->finished()) {
        (*it)->Join();
        it = connections_.erase(it);
        ++disconnects_;
      } else {
        ++it;
      }
    }
    clients_.store(static_cast<uint32_t>(connections_.size()));
  }

  ServerCore core_;
  wire::UniqueFd listener_, wake_;
  std::list<std::shared_ptr<Connection>> connections_;  // the acceptor's (and Stop's after it)
  std::atomic<uint32_t> clients_{0};
  std::atomic<uint64_t> accepted_{0}, disconnects_{0};
  std::atomic<bool> stopped_{false};
  std::thread acceptor_;
};

}  // namespace
}  // namespace service

Result<std::unique_ptr<Service>> Service::Start(Store* store, const ServiceOptions& options) {
  if (store == nullptr) return Status::InvalidArgument("no store to serve");
  if (options.socket_path.empty()) return Status::InvalidArgument("no socket path");
  if (options.max_clients == 0 || options.max_client_requests == 0)
    return Status::InvalidArgument("max_clients and max_client_requests must be > 0");
  auto listener = service::Listen(options);
  if (!listener.ok()) return listener.status();
  wire::UniqueFd wake(::eventfd(0, EFD_CLOEXEC));
  if (!wake) return Status::FromErrno(errno, "eventfd");
  auto s = std::make_unique<service::ServiceImpl>(store, options, std::move(listener).value(), std::move(wake));
  s->StartAccepting();
  return std::unique_ptr<Service>(std::move(s));
}

}  // namespace kvtier
