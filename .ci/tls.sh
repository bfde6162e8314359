#!/bin/bash
# tls.sh: the certificates and the TLS brokers of tests/tls.rs.
#
#   tls.sh certs    make the certificates (idempotent; remade when missing or expiring)
#   tls.sh start    the certificates, then the 3.10.8 TLS node on the host and the 4.3.6 TLS node
#                   (.ci/rabbitmq4.sh with RMQ4_TLS_DIR); waits until both serve HTTPS (idempotent)
#   tls.sh stop     stop both nodes
#   tls.sh status   one line per node
#
# TLS_NODES="3.10 4.3" (the default) picks the nodes start, stop and status act on.
#
# Certificates, in $WARREN_TLS_DIR (default ~/.cache/warren-tls), made with openssl, EC P-256:
#   ca.pem / ca.key                the test CA ("warren test CA")
#   server.pem / server.key        the brokers' certificate: DNS:localhost, IP:127.0.0.1, from the CA
#   client.pem / client.key        warren's client certificate, from the CA
#   other-ca.pem / other-ca.key    a second CA the brokers do not trust
#   other-client.pem / .key        a client certificate from that second CA (refused by the brokers)
#   expired.pem / expired.key      a server certificate for localhost from the CA that expired on
#                                  2020-01-02 (tests serve it from a listener of their own)
#
# The 3.10.8 node runs from the host's rabbitmq-server as rabbittls@localhost beside the host's
# own node (the host's epmd, its own config, data and log directory under /var/lib/rabbitmq/tls-node):
#   AMQP 5677 and AMQPS 5687 (mutual TLS: verify_peer, fail_if_no_peer_cert),
#   management http 15677 and https 15687 (server certificate only),
#   Prometheus http 15697 and https 15707 (mutual TLS), distribution 25677.
# The 4.3.6 node (rabbit43tls@localhost, RMQ4_PORT_OFFSET=5): AMQP 5678 / AMQPS 5688, management
# 15678 / https 15688, Prometheus 15698 / https 15708, with the same TLS settings.
# The plain listeners are for the tests' own set-up (vhosts, messages); warren's side of the
# tests uses only the TLS ones. All listeners are on 127.0.0.1.
set -euo pipefail

DIR=${WARREN_TLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/warren-tls}
NODES=${TLS_NODES:-3.10 4.3}
HERE=$(cd "$(dirname "$0")" && pwd)

# The 3.10.8 node
NODE310=rabbittls@localhost
BASE310=/var/lib/rabbitmq/tls-node
AMQP310=5677 AMQPS310=5687 MGMT310=15677 MGMTS310=15687 PROM310=15697 PROMS310=15707 DIST310=25677

