// xccl-synth GPU executor: one persistent kernel per device interprets the IR.
//
// Each CUDA thread block runs one IR threadblock of one rank. Every chunk is processed tile by
// tile, and for each tile the block replays all of its steps, as the MSCCL runtime does. Data
// between ranks goes through a FIFO per connection (sender rank, receiver rank, channel) that lives
// in the receiver's memory: the sender writes a slot over NVLink (or into the same device) and
// raises the connection's head counter, the receiver consumes the slot and raises the tail
// counter, which lives in the sender's memory. Cross-threadblock dependencies use one progress
// flag per block. Every counter and flag carries the launch epoch in its high bits, so a value
// left by an earlier launch never satisfies a wait. Every wait is bounded: on time-out the block
// records an error code and the whole launch drains instead of hanging the GPU.

#include <cuda_fp16.h>

// fixed-width names without <stdint.h>, which NVRTC does not provide
typedef int i32;
typedef long long i64;
typedef unsigned long long u64;
typedef unsigned char u8;

#define XCCL_EPOCH_SHIFT 40
#define XCCL_STEP_STRIDE 4096  // > most steps of one threadblock; flag = tile * stride + step + 1

// op types, in the order of runtime/cupy/pack.py OP_CODES
enum : int { OP_S = 0, OP_R, OP_RCS, OP_RRS, OP_RRC, OP_RRCS, OP_CPY, OP_RE, OP_NOP };

// error codes, mirrored in runtime/cupy/executor.py
enum : int { ERR_NONE = 0, ERR_DEP_TIMEOUT = 1, ERR_RECV_TIMEOUT = 2, ERR_SEND_TIMEOUT = 3, ERR_BAD_OP = 4 };

struct BlockDesc {        // one IR threadblock, 12 x int32
  i32 rank;
  i32 tb_id;
  i32 send_conn;     // connection index or -1
  i32 recv_conn;
  i32 step_begin;
  i32 step_count;
  i32 pad[6];
};

struct StepDesc {         // one IR op, 10 x int32
  i32 type;
  i32 src_buf;        // 0 input, 1 output, 2 scratch, -1 none
  i32 src_off;
  i32 dst_buf;
  i32 dst_off;
  i32 count;
  i32 dep_begin;      // into the deps table
  i32 dep_count;
  i32 has_dep;
  i32 pad;
};

struct Conn {             // one connection, device pointers (same for sender and receiver)
  u64 fifo;          // receiver memory: nslots * slot_elems elements
  u64 head;          // receiver memory: slots filled (epoch-tagged)
  u64 tail;          // sender memory: slots consumed (epoch-tagged)
};

struct Args {
  const BlockDesc* blocks;
  const StepDesc* steps;
  const i32* deps;    // pairs (global block index, step index)
  const Conn* conns;
  const u64* buffers;  // per rank: input, output, scratch pointers
  u64* flags;        // per global block: progress (epoch-tagged)
  i32* error;         // [code, block, step, tile]
  i64 chunk_elems;    // elements per MSCCL chunk
  i64 tile_elems;     // elements of a chunk processed per tile
  i64 slot_elems;     // elements per FIFO slot
  i32 nslots;
  i32 block_offset;   // first global block of this launch (one launch per device)
  u64 epoch;
  u64 timeout_ns;
};

template <typename T> struct Sum { __device__ T operator()(T a, T b) const { return a + b; } };
template <typename T> struct Prod { __device__ T operator()(T a, T b) const { return a * b; } };
template <typename T> struct Min { __device__ T operator()(T a, T b) const { return b < a ? b : a; } };
template <typename T> struct Max { __device__ T operator()(T a, T b) const { return a < b ? b : a; } };

template <> struct Sum<__half> { __device__ __half operator()(__half a, __half b) const { return __float2half(__half2float(a) + __half2float(b)); } };
template <> struct Prod<__half> { __device__ __half operator()(__half a, __half b) const { return __float2half(__half2float(a) * __half2float(b)); } };
template <> struct Min<__half> { __device__ __half operator()(__half a, __half b) const { return __half2float(b) < __half2float(a) ? b : a; } };
template <> struct Max<__half> { __device__ __half operator()(__half a, __half b) const { return __half2float(a) < __half2float(b) ? b : a; } };

__device__ __forceinline__ u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ u64 load_volatile(const u64* p) {
  return *reinterpret_cast<const volatile u64*>(p);
}

__device__ __forceinline__ void store_volatile(u64* p, u64 v) {
  *reinterpret_cast<volatile u64*>(p) = v;
}

