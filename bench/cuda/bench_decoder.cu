/* bench_decoder.cu: baton's decoder ops on CUDA at the Llama-3.2-1B shapes (hidden 2048, 32 heads,
 * 8 KV heads, head_dim 64, intermediate 8192, vocab 128256), bf16, batch 1, against floors
 * measured in the same run: an empty kernel (the latency floor) and a 16-byte grid-stride copy of
 * the same bytes (read + written, as the op moves them), on the same number of sets. Each call
 * reads cold data: the inputs rotate over distinct buffers, together over 2.5x the L2 (at least 64
 * MB), up to 65536 calls of a row (a decode-size call of a few KB needs that many); every call is
 * timed inside CUDA graphs of up to 1024 calls, replayed back to back (per-call time = the
 * replays' time / calls). Decode attention at contexts 1024 to 32768 (powers of 2), both cold
 * (rotated caches) and warm (the same caches every call, as PyTorch's published figures were
 * taken); prefill attention at T = 1024, 2048, 4096 and 8192 (also in TFLOP/s); the decode GEMV
 * x[1, 2048] . W[N, 2048]^T for N = 2048, 2560, 8192, 16384, 128256 with baton's own kernel
 * (baton__kcuda_gemv) and the gemm delegate (cuBLASLt), checked against each other.
 *
 * Decode attention also "+pdl": after rope_cache_update in the same graph, launched with PDL.
 * Floor rows (impl "floor") for decode rows whose op has a dependency the copy lacks: embedding's
 * index read before its row, kv_cache_update's position before its store, softmax's grid-wide
 * exchange between its read and its write (one row), its rows held on chip between their read
 * and their write (64 rows), rope's sincos between its loads and its stores, and
 * decode attention's ("attention decode ctx N floor: ..."): kernels that only read its K and V
 * bytes at its grids, with its dependent read of the positions first and then its merge over the
 * cluster, and the best read of the same bytes.
 *
 * Usage: bench_decoder [--json FILE] [--reps N] [--only PREFIX] [--ctx N,N,..] [--attn-sweep]
 * (--only: the rows whose label starts with PREFIX, e.g. "attention prefill"; --ctx: the decode
 * attention's contexts). Prints a table; --json writes the results (format "baton.bench_decoder",
 * docs/bench_decoder.schema.json). The decode attention's variants (BATON_ATTN_DECODE,
 * BATON_ATTN_CLUSTER, BATON_ATTN_STAGES, BATON_ATTN_WARPS, BATON_ATTN_PREFETCH, BATON_ATTN_EARLY,
 * BATON_ATTN_SPEC: kernels/cuda/decoder_attention.cuh) are read from the environment, one setting
 * per process; each call is prepared first as the runtime prepares it;
 * --attn-sweep runs the decode attention rows (contexts 1024, 4096 and 32768 unless --ctx) under
 * each setting in a child process and prints one table (BATON_SWEEP_ONLY="name,name" runs some;
 * --sweep-budget S starts no setting after S seconds). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <signal.h>
#include <sys/prctl.h>

#include <functional>
#include <string>
#include <vector>

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include "baton/baton.h"
#include "bench/cuda/bench_common.h"
#include "bench/cuda/copy_kernels.cuh"
#include "delegates/cuda/gemm_cublaslt.h"
#include "kernels/cuda/cuda_decoder.h"
#include "kernels/cuda/cuda_gemv.h"
extern "C" { /* a C header without a C++ guard */
#include "targets/registry.h"
}

static cudaStream_t g_stream;
static cudaDeviceProp g_prop;
static int g_reps = 20;
static const char *g_only; /* --only PREFIX: the rows whose label starts with it */
/* bytes past a 16-byte boundary at which bench_op places input 0 (a view at an offset) */
static int g_in0_shift;
static int g_sweep_child; /* run by --attn-sweep: rows also as SWEEPROW lines, no warm rows */
static std::vector<int64_t> g_ctxs = {1024, 2048, 4096, 8192, 16384, 32768}; /* --ctx */

static bool wanted(const char *label)
{
    return !g_only || !strncmp(label, g_only, strlen(g_only));
}
static baton_registry *g_reg;

struct Result {
    std::string op, shape, impl;
    double bytes, us, gbps, copy_us, copy_gbps, ratio, floor_us;
    int cold;
    std::string peer;
    double peer_us;
};
static std::vector<Result> g_results;
static double g_floor_us;

static void print_row(const Result &r)
{
    printf("%-40s %-26s %-9s %10.0f %9.2f %9.1f %9.2f %7.2f %5s %9.2f\n", r.op.c_str(),
           r.shape.c_str(), r.impl.c_str(), r.bytes, r.us, r.gbps, r.copy_us, r.ratio,
           r.cold ? "yes" : "no", r.peer_us);
    fflush(stdout);
}

/* Each row is printed as soon as it is measured: a run cut short by a timeout still shows them. */
static void record(const Result &r)
{
    g_results.push_back(r);
    print_row(r);
    if (g_sweep_child)
        printf("SWEEPROW %s|%.3f|%.3f|%.3f\n", r.op.c_str(), r.us, r.copy_us, r.peer_us);
}

/* A row from its measurement: bandwidths and the ratio to the copy of the same bytes derived. */
static void record_row(const std::string &op, const std::string &shape, const char *impl,
                       double bytes, double us, double cus, bool cold, const char *peer,
                       double peer_us)
{
    Result r;
    r.op = op;
    r.shape = shape;
    r.impl = impl;
    r.bytes = bytes;
    r.us = us;
    r.gbps = bytes / us * 1e-3;
    r.copy_us = cus;
    r.copy_gbps = bytes / cus * 1e-3;
    r.ratio = us / cus;
    r.floor_us = g_floor_us;
    r.cold = cold;
    r.peer = peer;
    r.peer_us = peer_us;
    record(r);
}

/* A floor kernel's row (impl "floor": what an op's dependencies cost with nothing around them),
 * against the copy of the same bytes; cold when its k calls' data exceed twice the L2; peer, where
 * given, the op whose floor it is. */
static void record_floor(const std::string &label, const std::string &shape, double bytes,
                         double us, double cus, int k, const char *peer = "", double peer_us = NAN)
{
    record_row(label, shape, "floor", bytes, us, cus, (double)k * bytes > 2.0 * g_prop.l2CacheSize,
               peer, peer_us);
}

__global__ void empty_kernel()
{
}

/* Pools of `sets` copies of one tensor, set i at i * stride bytes. */
struct Pool {
    char *base = nullptr;
    size_t stride = 0;
    int sets = 0;
    void *at(int i) const
    {
        return base + (size_t)(i % sets) * stride;
    }
};

static Pool pool_alloc(size_t bytes, int sets)
{
    Pool p;
    p.stride = (bytes + 255) & ~(size_t)255;
    p.sets = sets;
    CHECK_CUDA(cudaMalloc((void **)&p.base, p.stride * (size_t)sets));
    return p;
}

static int sets_for(double bytes_per_call, int cap)
{
    const double want = std::max(64.0 * (1 << 20), 2.5 * (double)g_prop.l2CacheSize);
    int s = (int)ceil(want / std::max(bytes_per_call, 1.0));
    return std::max(1, std::min(s, cap));
}

/* Calls in one graph at most: more (the cold rows of small calls need tens of thousands of
 * calls to rotate over more than the L2) are split over several graphs replayed back to back. */
static const int GRAPH_CALLS = 1024;
/* Calls a row times at most (and sets it rotates over): a decode-size call of 2 KB needs 64K of
 * them to pass 2.5x an H200's L2. */
static const int MAX_CALLS = 1 << 16;

/* Per-call time of k calls fn(0..k-1), each call i reading set i: one graph of k calls, or
 * ceil(k / GRAPH_CALLS) graphs of consecutive calls launched in turn (a replay of all of them is
 * one timed run), so that every call of a small op can read data that is not in the L2. */
