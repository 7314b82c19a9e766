#!/bin/bash
# bundle-agent bootstrap (installed by the MachineConfig as /etc/bundle-agent/bundle-agent-bootstrap.sh,
# run by bundle-agent-bootstrap.service at boot and when a stick is mounted under /run/media).
# On a node where the agent is not installed yet, with no registry to pull it from: takes the agent
# image from a stick (the files `bundle create --agent-image` writes beside the bundle:
# bundle-agent-VERSION-ARCH.oci.tar and its signed statement ….oci.tar.sig), checks it, loads it
# into containers-storage, points the Quadlet unit at it by digest and starts the agent.
# Only what RHCOS ships: bash, coreutils, findutils, util-linux (flock), openssl, skopeo, systemd.
#
#   bundle-agent-bootstrap.sh [--media DIR]... [--keys DIR] [--root DIR] [--work DIR]
#                             [--storage DRIVER@GRAPHROOT+RUNROOT] [--unit NAME] [--no-start]
#   bundle-agent-bootstrap.sh --installed [--root DIR] [--storage ...] [--unit NAME]
#   bundle-agent-bootstrap.sh --containerd SOCKET [--ctr PATH] [--media DIR]... [--keys DIR] [--work DIR]
#
#   --media DIR    where sticks are mounted, searched 3 levels deep (default /run/media)
#   --keys DIR     the trusted keys, *.pub (default /etc/bundle-agent/keys: the agent's)
#   --root DIR     prefix of every path written: the drop-in, /run/issue.d, the lock (default /)
#   --work DIR     where the archive is copied and checked before loading (default /var/tmp)
#   --storage S    a containers-storage other than the node's default, as skopeo writes it
#   --no-start     load and write the drop-in, no systemctl (for a root without systemd)
#   --containerd S k3s, RKE2, containerd (the DaemonSet, imagePullPolicy: Never): import into
#                  containerd's k8s.io namespace through socket S with ctr (--ctr PATH: k3s's
#                  or RKE2's ctr); no unit, drop-in or systemctl
#   --installed    only tell: exit 0 when the image the agent's unit would run is in storage, else
#                  1 (the unit's ExecCondition=: no start, no restart loop, until a stick brings it)
#
# The agent's unit is the Quadlet one (/etc/containers/systemd/UNIT.container: the drop-in is
# UNIT.container.d/image.conf, Image=) or, with podman before 4.4, the plain one generate.mjs
# --plain-unit writes (/etc/systemd/system/UNIT.service: the drop-in is UNIT.service.d/image.conf,
# Environment=BUNDLE_AGENT_IMAGE=); whichever is installed.
#
# Checks, in order, each refusal one journal line (stderr) and one console line
# (/run/issue.d/bundle-agent.issue, the agent's own file, which the agent replaces once it runs):
#   the statement: at most 4 KiB, every field once and well-formed, signed by a key of --keys
#     (openssl: ECDSA P-256 DER over sha256, or Ed25519 raw), the node's architecture;
#   the archive: beside it, a regular file (no symlink), the statement's size; copied off the
#     stick into --work (a stick pulled now fails the copy; what is loaded can no longer change
#     under us) and that copy's size and sha256 checked;
#   the load: skopeo copy oci-archive:COPY containers-storage:localhost/offline-bundle/bundle-agent:VERSION,
#     then the stored manifest digest must be the statement's. Any failure removes the image.
# Only then: the Quadlet drop-in image.conf (Image=…@sha256:…, temp file + rename), daemon-reload,
# start. A run that finds the drop-in's image in storage (the agent is installed) does nothing;
# two runs at once are serialised by flock and the second finds the first's work done.
set -u
shopt -s lastpipe
umask 022
export LC_ALL=C

PROG=bundle-agent-bootstrap
REPOSITORY=localhost/offline-bundle/bundle-agent
MAX_STATEMENT_BYTES=4096
MAX_ARCHIVE_BYTES=4294967296
MEDIA=()
KEYS=/etc/bundle-agent/keys
ROOT=/
WORK=/var/tmp
STORAGE=
UNIT=bundle-agent
START=1
CHECK_ONLY=0
CONTAINERD=
CTR=ctr

