/* Longformer's local attention band in bf16 on AMX tiles (Intel Sapphire Rapids and later: amx_tile, amx_bf16).

   Same arithmetic as band_attention.c (the AVX-512 BF16 kernel), with both products on AMX tiles: for every query
   token i of every (batch, head), softmax over its 2w+1 band keys (positions i-w .. i+w that are real local tokens)
   and the used global slots, then the weighted sum of the values. Scores and softmax in fp32; the softmax's
   numerators e^(s - max) rounded to bf16 for the second product, values summed in fp32 and divided by the fp32 sum
   of the numerators at the end, as PyTorch's fused CPU attention does (band_attention.c rounds the normalized
   probabilities instead: the two differ by bf16 rounding); the output rounded to bf16. Queries go in groups of 32
   (two tiles' rows) against the group's band of 32 + 2w keys rounded up to 32 (at w = 256, 544 keys for each query's
   513: 1.06x the needed products, as groups of 16 did; those loaded every key and value tile for 16 queries only,
   6 % slower in all).

   Tiles: scores C[16 x 16] += Q[16 x 32 dims] . K^T[32 dims x 16 keys] (tdpbf16ps), keys packed per 16-key tile in
   pairs of dimensions; outputs C[16 x 16 dims] += P[16 x 32 keys] . V[32 keys x 16 dims], values packed in pairs of
   keys; each key or value tile loaded serves both halves of the group. The softmax between the two products runs on
   AVX-512, a row at a time. (The tile unit and the vector units did not overlap here: interleaving the next group's
   score tiles with this group's softmax rows took as long as running them one after the other.)

   Arguments, layout and status codes: band_attention.h (the struct every band kernel takes). A row with no allowed
   key gets zeros.

   Linux gives a process the tile state only on request: longqa_amx_request() asks (arch_prctl ARCH_REQ_XCOMP_PERM
   for XTILEDATA) and must succeed before the first call. Built at first use by strategies/band_kernel.py
   (cc -O3 -mamx-tile -mamx-bf16 -mavx512bf16 -mavx512dq -fopenmp: vreduceps is AVX512DQ); called through ctypes,
   parallel over (batch, head) with the OpenMP runtime torch already loaded; each thread loads its own tile
   configuration (tile state is per thread). */

#include <errno.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "band_attention.h"

typedef uint16_t bf16;

#define ROWS 16       /* query rows of one tile */
#define GROUP 32      /* query rows per group: two tiles' rows */
#define KEYS 32       /* keys per step of the value product (one A tile of bf16) */
#define TILE_COLS 16  /* fp32 columns of an accumulator tile */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static inline size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* 0 when the process may use the AMX tile data (asked for now if not yet), else the errno of the refusal. */
int longqa_amx_request(void) {
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return errno ? errno : -1;
    return 0;
}

typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Every tile 16 rows x 64 bytes: 0-3 fp32 accumulators (16 x 16: two row halves by two column tiles), 4-5 left
   operands (16 rows x 32 bf16: queries or probabilities of the two row halves), 6-7 right operands (16 pair rows x 16
   words: keys or values of two column tiles). */
static void load_tiles(void) {
    tile_config config;
    memset(&config, 0, sizeof config);
    config.palette_id = 1;
    for (int t = 0; t < 8; t++) config.rows[t] = 16, config.colsb[t] = 64;
    _tile_loadconfig(&config);
}

/* 2^x for x <= 0 in the lanes `keep` holds, 0 in the others (whatever x is there): x = floor(x) + f, f in [0, 1)
   (vreduceps, one instruction), a degree-3 polynomial for 2^f (fitted for relative error: under 7.5e-5, against the
   2e-3 of the bf16 rounding that follows; degree 5 cost two more multiply-adds on every score for 3e-6), and the
   exact scaling by 2^floor(x) that vscalefps does itself. */
