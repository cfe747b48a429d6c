/*
 * weights_impl.h - the tensor table behind struct weights, shared by its readers.
 *
 * Internal to weights*.c; nothing outside the checkpoint readers includes it.
 * weights.c owns the table (files, tensors, name index) and the conversion to fp32;
 * each on-disk format (weights_safetensors.c, weights_torch.c over weights_zip.c) only
 * validates one mapped file and adds its tensors with weights_add; weights_dummy.c
 * adds generated tensors and produces their values on demand.
 * Invariant: every tensor with data has numel * dtype_size(dtype) bytes inside the
 * mapping of files[file]; readers check this before weights_add, so reads never
 * fault on bounds.
 */
#ifndef H2O_WEIGHTS_IMPL_H
#define H2O_WEIGHTS_IMPL_H

#include "dtype.h"
#include "opt_config.h"
#include "weights.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* More dimensions than any OPT tensor has; a bigger ndim is a malformed file. */
#define WEIGHTS_MAX_DIM 8

/* Where a tensor's values come from. */
enum weights_fill {
    WEIGHTS_FILL_DATA = 0, /* bytes in a mapped file */
    WEIGHTS_FILL_NORMAL,   /* dummy: normal-ish, std 0.02 */
    WEIGHTS_FILL_ONE,      /* dummy: LayerNorm weights */
    WEIGHTS_FILL_ZERO,     /* dummy: biases */
};

struct weights_tensor {
    char *name;       /* prefix-free, owned */
    uint64_t hash;    /* weights_hash(name): index key and dummy stream id */
    enum dtype dtype; /* on-disk element type (fp32 for dummy tensors) */
    enum weights_fill fill;
    int ndim;
    int64_t shape[WEIGHTS_MAX_DIM];
    int64_t numel;
    const uint8_t *data; /* numel elements inside files[file]; NULL for dummy */
    int32_t file;        /* index into weights.files; -1 for dummy */
};

struct weights_file {
    char *path;         /* owned; named in every error about this file */
    const uint8_t *map; /* read-only mapping of the whole file */
    size_t len;
};

struct weights {
    char *source; /* what users call this checkpoint (a path or "dummy:...") */
    struct weights_file *files;
    int32_t n_files, cap_files;
    struct weights_tensor *tensors;
    int32_t n_tensors, cap_tensors;
    int32_t *slots;   /* open-addressing index of tensors by hash; -1 empty */
    uint32_t n_slots; /* a power of two, at least twice n_tensors */
    uint64_t seed;    /* dummy weights only */
};

/* FNV-1a over `len` bytes of `s`. Thread: any. */
uint64_t weights_hash(const char *s, size_t len);

/*
 * Add a tensor named `raw` (`raw_len` bytes, its prefix still on) to the table. The
 * `model.decoder.` / `decoder.` / `model.` prefix is stripped here so every reader
 * agrees on one spelling. Returns 0, or ENG_EFORMAT when the stripped name is already
 * taken (two spellings of one tensor would make lookups ambiguous).
 * Thread: the thread building `w`.
 */
/* Whether `name` is a causal-mask buffer that GPT-NeoX (and GPT-2-style) checkpoints
 * carry beside the weights: "...attention.bias" (bool or uint8) and
 * "...attention.masked_bias". h2oserve builds its own masks, so the readers skip
 * such a tensor when its dtype is one they do not read, instead of refusing the
 * checkpoint (published Pythia files have them). */
bool weights_is_mask_buffer(const char *name);

int weights_add(struct weights *w, const char *raw, size_t raw_len, enum dtype dtype,
                enum weights_fill fill, int ndim, const int64_t *shape, const uint8_t *data,
                int32_t file);

/* The tensor with prefix-free name `name`, or NULL. Thread: any. */
const struct weights_tensor *weights_find(const struct weights *w, const char *name);

/*
 * The product of shape[0..ndim), or -1 when a dimension is negative or the product
 * passes 2^62 (so that a later multiply by an element size cannot overflow).
 * Thread: any.
 */
int64_t weights_numel(int ndim, const int64_t *shape);

/* Format "[a, b, c]" into buf. Thread: any. */
const char *weights_shape_str(char *buf, size_t size, int ndim, const int64_t *shape);

/*
 * Validate the safetensors file files[file] and add its tensors.
 * Returns 0, ENG_EFORMAT (malformed or truncated) or ENG_EUNSUPPORTED (a dtype other
 * than F32/F16/BF16), with a message naming the file and tensor.
 * Thread: the thread building `w`.
 */
int weights_safetensors_load(struct weights *w, int32_t file);

/*
 * Validate the torch.save zip archive files[file] and add the tensors of the state
 * dict its data.pkl describes. Returns 0, ENG_EFORMAT (bad zip, bad pickle, tensor
 * outside its storage) or ENG_EUNSUPPORTED (compressed entries, other dtypes,
 * non-contiguous strides), with a message naming the file and tensor.
 * Thread: the thread building `w`.
 */
int weights_torch_load(struct weights *w, int32_t file);

/* One member of a zip archive; pointers into the mapping. */
struct weights_zip_entry {
    const char *name; /* not NUL-terminated */
    size_t name_len;
    const uint8_t *data;
    uint64_t size;
};

/*
 * Read the central directory of the zip archive `map` (`len` bytes, named `path` in
 * messages), zip64 included. Every entry must be stored uncompressed and lie inside
 * the file. On success *out is a heap array of *n entries (caller frees).
 * Returns 0, ENG_EFORMAT or ENG_EUNSUPPORTED. Thread: any.
 */
int weights_zip_read(const char *path, const uint8_t *map, size_t len,
                     struct weights_zip_entry **out, size_t *n);

/* Add every tensor of `cfg` as a generated dummy tensor. Thread: the thread building `w`.
 */
void weights_dummy_build(struct weights *w, const struct opt_config *cfg);

/* Generate elements [first, first + n) of dummy tensor `t` (row-major) into
 * dst[0..n). Thread: any. */
void weights_dummy_generate(const struct weights *w, const struct weights_tensor *t,
                            int64_t first, int64_t n, float *dst);

#endif
