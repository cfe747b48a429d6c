/*
 * weights_zip.c - the zip container of torch.save files: central directory, zip64,
 * stored entries.
 *
 * torch.save (since PyTorch 1.6) writes an uncompressed zip: `<archive>/data.pkl`,
 * one `<archive>/data/<key>` entry per storage, and a few small records. Shards of
 * the big OPT checkpoints pass 4 GiB, so the zip64 end record and extra fields are
 * read too. Owns nothing: entries point into the caller's mapping.
 * Invariant: every returned entry's bytes lie inside the mapping; everything read
 * from the file is bounds-checked against `len` before it is dereferenced.
 * CRCs are not verified: that would read every byte of a 10 GB shard at open, and
 * the point of mmap is to read each tensor once, when it is converted.
 */
#include "err.h"
#include "util.h"
#include "weights_impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u
#define EOCD_SIZE 22u
#define CENTRAL_SIZE 46u
#define LOCAL_SIZE 30u

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* Where the central directory is and how many entries it claims. */
struct zip_dir {
    uint64_t offset, size, count;
};

/*
 * Find the end-of-central-directory record. It sits at the end, followed only by a
 * comment of at most 64 KiB, so the search is bounded. The zip64 record, when a field
 * overflowed, is found through the locator just before it.
 */
static int find_dir(const char *path, const uint8_t *map, size_t len, struct zip_dir *dir)
{
    *dir = (struct zip_dir){0, 0, 0};
    if (len < EOCD_SIZE)
        return err_set(ENG_EFORMAT, "%s: too short to be a zip archive", path);
    size_t lo = len - EOCD_SIZE > 0xffff ? len - EOCD_SIZE - 0xffff : 0;
    size_t pos = len - EOCD_SIZE + 1;
    do {
        pos--;
        if (rd32(map + pos) == SIG_EOCD && pos + EOCD_SIZE + rd16(map + pos + 20) <= len)
            break;
    } while (pos > lo);
    if (rd32(map + pos) != SIG_EOCD)
        return err_set(ENG_EFORMAT,
                       "%s: not a zip archive (no end of central directory; truncated, or "
                       "saved by torch < 1.6 in the legacy format)",
                       path);
    const uint8_t *e = map + pos;
    dir->count = rd16(e + 10);
    dir->size = rd32(e + 12);
    dir->offset = rd32(e + 16);
    if (dir->count == 0xffff || dir->size == 0xffffffffu || dir->offset == 0xffffffffu) {
        if (pos < 20 || rd32(map + pos - 20) != SIG_LOCATOR64)
            return err_set(ENG_EFORMAT, "%s: zip64 end record locator missing", path);
        uint64_t off64 = rd64(map + pos - 20 + 8);
        if (off64 > pos - 20 || pos - 20 - off64 < 56 || rd32(map + off64) != SIG_EOCD64)
            return err_set(ENG_EFORMAT, "%s: bad zip64 end of central directory", path);
        const uint8_t *z = map + off64;
        dir->count = rd64(z + 32);
        dir->size = rd64(z + 40);
        dir->offset = rd64(z + 48);
        pos = (size_t)off64;
    }
    if (dir->offset > pos || dir->size > pos - dir->offset)
        return err_set(ENG_EFORMAT,
                       "%s: central directory (%" PRIu64 " bytes at %" PRIu64
                       ") runs past its end record (truncated zip?)",
                       path, dir->size, dir->offset);
    if (dir->count > dir->size / CENTRAL_SIZE)
        return err_set(ENG_EFORMAT,
                       "%s: central directory claims %" PRIu64 " entries in %" PRIu64
                       " bytes",
                       path, dir->count, dir->size);
    return 0;
}

/*
 * Replace the 32-bit fields saturated at 0xffffffff with their values from the zip64
 * extra field (id 1), which lists only the saturated ones, in this order.
 */
