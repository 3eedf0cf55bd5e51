// MKL's own dispatch, told that this CPU may run its Intel code paths: see kernels/mkl_vendor.py.
//
// The MKL that PyTorch's x86 wheels link exports `mkl_serv_intel_cpu_true`, which MKL asks before
// it picks a kernel: on a CPU that is not Intel's it answers 0 and MKL takes its generic AVX2 path,
// whatever the CPU supports. Loaded with RTLD_GLOBAL before libtorch, this definition is the one
// libtorch's calls resolve to, so MKL picks its kernels by the CPU's features (AVX-512 where the
// CPU has it) as it does on Intel's CPUs. Nothing else changes: MKL still checks every feature it
// uses with cpuid.

#ifndef LTR_KERNEL_HASH
#define LTR_KERNEL_HASH "unstamped"
#endif

extern "C" {

// The hash of the source and flags this library was built from (kernels/_native.py checks it).
const char* ltr_kernel_hash() { return LTR_KERNEL_HASH; }

int mkl_serv_intel_cpu_true() { return 1; }

}  // extern "C"
