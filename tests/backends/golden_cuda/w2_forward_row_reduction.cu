// kernel k0_sum: fused group 0 (32 ops) -> %42, %17
//   %2 = multiply(%x, %1)
//   %4 = add(%2, %3)
//   %5 = tanh(%4)
//   %6 = sin(%x)
//   %7 = multiply(%5, %6)
//   %8 = negative(%x)
//   %9 = multiply(%8, %x)
//   %10 = exp(%9)
//   %12 = multiply(%10, %11)
//   %13 = add(%7, %12)
//   %14 = multiply(%x, %x)
//   %15 = log1p(%14)
//   %16 = add(%13, %15)
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
//   %17 = sum(%16)
// Row reduction over the iteration shape (?), reduced axes (0,):
// a team of T threads (a warp, or the whole block) per output o strides over its K reduced
// elements (split over P blocks along grid y), then warp shuffles and a block-level merge.
struct k0_sum_combine {
  __device__ __forceinline__ double operator()(double a, double b) const { return ((a) + (b)); }
};

// Finish output o from its accumulated value: reduction result, epilogue, stores.
template <typename I>
__device__ __forceinline__ void k0_sum_finish(I o, double acc, I M, I K, I P, I T, I n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, double* __restrict__ partial) {
  const float v17 = (float)(acc);  // %17 = sum(%16)
  out1[o] = v17;
}

// Second pass (P > 1): one warp per output merges its P partial results, then finishes it.
template <typename I>
__device__ __forceinline__ void k0_sum_merge_body(I M, I K, I P, I T, I n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, double* __restrict__ partial) {
  const I warps = ((I)gridDim.x * blockDim.x) / 32;
  const int lane = threadIdx.x % 32;
  for (I o = ((I)blockIdx.x * blockDim.x + threadIdx.x) / 32; o < M; o += warps) {
    double acc = 0.0;
    for (I p = lane; p < P; p += 32) acc = k0_sum_combine()(acc, partial[o * P + p]);
    acc = sg_warp_reduce(acc, k0_sum_combine());
    if (lane == 0) k0_sum_finish<I>(o, acc, M, K, P, T, n0, in0, out0, out1, partial);
  }
}
extern "C" __global__ void __launch_bounds__(256) k0_sum_merge(int M, int K, int P, int T, int n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, double* __restrict__ partial) {
  k0_sum_merge_body<int>(M, K, P, T, n0, in0, out0, out1, partial);
}
extern "C" __global__ void __launch_bounds__(256) k0_sum_merge_i64(long long M, long long K, long long P, long long T, long long n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, double* __restrict__ partial) {
  k0_sum_merge_body<long long>(M, K, P, T, n0, in0, out0, out1, partial);
}


template <typename I>
__device__ __forceinline__ void k0_sum_body(I M, I K, I P, I T, I n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, double* __restrict__ partial) {
  __shared__ double warp_acc[32];
  const int team = (int)T;
  const int lane = threadIdx.x % team;
  const I teams = blockDim.x / team;
  const I p = blockIdx.y;
  const I chunk = (K + P - 1) / P;
  const I k_begin = p * chunk;
  const I k_end = K < k_begin + chunk ? K : k_begin + chunk;
  for (I o = (I)blockIdx.x * teams + threadIdx.x / team; o < M; o += (I)gridDim.x * teams) {
    double acc = 0.0;
    for (I k = k_begin + lane; k < k_end; k += team) {
      const I s = o * K + k;
      const float v0 = in0[s];
      const float v2 = ((v0) * (1.5f));  // %2 = multiply(%x, %1)
      const float v4 = ((v2) + (0.5f));  // %4 = add(%2, %3)
      const float v5 = tanh(v4);  // %5 = tanh(%4)
      const float v6 = sin(v0);  // %6 = sin(%x)
      const float v7 = ((v5) * (v6));  // %7 = multiply(%5, %6)
      const float v8 = (-(v0));  // %8 = negative(%x)
      const float v9 = ((v8) * (v0));  // %9 = multiply(%8, %x)
      const float v10 = exp(v9);  // %10 = exp(%9)
      const float v12 = ((v10) * (0.3f));  // %12 = multiply(%10, %11)
      const float v13 = ((v7) + (v12));  // %13 = add(%7, %12)
      const float v14 = ((v0) * (v0));  // %14 = multiply(%x, %x)
      const float v15 = log1p(v14);  // %15 = log1p(%14)
      const float v16 = ((v13) + (v15));  // %16 = add(%13, %15)
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
      acc = k0_sum_combine()(acc, (double)(v16));
    }
    acc = sg_warp_reduce(acc, k0_sum_combine());
    if (team > 32) {  // uniform: the whole block works on this output
      if (threadIdx.x % 32 == 0) warp_acc[threadIdx.x / 32] = acc;
      __syncthreads();
      if (threadIdx.x < 32) {
        acc = threadIdx.x < blockDim.x / 32 ? warp_acc[threadIdx.x] : 0.0;
        acc = sg_warp_reduce(acc, k0_sum_combine());
      }
      __syncthreads();
    }
    if (lane == 0) {
      if (P == 1) k0_sum_finish<I>(o, acc, M, K, P, T, n0, in0, out0, out1, partial);
      else partial[o * P + p] = acc;
    }
  }
}
extern "C" __global__ void __launch_bounds__(256) k0_sum(int M, int K, int P, int T, int n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, double* __restrict__ partial) {
  k0_sum_body<int>(M, K, P, T, n0, in0, out0, out1, partial);
}
extern "C" __global__ void __launch_bounds__(256) k0_sum_i64(long long M, long long K, long long P, long long T, long long n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, double* __restrict__ partial) {
  k0_sum_body<long long>(M, K, P, T, n0, in0, out0, out1, partial);
}

