#!/bin/sh
# install.sh: installs the unpacked bundle-agent tarball (this directory) on a plain Linux node,
# or the bundle (builder) tarball on a factory machine.
#
#   ./install.sh [--prefix /usr/local] [--root /] [--runtime crio|containerd] [--no-enable]
#                [--configure-containerd [--restart-containerd] | --unconfigure-containerd]
#
# Copies bin/ lib/ share/ (with the man page, PREFIX/share/man) under PREFIX; for the builder
# that is all. For the agent it also writes (under ROOT, for image builds and tests):
#   /etc/systemd/system/bundle-agent.service         ExecStart pointing at PREFIX
#   /etc/systemd/system/bundle-agent.service.d/runtime.conf   the drop-in for --runtime
#   /etc/tmpfiles.d/bundle-agent.conf                 state and drop-in directories
#   /etc/udev/rules.d/99-bundle-agent-media.rules     mounts USB sticks read-only (RHCOS, servers)
#   /etc/bundle-agent/config.yaml                     from the example, only when absent
# then reloads systemd and udev and enables the service (unless --root or --no-enable).
# --configure-containerd (with --runtime containerd) makes containerd 1.x's CRI read the
# hosts.toml files the agent writes, which its stock config_path = "" never does:
#   /etc/containerd/conf.d/offline-bundle.toml        the CRI section of config.toml, config_path set
#   /etc/containerd/config.toml                       one imports line added, when it has none for conf.d
# checked with `containerd config dump` where containerd is installed; containerd is restarted
# only with --restart-containerd. --unconfigure-containerd takes both out again.
# Needs nothing but sh, coreutils, sed and awk: no Node.js, compiler, package manager or network.
set -eu

here=$(cd "$(dirname "$0")" && pwd -P)
prefix=/usr/local
root=
runtime=crio
enable=yes
ctd_action=
ctd_restart=no
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --root) root=$2; shift 2 ;;
    --root=*) root=${1#*=}; shift ;;
    --runtime) runtime=$2; shift 2 ;;
    --runtime=*) runtime=${1#*=}; shift ;;
    --no-enable) enable=no; shift ;;
    --configure-containerd) ctd_action=configure; shift ;;
    --unconfigure-containerd) ctd_action=unconfigure; shift ;;
    --restart-containerd) ctd_restart=yes; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case $runtime in crio|containerd) ;; *) echo "install.sh: --runtime must be crio or containerd" >&2; exit 2 ;; esac
