#!/usr/bin/env bash
# Benchmark (issue 47): the README's test command, `share/test.sh`, timed end to end
# on a fresh machine: a new Debian 12 root made by debootstrap, given this machine's
# image as it was before any project package, then a clean clone of HEAD and
# `share/test.sh` run inside it, installing its own packages.
#
#   tests/bench/fresh_machine_test.sh WORK_DIR [--image-packages FILE] [--keep]
#
#   WORK_DIR          a new folder for the root and the logs (at least 8 GB free)
#   --image-packages  the image's own packages, one name per line; default: every
#                     package dpkg lists as installed here and not installed (per
#                     /var/log/dpkg.log) since the start of the dpkg run that first
#                     installed libopenmpi-dev, one of the build packages: what the image
#                     had before share/install-deps.sh first ran
#   --keep            leave the root in place (default: deleted at the end)
#
# What the root is given from this machine, because its image has it: the apt and dpkg
# settings (/etc/apt/apt.conf.d/docker-*, /etc/dpkg/dpkg.cfg.d/*: force-unsafe-io, no
# caches), the CA certificates of /usr/local/share/ca-certificates (a network that
# re-signs TLS needs them: npm fails with SELF_SIGNED_CERT_IN_CHAIN without), /etc/npmrc,
# /etc/hosts and the host name (Open MPI resolves it at every start: without them each
# start waits on DNS), /etc/resolv.conf. Image packages that Debian does not have (a
# nodesource nodejs, ...) are left out and named in the log.
# The root runs in a private mount namespace (unshare) with /proc, /dev and /sys;
# services are not started (policy-rc.d). Needs root, debootstrap and the network
# (the Debian mirror and the npm registry). About 12 minutes to make the root, then
# the test command's own time (16 min 54 s on 2 cores at 6b3a634, 2026-11-30; 32 min in all).
# Prints `fresh_machine_test: share/test.sh rc R in S s` and the stage times; exit R.
set -euo pipefail
die() { echo "fresh_machine_test: $*" >&2; exit 2; }
[[ $# -ge 1 ]] || die "usage: $0 WORK_DIR [--image-packages FILE] [--keep]"
work=$1; shift
pkgs="" keep=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --image-packages) pkgs=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) die "unknown argument $1" ;;
  esac
done
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot, mounts)"
command -v debootstrap >/dev/null || die "needs debootstrap (apt-get install debootstrap)"
[[ ! -e $work ]] || die "$work exists: give a new folder"
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$work"
work=$(cd "$work" && pwd)
root=$work/root
if [[ -z $pkgs ]]; then
  # the start of the dpkg run that first installed libopenmpi-dev (its dependencies come before it)
  first=$(awk '$3 == "startup" { t = $1 " " $2 } $3 == "install" && $4 ~ /^libopenmpi-dev:/ { print t; exit }' /var/log/dpkg.log)
  [[ -n $first ]] || die "no first install of libopenmpi-dev in /var/log/dpkg.log: give --image-packages"
  awk -v t="$first" '$3 == "install" && ($1 " " $2) >= t { sub(/:.*/, "", $4); print $4 }' /var/log/dpkg.log | sort -u > "$work/late.txt"
  dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' | awk '$2 ~ /^ii/ { print $1 }' | sort -u > "$work/installed.txt"
  comm -23 "$work/installed.txt" "$work/late.txt" > "$work/image-packages.txt"
  pkgs=$work/image-packages.txt
fi
echo "fresh_machine_test: $(wc -l < "$pkgs") image packages ($pkgs); root $root"
debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian > "$work/debootstrap.log" 2>&1 ||
  die "debootstrap failed ($work/debootstrap.log)"
cp /etc/hosts /etc/resolv.conf "$root/etc/"
hostname > "$root/etc/hostname"
cp /etc/dpkg/dpkg.cfg.d/* "$root/etc/dpkg/dpkg.cfg.d/" 2>/dev/null || true
cp /etc/apt/apt.conf.d/docker-* "$root/etc/apt/apt.conf.d/" 2>/dev/null || true
mkdir -p "$root/usr/local/share/ca-certificates"
cp /usr/local/share/ca-certificates/* "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
cp /etc/npmrc "$root/etc/npmrc" 2>/dev/null || true
if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
  cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/"; rm -f "$root/etc/apt/sources.list"
fi
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"; chmod +x "$root/usr/sbin/policy-rc.d"
cp "$pkgs" "$root/tmp/image-packages.txt"
git clone -q "$src" "$root/root/shardtrain"
echo "fresh_machine_test: clone of $(git -C "$root/root/shardtrain" log --oneline -1)"
cat > "$root/tmp/image.sh" <<'IN'
set -u
apt-get update -qq
avail=() gone=()
while read -r p; do if apt-cache show "$p" > /dev/null 2>&1; then avail+=("$p"); else gone+=("$p"); fi; done < /tmp/image-packages.txt
echo "image packages: ${#avail[@]} installed from Debian; not in Debian: ${gone[*]:-none}"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${avail[@]}" > /tmp/image-install.log 2>&1 ||
  { tail -20 /tmp/image-install.log; exit 1; }
update-ca-certificates > /dev/null 2>&1
apt-get clean; rm -rf /var/lib/apt/lists/*
IN
cat > "$root/tmp/test.sh" <<'IN'
cd /root/shardtrain || exit 1
s=$(date +%s); rc=0
share/test.sh || rc=$?
echo "fresh_machine_test: share/test.sh rc $rc in $(( $(date +%s) - s )) s"
exit $rc
IN
inside() {  # SCRIPT: run it in the root, in a private mount namespace
  unshare --mount --propagation private bash -c '
    r=$1; mount -t proc proc "$r/proc" && mount --rbind /dev "$r/dev" && mount --rbind /sys "$r/sys" &&
    mount -t tmpfs tmpfs "$r/dev/shm" &&
    chroot "$r" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      LANG=C.UTF-8 TERM=dumb bash "$2"' _ "$root" "$1"
}
inside /tmp/image.sh 2>&1 | tee "$work/image.log" || die "making the image failed ($work/image.log)"
rc=0
inside /tmp/test.sh > "$work/test.log" 2>&1 || rc=$?
grep -E '^test.sh: |^fresh_machine_test: |tests passed|tests failed' "$work/test.log" || true
(( keep )) || rm -rf "$root"
exit $rc
