/* world.c: how the ranks of one plan find each other (baton_options.world). Rank 0 makes the
 * backend's communicator id and writes it to the rendezvous file atomically (a file of its own,
 * renamed into place), the other ranks poll for the file; every rank leaves a marker beside it
 * and waits, within the timeout, for every other rank's; then all join the backend's world, and
 * the files are removed. The same for every backend, so the test
 * device's ranks (threads of one process) meet exactly as CUDA's processes do. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "scheduler/runtime.h"

#define WORLD_TIMEOUT_MS 300000
#define WORLD_POLL_MS    10

static int write_id(const char *path, const unsigned char *id, baton_error *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp)
        return baton__err_set(err, BATON_EINVAL, "rendezvous '%s': the path is too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return baton__err_set(err, BATON_EIO, "rendezvous: cannot create '%s': %s", tmp,
                              strerror(errno));
    int ok = fwrite(id, 1, DEV_WORLD_ID_BYTES, f) == DEV_WORLD_ID_BYTES;
    ok = fflush(f) == 0 && ok;
    ok = fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    /* the rename makes the whole id appear at once: a reader never sees part of it */
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return baton__err_set(err, BATON_EIO, "rendezvous: cannot write '%s': %s", path,
                              strerror(e));
    }
    return 0;
}

/* 1 with the id once the file holds a whole one, 0 while it does not exist yet. */
static int read_id(const char *path, unsigned char *id)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = fread(id, 1, DEV_WORLD_ID_BYTES, f);
    fclose(f);
    return n == DEV_WORLD_ID_BYTES;
}

/* The marker file rank r leaves beside the id once it has read it: "<path>.rank<r>". */
static int marker_path(char *buf, size_t len, const char *path, int r)
{
    return snprintf(buf, len, "%s.rank%d", path, r) < (int)len ? 0 : -1;
}

/* Every rank waits here, within the timeout, until every other rank has read the id (left its
 * marker). NCCL's own join (ncclCommInitRank) waits for the other ranks without a bound; only
 * ranks known to be alive and past this point are asked into it, so that a missing rank is an
 * error after `timeout` ms rather than a hang. */
static int arrive(const char *path, int rank, int world, int timeout, baton_error *err)
{
    char mine[4096], other[4096];
    if (marker_path(mine, sizeof mine, path, rank))
        return baton__err_set(err, BATON_EINVAL, "rendezvous '%s': the path is too long", path);
    FILE *f = fopen(mine, "wb");
    if (!f || fclose(f) != 0)
        return baton__err_set(err, BATON_EIO, "rendezvous: cannot create '%s': %s", mine,
                              strerror(errno));
    const uint64_t t0 = uv_hrtime();
    for (int r = 0; r < world; r++) {
        struct stat st;
        marker_path(other, sizeof other, path, r);
        while (stat(other, &st) != 0) {
            if (uv_hrtime() - t0 > (uint64_t)timeout * 1000000u) {
                unlink(mine);
                return baton__err_set(err, BATON_ESTATE,
                                      "rank %d of %d: rank %d did not arrive within %d ms (no "
                                      "'%s'): start every rank with the same rendezvous path "
                                      "(baton_options.rendezvous_timeout_ms waits longer)",
                                      rank, world, r, timeout, other);
            }
            uv_sleep(WORLD_POLL_MS);
        }
    }
    return 0;
}

int baton__world_join(baton_runtime *rt, int own, baton_error *err)
{
    const baton_options *o = &rt->opts;
    rt_device *rd = &rt->dev[own];
    const int timeout = o->rendezvous_timeout_ms > 0 ? o->rendezvous_timeout_ms : WORLD_TIMEOUT_MS;
    if (!dev_has_ranks(rd->ops))
        return baton__err_set(err, BATON_ENOTSUP,
                              "baton_runtime_create: rank %d of %d: this backend (%s) cannot run "
                              "one process per GPU; use BATON_GPU_CUDA (NCCL) or BATON_GPU_SIM",
                              o->rank, o->world, rd->ops->name);
    unsigned char id[DEV_WORLD_ID_BYTES];
    const char *path = o->rendezvous;
    int rc;
    if (o->rank == 0) {
        struct stat st;
        char marker[4096];
        int stale = o->world > 1 && stat(path, &st) == 0;
        for (int r = 1; o->world > 1 && r < o->world && !stale; r++)
            stale = marker_path(marker, sizeof marker, path, r) == 0 && stat(marker, &st) == 0;
        if (stale)
            return baton__err_set(err, BATON_ESTATE,
                                  "rendezvous '%s' (or a '%s.rankN' beside it) exists already, "
                                  "left by an earlier launch: remove it, or give every rank a "
                                  "new path for this launch",
                                  path, path);
        if ((rc = rd->ops->world_id(id, err)))
            return rc;
        if (o->world > 1 && (rc = write_id(path, id, err)))
            return rc;
    } else {
        const uint64_t t0 = uv_hrtime();
        while (!read_id(path, id)) {
            if (uv_hrtime() - t0 > (uint64_t)timeout * 1000000u)
                return baton__err_set(err, BATON_ESTATE,
                                      "rank %d of %d: no rendezvous file '%s' after %d ms: start "
                                      "rank 0 with the same "
                                      "rendezvous path, on storage every rank sees (baton_options."
                                      "rendezvous_timeout_ms waits longer)",
                                      o->rank, o->world, path, timeout);
            uv_sleep(WORLD_POLL_MS);
        }
    }
    if (o->world > 1 && (rc = arrive(path, o->rank, o->world, timeout, err))) {
        if (o->rank == 0)
            unlink(path);
        return rc;
    }
    rc = rd->ops->world_join(rd->ctx, id, o->rank, o->world, timeout, &rt->world, err);
    if (o->world > 1) {
        /* past the join every rank has passed arrive(): the files are no longer read */
        char marker[4096];
        if (marker_path(marker, sizeof marker, path, o->rank) == 0)
            unlink(marker);
        if (o->rank == 0)
            unlink(path);
    }
    if (rc) {
        char inner[BATON_ERROR_MAX];
        snprintf(inner, sizeof inner, "%s", err ? err->message : "");
        return baton__err_set(err, rc, "rank %d of %d: joining the other ranks: %s", o->rank,
                              o->world, inner);
    }
    return 0;
}
