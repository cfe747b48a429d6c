/*
 * test_weights_torch.c - torch.save archives gone wrong: damaged zips, hostile or
 * corrupt pickles, tensors that do not fit their storage, and a fuzz loop of random
 * byte flips over the fixtures that must never crash (run it under ASan).
 *
 * Pickles here are assembled opcode by opcode, so each case shows exactly which
 * construct is being refused.
 */
#include "err.h"
#include "test.h"
#include "weights.h"
#include "weights_impl.h" /* white-box: read every tensor the table lists */
#include "weights_testlib.h"

#include <stdint.h>

/* ---- a stored zip writer, laid out as torch.save lays it out ---- */

struct member {
    const char *name;
    const void *data;
    size_t n;
};

/* CRCs are left zero: the reader does not check them (weights_zip.c says why). */
static void zip_build(struct tbuf *z, const struct member *m, int n)
{
    uint64_t offs[16];
    for (int i = 0; i < n; i++) {
        offs[i] = z->n;
        size_t nl = strlen(m[i].name);
        tbuf_le(z, 0x04034b50, 4);
        tbuf_le(z, 20, 2), tbuf_le(z, 0, 2), tbuf_le(z, 0, 2), tbuf_le(z, 0, 4);
        tbuf_le(z, 0, 4), tbuf_le(z, m[i].n, 4), tbuf_le(z, m[i].n, 4);
        tbuf_le(z, nl, 2), tbuf_le(z, 0, 2);
        tbuf_add(z, m[i].name, nl);
        tbuf_add(z, m[i].data, m[i].n);
    }
    size_t cd = z->n;
    for (int i = 0; i < n; i++) {
        size_t nl = strlen(m[i].name);
        tbuf_le(z, 0x02014b50, 4);
        tbuf_le(z, 20, 2), tbuf_le(z, 20, 2), tbuf_le(z, 0, 2), tbuf_le(z, 0, 2);
        tbuf_le(z, 0, 4), tbuf_le(z, 0, 4), tbuf_le(z, m[i].n, 4), tbuf_le(z, m[i].n, 4);
        tbuf_le(z, nl, 2), tbuf_le(z, 0, 2), tbuf_le(z, 0, 2), tbuf_le(z, 0, 2);
        tbuf_le(z, 0, 2), tbuf_le(z, 0, 4), tbuf_le(z, offs[i], 4);
        tbuf_add(z, m[i].name, nl);
    }
    tbuf_le(z, 0x06054b50, 4);
    tbuf_le(z, 0, 4), tbuf_le(z, (uint64_t)n, 2), tbuf_le(z, (uint64_t)n, 2);
    tbuf_le(z, z->n - cd - 12, 4), tbuf_le(z, cd, 4), tbuf_le(z, 0, 2);
}

/* ---- a pickle assembler ---- */

static void pk_str(struct tbuf *b, const char *s)
{
    tbuf_byte(b, 'X');
    tbuf_le(b, strlen(s), 4);
    tbuf_add(b, s, strlen(s));
}

static void pk_global(struct tbuf *b, const char *mod, const char *name)
{
    tbuf_printf(b, "c%s\n%s\n", mod, name);
}

static void pk_int(struct tbuf *b, int v)
{
    tbuf_byte(b, 'J');
    tbuf_le(b, (uint32_t)v, 4);
}

/* The state dict {name: tensor} as torch.save pickles it, for one tensor. */
struct tensor_spec {
    const char *storage_type, *key;
    int numel, offset, ndim;
    int size[3], stride[3];
};

static void pk_state_dict(struct tbuf *b, const char *name, const struct tensor_spec *t)
{
    tbuf_add(b, "\x80\x02", 2);
    pk_global(b, "collections", "OrderedDict");
    tbuf_add(b, "q\x00)R(", 5);
    pk_str(b, name);
    pk_global(b, "torch._utils", "_rebuild_tensor_v2");
    tbuf_add(b, "((", 2);
    pk_str(b, "storage");
    pk_global(b, "torch", t->storage_type);
    pk_str(b, t->key);
    pk_str(b, "cpu");
    pk_int(b, t->numel);
    tbuf_add(b, "tQ", 2);
    pk_int(b, t->offset);
    tbuf_byte(b, '(');
    for (int i = 0; i < t->ndim; i++)
        pk_int(b, t->size[i]);
    tbuf_add(b, "t(", 2);
    for (int i = 0; i < t->ndim; i++)
        pk_int(b, t->stride[i]);
    tbuf_add(b, "t\x89h\x00)RtRu.", 10);
}

static const float storage16[4] = {1, 2, 3, 4}; /* 16 bytes */

/* Write a torch.save-like archive whose data.pkl is `pkl` and whose storage "0" holds
 * storage16; return its folder. */
