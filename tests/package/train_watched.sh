#!/bin/bash
# Builds examples/out_of_tree (fit_line) against an installed trainscope, then trains it on
# loopback (one ps, two workers) with a trainscope-sidecar watching, and checks what the sidecar
# says: every task up while training, a worker's stacks on demand, then every task done. Used on this machine (out_of_tree_test.sh,
# against `cmake --install`) and inside a fresh Debian root (fresh_root_test.sh, against the
# packages, the sidecar started as its systemd unit would start it).
#
# Usage: train_watched.sh EXAMPLE_SRC WORK_DIR SIDECAR_COMMAND...
#        train_watched.sh EXAMPLE_SRC WORK_DIR [WRAPPER...] unit
#   CMAKE_PREFIX_PATH (environment) says where trainscope is installed, when not in /usr.
#   SIDECAR_COMMAND starts the sidecar; "unit" starts it from the installed unit file and
#   /etc/default/trainscope-sidecar as systemd would, through WRAPPER if given (setpriv, to
#   drop root as the unit does), after writing the spec to /etc/trainscope/cluster_spec.json
#   and the ports into ARGS of /etc/default/trainscope-sidecar, as a user would; otherwise the
#   script adds --cluster_spec, --http_port and --grpc_port to SIDECAR_COMMAND.
# Exit 0 when every check passed; the first failure is printed.
set -euo pipefail
src=$1 work=$2
shift 2
mkdir -p "$work"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
say() { echo "train_watched: $*"; }
fail() {
  say "FAILED: $*"
  for f in "$work"/*.log; do echo "--- $f"; tail -n 15 "$f"; done
  exit 1
}

# N distinct ports nothing listens on (from /proc/net/tcp*, as minimal roots have no ss).
free_ports() {
  local port hex chosen=" "
  while [ "$(wc -w <<<"$chosen")" -lt "$1" ]; do
    port=$((20000 + RANDOM % 30000))
    hex=$(printf ':%04X ' "$port")
    [[ $chosen == *" $port "* ]] && continue
    grep -q "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null || chosen+="$port "
  done
  echo $chosen
}

say "building $src against the installed package"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release > "$work/cmake.log" 2>&1 ||
  fail "cmake configure (see $work/cmake.log)"
cmake --build "$work/build" -j"$(nproc)" >> "$work/cmake.log" 2>&1 || fail "the build"
fit_line=$work/build/fit_line

read -r ps w0 w1 http grpc <<<"$(free_ports 5)"
cluster="{\"cluster\": {\"ps\": [\"127.0.0.1:$ps\"], \"worker\": [\"127.0.0.1:$w0\", \"127.0.0.1:$w1\"]}}"
echo "$cluster" > "$work/cluster_spec.json"
# The API token a fresh capture needs (docs/security.md, "Credentials for actions"), private as
# the docs say: 0600, root's.
token=$work/api.token
(umask 077; od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "$token")
sidecar_flags=(--cluster_spec "$work/cluster_spec.json" --cluster_name fit-line
  --http_address 127.0.0.1 --http_port "$http" --grpc_port "$grpc")
[ $# -gt 0 ] || { echo "usage: $0 EXAMPLE_SRC WORK_DIR SIDECAR_COMMAND... | [WRAPPER...] unit"; exit 2; }
if [ "${!#}" = unit ]; then sidecar_command=(trainscope-sidecar); else sidecar_command=("$@"); fi

# A secret every user may read is refused with the fix, before anything starts.
cp "$token" "$work/open.token"
chmod 644 "$work/open.token"
if "${sidecar_command[@]}" "${sidecar_flags[@]}" --api_token_file "$work/open.token" \
  --check_config > "$work/open-token.log" 2>&1; then
  fail "the sidecar took a token every user may read: $(cat "$work/open-token.log")"
fi
grep -q "chmod 600 $work/open.token" "$work/open-token.log" ||
  fail "the refusal of a token every user may read does not say how to fix it: $(cat "$work/open-token.log")"
say "a token every user may read is refused: $(head -c 160 "$work/open-token.log")..."

if [ "${!#}" = unit ]; then
  wrapper=("${@:1:$#-1}")
  # As a user would, with the folders the package made: the spec, then the secrets (the same
  # files on every node, 0600, root's) in /etc/trainscope/credentials.
  [ "$(stat -c %a /etc/trainscope/credentials)" = 700 ] ||
    fail "the package did not make /etc/trainscope/credentials 0700: $(ls -ld /etc/trainscope/credentials 2>&1)"
  cp "$work/cluster_spec.json" /etc/trainscope/cluster_spec.json
  sidecar_flags[1]=/etc/trainscope/cluster_spec.json
  install -m 600 "$token" /etc/trainscope/credentials/api.token
  (umask 077; od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > /etc/trainscope/credentials/exchange.key)
  token=/etc/trainscope/credentials/api.token
  sed -i "s|^ARGS=.*|ARGS=\"${sidecar_flags[*]}\"|" /etc/default/trainscope-sidecar
  # As the unit's LoadCredential=trainscope:/etc/trainscope/credentials does: a private copy of
  # each file, trainscope_NAME, readable by the service's user only, in $CREDENTIALS_DIRECTORY.
  grep -qx 'LoadCredential=trainscope:/etc/trainscope/credentials' \
    /lib/systemd/system/trainscope-sidecar.service || fail "the unit loads no credentials"
  credentials=$work/credentials
  mkdir -p "$credentials"
  for f in /etc/trainscope/credentials/*; do
    install -m 400 -o 65534 -g 65534 "$f" "$credentials/trainscope_$(basename "$f")"
  done
  chown 65534:65534 "$credentials"
  chmod 500 "$credentials"
  exec_start=$(sed -n 's/^ExecStart=//p' /lib/systemd/system/trainscope-sidecar.service)
  say "sidecar as its unit starts it: ${wrapper[*]} $exec_start, with $(grep '^ARGS=' /etc/default/trainscope-sidecar), credentials $(ls "$credentials" | tr '\n' ' ')"
  (set -a; . /etc/default/trainscope-sidecar; set +a
   export CREDENTIALS_DIRECTORY=$credentials
   eval "exec \"\${wrapper[@]}\" $exec_start") > "$work/sidecar.log" 2>&1 &
else
  (exec "$@" "${sidecar_flags[@]}" --api_token_file "$token") > "$work/sidecar.log" 2>&1 &
fi
pids+=($!)
sidecar_pid=$!
ctl() { trainscopectl "$@" --sidecar "127.0.0.1:$http"; }

# Waits up to $1 seconds for `trainscopectl status` to show 3 tasks whose line matches $2 after
# the task's name (a state, then anything).
wait_states() {
  local deadline=$((SECONDS + $1)) out
  while [ $SECONDS -lt "$deadline" ]; do
    out=$(ctl status 2>&1 || true)
    if [ "$(grep -cE "^\s*(ps|worker):[0-9]+\s+$2" <<<"$out")" = 3 ]; then
      echo "$out"
      return 0
    fi
    sleep 0.2
  done
  echo "$out"
  return 1
}

task() {  # task TYPE INDEX STEPS: starts one task of fit_line
  TF_CONFIG="${cluster%\}},\"task\": {\"type\": \"$1\", \"index\": $2}}" \
    "$fit_line" --steps "$3" --cluster_name fit-line > "$work/$1-$2.log" 2>&1 &
  pids+=($!)
  eval "pid_$1_$2=$!"
}
say "training: ps:0 on $ps, worker:0 on $w0, worker:1 on $w1; sidecar on $http"
task ps 0 0
task worker 0 400000
task worker 1 400000
wait_states 30 "up\s.*(serving|training)" > "$work/status-up.txt" || fail "the sidecar never showed all three up: $(cat "$work/status-up.txt")"
say "every task up, the ps serving and the workers training:"
sed 's/^/  /' "$work/status-up.txt"
# The stacks of a running worker, on demand: the sidecar may attach (root, or CAP_SYS_PTRACE).
ctl stacks worker:0 --fresh --api_token_file "$token" > "$work/stacks.txt" 2>&1 || fail "trainscopectl stacks: $(cat "$work/stacks.txt")"
grep -q "FitLine" "$work/stacks.txt" || fail "no FitLine in worker:0's stacks: $(cat "$work/stacks.txt")"
say "worker:0's stacks on demand:"
grep -m1 -B3 "FitLine" "$work/stacks.txt" | sed 's/^/  /'
# The process that listens has no capability left; its helpers (captures, look-ups) keep theirs.
capeff=$(awk '/^CapEff:/ { print $2 }' "/proc/$sidecar_pid/status")
[ "$capeff" = 0000000000000000 ] || fail "the sidecar (pid $sidecar_pid) has CapEff $capeff, not 0"
helpers=$(cat "/proc/$sidecar_pid/task/$sidecar_pid/children" 2>/dev/null || true)
say "the sidecar's CapEff: $capeff; its helpers': $(for h in $helpers; do
  awk '/^CapEff:/ { printf "%s ", $2 }' "/proc/$h/status"; done)"

if [ -n "${credentials:-}" ]; then
  grep -q "the exchange is signed with the cluster key" "$work/sidecar.log" ||
    fail "the sidecar did not take exchange.key from its credentials"
  say "the sidecar took api.token (the fresh capture above) and exchange.key from \$CREDENTIALS_DIRECTORY"
fi

# SIGUSR1: finish training now (the runtime's signal), so the run is short whatever the machine.
kill -USR1 "$pid_worker_0" "$pid_worker_1"
for t in worker_0 worker_1 ps_0; do
  pid=$(eval echo "\$pid_$t")
  wait "$pid" || fail "$t exited with $?"
done
grep -h "fit_line: y = " "$work"/worker-*.log | sed 's/^/  /'
awk '/fit_line: y = / { w = $4; b = $7; ok = (w - 2)^2 < 0.01 && (b + 1)^2 < 0.01 }
     END { exit !ok }' "$work/worker-0.log" || fail "worker:0 did not fit y = 2 x - 1"
wait_states 15 "done\b" > "$work/status-done.txt" || fail "the sidecar never showed all three done: $(cat "$work/status-done.txt")"
say "every task done after training:"
sed 's/^/  /' "$work/status-done.txt"
say "passed"
