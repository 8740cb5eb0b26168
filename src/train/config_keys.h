// config_keys.h - what config.c's key table tells the YAML reader (config_yaml.c);
// internal to src/train.
#ifndef RG_TRAIN_CONFIG_KEYS_H
#define RG_TRAIN_CONFIG_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "retrograd.h"

#define KEY_MAX 128    // longest dotted key the loader composes
#define VALUE_MAX 512  // longest value text accepted

bool rg_config_is_key(const char *key);
// true when some key starts with prefix + "." (a section such as "training")
bool rg_config_is_section(const char *prefix);
bool rg_config_key_takes_list(const char *key);
// the key's type and range, as --help writes it
void rg_config_key_type(const char *key, char *buf, size_t cap);
// "unknown key ... did you mean ..."
rg_status rg_config_unknown_key(const char *key, const char *where, rg_error *err);
// checks one item of a list value (names the item and where it is)
rg_status rg_config_check_list_item(const char *key, const char *item, const char *where, rg_error *err);

#endif