static double time_calls(int k, const std::function<void(int)> &fn)
{
    if (k <= GRAPH_CALLS)
        return time_graph(g_stream, fn, k, g_reps);
    const int ng = (k + GRAPH_CALLS - 1) / GRAPH_CALLS;
    std::vector<cudaGraphExec_t> ge((size_t)ng);
    for (int g = 0; g < ng; g++) {
        cudaGraph_t gr;
        CHECK_CUDA(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
        for (int i = g * GRAPH_CALLS; i < std::min(k, (g + 1) * GRAPH_CALLS); i++)
            fn(i);
        CHECK_CUDA(cudaStreamEndCapture(g_stream, &gr));
        CHECK_CUDA(cudaGraphInstantiate(&ge[(size_t)g], gr, 0));
        CHECK_CUDA(cudaGraphDestroy(gr));
    }
    const double us = time_events(
                          g_stream,
                          [&](int) {
                              for (auto &e : ge)
                                  CHECK_CUDA(cudaGraphLaunch(e, g_stream));
                          },
                          g_reps, 2) /
                      k;
    for (auto &e : ge)
        CHECK_CUDA(cudaGraphExecDestroy(e));
    return us;
}

/* The copy floor: a 16-byte grid-stride copy moving `bytes` in total (bytes / 2 read, bytes / 2
 * written), rotated over as many sets as the op used. */
static double copy_us(double bytes, int sets, int k)
{
    const size_t half = ((size_t)(bytes / 2) + 15) & ~(size_t)15;
    Pool src = pool_alloc(half, sets), dst = pool_alloc(half, sets);
    fill_random(g_stream, src.base, src.stride * sets, 11);
    const size_t n = half / 16;
    const int grid = std::max(1, std::min((int)((n + 255) / 256), g_prop.multiProcessorCount * 8));
    double us = time_calls(k, [&](int i) {
        copy16<4><<<grid, 256, 0, g_stream>>>((const uint4 *)src.at(i), (uint4 *)dst.at(i), n);
    });
    CHECK_CUDA(cudaFree(src.base));
    CHECK_CUDA(cudaFree(dst.base));
    return us;
}

/* The floors of the decode rows whose kernels must read an index before the bytes it selects: the
 * least a kernel with the same dependency does, at the op's grid (a block a row, 16 bytes a
 * thread). Gather (embedding): read ids[r], then copy table row ids[r] into out row r. Scatter
 * (kv_cache_update): read new row r and positions[r] together, then store the row at
 * cache row positions[r]. */
template <bool PDL>
__global__ void floor_gather(const long long *ids, const uint4 *table, uint4 *out, int vpr)
{
    if (PDL) { /* every baton kernel's hooks (a no-op without the launch attribute?) */
        kcuda::pdl_wait();
        kcuda::pdl_trigger();
    }
    const long long id = __ldg(ids + blockIdx.x);
    if ((int)threadIdx.x < vpr)
        out[(long long)blockIdx.x * vpr + threadIdx.x] = __ldg(table + id * vpr + threadIdx.x);
}

__global__ void floor_scatter(const long long *pos, const uint4 *nw, uint4 *cache, int vpr)
{
    if ((int)threadIdx.x >= vpr)
        return;
    const uint4 v = __ldcs(nw + (long long)blockIdx.x * vpr + threadIdx.x);
    const long long p = __ldg(pos + blockIdx.x);
    cache[p * vpr + threadIdx.x] = v;
}

static baton_tensor_desc td(baton_dtype dt, std::initializer_list<int64_t> shape)
{
    baton_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = dt;
    for (int64_t s : shape)
        d.shape[d.rank++] = s;
    return d;
}

static size_t nbytes(const baton_tensor_desc &d)
{
    return (size_t)baton_tensor_desc_numel(&d) * baton_dtype_size(d.dtype);
}

static void desc_shape(char *buf, size_t cap, const baton_tensor_desc &d)
{
    size_t n = (size_t)snprintf(buf, cap, "%s[", baton_dtype_name(d.dtype));
    for (int i = 0; i < d.rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ",%lld" : "%lld", (long long)d.shape[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* How an input is filled: random floats, indices (i64) in [lo, hi), or the ramp lo, lo+1, ...;
 * a shared input has one copy that every call reads (a 500 MB table, inv_freq). */
struct Fill {
    int index = 0, ramp = 0, shared = 0;
    /* f32 rows: this many values in [8, 12) at hashed places, as a model's logits (peak_kernel) */
    int peaked = 0;
    int64_t lo = 0, hi = 0;
};

/* Peaked logits: n values of each f32 row of `cols` in [8, 12), at places hashed from the row and
 * j, among fill_random's [-2, 2): a few tokens hold the mass, as they do in a model's logits
 * (decision 0016's CPU figures used the same). A block a row of the pool's rows. */
__global__ void peak_kernel(float *x, int64_t cols, int n)
{
    float *row = x + (int64_t)blockIdx.x * cols;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        uint32_t h = ((uint32_t)blockIdx.x * 7919u + (uint32_t)j) * 2654435761u;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        row[h % (uint32_t)cols] = 8.0f + (float)(h >> 20) / 1024.0f;
    }
}

static void fill_index(const Pool &p, const baton_tensor_desc &d, const Fill &f, uint64_t seed)
{
    const int64_t n = baton_tensor_desc_numel(&d);
    std::vector<char> h(p.stride * (size_t)p.sets); /* every set in one copy: 64K sets at most */
    for (int s = 0; s < p.sets; s++) {
        int64_t *hs = (int64_t *)(h.data() + p.stride * (size_t)s);
        for (int64_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            hs[i] = f.ramp             ? f.lo + i
                    : f.hi - f.lo <= 1 ? f.lo
                                       : f.lo + (int64_t)((seed >> 33) % (uint64_t)(f.hi - f.lo));
        }
    }
    CHECK_CUDA(cudaMemcpy(p.base, h.data(), h.size(), cudaMemcpyHostToDevice));
}

/* One registered target's step at fixed shapes: check() and pack() as a plan load runs them. */
struct Step {
    std::vector<baton_tensor_desc> in, out;
    std::vector<baton_attr> attrs;
    baton_sig_args sig;
    char opaque[BATON_OPAQUE_MAX];
    int olen = 0;
    const baton_target_impl *impl = nullptr;
    kernel_prepare_fn prep = nullptr; /* the kernel's prepare hook, run on the first call */
    void *state = nullptr;            /* what it kept (ctx->prepared), as the runtime keeps it */
    bool prepared = false;
    const char *label = "";
    Step(const char *lab, const char *target, std::vector<baton_tensor_desc> i,
         std::vector<baton_tensor_desc> o, std::vector<baton_attr> a)
        : in(std::move(i)), out(std::move(o)), attrs(std::move(a)), label(lab)
    {
        const baton_target *t = baton_registry_find(g_reg, target);
        if (!t) {
            fprintf(stderr, "bench_decoder: no target %s\n", target);
            exit(1);
        }
        memset(&sig, 0, sizeof sig);
        sig.n_inputs = (int)in.size();
        sig.inputs = in.data();
        sig.n_outputs = (int)out.size();
        sig.outputs = out.data();
        sig.n_attrs = (int)attrs.size();
        sig.attrs = attrs.data();
        char msg[512] = "";
        std::vector<baton_tensor_desc> want(out.size());
        if (t->check(&sig, want.data(), msg, sizeof msg)) {
            fprintf(stderr, "bench_decoder: %s: %s\n", label, msg);
            exit(1);
        }
        olen = t->pack(&sig, opaque, sizeof opaque);
        impl = baton_target_impl_for(t, BATON_DEVICE_CUDA);
        prep = baton__registry_preparer(t, BATON_DEVICE_CUDA);
    }
    ~Step()
    {
        free(state); /* as the runtime frees it */
    }
    Step(const Step &) = delete;
    /* One call on g_stream; pdl: a programmatic dependent launch after the kernel before it. */
    void call(void **bufs, bool capturing, bool pdl)
    {
        char errbuf[512] = "";
        baton_exec_ctx ctx;
        memset(&ctx, 0, sizeof ctx);
        ctx.device.kind = BATON_DEVICE_CUDA;
        ctx.stream = g_stream;
        ctx.step_name = label;
        ctx.errbuf = errbuf;
        ctx.errbuf_len = sizeof errbuf;
        ctx.sig = &sig;
        ctx.capturing = capturing;
        ctx.pdl = pdl;
        if (!prepared && prep) { /* the runtime's prepare, before its first call */
            if (capturing || prep(&ctx, bufs, opaque, (size_t)olen, &state)) {
                fprintf(stderr, "bench_decoder: %s: prepare: %s\n", label,
                        capturing ? "first call while capturing" : errbuf);
                exit(1);
            }
        }
        prepared = true;
        ctx.prepared = state;
        if (impl->kernel(&ctx, bufs, opaque, (size_t)olen)) {
            fprintf(stderr, "bench_decoder: %s: %s\n", label, errbuf);
            exit(1);
        }
    }
};

/* Times one baton kernel moving `bytes` a call: inputs rotated over sets (or all calls on set 0
 * when warm); alias[j] >= 0: output j is that input (a cache updated in place), else its own
 * pool. */
static void bench_op_n(const char *label, const char *target, std::vector<baton_tensor_desc> in,
                       std::vector<Fill> fills, std::vector<baton_tensor_desc> outs,
                       std::vector<int> alias, std::vector<baton_attr> attrs, double bytes,
                       bool warm = false, int max_k = MAX_CALLS, int min_k = 1)
{
    if (!wanted(label))
        return;
    Step st(label, target, in, outs, attrs);
    const double per_call = bytes;
    const int sets = warm ? 1 : sets_for(per_call, MAX_CALLS);
    /* min_k: calls in one graph at least (cycling over the sets), so that a graph of few long
     * calls does not add its launch to each (decoder_peers.py captures 16 calls at least) */
    const int k = std::min(std::max(warm ? 64 : sets, min_k), max_k);
    std::vector<Pool> pools;
    for (size_t j = 0; j < in.size(); j++) {
        pools.push_back(pool_alloc(nbytes(in[j]) + (j == 0 && g_in0_shift ? 16 : 0),
                                   fills[j].shared ? 1 : sets));
        if (fills[j].index)
            fill_index(pools.back(), in[j], fills[j], 1234 + j);
        else
            fill_random(g_stream, pools.back().base, pools.back().stride * pools.back().sets,
                        7 + (uint32_t)j);
        if (fills[j].peaked) {
            const int64_t cols = in[j].shape[in[j].rank - 1];
            if (in[j].dtype != BATON_DTYPE_F32 || pools.back().stride % (size_t)(cols * 4) != 0) {
                fprintf(stderr, "bench_decoder: %s: peaked logits need f32 rows\n", label);
                exit(1);
            }
            const int64_t rows = (int64_t)(pools.back().stride / 4 / cols) * pools.back().sets;
            peak_kernel<<<(unsigned)rows, 64, 0, g_stream>>>((float *)pools.back().base, cols,
                                                             fills[j].peaked);
            CHECK_CUDA(cudaGetLastError());
        }
    }
    std::vector<Pool> po;
    for (size_t j = 0; j < outs.size(); j++)
        po.push_back(alias[j] >= 0 ? pools[(size_t)alias[j]] : pool_alloc(nbytes(outs[j]), sets));
    CHECK_CUDA(cudaDeviceSynchronize());
    bool capturing = false;
    auto call = [&](int i) {
        void *bufs[16];
        for (size_t j = 0; j < in.size(); j++)
            bufs[j] = (char *)pools[j].at(i) + (j == 0 ? g_in0_shift : 0);
        for (size_t j = 0; j < outs.size(); j++)
            bufs[in.size() + j] = po[j].at(i);
        st.call(bufs, capturing, false);
    };
    call(0);
    CHECK_CUDA(cudaStreamSynchronize(g_stream));
    char msg[512];
    if (baton__kcuda_decoder_error_take(0, NULL, msg, sizeof msg)) {
        fprintf(stderr, "bench_decoder: %s: %s\n", label, msg);
        exit(1);
    }
    capturing = true;
    const double us = time_calls(k, call);
    capturing = false;
    const int cold = !warm && (double)k * per_call > 2.0 * g_prop.l2CacheSize;
    const double cus = copy_us(bytes, warm ? 1 : sets, k);
    char sh[160];
    desc_shape(sh, sizeof sh, in[0]);
    record_row(label, sh, "baton", bytes, us, cus, cold, "", NAN);
    for (auto &p : pools)
        CHECK_CUDA(cudaFree(p.base));
    for (size_t j = 0; j < outs.size(); j++)
        if (alias[j] < 0)
            CHECK_CUDA(cudaFree(po[j].base));
}

static void bench_op(const char *label, const char *target, std::vector<baton_tensor_desc> in,
                     std::vector<Fill> fills, baton_tensor_desc out, std::vector<baton_attr> attrs,
                     double bytes, bool warm = false, int max_k = MAX_CALLS, bool alias0 = false,
                     int min_k = 1)
{
    bench_op_n(label, target, in, fills, {out}, {alias0 ? 0 : -1}, attrs, bytes, warm, max_k,
               min_k);
}

/* The floor of an op that must see all of a row before it writes any of it (softmax): the copy
 * with one grid-wide barrier between its loads and its stores, a cooperative grid of at most one
 * block a SM, up to 4 vectors a thread held across the barrier. With PAIRS, a value pair crosses
 * the barrier as the op's do: each block's thread 0 stores one (to a buffer of its own, so no
 * block waits for the others' reads), and warp 0 of every block reads all gridDim.x of them and
 * hands their maximum over a block barrier to the stores, which depend on it. */
template <bool PAIRS, int NT>
__global__ void __launch_bounds__(NT)
    floor_barrier_copy(const uint4 *x, uint4 *y, long long n, float2 *pairs)
{
    __shared__ float seen;
    uint4 v[4];
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x,
                    stride = (long long)gridDim.x * blockDim.x;
#pragma unroll
    for (int k = 0; k < 4; k++)
        if (t + k * stride < n)
            v[k] = __ldcs(x + t + k * stride);
    if (PAIRS && threadIdx.x == 0)
        pairs[blockIdx.x] = make_float2(__uint_as_float(v[0].x & 0x3fffffffu), 1.0f);
    cooperative_groups::this_grid().sync();
    bool keep = true;
    if (PAIRS) {
        if (threadIdx.x < 32) {
            float m = 0.0f;
            for (unsigned q = threadIdx.x; q < gridDim.x; q += 32) {
                const float2 p = __ldcg(pairs + q);
                m = fmaxf(m, p.x * p.y);
            }
            for (int o = 16; o > 0; o >>= 1)
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            if (threadIdx.x == 0)
                seen = m;
        }
        __syncthreads();
        keep = seen == seen; /* never NaN: the stores wait for the pairs */
    }
#pragma unroll
    for (int k = 0; k < 4; k++)
        if (keep && t + k * stride < n)
            __stcs(y + t + k * stride, v[k]);
}

/* A floor row for an op of `bytes` (half read, half written) whose write waits for all of its
 * read: floor_barrier_copy over as many sets as the op's row rotates, with its own copy row;
 * blocks of 256 threads, or of 1024 where those do not hold the bytes (a few rows). */
template <bool PAIRS = false>
static void bench_barrier_floor(const char *label, const char *shape, double bytes)
{
    if (!wanted(label))
        return;
    const int sets = sets_for(bytes, MAX_CALLS), k = sets;
    const size_t half = ((size_t)(bytes / 2) + 15) & ~(size_t)15;
    const long long n = (long long)(half / 16), sms = g_prop.multiProcessorCount;
    const int nt = n <= sms * 256 * 4 ? 256 : 1024;
    const int blocks = (int)std::min(sms, (n + nt - 1) / nt);
    if ((long long)blocks * nt * 4 < n) {
        fprintf(stderr, "bench_decoder: %s: too large for the barrier floor\n", label);
        return;
    }
    Pool src = pool_alloc(half, sets), dst = pool_alloc(half, sets);
    float2 *pairs = nullptr;
    CHECK_CUDA(cudaMalloc(&pairs, sizeof(float2) * (size_t)blocks));
    fill_random(g_stream, src.base, src.stride * sets, 41);
    CHECK_CUDA(cudaDeviceSynchronize());
    const double us = time_calls(k, [&](int i) {
        if (nt == 256)
            launch_attr(g_stream, (unsigned)blocks, 256, cudaLaunchAttributeCooperative,
                        floor_barrier_copy<PAIRS, 256>, (const uint4 *)src.at(i),
                        (uint4 *)dst.at(i), n, pairs);
        else
            launch_attr(g_stream, (unsigned)blocks, 1024, cudaLaunchAttributeCooperative,
                        floor_barrier_copy<PAIRS, 1024>, (const uint4 *)src.at(i),
                        (uint4 *)dst.at(i), n, pairs);
    });
    CHECK_CUDA(cudaFree(pairs));
    CHECK_CUDA(cudaFree(src.base));
    CHECK_CUDA(cudaFree(dst.base));
    const double cus = copy_us(bytes, sets, k);
    record_floor(label, shape, bytes, us, cus, k);
}

/* The floor of a softmax whose rows take more than a wave of registers (64 x 128256 f32, 33 MB):
 * softmax_smem_kernel's structure with nothing else. `blocks` blocks of 1024 threads (one a SM)
 * each take an equal slice of all the rows' vectors, the first 4 a thread into registers and the
 * rest into shared memory, all asked for at once (by the copy engine in 32 KB pieces here; the op
 * has each thread copy its own by cp.async), evict-first in L2 as the op's loads and stores (the
 * default policy measured 1.06x, against 1.00x), and store them all once all are in: the rows read
 * once, held on chip, then written, with no arithmetic and no exchange between blocks. */
template <bool CLUSTER>
__global__ void __launch_bounds__(1024, 1)
    floor_onchip(const uint4 *x, uint4 *y, long long n, long long per)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long bar;
    const uint4 *sh = reinterpret_cast<const uint4 *>(smem_raw);
    const int tid = threadIdx.x;
    const long long lo = min(n, (long long)blockIdx.x * per), hi = min(n, lo + per),
                    rhi = min(hi, lo + 4 * 1024);
    const int ns = (int)(hi - rhi);
    if (tid == 0) {
        kcuda::mbar_init(&bar, 1);
        kcuda::mbar_fence_init();
    }
    __syncthreads();
    if (tid == 0 && ns > 0) {
        const unsigned long long pol = kcuda::l2_evict_first();
        kcuda::mbar_arrive_tx(&bar, (unsigned)ns * 16u);
        for (int i = 0; i < ns; i += 2048)
            kcuda::bulk_g2s(smem_raw + (size_t)i * 16, x + rhi + i,
                            (unsigned)min(2048, ns - i) * 16u, &bar, pol);
    }
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        if (lo + k * 1024 + tid < rhi)
            v[k] = __ldcs(x + lo + k * 1024 + tid);
    if (ns > 0)
        kcuda::mbar_wait(&bar, 0);
    __syncthreads(); /* every thread's registers are in too: no store before the whole slice */
    if (CLUSTER)     /* nor before the cluster's other blocks have theirs (the op's exchange) */
        cooperative_groups::this_cluster().sync();
#pragma unroll
    for (int k = 0; k < 4; k++)
        if (lo + k * 1024 + tid < rhi)
            __stcs(y + lo + k * 1024 + tid, v[k]);
    for (int j = tid; j < ns; j += 1024)
        __stcs(y + rhi + j, sh[j]);
}

static cudaLaunchConfig_t cluster_launch(unsigned grid, unsigned block, size_t smem, int C,
                                         cudaLaunchAttribute *at);

/* A floor row for softmax's 64 rows: floor_onchip over `blocks` blocks (in x-clusters of C, each
 * waiting for all its blocks' slices before its stores, where C > 1), the op's bytes rotated over
 * as many sets, with its own copy row. */
static void bench_onchip_floor(const char *label, const char *shape, double bytes, int blocks,
                               int C)
{
    if (!wanted(label))
        return;
    const int sets = sets_for(bytes, MAX_CALLS), k = sets;
    const size_t half = ((size_t)(bytes / 2) + 15) & ~(size_t)15;
    const long long n = (long long)(half / 16), per = (n + blocks - 1) / blocks;
    const size_t smem = (size_t)std::max(0LL, per - 4 * 1024) * 16;
    if (smem + 1024 > (size_t)g_prop.sharedMemPerBlockOptin) {
        fprintf(stderr, "bench_decoder: %s: the slices do not fit shared memory\n", label);
        return;
    }
    const auto kern = C > 1 ? floor_onchip<true> : floor_onchip<false>;
    CHECK_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (C > 8)
        CHECK_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    Pool src = pool_alloc(half, sets), dst = pool_alloc(half, sets);
    fill_random(g_stream, src.base, src.stride * sets, 43);
    CHECK_CUDA(cudaDeviceSynchronize());
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg = cluster_launch((unsigned)blocks, 1024, smem, C, &at);
    cfg.numAttrs = C > 1 ? 1 : 0; /* C 1: a plain launch, no cluster attribute */
    const double us = time_calls(k, [&](int i) {
        CHECK_CUDA(
            cudaLaunchKernelEx(&cfg, kern, (const uint4 *)src.at(i), (uint4 *)dst.at(i), n, per));
    });
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaFree(src.base));
    CHECK_CUDA(cudaFree(dst.base));
    const double cus = copy_us(bytes, sets, k);
    record_floor(label, shape, bytes, us, cus, k);
}

/* The floor of rope at a decode row, bf16, half-split, head_dim 64: a thread a 16-byte unit (8
 * pairs of one head), with the least index arithmetic: its two vectors, the row's position and its
 * 8 frequencies read together, then 8 angles formed and reduced in f32, sincos, the turn and the
 * two stores, as baton's kernel does it but with nothing else around it. */
__global__ void __launch_bounds__(64)
    floor_rope(const uint4 *x, const long long *pos, const float *inv_freq, uint4 *y, int units)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= units)
        return;
    const int h = t >> 2, i0 = (t & 3) * 8; /* 4 units a head of 64 */
    const uint4 ua = __ldg(x + h * 8 + (t & 3)), ub = __ldg(x + h * 8 + 4 + (t & 3));
    const long long p = __ldg(pos);
    const float4 f0 = __ldg(reinterpret_cast<const float4 *>(inv_freq + i0)),
                 f1 = __ldg(reinterpret_cast<const float4 *>(inv_freq + i0 + 4));
    const float fr[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
    const __nv_bfloat16 *a = reinterpret_cast<const __nv_bfloat16 *>(&ua),
                        *b = reinterpret_cast<const __nv_bfloat16 *>(&ub);
    uint4 oa, ob;
    __nv_bfloat16 *ya = reinterpret_cast<__nv_bfloat16 *>(&oa),
                  *yb = reinterpret_cast<__nv_bfloat16 *>(&ob);
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const float ang = __fmul_rn((float)p, fr[e]);
        const float k = __fsub_rn(__fmaf_rn(ang, 0.15915493667125702f, 12582912.f), 12582912.f);
        float r = __fmaf_rn(-k, 6.2831854820251465f, ang);
        r = __fmaf_rn(-k, -1.7484555314695172e-07f, r);
        float sv, cv;
        __sincosf(r, &sv, &cv);
        const float x1 = __bfloat162float(a[e]), x2 = __bfloat162float(b[e]);
        ya[e] = __float2bfloat16(x1 * cv - x2 * sv);
        yb[e] = __float2bfloat16(x2 * cv + x1 * sv);
    }
    y[h * 8 + (t & 3)] = oa;
    y[h * 8 + 4 + (t & 3)] = ob;
}

