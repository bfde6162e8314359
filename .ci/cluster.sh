#!/bin/bash
# cluster.sh: a three-node RabbitMQ 4.0.5 cluster on this one machine, for the cluster tests
# (tests/cluster.rs), beside the host's 3.10.8 broker and the single 4.0.5 nodes.
#
#   cluster.sh start          start the three nodes and join them into one cluster, wait until
#                             each node's management API lists 3 running nodes (idempotent)
#   cluster.sh stop           stop the three nodes (3, 2, then 1)
#   cluster.sh stop-node N    stop node N (1..3); the other two keep the cluster
#   cluster.sh start-node N   start node N again; it rejoins the cluster (waits for 3 running)
#   cluster.sh status         one line per node, and the running nodes the cluster reports
#   cluster.sh ctl N ARGS...  rabbitmqctl ARGS against node N
#
# Each node is a .ci/rabbitmq4.sh node (same trixie root, same private epmd, same Erlang cookie,
# which is what lets them cluster) with its own node name, ports and data directory:
#   node N: rabbit4cN@localhost, port offset 9+N: AMQP 5683..5685, management 15683..15685,
#           prometheus 15703..15705, distribution 25683..25685,
#           data /var/lib/rabbitmq/mnesia/rabbit4cN@localhost inside the root.
#
# The cluster holds nothing but test data. When `start` finds no node of it running, it wipes
# the three data directories and forms a fresh cluster: a node restarted from old data waits
# (up to 5 minutes) for the peer that stopped last, and after a crash nobody knows which that
# was. A node started while others run keeps its data and rejoins by itself.
#
# Environment: CLUSTER_TIMEOUT=180 seconds to wait for 3 running nodes; the RMQ4_* settings of
# rabbitmq4.sh except RMQ4_NODE / RMQ4_PORT_OFFSET / RMQ4_NO_STATS, which this script sets.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
RMQ4="$HERE/rabbitmq4.sh"
BASE=${RMQ4_BASE:-${XDG_CACHE_HOME:-$HOME/.cache}/rabbitmq4}
ROOT=${RMQ4_ROOT:-$BASE/root}
TIMEOUT=${CLUSTER_TIMEOUT:-180}
NODES=(1 2 3)

log() { echo "cluster: $*" >&2; }
die() { log "error: $*"; exit 1; }

node_short() { echo "rabbit4c$1"; }
node_name() { echo "rabbit4c$1@localhost"; }
mgmt_port() { echo $((15682 + $1)); }
amqp_port() { echo $((5682 + $1)); }

check_n() { case "${1:-}" in 1|2|3) ;; *) die "node must be 1, 2 or 3, not '${1:-}'" ;; esac; }

rmq4() {   # rmq4 N ARGS...: rabbitmq4.sh for node N
    local n=$1; shift
    RMQ4_NODE="$(node_short "$n")" RMQ4_PORT_OFFSET=$((9 + n)) RMQ4_NO_STATS=0 "$RMQ4" "$@"
}

ctl() { local n=$1; shift; rmq4 "$n" ctl rabbitmqctl "$@"; }

node_alive() { rmq4 "$1" pid >/dev/null 2>&1; }   # the OS process runs (it may still be booting)

# How many nodes node N's management API reports as running (0 when it does not answer).
# columns= keeps the answer to [{"name":..,"running":..}], so counting the literal is exact.
running_seen_by() {
    local body
    body=$(curl -fsS -m 5 -u guest:guest "http://127.0.0.1:$(mgmt_port "$1")/api/nodes?columns=name,running" 2>/dev/null) || { echo 0; return; }
    grep -o '"running":true' <<<"$body" | wc -l
}

# How many nodes node N's cluster has, running or not (0 when it does not answer).
members_seen_by() {
    local body
    body=$(curl -fsS -m 5 -u guest:guest "http://127.0.0.1:$(mgmt_port "$1")/api/nodes?columns=name" 2>/dev/null) || { echo 0; return; }
    grep -o '"name":' <<<"$body" | wc -l
}

