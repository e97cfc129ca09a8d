/*
 * tool_param.c - see tool_param.h.
 */
#include "support/tool_param.h"

#include <string.h>

static const loom_param_desc_t loom__tool_params[] = {
#define LOOM_TOOL_PARAM_ROW(name, kind, def, meaning) {#name, LOOM_PARAM_##kind, def, meaning},
    LOOM_TOOL_PARAMS(LOOM_TOOL_PARAM_ROW)
#undef LOOM_TOOL_PARAM_ROW
};

const loom_param_desc_t *loom_tool_param_table(size_t *count) {
  *count = sizeof loom__tool_params / sizeof loom__tool_params[0];
  return loom__tool_params;
}

const char *loom_tool_param(const char *name) {
  for (size_t i = 0; i < sizeof loom__tool_params / sizeof loom__tool_params[0]; ++i)
    if (!strcmp(loom__tool_params[i].name, name)) return loom__param_text(&loom__tool_params[i]);
  return "";
}