/* The rope floor row: floor_rope at rope's decode row (bf16 [1, 2048], head_dim 64), rotated over
 * sets as rope's row, with its own copy row. */
static void bench_rope_floor(const char *label)
{
    if (!wanted(label))
        return;
    const int64_t F = 2048;
    const double bytes = (double)(F * 2 * 2 + 8);
    const int sets = sets_for(bytes, MAX_CALLS), k = sets, units = (int)(F / 16);
    Pool x = pool_alloc(F * 2, sets), y = pool_alloc(F * 2, sets), pp = pool_alloc(8, sets),
         fr = pool_alloc(32 * 4, 1);
    Fill f;
    f.index = 1, f.lo = 0, f.hi = 4096;
    fill_index(pp, td(BATON_DTYPE_I64, {1}), f, 77);
    fill_random(g_stream, x.base, x.stride * sets, 51);
    fill_random(g_stream, fr.base, fr.stride, 52);
    CHECK_CUDA(cudaDeviceSynchronize());
    const double us = time_calls(k, [&](int i) {
        floor_rope<<<(unsigned)((units + 63) / 64), 64, 0, g_stream>>>(
            (const uint4 *)x.at(i), (const long long *)pp.at(i), (const float *)fr.base,
            (uint4 *)y.at(i), units);
    });
    CHECK_CUDA(cudaGetLastError());
    for (Pool *pl : {&x, &y, &pp, &fr})
        CHECK_CUDA(cudaFree(pl->base));
    const double cus = copy_us(bytes, sets, k);
    record_floor(label, "bf16[1,2048]", bytes, us, cus, k);
}

