// XXH3-64 on AVX-512 (compiled with -mavx512f; used only where the CPU has it).
#define KVTIER_XXH3_IMPL kXxh3Avx512
#define KVTIER_XXH3_ISA "avx512"
#if defined(__x86_64__)
#include "util/checksum_isa.inc"
#endif