# One journal line: names from a stick may hold newlines or escape sequences.
log() { printf '%s: %s\n' "$PROG" "$(printf '%s' "$*" | tr '\000-\037\177' '?')" >&2; }
# the comment block at the top of this file
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --media) [ $# -ge 2 ] || usage; MEDIA+=("$2"); shift 2 ;;
    --keys) [ $# -ge 2 ] || usage; KEYS=$2; shift 2 ;;
    --root) [ $# -ge 2 ] || usage; ROOT=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || usage; WORK=$2; shift 2 ;;
    --storage) [ $# -ge 2 ] || usage; STORAGE=$2; shift 2 ;;
    --unit) [ $# -ge 2 ] || usage; UNIT=$2; shift 2 ;;
    --no-start) START=0; shift ;;
    --installed) CHECK_ONLY=1; shift ;;
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
  line=$(printf '%s' "$*" | tr -d '\000-\037\177' | tr -s ' ')
  line=${line//\\/\\\\}
  mkdir -p "$ISSUE_DIR" 2>/dev/null
  write_file "$ISSUE" "Update: $line"$'\n\n' || return 0
  [ -L "$ROOT/run/agetty.reload" ] || touch "$ROOT/run/agetty.reload" 2>/dev/null
  return 0
}

# One fault: the journal line (with the detail) and the console line (for the technician).
fault() {
  log "$1"
  console "$2"
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
    skopeo copy --quiet "oci-archive:$1" "containers-storage:$STORE$2" 2>&1
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

# Verifies SIGNED (bytes) against SIG with one public key; the key's type picks the openssl call.
verify_with() {
  local key=$1
  if openssl pkey -pubin -in "$key" -noout -text 2>/dev/null | head -n 1 | grep -q '^ED25519 '; then
    openssl pkeyutl -verify -pubin -inkey "$key" -rawin -in "$SIGNED" -sigfile "$SIG" >/dev/null 2>&1
  else
    openssl dgst -sha256 -verify "$key" -signature "$SIG" "$SIGNED" >/dev/null 2>&1
  fi
}

# Loads the archive one statement describes. Returns 0 with LOADED_DIGEST and LOADED_VERSION set,
# 1 after a fault was reported.
try_statement() {
  local statement=$1 dir size hex manifest image version arch file archive actual key verified avail copy out
  dir=${statement%/*}
  actual=$(stat -c %s -- "$statement" 2>/dev/null) || { fault "$statement: cannot read it (stick removed?)" "The USB stick was removed or cannot be read: plug it in again"; return 1; }
  if [ "$actual" -gt "$MAX_STATEMENT_BYTES" ]; then
    fault "$statement: $actual bytes, larger than a statement ($MAX_STATEMENT_BYTES): not an agent image statement" "The agent image on the USB stick is damaged: copy it from the factory again"
    return 1
  fi
  cp -- "$statement" "$TMP/statement" 2>/dev/null || { fault "$statement: cannot read it (stick removed?)" "The USB stick was removed or cannot be read: plug it in again"; return 1; }
  # signed: every line but the last; the last: "signature BASE64"
  SIGNED=$TMP/signed SIG=$TMP/sig STATEMENT_TEXT=$TMP/signed
  head -n -1 "$TMP/statement" > "$SIGNED"
  if ! tail -n 1 "$TMP/statement" | grep -q '^signature [A-Za-z0-9+/=]\{1,200\}$' ||
     ! tail -n 1 "$TMP/statement" | cut -d ' ' -f 2 | base64 -d > "$SIG" 2>/dev/null; then
    fault "$statement: no signature line: not a statement written by bundle create" "The agent image on the USB stick is damaged: copy it from the factory again"
    return 1
  fi
  verified=
  for key in "$KEYS"/*.pub; do
    [ -f "$key" ] && [ ! -L "$key" ] || continue
    if verify_with "$key"; then verified=$key; break; fi
  done
  if [ -z "$verified" ]; then
    fault "$statement: the signature does not verify with any key in $KEYS (signed by $(sed -n 's/^signer //p' "$SIGNED" | head -c 80 | tr -cd 'a-z0-9:')): wrong key, or altered" \
      "The agent image on the USB stick is not signed by this cluster's key: nothing was loaded"
    return 1
  fi
  # every field once, each to its rule (nothing here is evaluated or used unchecked)
  if [ "$(head -n 1 "$SIGNED")" != 'offline-bundle-agent-image 1' ] ||
     ! size=$(field size) || ! hex=$(field sha256) || ! manifest=$(field manifest) || ! image=$(field image) ||
     ! version=$(field version) || ! arch=$(field arch) || ! file=$(field file); then
    fault "$statement: signed, but not a statement this bootstrap reads (format or a field missing or repeated)" "The agent image on the USB stick is of a newer format: use a matching bootstrap"
    return 1
  fi
  case $size in '' | *[!0-9]*) size=x ;; esac
  case $hex in *[!0-9a-f]*) hex= ;; esac
  case ${manifest#sha256:} in *[!0-9a-f]*) manifest= ;; esac
  case $version in '' | *[!0-9A-Za-z.-]*) version= ;; esac
  case $file in bundle-agent-*.oci.tar) case $file in */* | *[!A-Za-z0-9._-]*) file= ;; esac ;; *) file= ;; esac
  if [ "$size" = x ] || [ ${#size} -gt 12 ] || [ ${#hex} -ne 64 ] || [ "${manifest:0:7}" != sha256: ] || [ ${#manifest} -ne 71 ] ||
     [ -z "$version" ] || [ ${#version} -gt 64 ] || [ "$image" != "$REPOSITORY:$version" ] || [ -z "$file" ]; then
    fault "$statement: a field is malformed (size, sha256, manifest, image, version or file)" "The agent image on the USB stick is damaged: copy it from the factory again"
    return 1
  fi
  if [ "$arch" != "$NODE_ARCH" ]; then
    fault "$statement: the agent image is for $arch; this node is $NODE_ARCH" "The agent image on the USB stick is for $arch, this node is $NODE_ARCH: bring the $NODE_ARCH one"
    return 1
  fi
  if [ "$size" -gt "$MAX_ARCHIVE_BYTES" ]; then
    fault "$statement: size $size is over the $MAX_ARCHIVE_BYTES bytes an agent image may have" "The agent image on the USB stick is damaged: copy it from the factory again"
    return 1
  fi
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
  # is the very bytes checked
  avail=$(df -Pk -- "$WORK" 2>/dev/null | awk 'NR == 2 { print $4 }')
  case $avail in '' | *[!0-9]*) avail=0 ;; esac
  if [ $((avail * 1024)) -lt "$size" ]; then
    fault "$WORK: $((avail * 1024)) bytes free, $size needed for the agent image" "The node's disk is full: the agent image was not loaded"
    return 1
  fi
  copy=$TMP/$file
  if ! out=$(cp -- "$archive" "$copy" 2>&1); then
    rm -f "$copy"
    case $out in
      *'No space left'*) fault "$WORK: full while copying $archive: $out" "The node's disk is full: the agent image was not loaded" ;;
      *) fault "$archive: cannot be read whole (stick removed while it was read?): $out" "The USB stick was removed while the agent image was read: plug it in again" ;;
    esac
    return 1
  fi
  if [ "$(stat -c %s -- "$copy")" != "$size" ] || [ "$(sha256sum -- "$copy" | cut -d ' ' -f 1)" != "$hex" ]; then
    rm -f "$copy"
    fault "$archive: does not hash to the statement's sha256 $hex: damaged or changed while read" "The agent image on the USB stick is damaged: copy it from the factory again"
    return 1
  fi
  log "loading $image ($manifest) from $archive, signed by $verified"
  console "Loading the agent (bundle-agent $version) from the USB stick; leave it in"
  LOADING=$image
  # already there with the signed digest (containerd: the DaemonSet's image): nothing to load
  if [ -n "$CONTAINERD" ] && [ "$(stored_digest "$image")" = "$manifest" ]; then
    log "$image ($manifest) is already in containerd: nothing to do"
    rm -f "$copy"
    LOADED_DIGEST=$manifest LOADED_VERSION=$version ALREADY=1
    return 0
  fi
  if ! out=$(load_image "$copy" "$image"); then
    remove_image "$image"
    LOADING=
    rm -f "$copy"
    out=$(printf '%s' "$out" | tr '\n' ' ' | head -c 400)
    case $out in
      *'no space left'* | *'No space left'*) fault "loading $image: the image store is full: $out" "The node's disk is full: the agent image was not loaded" ;;
      *) fault "loading $image from $archive failed: $out" "The agent image on the USB stick could not be loaded: see journalctl -u $PROG" ;;
    esac
    return 1
  fi
  rm -f "$copy"
  actual=$(stored_digest "$image")
  if [ "$actual" != "$manifest" ]; then
    remove_image "$image"
    LOADING=
    fault "loaded $image as ${actual:-nothing}, the statement says $manifest: removed" "The agent image on the USB stick is damaged: copy it from the factory again"
    return 1
  fi
  LOADED_DIGEST=$manifest LOADED_VERSION=$version LOADING=
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

