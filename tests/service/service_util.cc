#include "service/service_util.h"

namespace kvtier::testing {

ServedStore::ServedStore(const std::string& dir, ServiceOptions so, Options o) : socket_(dir + "/s.sock") {
  auto s = Store::Open(dir + "/store", o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return;
  store_ = std::move(s).value();
  so.socket_path = socket_;
  if (!so.log) so.log = [](const std::string&) {};
  auto sv = Service::Start(store_.get(), so);
  EXPECT_TRUE(sv.ok()) << sv.status().ToString();
  if (sv.ok()) service_ = std::move(sv).value();
}

ServedStore::~ServedStore() { Stop(); }

void ServedStore::Stop() {
  if (service_) service_->Stop();
  service_.reset();
  if (store_) store_->Close().IgnoreError();
  store_.reset();
}

std::unique_ptr<Store> ServedStore::Client(ServiceClientOptions c) const {
  Options o;
  o.client = c;
  if (o.client.staging_bytes == ServiceClientOptions{}.staging_bytes) o.client.staging_bytes = 16 << 20;
  auto s = Store::Open(address(), o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

}  // namespace kvtier::testing
