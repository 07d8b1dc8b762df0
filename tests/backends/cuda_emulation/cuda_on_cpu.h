// cuda_on_cpu.h: the CUDA execution model on the CPU, deterministic, for testing kernel text.
//
// g++ -std=c++17 -include cuda_on_cpu.h compiles CUDA C++ kernels (as translate.py prepares
// them) into plain functions. sg_emu::launch runs one over a grid: blocks one after another in
// the calling OS thread, each CUDA thread of a block a fiber (its own stack) that runs until
// it blocks at a barrier or a shuffle, or ends. Which fiber runs next is fixed by the launch's
// schedule bits, so every run of a schedule is the same run:
//
//   SG_REVERSE_THREADS  threads (and warps) in reverse order
//   SG_REVERSE_BLOCKS   blocks in reverse order
//   SG_GREEDY_WARPS     a warp runs until all its lanes block before the next warp starts
//   SG_SHUFFLED         threads in a pseudo-random order, new at every pass (seeded per block)
//
// Kernel faults are reported, never hung on: a pass in which no fiber moves is a deadlock;
// __syncthreads reached at different lines, or by some threads after others have exited, is a
// divergent barrier; a shuffle whose mask leaves out the calling lane, names a lane that does
// not exist or has exited, or differs between the lanes of one shuffle is a bad mask; a kernel
// running longer than the time limit (CPU seconds, sg_emu_set_time_limit) is stopped, as is
// one that touches an unmapped address (outside AddressSanitizer builds). A failed launch
// returns 1 with the message, naming the block, thread and source line.
//
// Shared memory (each __shared__ declaration is followed by SG_SHARED(name), written by
// translate.py) is filled with 0xFF bytes when a block first reaches the declaration: reading
// an element the block never wrote gives NaN (or -1), as unwritten memory gives garbage.
//
// Under AddressSanitizer (-fsanitize=address) every switch between fibers is announced to ASan.
#pragma once
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <sys/mman.h>
#include <sys/time.h>
#include <ucontext.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

// ---- CUDA's keywords ------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static     // one block runs at a time: a block's shared memory is static

// CUDA's math library has float overloads in the global namespace; libstdc++ has them in std.
using std::acos; using std::acosh; using std::asin; using std::asinh; using std::atan;
using std::atan2; using std::atanh; using std::cbrt; using std::ceil; using std::copysign;
using std::cos; using std::cosh; using std::erf; using std::erfc; using std::exp;
using std::exp2; using std::expm1; using std::fabs; using std::floor; using std::fma;
using std::fmax; using std::fmin; using std::fmod; using std::hypot; using std::isfinite;
using std::isinf; using std::isnan; using std::lgamma; using std::log; using std::log10;
using std::log1p; using std::log2; using std::nearbyint; using std::pow; using std::remainder;
using std::rint; using std::round; using std::signbit; using std::sin; using std::sinh;
using std::sqrt; using std::tan; using std::tanh; using std::tgamma; using std::trunc;
using std::max; using std::min;
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
constexpr int warpSize = 32;

namespace sg_emu {

// ---- fibers: a context switch that saves only what a call must preserve --------------------
// Under AddressSanitizer each switch tells ASan which stack it moves to (as fiber libraries
// do), so its reports and stack checks follow the fibers.
struct Stack { const void* bottom = nullptr; size_t size = 0; };

#if defined(__x86_64__)
extern "C" void sg_emu_switch(void** save_sp, void* load_sp);
asm(R"(.text
.weak sg_emu_switch
.type sg_emu_switch,@function
sg_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
)");
struct Context { void* sp; Stack stack; };
inline void raw_switch(Context& save, Context& load) { sg_emu_switch(&save.sp, load.sp); }
// A new context that enters `entry` (which never returns) on `stack`.
inline void prepare(Context& c, char* stack, size_t size, void (*entry)()) {
  uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
  void** sp = (void**)top;
  *--sp = nullptr;                  // entry's return address slot: rsp % 16 == 8 on entry
  *--sp = (void*)entry;             // where sg_emu_switch's ret goes
  for (int i = 0; i < 6; ++i) *--sp = nullptr;    // rbp rbx r12 r13 r14 r15
  unsigned control[2];
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(control[0]), "=m"(control[1]));
  sp -= 1;
  std::memcpy(sp, control, 8);
  c.sp = sp;
  c.stack = {stack, size};
}
#else
struct Context { ucontext_t uc; Stack stack; };
inline void raw_switch(Context& save, Context& load) { swapcontext(&save.uc, &load.uc); }
inline void prepare(Context& c, char* stack, size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
  c.stack = {stack, size};
}
#endif

