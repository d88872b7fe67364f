// SKIP_WITHOUT_GPU(): skips a GPU test, with the reason, where no CUDA
// device is usable (this VM, CI), so the suites run everywhere.
#ifndef KVTIER_TESTS_CUDA_SKIP_WITHOUT_GPU_H_
#define KVTIER_TESTS_CUDA_SKIP_WITHOUT_GPU_H_

#include <gtest/gtest.h>

#include "kvtier/cuda.h"

#define SKIP_WITHOUT_GPU()                                                   \
  do {                                                                       \
    ::kvtier::Status _dev = ::kvtier::gpu::DeviceStatus();                   \
    if (!_dev.ok()) GTEST_SKIP() << "GPU test skipped: " << _dev.ToString(); \
  } while (0)

#endif  // KVTIER_TESTS_CUDA_SKIP_WITHOUT_GPU_H_
