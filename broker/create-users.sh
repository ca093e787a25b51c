#!/usr/bin/env bash
# Create or update the mosquitto password file for an mqttrl broker (broker/acl roles).
#
#   MQTTRL_LEARNER_PASSWORD=... MQTTRL_TELEMETRY_PASSWORD=... MQTTRL_OPERATOR_PASSWORD=... \
#   MQTTRL_WORKER_PASSWORD=... broker/create-users.sh [options] [WORKER[:PASSWORD] ...]
#
# Options
#   -f FILE      password file (default: broker/passwd next to this script; created if missing)
#   -n N         add N workers named PREFIX0 .. PREFIX<N-1> (besides any named ones)
#   -p PREFIX    name prefix for -n (default: worker-)
#   -w           workers only: leave learner, telemetry and operator alone
#   -h           this help
# Environment
#   MQTTRL_LEARNER_PASSWORD, MQTTRL_TELEMETRY_PASSWORD, MQTTRL_OPERATOR_PASSWORD
#                required unless -w
#   MQTTRL_WORKER_PASSWORD  password of every worker given without :PASSWORD
#   MQTTRL_WORKERS          worker names (spaces or commas) used when none are given as arguments
#
# A worker's user name is its worker name: start it with
#   mqttrl-worker --username NAME --password ... --name NAME
# Existing users are updated (new password), others are kept. Nothing is invented:
# a role without a password stops the script before anything is written, and so does a
# password shorter than 12 characters.
# Note: mosquitto_passwd -b takes the password on its command line, so other local users
# can see it in `ps` while it runs; run this on a machine you trust.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
file="$here/passwd"
count=0
prefix="worker-"
workers_only=0
min_len=12

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "create-users.sh: $*" >&2; exit 2; }

while getopts ":f:n:p:wh" opt; do
  case "$opt" in
    f) file="$OPTARG" ;;
    n) count="$OPTARG" ;;
    p) prefix="$OPTARG" ;;
    w) workers_only=1 ;;
    h) usage; exit 0 ;;
    :) die "option -$OPTARG needs a value" ;;
    *) die "unknown option -$OPTARG (see -h)" ;;
  esac
done
shift $((OPTIND - 1))

command -v mosquitto_passwd >/dev/null 2>&1 || die "mosquitto_passwd not found (apt-get install mosquitto, or run it in the eclipse-mosquitto image)"
[[ "$count" =~ ^[0-9]+$ ]] || die "-n needs a number, got '$count'"

# ---- collect (name, password) pairs; validate everything before writing anything ----
names=()
passwords=()
add() {  # add NAME PASSWORD SOURCE
  local name="$1" pw="$2" what="$3"
  [[ "$name" =~ ^[A-Za-z0-9_.-]{1,64}$ ]] || die "invalid user name '$name': use 1-64 characters from A-Z a-z 0-9 _ . - (it becomes a topic level)"
  [ -n "$pw" ] || die "no password for $what '$name' (set it; this script does not invent passwords)"
  [ "${#pw}" -ge "$min_len" ] || die "password for '$name' is shorter than $min_len characters"
  local n
  for n in "${names[@]+"${names[@]}"}"; do
    [ "$n" != "$name" ] || die "user '$name' given twice"
  done
  names+=("$name")
  passwords+=("$pw")
}

if [ "$workers_only" = 0 ]; then
  add learner "${MQTTRL_LEARNER_PASSWORD:-}" "role (MQTTRL_LEARNER_PASSWORD)"
  add telemetry "${MQTTRL_TELEMETRY_PASSWORD:-}" "role (MQTTRL_TELEMETRY_PASSWORD)"
  add operator "${MQTTRL_OPERATOR_PASSWORD:-}" "role (MQTTRL_OPERATOR_PASSWORD)"
fi

specs=("$@")
if [ "${#specs[@]}" -eq 0 ] && [ -n "${MQTTRL_WORKERS:-}" ]; then
  read -r -a specs <<<"${MQTTRL_WORKERS//,/ }"
fi
for ((i = 0; i < count; i++)); do
  specs+=("${prefix}${i}")
done

for spec in "${specs[@]+"${specs[@]}"}"; do
  if [[ "$spec" == *:* ]]; then
    name="${spec%%:*}"
    pw="${spec#*:}"
  else
    name="$spec"
    pw="${MQTTRL_WORKER_PASSWORD:-}"
  fi
  case "$name" in
    learner | telemetry | operator) die "'$name' is a role, not a worker name (workers get worker rights by name; see broker/acl)" ;;
  esac
  add "$name" "$pw" "worker (NAME:PASSWORD or MQTTRL_WORKER_PASSWORD)"
done

[ "${#names[@]}" -gt 0 ] || die "nothing to do: give worker names, -n N, or leave out -w"

# ---- write ----------------------------------------------------------------------
if [ ! -e "$file" ]; then
  mkdir -p "$(dirname "$file")"
  (umask 077 && : >"$file")
  echo "created $file"
fi
for idx in "${!names[@]}"; do
  name="${names[$idx]}"
  if grep -q "^${name//./\\.}:" "$file"; then action="updated"; else action="added"; fi
  mosquitto_passwd -b "$file" "$name" "${passwords[$idx]}"
  case "$name" in
    learner | telemetry | operator) role="$name" ;;
    *) role="worker" ;;
  esac
  echo "$action $name ($role)"
done
chmod 600 "$file" 2>/dev/null || true
echo "password file: $file (${#names[@]} user(s) written; reload a running broker with SIGHUP or docker compose restart mosquitto)"
