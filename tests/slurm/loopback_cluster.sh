#!/usr/bin/env bash
# A private one-node Slurm cluster on 127.0.0.1 for the slurm tests, started by
# hand (no systemd) from a directory it owns:
#   loopback_cluster.sh start DIR   writes DIR/slurm.conf (node = this host, 8 CPUs,
#                                   one partition "test"), a munge key, state, spool
#                                   and log directories; starts munged, slurmctld and
#                                   slurmd in the foreground of background processes
#                                   (their PIDs in DIR/pids) and waits until the node
#                                   is idle. Then: export SLURM_CONF=DIR/slurm.conf
#   loopback_cluster.sh stop DIR    cancels every job of the cluster, waits for them to
#                                   end, stops the daemons by their PIDs and then kills
#                                   any process still carrying SLURM_CONF=DIR/slurm.conf
#                                   in its environment (job steps, ranks)
# LOOPBACK_EXTRA_CONF=FILE appends FILE to slurm.conf (@NODE@ becomes the node's
# name), e.g. partitions to try preemption with. Nothing outside DIR is touched: its own munged (own key and socket), its own
# ports (the first free pair from 16817), its own state. Fails (exit 1) when the
# Slurm or MUNGE packages are missing: share/install-deps.sh installs them.
# The whole start or stop takes a few seconds and gives up after 30 s.
set -uo pipefail

die() { echo "loopback_cluster: error: $*" >&2; exit 1; }

