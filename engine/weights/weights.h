/*
 * weights.h - read the tensors of a checkpoint, whatever its on-disk form.
 *
 * A `struct weights` is a read-only table of named tensors backed by mmap'd files
 * (model.safetensors, sharded safetensors with model.safetensors.index.json,
 * pytorch_model.bin zip archives, sharded .bin with pytorch_model.bin.index.json),
 * or by a deterministic generator for the built-in dummy models. Tensor names are
 * stored without their `model.decoder.` / `decoder.` / `model.` / `gpt_neox.` prefix so
 * lookups use one spelling ("layers.0.fc1.weight", "embed_tokens.weight",
 * "lm_head.weight"; arch.h has each family's names).
 */
#ifndef H2O_WEIGHTS_H
#define H2O_WEIGHTS_H

#include "dtype.h"
#include "opt_config.h"

#include <stddef.h>
#include <stdint.h>

struct weights;

/*
 * Open the checkpoint in folder `dir`, trying safetensors first, then .bin. Every
 * header is validated up front (dtype known, data inside the file, shapes
 * consistent with byte sizes) so that a bad file fails here with a one-line message
 * naming the file and tensor, never later in a read.
 * Returns 0; ENG_ENOTFOUND when the folder holds no checkpoint or an index names a
 * missing shard; ENG_EIO when a file cannot be opened or mapped; ENG_EFORMAT for a
 * malformed, truncated or inconsistent file (bad JSON, zip or pickle, data outside
 * the file); ENG_EUNSUPPORTED for well-formed input this reader does not take
 * (dtypes other than fp32/fp16/bf16, non-contiguous tensors, compressed zip members).
 * The files stay mapped read-only until weights_close; nothing is read eagerly.
 * Owns: the returned object (weights_close). Thread: any.
 */
int weights_open(struct weights **out, const char *dir);

/*
 * Weights for a dummy model: every tensor of `cfg` generated on demand from `seed`
 * (the same seed, name and index give the same value on every machine). LayerNorm
 * weights are 1 and biases 0; matrices are normal-ish with std 0.02, like OPT's init.
 * There is no lm_head.weight (it is tied). Nothing is materialised, so any size opens
 * at once. Returns 0.
 * Owns: the returned object (weights_close). Thread: any.
 */
int weights_open_dummy(struct weights **out, const struct opt_config *cfg, uint64_t seed);

/* Release mappings and memory. NULL is fine. Thread: any. */
void weights_close(struct weights *w);

/* Whether a tensor named `name` (prefix-free) exists. Thread: any. */
int weights_has(const struct weights *w, const char *name);

/*
 * Convert tensor `name` to fp32 into `dst`, after checking that its shape is exactly
 * `shape[0..ndim)`. Returns 0, ENG_ENOTFOUND (missing tensor) or ENG_EFORMAT (wrong
 * shape), each with a message naming the checkpoint file and the tensor.
 * `dst` holds the product of `shape` floats, row-major. Thread: any.
 */
int weights_read_f32(const struct weights *w, const char *name, int ndim,
                     const int64_t *shape, float *dst);

/*
 * Like weights_read_f32 (same shape check against the whole tensor's `shape`), but
 * only the window rows [row0, row0 + n_rows) x columns [col0, col0 + n_cols) into
 * dst [n_rows, n_cols], row-major; a vector (ndim 1) takes col0 = 0, n_cols = 1. A
 * tensor-parallel rank reads its shard this way: the rest of the tensor is never
 * touched, so its pages of a mapped file are never faulted in. The window must lie
 * inside `shape` (a caller bug otherwise). Returns as weights_read_f32. Thread: any.
 */
int weights_read_f32_part(const struct weights *w, const char *name, int ndim,
                          const int64_t *shape, int64_t row0, int64_t n_rows, int64_t col0,
                          int64_t n_cols, float *dst);

#endif
