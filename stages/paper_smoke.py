"""The paper-scale smoke run (`make paper-smoke`; not a DVC stage): the real `dvc repro` of the paper-smoke scale
(configs/scales/paper-smoke.yaml: the paper scale with epochs, steps, batch, seeds and data roots shrunk) on
synthetic data in the real formats, in a scratch copy of the repository (.smoke/repo), so nothing touches the
committed results. Prints the time of every stage, the slowest ones and the total.

    python stages/paper_smoke.py [--scratch .smoke] [--keep]   # --keep: reuse the scratch copy's results

What it proves: every paper configuration builds, trains a step under torchrun (2 processes, gloo, bf16
autocast, the full recipe), evaluates at every exit with fvcore GFLOPs, and aggregates and reports; the
ImageNet subsetting reads a real folder layout (with CMYK, grayscale and truncated JPEGs) and the CIFAR/MNIST
readers their real formats. What it does not: anything about accuracy, GPU kernels or NCCL, or more than one node.
"""
import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = ("metrics/", "plots/", "configs/resolved/", ".smoke/")


def sh(cmd: str, cwd: Path) -> None:
    subprocess.run(cmd, cwd=cwd, shell=True, check=True)


def make_scratch(repo: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file() and not f.startswith(SKIP) and not f.endswith("dvc.lock"):
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, repo / f)
    (repo / ".gitignore").write_text((repo / ".gitignore").read_text() + "/synthetic/\n")
    (repo / ".dvc" / "config").write_text("[core]\n    analytics = false\n")  # never push smoke outputs
    sh(f"{sys.executable} -m itervision.data.synthetic --out synthetic", repo)
    sh(f"{sys.executable} stages/set_scale.py paper-smoke", repo)
    sh("git init -q && git add -A && git -c user.email=smoke@itervision -c user.name=smoke commit -qm smoke", repo)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scratch", default=str(ROOT / ".smoke"))
    ap.add_argument("--keep", action="store_true", help="keep an existing scratch copy and its results")
    ap.add_argument("--target", help="a dvc.yaml stage to reproduce instead of the whole pipeline")
    args = ap.parse_args(argv)
    repo = Path(args.scratch) / "repo"
    t_start = time.perf_counter()
    if repo.exists() and not args.keep:
        shutil.rmtree(repo)
    if not repo.exists():
        repo.mkdir(parents=True)
        make_scratch(repo)
    print(f"scratch copy ready in {time.perf_counter() - t_start:.0f} s: {repo}", flush=True)
    times, current, t0 = {}, None, time.perf_counter()
    cmd = [sys.executable, "-m", "dvc", "repro"] + ([args.target] if args.target else [])
    proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        m = re.match(r"Running stage '([^']+)'", line)
        now = time.perf_counter()
        if m:
            if current:
                times[current] = now - t0
            current, t0 = m.group(1), now
            print(f"[{now - t_start:7.1f} s] {m.group(1)}", flush=True)
        elif line.startswith(("error", "ERROR", "Traceback")) or "Error" in line:
            print(line.rstrip(), flush=True)
    proc.wait()
    if current:
        times[current] = time.perf_counter() - t0
    total = time.perf_counter() - t_start
    slow = sorted(times.items(), key=lambda kv: -kv[1])[:8]
    print("slowest stages: " + "; ".join(f"{k} {v:.0f} s" for k, v in slow))
    print(f"paper-smoke: {len(times)} stages, {'passed' if proc.returncode == 0 else 'FAILED'} in {total / 60:.1f} min")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
