/* Longformer's local attention band in bf16 on AVX-512 BF16: the one kernel no library provides.

   For every query token i of every (batch, head): softmax over its 2w+1 band keys (positions i-w .. i+w that are
   real local tokens) and the used global slots, then the weighted sum of the values. Scores and softmax in fp32,
   probabilities rounded to bf16 for the second product, as PyTorch's fused CPU attention does. It computes only
   the band (in groups of 32 keys, about 1.06x the needed products), where a fused SDPA call over blocks of w
   queries computes 3w keys per query and builds padded copies of keys, values and the mask first.

   Arguments, layout and status codes: band_attention.h (one struct, shared by every band kernel). q, k, v come
   as the fused projection's split hands them, with any batch, token and head strides. A row with no allowed key
   gets zeros.

   Built at first use by strategies/band_kernel.py (cc -O3 -mavx512bf16 -fopenmp); not a Python extension, called
   through ctypes, parallel over (batch, head) with the OpenMP runtime torch already loaded. */

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "band_attention.h"

typedef uint16_t bf16;

#define ROWS 8        /* query rows per group in the score product */
#define PV_ROWS 4     /* query rows per pass of the value product */
#define COLS 32       /* keys per score micro-tile (two vectors of 16) */

static inline size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

static inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }

/* e^x for x <= 0 (x - max of the row): range reduction to [-ln2/2, ln2/2], degree-6 polynomial, exact scaling. */
static inline __m512 exp_ps(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
    r = _mm512_fnmadd_ps(n, ln2_lo, r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* Keys transposed in pairs of dimensions (the operand layout of vdpbf16ps): kt[p * n + j] holds dimensions 2p and
   2p+1 of key j as one 32-bit word. Rows outside [0, count) are zero. */
static void pack_keys(uint32_t *kt, size_t n, const bf16 *src, int64_t stride, long first, long count, int d) {
    memset(kt, 0, sizeof(uint32_t) * n * (size_t)(d / 2));
    for (long j = 0; j < (long)n; j++) {
        long pos = first + j;
        if (pos < 0 || pos >= count) continue;
        const uint32_t *row = (const uint32_t *)(src + pos * stride);
        for (int p = 0; p < d / 2; p++) kt[(size_t)p * n + j] = row[p];
    }
}

/* Values in pairs of keys: vp[(m * d + c) * 2 + e] is dimension c of key 2m+e. Rows outside [0, count) are zero. */
static void pack_values(bf16 *vp, size_t n, const bf16 *src, int64_t stride, long first, long count, int d) {
    memset(vp, 0, sizeof(bf16) * n * (size_t)d);
    for (long j = 0; j < (long)n; j++) {
        long pos = first + j;
        if (pos < 0 || pos >= count) continue;
        const bf16 *row = src + pos * stride;
        bf16 *dst = vp + (size_t)(j / 2) * d * 2 + (j & 1);
        for (int c = 0; c < d; c++) dst[c * 2] = row[c];
    }
}

/* scores[r][0..32*groups) = scale * q_r . key(col0 + j) for ROWS query rows (pointers in q_rows). */
static inline void score_tile(float *scores, size_t ld, const bf16 *const *q_rows, const uint32_t *kt, size_t n,
                              size_t col0, size_t groups, int d, float scale) {
    const __m512 s = _mm512_set1_ps(scale);
    for (size_t g = 0; g < groups; g++) {
        size_t col = col0 + g * COLS;
        __m512 acc[ROWS][2];
        for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        for (int p = 0; p < d / 2; p++) {
            const uint32_t *b = kt + (size_t)p * n + col;
            __m512bh b0 = as_bh(_mm512_loadu_si512(b)), b1 = as_bh(_mm512_loadu_si512(b + 16));
            for (int r = 0; r < ROWS; r++) {
                __m512bh a = as_bh(_mm512_set1_epi32(((const uint32_t *)q_rows[r])[p]));
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
            }
        }
        for (int r = 0; r < ROWS; r++) {
            _mm512_storeu_ps(scores + r * ld + g * COLS, _mm512_mul_ps(acc[r][0], s));
            _mm512_storeu_ps(scores + r * ld + g * COLS + 16, _mm512_mul_ps(acc[r][1], s));
        }
    }
}

/* out_r += sum over key pairs m of probs_r[m] . values(pair m): PV_ROWS rows, D dimensions (a multiple of 16). */
#define DEFINE_VALUE_TILE(D)                                                                                       \
    static inline void value_tile_##D(__m512 acc[PV_ROWS][D / 16], const uint32_t *const *probs, const bf16 *vp,   \
                                      size_t pairs) {                                                              \
        for (size_t m = 0; m < pairs; m++) {                                                                       \
            __m512bh b[D / 16];                                                                                    \
            for (int c = 0; c < D / 16; c++) b[c] = as_bh(_mm512_loadu_si512(vp + (m * D + c * 16) * 2));         \
            for (int r = 0; r < PV_ROWS; r++) {                                                                    \
                __m512bh a = as_bh(_mm512_set1_epi32(probs[r][m]));                                                \
                for (int c = 0; c < D / 16; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], a, b[c]);                 \
            }                                                                                                      \
        }                                                                                                          \
    }
