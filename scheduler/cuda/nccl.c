/* nccl.c: all_reduce and all_gather on several GPUs of one process, and the communicator, sends and
 * receives of one process per GPU (baton_options.world), through NCCL, loaded with
 * dlopen on first use, as CUPTI is: baton links no NCCL, so its users need none unless a plan has
 * a collective. The header comes from the system or the nvidia-nccl-cu13 wheel at build time
 * (CMakeLists.txt); without it (BATON_NCCL undefined) every call says how to get it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/dynlib.h"
#include "scheduler/cuda/nccl.h"

#ifdef BATON_NCCL
#include <nccl.h>

static struct {
    void *lib;
    ncclResult_t (*init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*destroy)(ncclComm_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                               cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    const char *(*error_string)(ncclResult_t);
    /* one process per GPU */
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
} api;

/* Opened once per process; plans are prepared on one thread at a time per runtime, and two
 * runtimes opening it at once load the same library twice at worst, which dlopen counts. */
static int load(baton_error *err)
{
    if (api.lib)
        return 0;
    const char *const names[] = {getenv("BATON_NCCL_LIBRARY"), "libnccl.so.2", "libnccl.so",
#ifdef BATON_NCCL_LIBDIR
                                 BATON_NCCL_LIBDIR "/libnccl.so.2"
#else
                                 NULL
#endif
    };
    const dynlib_sym syms[] = {
        {"ncclCommInitAll", &api.init_all},
        {"ncclCommDestroy", &api.destroy},
        {"ncclAllReduce", &api.all_reduce},
        {"ncclAllGather", &api.all_gather},
        {"ncclGroupStart", &api.group_start},
        {"ncclGroupEnd", &api.group_end},
        {"ncclGetErrorString", &api.error_string},
        {"ncclGetUniqueId", &api.get_unique_id},
        {"ncclCommInitRank", &api.init_rank},
        {"ncclSend", &api.send},
        {"ncclRecv", &api.recv},
    };
    const char *missing;
    char why[256];
    void *lib = baton__dynlib_open(names, sizeof names / sizeof names[0], syms,
                                   sizeof syms / sizeof syms[0], &missing, why, sizeof why);
    if (!lib && missing)
        return baton__err_set(err, BATON_ENOTSUP, "collectives: this libnccl lacks %s", missing);
    if (!lib)
        return baton__err_set(
            err, BATON_ENOTSUP,
            "collectives need NCCL, and libnccl.so.2 cannot be loaded (%s); install "
            "it (libnccl2, or pip install nvidia-nccl-cu13) or name it in "
            "BATON_NCCL_LIBRARY",
            why);
    api.lib = lib;
    return 0;
}

static int nccl_fail(baton_error *err, const char *call, const char *what, ncclResult_t r)
{
    return baton__err_set(err, BATON_ECUDA, "%s (%s) failed: %s", call, what, api.error_string(r));
}

int baton__nccl_comms_create(int n, const int *ordinals, void **out, baton_error *err)
{
    *out = NULL;
    int rc = load(err);
    if (rc)
        return rc;
    ncclComm_t *comms = calloc((size_t)n, sizeof *comms);
    if (!comms)
        return baton__err_set(err, BATON_ENOMEM, "collectives: out of memory");
    ncclResult_t r = api.init_all(comms, n, ordinals);
    if (r != ncclSuccess) {
        free(comms);
        return nccl_fail(err, "ncclCommInitAll", "communicators for the group", r);
    }
    *out = comms;
    return 0;
}

void baton__nccl_comms_destroy(void *comms, int n)
{
    ncclComm_t *c = comms;
    for (int k = 0; c && k < n; k++)
        api.destroy(c[k]);
    free(c);
}

static int nccl_type(baton_dtype dt, ncclDataType_t *out)
{
    switch (dt) {
    case BATON_DTYPE_F32: *out = ncclFloat32; return 0;
    case BATON_DTYPE_F16: *out = ncclFloat16; return 0;
    case BATON_DTYPE_BF16: *out = ncclBfloat16; return 0;
    case BATON_DTYPE_F64: *out = ncclFloat64; return 0;
    case BATON_DTYPE_I32: *out = ncclInt32; return 0;
    case BATON_DTYPE_I64: *out = ncclInt64; return 0;
    default: return BATON_EINVAL;
    }
}

int baton__nccl_run(void *comms, const dev_coll *c, cudaStream_t const *streams, baton_error *err)
{
    ncclComm_t *cm = comms;
    ncclDataType_t t;
    if (nccl_type(c->dtype, &t))
        return baton__err_set(err, BATON_EINVAL, "collectives: NCCL has no %s",
                              baton_dtype_name(c->dtype));
    ncclResult_t r = api.group_start();
    const char *call = c->op == DEV_COLL_ALL_REDUCE ? "ncclAllReduce" : "ncclAllGather";
    for (int k = 0; k < c->n && r == ncclSuccess; k++)
        r = c->op == DEV_COLL_ALL_REDUCE
                ? api.all_reduce(c->send[k], c->recv[k], c->count, t, ncclSum, cm[k], streams[k])
                : api.all_gather(c->send[k], c->recv[k], c->count, t, cm[k], streams[k]);
    ncclResult_t r2 = api.group_end(); /* ends the group even after a failed call */
    if (r != ncclSuccess)
        return nccl_fail(err, call, c->what, r);
    if (r2 != ncclSuccess)
        return nccl_fail(err, "ncclGroupEnd", c->what, r2);
    return 0;
}