log() { echo "tls: $*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- certificates

# $1 name, $2 issuer name (or "self"), $3 subject CN, $4 extensions (openssl -addext lines via ext file)
issue() {
    local name=$1 issuer=$2 cn=$3 ext=$4
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$DIR/$name.key" 2>/dev/null
    if [ "$issuer" = self ]; then
        openssl req -x509 -new -key "$DIR/$name.key" -subj "/CN=$cn" -days 3650 -sha256 \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
            -out "$DIR/$name.pem"
    else
        printf '%b\n' "$ext" > "$DIR/$name.ext"
        openssl req -new -key "$DIR/$name.key" -subj "/CN=$cn" -out "$DIR/$name.csr"
        openssl x509 -req -in "$DIR/$name.csr" -CA "$DIR/$issuer.pem" -CAkey "$DIR/$issuer.key" \
            -CAcreateserial -days 825 -sha256 -extfile "$DIR/$name.ext" -out "$DIR/$name.pem" 2>/dev/null
        rm -f "$DIR/$name.csr" "$DIR/$name.ext"
    fi
}

# A certificate whose validity ended in the past: openssl x509 cannot back-date, openssl ca can.
issue_expired() {
    local name=expired ca="$DIR/expired-ca"
    rm -rf "$ca"; mkdir -p "$ca"; : > "$ca/index.txt"; echo 1000 > "$ca/serial"
    cat > "$ca/ca.cnf" <<EOF
[ca]
default_ca = test
[test]
database = $ca/index.txt
serial = $ca/serial
new_certs_dir = $ca
default_md = sha256
policy = any
copy_extensions = none
x509_extensions = server
[any]
commonName = supplied
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1
EOF
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$DIR/$name.key" 2>/dev/null
    openssl req -new -key "$DIR/$name.key" -subj "/CN=localhost" -out "$ca/$name.csr"
    openssl ca -batch -notext -config "$ca/ca.cnf" -cert "$DIR/ca.pem" -keyfile "$DIR/ca.key" \
        -startdate 20200101000000Z -enddate 20200102000000Z -in "$ca/$name.csr" -out "$DIR/$name.pem" 2>/dev/null
    rm -rf "$ca"
}

certs() {
    mkdir -p "$DIR"
    local f fresh=1
    for f in ca other-ca server client other-client expired; do
        [ -s "$DIR/$f.pem" ] && [ -s "$DIR/$f.key" ] || fresh=0
    done
    # Remade when a certificate that should be valid expires within 30 days.
    for f in ca other-ca server client other-client; do
        [ "$fresh" = 1 ] && ! openssl x509 -checkend $((30 * 86400)) -noout -in "$DIR/$f.pem" >/dev/null && fresh=0
    done
    if [ "$fresh" = 1 ]; then return 0; fi
    log "making the test CA and certificates in $DIR"
    local server="basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1"
    local client="basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth"
    issue ca self "warren test CA" ""
    issue other-ca self "unrelated test CA" ""
    issue server ca localhost "$server"
    issue client ca warren-test-client "$client"
    issue other-client other-ca warren-test-client "$client"
    issue_expired
    rm -f "$DIR"/*.srl
    chmod 644 "$DIR"/*.pem; chmod 600 "$DIR"/*.key
}

# The node's TLS settings (rabbitmq.conf lines), with its files in $1 as the node sees them.
tls_conf() {
    local d=$1 amqps=$2 mgmts=$3 proms=$4
    cat <<EOF
listeners.ssl.1 = 127.0.0.1:$amqps
ssl_options.cacertfile = $d/ca.pem
ssl_options.certfile = $d/server.pem
ssl_options.keyfile = $d/server.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
management.ssl.ip = 127.0.0.1
management.ssl.port = $mgmts
management.ssl.cacertfile = $d/ca.pem
management.ssl.certfile = $d/server.pem
management.ssl.keyfile = $d/server.key
prometheus.ssl.ip = 127.0.0.1
prometheus.ssl.port = $proms
prometheus.ssl.cacertfile = $d/ca.pem
prometheus.ssl.certfile = $d/server.pem
prometheus.ssl.keyfile = $d/server.key
prometheus.ssl.verify = verify_peer
prometheus.ssl.fail_if_no_peer_cert = true
EOF
}

# ---------------------------------------------------------------- the 3.10.8 node on the host

env310() {
    echo HOME=/var/lib/rabbitmq PATH=/usr/lib/rabbitmq/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 LC_ALL=C.UTF-8 \
        RABBITMQ_NODENAME=$NODE310 RABBITMQ_USE_LONGNAME=false \
        RABBITMQ_CONF_ENV_FILE=$BASE310/rabbitmq-env.conf \
        RABBITMQ_CONFIG_FILE=$BASE310/rabbitmq.conf \
        RABBITMQ_ENABLED_PLUGINS_FILE=$BASE310/enabled_plugins \
        RABBITMQ_MNESIA_BASE=$BASE310/mnesia RABBITMQ_LOG_BASE=$BASE310/log \
        RABBITMQ_PID_FILE=$BASE310/node.pid RABBITMQ_DIST_PORT=$DIST310
}

# shellcheck disable=SC2046
ctl310() { runuser -u rabbitmq -- env -i $(env310) /usr/lib/rabbitmq/bin/rabbitmqctl -n $NODE310 "$@"; }

pid310() {   # the node's pid, if the pid file names a live process that is this node
    local pid
    [ -r "$BASE310/node.pid" ] || return 1; pid=$(tr -dc "0-9" < "$BASE310/node.pid")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    # A pid file left by a node that died names a pid the system may have given to another process.
    # (3.10's beam takes its node name from the environment, not its command line)
    tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "RABBITMQ_NODENAME=$NODE310" && echo "$pid"
}

# A node left running by an earlier start (a session's own test run, say) may serve certificates
# that are no longer those of $DIR (remade, or another HOME's), or be stuck: then its HTTPS never
# answers with $DIR's CA. Such a node is stopped and started afresh instead of waited for.
https_within() {   # $1 port, $2 seconds
    local t0; t0=$(date +%s)
    until https_up "$1"; do
        [ $(( $(date +%s) - t0 )) -ge "$2" ] && return 1
        sleep 1
    done
}

https_up() {   # $1 port: the management API answers over TLS with the test CA
    curl -fsS -m 5 --cacert "$DIR/ca.pem" -u guest:guest "https://localhost:$1/api/overview" >/dev/null 2>&1
}

start310() {
    command -v rabbitmq-server >/dev/null || die "rabbitmq-server is not installed on the host"
    if pid310 >/dev/null; then
        if cmp -s "$DIR/ca.pem" "$BASE310/tls/ca.pem" && cmp -s "$DIR/server.pem" "$BASE310/tls/server.pem" \
            && https_within $MGMTS310 20; then
            log "$NODE310 already running"; print310; return 0
        fi
        log "$NODE310 runs but does not serve $DIR's certificates over https on $MGMTS310: restarting it"
        stop310
    fi
    if ! pid310 >/dev/null; then
        local p
        for p in $AMQP310 $AMQPS310 $MGMT310 $MGMTS310 $PROM310 $PROMS310 $DIST310; do
            ss -Hltn "sport = :$p" | grep -q . && die "port $p is already taken"
        done
        mkdir -p "$BASE310/tls" "$BASE310/mnesia" "$BASE310/log"
        cp "$DIR/ca.pem" "$DIR/server.pem" "$DIR/server.key" "$BASE310/tls/"
        {
            echo "# written by .ci/tls.sh at every start"
            echo "listeners.tcp.1 = 127.0.0.1:$AMQP310"
            echo "management.tcp.ip = 127.0.0.1"
            echo "management.tcp.port = $MGMT310"
            echo "prometheus.tcp.ip = 127.0.0.1"
            echo "prometheus.tcp.port = $PROM310"
            echo "loopback_users.guest = true"
            echo "log.console = false"
            echo "log.file.level = info"
            tls_conf "$BASE310/tls" $AMQPS310 $MGMTS310 $PROMS310
        } > "$BASE310/rabbitmq.conf"
        echo '[rabbitmq_management,rabbitmq_prometheus].' > "$BASE310/enabled_plugins"
        echo 'SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"' > "$BASE310/rabbitmq-env.conf"
        chown -R rabbitmq:rabbitmq "$BASE310"
        chmod 600 "$BASE310/tls/server.key"
        log "starting $NODE310"
        # shellcheck disable=SC2046
        setsid runuser -u rabbitmq -- env -i $(env310) /usr/lib/rabbitmq/bin/rabbitmq-server \
            </dev/null >"$BASE310/log/server.out" 2>&1 &
    fi
    local t0; t0=$(date +%s)
    until https_up $MGMTS310; do
        if [ $(( $(date +%s) - t0 )) -ge 120 ]; then
            tail -20 "$BASE310/log/server.out" >&2 || true
            tail -20 "$BASE310/log/$NODE310.log" >&2 2>/dev/null || true
            die "$NODE310: the management API did not answer over https on $MGMTS310 within 120 s"
        fi
        sleep 1
    done
    print310
}

print310() {
    echo "node=$NODE310 pid=$(pid310 || echo -) amqps=amqps://127.0.0.1:$AMQPS310 management=https://127.0.0.1:$MGMTS310 prometheus=https://127.0.0.1:$PROMS310 (plain: $AMQP310 / $MGMT310 / $PROM310)"
}

stop310() {
    local pid
    if pid=$(pid310); then
        log "stopping $NODE310 (pid $pid)"
        ctl310 stop "$BASE310/node.pid" >/dev/null 2>&1 || kill -TERM "$pid"
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
        kill -KILL "$pid"
    else
        log "$NODE310 is not running"
    fi
}

# ---------------------------------------------------------------- the 4.3.6 node

rmq43() {
    RMQ4_SERIES=4.3 RMQ4_NODE=rabbit43tls RMQ4_PORT_OFFSET=5 RMQ4_TLS_DIR="$DIR" "$HERE/rabbitmq4.sh" "$@"
}

start43() {
    if rmq43 status >/dev/null 2>&1 && ! https_within 15688 20; then
        log "rabbit43tls runs but does not serve $DIR's certificates over https on 15688: restarting it"
        rmq43 stop
    fi
    rmq43 start
    local t0; t0=$(date +%s)
    until https_up 15688; do
        [ $(( $(date +%s) - t0 )) -ge 60 ] && die "rabbit43tls: the management API did not answer over https on 15688"
        sleep 1
    done
}

# ---------------------------------------------------------------- main

[ "$(id -u)" = 0 ] || [ "${1:-}" = certs ] || die "must run as root"
case "${1:-}" in
    certs) certs; echo "$DIR" ;;
    start)
        certs
        for n in $NODES; do
            case "$n" in 3.10) start310 ;; 4.3) start43 ;; *) die "unknown node $n (3.10 or 4.3)" ;; esac
        done ;;
    stop)
        for n in $NODES; do
            case "$n" in 3.10) stop310 ;; 4.3) rmq43 stop ;; esac
        done ;;
    status)
        rc=0
        for n in $NODES; do
            case "$n" in
                3.10) if pid310 >/dev/null && https_up $MGMTS310; then print310; else echo "$NODE310 not running"; rc=1; fi ;;
                4.3) rmq43 status || rc=1 ;;
            esac
        done
        exit $rc ;;
    *) echo "usage: $0 certs|start|stop|status" >&2; exit 2 ;;
esac
