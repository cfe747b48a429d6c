/*
 * weights.c - the checkpoint tensor table: format detection, shard indexes, lookup
 * and conversion to fp32 (see weights.h).
 *
 * Owns: the file mappings and the tensor table of a struct weights. The format
 * readers (weights_safetensors.c, weights_torch.c) and the dummy generator
 * (weights_dummy.c) fill the table through weights_add; everything here works on the
 * table alone, so lookups and reads do not care where a tensor came from.
 * Invariant: after weights_open returns 0 the table is immutable, which is what makes
 * weights_has and weights_read_f32 safe from any thread at once.
 */
#include "weights.h"

#include "err.h"
#include "util.h"
#include "weights_impl.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The on-disk formats store little-endian values and we memcpy them as they are. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "checkpoint readers assume little-endian");

/* Elements per parallel chunk: big enough that the OpenMP overhead is noise. */
#define CONVERT_CHUNK ((int64_t)1 << 16)

uint64_t weights_hash(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int64_t weights_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] && n > ((int64_t)1 << 62) / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

const char *weights_shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t k = 0;
    k += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (k < size) snprintf(buf + k, size - k, "]");
    return buf;
}

/* Hugging Face spells OPT tensors with any of these prefixes (DESIGN section 3);
 * Llama, Mistral and Qwen2 use "model.", GPT-NeoX "gpt_neox." (arch.h names the rest). */
static const char *strip_prefix(const char *s, size_t *len)
{
    static const char *const prefixes[] = {"model.decoder.", "decoder.", "model.",
                                           "gpt_neox."};
    for (size_t i = 0; i < ARRAY_LEN(prefixes); i++) {
        size_t n = strlen(prefixes[i]);
        if (*len > n && memcmp(s, prefixes[i], n) == 0) {
            *len -= n;
            return s + n;
        }
    }
    return s;
}

bool weights_is_mask_buffer(const char *name)
{
    static const char *const tails[] = {".attention.bias", ".attention.masked_bias"};
    const size_t n = strlen(name);
    for (size_t i = 0; i < ARRAY_LEN(tails); i++) {
        const size_t k = strlen(tails[i]);
        if (n >= k && strcmp(name + n - k, tails[i]) == 0) return true;
    }
    return false;
}

static void index_insert(struct weights *w, int32_t idx)
{
    uint32_t mask = w->n_slots - 1;
    uint32_t i = (uint32_t)w->tensors[idx].hash & mask;
    while (w->slots[i] >= 0)
        i = (i + 1) & mask;
    w->slots[i] = idx;
}

static void index_grow(struct weights *w)
{
    free(w->slots);
    w->n_slots = w->n_slots ? w->n_slots * 2 : 64;
    w->slots = xmalloc(w->n_slots * sizeof *w->slots);
    memset(w->slots, 0xff, w->n_slots * sizeof *w->slots);
    for (int32_t i = 0; i < w->n_tensors; i++)
        index_insert(w, i);
}

static const struct weights_tensor *find_n(const struct weights *w, const char *name,
                                           size_t len, uint64_t h)
{
    if (!w->n_slots) return NULL;
    uint32_t mask = w->n_slots - 1;
    for (uint32_t i = (uint32_t)h & mask; w->slots[i] >= 0; i = (i + 1) & mask) {
        const struct weights_tensor *t = &w->tensors[w->slots[i]];
        if (t->hash == h && strlen(t->name) == len && memcmp(t->name, name, len) == 0)
            return t;
    }
    return NULL;
}

const struct weights_tensor *weights_find(const struct weights *w, const char *name)
{
    size_t len = strlen(name);
    return find_n(w, name, len, weights_hash(name, len));
}

