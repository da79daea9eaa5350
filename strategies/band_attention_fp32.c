/* Longformer's local attention band in fp32 on AVX2 + FMA: band_attention.c's twin for the CPUs without native
   bf16, where the `cpu` profile runs int8 Linear layers and keeps the attention in fp32.

   Same contract as band_attention.c: the arguments, layout and status codes of band_attention.h, in fp32. Scores,
   softmax and the weighted sum all in fp32. Keys are transposed once per (batch, head) so that 16 keys' scores are
   two vector registers; values are read in place.

   Built at first use by strategies/band_kernel.py (cc -O3 -mavx2 -mfma -fopenmp), called through ctypes. */

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "band_attention.h"

#define ROWS 6     /* query rows per group in the score product (12 accumulators of the 16 registers) */
#define COLS 16    /* keys per score micro-tile (two vectors of 8) */
#define PV_ROWS 2  /* query rows per pass of the value product */

static inline size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* e^x for x <= 0: range reduction to [-ln2/2, ln2/2], degree-6 polynomial, the power of two built bitwise. */
static inline __m256 exp_ps(__m256 x) {
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
    r = _mm256_fnmadd_ps(n, ln2_lo, r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i power = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(power));
}

static inline float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* Keys transposed: kt[p * n + j] is dimension p of key (first + j); keys outside [0, count) are zero. */
static void pack_keys(float *kt, size_t n, const float *src, int64_t stride, long first, long count, int d) {
    memset(kt, 0, sizeof(float) * n * (size_t)d);
    for (long j = 0; j < (long)n; j++) {
        long pos = first + j;
        if (pos < 0 || pos >= count) continue;
        const float *row = src + pos * stride;
        for (int p = 0; p < d; p++) kt[(size_t)p * n + j] = row[p];
    }
}

/* scores[r][0..16*groups) = scale * q_r . key(col0 + j) for ROWS query rows. */
static inline void score_tile(float *scores, size_t ld, const float *const *q_rows, const float *kt, size_t n,
                              size_t col0, size_t groups, int d, float scale) {
    const __m256 s = _mm256_set1_ps(scale);
    for (size_t g = 0; g < groups; g++) {
        size_t col = col0 + g * COLS;
        __m256 acc[ROWS][2];
        for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        for (int p = 0; p < d; p++) {
            const float *b = kt + (size_t)p * n + col;
            __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
            for (int r = 0; r < ROWS; r++) {
                __m256 a = _mm256_broadcast_ss(q_rows[r] + p);
                acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
            }
        }
        for (int r = 0; r < ROWS; r++) {
            _mm256_storeu_ps(scores + r * ld + g * COLS, _mm256_mul_ps(acc[r][0], s));
            _mm256_storeu_ps(scores + r * ld + g * COLS + 8, _mm256_mul_ps(acc[r][1], s));
        }
    }
}

/* Softmax of one row in place over the entries j that `ok[j]` allows and that lie in [0, n_global) or [lo, hi];
   the others become 0. Returns 0 (and all zeros) when nothing is allowed. */
static inline int softmax_row(float *scores, const uint8_t *ok, size_t n, long n_global, long lo, long hi) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i vglobal = _mm256_set1_epi32((int)n_global), vlo = _mm256_set1_epi32((int)lo - 1),
                  vhi = _mm256_set1_epi32((int)hi + 1);
    const __m256 minus_inf = _mm256_set1_ps(-INFINITY);
    __m256 vmax = minus_inf;
    for (size_t j = 0; j < n; j += 8) {
        __m256i idx = _mm256_add_epi32(iota, _mm256_set1_epi32((int)j));
        __m256i in = _mm256_or_si256(_mm256_cmpgt_epi32(vglobal, idx),
                                     _mm256_and_si256(_mm256_cmpgt_epi32(idx, vlo), _mm256_cmpgt_epi32(vhi, idx)));
        __m256i flags = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ok + j)));
        __m256i allowed = _mm256_andnot_si256(_mm256_cmpeq_epi32(flags, _mm256_setzero_si256()), in);
        __m256 x = _mm256_blendv_ps(minus_inf, _mm256_loadu_ps(scores + j), _mm256_castsi256_ps(allowed));
        _mm256_storeu_ps(scores + j, x);
        vmax = _mm256_max_ps(vmax, x);
    }
    float max = hmax(vmax);
    if (max == -INFINITY) {
        memset(scores, 0, n * sizeof(float));
        return 0;
    }
    __m256 vm = _mm256_set1_ps(max), vsum = _mm256_setzero_ps();
    for (size_t j = 0; j < n; j += 8) {
        __m256 x = _mm256_loadu_ps(scores + j);
        __m256 allowed = _mm256_cmp_ps(x, minus_inf, _CMP_NEQ_OQ);
        x = _mm256_and_ps(allowed, exp_ps(_mm256_sub_ps(x, vm)));
        _mm256_storeu_ps(scores + j, x);
        vsum = _mm256_add_ps(vsum, x);
    }
    __m256 inv = _mm256_set1_ps(1.0f / hsum(vsum));
    for (size_t j = 0; j < n; j += 8) _mm256_storeu_ps(scores + j, _mm256_mul_ps(_mm256_loadu_ps(scores + j), inv));
    return 1;
}

