/* A growing text buffer, and string escaping for text and JSON output. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

void rk_buf_putn(rk_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void rk_buf_puts(rk_buf *b, const char *s) {
    rk_buf_putn(b, s, strlen(s));
}

void rk_buf_printf(rk_buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        rk_buf_putn(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    rk_buf_putn(b, big, (size_t)n);
    free(big);
}

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
