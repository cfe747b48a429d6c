/*
 * jobstore_pg_files.c - the PostgreSQL job store's files: uploads streamed into
 * h2o_file_chunks inside one transaction per upload, the files rows, and bodies
 * read back by offset, from chunks or, for a batch's output and error files, from
 * its result lines (jobstore_pg.h).
 *
 * Invariant: a committed upload of B bytes has chunks 0..ceil(B/CHUNK)-1, every
 * one JOBSTORE_PG_CHUNK bytes long but the last; a batch's output file of B bytes
 * is its result lines at offsets 0..B-1 with no gap.
 * Thread: the store's owner.
 */
#include "jobstore_pg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FILE_COLS "id, bytes, created_at, filename, purpose, status"

static void file_from_row(const PGresult *r, int row, struct jobstore_file *f)
{
    memset(f, 0, sizeof *f);
    jobstore_pg_get_copy(r, row, 0, f->id, sizeof f->id);
    f->bytes = jobstore_pg_get_i64(r, row, 1);
    f->created_at = jobstore_pg_get_i64(r, row, 2);
    f->filename = jobstore_pg_get_dup(r, row, 3);
    jobstore_pg_get_copy(r, row, 4, f->purpose, sizeof f->purpose);
    jobstore_pg_get_copy(r, row, 5, f->status, sizeof f->status);
}

/* ---- uploads ---- */

int jobstore_pg_upload_begin(struct jobstore *base, struct jobstore_upload **out)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    struct jobstore_pg_upload *u = xcalloc(1, sizeof *u);
    u->base.js = base;
    u->js = js;
    jobstore_new_id("file-", u->id, sizeof u->id);
    int err = jobstore_pg_connect(js->conninfo, &u->conn);
    if (!err) err = jobstore_pg_begin(u->conn);
    if (err) {
        if (u->conn) PQfinish(u->conn);
        free(u);
        return err;
    }
    u->buf = xmalloc(JOBSTORE_PG_CHUNK);
    *out = &u->base;
    return 0;
}

/* Insert the filled part of the buffer as the next chunk. */
static int flush_chunk(struct jobstore_pg_upload *u)
{
    char seq[24];
    const char *vals[] = {u->id, jobstore_pg_i64(u->next_seq, seq), u->buf};
    const int lens[] = {0, 0, (int)u->fill};
    const int formats[] = {0, 0, 1}; /* the bytes go as they are, not escaped */
    PGresult *r = PQexecParams(u->conn,
                               "INSERT INTO h2o_file_chunks(file_id, seq, data)"
                               " VALUES($1, $2, $3::bytea)",
                               3, NULL, vals, lens, formats, 0);
    if (!r || PQresultStatus(r) != PGRES_COMMAND_OK)
        return jobstore_pg_fail(u->conn, r, "upload chunk");
    PQclear(r);
    u->next_seq++;
    u->fill = 0;
    return 0;
}

int jobstore_pg_upload_write(struct jobstore_upload *ub, const void *data, size_t len)
{
    struct jobstore_pg_upload *u = (struct jobstore_pg_upload *)ub;
    if (u->failed) return err_set(u->failed, "upload %s: an earlier write failed", u->id);
    const char *p = data;
    while (len) {
        size_t n = MIN(len, (size_t)JOBSTORE_PG_CHUNK - u->fill);
        memcpy(u->buf + u->fill, p, n);
        u->fill += n;
        p += n;
        len -= n;
        u->bytes += (int64_t)n;
        if (u->fill == JOBSTORE_PG_CHUNK) {
            int err = flush_chunk(u);
            if (err) {
                u->failed = err;
                return err;
            }
        }
    }
    return 0;
}

void jobstore_pg_upload_abort(struct jobstore_upload *ub)
{
    struct jobstore_pg_upload *u = (struct jobstore_pg_upload *)ub;
    /* Closing the connection rolls its transaction back: nothing of it remains. */
    PQfinish(u->conn);
    free(u->buf);
    free(u);
}

