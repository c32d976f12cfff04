/* The rope-related facts of a Hugging Face config.json (top level, and text_config for VLMs). */
#ifndef ROPEKIT_CONFIG_JSON_H
#define ROPEKIT_CONFIG_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "ropekit.h"

typedef struct rk_hf_config_part {
    int64_t max_position_embeddings;
    int64_t original_max;      /* top-level original_max_position_embeddings (Phi-3) */
    int64_t rope_original_max; /* the one inside rope_parameters / rope_scaling */
    double factor;             /* rope scaling factor */
    char rope_type[32];        /* rope_type (5.x) or type (4.x) */
    char bad[160];             /* the first length-like value that is not a positive integer */
} rk_hf_config_part;

typedef struct rk_hf_config {
    rk_hf_config_part top, text;
} rk_hf_config;

ropekit_status rk_hf_config_parse(const char *text, size_t size, const char *name,
                                  rk_hf_config *cfg);
ropekit_status rk_hf_config_read(const char *path, rk_hf_config *cfg);
/* The table length the config implies; `how` explains it. 0 when it gives none: then `how` says
 * why ("gives no max_position_embeddings", "max_position_embeddings is -5, not a positive
 * integer", "max_position_embeddings is the string \"2048\", not a number", ...). */
int64_t rk_hf_config_max_positions(const rk_hf_config *cfg, char *how, size_t how_n);

#endif