int weights_add(struct weights *w, const char *raw, size_t raw_len, enum dtype dtype,
                enum weights_fill fill, int ndim, const int64_t *shape, const uint8_t *data,
                int32_t file)
{
    CHECK(ndim >= 0 && ndim <= WEIGHTS_MAX_DIM);
    size_t len = raw_len;
    const char *name = strip_prefix(raw, &len);
    uint64_t h = weights_hash(name, len);
    if (find_n(w, name, len, h)) {
        const char *where = file >= 0 ? w->files[file].path : w->source;
        return err_set(ENG_EFORMAT,
                       "%s: tensor %.*s appears twice (after dropping its prefix)", where,
                       (int)raw_len, raw);
    }
    if (w->n_tensors == w->cap_tensors) {
        w->cap_tensors = w->cap_tensors ? w->cap_tensors * 2 : 64;
        w->tensors = xrealloc(w->tensors, (size_t)w->cap_tensors * sizeof *w->tensors);
    }
    struct weights_tensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = xstrndup(name, len);
    t->hash = h;
    t->dtype = dtype;
    t->fill = fill;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->numel = weights_numel(ndim, shape);
    CHECK(t->numel >= 0); /* readers validate shapes before adding */
    t->data = data;
    t->file = file;
    w->n_tensors++;
    if ((uint32_t)w->n_tensors * 2 > w->n_slots)
        index_grow(w);
    else
        index_insert(w, w->n_tensors - 1);
    return 0;
}

/*
 * Map `path` read-only and append it to w->files. A missing file is ENG_ENOTFOUND so
 * that a shard index naming an absent shard reads as "not found", not as an I/O fault.
 */
static int map_file(struct weights *w, const char *path, int32_t *idx)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(errno == ENOENT ? ENG_ENOTFOUND : ENG_EIO, "%s: cannot open: %s",
                       path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(ENG_EIO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return err_set(ENG_EFORMAT, "%s: empty file", path);
    }
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int saved = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return err_set(ENG_EIO, "%s: cannot mmap: %s", path, strerror(saved));
    if (w->n_files == w->cap_files) {
        w->cap_files = w->cap_files ? w->cap_files * 2 : 4;
        w->files = xrealloc(w->files, (size_t)w->cap_files * sizeof *w->files);
    }
    w->files[w->n_files] = (struct weights_file){xstrdup(path), map, len};
    *idx = w->n_files++;
    return 0;
}

typedef int (*load_fn)(struct weights *w, int32_t file);

static int load_one(struct weights *w, const char *path, load_fn load)
{
    int32_t idx = -1;
    int err = map_file(w, path, &idx);
    return err ? err : load(w, idx);
}

/*
 * A Hugging Face shard index: {"metadata": ..., "weight_map": {tensor: shard file}}.
 * Every shard named is loaded whole, and then every tensor the index promises must be
 * found in the shard it names, so a stale index fails at open rather than at a read.
 */
static int load_index(struct weights *w, const char *dir, const char *index_path,
                      load_fn load)
{
    char *text = NULL;
    size_t len = 0;
    int err = util_read_file(index_path, &text, &len);
    if (err) return err;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!root) return err_set(ENG_EFORMAT, "%s: not valid JSON", index_path);
    if (!cJSON_IsObject(root) || !cJSON_IsObject(map) || !map->child) {
        cJSON_Delete(root);
        return err_set(ENG_EFORMAT, "%s: no \"weight_map\" object with entries",
                       index_path);
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, map)
    {
        const char *shard = cJSON_GetStringValue(e);
        if (!shard || !*shard || strchr(shard, '/') || strcmp(shard, "..") == 0) {
            err = err_set(ENG_EFORMAT,
                          "%s: tensor %s: shard must be a file name in the folder",
                          index_path, e->string);
            goto out;
        }
    }
    /* Load each distinct shard once, in the order the index first names it. */
    cJSON_ArrayForEach(e, map)
    {
        const cJSON *prev;
        int seen = 0;
        for (prev = map->child; prev != e && !seen; prev = prev->next)
            seen = strcmp(prev->valuestring, e->valuestring) == 0;
        if (seen) continue;
        char *path = util_path_join(dir, e->valuestring);
        if (access(path, F_OK) != 0) {
            err = err_set(ENG_ENOTFOUND, "%s: shard %s (holding tensor %s) does not exist",
                          index_path, e->valuestring, e->string);
            free(path);
            goto out;
        }
        err = load_one(w, path, load);
        free(path);
        if (err) goto out;
    }
    cJSON_ArrayForEach(e, map)
    {
        size_t n = strlen(e->string);
        const char *name = strip_prefix(e->string, &n);
        const struct weights_tensor *t = find_n(w, name, n, weights_hash(name, n));
        const char *base = t ? strrchr(w->files[t->file].path, '/') : NULL;
        base = base ? base + 1 : t ? w->files[t->file].path : NULL;
        if (!t || strcmp(base, e->valuestring) != 0) {
            err = err_set(ENG_EFORMAT,
                          "%s: tensor %s is mapped to %s, which does not hold it",
                          index_path, e->string, e->valuestring);
            goto out;
        }
    }
