// symgrad random numbers: Philox-4x32-10 and float64 math rounded exactly as the
// NumPy backend rounds it (the _rn intrinsics keep nvcc from contracting into FMAs).
#ifdef __CUDA_ARCH__
#define SG_DADD(a, b) __dadd_rn((a), (b))
#define SG_DSUB(a, b) __dsub_rn((a), (b))
#define SG_DMUL(a, b) __dmul_rn((a), (b))
#define SG_DDIV(a, b) __ddiv_rn((a), (b))
#define SG_DSQRT(a) __dsqrt_rn(a)
#else
#define SG_DADD(a, b) ((a) + (b))
#define SG_DSUB(a, b) ((a) - (b))
#define SG_DMUL(a, b) ((a) * (b))
#define SG_DDIV(a, b) ((a) / (b))
#define SG_DSQRT(a) sqrt(a)
#endif

// The four 32-bit words of Philox-4x32-10 for counter (block, stream, step, counter), key seed.
__device__ __forceinline__ void sg_philox(unsigned long long block, long long stream,
                                          long long step, long long counter,
                                          unsigned long long seed, unsigned int w[4]) {
  unsigned int c0 = (unsigned int)block, c1 = (unsigned int)stream;
  unsigned int c2 = (unsigned int)step, c3 = (unsigned int)counter;
  unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const unsigned long long p0 = (unsigned long long)c0 * 0xD2511F53ull;
    const unsigned long long p1 = (unsigned long long)c2 * 0xCD9E8D57ull;
    c0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0;
    c1 = (unsigned int)p1;
    c2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
    c3 = (unsigned int)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  w[0] = c0; w[1] = c1; w[2] = c2; w[3] = c3;
}

// log(x) for x in (0, 1], as _sg_log of the NumPy backend.
__device__ __forceinline__ double sg_random_log(double x) {
  int e;
  double m = frexp(x, &e);
  if (m < 0.7071067811865476) { m = SG_DMUL(m, 2.0); e -= 1; }
  const double f = SG_DSUB(m, 1.0);
  const double s = SG_DDIV(f, SG_DADD(2.0, f));
  const double z = SG_DMUL(s, s);
  double p = SG_DDIV(2.0, 21.0);
  for (int k = 9; k >= 0; --k) p = SG_DADD(SG_DMUL(p, z), SG_DDIV(2.0, (double)(2 * k + 1)));
  return SG_DADD(SG_DMUL((double)e, 0.6931471805599453), SG_DMUL(s, p));
}

// cos(2 pi u) (or sin with want_sin) for u in [0, 1), as _sg_cos_sin_2pi.
__device__ __forceinline__ double sg_random_cos_sin_2pi(double u, bool want_sin) {
  const double t = SG_DMUL(u, 4.0);
  const double q = floor(t);
  const double theta = SG_DMUL(SG_DSUB(t, q), 1.5707963267948966);
  const double z = SG_DMUL(theta, theta);
  double s = 1.0, c = 1.0;
  for (int k = 12; k >= 1; --k) {
    s = SG_DSUB(1.0, SG_DDIV(SG_DMUL(z, s), (double)((2 * k) * (2 * k + 1))));
    c = SG_DSUB(1.0, SG_DDIV(SG_DMUL(z, c), (double)((2 * k - 1) * (2 * k))));
  }
  s = SG_DMUL(theta, s);
  const int quadrant = (int)q;
  const double cosine = quadrant == 0 ? c : quadrant == 1 ? -s : quadrant == 2 ? -c : s;
  const double sine = quadrant == 0 ? s : quadrant == 1 ? c : quadrant == 2 ? -s : -c;
  return want_sin ? sine : cosine;
}

// Element i of random_uniform: low + (high - low) * u, u with `bits` random bits in [0, 1).
__device__ __forceinline__ double sg_random_uniform(unsigned long long i, long long step,
                                                    long long counter, unsigned long long seed,
                                                    long long stream, long long bits,
                                                    double low, double high) {
  unsigned int w[4];
  double u;
  if (bits > 32) {
    sg_philox(i >> 1, stream, step, counter, seed, w);
    const int j = 2 * (int)(i & 1);
    const unsigned long long word = ((unsigned long long)w[j + 1] << 32) | w[j];
    u = ldexp((double)(word >> (64 - bits)), -(int)bits);
  } else {
    sg_philox(i >> 2, stream, step, counter, seed, w);
    u = ldexp((double)(w[i & 3] >> (32 - bits)), -(int)bits);
  }
  return SG_DADD(low, SG_DMUL(SG_DSUB(high, low), u));
}

// Element i of random_normal: mean + std * z, z from Box-Muller on one block's uniforms.
__device__ __forceinline__ double sg_random_normal(unsigned long long i, long long step,
                                                   long long counter, unsigned long long seed,
                                                   long long stream, long long bits,
                                                   double mean, double std) {
  unsigned int w[4];
  double u1, u2;
  if (bits > 32) {
    sg_philox(i >> 1, stream, step, counter, seed, w);
    const unsigned long long a = (((unsigned long long)w[1] << 32) | w[0]) >> 11;
    const unsigned long long b = (((unsigned long long)w[3] << 32) | w[2]) >> 11;
    u1 = ldexp((double)(a + 1), -53);
    u2 = ldexp((double)b, -53);
  } else {
    sg_philox(i >> 2, stream, step, counter, seed, w);
    const int j = 2 * (int)((i >> 1) & 1);
    u1 = ldexp((double)w[j] + 1.0, -32);
    u2 = ldexp((double)w[j + 1], -32);
  }
  const double radius = SG_DSQRT(SG_DMUL(-2.0, sg_random_log(u1)));
  const double z = SG_DMUL(radius, sg_random_cos_sin_2pi(u2, (i & 1) != 0));
  return SG_DADD(mean, SG_DMUL(std, z));
}