case $prefix in /*) ;; *) echo "install.sh: --prefix must be absolute" >&2; exit 2 ;; esac
if [ -n "$ctd_action" ] && [ "$runtime" != containerd ]; then echo "install.sh: --$ctd_action-containerd needs --runtime containerd" >&2; exit 2; fi
if [ "$ctd_restart" = yes ] && [ "$ctd_action" != configure ]; then echo "install.sh: --restart-containerd goes with --configure-containerd" >&2; exit 2; fi

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

# containerd 1.x's CRI reads <config_path>/<host>/hosts.toml only when its registry config_path
# names the directory, and ships it empty. An imported file replaces the main file's whole
# section of the same plugin (containerd merges imports plugin by plugin, not key by key), so
# the drop-in carries config.toml's CRI tables as they are, with config_path added: the merged
# result is config.toml plus config_path, which `containerd config dump` then confirms.
ctd_main=$root/etc/containerd/config.toml
ctd_confd=$root/etc/containerd/conf.d
ctd_dropin=$ctd_confd/offline-bundle.toml
ctd_glob=/etc/containerd/conf.d/*.toml
ctd_glob_re='/etc/containerd/conf\.d/\*\.toml'
ctd_certs=/etc/containerd/certs.d
ctd_mark='# added by bundle-agent install.sh'

ctd_fail() { echo "install.sh: containerd not configured: $*" >&2; exit 1; }

# Puts config.toml and the drop-in back as configure_containerd found them (saved in ctd_tmp).
ctd_undo() {
  if [ -f "$ctd_tmp/config.toml.orig" ]; then cp -p "$ctd_tmp/config.toml.orig" "$ctd_main"; else rm -f "$ctd_main"; fi
  if [ -f "$ctd_tmp/dropin.orig" ]; then cp -p "$ctd_tmp/dropin.orig" "$ctd_dropin"; else rm -f "$ctd_dropin"; rmdir "$ctd_confd" 2>/dev/null || true; fi
}

# config.toml's tables of the CRI plugin, config_path set to include ctd_certs (kept where it already does, appended to another list).
ctd_cri_tables() {
  awk -v certs="$ctd_certs" '
    function setting(old) { return old == "" ? certs : (index(":" old ":", ":" certs ":") ? old : old ":" certs) }
    function close_registry() { if (inreg && !done) { print "    config_path = \"" certs "\""; done = 1 } inreg = 0 }
    /^[[:space:]]*\[/ {
      close_registry()
      incri = ($0 ~ /^[[:space:]]*\[[[:space:]]*plugins[[:space:]]*\.[[:space:]]*"io\.containerd\.grpc\.v1\.cri"[[:space:]]*[].]/)
      if (incri && $0 ~ /"io\.containerd\.grpc\.v1\.cri"[[:space:]]*\.[[:space:]]*registry[[:space:]]*\]/) inreg = 1
      if (incri) print
      next
    }
    incri && inreg && /^[[:space:]]*config_path[[:space:]]*=/ {
      v = $0; sub(/^[^=]*=[[:space:]]*"/, "", v); sub(/".*$/, "", v)
      print "    config_path = \"" setting(v) "\""; done = 1; next
    }
    incri { print }
    END {
      close_registry()
      if (!done) { print "  [plugins.\"io.containerd.grpc.v1.cri\".registry]"; print "    config_path = \"" certs "\"" }
    }' "$1"
}

# `containerd config dump` of a main config, our glob pointed under --root; "" where containerd is not installed.
ctd_dump() {
  command -v containerd >/dev/null 2>&1 || return 0
  if [ -n "$root" ] && [ -f "$1" ]; then
    sed "s|\"$ctd_glob_re\"|\"$ctd_confd/*.toml\"|" "$1" > "$ctd_tmp/dump.toml"
    containerd --config "$ctd_tmp/dump.toml" config dump
  else
    containerd --config "$1" config dump
  fi
}

configure_containerd() {
  if [ -f "$ctd_main" ]; then
    if grep -Eq '^[[:space:]]*version[[:space:]]*=[[:space:]]*3' "$ctd_main"; then
      echo "containerd: $ctd_main is a containerd 2 config, whose config_path includes $ctd_certs unless it is set: nothing changed"
      return 0
    fi
    grep -Eq '^[[:space:]]*version[[:space:]]*=[[:space:]]*2' "$ctd_main" || ctd_fail "$ctd_main has no 'version = 2' line (a version 1 config): convert it with 'containerd config migrate' first"
    if grep -Eq '^[[:space:]]*\[[[:space:]]*plugins\."io\.containerd\.grpc\.v1\.cri"\.registry\.mirrors' "$ctd_main"; then
      ctd_fail "$ctd_main sets registry.mirrors, which containerd refuses beside config_path: move them to hosts.toml files under $ctd_certs first"
    fi
  fi
  if [ -e "$ctd_dropin" ] && ! grep -q "^$ctd_mark" "$ctd_dropin"; then ctd_fail "$ctd_dropin exists and was not written by install.sh"; fi
  ctd_tmp=$(mktemp -d)
  trap 'rm -rf "$ctd_tmp"' EXIT
  if [ -f "$ctd_main" ]; then
    cp -p "$ctd_main" "$ctd_tmp/config.toml.orig"
    ctd_dump "$ctd_main" > "$ctd_tmp/before" || ctd_fail "containerd config dump fails on $ctd_main as it is: fix it first"
  fi
  [ ! -e "$ctd_dropin" ] || cp -p "$ctd_dropin" "$ctd_tmp/dropin.orig"
  install -d "$ctd_confd" "$root$ctd_certs"
  {
    echo "$ctd_mark: the CRI plugin's section of /etc/containerd/config.toml, with config_path"
    echo "# set so that containerd reads the hosts.toml files bundle-agent writes under $ctd_certs."
    echo "# containerd replaces config.toml's whole CRI section with this one: run install.sh"
    echo "# --configure-containerd again after a change to that section there (or edit it here)."
    echo "version = 2"
    echo
    if [ -f "$ctd_main" ]; then ctd_cri_tables "$ctd_main"; else ctd_cri_tables /dev/null; fi
  } > "$ctd_dropin.new"
  mv "$ctd_dropin.new" "$ctd_dropin"
  if [ ! -f "$ctd_main" ]; then
    printf 'version = 2\nimports = ["%s"]  %s\n' "$ctd_glob" "$ctd_mark" > "$ctd_main"
  elif ! grep -qF "\"$ctd_glob\"" "$ctd_main"; then
    if grep -Eq '^[[:space:]]*imports[[:space:]]*=' "$ctd_main"; then
      sed "s|^\([[:space:]]*imports[[:space:]]*=[[:space:]]*\[\)|\1\"$ctd_glob\", |" "$ctd_main" > "$ctd_main.new"
    else
      { printf 'imports = ["%s"]  %s\n' "$ctd_glob" "$ctd_mark"; cat "$ctd_main"; } > "$ctd_main.new"
    fi
    chmod --reference="$ctd_main" "$ctd_main.new" 2>/dev/null || true
    mv "$ctd_main.new" "$ctd_main"
  fi
  ctd_dump "$ctd_main" > "$ctd_tmp/after" || { ctd_undo; ctd_fail "containerd config dump fails with the drop-in: nothing changed"; }
  if [ -s "$ctd_tmp/after" ]; then
    if ! grep -Eq "^[[:space:]]*config_path = \"([^\"]*:)?$ctd_certs(:[^\"]*)?\"" "$ctd_tmp/after"; then
      ctd_undo; ctd_fail "containerd config dump does not show config_path with $ctd_certs (another imported file sets the CRI section after ours?): nothing changed"
    fi
    if [ -s "$ctd_tmp/before" ]; then
      grep -Ev '^(imports = |[[:space:]]*config_path = )' "$ctd_tmp/before" > "$ctd_tmp/before.cmp"
      grep -Ev '^(imports = |[[:space:]]*config_path = )' "$ctd_tmp/after" > "$ctd_tmp/after.cmp"
      if ! cmp -s "$ctd_tmp/before.cmp" "$ctd_tmp/after.cmp"; then
        diff "$ctd_tmp/before.cmp" "$ctd_tmp/after.cmp" >&2 || true
        ctd_undo; ctd_fail "the drop-in would change more of containerd's config than config_path (above: before, after): set config_path by hand; nothing changed"
      fi
    fi
    echo "containerd: config_path includes $ctd_certs ($ctd_dropin; checked with containerd config dump)"
  else
    echo "containerd: config_path set in $ctd_dropin (containerd is not installed here, so the merged config was not checked)"
  fi
  if [ "$ctd_restart" = yes ] && [ -z "$root" ]; then
    systemctl restart containerd && echo "containerd restarted"
  else
    echo "containerd reads it when it starts: systemctl restart containerd (or install.sh --restart-containerd)"
  fi
}

unconfigure_containerd() {
  if [ -f "$ctd_dropin" ]; then
    grep -q "^$ctd_mark" "$ctd_dropin" || ctd_fail "$ctd_dropin was not written by install.sh: left as it is"
    rm -f "$ctd_dropin"
    rmdir "$ctd_confd" 2>/dev/null || true
  fi
  if [ -f "$ctd_main" ] && grep -qF "\"$ctd_glob\"" "$ctd_main"; then
    # the line install.sh added, or our entry in an imports list that was there before
    grep -vF "$ctd_mark" "$ctd_main" | sed "s|\"$ctd_glob_re\", ||" > "$ctd_main.new"
    chmod --reference="$ctd_main" "$ctd_main.new" 2>/dev/null || true
    mv "$ctd_main.new" "$ctd_main"
  fi
  echo "containerd: install.sh's drop-in and imports entry removed; restart containerd for it to take effect"
}

if [ "$ctd_action" = unconfigure ]; then unconfigure_containerd; exit 0; fi

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
if [ "$ctd_action" = configure ]; then configure_containerd; fi
if [ -z "$root" ] && [ "$enable" = yes ] && command -v systemctl >/dev/null 2>&1; then
  systemd-tmpfiles --create /etc/tmpfiles.d/bundle-agent.conf || true
  udevadm control --reload 2>/dev/null || true
  systemctl daemon-reload
  echo "next: put the factory's public key in /etc/bundle-agent/keys/, edit /etc/bundle-agent/config.yaml, then: systemctl enable --now bundle-agent"
fi
