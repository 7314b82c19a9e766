#!/bin/sh
# install.sh: installs the unpacked bundle-agent tarball (this directory) on a plain Linux node,
# or the bundle (builder) tarball on a factory machine.
#
#   ./install.sh [--prefix /usr/local] [--root /] [--runtime crio|containerd] [--no-enable]
#
# Copies bin/ lib/ share/ (with the man page, PREFIX/share/man) under PREFIX; for the builder
# that is all. For the agent it also writes (under ROOT, for image builds and tests):
#   /etc/systemd/system/bundle-agent.service         ExecStart pointing at PREFIX
#   /etc/systemd/system/bundle-agent.service.d/runtime.conf   the drop-in for --runtime
#   /etc/tmpfiles.d/bundle-agent.conf                 state and drop-in directories
#   /etc/udev/rules.d/99-bundle-agent-media.rules     mounts USB sticks read-only (RHCOS, servers)
#   /etc/bundle-agent/config.yaml                     from the example, only when absent
# then reloads systemd and udev and enables the service (unless --root or --no-enable).
# Needs nothing but sh and coreutils: no Node.js, compiler, package manager or network.
set -eu

here=$(cd "$(dirname "$0")" && pwd -P)
prefix=/usr/local
root=
runtime=crio
enable=yes
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --root) root=$2; shift 2 ;;
    --root=*) root=${1#*=}; shift ;;
    --runtime) runtime=$2; shift 2 ;;
    --runtime=*) runtime=${1#*=}; shift ;;
    --no-enable) enable=no; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case $runtime in crio|containerd) ;; *) echo "install.sh: --runtime must be crio or containerd" >&2; exit 2 ;; esac
case $prefix in /*) ;; *) echo "install.sh: --prefix must be absolute" >&2; exit 2 ;; esac

dest=$root$prefix

# Completion for bash, zsh and fish, wherever the tarball has it (both programs ship all three).
install_completions() {
  for d in bash-completion/completions zsh/site-functions fish/vendor_completions.d; do
    for f in "$here/share/$d"/*; do
      [ -f "$f" ] || continue
      install -d "$dest/share/$d"
      install -m 0644 "$f" "$dest/share/$d/${f##*/}"
    done
  done
}

# The builder: the program, its docs, man page and shell completion; no service.
if [ -d "$here/lib/bundle" ] && [ ! -d "$here/lib/bundle-agent" ]; then
  install -d "$dest/bin" "$dest/lib" "$dest/share/doc" "$dest/share/man/man1"
  rm -rf "$dest/lib/bundle.new"
  cp -R "$here/lib/bundle" "$dest/lib/bundle.new"
  if [ -d "$dest/lib/bundle" ]; then mv "$dest/lib/bundle" "$dest/lib/bundle.old"; fi
  mv "$dest/lib/bundle.new" "$dest/lib/bundle"
  rm -rf "$dest/lib/bundle.old" "$dest/share/doc/bundle"
  install -m 0755 "$here/bin/bundle" "$dest/bin/bundle"
  cp -R "$here/share/doc/bundle" "$dest/share/doc/bundle"
  install -m 0644 "$here/share/man/man1/bundle.1" "$dest/share/man/man1/bundle.1"
  install_completions
  echo "installed bundle in $dest ($("$dest/bin/bundle" --version 2>/dev/null || echo '?')); man bundle"
  exit 0
fi

share=$here/share/bundle-agent
install -d "$dest/bin" "$dest/lib" "$dest/share/doc" "$dest/share/man/man8"
rm -rf "$dest/lib/bundle-agent.new"
cp -R "$here/lib/bundle-agent" "$dest/lib/bundle-agent.new"
# Swap the program directory in one rename, so a running agent never sees half a tree.
if [ -d "$dest/lib/bundle-agent" ]; then mv "$dest/lib/bundle-agent" "$dest/lib/bundle-agent.old"; fi
mv "$dest/lib/bundle-agent.new" "$dest/lib/bundle-agent"
rm -rf "$dest/lib/bundle-agent.old"
install -m 0755 "$here/bin/bundle-agent" "$dest/bin/bundle-agent"
rm -rf "$dest/share/doc/bundle-agent" "$dest/share/bundle-agent"
cp -R "$here/share/doc/bundle-agent" "$dest/share/doc/bundle-agent"
cp -R "$share" "$dest/share/bundle-agent"
install -m 0644 "$here/share/man/man8/bundle-agent.8" "$dest/share/man/man8/bundle-agent.8"
install_completions

unitdir=$root/etc/systemd/system
install -d "$unitdir/bundle-agent.service.d" "$root/etc/tmpfiles.d" "$root/etc/udev/rules.d" "$root/etc/bundle-agent/keys"
sed -e "s|/usr/local/bin/bundle-agent|$prefix/bin/bundle-agent|g" -e "s|/usr/local/share/doc/bundle-agent|$prefix/share/doc/bundle-agent|g" \
  "$share/bundle-agent.service" > "$unitdir/bundle-agent.service"
install -m 0644 "$share/bundle-agent.service.d/$runtime.conf" "$unitdir/bundle-agent.service.d/runtime.conf"
install -m 0644 "$share/bundle-agent.tmpfiles.conf" "$root/etc/tmpfiles.d/bundle-agent.conf"
install -m 0644 "$share/99-bundle-agent-media.rules" "$root/etc/udev/rules.d/99-bundle-agent-media.rules"
if [ ! -e "$root/etc/bundle-agent/config.yaml" ]; then
  if [ "$runtime" = containerd ]; then
    sed -e 's|^runtime: crio .*|runtime: containerd|' -e 's|^criSocket: .*|criSocket: /run/containerd/containerd.sock|' \
      -e 's|^  command: \[systemctl, reload, crio\]|  command: []|' "$share/config.example.yaml" > "$root/etc/bundle-agent/config.yaml"
  else
    install -m 0644 "$share/config.example.yaml" "$root/etc/bundle-agent/config.yaml"
  fi
fi

echo "installed bundle-agent in $dest ($("$dest/bin/bundle-agent" --version 2>/dev/null || echo '?'))"
if [ -z "$root" ] && [ "$enable" = yes ] && command -v systemctl >/dev/null 2>&1; then
  systemd-tmpfiles --create /etc/tmpfiles.d/bundle-agent.conf || true
  udevadm control --reload 2>/dev/null || true
  systemctl daemon-reload
  echo "next: put the factory's public key in /etc/bundle-agent/keys/, edit /etc/bundle-agent/config.yaml, then: systemctl enable --now bundle-agent"
fi
