#!/bin/sh
# bundle-agent DaemonSet, init container: this node's agent config. The ConfigMap's config.yaml
# is shared by every node; what differs per node is added here:
#   nodeName         the Node's name (NODE_NAME, from the Downward API: spec.nodeName), so the
#                    status object and the node identity (system:node:NAME) agree;
#   version.current  the release the node runs, from its own binaries (k3s --version, rke2
#                    --version, else kubelet --version, run in the host's mount namespace):
#                    "k3s version v1.30.2+k3s1 (…)" gives 1.30.2, the version `bundle create
#                    --version` names a k3s bundle with. A ConfigMap that sets version: itself
#                    is kept as it is (no detection). Read at the pod's start only: after an
#                    in-place k3s/RKE2 upgrade, delete the node's pod (README, k3s).
#   node-config.sh [SHARED_CONFIG] [OUTPUT]
# Only the agent image's dash and nsenter (no coreutils). Fails (the pod shows Init:Error and this
# line) rather than start an agent that would guess.
set -eu
in=${1:-/etc/bundle-agent-shared/config.yaml}
out=${2:-/run/bundle-agent-config/config.yaml}
fail() { printf 'node-config: %s\n' "$*" >&2; exit 1; }

node=${NODE_NAME:-}
case $node in '' | *[!a-z0-9.-]* | [.-]* | *[.-]) fail "NODE_NAME \"$node\" is not a node name: the DaemonSet sets it from spec.nodeName" ;; esac
[ ${#node} -le 253 ] || fail "NODE_NAME is longer than a node name"

has_version=
while IFS= read -r line || [ -n "$line" ]; do
  case $line in version:*) has_version=1 ;; nodeName:*) fail "$in sets nodeName: leave it to the DaemonSet (NODE_NAME)" ;; esac
done < "$in"

version=
if [ -z "$has_version" ]; then
  # the host's binaries, in the host's mount namespace (hostPID, privileged)
  said=$(nsenter --target 1 --mount -- /bin/sh -c 'k3s --version 2>/dev/null || rke2 --version 2>/dev/null || kubelet --version 2>/dev/null' 2>/dev/null) || said=
  first=${said%%
*}
  set -f
  # shellcheck disable=SC2086 # split into words on purpose
  set -- $first
  set +f
  case ${1:-} in
    k3s | rke2) version=${3:-} ;;
    Kubernetes) version=${2:-} ;;
  esac
  version=${version#v}
  version=${version%%+*}
  case $version in
    '' | *[!0-9.]* | .* | *.) fail "cannot tell which release this node runs (k3s, rke2 and kubelet --version said \"$first\"): set version.current in the ConfigMap" ;;
  esac
  [ ${#version} -le 32 ] || fail "the version \"$version\" is too long"
fi

{
  while IFS= read -r line || [ -n "$line" ]; do printf '%s\n' "$line"; done < "$in"
  printf '# added by node-config.sh for this node\nnodeName: "%s"\n' "$node"
  [ -n "$version" ] && printf 'version:\n  current: "%s"\n' "$version"
} > "$out"
printf 'node-config: %s: nodeName %s%s\n' "$out" "$node" "${version:+, running version $version}" >&2
