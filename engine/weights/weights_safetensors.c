/*
 * weights_safetensors.c - validate a mapped .safetensors file and list its tensors.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
 * then the data section, to which the offsets are relative. Owns nothing: the tensors
 * point into the mapping that weights.c owns.
 * Invariant: a tensor is added only when its dtype is one we convert and its bytes,
 * exactly shape * element size of them, lie inside the data section.
 */
#include "err.h"
#include "util.h"
#include "weights_impl.h"

#include <cjson/cJSON.h>

#include <inttypes.h>
#include <math.h>
#include <string.h>

/* Integers in the header must survive a trip through a double, as cJSON stores them. */
#define JSON_INT_MAX 9007199254740992.0 /* 2^53 */

/* A JSON number that is a non-negative integer small enough to be exact. */
static int json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= JSON_INT_MAX) || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

static int parse_dtype(const char *s, enum dtype *out)
{
    if (strcmp(s, "F32") == 0)
        *out = DTYPE_F32;
    else if (strcmp(s, "F16") == 0)
        *out = DTYPE_F16;
    else if (strcmp(s, "BF16") == 0)
        *out = DTYPE_BF16;
    else
        return 0;
    return 1;
}

/* Check one header entry and add it; `data` is the start of the data section. */
static int load_entry(struct weights *w, int32_t file, const cJSON *e, const uint8_t *data,
                      uint64_t data_len)
{
    const char *path = w->files[file].path, *name = e->string;
    if (!cJSON_IsObject(e))
        return err_set(ENG_EFORMAT, "%s: tensor %s: header entry is not an object", path,
                       name);
    const char *ds = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "dtype"));
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!ds) return err_set(ENG_EFORMAT, "%s: tensor %s: no \"dtype\" string", path, name);
    enum dtype dtype;
    if (!parse_dtype(ds, &dtype) && weights_is_mask_buffer(name)) return 0;
    if (!parse_dtype(ds, &dtype))
        return err_set(ENG_EUNSUPPORTED,
                       "%s: tensor %s: unsupported dtype %s (F32, F16 and BF16 are read)",
                       path, name, ds);
    if (!cJSON_IsArray(sh))
        return err_set(ENG_EFORMAT, "%s: tensor %s: no \"shape\" array", path, name);
    int ndim = cJSON_GetArraySize(sh);
    if (ndim > WEIGHTS_MAX_DIM)
        return err_set(ENG_EFORMAT, "%s: tensor %s: %d dimensions (at most %d)", path, name,
                       ndim, WEIGHTS_MAX_DIM);
    int64_t shape[WEIGHTS_MAX_DIM];
    int k = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh)
    {
        uint64_t v;
        if (!json_uint(d, &v))
            return err_set(ENG_EFORMAT,
                           "%s: tensor %s: shape entries must be non-negative integers",
                           path, name);
        shape[k++] = (int64_t)v;
    }
    int64_t numel = weights_numel(ndim, shape);
    if (numel < 0)
        return err_set(ENG_EFORMAT, "%s: tensor %s: shape too large", path, name);
    uint64_t begin, end;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        !json_uint(off->child, &begin) || !json_uint(off->child->next, &end) || begin > end)
        return err_set(ENG_EFORMAT,
                       "%s: tensor %s: \"data_offsets\" must be [begin, end] with "
                       "0 <= begin <= end",
                       path, name);
    if (end > data_len)
        return err_set(ENG_EFORMAT,
                       "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
                       "] pass the end of "
                       "the data section (%" PRIu64 " bytes; truncated file?)",
                       path, name, begin, end, data_len);
    uint64_t want = (uint64_t)numel * (uint64_t)dtype_size(dtype);
    if (end - begin != want) {
        char buf[160];
        return err_set(ENG_EFORMAT,
                       "%s: tensor %s: shape %s of %s needs %" PRIu64
                       " bytes but data_offsets "
                       "span %" PRIu64,
                       path, name, weights_shape_str(buf, sizeof buf, ndim, shape), ds,
                       want, end - begin);
    }
    return weights_add(w, name, strlen(name), dtype, WEIGHTS_FILL_DATA, ndim, shape,
                       data + begin, file);
}

int weights_safetensors_load(struct weights *w, int32_t file)
{
    const struct weights_file *f = &w->files[file];
    if (f->len < 8)
        return err_set(ENG_EFORMAT, "%s: too short for a safetensors header (%zu bytes)",
                       f->path, f->len);
    uint64_t hlen;
    memcpy(&hlen, f->map, 8);
    if (hlen == 0 || hlen > f->len - 8)
        return err_set(ENG_EFORMAT,
                       "%s: header length %" PRIu64 " does not fit in the file (%zu bytes; "
                       "truncated or not safetensors?)",
                       f->path, hlen, f->len);
    cJSON *root = cJSON_ParseWithLength((const char *)f->map + 8, (size_t)hlen);
    if (!root) return err_set(ENG_EFORMAT, "%s: header is not valid JSON", f->path);
    int err = 0;
    if (!cJSON_IsObject(root)) {
        err = err_set(ENG_EFORMAT, "%s: header is not a JSON object", f->path);
        goto out;
    }
    const uint8_t *data = f->map + 8 + hlen;
    uint64_t data_len = f->len - 8 - hlen;
    const cJSON *e;
    cJSON_ArrayForEach(e, root)
    {
        /* Free-form string metadata (format, framework); nothing we need. */
        if (strcmp(e->string, "__metadata__") == 0) continue;
        err = load_entry(w, file, e, data, data_len);
        if (err) break;
    }
out:
    cJSON_Delete(root);
    return err;
}
