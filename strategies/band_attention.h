/* The band kernels' one door: the argument struct and the status codes that every band kernel variant takes and
   returns (band_attention.c: bf16 on AVX-512 BF16; band_attention_fp32.c: fp32 on AVX2 + FMA). strategies/
   band_kernel.py mirrors both (BandArgs, a ctypes.Structure with these fields in this order; Status, an IntEnum
   with these names), and tests/test_band_kernel.py checks the mirror against this file.

   A new kernel variant plugs in like this: a .c file that includes this header and exports
   `int longqa_band_attention_<name>(const longqa_band_args *args)`, validating with longqa_band_check() first; a
   KernelBuild row in band_kernel.py's BUILDS (source, compiler flags, CPU flags, entry point, head sizes). New
   fields go at the end of the struct, in both places; `struct_size` lets a kernel refuse a caller built against
   another version (LONGQA_BAND_BAD_ARGUMENTS) instead of reading past the caller's struct.

   Layout (all sizes in elements): q, k, v are (B, L, H, d) with any batch, token and head strides and a unit
   dimension stride; bf16 rows 4-byte aligned; k_global, v_global (B, H, G, d) contiguous; key_ok (B, L) bytes,
   1 where the token is a local key (neither padding nor global); slot_used (B, G) bytes, 1 where the global slot
   holds a token; out (B, L, H, d) contiguous. The kernels trust the layout (Python checks it) but check the sizes:
   their loops index a row's columns with 32-bit ints. */

#ifndef LONGQA_BAND_ATTENTION_H
#define LONGQA_BAND_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    LONGQA_BAND_OK = 0,
    LONGQA_BAND_BAD_HEAD_SIZE = 1,    /* a head size this kernel does not take */
    LONGQA_BAND_OUT_OF_MEMORY = 2,    /* scratch buffers could not be allocated */
    LONGQA_BAND_BAD_ARGUMENTS = 3,    /* a size out of range, or a struct of another size */
} longqa_band_status;

typedef struct {
    int64_t struct_size;              /* sizeof(longqa_band_args) as the caller knows it */
    const void *q, *k, *v;            /* (B, L, H, d) */
    int64_t q_strides[3];             /* (batch, token, head) strides of q */
    int64_t k_strides[3];
    int64_t v_strides[3];
    const void *k_global, *v_global;  /* (B, H, G, d) contiguous */
    const uint8_t *key_ok;            /* (B, L) */
    const uint8_t *slot_used;         /* (B, G) */
    void *out;                        /* (B, L, H, d) contiguous */
    int64_t batch, length, heads, head_dim;
    int64_t window;                   /* one-sided: query i sees local keys i - window .. i + window */
    int64_t n_global;                 /* G, global slots per row */
    float scale;                      /* applied to every score: 1 / sqrt(head_dim) */
    int32_t threads;                  /* OpenMP threads */
} longqa_band_args;

/* Every size the kernels index with 32-bit ints stays below this (2^30). */
#define LONGQA_BAND_MAX_SIZE ((int64_t)1 << 30)

/* LONGQA_BAND_OK when the sizes are in the kernels' range: nothing negative, batch, heads, length, window and
   global slots each below 2^30, and a row's columns (global slots and band, padded to 64) below 2^31. */
static inline longqa_band_status longqa_band_check(const longqa_band_args *a) {
    if (a->struct_size != (int64_t)sizeof(longqa_band_args)) return LONGQA_BAND_BAD_ARGUMENTS;
    const int64_t sizes[] = {a->batch, a->length, a->heads, a->head_dim, a->window, a->n_global};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        if (sizes[i] < 0 || sizes[i] >= LONGQA_BAND_MAX_SIZE) return LONGQA_BAND_BAD_ARGUMENTS;
    if (a->n_global + 2 * a->window + 256 >= ((int64_t)1 << 31)) return LONGQA_BAND_BAD_ARGUMENTS;
    if (a->threads < 1) return LONGQA_BAND_BAD_ARGUMENTS;
    return LONGQA_BAND_OK;
}

#endif
