// kernel k0_sum: fused group 0 (14 ops) -> %5, %6, %8, %10, %14, %16, %17
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
//   %17 = sum(%16)
// Row reduction over the iteration shape (?), reduced axes (0,):
// a team of T threads (a warp, or the whole block) per output o strides over its K reduced
// elements (split over P blocks along grid y), then warp shuffles and a block-level merge.
struct k0_sum_combine {
  __device__ __forceinline__ double operator()(double a, double b) const { return a + b; }
};

// Finish output o from its accumulated value: reduction result, epilogue, stores.
template <typename I>
__device__ __forceinline__ void k0_sum_finish(I o, double acc, I M, I K, I P, I T, I n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, float* __restrict__ out2, float* __restrict__ out3, float* __restrict__ out4, float* __restrict__ out5, float* __restrict__ out6, double* __restrict__ partial) {
  const float v17 = (float)(acc);  // %17 = sum(%16)
  out6[o] = v17;
}

// Second pass (P > 1): one warp per output merges its P partial results, then finishes it.
template <typename I>
__device__ __forceinline__ void k0_sum_merge_body(I M, I K, I P, I T, I n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, float* __restrict__ out2, float* __restrict__ out3, float* __restrict__ out4, float* __restrict__ out5, float* __restrict__ out6, double* __restrict__ partial) {
  const I warps = ((I)gridDim.x * blockDim.x) / 32;
  const int lane = threadIdx.x % 32;
  for (I o = ((I)blockIdx.x * blockDim.x + threadIdx.x) / 32; o < M; o += warps) {
    double acc = 0.0;
    for (I p = lane; p < P; p += 32) acc = k0_sum_combine()(acc, partial[o * P + p]);
    acc = sg_warp_reduce(acc, k0_sum_combine());
    if (lane == 0) k0_sum_finish<I>(o, acc, M, K, P, T, n0, in0, out0, out1, out2, out3, out4, out5, out6, partial);
  }
}
extern "C" __global__ void __launch_bounds__(256) k0_sum_merge(int M, int K, int P, int T, int n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, float* __restrict__ out2, float* __restrict__ out3, float* __restrict__ out4, float* __restrict__ out5, float* __restrict__ out6, double* __restrict__ partial) {
  k0_sum_merge_body<int>(M, K, P, T, n0, in0, out0, out1, out2, out3, out4, out5, out6, partial);
}
extern "C" __global__ void __launch_bounds__(256) k0_sum_merge_i64(long long M, long long K, long long P, long long T, long long n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, float* __restrict__ out2, float* __restrict__ out3, float* __restrict__ out4, float* __restrict__ out5, float* __restrict__ out6, double* __restrict__ partial) {
  k0_sum_merge_body<long long>(M, K, P, T, n0, in0, out0, out1, out2, out3, out4, out5, out6, partial);
}


template <typename I>
__device__ __forceinline__ void k0_sum_body(I M, I K, I P, I T, I n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, float* __restrict__ out2, float* __restrict__ out3, float* __restrict__ out4, float* __restrict__ out5, float* __restrict__ out6, double* __restrict__ partial) {
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
      out0[s] = v5;
      out1[s] = v6;
      out2[s] = v8;
      out3[s] = v10;
      out4[s] = v14;
      out5[s] = v16;
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
      if (P == 1) k0_sum_finish<I>(o, acc, M, K, P, T, n0, in0, out0, out1, out2, out3, out4, out5, out6, partial);
      else partial[o * P + p] = acc;
    }
  }
}
extern "C" __global__ void __launch_bounds__(256) k0_sum(int M, int K, int P, int T, int n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, float* __restrict__ out2, float* __restrict__ out3, float* __restrict__ out4, float* __restrict__ out5, float* __restrict__ out6, double* __restrict__ partial) {
  k0_sum_body<int>(M, K, P, T, n0, in0, out0, out1, out2, out3, out4, out5, out6, partial);
}
extern "C" __global__ void __launch_bounds__(256) k0_sum_i64(long long M, long long K, long long P, long long T, long long n0, const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ out1, float* __restrict__ out2, float* __restrict__ out3, float* __restrict__ out4, float* __restrict__ out5, float* __restrict__ out6, double* __restrict__ partial) {
  k0_sum_body<long long>(M, K, P, T, n0, in0, out0, out1, out2, out3, out4, out5, out6, partial);
}

