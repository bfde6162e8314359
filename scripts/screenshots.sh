#!/usr/bin/env bash
# Re-takes the README screenshots (docs/*.png) from the real UI with the demo running.
#
# Needs:
#   - RabbitMQ on this machine: AMQP 127.0.0.1:5672, management API 127.0.0.1:15672, guest/guest
#     (the same broker the tests use; override with RABBIT_MGMT / RABBIT_AMQP / RABBIT_USER /
#     RABBIT_PASSWORD);
#   - cargo (builds warren), curl, python3 (standard library only: it drives chromedriver);
#   - chromium and chromedriver (Debian: apt-get install chromium chromium-driver);
#   - optional: pngquant and/or optipng, to make the images smaller (used when installed).
#
# What it does: builds warren, runs `warren demo` in its own vhost, runs warren with a
# temporary database and config (polls every 2 s, one alert rule that fires on the demo's DLQ,
# no users: anonymous access from loopback), lets history build up for $HISTORY_SECS, takes a
# DLQ snapshot, requeues three dead letters (a job), takes another snapshot, then takes a
# full-page screenshot of every page into $OUT_DIR. On exit, even on failure, it stops warren
# and the demo and deletes the demo vhost (`warren demo --cleanup`).
#
# Usage: scripts/screenshots.sh            (from anywhere; about 5 minutes with a built target)
#        HISTORY_SECS=60 scripts/screenshots.sh   (quicker, thinner charts)
#        WARREN_BIN=target/debug/warren scripts/screenshots.sh   (no build)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
HISTORY_SECS=${HISTORY_SECS:-240}   # demo traffic before the screenshots: the charts' history
PORT=${PORT:-18089}                 # warren's port for the run (loopback only)
DRIVER_PORT=${DRIVER_PORT:-19515}   # chromedriver's port
DEMO_VHOST=${DEMO_VHOST:-warren-demo}
BROKER=local                        # the broker's name in warren's config (it is in the URLs)
OUT_DIR=${OUT_DIR:-$ROOT/docs}
WIDTH=${WIDTH:-1400}                # desktop window width
PHONE_WIDTH=390                     # the one phone-width screenshot
MAX_HEIGHT=${MAX_HEIGHT:-3200}      # a page longer than this is cut (keeps each image small)
SETTLE_SECS=${SETTLE_SECS:-4}       # wait after loading a page: the charts fetch their data with JS
RABBIT_MGMT=${RABBIT_MGMT:-http://127.0.0.1:15672}
RABBIT_AMQP=${RABBIT_AMQP:-amqp://127.0.0.1:5672}
RABBIT_USER=${RABBIT_USER:-guest}
RABBIT_PASSWORD=${RABBIT_PASSWORD:-guest}

log() { printf '%s screenshots: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }

for tool in cargo curl python3 chromium chromedriver; do
    command -v "$tool" >/dev/null || die "needs $tool"
done
curl -sf -u "$RABBIT_USER:$RABBIT_PASSWORD" "$RABBIT_MGMT/api/overview" >/dev/null \
    || die "no RabbitMQ management API at $RABBIT_MGMT"
# `warren demo --cleanup` deletes the vhost at the end: never take over one in use.
if curl -sf -u "$RABBIT_USER:$RABBIT_PASSWORD" "$RABBIT_MGMT/api/vhosts/$DEMO_VHOST" >/dev/null; then
    die "vhost '$DEMO_VHOST' already exists (another demo running?): stop it, or run 'warren demo --cleanup', or set DEMO_VHOST"
fi

# A debug build: the test suite keeps its dependencies built, so it takes a minute or two where a
# release build takes many minutes and a few GB more of target/. Speed does not show in a screenshot.
# WARREN_BIN=path/to/warren skips the build and uses that binary.
if [ -n "${WARREN_BIN:-}" ]; then
    WARREN=$WARREN_BIN
else
    log "building warren (debug)"
    (cd "$ROOT" && CARGO_INCREMENTAL=0 cargo build --quiet)
    WARREN=$ROOT/target/debug/warren
fi
[ -x "$WARREN" ] || die "no warren binary at $WARREN"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/warren-shots.XXXXXX")
DEMO_PID='' WARREN_PID='' DRIVER_PID=''
cleanup() {
    local status=$?
    set +e
    for pid in "$DRIVER_PID" "$WARREN_PID" "$DEMO_PID"; do
        [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    if [ -f "$TMP/warren.toml" ]; then
        "$WARREN" demo --config "$TMP/warren.toml" --vhost "$DEMO_VHOST" --cleanup >/dev/null 2>&1 \
            || log "could not delete the demo vhost '$DEMO_VHOST'"
    fi
    [ "$status" -ne 0 ] && [ -d "$TMP" ] && log "failed; logs: $TMP/*.log" && tail -n 5 "$TMP"/*.log >&2
    [ "$status" -eq 0 ] && rm -rf "$TMP"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The password is a literal here (local guest account): the file stays in the temporary directory.
cat >"$TMP/warren.toml" <<EOF
listen = "127.0.0.1:$PORT"
database = "$TMP/warren.db"

[[brokers]]
name = "$BROKER"
management_url = "$RABBIT_MGMT"
user = "$RABBIT_USER"
password = "$RABBIT_PASSWORD"
amqp_url = "$RABBIT_AMQP"
vhosts_include = ["$DEMO_VHOST"]
poll_interval_secs = 2
stats_min_interval_secs = 2

# Fires within a minute of the demo: fulfillment rejects orders into its DLQ after three retries.
[[alerts]]
id = "dlq-growing"
name = "Dead letters piling up"
scope = { vhost = "$DEMO_VHOST", queue = "*.dlq" }
metric = "dlq_depth"
comparator = ">"
threshold = 5
for_secs = 20
severity = "warning"
description = "{queue}: {value} dead letters"
EOF
"$WARREN" check-config --config "$TMP/warren.toml" >/dev/null

log "starting the demo in vhost '$DEMO_VHOST' and warren on 127.0.0.1:$PORT"
"$WARREN" demo --config "$TMP/warren.toml" --vhost "$DEMO_VHOST" >"$TMP/demo.log" 2>&1 &
DEMO_PID=$!
# No `warren user`: with no users warren needs no login and answers only loopback requests.
"$WARREN" serve --config "$TMP/warren.toml" >"$TMP/warren.log" 2>&1 &
WARREN_PID=$!

URL=http://127.0.0.1:$PORT
for _ in $(seq 60); do
    curl -sf "$URL/readyz" >/dev/null && break
    kill -0 "$WARREN_PID" 2>/dev/null || die "warren stopped"
    sleep 1
done
curl -sf "$URL/readyz" >/dev/null || die "warren not ready after 60 s"

log "letting history build up for ${HISTORY_SECS}s"
sleep "$HISTORY_SECS"
kill -0 "$DEMO_PID" 2>/dev/null || die "the demo stopped"

DLQ=orders.fulfillment.dlq
API_DLQ="$URL/api/v1/queues/$BROKER/$DEMO_VHOST/$DLQ"
post() { curl -sf -X POST -H 'content-type: application/json' -d "$2" "$1"; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

# A job: move three dead letters back (by their positions in a snapshot). A move drops the
# snapshot, so the browser's snapshot is taken after it.
count=$(post "$API_DLQ/snapshot" '{"count": 100}' | field '["messages"].__len__()')
[ "$count" -ge 3 ] || die "the DLQ holds $count dead letters; give the demo more time (HISTORY_SECS)"
JOB=$(post "$API_DLQ/requeue" '{"selection": {"positions": [1, 2, 3]}}' | field '["job"]["id"]')
for _ in $(seq 30); do
    state=$(curl -sf "$URL/api/v1/jobs/$JOB" | field '["state"]')
    [ "$state" != running ] && break
    sleep 1
done
log "requeue job $JOB: $state"
sleep 3
post "$API_DLQ/snapshot" '{"count": 100}' >/dev/null
# Let the next polls and the charts' refresh see the move.
sleep 6

log "starting chromedriver"
chromedriver --port="$DRIVER_PORT" >"$TMP/chromedriver.log" 2>&1 &
DRIVER_PID=$!
for _ in $(seq 20); do
    curl -sf "http://127.0.0.1:$DRIVER_PORT/status" >/dev/null && break
    sleep 0.5
done

# name width path: one screenshot per line (the queue list is wider than 1400 px: its table
# scrolls inside the page, so the page width alone does not show it)
Q="/queues/$BROKER/$DEMO_VHOST"
cat >"$TMP/pages" <<EOF
overview $WIDTH /
queues 1600 /queues
queue $WIDTH $Q/orders.fulfillment
dlq-list 1600 /queues?dlq=true
dlq $WIDTH /dlq/$BROKER/$DEMO_VHOST/$DLQ
message $WIDTH /dlq/$BROKER/$DEMO_VHOST/$DLQ/messages/1
alerts $WIDTH /alerts
audit $WIDTH /audit
broker $WIDTH /brokers/$BROKER
job $WIDTH /jobs/$JOB
users $WIDTH /access
nodes $WIDTH /brokers/$BROKER/nodes
clients $WIDTH /brokers/$BROKER/clients
exchanges $WIDTH /brokers/$BROKER/exchanges
compare $WIDTH /compare?q=$Q/orders.fulfillment&q=$Q/orders.fulfillment.retry&q=$Q/$DLQ
queues-phone $PHONE_WIDTH /queues
EOF

mkdir -p "$OUT_DIR"
# A small WebDriver client: loads each page, waits for the charts, grows the window to the
# page's height (full page, at most MAX_HEIGHT) and, on desktop, to its width; saves the screenshot.
python3 - "$DRIVER_PORT" "$URL" "$OUT_DIR" "$MAX_HEIGHT" "$SETTLE_SECS" "$TMP/pages" <<'PY'
import base64, json, sys, time, urllib.request

port, base, out, max_height, settle, pages = sys.argv[1:]
max_height, settle = int(max_height), float(settle)
driver = f"http://127.0.0.1:{port}"

def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(driver + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.load(resp)["value"]

caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
    "binary": "/usr/bin/chromium",
    "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--force-device-scale-factor=1", "--window-size=1400,900"]}}}}
session = call("POST", "/session", caps)["sessionId"]
s = f"/session/{session}"
try:
    for line in open(pages):
        name, width, path = line.split(" ", 2)
        width, path = int(width), path.strip()
        call("POST", f"{s}/window/rect", {"width": width, "height": 900})
        call("POST", f"{s}/url", {"url": base + path})
        time.sleep(settle)
        # The window's outer height includes no browser chrome in headless mode, but measure it.
        extra = call("POST", f"{s}/execute/sync", {"script": "return window.outerHeight - window.innerHeight", "args": []})
        height = call("POST", f"{s}/execute/sync", {"script":
            "return Math.max(document.documentElement.scrollHeight, document.body.scrollHeight)", "args": []})
        # A desktop page wider than the window (a wide table) gets a wider window, not a cut.
        if width >= 1000:
            width = max(width, call("POST", f"{s}/execute/sync", {"script":
                "return document.documentElement.scrollWidth", "args": []}))
        call("POST", f"{s}/window/rect", {"width": width, "height": min(height, max_height) + max(extra, 0)})
        time.sleep(1.5)  # charts re-lay out after a resize
        png = base64.b64decode(call("GET", f"{s}/screenshot"))
        with open(f"{out}/{name}.png", "wb") as f:
            f.write(png)
        title = call("GET", f"{s}/title")
        print(f"{name}.png  {width}x{min(height, max_height)}  {path}  ({title})", file=sys.stderr)
finally:
    call("DELETE", s)
PY

# Smaller files: palette quantisation (lossy, invisible on a UI) then lossless recompression.
if command -v pngquant >/dev/null; then
    for name in $(cut -d' ' -f1 "$TMP/pages"); do
        pngquant --force --skip-if-larger --quality=70-95 --output "$OUT_DIR/$name.png" "$OUT_DIR/$name.png" || true
    done
fi
if command -v optipng >/dev/null; then
    for name in $(cut -d' ' -f1 "$TMP/pages"); do optipng -quiet -o2 "$OUT_DIR/$name.png"; done
fi
for name in $(cut -d' ' -f1 "$TMP/pages"); do
    log "$(du -k "$OUT_DIR/$name.png" | cut -f1) KB  $OUT_DIR/$name.png"
done