// Spin until *p >= target; false on time-out or when another block already failed.
__device__ bool wait_at_least(const u64* p, u64 target, const Args& a) {
  u64 start = 0;
  int spins = 0;
  while (load_volatile(p) < target) {
    if (++spins == 1024) {
      spins = 0;
      if (*reinterpret_cast<volatile i32*>(a.error) != ERR_NONE) return false;
      u64 t = now_ns();
      if (start == 0) start = t;
      else if (t - start > a.timeout_ns) return false;
    }
  }
  return true;
}

__device__ void fail(const Args& a, i32 code, i32 block, i32 step, i32 tile) {
  if (atomicCAS(a.error, ERR_NONE, code) == ERR_NONE) {
    a.error[1] = block;
    a.error[2] = step;
    a.error[3] = tile;
    __threadfence_system();
  }
}

template <typename T>
__device__ __forceinline__ T* buffer_ptr(const Args& a, i32 rank, i32 buf, i32 off, i64 at) {
  if (buf < 0) return nullptr;
  T* base = reinterpret_cast<T*>(a.buffers[3 * rank + buf]);
  return base + (i64)off * a.chunk_elems + at;
}

// The elementwise core of every op: out = in (op src?), written to dst and/or the next FIFO slot.
// in: the received slot, or src (s, cpy), or dst (re). 16-byte vectors where every pointer allows.
template <typename T, typename Op>
__device__ void move(const T* in, const T* with, T* dst, T* out, i64 n) {
  constexpr int V = 16 / sizeof(T);
  const Op op;
  u64 align = reinterpret_cast<u64>(in) | reinterpret_cast<u64>(with) |
                    reinterpret_cast<u64>(dst) | reinterpret_cast<u64>(out);
  i64 head = 0;
  if ((align & 15) == 0) {
    i64 nvec = n / V;
    for (i64 v = threadIdx.x; v < nvec; v += blockDim.x) {
      union { uint4 raw; T e[V]; } x, y;
      x.raw = reinterpret_cast<const uint4*>(in)[v];
      if (with) {
        y.raw = reinterpret_cast<const uint4*>(with)[v];
#pragma unroll
        for (int k = 0; k < V; ++k) x.e[k] = op(x.e[k], y.e[k]);
      }
      if (dst) reinterpret_cast<uint4*>(dst)[v] = x.raw;
      if (out) reinterpret_cast<uint4*>(out)[v] = x.raw;
    }
    head = nvec * V;
  }
  for (i64 i = head + threadIdx.x; i < n; i += blockDim.x) {
    T x = in[i];
    if (with) x = op(x, with[i]);
    if (dst) dst[i] = x;
    if (out) out[i] = x;
  }
}