static const char *write_archive(const struct tbuf *pkl)
{
    const struct member m[] = {
        {"archive/data.pkl", pkl->p, pkl->n},
        {"archive/data/0", storage16, sizeof storage16},
        {"archive/version", "3\n", 2},
    };
    struct tbuf z = {0};
    zip_build(&z, m, 3);
    const char *dir = tdir_new();
    tfile_write(dir, "pytorch_model.bin", z.p, z.n);
    free(z.p);
    return dir;
}

static void tensor_case(const struct tensor_spec *t, int code, const char *what, int line)
{
    struct tbuf b = {0};
    pk_state_dict(&b, "model.decoder.w", t);
    expect_open_fails(write_archive(&b), code, "pytorch_model.bin", what, line);
    free(b.p);
}

#define TENSOR_CASE(code, what, ...)                                                       \
    tensor_case(&(struct tensor_spec){__VA_ARGS__}, code, what, __LINE__)

TEST(assembled_state_dict_loads)
{
    /* The baseline the failure cases below depart from. */
    struct tbuf b = {0};
    pk_state_dict(&b, "model.decoder.w",
                  &(struct tensor_spec){"FloatStorage", "0", 4, 1, 2, {1, 3}, {9, 1}});
    struct weights *w = NULL;
    EXPECT_EQ(weights_open(&w, write_archive(&b)), 0);
    float v[3];
    if (w) EXPECT_EQ(weights_read_f32(w, "w", 2, (int64_t[]){1, 3}, v), 0);
    EXPECT(v[0] == 2 && v[1] == 3 &&
           v[2] == 4); /* offset 1; a size-1 dim's stride is free */
    weights_close(w);
    free(b.p);
}

TEST(tensors_must_fit_their_storage)
{
    TENSOR_CASE(ENG_EFORMAT, "decoder.w", "FloatStorage", "0", 4, 2, 1, {3}, {1});
    TENSOR_CASE(ENG_EFORMAT, "declares", "FloatStorage", "0", 5, 0, 1, {4}, {1});
    TENSOR_CASE(ENG_EFORMAT, "storage 7", "FloatStorage", "7", 4, 0, 1, {4}, {1});
    TENSOR_CASE(ENG_EUNSUPPORTED, "decoder.w", "FloatStorage", "0", 4, 0, 2, {2, 2},
                {1, 2});
    TENSOR_CASE(ENG_EUNSUPPORTED, "LongStorage", "LongStorage", "0", 2, 0, 1, {2}, {1});
    TENSOR_CASE(ENG_EFORMAT, "decoder.w", "FloatStorage", "0", 4, 0, 1, {-4}, {1});
    TENSOR_CASE(ENG_EFORMAT, "decoder.w", "FloatStorage", "0", 4, 0, 2,
                {2147483647, 2147483647}, {2147483647, 1});
}

/* A raw pickle must be refused with ENG_EFORMAT and a message naming data.pkl and `what`.
 */
static void raw_case(const void *pkl, size_t n, const char *what, int line)
{
    struct tbuf b = {0};
    tbuf_add(&b, pkl, n);
    const char *dir = write_archive(&b);
    expect_open_fails(dir, ENG_EFORMAT, "pytorch_model.bin", "data.pkl", line);
    if (!strstr(err_msg(), what))
        TEST_FAIL("line %d: \"%s\" lacks \"%s\"", line, err_msg(), what);
    free(b.p);
}

#define RAW_CASE(lit, what) raw_case(lit, sizeof lit - 1, what, __LINE__)