int jobstore_pg_upload_commit(struct jobstore_upload *ub, const char *filename,
                              const char *purpose, struct jobstore_file *out)
{
    struct jobstore_pg_upload *u = (struct jobstore_pg_upload *)ub;
    struct jobstore_pg *js = u->js;
    int err =
        u->failed ? err_set(u->failed, "upload %s: an earlier write failed", u->id) : 0;
    if (!err && u->fill) err = flush_chunk(u);
    char bytes[24], now[24];
    const char *vals[] = {u->id, jobstore_pg_i64(u->bytes, bytes),
                          jobstore_pg_i64(jobstore_now(&js->base), now), filename, purpose};
    if (!err)
        err = jobstore_pg_query(
            u->conn,
            "INSERT INTO h2o_files(id, bytes, created_at, filename, purpose,"
            " status) VALUES($1, $2, $3, $4, $5, 'processed')",
            5, vals, NULL, "insert file");
    if (!err) err = jobstore_pg_commit(u->conn);
    char id[JOBSTORE_ID_MAX];
    memcpy(id, u->id, sizeof id);
    jobstore_pg_upload_abort(ub); /* after a commit, only closes */
    if (err) return err;
    return out ? jobstore_pg_file_get(&js->base, id, out) : 0;
}

/* ---- files ---- */

int jobstore_pg_file_get(struct jobstore *base, const char *id, struct jobstore_file *out)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    int err = jobstore_pg_ready(js);
    if (err) return err;
    PGresult *r;
    err = jobstore_pg_query(js->conn, "SELECT " FILE_COLS " FROM h2o_files WHERE id=$1", 1,
                            (const char *[]){id}, &r, "get file");
    if (err) return err;
    const bool found = PQntuples(r) == 1;
    if (found) file_from_row(r, 0, out);
    PQclear(r);
    return found ? 0 : err_set(ENG_ENOTFOUND, "no such file: '%s'", id);
}

int jobstore_pg_file_list(struct jobstore *base, const char *purpose, const char *after,
                          int limit, bool ascending, struct jobstore_file **out, int *n,
                          bool *has_more)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    int err = jobstore_pg_ready(js);
    int64_t seq = 0;
    if (!err) err = jobstore_pg_after_seq(js, "h2o_files", after, ascending, &seq);
    if (err) return err;
    char s[24], l[24];
    const char *vals[] = {purpose, jobstore_pg_i64(seq, s), jobstore_pg_i64(limit + 1, l)};
    PGresult *r;
    err = jobstore_pg_query(js->conn,
                            ascending
                                ? "SELECT " FILE_COLS " FROM h2o_files WHERE ($1::text IS"
                                  " NULL OR purpose=$1) AND seq>$2 ORDER BY seq ASC"
                                  " LIMIT $3"
                                : "SELECT " FILE_COLS " FROM h2o_files WHERE ($1::text IS"
                                  " NULL OR purpose=$1) AND seq<$2 ORDER BY seq DESC"
                                  " LIMIT $3",
                            3, vals, &r, "list files");
    if (err) return err;
    const int rows = PQntuples(r);
    const int k = MIN(rows, limit);
    struct jobstore_file *fs =
        k ? xcalloc((size_t)k, sizeof *fs) : NULL; /* NULL for none, as SQLite */
    for (int i = 0; i < k; i++)
        file_from_row(r, i, &fs[i]);
    PQclear(r);
    *out = fs;
    *n = k;
    *has_more = rows > limit; /* one more was asked for */
    return 0;
}

int jobstore_pg_file_delete(struct jobstore *base, const char *id)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    int err = jobstore_pg_ready(js);
    if (!err) err = jobstore_pg_begin(js->conn);
    if (err) return err;
    PGresult *r;
    err = jobstore_pg_query(js->conn, "DELETE FROM h2o_files WHERE id=$1", 1,
                            (const char *[]){id}, &r, "delete file");
    if (!err) {
        const bool gone = strcmp(PQcmdTuples(r), "1") == 0;
        PQclear(r);
        if (!gone) err = err_set(ENG_ENOTFOUND, "no such file: '%s'", id);
    }
    /* The body in the same transaction: no orphan chunks, so no collection at open. */
    if (!err)
        err = jobstore_pg_query(js->conn, "DELETE FROM h2o_file_chunks WHERE file_id=$1", 1,
                                (const char *[]){id}, NULL, "delete file");
    if (!err) err = jobstore_pg_commit(js->conn);
    if (err) jobstore_pg_rollback(js->conn);
    return err;
}