DEFINE_VALUE_TILE(16)
DEFINE_VALUE_TILE(32)
DEFINE_VALUE_TILE(64)
DEFINE_VALUE_TILE(128)

/* Softmax of one row in place over the entries j that `ok[j]` allows and that lie in [0, n_global) or [lo, hi]:
   probs[j] gets the probability in bf16 (0 where not allowed). Returns 0 (and all zeros) when nothing is allowed. */
static inline int softmax_row(float *scores, const uint8_t *ok, size_t n, long n_global, long lo, long hi,
                              bf16 *probs) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i vglobal = _mm512_set1_epi32((int)n_global), vlo = _mm512_set1_epi32((int)lo),
                  vhi = _mm512_set1_epi32((int)hi);
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (size_t j = 0; j < n; j += 16) {
        __m512i idx = _mm512_add_epi32(iota, _mm512_set1_epi32((int)j));
        __mmask16 in = _mm512_cmplt_epi32_mask(idx, vglobal) |
                       (_mm512_cmpge_epi32_mask(idx, vlo) & _mm512_cmple_epi32_mask(idx, vhi));
        __mmask16 allowed = in & _mm512_test_epi32_mask(
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(ok + j))), _mm512_set1_epi32(0xff));
        __m512 x = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), allowed, _mm512_loadu_ps(scores + j));
        _mm512_storeu_ps(scores + j, x);
        vmax = _mm512_max_ps(vmax, x);
    }
    float max = _mm512_reduce_max_ps(vmax);
    if (max == -INFINITY) {
        memset(probs, 0, n * sizeof(bf16));
        return 0;
    }
    __m512 vm = _mm512_set1_ps(max), vsum = _mm512_setzero_ps();
    for (size_t j = 0; j < n; j += 16) {
        __m512 x = _mm512_loadu_ps(scores + j);
        __mmask16 allowed = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
        x = _mm512_maskz_mov_ps(allowed, exp_ps(_mm512_sub_ps(x, vm)));
        _mm512_storeu_ps(scores + j, x);
        vsum = _mm512_add_ps(vsum, x);
    }
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
    for (size_t j = 0; j < n; j += 16)
        _mm256_storeu_si256((__m256i *)(probs + j),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(scores + j), inv)));
    return 1;
}

#define VALUE_TILE(D, acc, probs, vp, pairs) value_tile_##D(acc, probs, vp, pairs)

