#!/usr/bin/env bash
# The container's run steps (Dockerfile) without a container tool: no
# docker daemon, podman or registry is reachable on the machines this
# project is tested on, so this runs what the image runs, as the image runs
# it, and checks what the Dockerfile promises:
#
# - the binary needs only the C library's shared objects (libc, libm,
#   libgcc_s, the loader), all in debian:bookworm-slim;
# - `ferrite serve MODELS` started as the image starts it (the ENTRYPOINT,
#   the image's FERRITE_* variables, an unprivileged user id 10001 with no
#   home, the models read-only from FERRITE_MODELS) answers the
#   HEALTHCHECK command, /ready, a chat completion and an embedding;
# - SIGTERM (docker stop) ends it with status 0.
#
#   scripts/test-container-steps.sh [FERRITE_BIN]   (default target/debug/ferrite)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
bin=$(realpath "${1:-target/debug/ferrite}")
models=${FERRITE_MODELS:-$PWD/models}
[ -x "$bin" ] || { echo "no ferrite binary at $bin (cargo build -p ferrite-cli)" >&2; exit 1; }

# The ENTRYPOINT, the environment and the user, read from the Dockerfile so
# that this test follows it.
grep -q '^ENTRYPOINT \["ferrite", "serve"\]$' Dockerfile
grep -q '^USER 10001$' Dockerfile
health=$(sed -n 's/^  CMD \(curl .*\) || exit 1$/\1/p' Dockerfile)
[ -n "$health" ] || { echo "no HEALTHCHECK curl command in the Dockerfile" >&2; exit 1; }

# 1. Shared libraries: only the C library's.
libs=$(ldd "$bin" | awk '{print $1}' | sed 's#.*/##' | sort)
for l in $libs; do
  case $l in
    linux-vdso.so.1|libc.so.6|libm.so.6|libgcc_s.so.1|ld-linux-x86-64.so.2|ld-linux-aarch64.so.1|libpthread.so.0|libdl.so.2) ;;
    *) echo "the binary needs $l, which debian:bookworm-slim does not have" >&2; exit 1 ;;
  esac
done

# 2. Run it as the image does.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_user=()
if [ "$(id -u)" = 0 ]; then
  as_user=(setpriv --reuid=10001 --regid=10001 --clear-groups)
fi
log=$(mktemp)
env -i PATH=/usr/local/bin:/usr/bin:/bin FERRITE_MODELS="$models" FERRITE_HOST=0.0.0.0 \
  FERRITE_PORT="$port" FERRITE_LOG=info FERRITE_THREADS=2 \
  "${as_user[@]}" "$bin" serve smollm2 minilm >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
health=${health//8080/$port}
for _ in $(seq 1 240); do
  if ! kill -0 $pid 2>/dev/null; then
    echo "ferrite serve exited early:" >&2; cat "$log" >&2; exit 1
  fi
  if command -v curl >/dev/null; then
    $health >/dev/null 2>&1 && break
  else
    python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=5)" 2>/dev/null && break
  fi
  sleep 0.5
done
python3 - "$port" <<'PY'
import json, sys, time, urllib.request
port = sys.argv[1]
base = f"http://127.0.0.1:{port}"
def post(path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)
for _ in range(240):
    try:
        urllib.request.urlopen(base + "/ready", timeout=5)
        break
    except Exception:
        time.sleep(0.5)
else:
    sys.exit("never ready")
chat = post("/v1/chat/completions", {"model": "smollm2", "max_tokens": 8, "temperature": 0,
                                     "messages": [{"role": "user", "content": "Hello"}]})
assert chat["choices"][0]["message"]["content"], chat
emb = post("/v1/embeddings", {"model": "minilm", "input": "a container"})
assert len(emb["data"][0]["embedding"]) == 384, emb
print("container steps: health, ready, chat and embeddings answered on port", port)
PY
kill -TERM $pid
status=0
wait $pid || status=$?
[ "$status" = 0 ] || { echo "ferrite serve ended with status $status after SIGTERM:" >&2; cat "$log" >&2; exit 1; }
echo "container steps: SIGTERM ended the server with status 0"
