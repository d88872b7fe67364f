// The store tests' helpers (TempDir, Payload, Key, ...) compiled into this
// test binary too, so both suites build payloads the same way.
#include "store/store_test_util.cc"  // NOLINT(bugprone-suspicious-include)
