/* bench_timeline.h: bench_kernels --timeline, the report of where each block of the last register
 * backward spent its time (timeline builds only: cmake -DBATON_KERNEL_TIMELINE=ON, see
 * kernels/cuda/rms_norm_cuda.h). Times are microseconds from the first block's start. The
 * spread of "rows done" is what a static split of the rows costs: the kernel ends with its slowest
 * block, and its cluster's combine waits for it. Blocks that share an SM, and clusters that
 * share a GPC (inferred: clusters whose blocks ran on the same SMs lie in one GPC), are reported
 * apart, since each shares that part of the chip's bandwidth. */
#ifndef BATON_BENCH_TIMELINE_H
#define BATON_BENCH_TIMELINE_H

#include <algorithm>
#include <map>
#include <set>
#include <stdio.h>
#include <vector>

#include "kernels/cuda/rms_norm_cuda.h"

/* "min p10 med p90 max" of v */
static void tl_quantiles(std::vector<double> v, char *out, size_t n)
{
    if (v.empty()) {
        snprintf(out, n, "-");
        return;
    }
    std::sort(v.begin(), v.end());
    const size_t k = v.size();
    snprintf(out, n, "%7.2f %7.2f %7.2f %7.2f %7.2f", v[0], v[k / 10], v[k / 2], v[(9 * k) / 10],
             v[k - 1]);
}

static int tl_root(std::map<int, int> &up, int a)
{
    while (up.count(a) && up[a] != a)
        a = up[a];
    return a;
}

static void print_bwd_timeline(const char *what, int cy)
{
    static unsigned long long m[KCUDA_TL_MAX_BLOCKS][KCUDA_TL_SLOTS];
    static unsigned long long c[KCUDA_TL_MAX_BLOCKS][KCUDA_TL_SLOTS];
    int nm = 0, nc = 0;
    if (baton__kcuda_rms_bwd_timeline(m, &nm, c, &nc) != 0 || nm <= 0) {
        printf("  timeline %s: no stamps (not the register backward?)\n", what);
        return;
    }
    nm = std::min(nm, KCUDA_TL_MAX_BLOCKS);
    nc = std::min(nc, KCUDA_TL_MAX_BLOCKS);
    unsigned long long t0 = m[0][KCUDA_TL_ENTRY];
    for (int b = 0; b < nm; b++)
        t0 = std::min(t0, m[b][KCUDA_TL_ENTRY]);
    /* a stamp older than this launch (a phase that a block did not reach: no rows, say) is
     * left out */
    auto us = [&](unsigned long long t) { return t >= t0 ? (double)(t - t0) / 1e3 : -1.0; };
    auto add = [&](std::vector<double> &v, unsigned long long t) {
        if (t >= t0)
            v.push_back(us(t));
    };
    auto sm_of = [&](int b) { return (int)(m[b][KCUDA_TL_SM] & 0xffffffffu); };

    std::map<int, int> per_sm;
    for (int b = 0; b < nm; b++)
        per_sm[sm_of(b)]++;
    int alone = 0;
    for (auto &kv : per_sm)
        alone += kv.second == 1;
    printf("  timeline %s: %d blocks on %zu SMs (%d alone), clusters of %d; us from the first "
           "block's start\n",
           what, nm, per_sm.size(), alone, cy);
    printf("    %-26s %7s %7s %7s %7s %7s\n", "phase", "min", "p10", "med", "p90", "max");
    const struct {
        const char *name;
        int slot;
        bool cluster;
    } phases[] = {{"waited (PDL)", KCUDA_TL_WAITED, false},
                  {"first rows done", KCUDA_TL_FIRST_STEP, false},
                  {"rows done", KCUDA_TL_ROWS_DONE, false},
                  {"cluster synced", KCUDA_TL_SYNCED, true},
                  {"part_grad written", KCUDA_TL_COMBINED, true},
                  {"exit", KCUDA_TL_EXIT, false}};
    char q[128];
    for (const auto &ph : phases) {
        if (ph.cluster && cy <= 1)
            continue;
        std::vector<double> v;
        for (int b = 0; b < nm; b++)
            add(v, m[b][ph.slot]);
        tl_quantiles(v, q, sizeof q);
        printf("    %-26s %s\n", ph.name, q);
    }
    for (int shared = 0; shared < 2; shared++) {
        std::vector<double> v;
        for (int b = 0; b < nm; b++)
            if ((per_sm[sm_of(b)] > 1) == (bool)shared)
                add(v, m[b][KCUDA_TL_ROWS_DONE]);
        tl_quantiles(v, q, sizeof q);
        printf("    %-26s %s  (%zu blocks)\n",
               shared ? "rows done, SM shared" : "rows done, alone on an SM", q, v.size());
    }
    const struct {
        const char *name;
        int slot;
    } cphases[] = {{"column sum waited", KCUDA_TL_WAITED}, {"column sum exit", KCUDA_TL_EXIT}};
    for (const auto &ph : cphases) {
        std::vector<double> v;
        for (int b = 0; b < nc; b++)
            add(v, c[b][ph.slot]);
        tl_quantiles(v, q, sizeof q);
        printf("    %-26s %s\n", ph.name, q);
    }
    if (cy <= 1)
        return;
    /* GPCs: a cluster's blocks share a GPC, so clusters that ran on a common SM share one. Nodes:
     * clusters k >= 0 and SMs -1 - sm. */
    std::map<int, int> up;
    for (int b = 0; b < nm; b++) {
        const int a = tl_root(up, b / cy), s = tl_root(up, -1 - sm_of(b));
        up[a] = a;
        up[s] = a;
    }
    std::map<int, std::vector<int>> gpc; /* root -> blocks */
    for (int b = 0; b < nm; b++)
        gpc[tl_root(up, b / cy)].push_back(b);
    if (gpc.size() * cy == (size_t)nm) {
        /* no two clusters shared an SM: nothing to infer; the spread of their last ranks */
        std::map<int, double> last;
        for (int b = 0; b < nm; b++)
            last[b / cy] = std::max(last[b / cy], us(m[b][KCUDA_TL_ROWS_DONE]));
        std::vector<double> v;
        for (auto &kv : last)
            v.push_back(kv.second);
        tl_quantiles(v, q, sizeof q);
        printf("    %-26s %s  (%zu clusters)\n", "a cluster's last rows done", q, v.size());
        return;
    }
    for (auto &g : gpc) {
        std::set<int> cl, sms;
        std::vector<double> v;
        for (int b : g.second) {
            cl.insert(b / cy);
            sms.insert(sm_of(b));
            add(v, m[b][KCUDA_TL_ROWS_DONE]);
        }
        tl_quantiles(v, q, sizeof q);
        char name[48];
        snprintf(name, sizeof name, "rows done, %zu clusters/%zu SMs", cl.size(), sms.size());
        printf("    %-26s %s\n", name, q);
    }
}

#endif /* BATON_BENCH_TIMELINE_H */
