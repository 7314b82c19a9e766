#!/bin/bash
# bundle-agent bootstrap (installed by the MachineConfig as /etc/bundle-agent/bundle-agent-bootstrap.sh,
# run by bundle-agent-bootstrap.service at boot and when a stick is mounted under /run/media).
# On a node where the agent is not installed yet, with no registry to pull it from: takes the agent
# image from a stick (the files `bundle create --agent-image` writes beside the bundle:
# bundle-agent-VERSION-ARCH.oci.tar and its signed statement ….oci.tar.sig), checks it, loads it
# into containers-storage, points the Quadlet unit at it by digest and starts the agent.
# Only what RHCOS ships: bash, coreutils, findutils, util-linux (flock), openssl, skopeo, systemd.
#
#   bundle-agent-bootstrap.sh [--media DIR]... [--config FILE | --key FILE... | --keys DIR] [--root DIR]
#                             [--work DIR] [--storage DRIVER@GRAPHROOT+RUNROOT] [--unit NAME]
#                             [--want-version VERSION] [--upgrade] [--no-start]
#   bundle-agent-bootstrap.sh --installed [--root DIR] [--storage ...] [--unit NAME]
#   bundle-agent-bootstrap.sh --containerd SOCKET [--ctr PATH] [--want-version VERSION] [--media DIR]... [--key FILE]... [--work DIR]
#
#   --media DIR    where sticks are mounted, searched 3 levels deep (default /run/media)
#   --config FILE  the agent's config: its trust.keys are the keys trusted here, exactly as the agent
#                  trusts them (default ROOT/etc/bundle-agent/config.yaml; each path under --root)
#   --key FILE     trust this public key instead (repeatable; the DaemonSet's, which has no config here)
#   --keys DIR     trust DIR/*.pub instead (kept for older callers)
#                  Every trusted key, as the agent's: owned by root (or the caller), not writable by
#                  group or others, nor any directory above it; else nothing is loaded.
#   --root DIR     prefix of the config, the unit files, the drop-in, /run/issue.d and the lock
#                  (default /); not of --work, --storage or the keys --key/--keys name
#   --work DIR     the archive's copy and skopeo's temporary files (skopeo --tmpdir) go into a
#                  directory made here, removed on exit, stop or timeout (default /var/tmp)
#   --storage S    a containers-storage other than the node's default, as skopeo writes it
#   --want-version V  load exactly bundle-agent V (the DaemonSet's image: tag), not the newest
#   --upgrade      also when an agent is installed (the plain unit, which does not upgrade itself):
#                  load a newer signed agent from the stick, point the drop-in at it and restart
#   --no-start     load and write the drop-in, no systemctl (for a root without systemd)
#   --containerd S k3s, RKE2, containerd (the DaemonSet, imagePullPolicy: Never): import into
#                  containerd's k8s.io namespace through socket S with ctr (--ctr PATH: k3s's
#                  or RKE2's ctr); no unit, drop-in or systemctl
#   --installed    exit 0 when the image the agent's unit would run is in storage, else 1 (the
#                  unit's ExecCondition=: no start, no restart loop, until a stick brings it). When
#                  it is missing (CRI-O's wipe after an unclean shutdown empties the store podman
#                  shares on RHCOS) but the node kept its archive (below), that archive is checked
#                  again as one from a stick (signature, size, sha256, the digest the unit names)
#                  and loaded first: 0 once it is in storage; 1 (skip) when nothing kept names it
#                  or it is refused; 255 (the start fails, Restart= retries) when another run held
#                  the lock for INSTALLED_LOCK_SECONDS or the disk is full. One line says why.
#   --wait-started SECONDS  wait until the agent's start-up is done (ROOT/var/lib/bundle-agent/started:
#                  images restored, a loaded release served again), at most SECONDS, while the
#                  kubelet has not started yet and the agent ($MAINPID) lives; always exit 0
#                  (the unit's ExecStartPost=: the kubelet, ordered after the unit, waits for it)
#
# The agent's unit is the Quadlet one (/etc/containers/systemd/UNIT.container: the drop-in is
# UNIT.container.d/image.conf, Image=) or, with podman before 4.4, the plain one generate.mjs
# --plain-unit writes (/etc/systemd/system/UNIT.service: the drop-in is UNIT.service.d/image.conf,
# Environment=BUNDLE_AGENT_IMAGE=); whichever is installed.
#
# Which agent: every statement on the media (at most MAX_STATEMENTS, the first by path) is read and
# checked: at most 4 KiB, every field once and well-formed (version a semver), signed by a trusted
# key (openssl: ECDSA P-256 DER over sha256, or Ed25519 raw), the node's architecture, and a version
# not older than the unit's own Image= tag (the agent would switch back to that one, which the node
# does not have). Of these, the highest SIGNED version (semver precedence, pre-releases below their
# release) is chosen, or exactly --want-version. Only the chosen one is loaded; if its archive is
# missing, cut short or damaged, that is the fault reported: no silent fall back to an older agent.
# Nothing eligible: the console names the reason of the candidate that came closest.
# The chosen archive: beside its statement, a regular file (no symlink), the statement's size;
# copied off the stick into --work (a stick pulled now fails the copy; what is loaded can no longer
# change under us) and that copy's size and sha256 checked; loaded with skopeo copy
# oci-archive:COPY containers-storage:localhost/offline-bundle/bundle-agent:VERSION, then the stored
# manifest digest must be the statement's. Any failure removes the image.
# Only then: the drop-in image.conf (Image=…@sha256:…, temp file + rename), daemon-reload, start.
# Each refusal is one journal line (stderr) and one console line (/run/issue.d/bundle-agent.issue,
# the agent's own file, which the agent replaces once it runs). A run that finds the drop-in's image
# in storage (the agent is installed) does nothing (unless --upgrade); two runs at once are
# serialised by flock and the second finds the first's work done.
# Kept archive: an agent loaded from a stick (or --upgrade) leaves its verified archive and
# statement in ROOT/var/lib/bundle-agent/agent-image/, for --installed to load again after a wipe.
# A run that finds the agent installed and a stick with a newer signed agent (one a bundle's
# self-upgrade switches to: the image reaches storage through CRI-O, not through this script)
# keeps that one too, checked the same way, so the kept archive follows the image the unit runs.
# Kept: the archive the unit runs, the newest one seen and an unconfirmed self-upgrade's rollback
# target, nothing else (each at most MAX_KEPT_ARCHIVE_BYTES, weighed before any copy; pruned at
# every run); a kept pair that no longer matches a stick's statement and sha256 is kept again.
# A run that finds the image the unit runs wiped loads it again from its kept pair first; failing
# that, no agent older than that one is loaded, and its kept pair stays.
set -u
shopt -s lastpipe
umask 022
export LC_ALL=C

PROG=bundle-agent-bootstrap
REPOSITORY=localhost/offline-bundle/bundle-agent
MAX_STATEMENT_BYTES=4096
MAX_ARCHIVE_BYTES=4294967296
# a kept archive (two at most: the one the unit runs and the newest seen) costs /var this much each;
# an agent image is ~100 MB, and a larger one is loaded but not kept
MAX_KEPT_ARCHIVE_BYTES=1073741824
# statements read per run (each is an openssl call): junk on a stick costs bounded time
MAX_STATEMENTS=32
# --installed is bundle-agent.service's ExecCondition=. systemd(5): 1-254 skips the start and the
# unit is not failed, so Restart= never retries it (right while nothing can load the image: a
# stick starts the unit); 255 fails the start and Restart=on-failure tries again RestartSec=
# later (a wait for the lock, a full disk: it may work in a moment).
EXIT_SKIP=1
EXIT_RETRY=255
# how long --installed waits for another run's lock: the unit's TimeoutStartSec=360 must still
# hold the copy, hash and load of a kept archive after it (and --wait-started's wait)
INSTALLED_LOCK_SECONDS=60
# a run for a stick waits longer for another (its unit allows 20 min: a slow stick's load)
BOOTSTRAP_LOCK_SECONDS=900
MEDIA=()
KEYS=
KEY_FILES=()
CONFIG=
WANT=
UPGRADE=0
ROOT=/
WORK=/var/tmp
STORAGE=
UNIT=bundle-agent
START=1
CHECK_ONLY=0
CONTAINERD=
CTR=ctr