// Leave `save` (for good when `final`) for `load`; returns when something switches back.
inline void switch_to(Context& save, Context& load, bool final = false) {
#if defined(__SANITIZE_ADDRESS__)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(final ? nullptr : &fake_stack, load.stack.bottom,
                                 load.stack.size);
  raw_switch(save, load);
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
  (void)final;
  raw_switch(save, load);
#endif
}

// First thing on a new fiber: learn the stack of the context that started it.
inline void entered(Context& from) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(nullptr, &from.stack.bottom, &from.stack.size);
#else
  (void)from;
#endif
}

// ---- one block of threads -------------------------------------------------------------------
enum State : unsigned char { RUNNABLE, WAITING, EXITED };
constexpr unsigned MAX_THREADS = 1024, WARPS = MAX_THREADS / 32, STACK_BYTES = 256 * 1024;
enum Schedule { REVERSE_THREADS = 1, REVERSE_BLOCKS = 2, GREEDY_WARPS = 4, SHUFFLED = 8 };

struct Fiber {
  Context context;
  char* stack;
  State state;
  uint3 index;
  int line;            // where it waits (0: not waiting)
};

struct Warp {
  unsigned lanes;      // lanes that exist (a partial last warp has fewer than 32)
  unsigned arrived;    // lanes waiting at the current shuffle
  unsigned generation;
  unsigned mask;
  int line;
  unsigned long long values[2][32];   // lane values of the current (and last) shuffle
};

struct Block {
  Fiber fibers[MAX_THREADS];
  Warp warps[WARPS];
  Context scheduler;
  unsigned size, running, exited, arrived, generation;
  int barrier_line;
  unsigned long long progress;
  void (*body)(void**);
  void** args;
  const void* shared[64];   // shared arrays already poisoned in this block
  unsigned shared_count;
  bool in_fiber;
  char error[768];
};

inline Block* current = nullptr;
inline double time_limit = 60.0;   // CPU seconds per launch
inline uint3 threadIdx_, blockIdx_;
inline dim3 blockDim_, gridDim_;

inline Fiber& self() { return current->fibers[current->running]; }

inline void describe_thread(char* out, size_t size) {
  const Fiber& f = self();
  snprintf(out, size, "block (%u,%u,%u) thread (%u,%u,%u)", blockIdx_.x, blockIdx_.y,
           blockIdx_.z, f.index.x, f.index.y, f.index.z);
}

// Record the first error and leave this fiber for good: the launch stops and reports it.
[[noreturn]] inline void fail(const char* format, ...) __attribute__((format(printf, 1, 2)));
inline void fail(const char* format, ...) {
  Block& b = *current;
  if (!b.error[0]) {
    char where[128], what[600];
    describe_thread(where, sizeof where);
    va_list args;
    va_start(args, format);
    vsnprintf(what, sizeof what, format, args);
    va_end(args);
    snprintf(b.error, sizeof b.error, "%s: %s", where, what);
  }
  self().state = WAITING;
  b.in_fiber = false;
  switch_to(self().context, b.scheduler, true);
  __builtin_unreachable();
}

// Park this fiber until `generation` moves on.
inline void wait_while(const unsigned& generation, unsigned seen, int line) {
  Block& b = *current;
  Fiber& f = self();
  f.line = line;
  while (generation == seen) {
    f.state = WAITING;
    b.in_fiber = false;
    switch_to(f.context, b.scheduler);
  }
  f.state = RUNNABLE;
  f.line = 0;
}

