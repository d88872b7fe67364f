// XXH3-64 on AVX2 (compiled with -mavx2; used only where the CPU has it).
#define KVTIER_XXH3_IMPL kXxh3Avx2
#define KVTIER_XXH3_ISA "avx2"
#if defined(__x86_64__)
#include "util/checksum_isa.inc"
#endif