/* One (batch, head): pack its keys and values once, then every group of ROWS queries. */
#define DEFINE_HEAD(D)                                                                                             \
    static void head_##D(const bf16 *qh, int64_t q_step, const uint32_t *kt, const bf16 *vpk, size_t n,           \
                         const uint32_t *kgt, const bf16 *vgp, size_t gp, const uint8_t *okp, uint8_t *okrow,     \
                         float *scores, bf16 *probs, size_t width, bf16 *oh, int64_t o_step, long L, long w,      \
                         size_t wp, float scale) {                                                                 \
        for (long i0 = 0; i0 < L; i0 += ROWS) {                                                                    \
            size_t col0 = (size_t)(i0 + (long)wp - w) & ~(size_t)1; /* first band column, even: pairs of keys */ \
            size_t nb = round_up((size_t)(i0 + ROWS + (long)wp + w) - col0, COLS);                                \
            const bf16 *rows[ROWS];                                                                                \
            for (int r = 0; r < ROWS; r++) rows[r] = qh + (i0 + r < L ? i0 + r : L - 1) * q_step;                 \
            if (gp) score_tile(scores, width, rows, kgt, gp, 0, gp / COLS, D, scale);                             \
            score_tile(scores + gp, width, rows, kt, n, col0, nb / COLS, D, scale);                               \
            memcpy(okrow + gp, okp + col0, nb);                                                                    \
            for (int r = 0; r < ROWS; r++) {                                                                       \
                long i = i0 + r;                                                                                   \
                if (i >= L) {                                                                                      \
                    memset(probs + r * width, 0, (gp + nb) * sizeof(bf16));                                        \
                    continue;                                                                                      \
                }                                                                                                  \
                long lo = (long)gp + i + (long)wp - w - (long)col0, hi = lo + 2 * w;                               \
                softmax_row(scores + r * width, okrow, gp + nb, (long)gp, lo, hi, probs + r * width);             \
            }                                                                                                      \
            for (int r0 = 0; r0 < ROWS; r0 += PV_ROWS) {                                                           \
                __m512 acc[PV_ROWS][D / 16];                                                                       \
                const uint32_t *pg[PV_ROWS], *pb[PV_ROWS];                                                         \
                for (int r = 0; r < PV_ROWS; r++) {                                                                \
                    for (int c = 0; c < D / 16; c++) acc[r][c] = _mm512_setzero_ps();                              \
                    pg[r] = (const uint32_t *)(probs + (r0 + r) * width);                                          \
                    pb[r] = (const uint32_t *)(probs + (r0 + r) * width + gp);                                     \
                }                                                                                                  \
                if (gp) VALUE_TILE(D, acc, pg, vgp, gp / 2);                                                       \
                VALUE_TILE(D, acc, pb, vpk + col0 * D, nb / 2);                                                    \
                for (int r = 0; r < PV_ROWS; r++) {                                                                \
                    long i = i0 + r0 + r;                                                                          \
                    if (i >= L) break;                                                                             \
                    for (int c = 0; c < D / 16; c++)                                                               \
                        _mm256_storeu_si256((__m256i *)(oh + i * o_step + c * 16),                                 \
                                            (__m256i)_mm512_cvtneps_pbh(acc[r][c]));                               \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
    }
DEFINE_HEAD(16)
DEFINE_HEAD(32)
DEFINE_HEAD(64)
DEFINE_HEAD(128)

/* The band attention of every (batch, head) (band_attention.h: the arguments, their layout, the status codes). */
int longqa_band_attention_bf16(const longqa_band_args *args) {
    longqa_band_status checked = longqa_band_check(args);
    if (checked != LONGQA_BAND_OK) return checked;
    const bf16 *q = args->q, *k = args->k, *v = args->v, *kg = args->k_global, *vg = args->v_global;
    const int64_t *q_strides = args->q_strides, *k_strides = args->k_strides, *v_strides = args->v_strides;
    const uint8_t *key_ok = args->key_ok, *slot_used = args->slot_used;
    bf16 *out = args->out;
    const int64_t B = args->batch, L = args->length, H = args->heads, d = args->head_dim, w = args->window,
                  G = args->n_global;
    const float scale = args->scale;
    if (d != 16 && d != 32 && d != 64 && d != 128) return LONGQA_BAND_BAD_HEAD_SIZE;
    const size_t wp = round_up((size_t)w, 32); /* zero columns before position 0: column = position + wp */
    const size_t n = round_up(2 * wp + (size_t)L + COLS + ROWS, 32);
    const size_t gp = round_up((size_t)G, COLS);
    const size_t width = gp + round_up(ROWS + 2 * (size_t)w + 1, COLS);
    int failed = 0;
#pragma omp parallel num_threads(args->threads)
    {
        uint32_t *kt = aligned_alloc(64, round_up(n * (size_t)d * 2, 64));
        bf16 *vpk = aligned_alloc(64, round_up(n * (size_t)d * 2, 64));
        uint32_t *kgt = aligned_alloc(64, round_up(gp * (size_t)d * 2 + 64, 64));
        bf16 *vgp = aligned_alloc(64, round_up(gp * (size_t)d * 2 + 64, 64));
        float *scores = aligned_alloc(64, round_up(ROWS * width * sizeof(float), 64));
        bf16 *probs = aligned_alloc(64, round_up(ROWS * width * sizeof(bf16), 64));
        uint8_t *okp = aligned_alloc(64, round_up(n + 64, 64));
        uint8_t *okrow = aligned_alloc(64, round_up(width + 64, 64));
        int ready = kt && vpk && kgt && vgp && scores && probs && okp && okrow;
        if (!ready) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < B * H; bh++) {
            if (!ready) continue;
            const int64_t b = bh / H, h = bh % H;
            pack_keys(kt, n, k + b * k_strides[0] + h * k_strides[2], k_strides[1], -(long)wp, (long)L, (int)d);
            pack_values(vpk, n, v + b * v_strides[0] + h * v_strides[2], v_strides[1], -(long)wp, (long)L, (int)d);
            if (gp) {
                pack_keys(kgt, gp, kg + (b * H + h) * G * d, d, 0, (long)G, (int)d);
                pack_values(vgp, gp, vg + (b * H + h) * G * d, d, 0, (long)G, (int)d);
            }
            memset(okp, 0, n);
            memcpy(okp + wp, key_ok + b * L, (size_t)L);
            for (size_t g = 0; g < gp; g++) okrow[g] = (int64_t)g < G ? slot_used[b * G + (int64_t)g] : 0;
            const bf16 *qh = q + b * q_strides[0] + h * q_strides[2];
            bf16 *oh = out + (b * L * H + h) * d;
            if (d == 16)
                head_16(qh, q_strides[1], kt, vpk, n, kgt, vgp, gp, okp, okrow, scores, probs, width, oh, H * d,
                        (long)L, (long)w, wp, scale);
            else if (d == 32)
                head_32(qh, q_strides[1], kt, vpk, n, kgt, vgp, gp, okp, okrow, scores, probs, width, oh, H * d,
                        (long)L, (long)w, wp, scale);
            else if (d == 64)
                head_64(qh, q_strides[1], kt, vpk, n, kgt, vgp, gp, okp, okrow, scores, probs, width, oh, H * d,
                        (long)L, (long)w, wp, scale);
            else
                head_128(qh, q_strides[1], kt, vpk, n, kgt, vgp, gp, okp, okrow, scores, probs, width, oh, H * d,
                         (long)L, (long)w, wp, scale);
        }
        free(kt); free(vpk); free(kgt); free(vgp); free(scores); free(probs); free(okp); free(okrow);
    }
    return failed ? LONGQA_BAND_OUT_OF_MEMORY : LONGQA_BAND_OK;
}