inline void syncthreads(int line) {
  Block& b = *current;
  if (b.exited)
    fail("__syncthreads at line %d after %u of the block's %u threads exited (divergent "
         "barrier)", line, b.exited, b.size);
  if (b.arrived == 0) b.barrier_line = line;
  else if (b.barrier_line != line)
    fail("__syncthreads at line %d while other threads wait at line %d (divergent barrier)",
         line, b.barrier_line);
  b.progress++;
  unsigned seen = b.generation;
  if (++b.arrived == b.size) {
    b.arrived = 0;
    b.generation++;
    return;
  }
  wait_while(b.generation, seen, line);
}

// All lanes of `mask` meet here (a warp-synchronous step); returns the warp and the slot
// holding the lanes' `bits`.
inline unsigned long long* warp_meet(unsigned mask, unsigned long long bits, int line,
                                     const char* what) {
  Block& b = *current;
  unsigned t = b.running, lane = t % 32;
  Warp& w = b.warps[t / 32];
  if (!(mask >> lane & 1u)) fail("%s at line %d: mask 0x%08x leaves out the calling lane %u", what, line, mask, lane);
  if ((mask & w.lanes) != mask)
    fail("%s at line %d: mask 0x%08x names lanes that do not exist (warp %u has lanes 0x%08x)",
         what, line, mask, t / 32, w.lanes);
  for (unsigned l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && b.fibers[t - lane + l].state == EXITED)
      fail("%s at line %d: mask 0x%08x names lane %u, which has exited", what, line, mask, l);
  if (w.arrived == 0) {
    w.line = line;
    w.mask = mask;
  } else if (w.line != line || w.mask != mask) {
    fail("%s at line %d with mask 0x%08x while lanes of the warp wait at line %d with mask "
         "0x%08x", what, line, mask, w.line, w.mask);
  }
  unsigned seen = w.generation;
  w.values[seen & 1][lane] = bits;
  b.progress++;
  if (++w.arrived == (unsigned)__builtin_popcount(mask)) {
    w.arrived = 0;
    w.generation++;
  } else {
    wait_while(w.generation, seen, line);
  }
  return w.values[seen & 1];
}

template <typename T> unsigned long long to_bits(T value) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  unsigned long long bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}

// Lane `source` (or, when that lane is outside the mask, poison) of a shuffle by all lanes.
template <typename T> T shuffle(unsigned mask, T value, int source, int width, int line,
                                const char* what) {
  if (width < 1 || width > 32 || (width & (width - 1)))
    fail("%s at line %d: width %d is not a power of two up to 32", what, line, width);
  unsigned long long* values = warp_meet(mask, to_bits(value), line, what);
  T result;
  if (source < 0) return value;   // out of the segment: the lane keeps its own value
  if (!(mask >> source & 1u)) {   // reading a lane outside the mask: undefined, so poison
    std::memset(&result, 0xFF, sizeof(T));
    return result;
  }
  std::memcpy(&result, &values[source], sizeof(T));
  return result;
}

inline int lane_id() { return (int)(current->running % 32); }
inline int segment_base(int width) { return lane_id() & ~(width - 1); }

inline unsigned ballot(unsigned mask, int predicate, int line, const char* what) {
  unsigned long long* values = warp_meet(mask, predicate != 0, line, what);
  unsigned out = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && values[l]) out |= 1u << l;
  return out;
}
inline void syncwarp(unsigned mask, int line) { warp_meet(mask, 0, line, "__syncwarp"); }

// Poison a shared array the first time a thread of this block reaches its declaration.
inline void fresh_shared(const void* array, size_t bytes) {
  Block& b = *current;
  for (unsigned i = 0; i < b.shared_count; ++i)
    if (b.shared[i] == array) return;
  if (b.shared_count == sizeof b.shared / sizeof b.shared[0]) fail("more than 64 shared arrays");
  b.shared[b.shared_count++] = array;
  std::memset(const_cast<void*>(array), 0xFF, bytes);
}

