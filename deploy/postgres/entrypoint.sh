#!/bin/sh
# Starts PostgreSQL 15 for the DHP stack. On the first start (an empty data volume) it makes a
# random password for the role `dhp`, writes it as a libpq password file to /secrets/pgpass
# (owned by the DHP image's user, uid 10001, mode 0600: the DHP containers mount the volume
# and set PGPASSFILE), and creates the cluster with the database `dhp` owned by `dhp`. Only
# password (scram-sha-256) logins over TCP are accepted, on 127.0.0.1:$PGPORT by default. Nothing secret is in the image.
set -eu
BIN=/usr/lib/postgresql/15/bin
PGDATA=/var/lib/postgresql/data
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }

if [ ! -s /secrets/pgpass ]; then
  pw=$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')
  umask 077
  echo "*:*:*:dhp:$pw" > /secrets/pgpass.tmp
  chown 10001:10001 /secrets/pgpass.tmp
  mv /secrets/pgpass.tmp /secrets/pgpass
fi
chown postgres:postgres "$PGDATA" /run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  as_pg "$BIN/initdb" -D "$PGDATA" -U postgres --auth-local=peer --auth-host=scram-sha-256 \
    -E UTF8 --locale=C.UTF-8 >/dev/null
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pw=$(cut -d: -f5- /secrets/pgpass)
  # single-user mode: one statement per line, nothing listens yet
  printf "CREATE ROLE dhp LOGIN PASSWORD '%s';\nCREATE DATABASE dhp OWNER dhp;\n" "$pw" \
    | as_pg "$BIN/postgres" --single -D "$PGDATA" postgres >/dev/null
  echo "dhp-postgres: new cluster in $PGDATA (role and database dhp)" >&2
fi
# The stack runs on the host's network: listen on loopback only ($PG_LISTEN), on $PGPORT.
exec setpriv --reuid=postgres --regid=postgres --init-groups \
  "$BIN/postgres" -D "$PGDATA" -c "listen_addresses=${PG_LISTEN:-127.0.0.1}" \
  -c "port=${PGPORT:-5432}" -c "max_connections=${PG_MAX_CONNECTIONS:-200}"