static int read_zip64_extra(const uint8_t *x, size_t xlen, uint64_t *usize, uint64_t *csize,
                            uint64_t *local)
{
    while (xlen >= 4) {
        uint16_t id = rd16(x), n = rd16(x + 2);
        if (n > xlen - 4) return 0;
        if (id == 1) {
            const uint8_t *p = x + 4, *end = x + 4 + n;
            uint64_t *fields[] = {usize, csize, local};
            for (int i = 0; i < 3; i++) {
                if (*fields[i] != 0xffffffffu) continue;
                if (end - p < 8) return 0;
                *fields[i] = rd64(p);
                p += 8;
            }
            return 1;
        }
        x += 4 + n;
        xlen -= 4 + (size_t)n;
    }
    return *usize != 0xffffffffu && *csize != 0xffffffffu && *local != 0xffffffffu;
}

int weights_zip_read(const char *path, const uint8_t *map, size_t len,
                     struct weights_zip_entry **out, size_t *n_out)
{
    struct zip_dir dir;
    int err = find_dir(path, map, len, &dir);
    if (err) return err;
    struct weights_zip_entry *ents = xcalloc(dir.count ? dir.count : 1, sizeof *ents);
    const uint8_t *p = map + dir.offset, *end = p + dir.size;
    size_t n = 0;
    for (; n < dir.count; n++) {
        if (end - p < CENTRAL_SIZE || rd32(p) != SIG_CENTRAL) {
            err =
                err_set(ENG_EFORMAT, "%s: central directory entry %zu is damaged", path, n);
            goto fail;
        }
        uint16_t flags = rd16(p + 8), method = rd16(p + 10);
        uint64_t csize = rd32(p + 20), usize = rd32(p + 24), local = rd32(p + 42);
        size_t name_len = rd16(p + 28), extra_len = rd16(p + 30),
               comment_len = rd16(p + 32);
        if ((size_t)(end - p) - CENTRAL_SIZE < name_len + extra_len + comment_len) {
            err =
                err_set(ENG_EFORMAT,
                        "%s: central directory entry %zu runs past the directory", path, n);
            goto fail;
        }
        const char *name = (const char *)p + CENTRAL_SIZE;
        int nl = (int)name_len;
        if (!read_zip64_extra(p + CENTRAL_SIZE + name_len, extra_len, &usize, &csize,
                              &local)) {
            err = err_set(ENG_EFORMAT, "%s: entry %.*s: bad zip64 extra field", path, nl,
                          name);
            goto fail;
        }
        if (flags & 1) {
            err = err_set(ENG_EUNSUPPORTED, "%s: entry %.*s is encrypted", path, nl, name);
            goto fail;
        }
        if (method != 0 || csize != usize) {
            err = err_set(
                ENG_EUNSUPPORTED,
                "%s: entry %.*s is compressed (method %u); torch.save writes stored "
                "entries, so re-save the checkpoint with torch.save",
                path, nl, name, method);
            goto fail;
        }
        /* The data follows the local header, whose extra field may differ in length from
         * the central one (torch pads it to align the data to 64 bytes). */
        if (local > len || len - local < LOCAL_SIZE || rd32(map + local) != SIG_LOCAL) {
            err = err_set(ENG_EFORMAT,
                          "%s: entry %.*s: local header missing (truncated file?)", path,
                          nl, name);
            goto fail;
        }
        uint64_t data =
            local + LOCAL_SIZE + rd16(map + local + 26) + rd16(map + local + 28);
        if (data > len || usize > len - data) {
            err = err_set(ENG_EFORMAT,
                          "%s: entry %.*s: %" PRIu64 " bytes at offset %" PRIu64
                          " pass the end of the file (%zu bytes; truncated?)",
                          path, nl, name, usize, data, len);
            goto fail;
        }
        ents[n] = (struct weights_zip_entry){name, name_len, map + data, usize};
        p += CENTRAL_SIZE + name_len + extra_len + comment_len;
    }
    *out = ents;
    *n_out = n;
    return 0;
fail:
    free(ents);
    return err;
}