[[noreturn]] inline void fiber_entry() {
  Block& b = *current;
  entered(b.scheduler);
  unsigned t = b.running;
  b.body(b.args);
  if (b.arrived)
    fail("exits while %u threads wait at __syncthreads (line %d): divergent barrier",
         b.arrived, b.barrier_line);
  Warp& w = b.warps[t / 32];
  if (w.arrived)
    fail("exits while %u lanes of its warp wait at line %d", w.arrived, w.line);
  b.fibers[t].state = EXITED;
  b.exited++;
  b.progress++;
  b.in_fiber = false;
  switch_to(b.fibers[t].context, b.scheduler, true);   // an exited fiber is never resumed
  __builtin_unreachable();
}

// ---- stopping a kernel that loops for ever, or faults --------------------------------------
inline void on_signal(int signal, siginfo_t* info, void*) {
  Block* b = current;
  if (b && b->in_fiber) {
    if (signal == SIGVTALRM)
      fail("still running after %.0f CPU seconds (an endless loop?)", time_limit);
    fail("invalid memory access at address %p", info->si_addr);
  }
  if (signal == SIGVTALRM) {         // between fibers: try again soon, inside one
    itimerval soon = {};
    soon.it_value.tv_usec = 10000;
    setitimer(ITIMER_VIRTUAL, &soon, nullptr);
    return;
  }
  std::signal(signal, SIG_DFL);      // a fault outside any kernel: let it crash as usual
  raise(signal);
}

struct SignalGuard {
  struct sigaction old_timer, old_segv, old_bus;
  itimerval old_clock;
  SignalGuard() {
    struct sigaction action = {};
    action.sa_sigaction = on_signal;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGVTALRM, &action, &old_timer);
#if !defined(__SANITIZE_ADDRESS__)
    sigaction(SIGSEGV, &action, &old_segv);
    sigaction(SIGBUS, &action, &old_bus);
#endif
    itimerval clock = {};
    clock.it_value.tv_sec = (time_t)time_limit;
    clock.it_value.tv_usec = (suseconds_t)((time_limit - (double)(time_t)time_limit) * 1e6);
    setitimer(ITIMER_VIRTUAL, &clock, &old_clock);
  }
  ~SignalGuard() {
    itimerval off = {};
    setitimer(ITIMER_VIRTUAL, &off, nullptr);
    sigaction(SIGVTALRM, &old_timer, nullptr);
#if !defined(__SANITIZE_ADDRESS__)
    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
#endif
  }
};

inline unsigned next_random(unsigned long long& state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return (unsigned)(state >> 11);
}

// Resume fiber t; false when it reported an error.
inline bool resume(Block& b, unsigned t) {
  Fiber& f = b.fibers[t];
  if (f.state == EXITED) return true;
  b.running = t;
  threadIdx_ = f.index;
  b.in_fiber = true;
  switch_to(b.scheduler, f.context);
  b.in_fiber = false;
  return !b.error[0];
}

// One pass over the block's fibers in the schedule's order; false when an error stopped it.
inline bool pass(Block& b, int schedule, unsigned* order, unsigned long long& random) {
  bool reverse = schedule & REVERSE_THREADS;
  if (schedule & GREEDY_WARPS) {   // each warp as far as it goes, then the next warp
    unsigned warps = (b.size + 31) / 32;
    for (unsigned k = 0; k < warps; ++k) {
      unsigned w = reverse ? warps - 1 - k : k;
      unsigned first = w * 32, count = std::min(32u, b.size - first);
      unsigned long long before;
      do {
        before = b.progress;
        for (unsigned j = 0; j < count; ++j)
          if (!resume(b, first + (reverse ? count - 1 - j : j))) return false;
      } while (b.progress != before);
    }
    return true;
  }
  for (unsigned i = 0; i < b.size; ++i) order[i] = reverse ? b.size - 1 - i : i;
  if (schedule & SHUFFLED)
    for (unsigned i = b.size; i > 1; --i) std::swap(order[i - 1], order[next_random(random) % i]);
  for (unsigned i = 0; i < b.size; ++i)
    if (!resume(b, order[i])) return false;
  return true;
}