/* ---- bodies ---- */

/* Read [offset, offset+len) of an uploaded body from its chunks. */
static int read_chunks(PGconn *conn, const char *id, int64_t offset, char *buf, size_t len,
                       size_t *got)
{
    size_t have = 0;
    while (have < len) {
        const int64_t at = offset + (int64_t)have;
        const int64_t seq = at / JOBSTORE_PG_CHUNK, within = at % JOBSTORE_PG_CHUNK;
        const size_t n = MIN(len - have, (size_t)(JOBSTORE_PG_CHUNK - within));
        char s[24], w[24], l[24];
        const char *vals[] = {id, jobstore_pg_i64(seq, s), jobstore_pg_i64(within + 1, w),
                              jobstore_pg_i64((int64_t)n, l)};
        /* Binary results: the bytes as stored, not bytea's hex text. */
        PGresult *r = PQexecParams(conn,
                                   "SELECT substring(data FROM $3::integer FOR $4::integer)"
                                   " FROM h2o_file_chunks WHERE file_id=$1 AND seq=$2",
                                   4, NULL, vals, NULL, NULL, 1);
        if (!r || PQresultStatus(r) != PGRES_TUPLES_OK)
            return jobstore_pg_fail(conn, r, "read file");
        const size_t chunk_len = PQntuples(r) == 1 ? (size_t)PQgetlength(r, 0, 0) : 0;
        if (chunk_len != n) {
            PQclear(r);
            /* The caller asked within the row's byte count: a short chunk is damage. */
            return err_set(ENG_EFORMAT, "file %s: chunk %lld is missing or short", id,
                           (long long)seq);
        }
        memcpy(buf + have, PQgetvalue(r, 0, 0), n);
        PQclear(r);
        have += n;
    }
    *got = have;
    return 0;
}

/* Read [offset, offset+len) of a batch's output (ok) or error file from its lines. */
static int read_results(PGconn *conn, const char *batch_id, bool ok, int64_t offset,
                        char *buf, size_t len, size_t *got)
{
    char o[24], e[24];
    const char *vals[] = {batch_id, ok ? "t" : "f", jobstore_pg_i64(offset, o),
                          jobstore_pg_i64(offset + (int64_t)len, e)};
    PGresult *r;
    /* From the line that holds byte $3 (the last one starting at or before it: an
     * index probe), not a scan from the file's start: a download of a million-line
     * output must cost one range per read, not the lines before it. */
    int err =
        jobstore_pg_query(conn,
                          "SELECT off, line FROM h2o_batch_results WHERE batch_id=$1"
                          " AND ok=$2 AND off < $4 AND off >= (SELECT coalesce(max(off),"
                          " 0) FROM h2o_batch_results WHERE batch_id=$1 AND ok=$2 AND"
                          " off <= $3) ORDER BY off",
                          4, vals, &r, "read output");
    if (err) return err;
    int64_t expect = -1; /* the next line's offset, to see a gap */
    for (int i = 0; i < PQntuples(r); i++) {
        const int64_t off = jobstore_pg_get_i64(r, i, 0);
        const char *line = PQgetvalue(r, i, 1);
        const int64_t l = (int64_t)strlen(line);
        if (expect >= 0 && off != expect) {
            PQclear(r);
            return err_set(ENG_EFORMAT, "batch %s: a gap in its output at byte %lld",
                           batch_id, (long long)expect);
        }
        if (i == 0 && off > offset) break; /* the window's first byte has no line */
        expect = off + l + 1;
        /* The part of [off, off+l+1) (the line and its '\n') inside the window. */
        const int64_t from = MAX(off, offset), to = MIN(off + l + 1, offset + (int64_t)len);
        for (int64_t b = from; b < to; b++)
            buf[b - offset] = b - off < l ? line[b - off] : '\n';
    }
    PQclear(r);
    if (expect < offset + (int64_t)len)
        return err_set(ENG_EFORMAT, "batch %s: its output is shorter than its file's size",
                       batch_id);
    *got = len;
    return 0;
}

