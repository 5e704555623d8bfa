#!/usr/bin/env bash
# A throwaway PostgreSQL on the loopback interface, for CI and the local cluster (deploy/cluster.sh).
#   deploy/postgres.sh start DIR PORT   -> initdb in DIR (first time), start on 127.0.0.1:PORT, print the SQLAlchemy URL
#   deploy/postgres.sh stop DIR         -> stop it (fast shutdown)
# Debian's postgresql package: binaries in /usr/lib/postgresql/<major>/bin (override with PG_BIN). initdb refuses to
# run as root, so as root the cluster belongs to the "postgres" user the package creates. Trust authentication on
# 127.0.0.1 only (listen_addresses = 127.0.0.1): a test database, never a production one.
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?data directory}; port=${3:-5432}
bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
[ -x "$bin/pg_ctl" ] || { echo "no PostgreSQL binaries (apt-get install postgresql, or set PG_BIN)" >&2; exit 1; }
as_owner() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case $cmd in
start)
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    if [ ! -f "$dir/PG_VERSION" ]; then
        as_owner "$bin/initdb" -D "$dir" -U postgres --auth=trust -E UTF8 >/dev/null
    fi
    as_owner "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200 -c fsync=off" start >/dev/null
    as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='finetune_fit'" \
        | grep -q 1 || as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres finetune_fit
    echo "postgresql+psycopg://postgres@127.0.0.1:$port/finetune_fit"
    ;;
stop)
    as_owner "$bin/pg_ctl" -D "$dir" -m fast -w stop >/dev/null
    ;;
*) echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
