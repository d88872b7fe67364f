// A store served in this process (ServedStore) and clients of it, for the
// service tests.
#ifndef KVTIER_TESTS_SERVICE_SERVICE_UTIL_H_
#define KVTIER_TESTS_SERVICE_SERVICE_UTIL_H_

#include <memory>
#include <string>

#include "kvtier/service.h"
#include "kvtier/store.h"
#include "store/store_test_util.h"

namespace kvtier::testing {

// An embedded store in `dir`/store, served on `dir`/s.sock.
class ServedStore {
 public:
  explicit ServedStore(const std::string& dir, ServiceOptions so = {}, Options o = SmallOptions());
  ~ServedStore();
  Store* store() { return store_.get(); }
  Service* service() { return service_.get(); }
  const std::string& socket() const { return socket_; }
  std::string address() const { return "unix:" + socket_; }
  // A new client of the service.
  std::unique_ptr<Store> Client(ServiceClientOptions c = {}) const;
  void Stop();

 private:
  std::string socket_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Service> service_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_SERVICE_SERVICE_UTIL_H_