# One journal line: names from a stick may hold newlines or escape sequences.
# While HOLD_LOG=1 the line is held in HELD_LOG (the last one), for one line to say it with its consequence.
log() {
  local line
  line=$(printf '%s' "$*" | tr '\000-\037\177' '?')
  if [ "${HOLD_LOG:-0}" = 1 ]; then HELD_LOG=$line; return 0; fi
  printf '%s: %s\n' "$PROG" "$line" >&2
}
# the comment block at the top of this file
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --media) [ $# -ge 2 ] || usage; MEDIA+=("$2"); shift 2 ;;
    --keys) [ $# -ge 2 ] || usage; KEYS=$2; shift 2 ;;
    --key) [ $# -ge 2 ] || usage; KEY_FILES+=("$2"); shift 2 ;;
    --config) [ $# -ge 2 ] || usage; CONFIG=$2; shift 2 ;;
    --want-version) [ $# -ge 2 ] || usage; WANT=$2; shift 2 ;;
    --upgrade) UPGRADE=1; shift ;;
    --root) [ $# -ge 2 ] || usage; ROOT=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || usage; WORK=$2; shift 2 ;;
    --storage) [ $# -ge 2 ] || usage; STORAGE=$2; shift 2 ;;
    --unit) [ $# -ge 2 ] || usage; UNIT=$2; shift 2 ;;
    --no-start) START=0; shift ;;
    --installed) CHECK_ONLY=1; shift ;;
    --wait-started) [ $# -ge 2 ] || usage; WAIT_STARTED=$2; shift 2 ;;
    --containerd) [ $# -ge 2 ] || usage; CONTAINERD=$2; START=0; shift 2 ;;
    --ctr) [ $# -ge 2 ] || usage; CTR=$2; shift 2 ;;
    -h | --help) usage ;;
    *) log "unknown argument: $1 (see --help)"; exit 2 ;;
  esac
done
[ ${#MEDIA[@]} -gt 0 ] || MEDIA=(/run/media)
case $UNIT in '' | *[!A-Za-z0-9_.-]*) log "--unit $UNIT: not a unit name"; exit 2 ;; esac
case $STORAGE in '' | *@/*+/*) ;; *) log "--storage $STORAGE: give DRIVER@GRAPHROOT+RUNROOT"; exit 2 ;; esac
[ -n "$STORAGE" ] && STORE="[$STORAGE]" || STORE=
ROOT=${ROOT%/}
# Whether a kubelet waits for this start: only at boot (its unit loaded, not yet active). With no
# systemd to ask (a test root) it is assumed to wait, bounded as always.
kubelet_waits() {
  local st
  st=$(systemctl show -P LoadState,ActiveState kubelet.service 2>/dev/null | tr '\n' ' ') || return 0
  case $st in '') return 0 ;; not-found* | *' active'*) return 1 ;; *) return 0 ;; esac
}
if [ -n "${WAIT_STARTED:-}" ]; then
  case $WAIT_STARTED in *[!0-9]* | '') log "--wait-started $WAIT_STARTED: give seconds"; exit 2 ;; esac
  # a restart after boot (a self-upgrade), or a node with no kubelet unit: nothing waits on us
  kubelet_waits || exit 0
  # ExecStartPre removed the marker of the last start: the agent writes it once its start-up is done.
  # systemd gives ExecStartPost the main process ($MAINPID): an agent that died is not waited for.
  for ((i = 0; i < WAIT_STARTED * 5; i++)); do
    [ -e "$ROOT/var/lib/bundle-agent/started" ] && exit 0
    if [ -n "${MAINPID:-}" ] && ! kill -0 "$MAINPID" 2>/dev/null; then exit 0; fi
    sleep 0.2
  done
  log "the agent did not finish its start-up within $WAIT_STARTED s: the kubelet starts anyway (images of a loaded release may be pulled before the node serves them)"
  exit 0
fi
[ -n "$CONFIG" ] || CONFIG=$ROOT/etc/bundle-agent/config.yaml
QUADLET=$ROOT/etc/containers/systemd/$UNIT.container
PLAIN=$ROOT/etc/systemd/system/$UNIT.service
if [ -f "$QUADLET" ]; then
  UNIT_FILE=$QUADLET KEY=Image
elif [ -f "$PLAIN" ]; then
  UNIT_FILE=$PLAIN KEY=Environment=BUNDLE_AGENT_IMAGE
else
  UNIT_FILE= KEY=Image
fi
DROPIN_DIR=$UNIT_FILE.d
DROPIN=$DROPIN_DIR/image.conf
KEPT=$ROOT/var/lib/bundle-agent/agent-image
ISSUE_DIR=$ROOT/run/issue.d
ISSUE=$ISSUE_DIR/bundle-agent.issue

# A directory we write into: it must be a real directory (not a symlink to elsewhere).
real_dir() { [ -d "$1" ] && [ ! -L "$1" ]; }

# Writes FILE atomically (temp file in the same directory, synced, renamed): never through a
# symlink, since the rename replaces the name itself.
write_file() {
  local file=$1 text=$2 dir tmp
  dir=${file%/*}
  real_dir "$dir" || { log "$dir is not a directory (or is a symlink): cannot write ${file##*/}"; return 1; }
  tmp=$(mktemp "$dir/.${file##*/}.XXXXXX") || return 1
  if printf '%s' "$text" > "$tmp" && chmod 0644 "$tmp" && sync "$tmp" && mv -fT "$tmp" "$file"; then
    sync "$dir" 2>/dev/null
    return 0
  fi
  rm -f "$tmp"
  return 1
}

# The technician's line on the console (agetty shows /run/issue.d/*.issue; touching
# /run/agetty.reload makes running agettys show it again), as the agent writes it.
console() {
  local line
  [ "${QUIET_CONSOLE:-0}" = 1 ] && return 0
  line=$(printf '%s' "$*" | tr -d '\000-\037\177' | tr -s ' ')
  line=${line//\\/\\\\}
  mkdir -p "$ISSUE_DIR" 2>/dev/null
  CONSOLE_STALE=0
  write_file "$ISSUE" "Update: $line"$'\n\n' || return 0
  [ -L "$ROOT/run/agetty.reload" ] || touch "$ROOT/run/agetty.reload" 2>/dev/null
  return 0
}

# One fault: the journal line (with the detail) and the console line (for the technician).
fault() {
  log "$1"
  console "$2"
}
# A fault that may pass (a full disk): --installed fails the start for Restart= to try again.
transient_fault() {
  TRANSIENT=1
  fault "$@"
}

ctr_() { "$CTR" --address "$CONTAINERD" --namespace k8s.io "$@"; }

# The image REF (name or name@digest) in the node's storage: prints its manifest digest.
stored_digest() {
  if [ -n "$CONTAINERD" ]; then
    ctr_ images ls 2>/dev/null | awk -v ref="$1" '$1 == ref && $3 ~ /^sha256:[0-9a-f]+$/ { print $3; exit }'
  else
    skopeo inspect --format '{{.Digest}}' "containers-storage:$STORE$1" 2>/dev/null
  fi
}

remove_image() {
  if [ -n "$CONTAINERD" ]; then
    ctr_ images rm "$1" >/dev/null 2>&1
  else
    skopeo delete "containers-storage:$STORE$1" >/dev/null 2>&1
  fi
}

# Loads the archive under IMAGE: skopeo into containers-storage, or containerd's import (which
# names it by the archive's io.containerd.image.name annotation: IMAGE).
load_image() {
  if [ -n "$CONTAINERD" ]; then
    ctr_ images import "$1" 2>&1 >/dev/null
  else
    # --tmpdir: skopeo 1.9 ignores TMPDIR and unpacks the archive and stages blobs in /var/tmp
    skopeo --tmpdir "$TMP" copy --quiet "oci-archive:$1" "containers-storage:$STORE$2" 2>&1
  fi
}

node_arch() {
  case $(uname -m) in
    x86_64) echo amd64 ;;
    aarch64 | arm64) echo arm64 ;;
    armv7* | armv6*) echo arm ;;
    ppc64le) echo ppc64le ;;
    s390x) echo s390x ;;
    *) uname -m ;;
  esac
}

