/*
 * url.h — parsing of dblock URLs (DESIGN §2) into their parts.
 *
 * The parser knows the URL grammar only; what each backend does with the
 * parts is the driver's business. The password is kept apart so that no
 * message ever needs to print it: use url->redacted in messages.
 */
#ifndef DBLOCK_URL_H
#define DBLOCK_URL_H

#include <stddef.h>

typedef enum dbl_backend {
  DBL_B_NONE = 0,
  DBL_B_PG,
  DBL_B_MY,
  DBL_B_LITE
} dbl_backend;

#define DBL_URL_MAX_PARAMS 16
#define DBL_URL_MAX_HOSTS 8

typedef struct dbl_url {
  dbl_backend backend;
  char *user, *password, *dbname, *path; /* decoded; NULL if absent */
  /* The host list, in URL order (libpq's multi-host form h1:p1,h2:p2);
   * a host is NULL when only its port was given, a port 0 when absent.
   * host / port are the first entry (NULL / 0 when there is none). */
  int nhosts;
  char *hosts[DBL_URL_MAX_HOSTS];
  int ports[DBL_URL_MAX_HOSTS];
  const char *host;
  int port;
  char *pg_keywords; /* a libpq "key=value ..." string given instead of a URL */
  int nparams;
  char *keys[DBL_URL_MAX_PARAMS], *vals[DBL_URL_MAX_PARAMS];
  char redacted[512]; /* the URL with the password replaced by "***" */
} dbl_url;

/* Parses text into *u. Returns 0, or DBLOCK_EINVAL / DBLOCK_ENOMEM with a
 * one-line reason (never containing the password) in why[why_len]. On
 * failure *u holds nothing to free. */
int dbl_url_parse(dbl_url *u, const char *text, char *why, size_t why_len);

/* Frees what dbl_url_parse allocated (the password is wiped first). */
void dbl_url_free(dbl_url *u);

/* The value of query parameter key, or NULL. */
const char *dbl_url_param(const dbl_url *u, const char *key);

#endif
