#!/bin/sh
# bundle-agent switch guard (installed by the MachineConfig as /etc/bundle-agent/switch-guard.sh;
# only /bin/sh and coreutils, as on RHCOS). Keeps the rollback of an unconfirmed switch to a
# newer agent (README, "How the agent upgrades itself") alive across reboots and crash loops:
#
#   switch-guard.sh STATE_DIR DROPIN_DIR UNIT          ExecStartPre= of bundle-agent.service
#   switch-guard.sh STATE_DIR DROPIN_DIR UNIT timer    the rollback timer it schedules
#
# The agent writes STATE_DIR/agent-switch.pending while a switch is unconfirmed:
#   line 1  the new image's digest (sha256:<64 hex>)
#   line 2  the window in seconds (selfUpgrade.confirmMinutes x 60)
#   line 3  the image of the drop-in to put back, or - (none: the unit's own image)
# and removes it when the new agent confirms. Nothing happens unless DROPIN_DIR/image.conf
# names that digest (the new agent is the one about to start). Then each start is counted
# (STATE_DIR/agent-switch.starts); once the marker is older than the window, or after
# MAX_STARTS starts, the previous drop-in is put back (written to a new temporary file, synced,
# renamed), the marker removed and systemd reloaded: as ExecStartPre it then fails this start,
# and Restart=on-failure starts the previous image; as the timer it restarts the unit. A start
# within the window schedules a timer for the rest of it, unless one of that name exists (a
# reboot loses the one the agent scheduled: /run).
set -u
MAX_STARTS=5
state=$1 dir=$2 unit=$3 mode=${4:-start}
marker=$state/agent-switch.pending
starts_file=$state/agent-switch.starts
file=$dir/image.conf
OURS=localhost/offline-bundle/bundle-agent@sha256:

# Everything read below may have been written by anyone who can write STATE_DIR: regular files
# only (a FIFO would hang this ExecStartPre, a symlink to /dev/zero never end), a bounded read,
# and numbers parsed here, never by sh's arithmetic ("099" or 20 digits would stop the script
# with "Illegal number" before any rollback, at every start).
regular() { [ -f "$1" ] && [ ! -L "$1" ]; }

# The decimal whole number $1 with leading zeros dropped, or status 1 (empty, not digits, over 9 digits).
number() {
  case $1 in '' | *[!0-9]*) return 1 ;; esac
  [ "${#1}" -le 32 ] || return 1
  n=$1
  while [ "${#n}" -gt 1 ] && [ "${n#0}" != "$n" ]; do n=${n#0}; done
  [ "${#n}" -le 9 ] || return 1
  printf '%s' "$n"
}

# Writes $2 into $1 through a new file of a unique name in the same directory (never a path
# someone may have put a symlink at), synced, then renamed over $1.
replace() {
  tmp=$(mktemp "$(dirname "$1")/.$(basename "$1").XXXXXX") || return 1
  printf '%s' "$2" > "$tmp" && sync "$tmp" && mv -f "$tmp" "$1" || { rm -f "$tmp"; return 1; }
}

regular "$marker" || exit 0
head=$(head -c 512 "$marker")
digest=$(printf '%s\n' "$head" | sed -n 1p)
window=$(printf '%s\n' "$head" | sed -n 2p)
previous=$(printf '%s\n' "$head" | sed -n 3p)
hex=${digest#sha256:}
case $digest in sha256:*) ;; *) echo "switch-guard: $marker: not a digest on line 1: ignored" >&2; exit 0 ;; esac
case $hex in *[!0-9a-f]*) echo "switch-guard: $marker: not a digest on line 1: ignored" >&2; exit 0 ;; esac
[ "${#hex}" -eq 64 ] || { echo "switch-guard: $marker: not a digest on line 1: ignored" >&2; exit 0; }
# a window that is no number: the agent's default; at least a minute
window=$(number "$window") || window=600
[ "$window" -ge 60 ] || window=60
# the only image put back: our own repository, by digest; anything else puts the unit's own image back
case $previous in
  "$OURS"*) p=${previous#"$OURS"}; case $p in *[!0-9a-f]*) previous=- ;; *) [ "${#p}" -eq 64 ] || previous=- ;; esac ;;
  *) previous=- ;;
esac

# only while the drop-in names the switch's image
regular "$file" || exit 0
head -c 65536 "$file" | grep -q "^Image=.*@$digest\$" || exit 0

now=$(date +%s)
age=$((now - $(stat -c %Y "$marker")))
# no count yet: none; a count that is not one (damaged, 20 digits, not a file): as many as allowed, so this start decides
if [ -e "$starts_file" ] || [ -L "$starts_file" ]; then
  if regular "$starts_file"; then starts=$(number "$(head -c 64 "$starts_file")") || starts=$MAX_STARTS; else starts=$MAX_STARTS; fi
else
  starts=0
fi
[ "$mode" = timer ] || starts=$((starts + 1))

if [ "$age" -ge 0 ] && [ "$age" -lt "$window" ] && [ "$starts" -le "$MAX_STARTS" ]; then
  [ "$mode" = timer ] && exit 0
  replace "$starts_file" "$starts
"
  timer="$unit-rollback-$(printf '%s' "$hex" | cut -c1-12)"
  systemd-run --collect --no-block --unit="$timer" --on-active="$((window - age))s" /bin/sh "$0" "$state" "$dir" "$unit" timer >/dev/null 2>&1 || true
  exit 0
fi

echo "switch-guard: the switch to $digest was not confirmed (start $starts, ${age}s since it began, window ${window}s): putting the previous agent image back" >&2
if [ "$previous" = - ]; then
  rm -f "$file"
else
  replace "$file" "$(printf '# Written by bundle-agent: the agent image a bundle brought. Remove this file and run\n# systemctl daemon-reload && systemctl restart bundle-agent to go back to the unit'"'"'s image.\n[Container]\nImage=%s' "$previous")
" || exit 1
fi
sync "$dir" 2>/dev/null
rm -f "$marker" "$starts_file"
systemctl daemon-reload
if [ "$mode" = timer ]; then
  systemctl restart "$unit"
  exit 0
fi
# this start would run the new image still (the unit was generated before): fail it, and
# Restart=on-failure starts the previous one
exit 1
