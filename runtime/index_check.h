/* The error of a failed index check (--fusion-guard-indices), one text for both runtimes:
 * the check's message (pipeline.index_check_messages: "file:line:col: index {index} is out
 * of range ...") with the bad index in place of "{index}". runtime/shim.c and
 * runtime/shim_cuda.c each define fusec_set_error(fmt, ...) before they include this file.
 * Returns fusec_run's status for a failed check (3: fusec.runtime raises IndexError). */
#ifndef FUSEC_INDEX_CHECK_H
#define FUSEC_INDEX_CHECK_H

#include <string.h>

static int fusec_report_index_error(const char *message, long long index) {
  const char *hole = strstr(message, "{index}");
  if (hole == NULL)
    fusec_set_error("index %lld out of range: %s", index, message);
  else
    fusec_set_error("%.*s%lld%s", (int)(hole - message), message, index, hole + 7);
  return 3;
}

#endif