if [ "$CHECK_ONLY" = 1 ]; then
  current=$(unit_image) || { log "no $UNIT unit (neither $QUADLET nor $PLAIN)"; exit 1; }
  [ -n "$(stored_digest "$current")" ] && exit 0
  log "the agent image $current is not in storage yet: $UNIT waits for a stick with the agent image ($PROG loads it)"
  exit 1
fi
[ -n "$UNIT_FILE" ] || [ -n "$CONTAINERD" ] || { log "no $UNIT unit is installed (neither $QUADLET nor $PLAIN): install the MachineConfig first"; exit 1; }

NODE_ARCH=$(node_arch)
real_dir "$ROOT/run" || { log "$ROOT/run is not a directory"; exit 1; }
LOCK=$ROOT/run/$PROG.lock
[ -L "$LOCK" ] && { log "$LOCK is a symlink: refusing it"; exit 1; }
exec 9>>"$LOCK" || { log "cannot open $LOCK"; exit 1; }
# a second run waits for the first, then finds its work done
flock -w 900 9 || { log "another bootstrap holds $LOCK for 15 minutes: giving up"; exit 1; }

# Installed: the image the unit runs (a bootstrap's or a self-upgrade's drop-in, else the unit's
# own) is in storage. (containerd: per statement, below.)
if [ -z "$CONTAINERD" ] && current=$(unit_image) && [ -n "$(stored_digest "$current")" ]; then
  log "the agent image $current is installed: nothing to do"
  exit 0