/* A floor row (impl "floor"): floor_gather or floor_scatter at an op's decode shape, moving the
 * op's bytes (rows of row_bytes read and written, 8 bytes of index a row) with the same rotation:
 * ids or positions, rows and outputs rotated over sets, the table (gather, ids uniform in
 * [0, table_rows)) or the cache (scatter, positions uniform in [0, table_rows)) one shared copy. */
static void bench_dep_floor(const char *label, const char *shape, bool gather, int64_t rows,
                            int64_t row_bytes, int64_t table_rows, bool pdl_hooks = false)
{
    if (!wanted(label))
        return;
    const double bytes = (double)(rows * (row_bytes * 2 + 8));
    const int sets = sets_for(bytes, MAX_CALLS), k = sets;
    const int vpr = (int)(row_bytes / 16);
    Pool idx = pool_alloc((size_t)rows * 8, sets), big = pool_alloc(table_rows * row_bytes, 1),
         in = pool_alloc(rows * row_bytes, sets), out = pool_alloc(rows * row_bytes, sets);
    Fill f;
    f.index = 1, f.lo = 0, f.hi = table_rows;
    fill_index(idx, td(BATON_DTYPE_I64, {rows}), f, 99);
    fill_random(g_stream, big.base, big.stride, 31);
    fill_random(g_stream, in.base, in.stride * sets, 32);
    CHECK_CUDA(cudaDeviceSynchronize());
    const double us = time_calls(k, [&](int i) {
        if (gather && pdl_hooks)
            floor_gather<true><<<(unsigned)rows, (unsigned)vpr, 0, g_stream>>>(
                (const long long *)idx.at(i), (const uint4 *)big.base, (uint4 *)out.at(i), vpr);
        else if (gather)
            floor_gather<false><<<(unsigned)rows, (unsigned)vpr, 0, g_stream>>>(
                (const long long *)idx.at(i), (const uint4 *)big.base, (uint4 *)out.at(i), vpr);
        else
            floor_scatter<<<(unsigned)rows, (unsigned)vpr, 0, g_stream>>>(
                (const long long *)idx.at(i), (const uint4 *)in.at(i), (uint4 *)big.base, vpr);
    });
    CHECK_CUDA(cudaGetLastError());
    const double cus = copy_us(bytes, sets, k);
    record_floor(label, shape, bytes, us, cus, k);
    for (Pool *pl : {&idx, &big, &in, &out})
        CHECK_CUDA(cudaFree(pl->base));
}

static baton_attr ai(const char *n, int64_t v)
{
    baton_attr a;
    memset(&a, 0, sizeof a);
    a.name = n;
    a.type = BATON_ATTR_INT;
    a.i = v;
    a.f = (double)v;
    return a;
}

static baton_attr af(const char *n, double v)
{
    baton_attr a;
    memset(&a, 0, sizeof a);
    a.name = n;
    a.type = BATON_ATTR_FLOAT;
    a.f = v;
    return a;
}

/* Decode attention as a decode step runs it: right after rope_cache_update, which writes q and
 * the new K and V rows at positions[0] = ctx - 1 (cold caches, rotated over sets as the rows
 * above). A graph of k (rope_cache_update, attention) pairs with attention launched with PDL
 * ("+pdl": its work before the wait overlaps the rope), less a graph of k rope_cache_updates
 * alone, is attention's share of the step; the peer is the same pair without PDL. */
static void bench_attn_after_rope(int64_t ctx, int64_t H, int64_t HKV, int64_t DH)
{
    char label[64];
    snprintf(label, sizeof label, "attention decode ctx %lld +pdl", (long long)ctx);
    if (!wanted(label))
        return;
    const baton_dtype BF = BATON_DTYPE_BF16, I64 = BATON_DTYPE_I64, F32 = BATON_DTYPE_F32;
    const int64_t F = H * DH, KF = HKV * DH, QKV = F + 2 * KF;
    const auto q = td(BF, {1, F}), cache = td(BF, {ctx, KF}), pos = td(I64, {1});
    Step rope("rope_cache_update", "rope_cache_update",
              {td(BF, {1, QKV}), pos, td(F32, {DH / 2}), cache, cache}, {q, cache, cache},
              {ai("head_dim", DH), ai("n_heads", H), ai("n_kv_heads", HKV)});
    Step attn(label, "attention", {q, cache, cache, pos}, {q},
              {ai("head_dim", DH), ai("n_heads", H), ai("n_kv_heads", HKV)});
    const double kv = (double)(ctx * KF * 2 * 2), bytes = kv + 2.0 * F * 2;
    const int sets = sets_for(bytes, 1 << 14), k = std::min(std::max(sets, 16), 1024);
    Pool qkv = pool_alloc(QKV * 2, sets), pp = pool_alloc(8, sets), invf = pool_alloc(DH * 2, 1),
         kc = pool_alloc(nbytes(cache), sets), vc = pool_alloc(nbytes(cache), sets),
         qp = pool_alloc(nbytes(q), sets), op = pool_alloc(nbytes(q), sets);
    fill_random(g_stream, qkv.base, qkv.stride * sets, 21);
    fill_random(g_stream, invf.base, invf.stride, 22);
    fill_random(g_stream, kc.base, kc.stride * sets, 23);
    fill_random(g_stream, vc.base, vc.stride * sets, 24);
    Fill p;
    p.index = 1, p.lo = ctx - 1, p.hi = ctx;
    fill_index(pp, pos, p, 25);
    CHECK_CUDA(cudaDeviceSynchronize());
    auto rope_call = [&](int i, bool capturing) {
        void *b[8] = {qkv.at(i), pp.at(i), invf.at(0), kc.at(i),
                      vc.at(i),  qp.at(i), kc.at(i),   vc.at(i)};
        rope.call(b, capturing, false);
    };
    auto attn_call = [&](int i, bool capturing, bool pdl) {
        void *b[5] = {qp.at(i), kc.at(i), vc.at(i), pp.at(i), op.at(i)};
        attn.call(b, capturing, pdl);
    };
    rope_call(0, false);
    attn_call(0, false, true);
    CHECK_CUDA(cudaStreamSynchronize(g_stream));
    char msg[512];
    if (baton__kcuda_decoder_error_take(0, NULL, msg, sizeof msg)) {
        fprintf(stderr, "bench_decoder: %s: %s\n", label, msg);
        exit(1);
    }
    const double t_rope = time_calls(k, [&](int i) { rope_call(i, true); });
    const double t_pdl = time_calls(k, [&](int i) {
        rope_call(i, true);
        attn_call(i, true, true);
    });
    const double t_seq = time_calls(k, [&](int i) {
        rope_call(i, true);
        attn_call(i, true, false);
    });
    const double cus = copy_us(bytes, sets, k);
    char sh[160];
    desc_shape(sh, sizeof sh, q);
    record_row(label, sh, "baton", bytes, t_pdl - t_rope, cus,
               (double)k * bytes > 2.0 * g_prop.l2CacheSize,
               "baton after rope_cache_update without PDL", t_seq - t_rope);
    for (Pool *pl : {&qkv, &pp, &invf, &kc, &vc, &qp, &op})
        CHECK_CUDA(cudaFree(pl->base));
}

/* ---- floors of decode attention's dependency chain --------------------------------------------
 * What a kernel that only moves attention's bytes through attention's steps costs, at its grid (a
 * cluster of C blocks per KV head, 192 KB of shared memory a block so that one block takes an SM)
 * and on the same rotated caches: each block reads its share of its KV head's K and V rows (16-byte
 * loads, 8 in flight a thread), folding them into registers (xor) so that no load is dead, of
 * keys 0 .. len - 1, len given (READLEN false) or read from the positions first (true: the
 * dependent read before any K or V load); with MERGE, then attention's merge: the block's warps
 * through shared memory, then the cluster's blocks through distributed shared memory (each block
 * pushing its state of every output into the shared memory of the rank that finishes it, which
 * merges its slice of the 4 x 64 outputs after the barrier), the outputs written as bf16: one
 * __syncthreads and one cluster barrier, as attention. */

/* The best read of the same bytes: K's and V's whole arrays (keys 0 .. S - 1: the bench's
 * positions are S - 1) by a grid-stride 16-byte read at full occupancy, 8 vectors in flight a
 * thread (4 of each), folded (xor) so that no load is dead. */
