// kernel k0_fused: fused group 0 (26 ops) -> %42
//   %2 = multiply(%x, %1)
//   %4 = add(%2, %3)
//   %5 = tanh(%4)
//   %6 = sin(%x)
//   %8 = negative(%x)
//   %9 = multiply(%8, %x)
//   %10 = exp(%9)
//   %14 = multiply(%x, %x)
//   %21 = add(%14, %20); backward of %15 = log1p(%14)
//   %22 = divide(%18, %21); backward of %15 = log1p(%14)
//   %23 = multiply(%22, %x); backward of %14 = multiply(%x, %x)
//   %25 = add(%23, %23); backward of %x = data()
//   %27 = multiply(%43, %10); backward of %10 = exp(%9)
//   %28 = multiply(%27, %x); backward of %9 = multiply(%8, %x)
//   %29 = multiply(%27, %8); backward of %9 = multiply(%8, %x)
//   %30 = add(%25, %29); backward of %x = data()
//   %31 = negative(%28); backward of %8 = negative(%x)
//   %32 = add(%30, %31); backward of %x = data()
//   %35 = cos(%x); backward of %6 = sin(%x)
//   %36 = multiply(%5, %35); backward of %6 = sin(%x)
//   %37 = add(%32, %36); backward of %x = data()
//   %38 = multiply(%5, %5); backward of %5 = tanh(%4)
//   %39 = subtract(%20, %38); backward of %5 = tanh(%4)
//   %40 = multiply(%6, %39); backward of %5 = tanh(%4)
//   %41 = multiply(%40, %1); backward of %2 = multiply(%x, %1)
//   %42 = add(%37, %41); backward of %x = data()
// Elementwise over the iteration shape (?): one grid-stride loop, element s.
template <typename I>
__device__ __forceinline__ void k0_fused_body(I N, I n0, const float* __restrict__ in0, float* __restrict__ out0) {
  for (I s = (I)blockIdx.x * blockDim.x + threadIdx.x; s < N; s += (I)gridDim.x * blockDim.x) {
    const float v0 = in0[s];
    const float v2 = ((v0) * (1.5f));  // %2 = multiply(%x, %1)
    const float v4 = ((v2) + (0.5f));  // %4 = add(%2, %3)
    const float v5 = tanh(v4);  // %5 = tanh(%4)
    const float v6 = sin(v0);  // %6 = sin(%x)
    const float v8 = (-(v0));  // %8 = negative(%x)
    const float v9 = ((v8) * (v0));  // %9 = multiply(%8, %x)
    const float v10 = exp(v9);  // %10 = exp(%9)
    const float v14 = ((v0) * (v0));  // %14 = multiply(%x, %x)
    const float v21 = ((v14) + (1.0f));  // %21 = add(%14, %20); backward of %15 = log1p(%14)
    const float v22 = ((float)(1.0f) / (float)(v21));  // %22 = divide(%18, %21); backward of %15 = log1p(%14)
    const float v23 = ((v22) * (v0));  // %23 = multiply(%22, %x); backward of %14 = multiply(%x, %x)
    const float v25 = ((v23) + (v23));  // %25 = add(%23, %23); backward of %x = data()
    const float v27 = ((0.3f) * (v10));  // %27 = multiply(%43, %10); backward of %10 = exp(%9)
    const float v28 = ((v27) * (v0));  // %28 = multiply(%27, %x); backward of %9 = multiply(%8, %x)
    const float v29 = ((v27) * (v8));  // %29 = multiply(%27, %8); backward of %9 = multiply(%8, %x)
    const float v30 = ((v25) + (v29));  // %30 = add(%25, %29); backward of %x = data()
    const float v31 = (-(v28));  // %31 = negative(%28); backward of %8 = negative(%x)
    const float v32 = ((v30) + (v31));  // %32 = add(%30, %31); backward of %x = data()
    const float v35 = cos(v0);  // %35 = cos(%x); backward of %6 = sin(%x)
    const float v36 = ((v5) * (v35));  // %36 = multiply(%5, %35); backward of %6 = sin(%x)
    const float v37 = ((v32) + (v36));  // %37 = add(%32, %36); backward of %x = data()
    const float v38 = ((v5) * (v5));  // %38 = multiply(%5, %5); backward of %5 = tanh(%4)
    const float v39 = ((1.0f) - (v38));  // %39 = subtract(%20, %38); backward of %5 = tanh(%4)
    const float v40 = ((v6) * (v39));  // %40 = multiply(%6, %39); backward of %5 = tanh(%4)
    const float v41 = ((v40) * (1.5f));  // %41 = multiply(%40, %1); backward of %2 = multiply(%x, %1)
    const float v42 = ((v37) + (v41));  // %42 = add(%37, %41); backward of %x = data()
    out0[s] = v42;
  }
}
extern "C" __global__ void __launch_bounds__(256) k0_fused(int N, int n0, const float* __restrict__ in0, float* __restrict__ out0) {
  k0_fused_body<int>(N, n0, in0, out0);
}
extern "C" __global__ void __launch_bounds__(256) k0_fused_i64(long long N, long long n0, const float* __restrict__ in0, float* __restrict__ out0) {
  k0_fused_body<long long>(N, n0, in0, out0);
}