/* ---- one process per GPU: a communicator per rank over the world (ncclCommInitRank) ---- */

_Static_assert(sizeof(ncclUniqueId) == DEV_WORLD_ID_BYTES, "NCCL's id is DEV_WORLD_ID_BYTES");

int baton__nccl_world_id(unsigned char *id, baton_error *err)
{
    int rc = load(err);
    if (rc)
        return rc;
    ncclUniqueId u;
    ncclResult_t r = api.get_unique_id(&u);
    if (r != ncclSuccess)
        return nccl_fail(err, "ncclGetUniqueId", "rank 0's id for the rendezvous", r);
    memcpy(id, &u, sizeof u);
    return 0;
}

int baton__nccl_world_join(const unsigned char *id, int rank, int world, void **out,
                           baton_error *err)
{
    *out = NULL;
    int rc = load(err);
    if (rc)
        return rc;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t comm = NULL;
    /* blocks until every rank has called it (NCCL's own bootstrap over the network) */
    ncclResult_t r = api.init_rank(&comm, world, u, rank);
    if (r != ncclSuccess)
        return nccl_fail(err, "ncclCommInitRank", "joining the other ranks", r);
    *out = comm;
    return 0;
}

void baton__nccl_world_leave(void *comm)
{
    if (comm)
        api.destroy(comm);
}

int baton__nccl_world_move(void *comm, void *buf, size_t bytes, int peer, int send,
                           cudaStream_t stream, baton_error *err)
{
    ncclResult_t r = send ? api.send(buf, bytes, ncclUint8, peer, comm, stream)
                          : api.recv(buf, bytes, ncclUint8, peer, comm, stream);
    if (r != ncclSuccess) {
        char what[48];
        snprintf(what, sizeof what, "%s rank %d", send ? "to" : "from", peer);
        return nccl_fail(err, send ? "ncclSend" : "ncclRecv", what, r);
    }
    return 0;
}

int baton__nccl_world_coll(void *comm, const dev_coll *c, int rank, cudaStream_t stream,
                           baton_error *err)
{
    ncclDataType_t t;
    if (nccl_type(c->dtype, &t))
        return baton__err_set(err, BATON_EINVAL, "collectives: NCCL has no %s",
                              baton_dtype_name(c->dtype));
    ncclResult_t r =
        c->op == DEV_COLL_ALL_REDUCE
            ? api.all_reduce(c->send[rank], c->recv[rank], c->count, t, ncclSum, comm, stream)
            : api.all_gather(c->send[rank], c->recv[rank], c->count, t, comm, stream);
    if (r != ncclSuccess)
        return nccl_fail(err, c->op == DEV_COLL_ALL_REDUCE ? "ncclAllReduce" : "ncclAllGather",
                         c->what, r);
    return 0;
}

#else /* no NCCL header at build time */

static int absent(baton_error *err)
{
    return baton__err_set(
        err, BATON_ENOTSUP,
        "collectives on CUDA need NCCL, and this baton was built without its header; "
        "install libnccl-dev or pip install nvidia-nccl-cu13 and configure again (or "
        "pass -DBATON_NCCL_ROOT=<dir with include/nccl.h>)");
}

int baton__nccl_comms_create(int n, const int *ordinals, void **out, baton_error *err)
{
    (void)n;
    (void)ordinals;
    *out = NULL;
    return absent(err);
}

void baton__nccl_comms_destroy(void *comms, int n)
{
    (void)comms;
    (void)n;
}

int baton__nccl_run(void *comms, const dev_coll *c, cudaStream_t const *streams, baton_error *err)
{
    (void)comms;
    (void)c;
    (void)streams;
    return absent(err);
}
int baton__nccl_world_id(unsigned char *id, baton_error *err)
{
    (void)id;
    return absent(err);
}

int baton__nccl_world_join(const unsigned char *id, int rank, int world, void **out,
                           baton_error *err)
{
    (void)id;
    (void)rank;
    (void)world;
    *out = NULL;
    return absent(err);
}

void baton__nccl_world_leave(void *comm)
{
    (void)comm;
}

int baton__nccl_world_move(void *comm, void *buf, size_t bytes, int peer, int send,
                           cudaStream_t stream, baton_error *err)
{
    (void)comm;
    (void)buf;
    (void)bytes;
    (void)peer;
    (void)send;
    (void)stream;
    return absent(err);
}

int baton__nccl_world_coll(void *comm, const dev_coll *c, int rank, cudaStream_t stream,
                           baton_error *err)
{
    (void)comm;
    (void)c;
    (void)rank;
    (void)stream;
    return absent(err);
}
#endif
