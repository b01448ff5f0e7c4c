#!/usr/bin/env bash
# trainer-data's output survives a crash at any moment: under strace, the
# finished OUTPUT.partial is fsynced, then renamed to OUTPUT, then its directory
# is fsynced, in that order (io/h5_write.hpp rename_durably). strace is a test
# dependency (share/install-deps.sh); without it the test fails.
# Usage: durable_output.sh OUTPUT trainer-data args... (the args write OUTPUT)
set -uo pipefail
die() { echo "FAIL: $*" >&2; exit 1; }
out=$1; shift
command -v strace >/dev/null || die "strace is not installed (share/install-deps.sh installs it)"
rm -f "$out" "$out.partial"
trace=$out.strace
strace -f -y -e trace=fsync,fdatasync,rename,renameat,renameat2 -o "$trace" "$@" || die "trainer-data failed"
[[ -s "$out" && ! -e "$out.partial" ]] || die "$out was not written"
dir=$(cd "$(dirname "$out")" && pwd -P); base=$(basename "$out")
grep -E "fsync|rename" "$trace"
awk -v dir="$dir" -v base="$base" '
  index($0, "fsync(") && index($0, "<" dir "/" base ".partial>") { if (!renamed) synced = 1 }
  index($0, "rename") && index($0, base ".partial\"") { if (synced) renamed = 1 }
  index($0, "fsync(") && index($0, "<" dir ">") { if (renamed) dir_synced = 1 }
  END {
    if (!synced) print "no fsync of " base ".partial before its rename"
    if (!renamed) print "no rename of " base ".partial to " base " after its fsync"
    if (!dir_synced) print "no fsync of " dir " after the rename"
    exit !(synced && renamed && dir_synced) }' "$trace" || die "the output is not made durable in order"
echo "fsync($base.partial) -> rename -> fsync($dir): in order"