template <typename T, typename Op>
__device__ void interpret(const Args& a) {
  __shared__ BlockDesc blk;
  __shared__ StepDesc st;
  __shared__ i32 ok;
  const i32 self = a.block_offset + blockIdx.x;
  if (threadIdx.x == 0) blk = a.blocks[self];
  __syncthreads();
  const u64 tag = a.epoch << XCCL_EPOCH_SHIFT;
  const Conn* sc = blk.send_conn >= 0 ? &a.conns[blk.send_conn] : nullptr;
  const Conn* rc = blk.recv_conn >= 0 ? &a.conns[blk.recv_conn] : nullptr;
  u64 nsent = 0, nrecv = 0;  // pieces through this block's connections in this launch
  i32 tile = 0;
  for (i64 g = 0; g < a.chunk_elems; g += a.tile_elems, ++tile) {
    const i64 len = min(a.tile_elems, a.chunk_elems - g);
    for (i32 s = 0; s < blk.step_count; ++s) {
      if (threadIdx.x == 0) {
        st = a.steps[blk.step_begin + s];
        ok = 1;
      }
      __syncthreads();
      // dependencies: thread k waits for the k-th one (as the MSCCL runtime does)
      for (i32 d = threadIdx.x; d < st.dep_count; d += blockDim.x) {
        const i32* dep = a.deps + 2 * (st.dep_begin + d);
        u64 target = tag | ((u64)tile * XCCL_STEP_STRIDE + dep[1] + 1);
        if (!wait_at_least(&a.flags[dep[0]], target, a)) {
          fail(a, ERR_DEP_TIMEOUT, self, s, tile);
          ok = 0;
        }
      }
      __syncthreads();
      if (!ok) return;
      if (st.dep_count > 0) __threadfence();
      const i32 type = st.type;
      if (type < OP_S || type > OP_NOP) {
        if (threadIdx.x == 0) fail(a, ERR_BAD_OP, self, s, tile);
        return;
      }
      if (type != OP_NOP) {
        const bool recv = type == OP_R || type == OP_RCS || type == OP_RRS || type == OP_RRC || type == OP_RRCS;
        const bool send = type == OP_S || type == OP_RCS || type == OP_RRS || type == OP_RRCS;
        const bool reduce = type == OP_RRS || type == OP_RRC || type == OP_RRCS || type == OP_RE;
        const bool write_dst = !(type == OP_S || type == OP_RRS);
        // a tile covering whole chunks makes the op's chunks one contiguous range; otherwise each
        // chunk contributes its tile slice separately (the same segments on both ends of a connection)
        const bool whole = len == a.chunk_elems;
        const i32 nseg = whole ? 1 : st.count;
        const i64 seg_len = whole ? (i64)st.count * len : len;
        for (i32 j = 0; j < nseg; ++j) {
          for (i64 q = 0; q < seg_len; q += a.slot_elems) {
            const i64 n = min(a.slot_elems, seg_len - q);
            const i64 at = g + q;
            T* src = buffer_ptr<T>(a, blk.rank, st.src_buf, st.src_off + j, at);
            T* dst = buffer_ptr<T>(a, blk.rank, st.dst_buf, st.dst_off + j, at);
            T* in_slot = nullptr;
            T* out_slot = nullptr;
            if (threadIdx.x == 0) {
              if (recv && !wait_at_least(reinterpret_cast<const u64*>(rc->head), tag | (nrecv + 1), a)) {
                fail(a, ERR_RECV_TIMEOUT, self, s, tile);
                ok = 0;
              }
              if (ok && send && nsent >= (u64)a.nslots &&
                  !wait_at_least(reinterpret_cast<const u64*>(sc->tail), tag | (nsent - a.nslots + 1), a)) {
                fail(a, ERR_SEND_TIMEOUT, self, s, tile);
                ok = 0;
              }
            }
            __syncthreads();
            if (!ok) return;
            __threadfence();
            if (recv) in_slot = reinterpret_cast<T*>(rc->fifo) + (i64)(nrecv % a.nslots) * a.slot_elems;
            if (send) out_slot = reinterpret_cast<T*>(sc->fifo) + (i64)(nsent % a.nslots) * a.slot_elems;
            const T* in = recv ? in_slot : (type == OP_RE ? dst : src);
            const T* with = reduce ? src : nullptr;
            move<T, Op>(in, with, write_dst ? dst : nullptr, out_slot, n);
            if (send) __threadfence_system();
            __syncthreads();
            if (threadIdx.x == 0) {
              if (recv) store_volatile(reinterpret_cast<u64*>(rc->tail), tag | (nrecv + 1));
              if (send) store_volatile(reinterpret_cast<u64*>(sc->head), tag | (nsent + 1));
            }
            if (recv) ++nrecv;
            if (send) ++nsent;
          }
        }
      }
      if (st.has_dep) {
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) store_volatile(&a.flags[self], tag | ((u64)tile * XCCL_STEP_STRIDE + s + 1));
      }
      __syncthreads();
    }
  }
}

// Scalar parameters (not one struct) so any launcher, CuPy included, can pass them.
template <typename T, template <typename> class Op>
__global__ void __launch_bounds__(512)
    xccl_interpret(const BlockDesc* blocks, const StepDesc* steps, const i32* deps, const Conn* conns,
                   const u64* buffers, u64* flags, i32* error, i64 chunk_elems, i64 tile_elems, i64 slot_elems,
                   i32 nslots, i32 block_offset, u64 epoch, u64 timeout_ns) {
  const Args a{blocks, steps, deps, conns, buffers, flags, error, chunk_elems, tile_elems, slot_elems,
               nslots, block_offset, epoch, timeout_ns};
  interpret<T, Op<T>>(a);
}

// Explicit instantiations so `nvcc -c` checks every variant (NVRTC gets name expressions instead).
#ifdef XCCL_INSTANTIATE_ALL
#define XCCL_PARAMS const BlockDesc*, const StepDesc*, const i32*, const Conn*, const u64*, u64*, i32*, \
                    i64, i64, i64, i32, i32, u64, u64
#define XCCL_INST(T)                                                  \
  template __global__ void xccl_interpret<T, Sum>(XCCL_PARAMS);  \
  template __global__ void xccl_interpret<T, Prod>(XCCL_PARAMS); \
  template __global__ void xccl_interpret<T, Min>(XCCL_PARAMS);  \
  template __global__ void xccl_interpret<T, Max>(XCCL_PARAMS);
XCCL_INST(float)
XCCL_INST(double)
XCCL_INST(__half)
XCCL_INST(i32)
XCCL_INST(i64)
XCCL_INST(u8)
#endif