[[ $# -eq 2 ]] || die "usage: loopback_cluster.sh start|stop DIR"
action=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd) || die "cannot create $2"
conf=$dir/slurm.conf
# Client commands get SLURM_CONF one by one, so that neither this script nor its
# helpers carry it (the sweep in stop_cluster kills what does).
unset SLURM_CONF

# Stops processes by PID (each only if it still is the daemon named, not a
# reused PID): SIGTERM to all, up to 10 s, then SIGKILL.
stop_daemons() {  # "NAME PID" lines
  local name pid live=()
  while read -r name pid; do
    { [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; } || continue
    [[ "$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)" == *"$name"* ]] || continue
    kill -TERM "$pid" 2>/dev/null && live+=("$pid")
  done
  for _ in $(seq 100); do
    local still=()
    for pid in "${live[@]}"; do kill -0 "$pid" 2>/dev/null && still+=("$pid"); done
    live=("${still[@]}")
    [[ ${#live[@]} -eq 0 ]] && return 0
    sleep 0.1
  done
  echo "loopback_cluster: ${live[*]} ignored SIGTERM for 10 s: SIGKILL" >&2
  kill -KILL "${live[@]}" 2>/dev/null
}

# This process and its ancestors (the test script that called it may carry SLURM_CONF).
ancestors() {
  local pid=$BASHPID
  while [[ $pid -gt 1 ]]; do
    echo "$pid"
    pid=$(awk '{ print $4 }' "/proc/$pid/stat" 2>/dev/null) || break
  done
}

# PIDs of processes whose environment holds SLURM_CONF=$conf (what this cluster
# ran), except this script and its callers.
cluster_processes() {
  local env_file pid skip
  skip=" $(ancestors | tr '\n' ' ') $$ "
  for env_file in /proc/[0-9]*/environ; do
    pid=${env_file#/proc/}; pid=${pid%/environ}
    [[ "$skip" == *" $pid "* ]] && continue
    { tr '\0' '\n' < "$env_file"; } 2>/dev/null | grep -qxF "SLURM_CONF=$conf" && echo "$pid"
  done
}

stop_cluster() {
  if [[ -s "$dir/pids" ]] && grep -q '^slurmctld ' "$dir/pids"; then
    # Cancel every job and give them up to 15 s to finish (COMPLETING included).
    SLURM_CONF=$conf timeout 10 scancel --full --quiet --user="$(id -un)" 2>/dev/null
    for _ in $(seq 150); do
      [[ -z "$(SLURM_CONF=$conf timeout 5 squeue -h -o %i 2>/dev/null)" ]] && break
      sleep 0.1
    done
  fi
  if [[ -s "$dir/pids" ]]; then
    # The Slurm daemons, then munged (they may still talk to it while they stop).
    grep -v '^munged ' "$dir/pids" | stop_daemons
    grep '^munged ' "$dir/pids" | stop_daemons
    : > "$dir/pids"
  fi
  local left
  left=$(cluster_processes | tr '\n' ' ')
  if [[ -n "$left" ]]; then
    echo "loopback_cluster: killing processes left by the cluster's jobs: $left" >&2
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null
  fi
  if [[ -s "$dir/munge_dir" ]]; then rm -rf "$(cat "$dir/munge_dir")"; rm -f "$dir/munge_dir"; fi
  return 0
}

port_free() { [[ -z "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]]; }

start_cluster() {
  local missing=() cmd
  for cmd in munged slurmctld slurmd sbatch scontrol squeue sinfo scancel srun; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
  done
  [[ ${#missing[@]} -eq 0 ]] ||
    die "missing ${missing[*]}: install the packages slurmctld slurmd slurm-client munge (share/install-deps.sh)"
  command -v ss >/dev/null 2>&1 || die "missing ss (package iproute2)"
  [[ $(id -u) -eq 0 ]] || die "the loopback cluster runs slurmd as root; run as root"

  stop_cluster >/dev/null 2>&1  # a previous run's leftovers, if any
  rm -rf "$dir/state" "$dir/spool" "$dir/log" "$dir/run" "$dir/munge"
  mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/run" || die "cannot create directories in $dir"
  : > "$dir/pids"

  # MUNGE: its own key and socket. The socket's directory must be reachable by
  # everyone (munged checks), the key's readable by root only; a socket path has
  # at most 107 bytes, so a long DIR gets a socket directory in /tmp.
  local munge_dir=$dir/munge
  if [[ ${#munge_dir} -gt 80 ]]; then
    munge_dir=$(mktemp -d /tmp/shardtrain-munge.XXXXXX) || die "mktemp failed"
    echo "$munge_dir" > "$dir/munge_dir"
  fi
  { mkdir -p "$munge_dir/private" && chmod 755 "$munge_dir" && chmod 700 "$munge_dir/private"; } ||
    die "cannot create $munge_dir"
  { dd if=/dev/urandom of="$munge_dir/private/munge.key" bs=1024 count=1 status=none &&
    chmod 400 "$munge_dir/private/munge.key"; } || die "cannot write a munge key"
  local socket=$munge_dir/munge.socket
  munged --foreground --force --socket="$socket" --key-file="$munge_dir/private/munge.key" \
    --pid-file="$munge_dir/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$munge_dir/private/munged.seed" > "$dir/log/munged.out" 2>&1 &
  echo "munged $!" >> "$dir/pids"
  for _ in $(seq 100); do [[ -S "$socket" ]] && break; sleep 0.1; done
  [[ -S "$socket" ]] || { cat "$dir/log/munged.out" "$dir/log/munged.log" >&2; die "munged did not start"; }

  local ctld_port=16817
  while ! port_free "$ctld_port" || ! port_free $((ctld_port + 1)); do
    ctld_port=$((ctld_port + 2))
    [[ $ctld_port -lt 17817 ]] || die "no free pair of ports in 16817-17817"
  done
  local node
  node=$(hostname -s)
  cat > "$conf" <<EOF
# Generated by tests/slurm/loopback_cluster.sh: a private one-node cluster on 127.0.0.1.
ClusterName=shardtrain-loopback
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$((ctld_port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again
# (default 120 s); 5 s keeps the requeue test short.
AuthInfo=socket=$socket,cred_expire=5
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
SlurmdParameters=config_overrides
ReturnToService=2
# The main scheduling loop every second (default 60 s): otherwise a requeued
# job whose begin time has passed waits up to a minute for the next pass.
SchedulerParameters=sched_interval=1
KillWait=5
MinJobAge=600
InactiveLimit=0
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$node NodeAddr=127.0.0.1 CPUs=8 RealMemory=16000 State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  if [[ -n "${LOOPBACK_EXTRA_CONF:-}" ]]; then
    { echo "# From LOOPBACK_EXTRA_CONF=$LOOPBACK_EXTRA_CONF"; sed "s/@NODE@/$node/g" "$LOOPBACK_EXTRA_CONF"; } >> "$conf" ||
      die "cannot read LOOPBACK_EXTRA_CONF=$LOOPBACK_EXTRA_CONF"
  fi
  SLURM_CONF=$conf slurmctld -D -i -f "$conf" > "$dir/log/slurmctld.out" 2>&1 &
  echo "slurmctld $!" >> "$dir/pids"
  SLURM_CONF=$conf slurmd -D -f "$conf" -N "$node" > "$dir/log/slurmd.out" 2>&1 &
  echo "slurmd $!" >> "$dir/pids"

  local state=
  for _ in $(seq 300); do
    state=$(SLURM_CONF=$conf timeout 5 sinfo -h -n "$node" -o %T 2>/dev/null)
    [[ "$state" == idle ]] && break
    while read -r name pid; do
      kill -0 "$pid" 2>/dev/null || {
        tail -n 20 "$dir/log/$name.out" "$dir/log/$name.log" >&2 2>/dev/null
        die "$name exited during start-up (logs in $dir/log)"
      }
    done < "$dir/pids"
    sleep 0.1
  done
  [[ "$state" == idle ]] || { tail -n 20 "$dir"/log/*.log >&2; die "node $node is not idle after 30 s (state '$state')"; }
  echo "loopback_cluster: node $node idle, slurmctld on 127.0.0.1:$ctld_port; export SLURM_CONF=$conf"
}

case "$action" in
  start) start_cluster ;;
  stop) stop_cluster ;;
  *) die "usage: loopback_cluster.sh start|stop DIR" ;;
esac
