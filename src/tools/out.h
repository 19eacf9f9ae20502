/*
 * out.h — how the dblock command prints: table cells and columns (text
 * output) and lock rows as JSON (--json). Everything goes to stdout.
 */
#ifndef DBLOCK_TOOLS_OUT_H
#define DBLOCK_TOOLS_OUT_H

#include <stddef.h>

#include "dblock.h"

/* Display width of a UTF-8 string (code points; good enough for tables). */
size_t out_width(const char *s);

/* Copies s into out for a table cell: control characters become \xNN, so
 * a name cannot break the table or drive the terminal. */
void out_cell(char *out, size_t size, const char *s);

/* Prints s and, unless it is the last column, pads it to width plus the
 * two spaces between columns. */
void out_padded(const char *s, size_t width, int last);

/* Prints a lock row as one JSON object (no newline): name, "row":true,
 * strategy, held, holder, fence, hold count, times (ISO-8601 and µs);
 * with top (an object printed on its own, not in a list) "version" first. */
void out_json_info(const dblock_lock_info *i, int top);

/* The holder column: "HOST pid P thread T", or "-" when nobody holds the
 * lock (or the row does not say who). */
void out_holder(char *out, size_t size, const dblock_lock_info *i);

#endif