__global__ void __launch_bounds__(256)
    attn_best_read(const uint4 *__restrict__ kc, const uint4 *__restrict__ vc, size_t n,
                   unsigned *sink)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += 4 * stride) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const size_t j = i + u * stride;
            v[2 * u] = j < n ? __ldcs(kc + j) : make_uint4(0, 0, 0, 0);
            v[2 * u + 1] = j < n ? __ldcs(vc + j) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < 8; u++)
            acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x9e3779b9u) /* never in practice; keeps the loads */
        sink[blockIdx.x % 1024] = acc;
}
template <bool READLEN, bool MERGE>
__global__ void __launch_bounds__(256, 1)
    attn_floor_kernel(const uint4 *kc, const uint4 *vc, const long long *pos, long long len,
                      int row_vecs, int head_vecs, int pph, __nv_bfloat16 *o, unsigned *sink)
{
    __shared__ float wst[8][4 * 64 + 8];
    __shared__ float bo[4 * 64 + 16], bm[16][4], bl[16][4]; /* the C ranks' states of a slice */
    kcuda::cg::cluster_group cluster = kcuda::cg::this_cluster();
    const int C = (int)cluster.num_blocks(), rank = (int)cluster.block_rank(), tid = threadIdx.x;
    /* pph blocks per KV head (MERGE: one cluster of them), or 0: each block whole rows */
    const int kvh = pph ? (int)(blockIdx.x / (unsigned)pph) : 0;
    const int part = pph ? (int)(blockIdx.x % (unsigned)pph) : (int)blockIdx.x;
    const int parts = pph ? pph : (int)gridDim.x, vecs = pph ? head_vecs : row_vecs;
    if (READLEN)
        len = __ldg(pos) + 1;
    const long long per = (len + parts - 1) / parts;
    const long long kb = min(len, part * per), ke = min(len, kb + per);
    const long long n = (ke - kb) * vecs; /* vectors of K (and as many of V) */
    const uint4 *kh = kc + kb * row_vecs + (long long)kvh * head_vecs;
    const uint4 *vh = vc + kb * row_vecs + (long long)kvh * head_vecs;
    unsigned acc = 0;
    const unsigned un = (unsigned)n, uv = (unsigned)vecs; /* 32-bit: n < 2^32 here */
    for (unsigned i = tid; i < un; i += 8 * 256) {
        uint4 v[16];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const unsigned j = i + u * 256, r = j / uv, c = j - r * uv;
            const bool ok = j < un;
            v[2 * u] = ok ? __ldcs(kh + (long long)r * row_vecs + c) : make_uint4(0, 0, 0, 0);
            v[2 * u + 1] = ok ? __ldcs(vh + (long long)r * row_vecs + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < 16; u++)
            acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (!MERGE) {
        if (acc == 0x9e3779b9u) /* never in practice; keeps the loads */
            sink[blockIdx.x] = acc;
        return;
    }
    const int warp = tid >> 5, lane = tid & 31;
    const float f = __uint_as_float((acc & 0x007fffffu) | 0x3f800000u); /* in [1, 2) */
    for (int e = lane; e < 4 * 64 + 8; e += 32)
        wst[warp][e] = f + (float)e;
    __syncthreads();
    const int share = (256 + C - 1) / C;
    { /* the warps' states, merged as attention's block does (one output a thread) */
        const int p = tid / 64, d = tid % 64;
        float M = -INFINITY;
        for (int w = 0; w < 8; w++)
            M = fmaxf(M, wst[w][256 + p]);
        float a = 0.f, l = 0.f;
        for (int w = 0; w < 8; w++) {
            const float wt = exp2f(wst[w][256 + p] - M);
            a = fmaf(wt, wst[w][tid], a);
            l = fmaf(wt, wst[w][260 + p], l);
        }
        /* pushed to the rank that finishes output tid, the pair's max and sum to every rank */
        const int dst = tid / share;
        *cluster.map_shared_rank(&bo[rank * share + tid - dst * share], dst) = a;
        if (d < C) {
            *cluster.map_shared_rank(&bm[rank][p], d) = M;
            *cluster.map_shared_rank(&bl[rank][p], d) = l;
        }
    }
    cluster.sync(); /* the one cluster barrier before the merge, as attention's */
    const int lo = rank * share, hi = min(256, lo + share);
    for (int idx = lo + tid; idx < hi; idx += 256) {
        const int p = idx / 64;
        o[(long long)kvh * 256 + idx] = __float2bfloat16(kcuda::softmax_fold<16>(
            C, [&](int k) { return bm[k][p]; }, [&](int k) { return bo[k * share + idx - lo]; },
            [&](int k) { return bl[k][p]; }));
    }
}

/* The same read by the copy engine through tensor maps ([S, Hkv * 64] bf16, boxes of 64 features
 * x TMA_BN keys, 128-byte swizzle, as a tensor-map attention would use): `pph` blocks a KV head,
 * each one thread keeping TMA_ST boxes of K and of V in flight (192 KB) over keys 0 .. len - 1
 * (its last box may read up to TMA_BN - 1 keys past its share): what attention's grid could read
 * if its loads went through the copy engine rather than the threads' cp.async. */
#define TMA_BN 128
#define TMA_ST 6
__global__ void __launch_bounds__(128, 1)
    attn_tma_floor(const __grid_constant__ CUtensorMap mk, const __grid_constant__ CUtensorMap mv,
                   long long len, int pph)
{
    extern __shared__ __align__(16) unsigned char tma_dyn[];
    constexpr unsigned BOX = TMA_BN * 128; /* bytes of one box of K (or of V) */
    const unsigned base = (kcuda::smem_u32(tma_dyn) + 1023u) & ~1023u; /* the swizzle's alignment */
    unsigned long long *full = reinterpret_cast<unsigned long long *>(
        tma_dyn + (base - kcuda::smem_u32(tma_dyn)) + TMA_ST * 2 * BOX);
    const int kvh = (int)(blockIdx.x / (unsigned)pph), part = (int)(blockIdx.x % (unsigned)pph);
    const long long per = (len + pph - 1) / pph;
    const long long kb = min(len, part * per), ke = min(len, kb + per);
    const int ntiles = (int)((ke - kb + TMA_BN - 1) / TMA_BN);
    if (threadIdx.x != 0)
        return;
    for (int st = 0; st < TMA_ST; st++)
        kcuda::mbar_init(&full[st], 1);
    kcuda::mbar_fence_init();
    auto arm = [&](int i) {
        const int st = i % TMA_ST;
        const unsigned dst = base + (unsigned)st * 2 * BOX;
        const int y = (int)(kb + (long long)i * TMA_BN);
        kcuda::mbar_arrive_tx(&full[st], 2 * BOX);
        kcuda::tma_2d(dst, &mk, kvh * 64, y, &full[st]);
        kcuda::tma_2d(dst + BOX, &mv, kvh * 64, y, &full[st]);
    };
    for (int i = 0; i < TMA_ST && i < ntiles; i++)
        arm(i);
    for (int i = 0; i < ntiles; i++) {
        kcuda::mbar_wait(&full[i % TMA_ST], (unsigned)(i / TMA_ST) & 1u);
        if (i + TMA_ST < ntiles)
            arm(i + TMA_ST);
    }
}

/* A launch of `grid` blocks of `block` threads in x-clusters of C on the bench's stream, with
 * `smem` bytes of dynamic shared memory; *at holds the cluster attribute. */
static cudaLaunchConfig_t cluster_launch(unsigned grid, unsigned block, size_t smem, int C,
                                         cudaLaunchAttribute *at)
{
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(grid, 1, 1);
    cfg.blockDim = dim3(block, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = g_stream;
    memset(at, 0, sizeof *at);
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = (unsigned)C;
    at->val.clusterDim.y = 1;
    at->val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cfg;
}

/* The floors above at context ctx (cache rows ctx, positions[0] = ctx - 1), cold (caches rotated
 * as attention's rows). At attention's one-cluster grid: clusters of the largest size up to 16
 * whose 8 clusters all fit at once (as attn_mma picks), else 8; and, to tell the
 * SMs that stream from the pattern they read, the read at 16 blocks per KV head without clusters
 * (each a 128-byte slice of every row of its keys, as attention), and at as many blocks each
 * reading whole rows (all KV heads: contiguous). Each row's peer is attention's cold time of the
 * same context (attention_us; NAN if not measured). */
static void bench_attn_floors(int64_t ctx, int64_t HKV, int64_t DH, double attention_us)
{
    enum { ONE_CLUSTER, SPREAD, WHOLE_ROWS, BEST };
    static const struct {
        const char *name;
        void (*kern)(const uint4 *, const uint4 *, const long long *, long long, int, int, int,
                     __nv_bfloat16 *, unsigned *);
        int grid;
    } FL[] = {{"read", attn_floor_kernel<false, false>, ONE_CLUSTER},
              {"length read + read", attn_floor_kernel<true, false>, ONE_CLUSTER},
              {"length read + read + cluster merge", attn_floor_kernel<true, true>, ONE_CLUSTER},
              {"read at 16 blocks a KV head", attn_floor_kernel<false, false>, SPREAD},
              {"read of whole rows at as many blocks", attn_floor_kernel<false, false>, WHOLE_ROWS},
              {"best read (grid-stride, full occupancy)", nullptr, BEST}};
    const size_t smem = 192 * 1024 - 8 * (4 * 64 + 8) * 4 - (4 * 64 + 8) * 4;
    const int64_t KF = HKV * DH;
    const double kv = (double)(ctx * KF * 2 * 2), bytes = kv + 2.0 * 32 * DH * 2;
    const int sets = sets_for(bytes, 1 << 14), k = std::min(std::max(sets, 16), 1024);
    Pool kc, vc, pp, op, sink;
    bool alloc = false;
    double cus = NAN;
    int one_c = 8; /* attention's cluster size (the one-cluster rows') */
    auto ensure = [&] {
        if (alloc)
            return;
        kc = pool_alloc((size_t)(ctx * KF * 2), sets);
        vc = pool_alloc((size_t)(ctx * KF * 2), sets);
        pp = pool_alloc(8, sets);
        op = pool_alloc((size_t)(HKV * 4 * DH * 2), sets);
        sink = pool_alloc(4096, 1);
        fill_random(g_stream, kc.base, kc.stride * sets, 31);
        fill_random(g_stream, vc.base, vc.stride * sets, 32);
        Fill p;
        p.index = 1, p.lo = ctx - 1, p.hi = ctx;
        fill_index(pp, td(BATON_DTYPE_I64, {1}), p, 33);
        CHECK_CUDA(cudaDeviceSynchronize());
        alloc = true;
    };
    for (const auto &fl : FL) {
        char label[96];
        snprintf(label, sizeof label, "attention decode ctx %lld floor: %s", (long long)ctx,
                 fl.name);
        if (!wanted(label))
            continue;
        ensure();
        if (fl.grid == BEST) {
            const int grid = g_prop.multiProcessorCount * 8;
            const size_t n = (size_t)(ctx * KF * 2 / 16);
            auto call = [&](int i) {
                attn_best_read<<<grid, 256, 0, g_stream>>>(
                    (const uint4 *)kc.at(i), (const uint4 *)vc.at(i), n, (unsigned *)sink.at(0));
            };
            call(0);
            CHECK_CUDA(cudaStreamSynchronize(g_stream));
            const double us = time_calls(k, call);
            if (isnan(cus))
                cus = copy_us(bytes, sets, k);
            char sh[64];
            snprintf(sh, sizeof sh, "%d blocks", grid);
            record_floor(label, sh, bytes, us, cus, k, "baton attention, cold", attention_us);
            continue;
        }
        CHECK_CUDA(
            cudaFuncSetAttribute(fl.kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        CHECK_CUDA(
            cudaFuncSetAttribute(fl.kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        int C = 8;
        for (int c = 16; c > 8; c--) {
            int n = 0;
            if (kcuda::max_active_clusters((const void *)fl.kern, (unsigned)(HKV * c), 256, smem, c,
                                           g_stream, &n) != cudaSuccess) {
                (void)cudaGetLastError();
                continue;
            }
            if (n >= HKV) {
                C = c;
                break;
            }
        }
        while (C > 1 && ctx < 64LL * C)
            C /= 2;
        one_c = C;
        int pph = C;
        if (fl.grid != ONE_CLUSTER) {
            pph = fl.grid == SPREAD ? 16 : 0;
            C = 1;
        }
        cudaLaunchAttribute at;
        const cudaLaunchConfig_t cfg = cluster_launch(
            (unsigned)(fl.grid == ONE_CLUSTER ? HKV * C : HKV * 16), 256, smem, C, &at);
        auto call = [&](int i) {
            CHECK_CUDA(cudaLaunchKernelEx(&cfg, fl.kern, (const uint4 *)kc.at(i),
                                          (const uint4 *)vc.at(i), (const long long *)pp.at(i),
                                          (long long)ctx, (int)(KF * 2 / 16), (int)(DH * 2 / 16),
                                          pph, (__nv_bfloat16 *)op.at(i), (unsigned *)sink.at(0)));
        };
        call(0);
        CHECK_CUDA(cudaStreamSynchronize(g_stream));
        const double us = time_calls(k, call);
        if (isnan(cus)) /* one copy floor for the rows */
            cus = copy_us(bytes, sets, k);
        char sh[160];
        if (fl.grid == ONE_CLUSTER)
            snprintf(sh, sizeof sh, "%d clusters of %d", (int)HKV, C);
        else
            snprintf(sh, sizeof sh, "%d blocks", (int)HKV * 16);
        record_floor(label, sh, bytes, us, cus, k, "baton attention, cold", attention_us);
    }
    /* the tensor-map reads: at attention's one-cluster grid, and at 16 blocks a KV head */
    for (int wide = 0; wide < 2 && DH == 64; wide++) {
        char label[96];
        snprintf(label, sizeof label, "attention decode ctx %lld floor: read by tensor maps%s",
                 (long long)ctx, wide ? " at 16 blocks a KV head" : "");
        if (!wanted(label))
            continue;
        ensure();
        if (isnan(cus))
            cus = copy_us(bytes, sets, k);
        std::vector<CUtensorMap> maps((size_t)sets * 2);
        bool ok = true;
        for (int i = 0; i < sets && ok; i++)
            ok = !kcuda::cache_tensor_map(nullptr, label, &maps[(size_t)i * 2], kc.at(i), false,
                                          ctx, (int)HKV, 64, TMA_BN) &&
                 !kcuda::cache_tensor_map(nullptr, label, &maps[(size_t)i * 2 + 1], vc.at(i), false,
                                          ctx, (int)HKV, 64, TMA_BN);
        if (!ok) {
            fprintf(stderr, "bench_decoder: %s: no tensor maps\n", label);
            continue;
        }
        const size_t tsmem = (size_t)TMA_ST * 2 * TMA_BN * 128 + 1024 + TMA_ST * 8;
        CHECK_CUDA(cudaFuncSetAttribute(attn_tma_floor, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)tsmem));
        CHECK_CUDA(cudaFuncSetAttribute(attn_tma_floor,
                                        cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        const int C = wide ? 1 : one_c, pph = wide ? 16 : one_c;
        cudaLaunchAttribute at;
        const cudaLaunchConfig_t cfg = cluster_launch((unsigned)(HKV * pph), 128, tsmem, C, &at);
        auto call = [&](int i) {
            CHECK_CUDA(cudaLaunchKernelEx(&cfg, attn_tma_floor, maps[(size_t)(i % sets) * 2],
                                          maps[(size_t)(i % sets) * 2 + 1], (long long)ctx, pph));
        };
        call(0);
        CHECK_CUDA(cudaStreamSynchronize(g_stream));
        const double us = time_calls(k, call);
        char sh[64];
        snprintf(sh, sizeof sh, wide ? "%d blocks" : "%d clusters of %d", (int)(HKV * pph / C), C);
        record_floor(label, sh, bytes, us, cus, k, "baton attention, cold", attention_us);
    }
    if (alloc)
        for (Pool *pl : {&kc, &vc, &pp, &op, &sink})
            CHECK_CUDA(cudaFree(pl->base));
}

/* The decode GEMV: baton's kernel and the gemm delegate (cuBLASLt, trans_b) on the same W sets. */
static void bench_gemv(int64_t N)
{
    if (!wanted("gemv"))
        return;
    const int64_t K = 2048;
    const double wbytes = (double)(N * K * 2);
    const int sets = sets_for(wbytes, 64);
    const int k = sets;
    Pool W = pool_alloc((size_t)wbytes, sets), X = pool_alloc(K * 2, sets),
         Y1 = pool_alloc(N * 2, sets), Y2 = pool_alloc(N * 2, sets);
    fill_random(g_stream, W.base, W.stride * sets, 3);
    fill_random(g_stream, X.base, X.stride * sets, 5);
    CHECK_CUDA(cudaDeviceSynchronize());
    auto ours = [&](int i) {
        baton_gemv_args ga;
        memset(&ga, 0, sizeof ga);
        ga.x = X.at(i), ga.w = W.at(i), ga.y = Y1.at(i);
        ga.m = 1, ga.n = N, ga.k = K, ga.ldx = K;
        ga.dtype = BATON_DTYPE_BF16, ga.alpha = 1.0f, ga.w_const = 1;
        char eb[256] = "";
        baton_exec_ctx gc;
        memset(&gc, 0, sizeof gc);
        gc.stream = g_stream, gc.errbuf = eb, gc.errbuf_len = sizeof eb;
        if (baton__kcuda_gemv(&gc, &ga)) {
            fprintf(stderr, "bench_decoder: gemv: %s\n", eb);
            exit(1);
        }
    };
    /* the delegate as the runtime prepares it: x [1, K], W [N, K], trans_b */
    baton_tensor_desc in[2] = {td(BATON_DTYPE_BF16, {1, K}), td(BATON_DTYPE_BF16, {N, K})},
                      out = td(BATON_DTYPE_BF16, {1, N});
    baton_attr tb;
    memset(&tb, 0, sizeof tb);
    tb.name = "trans_b";
    tb.type = BATON_ATTR_BOOL;
    tb.i = 1;
    baton_sig_args sig;
    memset(&sig, 0, sizeof sig);
    sig.n_inputs = 2, sig.inputs = in, sig.n_outputs = 1, sig.outputs = &out;
    sig.n_attrs = 1, sig.attrs = &tb;
    baton_device dev = {BATON_DEVICE_CUDA, 0};
    baton_target_kind kind = BATON_TARGET_DELEGATE;
    baton_delegate_init info;
    memset(&info, 0, sizeof info);
    info.step_name = "gemv";
    info.device = dev;
    info.stream = g_stream;
    info.sig = &sig;
    info.n_steps = 1;
    info.step_devices = &dev;
    info.step_kinds = &kind;
    void *state = NULL;
    baton_error err;
    if (baton__gemm_cublaslt_iface.init(&info, &state, &err)) {
        fprintf(stderr, "bench_decoder: gemm init: %s\n", err.message);
        exit(1);
    }
    char errbuf[256] = "";
    baton_exec_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.device = dev;
    ctx.stream = g_stream;
    ctx.step_name = "gemv";
    ctx.errbuf = errbuf;
    ctx.errbuf_len = sizeof errbuf;
    ctx.sig = &sig;
    auto theirs = [&](int i) {
        void *bufs[3] = {X.at(i), W.at(i), Y2.at(i)};
        if (baton__gemm_cublaslt_iface.execute(state, &ctx, bufs)) {
            fprintf(stderr, "bench_decoder: gemm execute: %s\n", errbuf);
            exit(1);
        }
    };
    ours(0);
    theirs(0);
    CHECK_CUDA(cudaStreamSynchronize(g_stream));
    std::vector<uint16_t> a((size_t)N), b((size_t)N);
    CHECK_CUDA(cudaMemcpy(a.data(), Y1.at(0), (size_t)N * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(b.data(), Y2.at(0), (size_t)N * 2, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (int64_t i = 0; i < N; i++) {
        const double x = bf2f(a[(size_t)i]), y = bf2f(b[(size_t)i]);
        num += (x - y) * (x - y);
        den += y * y;
    }
    const double diff = sqrt(num / std::max(den, 1e-30));
    if (!(diff < 2e-2)) {
        fprintf(stderr, "bench_decoder: gemv N=%lld differs from cuBLASLt: %.3g\n", (long long)N,
                diff);
        exit(1);
    }
    ctx.capturing = 1;
    const double t_ours = time_calls(k, ours), t_lt = time_calls(k, theirs);
    ctx.capturing = 0;
    const double bytes = wbytes + K * 2 + N * 2;
    const double cus = copy_us(bytes, sets, k);
    char sh[64];
    snprintf(sh, sizeof sh, "x[1,2048].W[%lld,2048]^T", (long long)N);
    for (int which = 0; which < 2; which++)
        record_row("gemv", sh, which ? "cublaslt" : "baton", bytes, which ? t_lt : t_ours, cus,
                   (double)k * wbytes > 2.0 * g_prop.l2CacheSize, which ? "baton" : "cublaslt",
                   which ? t_ours : t_lt);
    baton__gemm_cublaslt_iface.destroy(state);
    CHECK_CUDA(cudaFree(W.base));
    CHECK_CUDA(cudaFree(X.base));
    CHECK_CUDA(cudaFree(Y1.base));
    CHECK_CUDA(cudaFree(Y2.base));
}

/* --attn-sweep: the decode attention rows (cold, and +pdl after rope_cache_update) under each
 * setting of the BATON_ATTN_* knobs (kernels/cuda/decoder_attention.cuh), one child process per
 * setting (the kernel reads them once per process), summed up in one table: one GPU call picks the
 * defaults. */
static int attn_sweep(const char *self, const char *ctxs, int reps, double budget_s)
{
    static const struct {
        const char *name, *env;
    } CFG[] = {
        {"default", ""},
        {"prefetch 4 spec 1", "BATON_ATTN_PREFETCH=4 BATON_ATTN_SPEC=1"},
        {"early 0", "BATON_ATTN_EARLY=0"},
        {"spec 1", "BATON_ATTN_SPEC=1"},
        {"prefetch 4", "BATON_ATTN_PREFETCH=4"},
        {"stages 4", "BATON_ATTN_STAGES=4"},
        {"warps 8", "BATON_ATTN_WARPS=8"},
        {"warps 10", "BATON_ATTN_WARPS=10"},
        {"warps 12", "BATON_ATTN_WARPS=12"},
        {"cluster 8", "BATON_ATTN_CLUSTER=8"},
        {"cluster 16", "BATON_ATTN_CLUSTER=16"},
        {"early 16", "BATON_ATTN_EARLY=16"},
        {"early 1", "BATON_ATTN_EARLY=1"},
        {"stages 3", "BATON_ATTN_STAGES=3"},
        {"cluster 4", "BATON_ATTN_CLUSTER=4"},
        {"prefetch 8", "BATON_ATTN_PREFETCH=8"},
    };
    const char *only = getenv("BATON_SWEEP_ONLY"); /* a comma list of setting names to run */
    auto listed = [&](const char *name) {
        if (!only)
            return true;
        const size_t n = strlen(name);
        for (const char *p = only; (p = strstr(p, name)) != NULL; p += n)
            if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
                return true;
        return false;
    };
    int failed = 0;
    const double t0 = now_ns();
    printf("attention decode sweep, us per call: | ctx: cold, alone in its graph; pdl: after "
           "rope_cache_update with PDL, less the rope alone; seq: the same without PDL; copy: the "
           "copy kernel of the same bytes\n");
    for (const auto &c : CFG) {
        if (!listed(c.name))
            continue;
        if (budget_s > 0 && (now_ns() - t0) * 1e-9 > budget_s) {
            printf("(--sweep-budget %.0f s spent: the rest not run)\n", budget_s);
            break;
        }
        char cmd[1024];
        snprintf(
            cmd, sizeof cmd,
            "exec env %s BATON_ATTN_VERBOSE=1 '%s' --sweep-child --only 'attention decode ctx' "
            "--ctx %s --reps %d 2>&1",
            c.env, self, ctxs, reps);
        FILE *f = popen(cmd, "r");
        if (!f) {
            fprintf(stderr, "bench_decoder: cannot run %s\n", cmd);
            return 1;
        }
        std::string row = std::string(c.name), configs;
        char line[1024];
        while (fgets(line, sizeof line, f)) {
            char op[256];
            double us, cus, peer;
            if (sscanf(line, "SWEEPROW %255[^|]|%lf|%lf|%lf", op, &us, &cus, &peer) == 4) {
                /* "| ctx: cold us, then +pdl us, seq us (copy us)" */
                char cell[320];
                const char *ctxp = strstr(op, "ctx ");
                const long long n = ctxp ? atoll(ctxp + 4) : 0;
                if (strstr(op, "+pdl"))
                    snprintf(cell, sizeof cell, " pdl %.2f seq %.2f (copy %.2f)", us, peer, cus);
                else
                    snprintf(cell, sizeof cell, " | %lld: %.2f", n, us);
                row += cell;
            } else if (!strncmp(line, "attention:", 10) || strstr(line, "bench_decoder:") ||
                       strstr(line, "error")) {
                configs += "    ";
                configs += line;
            }
        }
        const int rc = pclose(f);
        failed += rc != 0;
        printf("%-18s%s%s\n", c.name, row.c_str() + strlen(c.name), rc ? "  (child failed)" : "");
        printf("%s", configs.c_str());
        fflush(stdout);
    }
    return failed ? 1 : 0;
}

static void write_json(const char *path, int argc, char **argv)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "bench_decoder: cannot write %s\n", path);
        exit(1);
    }
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    std::string cmd;
    for (int i = 0; i < argc; i++)
        cmd += std::string(i ? " " : "") + argv[i];
    fprintf(f,
            "{\n  \"format\": \"baton.bench_decoder\",\n  \"format_version\": 1,\n  \"date\": "
            "\"%s\",\n  \"device\": \"%s\",\n  \"l2_bytes\": %d,\n  \"command\": \"%s\",\n  "
            "\"latency_floor_us\": %.3f,\n  \"results\": [\n",
            date, g_prop.name, g_prop.l2CacheSize, cmd.c_str(), g_floor_us);
    for (size_t i = 0; i < g_results.size(); i++) {
        const Result &r = g_results[i];
        fprintf(f,
                "    {\"op\": \"%s\", \"shape\": \"%s\", \"impl\": \"%s\", \"bytes\": %.0f, "
                "\"us\": %.3f, \"gbps\": %.1f, \"copy_us\": %.3f, \"copy_gbps\": %.1f, "
                "\"ratio_to_copy\": %.3f, \"floor_us\": %.3f, \"cold\": %s, \"peer\": %s%s%s, "
                "\"peer_us\": ",
                r.op.c_str(), r.shape.c_str(), r.impl.c_str(), r.bytes, r.us, r.gbps, r.copy_us,
                r.copy_gbps, r.ratio, r.floor_us, r.cold ? "true" : "false",
                r.peer.empty() ? "" : "\"", r.peer.empty() ? "null" : r.peer.c_str(),
                r.peer.empty() ? "" : "\"");
        if (isnan(r.peer_us))
            fprintf(f, "null}");
        else
            fprintf(f, "%.3f}", r.peer_us);
        fprintf(f, "%s\n", i + 1 < g_results.size() ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
}

int main(int argc, char **argv)
{
    const char *json = NULL, *ctxs = "1024,4096,32768";
    int sweep = 0;
    double budget = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            g_reps = std::max(5, atoi(argv[++i]));
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            g_only = argv[++i];
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) {
            ctxs = argv[++i];
            g_ctxs.clear();
            for (const char *c = ctxs; *c;) {
                char *end;
                const long long v = strtoll(c, &end, 10);
                if (end == c || v < 1 || v > (1 << 20)) {
                    fprintf(stderr, "bench_decoder: --ctx wants contexts like 1024,4096\n");
                    return 2;
                }
                g_ctxs.push_back(v);
                c = *end == ',' ? end + 1 : end;
            }
        } else if (!strcmp(argv[i], "--attn-sweep"))
            sweep = 1;
        else if (!strcmp(argv[i], "--sweep-budget") && i + 1 < argc)
            budget = atof(argv[++i]);
        else if (!strcmp(argv[i], "--sweep-child")) {
            g_sweep_child = 1;
            prctl(PR_SET_PDEATHSIG, SIGTERM); /* a sweep cut short by a timeout ends its child */
        } else {
            fprintf(stderr, "usage: bench_decoder [--json FILE] [--reps N] [--only PREFIX] "
                            "[--ctx N,N,..] [--attn-sweep [--sweep-budget SECONDS]]\n");
            return 2;
        }
    }
    if (sweep)
        return attn_sweep(argv[0], ctxs, g_reps, budget);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "bench_decoder: no CUDA device\n");
        return 1;
    }
    CHECK_CUDA(cudaGetDeviceProperties(&g_prop, 0));
    CHECK_CUDA(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    if (baton_registry_create(&g_reg)) {
        fprintf(stderr, "bench_decoder: no registry\n");
        return 1;
    }
    printf("device: %s, %d SMs, L2 %d MB; bf16, batch 1; Llama-3.2-1B shapes; median of %d graph "
           "replays\n",
           g_prop.name, g_prop.multiProcessorCount, g_prop.l2CacheSize >> 20, g_reps);
    g_floor_us = time_calls(256, [&](int) { empty_kernel<<<1, 32, 0, g_stream>>>(); });
    {
        const char *v[] = {"BATON_ATTN_DECODE", "BATON_ATTN_CLUSTER",  "BATON_ATTN_STAGES",
                           "BATON_ATTN_WARPS",  "BATON_ATTN_PREFETCH", "BATON_ATTN_EARLY",
                           "BATON_ATTN_SPEC"};
        for (const char *n : v)
            if (getenv(n))
                printf("%s=%s\n", n, getenv(n));
    }
    printf("\nlatency floor (empty kernel in a graph): %.2f us\n\n", g_floor_us);
    printf("%-40s %-26s %-9s %10s %9s %9s %9s %7s %5s %9s\n", "op", "shape", "impl", "bytes", "us",
           "GB/s", "copy us", "x copy", "cold", "peer us");

    const baton_dtype BF = BATON_DTYPE_BF16, I64 = BATON_DTYPE_I64, F32 = BATON_DTYPE_F32;
    const int64_t D = 2048, H = 32, HKV = 8, DH = 64, FF = 8192, V = 128256;
    Fill fl, ids, pos4k, shared;
    ids.index = 1, ids.lo = 0, ids.hi = V;
    pos4k.index = 1, pos4k.lo = 0, pos4k.hi = 4096;
    shared.shared = 1;
    Fill invf = shared; /* inv_freq: random floats in [-2, 2) are as good as any for timing */
    for (int64_t rows : {1, 8192}) {
        bench_op("embedding", "embedding", {td(I64, {rows}), td(BF, {V, D})}, {ids, shared},
                 td(BF, {rows, D}), {}, (double)(rows * D * 2 * 2 + rows * 8));
    }
    /* rows of 896 (Qwen2.5-0.5B's hidden size, vocabulary 151936) */
    for (int64_t rows : {1, 8192}) {
        Fill qids = ids;
        qids.hi = 151936;
        bench_op("embedding d896", "embedding", {td(I64, {rows}), td(BF, {151936, 896})},
                 {qids, shared}, td(BF, {rows, 896}), {}, (double)(rows * 896 * 2 * 2 + rows * 8));
    }
    /* what any kernel that reads an id before its row takes at decode size */
    bench_dep_floor("embedding floor: index read + row copy", "i64[1]", true, 1, D * 2, V);
    /* the same with the griddepcontrol wait and trigger that every baton kernel starts with */
    bench_dep_floor("embedding floor + pdl hooks", "i64[1]", true, 1, D * 2, V, true);
    for (int64_t rows : {1, 8192})
        bench_op("rope", "rope", {td(BF, {rows, H * DH}), td(I64, {rows}), td(F32, {DH / 2})},
                 {fl, pos4k, invf}, td(BF, {rows, H * DH}), {ai("head_dim", DH)},
                 (double)(rows * H * DH * 2 * 2 + rows * 8));
    /* a prompt of 37 tokens at head_dim 128 (Llama 3 8B's 32 heads): fewer units than a wave of
     * 256-thread blocks fills */
    bench_op("rope", "rope", {td(BF, {37, 32 * 128}), td(I64, {37}), td(F32, {64})},
             {fl, pos4k, invf}, td(BF, {37, 32 * 128}), {ai("head_dim", 128)},
             (double)(37 * 32 * 128 * 2 * 2 + 37 * 8));
    /* what rope's decode row costs with nothing but its arithmetic between its loads and stores */
    bench_rope_floor("rope floor: row, position, frequencies, sincos, row");
    for (int64_t rows : {1, 2048})
        bench_op("silu_mul", "silu_mul", {td(BF, {rows, FF}), td(BF, {rows, FF})}, {fl, fl},
                 td(BF, {rows, FF}), {}, (double)(rows * FF * 2 * 3));
    for (int64_t rows : {1, 2048})
        bench_op("swiglu", "swiglu", {td(BF, {rows, 2 * FF})}, {fl}, td(BF, {rows, FF}), {},
                 (double)(rows * FF * 2 * 3));
    /* an odd F (8191): the halves at different offsets from 16 bytes, shifted into place */
    for (int64_t rows : {1, 2048})
        bench_op("swiglu", "swiglu", {td(BF, {rows, 2 * (FF - 1)})}, {fl}, td(BF, {rows, FF - 1}),
                 {}, (double)(rows * (FF - 1) * 2 * 3));
    for (int64_t rows : {1, 2048})
        bench_op("gelu", "gelu", {td(BF, {rows, FF})}, {fl}, td(BF, {rows, FF}), {},
                 (double)(rows * FF * 2 * 2));
    for (int64_t rows : {1, 256})
        bench_op("cast", "cast", {td(BF, {rows, V})}, {fl}, td(F32, {rows, V}), {},
                 (double)(rows * V * 6));
    /* decode logits (1 and 8 rows), 64 rows that one wave holds on chip, 67 (just past it), 128
     * and 256 rows past it, 4096 short rows (a block each, many a SM), bf16 rows of 32000 (a
     * block each, in shared memory), 2048 and 128 */
    for (int64_t rows : {1, 8, 64, 67, 128, 256})
        bench_op("softmax", "softmax", {td(F32, {rows, V})}, {fl}, td(F32, {rows, V}), {},
                 (double)(rows * V * 8));
    bench_op("softmax", "softmax", {td(F32, {4096, 8192})}, {fl}, td(F32, {4096, 8192}), {},
             (double)(4096.0 * 8192 * 8));
    /* rows of 256 KB, a block's registers and shared memory each, past a wave */
    for (int64_t rows : {140, 512})
        bench_op("softmax", "softmax", {td(F32, {rows, 65536})}, {fl}, td(F32, {rows, 65536}), {},
                 (double)(rows * 65536 * 8));
    bench_op("softmax", "softmax", {td(BF, {1024, 32000})}, {fl}, td(BF, {1024, 32000}), {},
             (double)(1024.0 * 32000 * 4));
    /* short rows past a wave: a block of the fewest threads a row, and a warp a row */
    bench_op("softmax", "softmax", {td(BF, {8192, 2048})}, {fl}, td(BF, {8192, 2048}), {},
             (double)(8192.0 * 2048 * 4));
    bench_op("softmax", "softmax", {td(BF, {65536, 128})}, {fl}, td(BF, {65536, 128}), {},
             (double)(65536.0 * 128 * 4));
    /* rows of 127 bf16: every row's first and last values outside its 16-byte body, taken by its
     * lanes in turn */
    bench_op("softmax", "softmax", {td(BF, {65536, 127})}, {fl}, td(BF, {65536, 127}), {},
             (double)(65536.0 * 127 * 4));
    /* bf16 rows a block each (in registers and shared memory), fewer than the SMs */
    bench_op("softmax", "softmax", {td(BF, {100, V})}, {fl}, td(BF, {100, V}), {},
             (double)(100.0 * V * 4));
    /* one short row: a cluster of 8 blocks */
    bench_op("softmax", "softmax", {td(F32, {1, 8192})}, {fl}, td(F32, {1, 8192}), {},
             (double)(8192.0 * 8));
    /* rows of no multiple of 16 bytes: GPT-2's logits (vocabulary 50257) for 1 and 8 rows, and
     * long rows at every offset from a 16-byte boundary */
    for (int64_t rows : {1, 8})
        bench_op("softmax", "softmax", {td(F32, {rows, 50257})}, {fl}, td(F32, {rows, 50257}), {},
                 (double)(rows * 50257 * 8));
    bench_op("softmax", "softmax", {td(BF, {7, 1000003})}, {fl}, td(BF, {7, 1000003}), {},
             (double)(7.0 * 1000003 * 4));
    /* x a view 4 bytes past a 16-byte boundary, y on one: the warp and read-twice kernels'
     * instances that realign y's vectors across lanes */
    g_in0_shift = 4;
    for (int64_t rows : {1, 8})
        bench_op("softmax x+4", "softmax", {td(F32, {rows, 50257})}, {fl}, td(F32, {rows, 50257}),
                 {}, (double)(rows * 50257 * 8));
    bench_op("softmax x+4", "softmax", {td(BF, {1024, 32000})}, {fl}, td(BF, {1024, 32000}), {},
             (double)(1024.0 * 32000 * 4));
    bench_op("softmax x+4", "softmax", {td(BF, {65536, 128})}, {fl}, td(BF, {65536, 128}), {},
             (double)(65536.0 * 128 * 4));
    g_in0_shift = 0;
    /* what any softmax of a decode row spread over the SMs waits for: one grid-wide exchange */
    bench_barrier_floor("softmax floor: row copy + grid barrier", "f32[1,128256]", (double)(V * 8));
    /* the same with what the barrier must carry: a pair from every block, read by every block */
    bench_barrier_floor<true>("softmax floor: row copy + pairs through a grid barrier",
                              "f32[1,128256]", (double)(V * 8));
    /* the same for a batch of 8 decode rows over all SMs, the exchange of the grid rather than of
     * a cluster a row */
    bench_barrier_floor("softmax floor: row copy + grid barrier", "f32[8,128256]",
                        (double)(8 * V * 8));
    bench_barrier_floor<true>("softmax floor: row copy + pairs through a grid barrier",
                              "f32[8,128256]", (double)(8 * V * 8));
    /* what a softmax of rows past a wave of registers waits for: all of them on chip before the
     * first store (softmax_smem_kernel's grid, loads and stores; over all 132 SMs it measured
     * 1.07x against 1.00x) */
    bench_onchip_floor("softmax floor: rows on chip, then stored", "f32[64,128256]",
                       (double)(64 * V * 8), 128, 1);
    /* the same with the one exchange any row over two blocks needs: a cluster barrier between
     * the last load and the first store (the op's 2-block clusters) */
    bench_onchip_floor("softmax floor: rows on chip, a cluster barrier, then stored",
                       "f32[64,128256]", (double)(64 * V * 8), 128, 2);
    /* a batch of decode logits: each row over a cluster of 8 blocks (the op's 64 SMs), or of 16
     * (non-portable: 128 SMs; fewer than 8 such clusters fit at once), or over 16 blocks with no
     * exchange (not a softmax's floor: a row over several blocks must exchange) */
    bench_onchip_floor("softmax floor: rows on chip, a cluster barrier, then stored",
                       "f32[8,128256]", (double)(8 * V * 8), 64, 8);
    bench_onchip_floor("softmax floor: rows on chip, a 16-block cluster barrier, then stored",
                       "f32[8,128256]", (double)(8 * V * 8), 128, 16);
    bench_onchip_floor("softmax floor: rows on chip, then stored", "f32[8,128256]",
                       (double)(8 * V * 8), 128, 1);
    /* the sampler at one decode step's logits [1, V]: the copy floor is the logits' bytes read
     * (and as many written); the target is a small fraction of a token's decode. Peaked rows: 30
     * logits in [8, 12), where a few tokens hold the mass as in a model's logits (the kernel finds
     * the top_k and top_p sets among a radix pass's candidates) */
    Fill peaked;
    peaked.peaked = 30;
    auto sample_row = [&](const char *label, baton_dtype dt, const Fill &f,
                          std::vector<baton_attr> attrs) {
        bench_op(label, "sample", {td(dt, {1, V}), td(I64, {1})}, {f, pos4k}, td(I64, {1}), attrs,
                 (double)(V * (int64_t)baton_dtype_size(dt)));
    };
    const std::vector<baton_attr> k50 = {ai("top_k", 50), af("top_p", 0.9), af("temperature", 0.8),
                                         ai("seed", 1)},
                                  p90 = {af("top_p", 0.9), af("temperature", 0.8), ai("seed", 1)};
    sample_row("sample top_k 50 top_p 0.9 t 0.8", F32, fl, k50);
    sample_row("sample bf16 top_k 50 top_p 0.9", BF, fl, k50);
    sample_row("sample top_p 0.9 t 0.8", F32, fl, p90);
    sample_row("sample top_k 50 top_p 0.9 t 0.8, peaked", F32, peaked, k50);
    sample_row("sample top_p 0.9 t 0.8, peaked", F32, peaked, p90);
    sample_row("sample greedy (top_k 1)", F32, fl, {ai("top_k", 1), ai("seed", 1)});
    for (int64_t rows : {1, 16384}) {
        /* rows new rows a call at positions 0..rows-1 of a 32768-row cache (1 KB rows) */
        Fill p;
        p.index = 1, p.lo = 0, p.hi = 32768, p.ramp = rows > 1;
        bench_op("kv_cache_update", "kv_cache_update",
                 {td(BF, {32768, HKV * DH}), td(BF, {rows, HKV * DH}), td(I64, {rows})},
                 {shared, fl, p}, td(BF, {32768, HKV * DH}), {},
                 (double)(rows * (HKV * DH * 2 * 2 + 8)), false, MAX_CALLS, true);
    }
    bench_dep_floor("kv_cache_update floor: position read + row store", "bf16[32768,512]", false, 1,
                    HKV * DH * 2, 32768);
    for (int64_t rows : {1, 8192}) {
        /* qkv [rows, (H + 2 HKV) DH] into q [rows, H DH] and the caches at positions 0..rows-1 */
        Fill p;
        p.index = 1, p.lo = 0, p.hi = 8192, p.ramp = rows > 1;
        const int64_t QKV = (H + 2 * HKV) * DH, KF = HKV * DH, S = 8192;
        bench_op_n("rope_cache_update", "rope_cache_update",
                   {td(BF, {rows, QKV}), td(I64, {rows}), td(F32, {DH / 2}), td(BF, {S, KF}),
                    td(BF, {S, KF})},
                   {fl, p, invf, shared, shared},
                   {td(BF, {rows, H * DH}), td(BF, {S, KF}), td(BF, {S, KF})}, {-1, 3, 4},
                   {ai("head_dim", DH), ai("n_heads", H), ai("n_kv_heads", HKV)},
                   (double)(rows * (QKV * 2 * 2 + 8)));
    }
    for (int64_t ctx : g_ctxs) {
        double cold_us = NAN;
        for (int warm = 0; warm < (g_sweep_child ? 1 : 2); warm++) {
            Fill p;
            p.index = 1, p.lo = ctx - 1, p.hi = ctx; /* positions[0] = ctx - 1: ctx keys */
            const double kv = (double)(ctx * HKV * DH * 2 * 2);
            char label[64];
            snprintf(label, sizeof label, "attention decode ctx %lld%s", (long long)ctx,
                     warm ? " (warm)" : "");
            bench_op(label, "attention",
                     {td(BF, {1, H * DH}), td(BF, {ctx, HKV * DH}), td(BF, {ctx, HKV * DH}),
                      td(I64, {1})},
                     {fl, fl, fl, p}, td(BF, {1, H * DH}),
                     {ai("head_dim", DH), ai("n_heads", H), ai("n_kv_heads", HKV)},
                     kv + 2.0 * H * DH * 2, warm != 0, 1024, false, 16);
            if (!warm && wanted(label))
                cold_us = g_results.back().us;
        }
        bench_attn_after_rope(ctx, H, HKV, DH);
        if (!g_sweep_child)
            bench_attn_floors(ctx, HKV, DH, cold_us);
    }
    std::vector<std::pair<int64_t, double>> prefill_us;
    for (int64_t T : {1024, 2048, 4096, 8192}) {
        /* causal prefill from position 0: row r attends to rows 0..r */
        Fill p;
        p.index = 1, p.ramp = 1, p.lo = 0;
        char label[64];
        snprintf(label, sizeof label, "attention prefill T %lld", (long long)T);
        bench_op(label, "attention",
                 {td(BF, {T, H * DH}), td(BF, {T, HKV * DH}), td(BF, {T, HKV * DH}), td(I64, {T})},
                 {fl, fl, fl, p}, td(BF, {T, H * DH}),
                 {ai("head_dim", DH), ai("n_heads", H), ai("n_kv_heads", HKV)},
                 (double)(T * HKV * DH * 2 * 2 + 2.0 * T * H * DH * 2), true, 8);
        if (wanted(label))
            prefill_us.push_back({T, g_results.back().us});
    }
    for (int64_t N : {2048, 2560, 8192, 16384, 128256})
        bench_gemv(N);

    /* causal: row r takes r + 1 keys, 4 flops per key and feature (Q K^T and P V) */
    printf("\n");
    for (const auto &p : prefill_us)
        printf(
            "attention prefill T %-5lld %9.2f us %7.1f TFLOP/s (causal flops: 2 H Dh T (T + 1))\n",
            (long long)p.first, p.second,
            2.0 * H * DH * (double)p.first * (double)(p.first + 1) / p.second * 1e-6);
    if (json)
        write_json(json, argc, argv);
    baton_registry_destroy(g_reg);
    return 0;
}
