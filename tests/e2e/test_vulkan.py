"""test_vulkan.py: `--device vulkan` end to end (issue 15; labels e2e and gpu; skipped,
passing, when the machine has no Vulkan device). The device rounds a quantized matmul's
activations to the CPU's Q8 grid (kernels/vulkan act_round.comp, bit for bit: vulkan_test),
so perplexity of a chunk is compared on the bundled Q4_1 file itself: within twice the
spread of the CPU's own kernel paths (SHARDLM_ISA=scalar against the default SIMD, the same
quantized activations, other float arithmetic; at least 1%): the device and the scalar path
are two draws of the same noise, so one within the other's single spread is a coin toss
(2026-12-06, Zen 3: scalar 1.71% off, the device 0.45% with matmul.comp's 16 x 16 tiles and
2.64% with its 32 x 32 register tiles, whose kernel errors are the same or smaller,
vulkan_test). Not the 0.1% the issue asks for, which even the CPU does not meet against
itself: rounding to a Q8 grid turns last-bit differences into whole steps now and then.
And on SmolLM2 requantized to F32 (no activation rounding anywhere) within 0.1% of the CPU
backend's. To F16, a 3-node loopback cluster whose second worker runs `--device
vulkan` gives the CPU cluster's greedy tokens (--sync-type f32: partial sums all-reduced, so
the nodes need not compute bit-identical parts), with equal shares and with the default
--shares auto (which measures each node's speed when their devices differ: the device's
share is then the smallest), and 16 tokens with the root on the device, and with exact sync
(gathers) and a Vulkan worker (equal shares: its heads start inside a KV group). The refusals: a device index out of
range (generate and worker), exact attention, a model larger than the device's memory. The
greedy tokens of one node on the Q4_1 file beside the CPU's are vulkan_model_test's
(VulkanSmolLM2)."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, run_main, start  # noqa: E402

BIN = os.environ["SHARDLM_BIN"]
MODEL = os.environ["SHARDLM_MODEL"]
TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "perplexity_licenses.txt")
PROMPT = "The three primary colors are"


def run(cmd, timeout=300, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def perplexity(model, device, isa=None):
    r = run([BIN, "perplexity", "-m", model, "-f", TEXT, "--ctx", "64", "--chunks", "1", "-t", "2", "--device", device],
            env=dict(os.environ, SHARDLM_ISA=isa) if isa else None)
    m = re.search(r"Final estimate: PPL = ([0-9.]+)", r.stdout)
    if not m:
        raise RuntimeError("perplexity --device %s failed: %s" % (device, r.stderr[-800:]))
    return float(m.group(1))


def worker(device):
    return start([BIN, "worker", "--port", "0", "--host", "127.0.0.1", "-t", "1", "--device", device])


def cluster_run(model, devices, sync="f32", root="cpu", n=32, shares="auto"):
    addrs = [worker(d)[1] for d in devices]
    r = run([BIN, "generate", "-m", model, "-p", PROMPT, "-n", str(n), "--temp", "0", "-t", "1", "--sync-type", sync,
             "--device", root, "--workers", ",".join(addrs), "--shares", shares])
    if r.returncode != 0:
        raise RuntimeError("cluster generate failed: " + r.stderr[-800:])
    return r


def cluster_text(model, devices, **kw):
    return cluster_run(model, devices, **kw).stdout


def main():
    d = run([BIN, "devices"])
    if "vulkan:0 " not in d.stdout:
        print("skipped: no Vulkan device (%s)" % (d.stdout + d.stderr).strip()[-300:], flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        f32, f16 = os.path.join(tmp, "smol_f32.gguf"), os.path.join(tmp, "smol_f16.gguf")
        for path, t in ((f32, "F32"), (f16, "F16")):
            q = run([BIN, "quantize", MODEL, path, t])
            check(q.returncode == 0, "quantize to %s: %s" % (t, q.stderr.strip()[-200:]))
        cpu, gpu, scalar = perplexity(MODEL, "cpu"), perplexity(MODEL, "vulkan"), perplexity(MODEL, "cpu", "scalar")
        spread = max(abs(scalar - cpu) / cpu, 1e-2)
        print("Q4_1 perplexity, a chunk of 64: cpu %.4f, vulkan %.4f (%.2f%%), cpu scalar %.4f (%.2f%%)"
              % (cpu, gpu, 100 * (gpu - cpu) / cpu, scalar, 100 * (scalar - cpu) / cpu), flush=True)
        check(abs(gpu - cpu) / cpu <= 2 * spread, "Q4_1 perplexity: vulkan %.4f within twice the CPU paths' spread "
              "(%.2f%%, at least 1%%) of cpu %.4f" % (gpu, 100 * spread, cpu))
        cpu, gpu = perplexity(f32, "cpu"), perplexity(f32, "vulkan")
        check(abs(gpu - cpu) / cpu < 1e-3, "F32 perplexity, a chunk of 64: vulkan %.4f within 0.1%% of cpu %.4f (%.4f%%)"
              % (gpu, cpu, 100 * abs(gpu - cpu) / cpu))
        want = cluster_text(f16, ["cpu", "cpu"])
        got = cluster_text(f16, ["cpu", "vulkan"], shares="equal")
        check(got == want and len(want) > 40,
              "F16, 3 nodes, one worker on --device vulkan, 32 greedy tokens = the CPU cluster's: %r" % got[-120:])
        # --shares auto (the default) with a Vulkan worker beside CPU nodes: shares from each
        # node's measured speed (lavapipe is far slower than the CPU: the smallest share, 32
        # MLP rows, the plan's unit for float types too).
        r = cluster_run(f16, ["cpu", "vulkan"], n=16)
        m = re.search(r"shares from measured speed[^\n]*", r.stderr)
        print("auto shares: %s" % (m.group(0) if m else r.stderr[-400:]), flush=True)
        shares = [float(x) for x in re.findall(r"share ([0-9.]+)", m.group(0))] if m else []
        check(len(shares) == 3 and "Vulkan device 0" in m.group(0) and shares[2] < min(shares[0], shares[1]),
              "--shares auto with a Vulkan worker: measured shares, the device's the smallest: %s" % shares)
        check(len(r.stdout) > 20 and want.startswith(r.stdout.rstrip("\n")),
              "F16, measured shares with a Vulkan worker: the CPU cluster's tokens: %r" % r.stdout[-80:])
        # 16 tokens: the root on the device; exact sync (gathers) with a Vulkan worker.
        short = cluster_text(f16, ["cpu", "cpu"], n=16)
        got = cluster_text(f16, ["cpu", "cpu"], root="vulkan", n=16, shares="equal")
        check(got == short, "F16, the root on --device vulkan, 2 CPU workers: the CPU cluster's tokens: %r" % got[-80:])
        got = cluster_text(f16, ["cpu", "vulkan"], sync="exact", n=16, shares="equal")
        check(got == short, "F16, --sync-type exact with a Vulkan worker: the CPU cluster's tokens: %r" % got[-80:])

    r = run([BIN, "generate", "-m", MODEL, "-p", PROMPT, "-n", "4", "--device", "vulkan:7"])
    check(r.returncode != 0 and "no Vulkan device 7" in r.stderr, "--device vulkan:7: %s" % r.stderr.strip()[-200:])
    r = run([BIN, "worker", "--port", "0", "--device", "vulkan:7"])
    check(r.returncode != 0 and "Vulkan device 7" in r.stderr, "worker --device vulkan:7: %s" % r.stderr.strip()[-200:])
    r = run([BIN, "generate", "-m", MODEL, "-p", PROMPT, "-n", "4", "--device", "vulkan", "--flash-attn", "off"])
    check(r.returncode != 0 and "--flash-attn on" in r.stderr, "--flash-attn off: %s" % r.stderr.strip()[-200:])
    with tempfile.TemporaryDirectory() as tmp:
        big = os.path.join(tmp, "big.gguf")
        mk = run([BIN, "make-model", "--shape", "llama3-8b", "--type", "q4_0", big], timeout=600)
        if mk.returncode != 0:
            check(False, "make-model llama3-8b: " + mk.stderr[-300:])
            return
        r = run([BIN, "generate", "-m", big, "-p", "hi", "-n", "1", "--device", "vulkan", "--ctx", "256"])
        check(r.returncode != 0 and "Vulkan device 0" in r.stderr and "GiB" in r.stderr,
              "a model larger than the device: %s" % r.stderr.strip()[-300:])


if __name__ == "__main__":
    run_main(main)