fi
if [ "$START" = 1 ] && systemctl is-active --quiet "$UNIT.service"; then
  log "$UNIT.service is running: nothing to do"
  exit 0
fi

# Statements on the media (regular files only: -P never follows a symlink); a sorted list, newest
# version name last, tried from the last.
STATEMENTS=()
BUNDLES=0
# A mount point made but not mounted yet (systemd-mount makes the directory, then mounts): an
# empty directory that is no mount point, where sticks are mounted (MEDIA/bundle-agent/sdb1 by the
# udev rule, MEDIA/USER/LABEL by udisks), is waited for, 10 s at most in all.
unmounted() {
  local m d
  for m in "${MEDIA[@]}"; do
    for d in "$m"/*/*/; do
      d=${d%/}
      [ -d "$d" ] && [ ! -L "$d" ] || continue
      [ -z "$(ls -A -- "$d" 2>/dev/null)" ] && ! mountpoint -q -- "$d" 2>/dev/null && { WAITING=$d; return 0; }
    done
  done
  return 1
}
for i in 1 2 3 4 5 6 7 8 9 10; do
  unmounted || break
  [ "$i" = 1 ] && log "waiting for $WAITING to be mounted (10 s at most)"
  sleep 1
done
for m in "${MEDIA[@]}"; do
  real_dir "$m" || continue
  # (lastpipe: the loop runs in this shell; no process substitution, which needs /dev/fd)
  find -P "$m" -mindepth 1 -maxdepth 3 -type f -name 'bundle-agent-*.oci.tar.sig' -print0 2>/dev/null | sort -zV |
    while IFS= read -r -d '' f; do STATEMENTS+=("$f"); done
  n=$(find -P "$m" -mindepth 1 -maxdepth 3 -type f -name '*.bundle' 2>/dev/null | head -n 100 | wc -l)
  BUNDLES=$((BUNDLES + n))