static inline __m512 exp2_ps(__m512 x, __mmask16 keep) {
    __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); /* x - floor(x), in [0, 1) */
    __m512 p = _mm512_set1_ps(7.8024192438e-2f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.2606720858e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9583374337e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.9992517232e-1f));
    return _mm512_maskz_scalef_ps(keep, p, x); /* p * 2^floor(x); 0 where not kept */
}

/* A 16 x 16 matrix of 32-bit words transposed in registers: rows[i] becomes column i. */
static inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

/* Keys in tiles of 16: kt[((j / 16) * (dp / 2) + p) * 16 + j % 16] holds dimensions 2p and 2p+1 of key j as one
   32-bit word, so the operand of one tile product is 64-byte rows, contiguous; dp = d rounded up to 32, the pairs
   past d zero. Rows outside [0, count): zero. */
static void pack_keys(uint32_t *kt, size_t n, const bf16 *src, int64_t stride, long first, long count, int d,
                      int dp) {
    const int pairs = d / 2, padded = dp / 2;
    for (size_t t = 0; t < n / 16; t++) {
        uint32_t *tile = kt + t * (size_t)padded * 16;
        const uint32_t *rows[16];
        for (int j = 0; j < 16; j++) {
            long pos = first + (long)(t * 16) + j;
            rows[j] = pos >= 0 && pos < count ? (const uint32_t *)(src + pos * stride) : NULL;
        }
        if (pairs % 16 == 0) {  /* 16 pairs of dimensions of 16 keys at a time, transposed in registers */
            for (int p0 = 0; p0 < pairs; p0 += 16) {
                __m512i r[16];
                for (int j = 0; j < 16; j++)
                    r[j] = rows[j] ? _mm512_loadu_si512(rows[j] + p0) : _mm512_setzero_si512();
                transpose16(r);
                for (int p = 0; p < 16; p++) _mm512_store_si512(tile + (p0 + p) * 16, r[p]);
            }
            continue;
        }
        for (int j = 0; j < 16; j++)
            for (int p = 0; p < padded; p++) tile[p * 16 + j] = rows[j] && p < pairs ? rows[j][p] : 0;
    }
}

/* Values in pairs of keys: vp[(m * d + c) * 2 + e] is dimension c of key 2m+e. Rows outside [0, count) are zero. */
static void pack_values(bf16 *vp, size_t n, const bf16 *src, int64_t stride, long first, long count, int d) {
    for (size_t m = 0; m < n / 2; m++) {
        long pos = first + (long)(2 * m);
        const bf16 *r0 = pos >= 0 && pos < count ? src + pos * stride : NULL;
        const bf16 *r1 = pos + 1 >= 0 && pos + 1 < count ? src + (pos + 1) * stride : NULL;
        bf16 *dst = vp + m * (size_t)d * 2;
        if (d % 16 == 0 && r0 && r1) {  /* interleave two rows 16 dimensions at a time */
            static const uint16_t order[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                               8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
            const __m512i index = _mm512_loadu_si512(order);
            for (int c = 0; c < d; c += 16) {
                __m512i a = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(r0 + c)));
                __m512i b = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(r1 + c)));
                _mm512_storeu_si512(dst + c * 2, _mm512_permutex2var_epi16(a, index, b));
            }
            continue;
        }
        for (int c = 0; c < d; c++) {
            dst[c * 2] = r0 ? r0[c] : 0;
            dst[c * 2 + 1] = r1 ? r1[c] : 0;
        }
    }
}

/* scores[r][c] = q_r . key(c) (unscaled) for the 32 rows of qbuf (32 x dp bf16, dp = d rounded up to 32, zero
   padded) and `cols` keys (a multiple of 32) of kt (tiled as pack_keys leaves it, dp / 2 pairs per key), starting at
   key col0 (a multiple of 16); ld: the row stride of scores. Per 32 keys, 4 accumulator tiles (two row halves by two
   key tiles): each key tile loaded once serves both halves. */