start_one() { rmq4 "$1" start >/dev/null; }

# Join node N (running, booted alone) to the cluster of node SEED.
join() {
    local n=$1 seed=$2
    log "joining $(node_name "$n") to $(node_name "$seed")"
    ctl "$n" stop_app >/dev/null
    ctl "$n" join_cluster "$(node_name "$seed")" >/dev/null
    ctl "$n" start_app >/dev/null
}

wipe_data() {
    local n=$1 d="$ROOT/var/lib/rabbitmq/mnesia/$(node_name "$1")"
    rm -rf "$d" "$d-feature_flags" "$d-plugins-expand" "$d.pid"
}

# Wait until every node's management API answers and reports WANT running nodes.
wait_running() {
    local want=$1 t0 n ok
    shift
    t0=$(date +%s)
    while :; do
        ok=1
        for n in "$@"; do
            [ "$(running_seen_by "$n")" = "$want" ] || { ok=0; break; }
        done
        [ "$ok" = 1 ] && return 0
        if [ $(( $(date +%s) - t0 )) -ge "$TIMEOUT" ]; then
            for n in "$@"; do log "$(node_name "$n") sees $(running_seen_by "$n") running node(s)"; done
            die "the cluster did not report $want running nodes within $TIMEOUT s"
        fi
        sleep 0.5
    done
}

start() {
    local t0 n any=0 seed=""
    t0=$(date +%s)
    for n in "${NODES[@]}"; do node_alive "$n" && any=1; done
    if [ "$any" = 0 ]; then
        log "forming a fresh cluster"
        for n in "${NODES[@]}"; do wipe_data "$n"; done
        start_one 1
        for n in 2 3; do start_one "$n"; join "$n" 1; done
    else
        for n in "${NODES[@]}"; do
            node_alive "$n" || { log "starting $(node_name "$n")"; start_one "$n"; }
        done
        # a node that boots without cluster data (deleted by hand, say) stands alone: join it
        for n in "${NODES[@]}"; do
            if [ "$(members_seen_by "$n")" -ge 2 ]; then seed=$n; break; fi
        done
        for n in "${NODES[@]}"; do
            if [ "$(members_seen_by "$n")" -lt 2 ]; then join "$n" "${seed:-1}"; seed=${seed:-1}; fi
        done
    fi
    wait_running 3 "${NODES[@]}"
    log "3 nodes running in $(( $(date +%s) - t0 )) s"
    status
}

stop() {
    local n
    # node 1 stops last: restarted from its data it would not wait for any peer
    for n in 3 2 1; do rmq4 "$n" stop; done
}

stop_node() {
    check_n "$1"
    rmq4 "$1" stop
}

start_node() {
    local n=$1 others=() m
    check_n "$n"
    start_one "$n"
    for m in "${NODES[@]}"; do [ "$m" = "$n" ] || others+=("$m"); done
    if [ "$(members_seen_by "$n")" -lt 2 ]; then join "$n" "${others[0]}"; fi
    wait_running 3 "${NODES[@]}"
}

status() {
    local n rc=0
    for n in "${NODES[@]}"; do
        if node_alive "$n"; then
            echo "node$n=$(node_name "$n") amqp=amqp://guest:guest@127.0.0.1:$(amqp_port "$n") management=http://127.0.0.1:$(mgmt_port "$n") running_seen=$(running_seen_by "$n")"
        else
            echo "node$n=$(node_name "$n") down"; rc=1
        fi
    done
    return $rc
}

[ "$(id -u)" = 0 ] || die "must run as root (rabbitmq4.sh chroots)"
case "${1:-}" in
    start) start ;;
    stop) stop ;;
    stop-node) stop_node "${2:-}" ;;
    start-node) start_node "${2:-}" ;;
    status) status ;;
    ctl) shift; check_n "${1:-}"; n=$1; shift; ctl "$n" "$@" ;;
    *) echo "usage: $0 start|stop|stop-node N|start-node N|status|ctl N ARGS..." >&2; exit 2 ;;
esac
