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
# MAX_STARTS starts, the previous drop-in is put back (written to a temporary file, synced,
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

[ -f "$marker" ] || exit 0
digest=$(sed -n 1p "$marker")
window=$(sed -n 2p "$marker")
previous=$(sed -n 3p "$marker")
hex=${digest#sha256:}
case $digest in sha256:*) ;; *) echo "switch-guard: $marker: not a digest on line 1: ignored" >&2; exit 0 ;; esac
case $hex in *[!0-9a-f]*) echo "switch-guard: $marker: not a digest on line 1: ignored" >&2; exit 0 ;; esac
[ "${#hex}" -eq 64 ] || { echo "switch-guard: $marker: not a digest on line 1: ignored" >&2; exit 0; }
case $window in '' | *[!0-9]*) window=600 ;; esac
[ "$window" -ge 60 ] || window=60
case $previous in
  -) ;;
  localhost/offline-bundle/bundle-agent@sha256:*) case ${previous#localhost/offline-bundle/bundle-agent@sha256:} in *[!0-9a-f]* | '') previous=- ;; esac ;;
  *) case $previous in '' | *[!A-Za-z0-9./:@_-]*) previous=- ;; esac ;;
esac

# only while the drop-in names the switch's image
grep -q "^Image=.*@$digest\$" "$file" 2>/dev/null || exit 0

now=$(date +%s)
age=$((now - $(stat -c %Y "$marker")))
starts=$(cat "$starts_file" 2>/dev/null)
case $starts in '' | *[!0-9]*) starts=0 ;; esac
[ "$mode" = timer ] || starts=$((starts + 1))

if [ "$age" -ge 0 ] && [ "$age" -lt "$window" ] && [ "$starts" -le "$MAX_STARTS" ]; then
  [ "$mode" = timer ] && exit 0
  printf '%s\n' "$starts" > "$starts_file.tmp" && sync "$starts_file.tmp" && mv -f "$starts_file.tmp" "$starts_file"
  timer="$unit-rollback-$(printf '%s' "$hex" | cut -c1-12)"
  systemd-run --collect --no-block --unit="$timer" --on-active="$((window - age))s" /bin/sh "$0" "$state" "$dir" "$unit" timer >/dev/null 2>&1 || true
  exit 0
fi

echo "switch-guard: the switch to $digest was not confirmed (start $starts, ${age}s since it began, window ${window}s): putting the previous agent image back" >&2
if [ "$previous" = - ]; then
  rm -f "$file"
else
  printf '# Written by bundle-agent: the agent image a bundle brought. Remove this file and run\n# systemctl daemon-reload && systemctl restart bundle-agent to go back to the unit'"'"'s image.\n[Container]\nImage=%s\n' "$previous" > "$file.rollback" &&
    sync "$file.rollback" && mv -f "$file.rollback" "$file" || exit 1
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