/* acc_r += sum over keys m in [0, count) of probs_r[m] . values(m) for PV_ROWS rows, CH vectors of dimensions. */
#define DEFINE_VALUE_TILE(CH)                                                                                      \
    static inline void value_tile_##CH(__m256 acc[PV_ROWS][CH], const float *const *probs, const float *values,  \
                                       int64_t stride, long count) {                                               \
        for (long m = 0; m < count; m++) {                                                                         \
            __m256 b[CH];                                                                                          \
            for (int c = 0; c < CH; c++) b[c] = _mm256_loadu_ps(values + m * stride + c * 8);                      \
            for (int r = 0; r < PV_ROWS; r++) {                                                                    \
                __m256 a = _mm256_broadcast_ss(probs[r] + m);                                                      \
                for (int c = 0; c < CH; c++) acc[r][c] = _mm256_fmadd_ps(a, b[c], acc[r][c]);                      \
            }                                                                                                      \
        }                                                                                                          \
    }
DEFINE_VALUE_TILE(1)
DEFINE_VALUE_TILE(2)
DEFINE_VALUE_TILE(4)

/* The value product of one group of ROWS rows, in chunks of CH vectors of the head's dimensions. */
#define DEFINE_VALUES(CH)                                                                                          \
    static void values_##CH(const float *probs, size_t width, size_t gp, long G, const float *vg_head,            \
                            const float *v_head, int64_t v_step, long first, long count, long band_offset,         \
                            float *oh, int64_t o_step, long i0, long L, int d) {                                   \
        for (int r0 = 0; r0 < ROWS; r0 += PV_ROWS) {                                                               \
            const float *pg[PV_ROWS], *pb[PV_ROWS];                                                                \
            for (int r = 0; r < PV_ROWS; r++) {                                                                    \
                pg[r] = probs + (r0 + r) * width;                                                                  \
                pb[r] = probs + (r0 + r) * width + gp + band_offset;                                               \
            }                                                                                                      \
            for (int c0 = 0; c0 < d; c0 += CH * 8) {                                                               \
                __m256 acc[PV_ROWS][CH];                                                                           \
                for (int r = 0; r < PV_ROWS; r++)                                                                  \
                    for (int c = 0; c < CH; c++) acc[r][c] = _mm256_setzero_ps();                                  \
                if (G) value_tile_##CH(acc, pg, vg_head + c0, d, G);                                               \
                value_tile_##CH(acc, pb, v_head + first * v_step + c0, v_step, count);                             \
                for (int r = 0; r < PV_ROWS; r++) {                                                                \
                    long i = i0 + r0 + r;                                                                          \
                    if (i >= L) break;                                                                             \
                    for (int c = 0; c < CH; c++) _mm256_storeu_ps(oh + i * o_step + c0 + c * 8, acc[r][c]);       \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
    }
DEFINE_VALUES(1)
DEFINE_VALUES(2)
DEFINE_VALUES(4)

/* The band attention of every (batch, head) in fp32 (band_attention.h: the arguments, their layout, the status
   codes); head sizes that are multiples of 8. */
int longqa_band_attention_fp32(const longqa_band_args *args) {
    longqa_band_status checked = longqa_band_check(args);
    if (checked != LONGQA_BAND_OK) return checked;
    const float *q = args->q, *k = args->k, *v = args->v, *kg = args->k_global, *vg = args->v_global;
    const int64_t *q_strides = args->q_strides, *k_strides = args->k_strides, *v_strides = args->v_strides;
    const uint8_t *key_ok = args->key_ok, *slot_used = args->slot_used;
    float *out = args->out;
    const int64_t B = args->batch, L = args->length, H = args->heads, d = args->head_dim, w = args->window,
                  G = args->n_global;
    const float scale = args->scale;
    if (d % 8 != 0 || d <= 0) return LONGQA_BAND_BAD_HEAD_SIZE;
    const size_t wp = round_up((size_t)w, COLS); /* zero columns before position 0: column = position + wp */
    const size_t n = round_up(2 * wp + (size_t)L + COLS + ROWS, COLS);
    const size_t gp = round_up((size_t)G, COLS);
    const size_t width = gp + round_up(ROWS + 2 * (size_t)w + 1, COLS) + COLS;
    int failed = 0;
#pragma omp parallel num_threads(args->threads)
    {
        float *kt = aligned_alloc(64, round_up(n * (size_t)d * sizeof(float), 64));
        float *kgt = aligned_alloc(64, round_up(gp * (size_t)d * sizeof(float) + 64, 64));
        float *scores = aligned_alloc(64, round_up(ROWS * width * sizeof(float), 64));
        uint8_t *okp = aligned_alloc(64, round_up(n + 64, 64));
        uint8_t *okrow = aligned_alloc(64, round_up(width + 64, 64));
        int ready = kt && kgt && scores && okp && okrow;
        if (!ready) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < B * H; bh++) {
            if (!ready) continue;
            const int64_t b = bh / H, h = bh % H;
            const float *k_head = k + b * k_strides[0] + h * k_strides[2];
            const float *v_head = v + b * v_strides[0] + h * v_strides[2];
            const float *q_head = q + b * q_strides[0] + h * q_strides[2];
            const float *vg_head = vg + (b * H + h) * G * d;
            float *oh = out + (b * L * H + h) * d;
            pack_keys(kt, n, k_head, k_strides[1], -(long)wp, (long)L, (int)d);
            if (gp) pack_keys(kgt, gp, kg + (b * H + h) * G * d, d, 0, (long)G, (int)d);
            memset(okp, 0, n);
            memcpy(okp + wp, key_ok + b * L, (size_t)L);
            for (size_t g = 0; g < gp; g++) okrow[g] = (int64_t)g < G ? slot_used[b * G + (int64_t)g] : 0;
            for (long i0 = 0; i0 < L; i0 += ROWS) {
                size_t col0 = (size_t)(i0 + (long)wp - w); /* first band column of the group */
                size_t nb = round_up((size_t)(ROWS + 2 * w), COLS);
                const float *rows[ROWS];
                for (int r = 0; r < ROWS; r++) rows[r] = q_head + (i0 + r < L ? i0 + r : L - 1) * q_strides[1];
                if (gp) score_tile(scores, width, rows, kgt, gp, 0, gp / COLS, (int)d, scale);
                score_tile(scores + gp, width, rows, kt, n, col0, nb / COLS, (int)d, scale);
                memcpy(okrow + gp, okp + col0, nb);
                for (int r = 0; r < ROWS; r++) {
                    long i = i0 + r;
                    if (i >= L) {
                        memset(scores + r * width, 0, (gp + nb) * sizeof(float));
                        continue;
                    }
                    long lo = (long)gp + i + (long)wp - w - (long)col0;
                    softmax_row(scores + r * width, okrow, gp + nb, (long)gp, lo, lo + 2 * w);
                }
                /* the group's keys that exist: positions [first, first + count) */
                long first = (long)col0 - (long)wp, last = first + (long)nb;
                long band_offset = 0;
                if (first < 0) {
                    band_offset = -first;
                    first = 0;
                }
                if (last > L) last = L;
                long count = last > first ? last - first : 0;
                if (d % 32 == 0)
                    values_4(scores, width, gp, (long)G, vg_head, v_head, v_strides[1], first, count, band_offset, oh,
                             H * d, i0, (long)L, (int)d);
                else if (d % 16 == 0)
                    values_2(scores, width, gp, (long)G, vg_head, v_head, v_strides[1], first, count, band_offset, oh,
                             H * d, i0, (long)L, (int)d);
                else
                    values_1(scores, width, gp, (long)G, vg_head, v_head, v_strides[1], first, count, band_offset, oh,
                             H * d, i0, (long)L, (int)d);
            }
        }
        free(kt); free(kgt); free(scores); free(okp); free(okrow);
    }
    return failed ? LONGQA_BAND_OUT_OF_MEMORY : LONGQA_BAND_OK;
}
