/* batchrun.c - placeholder while being written. */
#include "srv.h"

struct batchrun *batchrun_create(struct srv *s) { (void)s; return NULL; }
void batchrun_destroy(struct batchrun *br) { (void)br; }
void batchrun_event(struct batchrun *br, struct req_event *ev) { (void)br; (void)ev; }
void batchrun_feed(struct batchrun *br) { (void)br; }
void batchrun_tick(struct batchrun *br) { (void)br; }
void batchrun_validate(struct batchrun *br, const char *id) { (void)br; (void)id; }
void batchrun_cancel(struct batchrun *br, const char *id) { (void)br; (void)id; }
void batchrun_stop(struct batchrun *br) { (void)br; }
