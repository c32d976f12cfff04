/* String escaping for text and JSON output (the growing buffer itself: src/core/buf.c). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

/* Length of the valid UTF-8 sequence at s (1..4), or 0. */
static int rk_utf8_len(const unsigned char *s) {
    unsigned c = s[0];
    int n;
    unsigned min;
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0)
        n = 2, min = 0x80, c &= 0x1f;
    else if ((c & 0xf0) == 0xe0)
        n = 3, min = 0x800, c &= 0x0f;
    else if ((c & 0xf8) == 0xf0)
        n = 4, min = 0x10000, c &= 0x07;
    else
        return 0;
    for (int i = 1; i < n; ++i) {
        if ((s[i] & 0xc0) != 0x80) return 0; /* also stops at the NUL */
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
    return n;
}

/* Text: printable ASCII and valid UTF-8 as is, other bytes as \xNN. */
void rk_buf_text_str(rk_buf *b, const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        int n = rk_utf8_len(u);
        if (n == 1 && (*u < 0x20 || *u == 0x7f || *u == '\\')) {
            if (*u == '\\')
                rk_buf_puts(b, "\\\\");
            else
                rk_buf_printf(b, "\\x%02x", *u);
            ++u;
        } else if (n == 0) {
            rk_buf_printf(b, "\\x%02x", *u);
            ++u;
        } else {
            rk_buf_putn(b, (const char *)u, (size_t)n);
            u += n;
        }
    }
}

void rk_buf_json_str(rk_buf *b, const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    rk_buf_putn(b, "\"", 1);
    while (*u) {
        int n = rk_utf8_len(u);
        if (n == 0) {
            rk_buf_puts(b, "\\ufffd");
            ++u;
        } else if (n == 1 && (*u < 0x20 || *u == '"' || *u == '\\' || *u == 0x7f)) {
            if (*u == '"')
                rk_buf_puts(b, "\\\"");
            else if (*u == '\\')
                rk_buf_puts(b, "\\\\");
            else if (*u == '\n')
                rk_buf_puts(b, "\\n");
            else if (*u == '\t')
                rk_buf_puts(b, "\\t");
            else
                rk_buf_printf(b, "\\u%04x", *u);
            ++u;
        } else {
            rk_buf_putn(b, (const char *)u, (size_t)n);
            u += n;
        }
    }
    rk_buf_putn(b, "\"", 1);
}
