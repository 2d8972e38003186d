#!/bin/sh
# First start on an empty volume: the cluster, its user with a password, its database.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/password
    initdb --username="$POSTGRES_USER" --pwfile=/tmp/password --auth-local=trust \
        --auth-host=scram-sha-256 >/dev/null
    rm /tmp/password
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    pg_ctl -w start -o "-c listen_addresses=''" >/dev/null
    if [ "$POSTGRES_DB" != "postgres" ]; then
        createdb --username="$POSTGRES_USER" "$POSTGRES_DB"
    fi
    pg_ctl -w stop >/dev/null
fi
exec postgres -c listen_addresses='*'