out:
    cJSON_Delete(root);
    return err;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int weights_open(struct weights **out, const char *dir)
{
    static const struct {
        const char *file;
        int is_index;
        load_fn load;
    } kinds[] = {
        {"model.safetensors", 0, weights_safetensors_load},
        {"model.safetensors.index.json", 1, weights_safetensors_load},
        {"pytorch_model.bin", 0, weights_torch_load},
        {"pytorch_model.bin.index.json", 1, weights_torch_load},
    };
    *out = NULL;
    struct weights *w = xcalloc(1, sizeof *w);
    int err = ENG_ENOTFOUND;
    for (size_t i = 0; i < ARRAY_LEN(kinds); i++) {
        char *path = util_path_join(dir, kinds[i].file);
        if (!file_exists(path)) {
            free(path);
            continue;
        }
        w->source = path;
        err = kinds[i].is_index ? load_index(w, dir, path, kinds[i].load)
                                : load_one(w, path, kinds[i].load);
        break;
    }
    if (err == ENG_ENOTFOUND && !w->source)
        err_set(err,
                "%s: no model.safetensors, model.safetensors.index.json, "
                "pytorch_model.bin or pytorch_model.bin.index.json",
                dir);
    if (!err && w->n_tensors == 0)
        err = err_set(ENG_EFORMAT, "%s: the checkpoint holds no tensors", w->source);
    if (err) {
        weights_close(w);
        return err;
    }
    *out = w;
    return 0;
}

int weights_open_dummy(struct weights **out, const struct opt_config *cfg, uint64_t seed)
{
    struct weights *w = xcalloc(1, sizeof *w);
    size_t n = strlen(cfg->name);
    /* Dummy configs are already named "dummy:..."; say so for any other name too. */
    w->source = xmalloc(n + 7);
    snprintf(w->source, n + 7, "%s%s", strncmp(cfg->name, "dummy:", 6) ? "dummy:" : "",
             cfg->name);
    w->seed = seed;
    weights_dummy_build(w, cfg);
    *out = w;
    return 0;
}

void weights_close(struct weights *w)
{
    if (!w) return;
    for (int32_t i = 0; i < w->n_files; i++) {
        munmap((void *)w->files[i].map, w->files[i].len);
        free(w->files[i].path);
    }
    for (int32_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->files);
    free(w->tensors);
    free(w->slots);
    free(w->source);
    free(w);
}

int weights_has(const struct weights *w, const char *name)
{
    return weights_find(w, name) != NULL;
}

/*
 * Convert `n` elements at `src` to fp32. The source may be unaligned (safetensors
 * offsets are arbitrary), so every load goes through memcpy, which compiles to a
 * plain unaligned load. Big tensors are split across OpenMP threads: besides the
 * arithmetic this spreads the page faults of a cold mapping over several cores.
 */