done
if [ ${#STATEMENTS[@]} -eq 0 ]; then
  if [ "$BUNDLES" -gt 0 ]; then
    fault "a stick with a bundle but no agent image (bundle-agent-VERSION-ARCH.oci.tar and .sig, written by bundle create --agent-image): nothing to load the agent from" \
      "The USB stick has no agent image, and this node has no agent yet: bring a stick made with --agent-image"
    exit 1
  fi
  log "no stick with an agent image under ${MEDIA[*]}: nothing to do"
  exit 0
fi

TMP= LOADING=
# stopped mid-load (systemctl stop, shutdown): no half-loaded image stays
cleanup() {
  [ -n "$LOADING" ] && remove_image "$LOADING"
  [ -n "$TMP" ] && rm -rf -- "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP
real_dir "$WORK" || { fault "$WORK is not a directory" "The agent image could not be loaded: see journalctl -u $PROG"; exit 1; }
TMP=$(mktemp -d "$WORK/$PROG.XXXXXX") || { fault "cannot make a directory in $WORK" "The node's disk is full: the agent image was not loaded"; exit 1; }

LOADED_DIGEST= ALREADY=
for ((i = ${#STATEMENTS[@]} - 1; i >= 0; i--)); do
  try_statement "${STATEMENTS[i]}" && break
done
[ -n "$LOADED_DIGEST" ] || exit 1
if [ -n "$CONTAINERD" ]; then
  [ -n "$ALREADY" ] && exit 0
  console "The agent (bundle-agent $LOADED_VERSION) was loaded from the USB stick; its pod starts shortly"
  log "bundle-agent $LOADED_VERSION imported into containerd ($REPOSITORY@$LOADED_DIGEST): the DaemonSet's pod (imagePullPolicy: Never) starts at the kubelet's next retry"
  exit 0
fi

mkdir -p "$DROPIN_DIR" 2>/dev/null
if [ "$UNIT_FILE" = "$QUADLET" ]; then
  section=Container
else
  section=Service
fi
if ! write_file "$DROPIN" "# Written by $PROG: the agent image loaded from a stick ($LOADED_VERSION). The agent replaces
# this file when a bundle brings a newer one (README, \"How the agent upgrades itself\").
[$section]
$KEY=$REPOSITORY@$LOADED_DIGEST
"; then
  fault "cannot write $DROPIN" "The agent image was loaded but the agent cannot be set up: see journalctl -u $PROG"
  exit 1
fi
log "wrote $DROPIN: $KEY=$REPOSITORY@$LOADED_DIGEST"
if [ "$START" = 1 ]; then
  systemctl daemon-reload || { fault "systemctl daemon-reload failed" "The agent could not be started: see journalctl -u $PROG"; exit 1; }
  systemctl reset-failed "$UNIT.service" 2>/dev/null
  systemctl --no-block start "$UNIT.service" || { fault "systemctl start $UNIT.service failed" "The agent could not be started: see journalctl -u $UNIT"; exit 1; }
fi
console "The agent (bundle-agent $LOADED_VERSION) was loaded from the USB stick and is starting"
log "bundle-agent $LOADED_VERSION loaded ($REPOSITORY@$LOADED_DIGEST)$([ "$START" = 1 ] && echo "; $UNIT.service started")"
exit 0
