"""test_srun.py: shardlm started by Slurm's srun (--transport mpi, issue 17).
Skipped unless `srun` is installed and a Slurm controller answers (`sinfo`; e.g. the
one-host Slurm of tools/slurm_one_host.sh, with SLURM_CONF pointing at its slurm.conf).
  * `srun -n 2 --mpi=pmix shardlm generate --transport mpi --sync-type exact` prints one
    node's greedy text;
  * `srun -n 2 --mpi=none ... --transport mpi` is refused with a message naming --mpi=pmix."""
import os
import shutil
import subprocess

import harness
from harness import check

BIN = os.environ["SHARDLM_BIN"]
MODEL = os.environ["SHARDLM_MODEL"]
GEN = [BIN, "generate", "-m", MODEL, "-p", "1, 2, 3, 4, 5,", "-n", "16", "--temp", "0", "-t", "1"]


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240)


def main():
    if not shutil.which("srun") or subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode != 0:
        print("SKIP: no srun, or no Slurm controller answers (tools/slurm_one_host.sh start)")
        return
    want = run(GEN).stdout
    check(len(want) > 10, "one node generates")
    r = run(["srun", "-n", "2", "--mpi=pmix"] + GEN + ["--transport", "mpi", "--sync-type", "exact"])
    check(r.returncode == 0 and r.stdout == want and "cluster: 2 nodes" in r.stderr,
          "srun -n 2 --mpi=pmix: one node's text (rc %d, got %r, want %r) %s" %
          (r.returncode, r.stdout, want, r.stderr[-600:] if r.returncode else ""))
    r = run(["srun", "-n", "2", "--mpi=none"] + GEN + ["--transport", "mpi"])
    check(r.returncode != 0 and "--mpi=pmix" in r.stderr,
          "srun --mpi=none: refused, naming --mpi=pmix (rc %d) %s" % (r.returncode, r.stderr[-400:]))


if __name__ == "__main__":
    harness.run_main(main)
