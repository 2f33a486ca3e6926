#!/bin/bash
# Entrypoint of the tack-postgres image (scripts/build-images.mjs): on the first start initialises $PGDATA with
# user $POSTGRES_USER (default tack), its password from the file $POSTGRES_PASSWORD_FILE and a database of the
# same name, scram-sha-256 for every connection; then runs postgres in the foreground (stopped by SIGTERM).
set -euo pipefail
say() { printf 'tack-postgres: %s\n' "$*" >&2; }
user="${POSTGRES_USER:-tack}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  file="${POSTGRES_PASSWORD_FILE:-}"
  if [ -z "$file" ] || [ ! -r "$file" ] || [ ! -s "$file" ]; then
    say "POSTGRES_PASSWORD_FILE must name a readable, non-empty file holding the password of user $user (got '${file}'); tack-services init writes one"
    exit 1
  fi
  say "initialising $PGDATA (user $user, database $user)"
  initdb -D "$PGDATA" -U "$user" --pwfile="$file" --auth-local=scram-sha-256 --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >/dev/null
  printf "listen_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
  printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  echo "CREATE DATABASE \"$user\"" | postgres --single -D "$PGDATA" -j postgres >/dev/null
fi
exec postgres -D "$PGDATA"