TEST(hostile_pickles_are_refused)
{
    RAW_CASE("", "truncated");
    RAW_CASE("\x80\x02}", "truncated"); /* no STOP */
    RAW_CASE("\x80\x02"
             "cos\nsystem\nX\x02\x00\x00\x00ls\x85R.",
             "os.system");
    RAW_CASE("\x80\x02"
             "cbuiltins\neval\n)R.",
             "builtins.eval");
    RAW_CASE("\x80\x02R.", "underflow");
    RAW_CASE("\x80\x02h\x05.", "memo");              /* BINGET of nothing */
    RAW_CASE("\x80\x02}r\xff\xff\xff\xff.", "memo"); /* LONG_BINPUT 2^32-1 */
    RAW_CASE("\x80\x02}(X\x01\x00\x00\x00"
             "au.",
             "odd");                      /* SETITEMS, odd count */
    RAW_CASE("\x80\x02].", "state dict"); /* a list, not a dict */
    RAW_CASE("\x80\x02\xff.", "opcode 0xff");
    RAW_CASE("\x80\x02\x8a\x09\x01\x02\x03\x04\x05\x06\x07\x08\x09.", "bytes");
    RAW_CASE("\x80\x02X\xff\xff\xff\x7f.", "truncated"); /* string longer than file */
    RAW_CASE("\x80\x02Q.", "underflow");
    RAW_CASE("\x80\x02K\x01Q.", "persistent id");
    RAW_CASE("\x80\x02(X\x07\x00\x00\x00storageK\x01K\x02K\x03K\x04tQ.", "persistent id");
    RAW_CASE("\x80\x02}X\x01\x00\x00\x00"
             "za.",
             "APPEND");             /* APPEND to a dict */
    RAW_CASE("\x80\x02t.", "MARK"); /* TUPLE without MARK */
    RAW_CASE("\x80\x02"
             "ctorch\n",
             "GLOBAL"); /* unterminated name */
    RAW_CASE("\x80\x09}.", "protocol");
    /* A MARK hides what is below it: SETITEM cannot reach the dict under the mark. */
    RAW_CASE("\x80\x02}(X\x01\x00\x00\x00"
             "aX\x01\x00\x00\x00"
             "bs.",
             "underflow");

    /* Nesting and stack depth are capped, whatever the file asks for. */
    struct tbuf b = {0};
    tbuf_add(&b, "\x80\x02", 2);
    for (int i = 0; i < 5000; i++)
        tbuf_byte(&b, '(');
    raw_case(b.p, b.n, "MARK", __LINE__);
    b.n = 0;
    tbuf_add(&b, "\x80\x02}q\x00", 5);
    for (int i = 0; i < (1 << 20) + 1; i++)
        tbuf_add(&b, "h\x00", 2);
    raw_case(b.p, b.n, "stack", __LINE__);
    free(b.p);
}

TEST(big_endian_archives_are_refused)
{
    /* torch >= 2.1 writes <archive>/byteorder; only "little" matches our memcpy reads. */
    struct tbuf pkl = {0}, z = {0};
    pk_state_dict(&pkl, "w", &(struct tensor_spec){"FloatStorage", "0", 4, 0, 1, {4}, {1}});
    const struct member m[] = {
        {"archive/data.pkl", pkl.p, pkl.n},
        {"archive/byteorder", "big", 3},
        {"archive/data/0", storage16, sizeof storage16},
    };
    zip_build(&z, m, 3);
    const char *dir = tdir_new();
    tfile_write(dir, "pytorch_model.bin", z.p, z.n);
    EXPECT_OPEN_FAILS(dir, ENG_EUNSUPPORTED, "pytorch_model.bin", "byteorder");
    free(pkl.p);
    free(z.p);
}

/* ---- damage to the zip container ---- */

static struct tbuf read_fixture(void)
{
    struct tbuf b = {0};
    char *text = NULL;
    size_t n = 0;
    if (util_read_file(test_data("weights/bin/pytorch_model.bin"), &text, &n)) abort();
    tbuf_add(&b, text, n);
    free(text);
    return b;
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

TEST(damaged_zips_are_refused)
{
    struct tbuf f = read_fixture();
    const char *dir = tdir_new();
    const uint8_t *eocd = f.p + f.n - 22; /* torch writes no archive comment */
    EXPECT_EQ(rd32(eocd), 0x06054b50u);
    uint32_t cd_size = rd32(eocd + 12), cd_off = rd32(eocd + 16);

    /* Every truncation fails cleanly: the end record is gone. */
    for (size_t len = 0; len < f.n; len += 13) {
        tfile_write(dir, "pytorch_model.bin", f.p, len);
        EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "pytorch_model.bin", len ? "zip" : "empty");
    }

