// Opens a store through the installed library, round-trips one block.
#include <kvtier/store.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto store = kvtier::Store::Open(argv[1], kvtier::Options{});
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  kvtier::NamespaceSpec spec;
  spec.model_id = "consumer/model";
  auto ns = (*store)->RegisterNamespace(spec);
  if (!ns.ok()) return 1;
  const char payload[] = "installed kvtier works";
  if (!(*store)->Put(*ns, "key", payload, sizeof payload).ok()) return 1;
  char out[64] = {0};
  auto n = (*store)->Get(*ns, "key", out, sizeof out);
  if (!n.ok() || *n != sizeof payload || std::memcmp(out, payload, sizeof payload) != 0) return 1;
  std::puts("consumer: ok");
  return (*store)->Close().ok() ? 0 : 1;
}
