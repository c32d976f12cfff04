/* Just enough JSON to read a Hugging Face config.json: a bounded recursive-descent parser that
 * looks up the few keys the fusion needs. Malformed files are errors, never crashes. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_json.h"
#include "internal.h"

#define MAX_DEPTH 64
#define MAX_FILE (16u << 20)

typedef struct parser {
    const char *p, *end;
    int depth;
} parser;

static void ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t'))
        ps->p++;
}

/* Skips a string; copies at most cap-1 plain bytes into out (escapes copied raw). */
static int string(parser *ps, char *out, size_t cap) {
    if (ps->p >= ps->end || *ps->p != '"') return 0;
    ps->p++;
    size_t n = 0;
    while (ps->p < ps->end && *ps->p != '"') {
        if (*ps->p == '\\') {
            if (ps->p + 1 >= ps->end) return 0;
            ps->p++;
        }
        if (out && n + 1 < cap) out[n++] = *ps->p;
        ps->p++;
    }
    if (ps->p >= ps->end) return 0;
    ps->p++;
    if (out) out[n] = '\0';
    return 1;
}

static int value(parser *ps, rk_hf_config *cfg, int in_rope, int in_text);

/* A length-like value (max_position_embeddings, ...): a positive integer that fits int64. The
 * first bad value of each key is described in part->bad, for the message. */
static int64_t take_length(rk_hf_config_part *part, const char *key, double v, const char *text) {
    if (v >= 1 && v < 0x1p63 && v == floor(v)) return (int64_t)v;
    if (!part->bad[0])
        snprintf(part->bad, sizeof part->bad, "%s is %s, not a positive integer%s", key, text,
                 isfinite(v) && v >= 0x1p63 ? " (out of range)" : "");
    return -1;
}

static void take_number(rk_hf_config *cfg, const char *key, double v, const char *text,
                        int in_rope, int in_text) {
    rk_hf_config_part *part = in_text ? &cfg->text : &cfg->top;
    if (in_rope) {
        if (!strcmp(key, "factor")) part->factor = isfinite(v) ? v : 0.0;
        if (!strcmp(key, "original_max_position_embeddings"))
            part->rope_original_max = take_length(part, key, v, text);
    } else {
        if (!strcmp(key, "max_position_embeddings") ||
            (!strcmp(key, "n_positions") && part->max_position_embeddings == 0))
            part->max_position_embeddings = take_length(part, key, v, text);
        if (!strcmp(key, "original_max_position_embeddings"))
            part->original_max = take_length(part, key, v, text);
    }
}

/* A string where a length belongs ("2048"): noted in part->bad. */
static void take_string(rk_hf_config *cfg, const char *key, const char *value, int in_rope,
                        int in_text) {
    rk_hf_config_part *part = in_text ? &cfg->text : &cfg->top;
    int length_key = !strcmp(key, "max_position_embeddings") || !strcmp(key, "n_positions") ||
                     !strcmp(key, "original_max_position_embeddings");
    if (!length_key || (in_rope && strcmp(key, "original_max_position_embeddings") != 0)) return;
    if (!strcmp(key, "n_positions") && part->max_position_embeddings != 0) return;
    if (!strcmp(key, "max_position_embeddings") || !strcmp(key, "n_positions"))
        part->max_position_embeddings = -1;
    if (!part->bad[0])
        snprintf(part->bad, sizeof part->bad, "%s is the string \"%.40s\", not a number", key,
                 value);
}

static int object(parser *ps, rk_hf_config *cfg, int in_rope, int in_text) {
    if (++ps->depth > MAX_DEPTH) return 0;
    ps->p++; /* '{' */
    ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        ps->depth--;
        return 1;
    }
    for (;;) {
        char key[64];
        ws(ps);
        if (!string(ps, key, sizeof key)) return 0;
        ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') return 0;
        ps->p++;
        ws(ps);
        int rope = !in_rope && (!strcmp(key, "rope_parameters") || !strcmp(key, "rope_scaling"));
        int text = !in_text && !in_rope && !strcmp(key, "text_config");
        if (ps->p < ps->end && (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))) {
            char *e;
            errno = 0;
            double v = strtod(ps->p, &e); /* the buffer is NUL-terminated (see read) */
            if (e == ps->p || e > ps->end) return 0;
            char num[32];
            snprintf(num, sizeof num, "%.*s", (int)(e - ps->p < 31 ? e - ps->p : 31), ps->p);
            ps->p = e;
            take_number(cfg, key, v, num, in_rope, in_text);
        } else if (!in_rope && ps->p < ps->end && *ps->p == '"') {
            char sv[64];
            if (!string(ps, sv, sizeof sv)) return 0;
            take_string(cfg, key, sv, in_rope, in_text);
        } else if (in_rope && ps->p < ps->end && *ps->p == '"' &&
                   strcmp(key, "rope_type") != 0 && strcmp(key, "type") != 0) {
            char sv[64];
            if (!string(ps, sv, sizeof sv)) return 0;
            take_string(cfg, key, sv, in_rope, in_text);
        } else if (in_rope && (!strcmp(key, "rope_type") || !strcmp(key, "type")) &&
                   ps->p < ps->end && *ps->p == '"') {
            rk_hf_config_part *part = in_text ? &cfg->text : &cfg->top;
            if (!string(ps, part->rope_type, sizeof part->rope_type)) return 0;
        } else if (!value(ps, cfg, in_rope || rope, in_text || text)) {
            return 0;
        }
        ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == '}') {
            ps->p++;
            ps->depth--;
            return 1;
        }
        return 0;
    }
}