inline Block* the_block() {
  static Block* block = nullptr;
  if (!block) {
    block = (Block*)calloc(1, sizeof(Block));
    for (unsigned i = 0; i < MAX_THREADS; ++i)   // pages are taken only when touched
      block->fibers[i].stack = (char*)mmap(nullptr, STACK_BYTES, PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  }
  return block;
}

// Run body(args) over the grid under `schedule`; 0, or 1 with the message in *error.
inline int launch(dim3 grid, dim3 block_dim, int schedule, void (*body)(void**), void** args,
                  const char** error) {
  static bool busy = false;
  static char refused[] = "a launch started while another one runs (one at a time)";
  *error = refused;
  if (busy) return 1;
  Block& b = *the_block();
  *error = b.error;
  b.error[0] = 0;
  b.size = block_dim.x * block_dim.y * block_dim.z;
  unsigned long long blocks = (unsigned long long)grid.x * grid.y * grid.z;
  if (b.size == 0 || b.size > MAX_THREADS || blocks == 0 || grid.y > 65535 || grid.z > 65535) {
    snprintf(b.error, sizeof b.error, "invalid launch: grid (%u,%u,%u), block (%u,%u,%u)",
             grid.x, grid.y, grid.z, block_dim.x, block_dim.y, block_dim.z);
    return 1;
  }
  busy = true;
  current = &b;
  gridDim_ = grid;
  blockDim_ = block_dim;
  b.body = body;
  b.args = args;
  unsigned order[MAX_THREADS];
  SignalGuard guard;
  int status = 0;
  for (unsigned long long k = 0; k < blocks && !status; ++k) {
    unsigned long long q = schedule & REVERSE_BLOCKS ? blocks - 1 - k : k;
    blockIdx_ = {(unsigned)(q % grid.x), (unsigned)(q / grid.x % grid.y),
                 (unsigned)(q / ((unsigned long long)grid.x * grid.y))};
    b.arrived = b.generation = b.exited = 0;
    b.shared_count = 0;
    for (unsigned w = 0; w < (b.size + 31) / 32; ++w) {
      unsigned count = std::min(32u, b.size - w * 32);
      b.warps[w] = Warp{};
      b.warps[w].lanes = count == 32 ? 0xffffffffu : (1u << count) - 1;
    }
    for (unsigned i = 0; i < b.size; ++i) {
      Fiber& f = b.fibers[i];
      f.state = RUNNABLE;
      f.line = 0;
      f.index = {i % block_dim.x, i / block_dim.x % block_dim.y, i / (block_dim.x * block_dim.y)};
      prepare(f.context, f.stack, STACK_BYTES, fiber_entry);
    }
    unsigned long long random = 0x9E3779B97F4A7C15ull ^ (q + 1) * 0xBF58476D1CE4E5B9ull;
    while (b.exited < b.size) {
      unsigned long long before = b.progress;
      if (!pass(b, schedule, order, random)) { status = 1; break; }
      if (b.progress == before) {
        unsigned waiting = 0;
        while (b.fibers[waiting].state == EXITED) ++waiting;
        snprintf(b.error, sizeof b.error,
                 "deadlock in block (%u,%u,%u): %u of %u threads wait and none can move on; "
                 "thread %u waits at line %d (%u exited)", blockIdx_.x, blockIdx_.y,
                 blockIdx_.z, b.size - b.exited, b.size, waiting, b.fibers[waiting].line,
                 b.exited);
        status = 1;
        break;
      }
    }
  }
  current = nullptr;
  busy = false;
  return status;
}

inline float half_bits_to_float(unsigned short bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return (float)h;
}
inline unsigned short float_to_half_bits(float f) {   // round to nearest even
  _Float16 h = (_Float16)f;
  unsigned short bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
}  // namespace sg_emu

// ---- CUDA's built-in variables and intrinsics -----------------------------------------------
// Each intrinsic that synchronizes takes the caller's line (__builtin_LINE() as a default
// argument is the line of the call) for its error messages and divergence checks.
inline const uint3& threadIdx = sg_emu::threadIdx_;
inline const uint3& blockIdx = sg_emu::blockIdx_;
inline const dim3& blockDim = sg_emu::blockDim_;
inline const dim3& gridDim = sg_emu::gridDim_;
inline void __syncthreads(int line = __builtin_LINE()) { sg_emu::syncthreads(line); }
inline void __syncwarp(unsigned mask = 0xffffffffu, int line = __builtin_LINE()) {
  sg_emu::syncwarp(mask, line);
}
// A source lane outside the caller's `width`-lane segment gives the caller its own value.
template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32, int line = __builtin_LINE()) {
  return sg_emu::shuffle(mask, v, sg_emu::segment_base(width) + (src & (width - 1)), width,
                         line, "__shfl_sync");
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, int line = __builtin_LINE()) {
  int src = sg_emu::lane_id() + (int)delta;
  bool inside = src < sg_emu::segment_base(width) + width;
  return sg_emu::shuffle(mask, v, inside ? src : -1, width, line, "__shfl_down_sync");
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, int line = __builtin_LINE()) {
  int src = sg_emu::lane_id() - (int)delta;
  bool inside = src >= sg_emu::segment_base(width);
  return sg_emu::shuffle(mask, v, inside ? src : -1, width, line, "__shfl_up_sync");
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, int line = __builtin_LINE()) {
  int src = sg_emu::lane_id() ^ lane_mask, base = sg_emu::segment_base(width);
  bool inside = src >= base && src < base + width;
  return sg_emu::shuffle(mask, v, inside ? src : -1, width, line, "__shfl_xor_sync");
}
inline unsigned __ballot_sync(unsigned mask, int p, int line = __builtin_LINE()) {
  return sg_emu::ballot(mask, p, line, "__ballot_sync");
}
inline int __any_sync(unsigned mask, int p, int line = __builtin_LINE()) {
  return sg_emu::ballot(mask, p, line, "__any_sync") != 0;
}
inline int __all_sync(unsigned mask, int p, int line = __builtin_LINE()) {
  return sg_emu::ballot(mask, p, line, "__all_sync") == mask;
}
inline unsigned __activemask() { return sg_emu::current->warps[sg_emu::current->running / 32].lanes; }
inline void __threadfence() {}
inline void __threadfence_block() {}
// SG_SHARED(name): written by translate.py after each __shared__ declaration
#define SG_SHARED(object) sg_emu::fresh_shared(&(object), sizeof(object))
// PTX of the inline asm statements translate.py knows: SG_PTX_<instruction>(out, in)
#define SG_PTX_cvt_f32_f16(out, in) ((out) = sg_emu::half_bits_to_float(in))
#define SG_PTX_cvt_rn_f16_f32(out, in) ((out) = sg_emu::float_to_half_bits(in))

inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
template <typename T> T __ldg(const T* p) { return *p; }
// Atomics: fibers never interleave inside a statement, so plain read-modify-writes are atomic.
template <typename T> T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <typename T> T atomicSub(T* p, T v) { T old = *p; *p = old - v; return old; }
template <typename T> T atomicMax(T* p, T v) { T old = *p; *p = old < v ? v : old; return old; }
template <typename T> T atomicMin(T* p, T v) { T old = *p; *p = v < old ? v : old; return old; }
template <typename T> T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <typename T> T atomicCAS(T* p, T expected, T v) {
  T old = *p;
  if (old == expected) *p = v;
  return old;
}

extern "C" __attribute__((weak)) void sg_emu_set_time_limit(double seconds) {
  sg_emu::time_limit = seconds;
}
