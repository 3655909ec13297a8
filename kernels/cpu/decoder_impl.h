/* decoder_impl.h: the decoder kernels' arithmetic, written once for an accumulation type T and
 * included twice by decoder.c: T = float (bf16, f16, f32 data) and T = double (f64 data). Each
 * function works on runs of elements converted into stack chunks, so the inner loops are plain
 * contiguous loops over T that the compiler vectorises. Needs T, SFX(name), LD, ST, EXP, COS, SIN,
 * ERFC and DOT (a dot product of two T runs) defined. */

static void SFX(rope)(baton_dtype dt, const void *x, const baton_dtype pdt, const void *pos,
                      const float *inv_freq, void *y, int64_t rows, int64_t F, int64_t Dh,
                      int interleaved, double scale)
{
    const int64_t half = Dh / 2, heads = F / Dh;
    T cs[CHUNK], sn[CHUNK], a[2 * CHUNK], b[CHUNK];
    for (int64_t r = 0; r < rows; r++) {
        const int64_t p = idx_at(pdt, pos, r);
        for (int64_t i0 = 0; i0 < half; i0 += CHUNK) {
            const int c = half - i0 < CHUNK ? (int)(half - i0) : CHUNK;
            /* HF forms the angle as an f32 product of the position and inv_freq; f64 data takes
             * it in f64. cos and sin are taken once per row and reused by every head. */
            for (int i = 0; i < c; i++) {
                T ang = (T)p * (T)inv_freq[i0 + i];
                cs[i] = (T)(COS(ang) * (T)scale);
                sn[i] = (T)(SIN(ang) * (T)scale);
            }
            for (int64_t h = 0; h < heads; h++) {
                const int64_t base = r * F + h * Dh;
                if (interleaved) {
                    LD(dt, x, base + 2 * i0, 2 * c, a);
                    for (int i = 0; i < c; i++) {
                        T x0 = a[2 * i], x1 = a[2 * i + 1];
                        a[2 * i] = x0 * cs[i] - x1 * sn[i];
                        a[2 * i + 1] = x1 * cs[i] + x0 * sn[i];
                    }
                    ST(dt, y, base + 2 * i0, 2 * c, a);
                } else {
                    LD(dt, x, base + i0, c, a);
                    LD(dt, x, base + half + i0, c, b);
                    for (int i = 0; i < c; i++) {
                        T x1 = a[i], x2 = b[i];
                        a[i] = x1 * cs[i] - x2 * sn[i];
                        b[i] = x2 * cs[i] + x1 * sn[i];
                    }
                    ST(dt, y, base + i0, c, a);
                    ST(dt, y, base + half + i0, c, b);
                }
            }
        }
    }
}

/* Query r, heads h0 .. h0+g-1 (all of KV head kvh) against cache rows 0..last: an online
 * softmax over blocks of ATT_BLOCK keys, in T. */
static void SFX(attend)(baton_dtype dt, const void *q, const void *kc, const void *vc, void *o,
                        int64_t r, int64_t F, int64_t KF, int64_t Dh, int64_t h0, int g,
                        int64_t kvh, int64_t last, T scale)
{
    T qv[ATT_GROUP][1024], acc[ATT_GROUP][1024], kr[1024], s[ATT_GROUP][ATT_BLOCK];
    T m[ATT_GROUP], l[ATT_GROUP];
    for (int k = 0; k < g; k++) {
        LD(dt, q, r * F + (h0 + k) * Dh, (int)Dh, qv[k]);
        for (int64_t d = 0; d < Dh; d++) {
            qv[k][d] *= scale;
            acc[k][d] = 0;
        }
        m[k] = -INFINITY;
        l[k] = 0;
    }
    for (int64_t j0 = 0; j0 <= last; j0 += ATT_BLOCK) {
        const int nb = last + 1 - j0 < ATT_BLOCK ? (int)(last + 1 - j0) : ATT_BLOCK;
        for (int j = 0; j < nb; j++) {
            LD(dt, kc, (j0 + j) * KF + kvh * Dh, (int)Dh, kr);
            for (int k = 0; k < g; k++)
                s[k][j] = DOT(qv[k], kr, Dh);
        }
        for (int k = 0; k < g; k++) {
            T mb = m[k];
            for (int j = 0; j < nb; j++)
                mb = s[k][j] > mb ? s[k][j] : mb;
            const T corr = m[k] == -INFINITY ? (T)0 : EXP(m[k] - mb);
            l[k] *= corr;
            for (int64_t d = 0; d < Dh; d++)
                acc[k][d] *= corr;
            for (int j = 0; j < nb; j++) {
                s[k][j] = EXP(s[k][j] - mb);
                l[k] += s[k][j];
            }
            m[k] = mb;
        }
        for (int j = 0; j < nb; j++) {
            LD(dt, vc, (j0 + j) * KF + kvh * Dh, (int)Dh, kr);
            for (int k = 0; k < g; k++) {
                const T w = s[k][j];
                for (int64_t d = 0; d < Dh; d++)
                    acc[k][d] += w * kr[d];
            }
        }
    }
    for (int k = 0; k < g; k++) {
        const T inv = (T)1 / l[k];
        for (int64_t d = 0; d < Dh; d++)
            acc[k][d] *= inv;
        ST(dt, o, r * F + (h0 + k) * Dh, (int)Dh, acc[k]);
    }
}

typedef struct SFX(att_job) {
    baton_dtype dt, pdt;
    const void *q, *kc, *vc, *pos;
    void *o;
    int64_t Dh, H, Hkv, G, groups; /* groups: blocks of ATT_GROUP heads per KV head */
    double scale;
} SFX(att_job);

