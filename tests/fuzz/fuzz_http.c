/*
 * fuzz_http.c - libFuzzer target for the HTTP request path: bytes in, through
 * server/http.c (and llhttp, built instrumented beside it), requests and a
 * response head out.
 *
 * The first input byte picks how the rest is cut into feeds and which limits
 * apply, so one corpus explores split fields and the limit paths (tiny limits make
 * 413/431 reachable with short inputs, and max_pipelined 1..4 the backpressure),
 * and whether POST /v1/files streams its body to a sink (the upload path).
 * Each piece goes through its own heap copy, freed after the feed: ASan then
 * catches any pointer the parser keeps into its input.
 * Beyond the sanitizers it checks the contract: only the documented statuses,
 * progress after every take (no stall), and well-formed requests; a streamed body
 * reaches the sink only after its request was taken, within the upload limit, and
 * ends at most once.
 */
#include "http.h"

#include "util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(cond)                                                                      \
    do {                                                                                   \
        if (!(cond)) abort();                                                              \
    } while (0)

/* The streamed body under way: its request was taken and its end has not come. */
struct stream_check {
    bool open;
    size_t bytes, limit;
};

static void on_data(void *ctx, const char *data, size_t len)
{
    struct stream_check *sc = ctx;
    REQUIRE(sc->open && len > 0 && len <= sc->limit - sc->bytes);
    sc->bytes += len;
    (void)data[len - 1];
}

static void on_end(void *ctx)
{
    struct stream_check *sc = ctx;
    REQUIRE(sc->open);
    sc->open = false;
}

static void use_request(struct http_request *r, struct stream_check *sc)
{
    char head[512];
    char chunk[20];
    REQUIRE(r->method && r->target && r->path);
    REQUIRE(r->http_major == 1 && (r->http_minor == 0 || r->http_minor == 1));
    REQUIRE((r->body == NULL) == (r->body_len == 0));
    if (r->body_streamed) {
        REQUIRE(!sc->open && r->body == NULL && strcmp(r->method, "POST") == 0);
        sc->open = true;
        sc->bytes = 0;
    }
    if (r->body) REQUIRE(r->body[r->body_len] == '\0');
    for (int32_t i = 0; i < r->n_headers; i++) {
        REQUIRE(r->headers[i].name[0] != '\0');
        for (const char *c = r->headers[i].name; *c; c++)
            REQUIRE(!(*c >= 'A' && *c <= 'Z'));
        (void)strlen(r->headers[i].value);
        REQUIRE(http_request_header(r, r->headers[i].name) != NULL);
    }
    (void)strlen(r->method);
    (void)strlen(r->target);
    if (r->query) (void)strlen(r->query);
    http_format_head(head, sizeof head, 200, "application/json", (int64_t)r->body_len,
                     r->keep_alive, "X-Request-Path: /\r\n");
    http_format_chunk_head(chunk, r->body_len);
    http_request_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t steps[8] = {SIZE_MAX, 1, 2, 3, 7, 16, 64, 512};
    if (size == 0) return 0;
    uint8_t mode = data[0];
    const char *in = (const char *)data + 1;
    size--;

    struct http_limits lim = http_limits_default();
    lim.max_pipelined = 1 + ((mode >> 4) & 3);
    if (mode & 0x80) {
        lim.max_header_bytes = 128;
        lim.max_body_bytes = 64;
        lim.max_headers = 4;
    }
    size_t step = steps[mode & 7];
    if (mode & 8) {
        lim.upload_path = "/v1/files";
        lim.max_upload_bytes = mode & 0x80 ? 256 : 1 << 20;
    }

    struct http_parser *p = http_parser_create(&lim);
    struct stream_check sc = {.limit = MAX(lim.max_upload_bytes, lim.max_body_bytes)};
    http_parser_set_body_sink(p, &(struct http_body_sink){on_data, on_end, &sc});
    size_t off = 0;
    while (off < size) {
        size_t n = size - off < step ? size - off : step;
        char *piece = malloc(n);
        memcpy(piece, in + off, n);
        size_t used = 0;
        int st = http_parser_feed(p, piece, n, &used);
        free(piece);
        (void)http_parser_take_continue(p);
        (void)http_parser_idle(p);
        struct http_request *r;
        int taken = 0;
        while ((r = http_parser_take(p)) != NULL) {
            use_request(r, &sc);
            taken++;
        }
        if (st) {
            REQUIRE(st == 400 || st == 413 || st == 417 || st == 431 || st == 501 ||
                    st == 505);
            char head[256];
            http_format_head(head, sizeof head, st, "application/json", 0, false, NULL);
            break;
        }
        REQUIRE(used <= n);
        /* Consuming less is backpressure, which only a full queue or a streamed
         * request's head causes: after taking everything the next feed must move. */
        if (used < n) REQUIRE(taken > 0 && taken <= lim.max_pipelined);
        off += used;
    }
    http_parser_destroy(p);
    return 0;
}