static void convert(const uint8_t *src, enum dtype dtype, int64_t n, float *dst)
{
    int64_t n_chunks = CEIL_DIV(n, CONVERT_CHUNK);
#pragma omp parallel for schedule(static) if (n_chunks > 1)
    for (int64_t c = 0; c < n_chunks; c++) {
        int64_t lo = c * CONVERT_CHUNK, hi = MIN(n, lo + CONVERT_CHUNK);
        if (dtype == DTYPE_F32) {
            memcpy(dst + lo, src + lo * 4, (size_t)(hi - lo) * 4);
        } else if (dtype == DTYPE_F16) {
            for (int64_t i = lo; i < hi; i++) {
                uint16_t h;
                memcpy(&h, src + i * 2, 2);
                dst[i] = f16_to_f32(h);
            }
        } else {
            for (int64_t i = lo; i < hi; i++) {
                uint16_t h;
                memcpy(&h, src + i * 2, 2);
                dst[i] = bf16_to_f32(h);
            }
        }
    }
}

/* Elements [first, first + n) of tensor t (row-major) as fp32 into dst[0..n). */
static void read_run(const struct weights *w, const struct weights_tensor *t, int64_t first,
                     int64_t n, float *dst)
{
    switch (t->fill) {
    case WEIGHTS_FILL_DATA:
        convert(t->data + first * dtype_size(t->dtype), t->dtype, n, dst);
        break;
    case WEIGHTS_FILL_NORMAL: weights_dummy_generate(w, t, first, n, dst); break;
    case WEIGHTS_FILL_ONE:
        for (int64_t i = 0; i < n; i++) dst[i] = 1.0f;
        break;
    case WEIGHTS_FILL_ZERO: memset(dst, 0, (size_t)n * sizeof *dst); break;
    }
}

/* The tensor `name` if it exists with exactly shape[0..ndim), else NULL with the error
 * (naming file and tensor) in *err. */
static const struct weights_tensor *find_shaped(const struct weights *w, const char *name,
                                                int ndim, const int64_t *shape, int *err)
{
    const struct weights_tensor *t = weights_find(w, name);
    if (!t) {
        *err = err_set(ENG_ENOTFOUND, "%s: no tensor %s", w->source, name);
        return NULL;
    }
    const char *where = t->file >= 0 ? w->files[t->file].path : w->source;
    int same = ndim == t->ndim;
    for (int i = 0; same && i < ndim; i++)
        same = shape[i] == t->shape[i];
    if (!same) {
        char have[160], want[160];
        weights_shape_str(have, sizeof have, t->ndim, t->shape);
        weights_shape_str(want, sizeof want, ndim, shape);
        *err = err_set(ENG_EFORMAT, "%s: tensor %s has shape %s, expected %s", where, name,
                       have, want);
        return NULL;
    }
    return t;
}

int weights_read_f32(const struct weights *w, const char *name, int ndim,
                     const int64_t *shape, float *dst)
{
    int err = 0;
    const struct weights_tensor *t = find_shaped(w, name, ndim, shape, &err);
    if (t) read_run(w, t, 0, t->numel, dst);
    return err;
}

int weights_read_f32_part(const struct weights *w, const char *name, int ndim,
                          const int64_t *shape, int64_t row0, int64_t n_rows, int64_t col0,
                          int64_t n_cols, float *dst)
{
    CHECK(ndim == 1 || ndim == 2);
    const int64_t cols = ndim == 2 ? shape[1] : 1;
    CHECK(row0 >= 0 && n_rows >= 0 && row0 + n_rows <= shape[0]);
    CHECK(col0 >= 0 && n_cols >= 0 && col0 + n_cols <= cols);
    int err = 0;
    const struct weights_tensor *t = find_shaped(w, name, ndim, shape, &err);
    if (!t) return err;
    /* Whole rows are one run; a column window is one run per row. */
    if (n_cols == cols) {
        read_run(w, t, row0 * cols, n_rows * cols, dst);
    } else {
        for (int64_t r = 0; r < n_rows; r++)
            read_run(w, t, (row0 + r) * cols + col0, n_cols, dst + r * n_cols);
    }
    return 0;
}
