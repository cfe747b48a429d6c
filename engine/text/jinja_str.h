/*
 * jinja_str.h - the UTF-8 string helpers jinja_str.c shares with the filters.
 * Thread: the render's.
 */
#ifndef H2O_JINJA_STR_H
#define H2O_JINJA_STR_H

#include "jinja_impl.h"

/* One code point at p (n > 0 bytes left) into *cp; returns its length in bytes. */
size_t jinja_str_decode(const char *p, size_t n, int32_t *cp);
/* Python's str.isspace() for one code point. */
int jinja_str_isspace(int32_t c);
/* str.strip(chars) (chars JV_NONE: whitespace); a view into s, nothing allocated. */
struct jv jinja_str_strip(struct jv s, struct jv chars, int left, int right);
/* str.replace(old, new, count) (count < 0: all). */
int jinja_str_replace(struct jinja_state *s, struct jv str, struct jv old, struct jv new_,
                      long long count, struct jv *out);
/* The upper / lower / title / capitalize filters (title: Jinja's word rule). */
int jinja_str_case_filter(struct jinja_state *s, struct jv str, const char *name,
                          struct jv *out);
/* A dict's keys (what 0), values (1) or [key, value] pairs (2) as a list. */
int jinja_str_dict_items(struct jinja_state *s, struct jv d, int what, struct jv *out);

#endif
