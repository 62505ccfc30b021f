#!/bin/bash
# slurm_one_host.sh: a one-node Slurm on this machine, to try `srun --mpi=pmix shardlm ...
# --transport mpi` (docs/MPI.md, tests/e2e/test_srun.py). Needs root and Debian's
# slurm-wlm (slurmctld, slurmd, munge; `apt-get install -y slurm-wlm`).
#   tools/slurm_one_host.sh start   # writes $DIR/slurm.conf, starts munged, slurmctld, slurmd
#   export SLURM_CONF=$DIR/slurm.conf   (DIR default /tmp/shardlm-slurm)
#   srun -n 2 --mpi=pmix build/release/shardlm generate -m MODEL -p "..." --transport mpi
#   tools/slurm_one_host.sh stop    # ends the three daemons it started (by their pid files)
set -euo pipefail
DIR=${DIR:-/tmp/shardlm-slurm}
case ${1:-} in
start)
  mkdir -p "$DIR"/{state,spool,log}
  read -r cpus mem < <(awk '/^processor/{c++} /^MemTotal/{m=int($2/1024*0.8)} END{print c, m}' /proc/cpuinfo /proc/meminfo)
  cat >"$DIR/slurm.conf" <<EOF
ClusterName=shardlm-test
SlurmctldHost=$(hostname -s)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
# No cgroups in a container: track tasks by /proc, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# OpenMPI (Debian's 4.1, external PMIx 4.2) is started through PMIx; pmi2 does not work with it.
MpiDefault=pmix
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
NodeName=$(hostname -s) CPUs=$cpus RealMemory=$mem State=UNKNOWN
# OverSubscribe: more tasks than cores, as tests on a small machine want.
PartitionName=debug Nodes=$(hostname -s) Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
  mkdir -p /run/munge && chown munge:munge /run/munge
  if ! munge -n >/dev/null 2>&1; then  # no munged answers yet: start one (and stop it later)
    su -s /bin/sh munge -c /usr/sbin/munged
    touch "$DIR/munged-started"
  fi
  SLURM_CONF=$DIR/slurm.conf slurmctld
  SLURM_CONF=$DIR/slurm.conf slurmd
  for _ in $(seq 20); do SLURM_CONF=$DIR/slurm.conf sinfo -h 2>/dev/null | grep -q idle && break; sleep 0.5; done
  SLURM_CONF=$DIR/slurm.conf sinfo
  echo "export SLURM_CONF=$DIR/slurm.conf"
  ;;
stop)
  for f in slurmd slurmctld; do
    [ -f "$DIR/$f.pid" ] && kill "$(cat "$DIR/$f.pid")" 2>/dev/null || true
  done
  if [ -f "$DIR/munged-started" ] && [ -f /run/munge/munged.pid ]; then
    kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true
    rm -f "$DIR/munged-started"
  fi
  ;;
*)
  echo "usage: $0 start|stop   (DIR=$DIR)" >&2
  exit 2
  ;;
esac