    /* The central directory loses its tail but the end record survives. */
    struct tbuf t = {0};
    tbuf_add(&t, f.p, cd_off + cd_size - 10);
    tbuf_add(&t, eocd, 22);
    tfile_write(dir, "pytorch_model.bin", t.p, t.n);
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "pytorch_model.bin", "central directory");

    /* A compressed member (method 8, deflate) in the central directory. */
    t.n = 0;
    tbuf_add(&t, f.p, f.n);
    t.p[cd_off + 10] = 8;
    tfile_write(dir, "pytorch_model.bin", t.p, t.n);
    EXPECT_OPEN_FAILS(dir, ENG_EUNSUPPORTED, "pytorch_model.bin", "compressed");

    /* A local header offset past the end of the file. */
    memcpy(t.p, f.p, f.n);
    memset(t.p + cd_off + 42, 0x7f, 4);
    tfile_write(dir, "pytorch_model.bin", t.p, t.n);
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "pytorch_model.bin", "local header");

    /* An entry count larger than the directory can hold. */
    memcpy(t.p, f.p, f.n);
    t.p[t.n - 22 + 10] = 0xfe;
    tfile_write(dir, "pytorch_model.bin", t.p, t.n);
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "pytorch_model.bin", "entries");

    /* The first pickle opcode after PROTO replaced by garbage. data.pkl comes first. */
    memcpy(t.p, f.p, f.n);
    size_t pkl = 30 + (size_t)(t.p[26] | t.p[27] << 8) + (size_t)(t.p[28] | t.p[29] << 8);
    EXPECT_EQ(t.p[pkl], 0x80);
    t.p[pkl + 2] = 0xfe;
    tfile_write(dir, "pytorch_model.bin", t.p, t.n);
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "pytorch_model.bin", "data.pkl");

    /* Not a zip at all: the pre-1.6 torch.save format starts with a bare pickle. */
    tfile_write(dir, "pytorch_model.bin", "\x80\x02\x8a\x0a", 4);
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "pytorch_model.bin", "zip");

    /* A shard index naming a shard that is not there. */
    const char *sdir = tdir_new();
    tfile_write(sdir, "pytorch_model-00001-of-00002.bin", f.p, f.n);
    const char *idx =
        "{\"weight_map\": {\"lm_head.weight\": \"pytorch_model-00001-of-00002.bin\","
        " \"model.decoder.layers.0.fc2.weight\": \"pytorch_model-00002-of-00002.bin\"}}";
    tfile_write(sdir, "pytorch_model.bin.index.json", idx, strlen(idx));
    EXPECT_OPEN_FAILS(sdir, ENG_ENOTFOUND, "pytorch_model-00002-of-00002.bin",
                      "layers.0.fc2.weight");
    free(t.p);
    free(f.p);
}

/* ---- fuzzing ---- */

static uint64_t rng_state = 0x1234567;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Flip 1-8 random bits of `file` (or cut it short), open, and read whatever the table
 * then lists: any outcome is fine except a crash or an out-of-bounds read. With
 * `pickle_only` the flips all land in data.pkl, the first member of a torch.save zip. */
static void fuzz(const char *fixture, const char *file, int iters, int pickle_only,
                 int *n_opened)
{
    char *text = NULL;
    size_t n = 0;
    if (util_read_file(test_data(fixture), &text, &n)) abort();
    const uint8_t *u = (const uint8_t *)text;
    size_t lo = 0, span = n;
    if (pickle_only) {
        lo = 30 + (size_t)(u[26] | u[27] << 8) + (size_t)(u[28] | u[29] << 8);
        span = rd32(u + rd32(u + n - 22 + 16) + 20); /* first central entry's size */
        if (lo + span > n) abort();
    }
    uint8_t *m = malloc(n);
    const char *dir = tdir_new();
    for (int it = 0; it < iters; it++) {
        memcpy(m, text, n);
        int flips = 1 + (int)(rng() % 8);
        for (int k = 0; k < flips; k++)
            m[lo + rng() % span] ^= (uint8_t)(1u << (rng() % 8));
        size_t len = rng() % 16 == 0 ? (size_t)(rng() % n) : n;
        tfile_write(dir, file, m, len);
        struct weights *w = NULL;
        if (weights_open(&w, dir)) continue;
        (*n_opened)++;
        for (int32_t i = 0; i < w->n_tensors; i++) {
            const struct weights_tensor *t = &w->tensors[i];
            if (t->numel > (1 << 20)) continue;
            float *v = malloc((size_t)t->numel * sizeof *v + 1);
            EXPECT_EQ(weights_read_f32(w, t->name, t->ndim, t->shape, v), 0);
            free(v);
        }
        weights_close(w);
    }
    free(m);
    free(text);
}

TEST(random_damage_never_crashes)
{
    int opened = 0;
    fuzz("weights/bin/pytorch_model.bin", "pytorch_model.bin", 3000, 0, &opened);
    fuzz("weights/bin/pytorch_model.bin", "pytorch_model.bin", 3000, 1, &opened);
    fuzz("weights/bin_zip64/pytorch_model.bin", "pytorch_model.bin", 1000, 0, &opened);
    fuzz("weights/bin_v3/pytorch_model.bin", "pytorch_model.bin", 1000, 1, &opened);
    fuzz("weights/safetensors/model.safetensors", "model.safetensors", 1000, 0, &opened);
    /* Flips in tensor data leave a loadable file, so some opens must succeed. */
    printf("# fuzz: %d of 9000 damaged files still opened\n", opened);
    EXPECT(opened > 0);
}

int main(void)
{
    RUN(assembled_state_dict_loads);
    RUN(tensors_must_fit_their_storage);
    RUN(hostile_pickles_are_refused);
    RUN(big_endian_archives_are_refused);
    RUN(damaged_zips_are_refused);
    RUN(random_damage_never_crashes);
    tdir_cleanup();
    return test_done();
}