/* Task t: query row t / (Hkv * groups), one block of heads of one KV head. Each task writes its
 * own heads of its own row, so the split does not change a bit. */
static void SFX(att_task)(void *arg, int64_t t)
{
    const SFX(att_job) *j = arg;
    const int64_t per_row = j->Hkv * j->groups;
    const int64_t r = t / per_row, kvh = t % per_row / j->groups;
    const int64_t g0 = t % j->groups * ATT_GROUP;
    const int g = j->G - g0 < ATT_GROUP ? (int)(j->G - g0) : ATT_GROUP;
    const int64_t last = idx_at(j->pdt, j->pos, r);
    const int64_t F = j->H * j->Dh, KF = j->Hkv * j->Dh;
    /* clang-format cannot read SFX(name)(args) as a call */
    // clang-format off
    SFX(attend)(j->dt, j->q, j->kc, j->vc, j->o, r, F, KF, j->Dh, kvh * j->G + g0, g, kvh, last,
                (T)j->scale);
    // clang-format on
}

static void SFX(attention)(baton_dtype dt, const void *q, const void *kc, const void *vc,
                           baton_dtype pdt, const void *pos, void *o, int64_t rows, int64_t Dh,
                           int64_t H, int64_t Hkv, double scale)
{
    const int64_t G = H / Hkv;
    // clang-format off
    SFX(att_job) j = {.dt = dt, .pdt = pdt, .q = q, .kc = kc, .vc = vc, .pos = pos, .o = o,
                      .Dh = Dh, .H = H, .Hkv = Hkv, .G = G,
                      .groups = (G + ATT_GROUP - 1) / ATT_GROUP, .scale = scale};
    // clang-format on
    const int64_t tasks = rows * Hkv * j.groups;
    /* the cache rows read, a measure of the work: a short context stays on the calling thread */
    int64_t work = 0;
    for (int64_t r = 0; r < rows && work < ATT_PAR_MIN; r++)
        work += (idx_at(pdt, pos, r) + 1) * H * Dh;
    if (work < ATT_PAR_MIN) {
        for (int64_t t = 0; t < tasks; t++)
            SFX(att_task)(&j, t);
        return;
    }
    baton__par_for(tasks, SFX(att_task), &j);
}

static void SFX(act)(int kind, baton_dtype dt, const void *a, const void *b, void *y, int64_t n)
{
    T va[CHUNK], vb[CHUNK];
    /* x / sqrt(2), not x * (1 / sqrt(2)): near x = -38 the two arguments' last bit moves
     * erfc's (subnormal) result by 1e-10 relative */
    const T k0 = (T)0.7978845608028654, k1 = (T)0.044715, sq2 = (T)1.4142135623730951;
    for (int64_t j = 0; j < n; j += CHUNK) {
        const int c = n - j < CHUNK ? (int)(n - j) : CHUNK;
        LD(dt, a, j, c, va);
        switch (kind) {
        case ACT_SILU_MUL:
            LD(dt, b, j, c, vb);
            for (int i = 0; i < c; i++)
                va[i] = va[i] / ((T)1 + EXP(-va[i])) * vb[i];
            break;
        case ACT_SILU:
            for (int i = 0; i < c; i++)
                va[i] = va[i] / ((T)1 + EXP(-va[i]));
            break;
        /* Both gelu forms as x * (something in (0, 1)) that does not cancel for negative x:
         * 1 + erf(x/sqrt2) = erfc(-x/sqrt2), and (1 + tanh(u)) / 2 = 1 / (1 + exp(-2u)). */
        case ACT_GELU_ERF:
            for (int i = 0; i < c; i++)
                va[i] = (T)0.5 * va[i] * ERFC(-va[i] / sq2);
            break;
        default:
            for (int i = 0; i < c; i++) {
                const T v = va[i];
                va[i] = v / ((T)1 + EXP((T)-2 * k0 * (v + k1 * v * v * v)));
            }
            break;
        }
        ST(dt, y, j, c, va);
    }
}

static void SFX(softmax)(baton_dtype dt, const void *x, void *y, int64_t rows, int64_t N)
{
    T v[CHUNK];
    for (int64_t r = 0; r < rows; r++) {
        const int64_t base = r * N;
        T mx = -INFINITY;
        double sum = 0; /* chunk sums in T, added in double: 128k-wide rows stay accurate */
        for (int64_t j = 0; j < N; j += CHUNK) {
            const int c = N - j < CHUNK ? (int)(N - j) : CHUNK;
            LD(dt, x, base + j, c, v);
            for (int i = 0; i < c; i++)
                mx = v[i] > mx ? v[i] : mx;
        }
        /* A row of -inf only: PyTorch gives NaN; so does exp(-inf - -inf). */
        for (int64_t j = 0; j < N; j += CHUNK) {
            const int c = N - j < CHUNK ? (int)(N - j) : CHUNK;
            LD(dt, x, base + j, c, v);
            T part = 0;
            for (int i = 0; i < c; i++)
                part += EXP(v[i] - mx);
            sum += part;
        }
        const T inv = (T)(1.0 / sum);
        for (int64_t j = 0; j < N; j += CHUNK) {
            const int c = N - j < CHUNK ? (int)(N - j) : CHUNK;
            LD(dt, x, base + j, c, v);
            for (int i = 0; i < c; i++)
                v[i] = EXP(v[i] - mx) * inv;
            ST(dt, y, base + j, c, v);
        }
    }
}