# The value of "KEY VALUE" in the statement: present exactly once, else nothing.
field() {
  local n
  n=$(grep -c "^$1 " "$STATEMENT_TEXT")
  [ "$n" = 1 ] || return 1
  sed -n "s/^$1 //p" "$STATEMENT_TEXT"
}

# A version as the agent versions itself: semver MAJOR.MINOR.PATCH[-PRERELEASE] (no build part,
# no leading zeros in numbers), 64 characters at most.
semver_valid() {
  local n='(0|[1-9][0-9]*)' id='(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)'
  [ ${#1} -le 64 ] && [[ $1 =~ ^$n\.$n\.$n(-$id(\.$id)*)?$ ]]
}

# Two numbers of any length without leading zeros (so no overflow): the longer is larger.
num_cmp() {
  if [ ${#1} -ne ${#2} ]; then [ ${#1} -lt ${#2} ] && echo -1 || echo 1
  elif [[ $1 < $2 ]]; then echo -1
  elif [[ $1 > $2 ]]; then echo 1
  else echo 0; fi
}

# Semver precedence of two valid versions: prints -1, 0 or 1. MAJOR.MINOR.PATCH numerically;
# then a pre-release is below its release; pre-release identifiers left to right: numbers
# numerically, below alphanumerics, which compare in ASCII order; more identifiers is larger.
semver_cmp() {
  local a=$1 b=$2 pa= pb= i c x y
  [[ $a == *-* ]] && { pa=${a#*-}; a=${a%%-*}; }
  [[ $b == *-* ]] && { pb=${b#*-}; b=${b%%-*}; }
  local -a A B
  IFS=. read -r -a A <<< "$a"
  IFS=. read -r -a B <<< "$b"
  for i in 0 1 2; do
    c=$(num_cmp "${A[i]}" "${B[i]}")
    [ "$c" = 0 ] || { echo "$c"; return; }
  done
  if [ -z "$pa" ] || [ -z "$pb" ]; then
    if [ -z "$pa" ] && [ -z "$pb" ]; then echo 0; elif [ -z "$pa" ]; then echo 1; else echo -1; fi
    return
  fi
  IFS=. read -r -a A <<< "$pa"
  IFS=. read -r -a B <<< "$pb"
  for ((i = 0; ; i++)); do
    if [ $i -ge ${#A[@]} ] && [ $i -ge ${#B[@]} ]; then echo 0; return; fi
    [ $i -ge ${#A[@]} ] && { echo -1; return; }
    [ $i -ge ${#B[@]} ] && { echo 1; return; }
    x=${A[i]} y=${B[i]}
    if [[ $x =~ ^[0-9]+$ ]] && [[ $y =~ ^[0-9]+$ ]]; then c=$(num_cmp "$x" "$y")
    elif [[ $x =~ ^[0-9]+$ ]]; then c=-1
    elif [[ $y =~ ^[0-9]+$ ]]; then c=1
    elif [[ $x < $y ]]; then c=-1
    elif [[ $x > $y ]]; then c=1
    else c=0; fi
    [ "$c" = 0 ] || { echo "$c"; return; }
  done
}

# Why PATH (a key file or a directory above it) could be changed by someone other than root or
# us, as the agent judges it (packages/host small-file.ts unsafePermissions); nothing when safe.
unsafe_owner_or_mode() {
  local st uid mode
  st=$(stat -L -c '%u %a %F' -- "$1" 2>/dev/null) || { echo "$1 cannot be read"; return; }
  uid=${st%% *} st=${st#* } mode=${st%% *}
  if [ "$uid" != 0 ] && [ "$uid" != "$(id -u)" ]; then echo "$1 is owned by uid $uid, neither root nor this process's user: chown root $1"; return; fi
  (( (8#$mode & 8#022) == 0 )) && return
  [[ $st == *directory ]] && (( (8#$mode & 8#1000) != 0 )) && return
  echo "$1 is writable by $( (( (8#$mode & 8#002) != 0 )) && echo anyone || echo its group) (mode $mode): chmod go-w $1"
}
unsafe_key() {
  local why d
  why=$(unsafe_owner_or_mode "$1")
  [ -n "$why" ] && { echo "$why"; return; }
  d=$(readlink -f -- "$1") || { echo "$1 cannot be resolved"; return; }
  while d=${d%/*}; [ -n "$d" ]; do
    why=$(unsafe_owner_or_mode "$d")
    [ -n "$why" ] && { echo "${1} is in $d, which: $why"; return; }
  done
  why=$(unsafe_owner_or_mode /)
  [ -n "$why" ] && echo "${1} is in /, which: $why"
}

# The key paths of the agent's config, trust.keys: a flow list on one line ("  keys: [a, b]") or a
# block list ("  keys:" then "    - a"), under a top-level "trust:", paths unquoted or quoted.
# Anything else: not read (exit 1), the fix is --key.
config_keys() {
  awk -v q="'" '
    function path(v) {
      gsub(/^[ \t]+|[ \t]+$/, "", v)
      if (v ~ /^".*"$/ || (substr(v, 1, 1) == q && substr(v, length(v)) == q && length(v) > 1)) v = substr(v, 2, length(v) - 2)
      if (v !~ /^\/[A-Za-z0-9._\/-]+$/) bad = 1
      else print v
    }
    /^[^ #]/ { intrust = ($0 ~ /^trust:[ \t]*(#.*)?$/); inkeys = 0; next }
    !intrust { next }
    /^[ \t]*(#.*)?$/ { next }
    inkeys && /^ +- / { sub(/^ +- /, ""); sub(/[ \t]+#.*$/, ""); path($0); found = 1; next }
    { inkeys = 0 }
    /^ +keys:/ {
      v = $0; sub(/^ +keys:[ \t]*/, "", v); sub(/[ \t]+#.*$/, "", v)
      if (v == "") { inkeys = 1; next }
      if (v !~ /^\[.*\]$/) { bad = 1; next }
      v = substr(v, 2, length(v) - 2); n = split(v, a, ","); found = 1
      for (i = 1; i <= n; i++) if (a[i] !~ /^[ \t]*$/) path(a[i])
    }
    END { exit (bad || !found) ? 1 : 0 }
  ' "$1"
}

# TRUSTED: the keys the agent would trust (--key, --keys, else the config's trust.keys), each
# safe as the agent requires. Returns 1 after a fault was reported.
trusted_keys() {
  local k why out
  TRUSTED=() TRUST_FROM=
  if [ ${#KEY_FILES[@]} -gt 0 ]; then
    TRUSTED=("${KEY_FILES[@]}") TRUST_FROM="--key"
  elif [ -n "$KEYS" ]; then
    for k in "$KEYS"/*.pub; do [ -e "$k" ] && TRUSTED+=("$k"); done
    TRUST_FROM="$KEYS/*.pub"
  else
    if ! out=$(config_keys "$CONFIG" 2>/dev/null); then
      fault "$CONFIG: cannot read trust.keys (the agent's trusted keys) from it: a list of key paths under trust:, or pass --key FILE" \
        "No trusted key is configured on this node: nothing was loaded (see journalctl -u $PROG)"
      return 1
    fi
    while IFS= read -r k; do [ -n "$k" ] && TRUSTED+=("$ROOT$k"); done <<< "$out"
    TRUST_FROM="trust.keys of $CONFIG"
  fi
  if [ ${#TRUSTED[@]} -eq 0 ]; then
    fault "no trusted key configured ($TRUST_FROM is empty): the agent would trust no bundle either" \
      "No trusted key is configured on this node: nothing was loaded (see journalctl -u $PROG)"
    return 1
  fi
  for k in "${TRUSTED[@]}"; do
    if [ ! -f "$k" ]; then
      fault "trusted key $k ($TRUST_FROM): no such file" "The node's trusted key is missing: nothing was loaded (see journalctl -u $PROG)"
      return 1
    fi
    why=$(unsafe_key "$k")
    if [ -n "$why" ]; then
      fault "trusted key $why (the agent refuses it too)" "The node's trusted key could be changed by others: nothing was loaded (see journalctl -u $PROG)"
      return 1
    fi
  done
}

# Verifies SIGNED (bytes) against SIG with one public key; the key's type picks the openssl call.
verify_with() {
  local key=$1
  if openssl pkey -pubin -in "$key" -noout -text 2>/dev/null | head -n 1 | grep -q '^ED25519 '; then
    openssl pkeyutl -verify -pubin -inkey "$key" -rawin -in "$SIGNED" -sigfile "$SIG" >/dev/null 2>&1
  else
    openssl dgst -sha256 -verify "$key" -signature "$SIG" "$SIGNED" >/dev/null 2>&1
  fi
}

# A refusal of one statement, RANK how far it got: kept if it came closer than any before
# (reported only when no statement is eligible), logged in the journal now.
refuse() {
  log "$2"
  if [ "$1" -gt "$BEST_RANK" ]; then BEST_RANK=$1 BEST_LOG=$2 BEST_CONSOLE=$3; fi
  return 1
}

# Reads and checks one statement (no archive read, no console write). Eligible: appended to the
# candidate arrays C_*; else refused with its reason.
read_statement() {
  local statement=$1 size hex manifest image version arch file actual key verified
  actual=$(stat -c %s -- "$statement" 2>/dev/null) || { refuse 1 "$statement: cannot read it (stick removed?)" "The USB stick was removed or cannot be read: plug it in again"; return 1; }
  if [ "$actual" -gt "$MAX_STATEMENT_BYTES" ]; then
    refuse 2 "$statement: $actual bytes, larger than a statement ($MAX_STATEMENT_BYTES): not an agent image statement" "The agent image on the USB stick is damaged: copy it from the factory again"
    return 1
  fi
  cp -- "$statement" "$TMP/statement" 2>/dev/null || { refuse 1 "$statement: cannot read it (stick removed?)" "The USB stick was removed or cannot be read: plug it in again"; return 1; }
  # signed: every line but the last; the last: "signature BASE64"
  SIGNED=$TMP/signed SIG=$TMP/sig STATEMENT_TEXT=$TMP/signed
  head -n -1 "$TMP/statement" > "$SIGNED"
  if ! tail -n 1 "$TMP/statement" | grep -q '^signature [A-Za-z0-9+/=]\{1,200\}$' ||
     ! tail -n 1 "$TMP/statement" | cut -d ' ' -f 2 | base64 -d > "$SIG" 2>/dev/null; then
    refuse 2 "$statement: no signature line: not a statement written by bundle create" "The agent image on the USB stick is damaged: copy it from the factory again"
    return 1
  fi
  verified=
  for key in "${TRUSTED[@]}"; do
    if verify_with "$key"; then verified=$key; break; fi
  done
  if [ -z "$verified" ]; then
    # (its signer field is not shown: unverified, it could name anyone)
    refuse 3 "$statement: the signature does not verify with any trusted key (${TRUSTED[*]}, from $TRUST_FROM): wrong key, or altered" \
      "The agent image on the USB stick is not signed by this cluster's key: nothing was loaded"
    return 1
  fi
  # every field once, each to its rule (nothing here is evaluated or used unchecked)
  if [ "$(head -n 1 "$SIGNED")" != 'offline-bundle-agent-image 1' ] ||
     ! size=$(field size) || ! hex=$(field sha256) || ! manifest=$(field manifest) || ! image=$(field image) ||
     ! version=$(field version) || ! arch=$(field arch) || ! file=$(field file); then
    refuse 4 "$statement: signed, but not a statement this bootstrap reads (format or a field missing or repeated)" "The agent image on the USB stick is of a newer format: use a matching bootstrap"
    return 1
  fi
  case $size in '' | *[!0-9]*) size=x ;; esac
  case $hex in *[!0-9a-f]*) hex= ;; esac
  case ${manifest#sha256:} in *[!0-9a-f]*) manifest= ;; esac
  semver_valid "$version" || version=
  case $file in bundle-agent-*.oci.tar) case $file in */* | *[!A-Za-z0-9._-]*) file= ;; esac ;; *) file= ;; esac
  if [ "$size" = x ] || [ ${#size} -gt 12 ] || [ ${#hex} -ne 64 ] || [ "${manifest:0:7}" != sha256: ] || [ ${#manifest} -ne 71 ] ||
     [ -z "$version" ] || [ "$image" != "$REPOSITORY:$version" ] || [ -z "$file" ]; then
    refuse 5 "$statement: a field is malformed (size, sha256, manifest, image, version or file)" "The agent image on the USB stick is damaged: copy it from the factory again"
    return 1
  fi
  if [ "$size" -gt "$MAX_ARCHIVE_BYTES" ]; then
    refuse 5 "$statement: size $size is over the $MAX_ARCHIVE_BYTES bytes an agent image may have" "The agent image on the USB stick is damaged: copy it from the factory again"
    return 1
  fi
  if [ "$arch" != "$NODE_ARCH" ]; then
    refuse 6 "$statement: the agent image is for $arch; this node is $NODE_ARCH" "The agent image on the USB stick is for $arch, this node is $NODE_ARCH: bring the $NODE_ARCH one"
    return 1
  fi
  if [ -n "$FLOOR" ] && [ "$(semver_cmp "$version" "$FLOOR")" = -1 ]; then
    refuse 7 "$statement: bundle-agent $version is older than $FLOOR_WHY: bring bundle-agent $FLOOR or newer" \
      "The agent on the USB stick ($version) is older than this node needs ($FLOOR): bring a newer one"
    return 1
  fi
  if [ -n "$WANT" ] && [ "$version" != "$WANT" ]; then
    refuse 7 "$statement: bundle-agent $version, not the $WANT asked for (--want-version)" \
      "The USB stick has no bundle-agent $WANT (it has $version): bring that version"
    return 1
  fi
  # the verified bytes, which a kept archive's statement is written from
  cp -- "$TMP/statement" "$TMP/statement.${#C_PATH[@]}" || return 1
  C_PATH+=("$statement") C_VERSION+=("$version") C_SIZE+=("$size") C_HEX+=("$hex") C_MANIFEST+=("$manifest") C_FILE+=("$file") C_KEY+=("$verified")
  return 0
}

# Copies candidate I's archive into TMP and checks the copy (size, sha256). Returns 0 with COPY
# set, 1 after a fault was reported.
copy_candidate() {
  local i=$1 statement dir size hex file archive actual avail copy out need
  statement=${C_PATH[i]} size=${C_SIZE[i]} hex=${C_HEX[i]} file=${C_FILE[i]}
  dir=${statement%/*}
  archive=$dir/$file
  if [ ! -f "$archive" ] || [ -L "$archive" ]; then
    fault "$archive: missing (or not a regular file) beside its statement" "The USB stick has the agent image's statement but not the image ($file): copy both files"
    return 1
  fi
  actual=$(stat -c %s -- "$archive" 2>/dev/null)
  if [ "$actual" != "$size" ]; then
    fault "$archive: ${actual:-no} bytes, the statement says $size: an incomplete copy" "The agent image on the USB stick is incomplete (a copy cut short?): copy it again"
    return 1
  fi
  # off the stick first: a stick pulled from here on fails this copy, and what is loaded below
  # is the very bytes checked. --work holds the copy, skopeo's unpacked archive and its staged
  # blobs (skopeo --tmpdir): three times the size.
  need=$((size * 3))
  avail=$(df -Pk -- "$WORK" 2>/dev/null | awk 'NR == 2 { print $4 }')
  case $avail in '' | *[!0-9]*) avail=0 ;; esac
  if [ $((avail * 1024)) -lt "$need" ]; then
    transient_fault "$WORK: $((avail * 1024)) bytes free, $need needed for the agent image (its copy, skopeo's unpacked archive and staged blobs)" "The node's disk is full: the agent image was not loaded"
    return 1
  fi
  copy=$TMP/$file
  if ! out=$(cp -- "$archive" "$copy" 2>&1); then
    rm -f "$copy"
    case $out in
      *'No space left'*) transient_fault "$WORK: full while copying $archive: $out" "The node's disk is full: the agent image was not loaded" ;;
      *) fault "$archive: cannot be read whole (stick removed while it was read?): $out" "The USB stick was removed while the agent image was read: plug it in again" ;;
    esac
    return 1
  fi
  if [ "$(stat -c %s -- "$copy")" != "$size" ] || [ "$(sha256sum -- "$copy" | cut -d ' ' -f 1)" != "$hex" ]; then
    rm -f "$copy"
    fault "$archive: does not hash to the statement's sha256 $hex: damaged or changed while read" "The agent image on the USB stick is damaged: copy it from the factory again"
    return 1
  fi
  COPY=$copy
}

# Loads candidate I. Returns 0 with LOADED_DIGEST, LOADED_VERSION and (podman) COPY, the checked
# copy of the archive, set; 1 after a fault was reported.
load_candidate() {
  local i=$1 statement manifest image version archive actual copy out
  statement=${C_PATH[i]} version=${C_VERSION[i]} manifest=${C_MANIFEST[i]}
  image=$REPOSITORY:$version archive=${statement%/*}/${C_FILE[i]}
  copy_candidate "$i" || return 1
  copy=$COPY COPY=
  log "loading $image ($manifest) from $archive, signed by ${C_KEY[i]}"
  # already there with the signed digest (containerd: the DaemonSet's image): nothing to load
  if [ -n "$CONTAINERD" ] && [ "$(stored_digest "$image")" = "$manifest" ]; then
    log "$image ($manifest) is already in containerd: nothing to do"
    rm -f "$copy"
    LOADED_DIGEST=$manifest LOADED_VERSION=$version ALREADY=1
    return 0
  fi
  console "Loading the agent (bundle-agent $version) ${LOADING_FROM:-from the USB stick; leave it in}"
  CONSOLE_STALE=1 LOADING=$image
  if ! out=$(load_image "$copy" "$image"); then
    remove_image "$image"
    LOADING=
    rm -f "$copy"
    out=$(printf '%s' "$out" | tr '\n' ' ' | head -c 400)
    case $out in
      *'no space left'* | *'No space left'*) transient_fault "loading $image: the image store is full: $out" "The node's disk is full: the agent image was not loaded" ;;
      *) fault "loading $image from $archive failed: $out" "The agent image on the USB stick could not be loaded: see journalctl -u $PROG" ;;
    esac
    return 1
  fi
  actual=$(stored_digest "$image")
  if [ "$actual" != "$manifest" ]; then
    rm -f "$copy"
    remove_image "$image"
    LOADING=
    fault "loaded $image as ${actual:-nothing}, the statement says $manifest: removed" "The agent image on the USB stick is damaged: copy it from the factory again"
    return 1
  fi
  LOADED_DIGEST=$manifest LOADED_VERSION=$version LOADING= COPY=$copy
  return 0
}

# A kept statement's field (its first such line), read unchecked: only to choose what to keep
# and what to try; whatever is loaded is checked in full first.
kept_field() { sed -n "s/^$1 \([0-9A-Za-z.:-]\{1,80\}\)\$/\1/p" "$2" | head -n 1; }

# The kept statements (regular files, not symlinks), one a line.
kept_statements() {
  real_dir "$KEPT" || return 0
  find -P "$KEPT" -mindepth 1 -maxdepth 1 -type f -name 'bundle-agent-*.oci.tar.sig' 2>/dev/null | sort | head -n "$MAX_STATEMENTS"
}

# Keeps candidate I: its checked copy COPY (moved: no second copy on the same file system) and
# its verified statement, each written by temp file + rename, the statement last (a pair is whole
# once its statement is there). A failure is logged, not fatal: the agent runs anyway, and only a
# later wipe of the store needs the stick again.
keep_archive() {
  local i=$1 copy=$2 file=${C_FILE[$1]} size=${C_SIZE[$1]} tmp= avail
  too_big_to_keep "$i" && return 1
  mkdir -p -m 0700 -- "$KEPT" 2>/dev/null
  real_dir "$KEPT" || { log "cannot keep $file: $KEPT is not a directory (or is a symlink)"; return 1; }
  avail=$(df -Pk -- "$KEPT" 2>/dev/null | awk 'NR == 2 { print $4 }')
  case $avail in '' | *[!0-9]*) avail=0 ;; esac
  if [ $((avail * 1024)) -lt "$size" ]; then
    log "cannot keep $file: $KEPT has $((avail * 1024)) bytes free, $size needed (after CRI-O wipes its store the agent needs the stick again)"
    return 1
  fi
  if tmp=$(mktemp "$KEPT/.$file.XXXXXX") && mv -f -- "$copy" "$tmp" && chmod 0600 "$tmp" && sync "$tmp" && mv -fT -- "$tmp" "$KEPT/$file" &&
     tmp=$(mktemp "$KEPT/.$file.sig.XXXXXX") && cp -- "$TMP/statement.$i" "$tmp" && chmod 0600 "$tmp" && sync "$tmp" && mv -fT -- "$tmp" "$KEPT/$file.sig"; then
    sync "$KEPT" 2>/dev/null
    log "kept $file (bundle-agent ${C_VERSION[i]}, ${C_MANIFEST[i]}) in $KEPT: loaded again from there if the image store is wiped"
    return 0
  fi
  [ -n "$tmp" ] && rm -f -- "$tmp"
  log "cannot keep $file in $KEPT (disk full?): after CRI-O wipes its store the agent needs the stick again"
  return 1
}

# Leaves in KEPT only the pairs whose statement names one of the manifest digests given (and
# whose archive is there); removes everything else, temporary files of a stopped run too.
prune_kept() {
  local f m d
  local -A keep=()
  real_dir "$KEPT" || return 0
  while IFS= read -r f; do
    [ -n "$f" ] || continue
    m=$(kept_field manifest "$f")
    for d in "$@"; do
      if [ -n "$d" ] && [ "$m" = "$d" ] && [ -f "${f%.sig}" ] && [ ! -L "${f%.sig}" ]; then keep[$f]=1 keep[${f%.sig}]=1; break; fi
    done
  done <<< "$(kept_statements)"
  for f in "$KEPT"/* "$KEPT"/.[!.]*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    [ -n "${keep[$f]:-}" ] && continue
    rm -rf -- "$f" && log "removed $f: not the agent the unit runs, the newest kept, nor the one a pending switch goes back to"
  done
}

# The manifest digest of the newest (highest version) kept statement, if any.
newest_kept() {
  local f v best= bestv=
  while IFS= read -r f; do
    [ -n "$f" ] || continue
    v=$(kept_field version "$f")
    semver_valid "$v" || continue
    if [ -z "$bestv" ] || [ "$(semver_cmp "$v" "$bestv")" = 1 ]; then bestv=$v best=$(kept_field manifest "$f"); fi
  done <<< "$(kept_statements)"
  printf '%s\n' "$best"
}

# The manifest digest of the kept pair an unconfirmed self-upgrade goes back to (switch-guard.sh's
# agent-switch.pending, line 3: the previous drop-in's image, or - for the unit's own), if any:
# until the new agent confirms, a rollback then a wipe needs that one.
rollback_kept() {
  local marker=$ROOT/var/lib/bundle-agent/agent-switch.pending previous own
  [ -f "$marker" ] && [ ! -L "$marker" ] || return 0
  previous=$(head -c 512 -- "$marker" | sed -n 3p)
  case $previous in
    "$REPOSITORY@sha256:"*) printf '%s\n' "${previous#"$REPOSITORY@"}" ;;
    -) own=$(unit_own_version) && select_kept "$REPOSITORY:$own" && kept_field manifest "${STATEMENTS[0]}" ;;
  esac
  return 0
}

# The image the agent's unit runs: its drop-in's, else the unit's own (the last KEY= line).
unit_image() {
  local f v
  for f in "$DROPIN" "$UNIT_FILE"; do
    [ -n "$f" ] && [ -f "$f" ] || continue
    v=$(sed -n "s|^$KEY=\([A-Za-z0-9][A-Za-z0-9._/:@-]\{0,299\}\)\$|\1|p" "$f" | tail -n 1)
    [ -n "$v" ] && { printf '%s\n' "$v"; return 0; }
  done
  return 1
}

# The version the unit's own image (its file's KEY= line, not the drop-in's) is tagged with, if a semver.
unit_own_version() {
  local v
  [ -n "$UNIT_FILE" ] && [ -f "$UNIT_FILE" ] || return 1
  v=$(sed -n "s|^$KEY=$REPOSITORY:\([0-9A-Za-z.-]\{1,64\}\)\$|\1|p" "$UNIT_FILE" | tail -n 1)
  semver_valid "$v" && printf '%s\n' "$v"
}
# The version of the agent our drop-in names (its first line says it), if a semver.
dropin_version() {
  local v
  [ -f "$DROPIN" ] || return 1
  v=$(sed -n "1s|^# Written by $PROG: bundle-agent \([0-9A-Za-z.-]\{1,64\}\) from a stick.*|\1|p" "$DROPIN")
  semver_valid "$v" && printf '%s\n' "$v"
}

TMP= LOADING= CONSOLE_STALE=0
# stopped mid-load (systemctl stop, TimeoutStartSec=, shutdown): no half-loaded image and none of
# our or skopeo's temporary files stay, and the console no longer says "Loading".
cleanup() {
  [ -n "$LOADING" ] && remove_image "$LOADING"
  [ -n "$TMP" ] && rm -rf -- "$TMP"
  if [ "$CONSOLE_STALE" = 1 ]; then
    log "stopped while loading the agent image: nothing was loaded"
    console "Loading the agent was stopped before it finished: nothing was loaded; plug the USB stick in again"
  fi
}

# Serialises runs: a second one waits (at most SECONDS) for the first, then finds its work done.
# Returns 1 when the lock cannot be taken, 2 after SECONDS. Taken once: opening fd 9 again would
# close the first and drop the lock.
LOCKED=0
take_lock() {
  [ "$LOCKED" = 1 ] && return 0
  real_dir "$ROOT/run" || { log "$ROOT/run is not a directory"; return 1; }
  LOCK=$ROOT/run/$PROG.lock
  [ -L "$LOCK" ] && { log "$LOCK is a symlink: refusing it"; return 1; }
  exec 9>>"$LOCK" || { log "cannot open $LOCK"; return 1; }
  flock -w "$1" 9 || { log "another bootstrap holds $LOCK for $1 s: giving up"; return 2; }
  LOCKED=1
}

# The trusted keys, the cleanup on exit and TMP (where archives are copied and checked, and
# skopeo --tmpdir puts its unpacked archive and staged blobs). Returns 1 after a fault was reported.
begin_work() {
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM HUP
  trusted_keys || return 1
  real_dir "$WORK" || { fault "$WORK is not a directory" "The agent image could not be loaded: see journalctl -u $PROG"; return 1; }
  # (a second call: the first one's files go)
  [ -n "$TMP" ] && rm -rf -- "$TMP"
  TMP=$(mktemp -d "$WORK/$PROG.XXXXXX") || { transient_fault "cannot make a directory in $WORK" "The node's disk is full: the agent image was not loaded"; return 1; }
  C_PATH=() C_VERSION=() C_SIZE=() C_HEX=() C_MANIFEST=() C_FILE=() C_KEY=()
  BEST_RANK=0 BEST_LOG= BEST_CONSOLE=
}

# The kept statements whose (unchecked) fields name IMAGE: by digest, or by version for the unit's
# own tagged Image=. Sets STATEMENTS; returns 1 when none does.
select_kept() {
  local f want_digest= want_version=
  case $1 in
    "$REPOSITORY@sha256:"*) want_digest=${1#"$REPOSITORY@"} ;;
    "$REPOSITORY:"*) want_version=${1#"$REPOSITORY:"} ;;
    *) return 1 ;;
  esac
  STATEMENTS=()
  while IFS= read -r f; do
    [ -n "$f" ] || continue
    if [ -n "$want_digest" ]; then
      [ "$(kept_field manifest "$f")" = "$want_digest" ] && STATEMENTS+=("$f")
    elif [ "$(kept_field version "$f")" = "$want_version" ]; then
      STATEMENTS+=("$f")
    fi
  done <<< "$(kept_statements)"
  [ ${#STATEMENTS[@]} -gt 0 ]
}

# Whether checked candidate I is IMAGE (its signed digest, or version for a tagged Image=).
names_image() {
  case $2 in
    "$REPOSITORY@sha256:"*) [ "${C_MANIFEST[$1]}" = "${2#"$REPOSITORY@"}" ] ;;
    *) [ "$2" = "$REPOSITORY:${C_VERSION[$1]}" ] ;;
  esac
}

# The image the unit runs ($current) missing from storage: loads it again from the kept archive
# whose statement names it, checked in full as one from a stick. Returns 0 once it is in storage;
# 1 when nothing kept names it or the kept pair is refused, 2 when it may work in a moment (the
# lock, a full disk); WHY then ends "the agent image $current is not in storage" with the cause.
# Every line it would log is held: the caller says it in one.
restore_kept() {
  local rc
  HOLD_LOG=1 HELD_LOG= TRANSIENT=0
  restore_kept_held
  rc=$?
  HOLD_LOG=0
  return $rc
}
restore_kept_held() {
  local f i chosen= FLOOR= WANT= rc LOADING_FROM
  WHY=" yet"
  if ! select_kept "$current"; then
    [ -n "$(kept_statements)" ] && WHY=" and the agent archives kept in $KEPT are not $current (the image the unit runs): none loaded"
    return 1
  fi
  take_lock "$INSTALLED_LOCK_SECONDS"
  rc=$?
  if [ "$rc" != 0 ]; then
    WHY=", and loading it again from the copy kept in $KEPT has to wait: $HELD_LOG"
    return "$rc"
  fi
  # the run that held the lock may have loaded this image, or pointed the unit at another one
  current=$(unit_image) || { WHY=": no $UNIT unit any more"; return 1; }
  [ -n "$(stored_digest "$current")" ] && return 0
  select_kept "$current" || { WHY=" and no agent archive kept in $KEPT names it"; return 1; }
  NODE_ARCH=$(node_arch) LOADING_FROM="from the copy this node kept (the image store was wiped)"
  if begin_work; then
    for f in "${STATEMENTS[@]}"; do read_statement "$f"; done
    for ((i = 0; i < ${#C_PATH[@]}; i++)); do names_image "$i" "$current" && { chosen=$i; break; }; done
    [ -z "$chosen" ] && [ ${#C_PATH[@]} -gt 0 ] && log "the kept statement ${C_PATH[0]} is signed, but not for $current: not loaded"
  fi
  if [ -z "$chosen" ] || ! load_candidate "$chosen"; then
    if [ "$TRANSIENT" = 1 ]; then
      WHY=", and loading it again from the copy kept in $KEPT failed: $HELD_LOG"
      return 2
    fi
    WHY=" (after an unclean shutdown CRI-O wipes the store podman shares) and the copy kept in $KEPT was refused: $HELD_LOG"
    console "The copy of the agent kept on this node was refused (journalctl -u $UNIT): plug in the USB stick with the agent image"
    return 1
  fi
  rm -f -- "$COPY"
  HOLD_LOG=0
  log "the agent image $current is not in storage (after an unclean shutdown CRI-O wipes the store podman shares): loaded bundle-agent ${C_VERSION[chosen]} again from ${C_PATH[chosen]%.sig}, signed by ${C_KEY[chosen]}"
  console "The agent (bundle-agent ${C_VERSION[chosen]}) was loaded again from the copy this node kept: the image store had been wiped"
  return 0
}

if [ "$CHECK_ONLY" = 1 ]; then
  current=$(unit_image) || { log "no $UNIT unit (neither $QUADLET nor $PLAIN)"; exit "$EXIT_SKIP"; }
  [ -n "$(stored_digest "$current")" ] && exit 0
  restore_kept
  case $? in
    0) exit 0 ;;
    2) log "the agent image $current is not in storage$WHY: $UNIT's start fails, and Restart= tries again"
       exit "$EXIT_RETRY" ;;
  esac
  log "the agent image $current is not in storage$WHY: $UNIT waits for a stick with the agent image ($PROG loads it)"
  exit "$EXIT_SKIP"
fi
[ -z "$WANT" ] || semver_valid "$WANT" || { log "--want-version $WANT: not a version (MAJOR.MINOR.PATCH[-PRERELEASE])"; exit 2; }
[ -n "$UNIT_FILE" ] || [ -n "$CONTAINERD" ] || { log "no $UNIT unit is installed (neither $QUADLET nor $PLAIN): install the MachineConfig first"; exit 1; }
# the Quadlet agent switches itself (with its rollback) from a bundle: the drop-in is its own
if [ "$UPGRADE" = 1 ] && { [ -n "$CONTAINERD" ] || [ "$UNIT_FILE" != "$PLAIN" ]; }; then
  log "--upgrade is for the plain unit (podman before 4.4); the Quadlet agent upgrades itself from a bundle made with --agent-image (README, \"How the agent upgrades itself\"), containerd's from --want-version"
  exit 2
fi

NODE_ARCH=$(node_arch)
take_lock "$BOOTSTRAP_LOCK_SECONDS" || exit 1

# Not lower than the unit's own Image= tag: the agent (Quadlet) would remove a drop-in naming an
# older agent and switch back to that image, which this node does not have.
FLOOR= FLOOR_WHY= INSTALLED=
if [ -z "$CONTAINERD" ] && FLOOR=$(unit_own_version); then
  FLOOR_WHY="the unit's own image ($REPOSITORY:$FLOOR in ${UNIT_FILE#"$ROOT"})"
fi
# A mount point made but not mounted yet (systemd-mount makes the directory, then mounts): an
# empty directory that is no mount point, where sticks are mounted (MEDIA/bundle-agent/sdb1 by the
# udev rule, MEDIA/USER/LABEL by udisks), is waited for, 10 s at most in all.
unmounted() {
  local m d
  for m in "${MEDIA[@]}"; do
    for d in "$m"/*/*/; do
      d=${d%/}
      [ -d "$d" ] && [ ! -L "$d" ] || continue
      # inside a stick already mounted one level up (--media /mnt, the stick at /mnt/usb): its empty lost+found is no mount point to wait for
      [ "${d##*/}" = lost+found ] && continue
      mountpoint -q -- "${d%/*}" 2>/dev/null && continue
      [ -z "$(ls -A -- "$d" 2>/dev/null)" ] && ! mountpoint -q -- "$d" 2>/dev/null && { WAITING=$d; return 0; }
    done
  done
  return 1
}
# Statements on the media (regular files only: -P never follows a symlink), the first
# MAX_STATEMENTS by path (cut below); which one is loaded is decided by their signed versions, not
# names. Sets STATEMENTS and BUNDLES (bundles seen).
scan_media() {
  local i m n f
  STATEMENTS=() BUNDLES=0
  for i in 1 2 3 4 5 6 7 8 9 10; do
    unmounted || break
    [ "$i" = 1 ] && log "waiting for $WAITING to be mounted (10 s at most)"
    sleep 1
  done
  for m in "${MEDIA[@]}"; do
    real_dir "$m" || continue
    # (lastpipe: the loop runs in this shell; no process substitution, which needs /dev/fd)
    find -P "$m" -mindepth 1 -maxdepth 3 -type f -name 'bundle-agent-*.oci.tar.sig' -print0 2>/dev/null | sort -z |
      while IFS= read -r -d '' f; do STATEMENTS+=("$f"); done
    n=$(find -P "$m" -mindepth 1 -maxdepth 3 -type f -name '*.bundle' 2>/dev/null | head -n 100 | wc -l)
    BUNDLES=$((BUNDLES + n))
  done
}

# Whether the kept pair of statement F is candidate I whole: the statement's very bytes, the
# archive a regular file of the signed size and sha256 (a pair damaged since is kept again).
kept_whole() {
  local i=$1 f=$2 archive=${2%.sig} size
  if [ "$(head -c "$((MAX_STATEMENT_BYTES + 1))" -- "$f" | sha256sum)" != "$(sha256sum < "$TMP/statement.$i")" ]; then WHY="its statement differs from ${C_PATH[i]}"; return 1; fi
  if [ ! -f "$archive" ] || [ -L "$archive" ]; then WHY="its archive is missing"; return 1; fi
  size=$(stat -c %s -- "$archive" 2>/dev/null)
  if [ "$size" != "${C_SIZE[i]}" ]; then WHY="its archive has ${size:-no} bytes, the statement says ${C_SIZE[i]}"; return 1; fi
  if [ "$(sha256sum -- "$archive" | cut -d ' ' -f 1)" != "${C_HEX[i]}" ]; then WHY="its archive does not hash to the statement's sha256"; return 1; fi
}

# Whether candidate I is too large to keep (says so): tested before any copy off the stick.
too_big_to_keep() {
  [ "${C_SIZE[$1]}" -gt "$MAX_KEPT_ARCHIVE_BYTES" ] || return 1
  log "not keeping ${C_FILE[$1]}: ${C_SIZE[$1]} bytes, over the $MAX_KEPT_ARCHIVE_BYTES a kept agent archive may have (after CRI-O wipes its store the agent needs the stick again)"
}

# Candidate I kept (copied off the stick, checked as for a load), unless a whole pair of it is
# kept already.
keep_checked() {
  local f
  too_big_to_keep "$1" && return 1
  while IFS= read -r f; do
    [ -n "$f" ] && [ "$(kept_field manifest "$f")" = "${C_MANIFEST[$1]}" ] || continue
    kept_whole "$1" "$f" && return 0
    log "the kept pair ${f%.sig} is damaged ($WHY): keeping it again from ${C_PATH[$1]}"
  done <<< "$(kept_statements)"
  copy_candidate "$1" && keep_archive "$1" "$COPY"
}

# The agent installed as CURRENT: the kept archive follows the image the unit runs. From the
# sticks mounted now: that image's statement, when no pair naming it is kept, and the newest
# signed agent newer than it (a bundle's self-upgrade may switch to that one; its image reaches
# storage through CRI-O's pull, so no archive of it reaches this node otherwise); each checked as
# for a load. Then all else kept is pruned. No console line (the agent's own file), no fault:
# the agent runs anyway.
keep_from_media() {
  local current=$1 digest version i f best=
  digest=$(stored_digest "$current")
  QUIET_CONSOLE=1
  scan_media
  if [ ${#STATEMENTS[@]} -gt 0 ] && begin_work; then
    for f in "${STATEMENTS[@]:0:$MAX_STATEMENTS}"; do read_statement "$f"; done
    version=$(skopeo inspect --format '{{index .Labels "org.opencontainers.image.version"}}' "containers-storage:$STORE$current" 2>/dev/null)
    for ((i = 0; i < ${#C_PATH[@]}; i++)); do
      if [ "${C_MANIFEST[i]}" = "$digest" ]; then
        keep_checked "$i"
      elif semver_valid "$version" && [ "$(semver_cmp "${C_VERSION[i]}" "$version")" = 1 ] &&
           { [ -z "$best" ] || [ "$(semver_cmp "${C_VERSION[i]}" "${C_VERSION[best]}")" = 1 ]; }; then
        best=$i
      fi
    done
    [ -n "$best" ] && keep_checked "$best"
  fi
  prune_kept "$digest" "$(newest_kept)" "$(rollback_kept)"
}

# The image the unit runs wiped from storage (CRI-O's wipe at boot) with a stick left in: the
# copy this node kept of it comes first. Failing that, a stick's agent is no older than that one
# (the one the unit ran, maybe a self-upgrade's), and the pair naming it stays kept (PRE_WIPE).
# (No stick: nothing here would load an agent; the agent's ExecCondition loads the kept one.)
PRE_WIPE= PRE_WIPE_VERSION=
if [ -z "$CONTAINERD" ] && current=$(unit_image) && [ -z "$(stored_digest "$current")" ] &&
   { scan_media; [ ${#STATEMENTS[@]} -gt 0 ]; }; then
  restore_kept
  if [ $? != 0 ]; then
    [ "$WHY" = " yet" ] || log "the agent image $current is not in storage$WHY: a stick's agent is loaded instead"
    v=
    if select_kept "$current"; then
      v=$(kept_field version "${STATEMENTS[0]}")
      semver_valid "$v" && PRE_WIPE=$(kept_field manifest "${STATEMENTS[0]}") PRE_WIPE_VERSION=$v
    fi
    semver_valid "$v" || v=$(dropin_version) || v=
    if [ -n "$v" ] && { [ -z "$FLOOR" ] || [ "$(semver_cmp "$v" "$FLOOR")" = 1 ]; }; then
      FLOOR=$v FLOOR_WHY="the agent this node ran ($v, $current, not in storage since a wipe)"
    fi
  fi
fi
# Installed: the image the unit runs (a bootstrap's or a self-upgrade's drop-in, else the unit's
# own) is in storage. (containerd: per statement, below.)
if [ -z "$CONTAINERD" ] && current=$(unit_image) && [ -n "$(stored_digest "$current")" ]; then
  if [ "$UPGRADE" = 0 ]; then
    log "the agent image $current is installed: nothing to do (a newer agent from a stick: --upgrade)"
    keep_from_media "$current"
    exit 0
  fi
  INSTALLED=$current
  if v=$(dropin_version) && { [ -z "$FLOOR" ] || [ "$(semver_cmp "$v" "$FLOOR")" = 1 ]; }; then
    FLOOR=$v FLOOR_WHY="the installed agent ($v, $current)"
  fi
fi
if [ "$START" = 1 ] && [ "$UPGRADE" = 0 ] && systemctl is-active --quiet "$UNIT.service"; then
  log "$UNIT.service is running: nothing to do"
  exit 0
fi

scan_media
if [ ${#STATEMENTS[@]} -eq 0 ]; then
  if [ "$BUNDLES" -gt 0 ] && [ "$UPGRADE" = 0 ]; then
    fault "a stick with a bundle but no agent image (bundle-agent-VERSION-ARCH.oci.tar and .sig, written by bundle create --agent-image): nothing to load the agent from" \
      "The USB stick has no agent image, and this node has no agent yet: bring a stick made with --agent-image"
    exit 1
  fi
  log "no stick with an agent image under ${MEDIA[*]}: nothing to do"
  exit 0
fi
if [ ${#STATEMENTS[@]} -gt "$MAX_STATEMENTS" ]; then
  log "${#STATEMENTS[@]} agent image statements on the media: only the first $MAX_STATEMENTS (by path) are read"
  STATEMENTS=("${STATEMENTS[@]:0:$MAX_STATEMENTS}")
fi

begin_work || exit 1
for f in "${STATEMENTS[@]}"; do read_statement "$f"; done
if [ ${#C_PATH[@]} -eq 0 ]; then
  [ ${#STATEMENTS[@]} -gt 1 ] && log "none of the ${#STATEMENTS[@]} agent image statements can be loaded; the closest: $BEST_LOG"
  console "$BEST_CONSOLE"
  exit 1
fi
best=0
for ((i = 1; i < ${#C_PATH[@]}; i++)); do
  [ "$(semver_cmp "${C_VERSION[i]}" "${C_VERSION[best]}")" = 1 ] && best=$i
done
[ ${#C_PATH[@]} -gt 1 ] && log "chose bundle-agent ${C_VERSION[best]} (${C_PATH[best]}), the newest signed one of ${C_VERSION[*]}"
if [ -n "$INSTALLED" ] && [ "${C_MANIFEST[best]}" = "$(stored_digest "$INSTALLED")" ]; then
  log "the agent image $INSTALLED is bundle-agent ${C_VERSION[best]}, the newest on the stick: nothing to do"
  exit 0
fi

LOADED_DIGEST= ALREADY=
# The chosen one only: a damaged newest agent is a fault to fix, not a reason to install an older one.
load_candidate "$best" || exit 1
if [ -n "$CONTAINERD" ]; then
  [ -n "$ALREADY" ] && exit 0
  console "The agent image (bundle-agent $LOADED_VERSION) was imported from the USB stick; the agent's pod starts if the DaemonSet names this version"
  log "bundle-agent $LOADED_VERSION imported into containerd as $REPOSITORY:$LOADED_VERSION ($LOADED_DIGEST): a DaemonSet pod whose image: is that tag or digest (imagePullPolicy: Never) starts at the kubelet's next retry; another version still waits"
  exit 0
fi

mkdir -p "$DROPIN_DIR" 2>/dev/null
if [ "$UNIT_FILE" = "$QUADLET" ]; then
  section=Container
  replaced="The agent replaces
# this file when a bundle brings a newer one (README, \"How the agent upgrades itself\")."
else
  section=Service
  replaced="The plain unit does
# not upgrade itself: $PROG --upgrade replaces this file from a stick with a newer agent (README)."
fi
if ! write_file "$DROPIN" "# Written by $PROG: bundle-agent $LOADED_VERSION from a stick. $replaced
[$section]
$KEY=$REPOSITORY@$LOADED_DIGEST
"; then
  fault "cannot write $DROPIN" "The agent image was loaded but the agent cannot be set up: see journalctl -u $PROG"
  exit 1
fi
log "wrote $DROPIN: $KEY=$REPOSITORY@$LOADED_DIGEST"
# the checked archive stays on the node: --installed loads it again after a wipe of the store
keep_archive "$best" "$COPY"
# the pair of the agent the unit ran before a wipe stays while what was loaded is older
[ -n "$PRE_WIPE" ] && [ "$(semver_cmp "$LOADED_VERSION" "$PRE_WIPE_VERSION")" = -1 ] || PRE_WIPE=
prune_kept "$LOADED_DIGEST" "$(newest_kept)" "$(rollback_kept)" "$PRE_WIPE"
if [ "$START" = 1 ]; then
  systemctl daemon-reload || { fault "systemctl daemon-reload failed" "The agent could not be started: see journalctl -u $PROG"; exit 1; }
  systemctl reset-failed "$UNIT.service" 2>/dev/null
  if [ -n "$INSTALLED" ]; then verb=restart; else verb=start; fi
  systemctl --no-block "$verb" "$UNIT.service" || { fault "systemctl $verb $UNIT.service failed" "The agent could not be started: see journalctl -u $UNIT"; exit 1; }
fi
console "The agent (bundle-agent $LOADED_VERSION) was loaded from the USB stick and is starting"
log "bundle-agent $LOADED_VERSION loaded ($REPOSITORY@$LOADED_DIGEST)$([ "$START" = 1 ] && echo "; $UNIT.service ${verb}ed")"
exit 0