static int value(parser *ps, rk_hf_config *cfg, int in_rope, int in_text) {
    ws(ps);
    if (ps->p >= ps->end) return 0;
    char c = *ps->p;
    if (c == '{') return object(ps, cfg, in_rope, in_text);
    if (c == '"') return string(ps, NULL, 0);
    if (c == '[') {
        if (++ps->depth > MAX_DEPTH) return 0;
        ps->p++;
        ws(ps);
        if (ps->p < ps->end && *ps->p == ']') {
            ps->p++;
            ps->depth--;
            return 1;
        }
        for (;;) {
            if (!value(ps, cfg, in_rope, in_text)) return 0;
            ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == ']') {
                ps->p++;
                ps->depth--;
                return 1;
            }
            return 0;
        }
    }
    static const char *words[] = {"true", "false", "null", "NaN", "Infinity", "-Infinity"};
    for (size_t i = 0; i < sizeof words / sizeof *words; ++i) {
        size_t n = strlen(words[i]);
        if ((size_t)(ps->end - ps->p) >= n && !memcmp(ps->p, words[i], n)) {
            ps->p += n;
            return 1;
        }
    }
    char *e;
    (void)strtod(ps->p, &e);
    if (e == ps->p || e > ps->end) return 0;
    ps->p = e;
    return 1;
}

ropekit_status rk_hf_config_parse(const char *text, size_t size, const char *name,
                                  rk_hf_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    parser ps = {text, text + size, 0};
    ws(&ps);
    if (ps.p >= ps.end || *ps.p != '{' || !object(&ps, cfg, 0, 0))
        return rk_fail(ROPEKIT_ERROR_PARSE, "%s: not a JSON object (error near byte %ld)", name,
                       (long)(ps.p - text));
    ws(&ps);
    if (ps.p != ps.end)
        return rk_fail(ROPEKIT_ERROR_PARSE, "%s: trailing bytes after the JSON object", name);
    return ROPEKIT_OK;
}

ropekit_status rk_hf_config_read(const char *path, rk_hf_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    if (!*path) return rk_fail(ROPEKIT_ERROR_IO, "the config path is empty");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
    if (fd < 0) return rk_fail(ROPEKIT_ERROR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int dir = S_ISDIR(st.st_mode);
        close(fd);
        return rk_fail(ROPEKIT_ERROR_IO, "%s: %s", path,
                       dir ? "is a directory; pass the config file itself (e.g. "
                             "DIR/config.json)"
                           : "not a regular file (a Hugging Face config.json is expected)");
    }
    if ((uint64_t)st.st_size > MAX_FILE) {
        close(fd);
        return rk_fail(ROPEKIT_ERROR_PARSE, "%s: larger than 16 MiB, not a config.json", path);
    }
    char *buf = malloc(MAX_FILE + 1);
    if (!buf) {
        close(fd);
        return rk_fail(ROPEKIT_ERROR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, MAX_FILE + 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            free(buf);
            return rk_fail(ROPEKIT_ERROR_IO, "%s: read: %s", path, strerror(e));
        }
        if (r == 0 || (n += (size_t)r) > MAX_FILE) break;
    }
    close(fd);
    if (n > MAX_FILE) {
        free(buf);
        return rk_fail(ROPEKIT_ERROR_PARSE, "%s: larger than 16 MiB, not a config.json", path);
    }
    buf[n] = '\0';
    ropekit_status s = rk_hf_config_parse(buf, n, path, cfg);
    free(buf);
    return s;
}

int64_t rk_hf_config_max_positions(const rk_hf_config *cfg, char *how, size_t how_n) {
    const rk_hf_config_part *p = cfg->top.max_position_embeddings > 0 ? &cfg->top : &cfg->text;
    if (p->max_position_embeddings <= 0) {
        const char *bad = cfg->top.bad[0] ? cfg->top.bad : cfg->text.bad;
        snprintf(how, how_n, "%s%s", bad[0] ? bad : "gives no max_position_embeddings",
                 bad[0] && bad == cfg->text.bad ? " (in text_config)" : "");
        return 0;
    }
    int64_t maxp = p->max_position_embeddings;
    int64_t orig = p->rope_original_max > 0 ? p->rope_original_max : p->original_max;
    int extends = !strcmp(p->rope_type, "linear") || !strcmp(p->rope_type, "yarn") ||
                  !strcmp(p->rope_type, "dynamic") || !strcmp(p->rope_type, "longrope") ||
                  !strcmp(p->rope_type, "llama3");
    if (extends && p->factor > 1.0 && (orig <= 0 || orig == maxp) && p->factor * (double)maxp < 1e9) {
        snprintf(how, how_n, "max_position_embeddings %lld x %s factor %g", (long long)maxp,
                 p->rope_type, p->factor);
        return (int64_t)(p->factor * (double)maxp + 0.5);
    }
    snprintf(how, how_n, "max_position_embeddings %lld", (long long)maxp);
    return maxp;
}