/* Where a file's body is: its length, and the batch whose lines it is (or ""). */
struct body_loc {
    int64_t bytes;
    char batch_id[JOBSTORE_ID_MAX];
    bool ok;
};

static int locate(PGconn *conn, const char *id, struct body_loc *loc)
{
    PGresult *r;
    int err = jobstore_pg_query(
        conn, "SELECT bytes, batch_id, batch_ok FROM h2o_files WHERE id=$1", 1,
        (const char *[]){id}, &r, "read file");
    if (err) return err;
    const bool found = PQntuples(r) == 1;
    if (found) {
        loc->bytes = jobstore_pg_get_i64(r, 0, 0);
        jobstore_pg_get_copy(r, 0, 1, loc->batch_id, sizeof loc->batch_id);
        loc->ok = PQgetvalue(r, 0, 2)[0] == 't';
    }
    PQclear(r);
    return found ? 0 : err_set(ENG_ENOTFOUND, "no such file: '%s'", id);
}

/* Read [offset, offset+len) of the body at loc, clamped to its end. */
static int read_at(PGconn *conn, const char *id, const struct body_loc *loc, int64_t offset,
                   char *buf, size_t len, size_t *got)
{
    *got = 0;
    if (offset >= loc->bytes) return 0;
    len = (size_t)MIN((int64_t)len, loc->bytes - offset);
    return loc->batch_id[0]
               ? read_results(conn, loc->batch_id, loc->ok, offset, buf, len, got)
               : read_chunks(conn, id, offset, buf, len, got);
}

int jobstore_pg_file_read(struct jobstore *base, const char *id, int64_t offset, void *buf,
                          size_t len, size_t *got)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    struct body_loc loc;
    int err = jobstore_pg_ready(js);
    if (!err) err = locate(js->conn, id, &loc);
    return err ? err : read_at(js->conn, id, &loc, offset, buf, len, got);
}

/* ---- streams (jobstore_file_open) ---- */

/* A body read through stdio on a connection of its own (fopencookie), so that it
 * can be read on any thread while the store's connection serves its owner. */
struct reader {
    PGconn *conn;
    char id[JOBSTORE_ID_MAX];
    struct body_loc loc;
    int64_t off;
};

static ssize_t reader_read(void *cookie, char *buf, size_t size)
{
    struct reader *rd = cookie;
    size_t got = 0;
    if (read_at(rd->conn, rd->id, &rd->loc, rd->off, buf, size, &got) != 0) {
        log_error("jobstore: %s", err_msg());
        errno = EIO; /* stdio sets the stream's error flag */
        return -1;
    }
    rd->off += (int64_t)got;
    return (ssize_t)got;
}

static int reader_close(void *cookie)
{
    struct reader *rd = cookie;
    PQfinish(rd->conn);
    free(rd);
    return 0;
}

int jobstore_pg_file_open(struct jobstore *base, const char *id, FILE **out, int64_t *bytes)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    struct reader *rd = xcalloc(1, sizeof *rd);
    snprintf(rd->id, sizeof rd->id, "%s", id);
    int err = jobstore_pg_connect(js->conninfo, &rd->conn);
    if (!err) err = locate(rd->conn, id, &rd->loc);
    FILE *f = NULL;
    if (!err) {
        f = fopencookie(
            rd, "rb", (cookie_io_functions_t){.read = reader_read, .close = reader_close});
        if (!f) err = err_set(ENG_EIO, "fopencookie: %s", strerror(errno));
    }
    if (err) {
        if (rd->conn) PQfinish(rd->conn);
        free(rd);
        return err;
    }
    /* One query a chunk, not one per stdio's default 4 KiB. */
    setvbuf(f, NULL, _IOFBF, JOBSTORE_PG_CHUNK);
    *out = f;
    *bytes = rd->loc.bytes;
    return 0;
}
