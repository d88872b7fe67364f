// Built only with librados (KVTIER_WITH_CEPH): it needs the cluster script path.
#ifdef KVTIER_WITH_CEPH
#include "remote/ceph_cluster_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

namespace kvtier::testing {
namespace {

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

std::string Run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *rc = -1;
    return out;
  }
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  *rc = ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

std::string CephCluster::Unavailable() {
  for (const char* b : {"ceph-mon", "ceph-osd", "ceph", "monmaptool"}) {
    int rc = 0;
    Run(std::string("command -v ") + b + " >/dev/null 2>&1", &rc);
    if (rc != 0)
      return std::string("Ceph is not installed (") + b +
             " missing): apt-get install ceph-mon ceph-osd ceph-common to run the shared-tier tests";
  }
  return "";
}

CephCluster CephCluster::FromEnv() {
  CephCluster c;
  const char* conf = std::getenv("KVTIER_CEPH_CONF");
  if (conf != nullptr) c.conf_ = conf;
  return c;
}

CephCluster CephCluster::StartPrivate() {
  CephCluster c;
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp != nullptr ? tmp : "/tmp") + "/kvtier-ceph-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    c.error_ = "mkdtemp failed";
    return c;
  }
  c.dir_ = tmpl;
  c.owned_ = true;
  int rc = 0;
  const std::string cmd = "KVTIER_CEPH_PORT=" + std::to_string(FreePort()) + " " KVTIER_CEPH_SCRIPT " start " +
                          c.dir_ + " 2>" + c.dir_ + "-start.log";
  std::string out = Run(cmd, &rc);
  const std::string expect = c.dir_ + "/ceph.conf";
  if (rc != 0 || out.size() < expect.size() || out.substr(out.size() - expect.size()) != expect) {
    std::ifstream log(c.dir_ + "-start.log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    c.error_ = "tools/ceph_one_node.sh failed (rc " + std::to_string(rc) + "): " + text;
    c.Stop();
    return c;
  }
  c.conf_ = expect;
  return c;
}

CephCluster::CephCluster(CephCluster&& o) noexcept { *this = std::move(o); }
CephCluster& CephCluster::operator=(CephCluster&& o) noexcept {
  if (this != &o) {
    Stop();
    dir_ = std::exchange(o.dir_, "");
    conf_ = std::exchange(o.conf_, "");
    error_ = std::exchange(o.error_, "");
    owned_ = std::exchange(o.owned_, false);
  }
  return *this;
}
CephCluster::~CephCluster() { Stop(); }

pid_t CephCluster::OsdPid() const {
  if (conf_.empty()) return -1;
  std::ifstream f(std::filesystem::path(conf_).parent_path() / "run" / "osd.0.pid");
  long pid = -1;
  if (!(f >> pid)) return -1;
  return static_cast<pid_t>(pid);
}

void CephCluster::Stop() {
  if (!owned_) return;
  int rc = 0;
  Run(KVTIER_CEPH_SCRIPT " stop " + dir_ + " >/dev/null 2>&1", &rc);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  std::filesystem::remove(dir_ + "-start.log", ec);
  owned_ = false;
  conf_.clear();
}

}  // namespace kvtier::testing

#endif  // KVTIER_WITH_CEPH