static void score_tiles(float *scores, size_t ld, const bf16 *qbuf, const uint32_t *kt, size_t col0, size_t cols,
                        int dp) {
    const size_t pairs = (size_t)dp / 2;
    const int chunks = dp / 32, resident = chunks == 1; /* one chunk: the queries stay in tiles 4-5 */
    if (resident) {
        _tile_loadd(4, qbuf, dp * 2);
        _tile_loadd(5, qbuf + ROWS * dp, dp * 2);
    }
#define KEYS_TILE(t, chunk) (kt + (((col0 + c) / 16 + (t)) * pairs + (size_t)(chunk) * 16) * 16)
    for (size_t c = 0; c < cols; c += 2 * TILE_COLS) {
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        for (int k = 0; k < chunks; k++) {
            if (!resident) {
                _tile_loadd(4, qbuf + k * 32, dp * 2);
                _tile_loadd(5, qbuf + ROWS * dp + k * 32, dp * 2);
            }
            _tile_loadd(6, KEYS_TILE(0, k), 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, KEYS_TILE(1, k), 64);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        float *dst = scores + c;
        _tile_stored(0, dst, ld * 4);
        _tile_stored(1, dst + TILE_COLS, ld * 4);
        _tile_stored(2, dst + ROWS * ld, ld * 4);
        _tile_stored(3, dst + ROWS * ld + TILE_COLS, ld * 4);
    }
#undef KEYS_TILE
}

/* obuf[r][c] (+)= sum over keys of probs[r][key] . value(key)[c] for the 32 rows of probs (row stride ld) and `keys`
   keys (a multiple of 32) of vp (pairs of keys, as pack_values leaves it, d dimensions) from key first_key (even);
   accumulating onto obuf (32 x d fp32) when `accumulate`. 32 dimensions at a time, 4 accumulator tiles (two row
   halves by two dimension tiles): each value tile loaded once serves both halves. */
static void value_tiles(float *obuf, const bf16 *probs, size_t ld, const bf16 *vp, size_t first_key, size_t keys,
                        int d, int accumulate) {
    for (int c0 = 0; c0 < d; c0 += 2 * TILE_COLS) {
        const int two = d - c0 >= 2 * TILE_COLS;
        float *o = obuf + c0;
        if (accumulate) {
            _tile_loadd(0, o, d * 4);
            _tile_loadd(2, o + ROWS * d, d * 4);
            if (two) { _tile_loadd(1, o + TILE_COLS, d * 4); _tile_loadd(3, o + ROWS * d + TILE_COLS, d * 4); }
        } else {
            _tile_zero(0); _tile_zero(2);
            if (two) { _tile_zero(1); _tile_zero(3); }
        }
#define VALUES_TILE(t) (vp + ((first_key + j) / 2 * (size_t)d + (size_t)(c0 + (t) * TILE_COLS)) * 2)
        for (size_t j = 0; j < keys; j += KEYS) {
            _tile_loadd(4, probs + j, ld * 2);
            _tile_loadd(5, probs + ROWS * ld + j, ld * 2);
            _tile_loadd(6, VALUES_TILE(0), d * 4);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(2, 5, 6);
            if (two) {
                _tile_loadd(7, VALUES_TILE(1), d * 4);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
#undef VALUES_TILE
        _tile_stored(0, o, d * 4);
        _tile_stored(2, o + ROWS * d, d * 4);
        if (two) { _tile_stored(1, o + TILE_COLS, d * 4); _tile_stored(3, o + ROWS * d + TILE_COLS, d * 4); }
    }
}

/* The allowed columns of the 16-column vector starting at column j: those `bits` permits, within [lo, hi]. */
static inline __mmask16 band_mask(uint16_t bits, long j, long lo, long hi) {
    uint32_t in = 0xffff;
    if (lo > j) in = lo - j >= 16 ? 0 : in << (lo - j);
    if (hi < j + 15) in &= hi < j ? 0 : 0xffffu >> (15 - (hi - j));
    return (__mmask16)(in & bits);
}

/* Softmax numerators of one row of `scale` * scores over the columns j < n (n a multiple of 16) that `bits` (one per
   column) allows and that lie in [0, n_global) or [lo, hi]: probs[j] = e^(scale * (s_j - max)) rounded to bf16, 0
   elsewhere (all n columns written). Returns 1 / the fp32 sum of the numerators (before rounding), as PyTorch's fused
   CPU attention divides the output by it; 0 when nothing is allowed (a row of zeros). Only the vectors holding
   [lo, hi] are read from the band; the masks of the first and last of them are cut to [lo, hi], those between are
   the bits alone; the vectors around them get zeros. Two accumulators of the maximum and the sum, so the
   instructions do not wait on each other. */
static inline float softmax_row(const float *scores, const uint16_t *bits, size_t n, long n_global, long lo, long hi,
                                float scale, bf16 *probs) {
    const long band0 = lo & ~15L, band_last = hi & ~15L; /* first and last vectors of the band */
    const __mmask16 first = band_mask(bits[band0 / 16], band0, lo, hi);
    const __mmask16 last = band_last > band0 ? band_mask(bits[band_last / 16], band_last, lo, hi) : 0;
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    for (long j = 0; j < n_global; j += 16)
        m0 = _mm512_mask_max_ps(m0, (__mmask16)bits[j / 16], m0, _mm512_loadu_ps(scores + j));
    m1 = _mm512_mask_max_ps(m1, first, m1, _mm512_loadu_ps(scores + band0));
    m0 = _mm512_mask_max_ps(m0, last, m0, _mm512_loadu_ps(scores + band_last));
    long j = band0 + 16;
    for (; j + 16 < band_last; j += 32) {
        m0 = _mm512_mask_max_ps(m0, (__mmask16)bits[j / 16], m0, _mm512_loadu_ps(scores + j));
        m1 = _mm512_mask_max_ps(m1, (__mmask16)bits[j / 16 + 1], m1, _mm512_loadu_ps(scores + j + 16));
    }
    if (j < band_last) m0 = _mm512_mask_max_ps(m0, (__mmask16)bits[j / 16], m0, _mm512_loadu_ps(scores + j));
    const float max = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
    if (max == -INFINITY) {
        memset(probs, 0, n * sizeof(bf16));
        return 0.0f;
    }
    const float c = scale * 1.44269504088896341f; /* e^(scale * y) = 2^(c * y) */
    const __m512 vc = _mm512_set1_ps(c), vcmax = _mm512_set1_ps(c * max);
    const __m256i zero = _mm256_setzero_si256(); /* the columns around the band: 0 (a vector or two each side) */
    for (long z = n_global; z < band0; z += 16) _mm256_storeu_si256((__m256i *)(probs + z), zero);
    for (long z = band_last + 16; z < (long)n; z += 16) _mm256_storeu_si256((__m256i *)(probs + z), zero);
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
#define EXP_AT(j, mask, sum)                                                                                        \
    do {                                                                                                            \
        __m512 e = exp2_ps(_mm512_fmsub_ps(_mm512_loadu_ps(scores + (j)), vc, vcmax), mask);                         \
        sum = _mm512_add_ps(sum, e);                                                                                \
        _mm256_storeu_si256((__m256i *)(probs + (j)), (__m256i)_mm512_cvtneps_pbh(e));                              \
    } while (0)
    for (long g = 0; g < n_global; g += 16) EXP_AT(g, (__mmask16)bits[g / 16], s0);
    EXP_AT(band0, first, s1);
    j = band0 + 16;
    for (; j + 16 < band_last; j += 32) { /* two vectors rounded to bf16 by one instruction */
        __m512 e0 = exp2_ps(_mm512_fmsub_ps(_mm512_loadu_ps(scores + j), vc, vcmax), (__mmask16)bits[j / 16]);
        __m512 e1 = exp2_ps(_mm512_fmsub_ps(_mm512_loadu_ps(scores + j + 16), vc, vcmax),
                            (__mmask16)bits[j / 16 + 1]);
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
        _mm512_storeu_si512((__m512i *)(probs + j), (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
    }
    if (j < band_last) EXP_AT(j, (__mmask16)bits[j / 16], s0);
    if (band_last > band0) EXP_AT(band_last, last, s1);
#undef EXP_AT
    return 1.0f / _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* One (batch, head): keys and values packed once, then every group of 32 queries. */
static void head(const bf16 *qh, int64_t q_step, const uint32_t *kt, const bf16 *vpk, const uint32_t *kgt,
                 const bf16 *vgp, size_t gp, const uint16_t *okbits, bf16 *qbuf, float *scores, bf16 *probs,
                 float *obuf, uint16_t *bits, size_t width, bf16 *oh, int64_t o_step, long L, long w, size_t wp, int d, int dp, float scale) {
    for (long i0 = 0; i0 < L; i0 += GROUP) {
        const size_t col0 = (size_t)(i0 + (long)wp - w) & ~(size_t)15; /* first band column, a tile's first key */
        const size_t nb = round_up((size_t)(i0 + GROUP + (long)wp + w) - col0, KEYS);
        for (int r = 0; r < GROUP; r++) memcpy(qbuf + r * dp, qh + (i0 + r < L ? i0 + r : L - 1) * q_step, d * 2);
        if (gp) score_tiles(scores, width, qbuf, kgt, 0, gp, dp);
        score_tiles(scores + gp, width, qbuf, kt, col0, nb, dp);
        /* the row's allowed bits: the global slots', then the band's from col0 (a multiple of 16) */
        memcpy(bits, okbits, gp / 16 * sizeof(uint16_t));
        memcpy(bits + gp / 16, okbits + gp / 16 + col0 / 16, nb / 16 * sizeof(uint16_t));
        float inverse_sum[GROUP];
        for (int r = 0; r < GROUP; r++) {
            long i = i0 + r;
            if (i >= L) {
                memset(probs + r * width, 0, (gp + nb) * sizeof(bf16));
                inverse_sum[r] = 0.0f;
                continue;
            }
            long lo = (long)gp + i + (long)wp - w - (long)col0, hi = lo + 2 * w;
            inverse_sum[r] = softmax_row(scores + r * width, bits, gp + nb, (long)gp, lo, hi, scale,
                                         probs + r * width);
        }
        if (gp) value_tiles(obuf, probs, width, vgp, 0, gp, d, 0);
        value_tiles(obuf, probs + gp, width, vpk, col0, nb, d, gp != 0);
        for (int r = 0; r < GROUP && i0 + r < L; r++) {
            const __m512 inverse = _mm512_set1_ps(inverse_sum[r]);
            for (int c = 0; c < d; c += 16)
                _mm256_storeu_si256((__m256i *)(oh + (i0 + r) * o_step + c),
                                    (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(obuf + r * d + c),
                                                                              inverse)));
        }
    }
}

/* One bit per column of a batch row: the global slots used (gp columns, G of them real), then the local keys (n
   columns, column = position + wp). */
static void row_bits(uint16_t *okbits, size_t gp, size_t n, size_t wp, int64_t G, int64_t L, const uint8_t *slot_used,
                     const uint8_t *key_ok) {
    for (size_t t = 0; t < (gp + n) / 16; t++) {
        uint16_t bits = 0;
        for (int j = 0; j < 16; j++) {
            size_t col = t * 16 + (size_t)j;
            int ok;
            if (col < gp) ok = (int64_t)col < G && slot_used[col];
            else {
                long pos = (long)(col - gp) - (long)wp;
                ok = pos >= 0 && pos < (long)L && key_ok[pos];
            }
            bits |= (uint16_t)(ok ? 1u << j : 0u);
        }
        okbits[t] = bits;
    }
}

/* The band attention of every (batch, head) (band_attention.h: the arguments, their layout, the status codes).
   longqa_amx_request() must have returned 0 in this process first. */
int longqa_band_attention_amx_bf16(const longqa_band_args *args) {
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
    const size_t n = round_up(2 * wp + (size_t)L + KEYS + GROUP, 32);
    const size_t gp = round_up((size_t)G, KEYS);
    const int dp = d < 32 ? 32 : (int)d; /* the queries' and keys' dimensions as the tiles hold them, zero padded */
    const size_t width = gp + round_up(GROUP + 2 * (size_t)w + 1 + 15, KEYS) + KEYS;
    int failed = 0;
#pragma omp parallel num_threads(args->threads)
    {
        uint32_t *kt = aligned_alloc(64, round_up(n * (size_t)dp * 2, 64));
        bf16 *vpk = aligned_alloc(64, round_up(n * (size_t)d * 2, 64));
        uint32_t *kgt = aligned_alloc(64, round_up(gp * (size_t)dp * 2 + 64, 64));
        bf16 *vgp = aligned_alloc(64, round_up(gp * (size_t)d * 2 + 64, 64));
        uint16_t *okbits = aligned_alloc(64, round_up((gp + n) / 16 * sizeof(uint16_t) + 64, 64));
        bf16 *qbuf = aligned_alloc(64, round_up(GROUP * (size_t)dp * 2, 64));
        float *scores = aligned_alloc(64, round_up(GROUP * width * sizeof(float), 64));
        bf16 *probs = aligned_alloc(64, round_up(GROUP * width * sizeof(bf16), 64));
        float *obuf = aligned_alloc(64, round_up(GROUP * (size_t)d * sizeof(float), 64));
        uint16_t *bits = aligned_alloc(64, round_up(width / 16 * sizeof(uint16_t), 64));
        int ready = kt && vpk && kgt && vgp && okbits && qbuf && scores && probs && obuf && bits;
        if (!ready) {
#pragma omp atomic write
            failed = 1;
        }
        if (ready) {
            load_tiles();
            memset(qbuf, 0, GROUP * (size_t)dp * 2); /* the padding past d stays zero */
        }
        int64_t bits_row = -1; /* the row okbits holds */
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < B * H; bh++) {
            if (!ready) continue;
            const int64_t b = bh / H, h = bh % H;
            pack_keys(kt, n, k + b * k_strides[0] + h * k_strides[2], k_strides[1], -(long)wp, (long)L, (int)d, dp);
            pack_values(vpk, n, v + b * v_strides[0] + h * v_strides[2], v_strides[1], -(long)wp, (long)L, (int)d);
            if (gp) {
                pack_keys(kgt, gp, kg + (b * H + h) * G * d, d, 0, (long)G, (int)d, dp);
                pack_values(vgp, gp, vg + (b * H + h) * G * d, d, 0, (long)G, (int)d);
            }
            if (b != bits_row) { /* the same for every head of a row: made when the thread's row changes */
                row_bits(okbits, gp, n, wp, G, L, slot_used + b * G, key_ok + b * L);
                bits_row = b;
            }
            const bf16 *qh = q + b * q_strides[0] + h * q_strides[2];
            bf16 *oh = out + (b * L * H + h) * d;
            head(qh, q_strides[1], kt, vpk, kgt, vgp, gp, okbits, qbuf, scores, probs, obuf, bits, width, oh, H * d,
                 (long)L, (long)w, wp, (int)d, dp, scale);
        }
        if (ready) _tile_release();
        free(kt); free(vpk); free(kgt); free(vgp); free(okbits); free(qbuf); free(scores); free(probs); free(obuf); free(bits);
    }
    return failed ? LONGQA_BAND_OUT_OF_MEMORY : LONGQA_BAND_OK;
}
