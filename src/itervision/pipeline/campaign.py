"""The campaign: the stages DVC says are not up to date, independent ones in parallel on Dask workers, recorded by
DVC exactly as `dvc repro` records them. `python -m itervision.pipeline.campaign` (make campaign; docs/campaign.md).

    python -m itervision.pipeline.campaign                       # local: as many workers as the cores allow
    python -m itervision.pipeline.campaign --workers 2          # local: 2 worker processes on this machine
    python -m itervision.pipeline.campaign --gpus 8             # local: one worker holding this machine's 8 GPUs
    python -m itervision.pipeline.campaign --gpus-per-worker 1  # local: a worker per GPU
    python -m itervision.pipeline.campaign --scheduler tcp://HOST:8786  # a running Dask cluster (SLURM: jobqueue)
    python -m itervision.pipeline.campaign TARGET ...           # only what the targets need, as `dvc repro TARGET`

How: the coordinator (this process, the only one that touches DVC) walks DVC's stage graph (repo.index.graph).
Once a stage's dependencies are settled it asks DVC whether the stage changed; if so it removes the stage's
outputs and submits its command to Dask, so independent stages run side by side (a latency profile, marked
`meta: {alone: true}` in its dvc.yaml, runs with nothing beside it, so its timings are not shared). Each stage
that succeeds is recorded by DVC's own calls, as `dvc repro` does after a command: save (hashes, run cache),
commit (outputs into the cache), dump (dvc.lock). A stage whose inputs are unchanged after its upstream reran
is not run, as in `dvc repro`. Afterwards `dvc status` is clean and `dvc repro` runs nothing.

GPUs: a run takes the processes its recipe names (params run.gpus / run.placement; its resolved run.json's
`world`), one GPU each, and a profile stage one GPU; other stages none. Each worker declares its GPUs as a Dask
resource ("GPU"), so a worker of 8 GPUs runs eight one-GPU runs side by side, or one 8-GPU run, or a mix that
fits; the worker hands the task the device numbers it holds free (CUDA_VISIBLE_DEVICES), and a run of several
processes starts its own torchrun group on them (stages/run.py). A run that needs more GPUs than any worker has
is refused in one line.

Dask executes: one task per stage, its command in a subprocess that dies with its worker (PR_SET_PDEATHSIG). A
worker killed mid-run is replaced by its nanny and the scheduler runs the stage again, which resumes from its
checkpoint (stages/run.py); a run's exclusive lock keeps two processes off one run. A stage that fails (a bad
input) is reported in one line with the last line it printed, and its dependents do not run; independent stages
go on, and the exit status is 2 (as for every error of the command line). Nothing is recorded for a stage that
did not succeed, and the dvc.lock files are checked before anything runs (lockfiles.py). A campaign stopped and
started again continues: DVC knows which stages are recorded, and runs resume from their checkpoints.

Why Dask: it runs a task graph on one machine (LocalCluster) and on clusters users have (SLURM, PBS, LSF and SGE
through dask-jobqueue, Kubernetes, or `dask scheduler` / `dask worker` started by hand) with the same client
code, restarts dead workers, and both deployments can be tested for real on one machine. Ray can do the same
with a heavier runtime and no job-queue adapters of its own; submitit covers SLURM alone and runs no local pool.

The thread count of a CPU run is part of its recipe (train.threads), so any number of workers gives the committed
numbers; a local worker gets OMP_NUM_THREADS = cores / workers for everything else. `dvc exp run` cannot drive a
campaign (it runs `dvc repro` itself, one stage at a time): run the campaign, then `dvc exp save` to record the
workspace as an experiment.
"""
from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from itervision.errors import ArgumentParser, UserError, cli_entry


# ------------------------------------------------------------------------------------------ on a worker

_POOL: dict = {}  # this worker process's GPUs: {"free": [device numbers], "lock": a lock}; tasks run in its threads


def take_devices(n: int) -> list[str]:
    """`n` of this worker's GPU numbers (its CUDA_VISIBLE_DEVICES, else 0 .. its "GPU" resource - 1). The Dask
    scheduler starts a task only when the worker has that many GPUs unclaimed, so n are always free here."""
    import threading

    from distributed import get_worker

    if not _POOL:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        total = int(get_worker().state.total_resources.get("GPU", 0))
        devices = visible.split(",") if visible else [str(g) for g in range(total)]
        _POOL.update(free=devices[:total] if total else devices, lock=threading.Lock())
    with _POOL["lock"]:
        if len(_POOL["free"]) < n:
            raise RuntimeError(f"worker has {len(_POOL['free'])} free GPUs, the task needs {n}")
        got, _POOL["free"] = _POOL["free"][:n], _POOL["free"][n:]
    return got


def give_devices(devices: list[str]) -> None:
    with _POOL["lock"]:
        _POOL["free"] = sorted(_POOL["free"] + devices, key=int)


def run_on_gpus(cmd: str, cwd: str, env: dict | None, gpus: int) -> dict:
    """run_command on `gpus` of this worker's GPUs (CUDA_VISIBLE_DEVICES), given back when it ends."""
    devices = take_devices(gpus)
    try:
        return {**run_command(cmd, cwd, {**(env or {}), "CUDA_VISIBLE_DEVICES": ",".join(devices)}),
                "devices": devices}
    finally:
        give_devices(devices)


def run_command(cmd: str, cwd: str, env: dict | None = None) -> dict:
    """Run a stage's command in a subprocess that is killed when this worker dies; (rc, seconds, last line, when it
    started and ended)."""
    def die_with_parent():  # Linux: the stage's process goes when the worker process goes (kill -9 included)
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass

    # A plain command runs without a shell between it and the worker: PR_SET_PDEATHSIG does not pass to the
    # children of a shell (dash forks even its last command), so a killed worker would leave the run going.
    argv = shlex.split(cmd) if not set(cmd) & set("|&;<>()$`*?[]#~=%\n\"'") else ["/bin/sh", "-c", cmd]
    t0, started = time.perf_counter(), time.time()
    r = subprocess.run(argv, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                       preexec_fn=die_with_parent)
    lines = [x for x in (r.stderr + r.stdout).splitlines() if x.strip() and not x.startswith("\r")]
    tail = next((x for x in reversed(lines) if x.startswith("error")), lines[-1] if lines else "")
    segments = [x.strip() for line in (r.stderr + r.stdout).splitlines() for x in line.split("\r")]
    resumed = next((x for x in segments if x.startswith("resuming ")), "")  # a retried run says so (between bars)
    return {"rc": r.returncode, "seconds": time.perf_counter() - t0, "last": tail[-300:], "resumed": resumed,
            "host": os.uname().nodename, "span": (started, time.time())}


# ------------------------------------------------------------------------------------------ the coordinator

@dataclass
class Outcome:
    ran: list = field(default_factory=list)        # (stage, seconds)
    skipped: list = field(default_factory=list)    # up to date
    failed: list = field(default_factory=list)     # (stage, last line)
    blocked: list = field(default_factory=list)    # dependents of a failed stage
    on_gpus: list = field(default_factory=list)    # (stage, devices, start, end) of the stages that held GPUs

    def most_gpu_stages_at_once(self) -> int:
        events = sorted([(s, 1) for _, _, s, _ in self.on_gpus] + [(e, -1) for _, _, _, e in self.on_gpus])
        now = peak = 0
        for _, step in events:
            now += step
            peak = max(peak, now)
        return peak


def needed(graph, targets):
    """The part of DVC's stage graph the targets need (all of it when there are none). DVC's edges go from a
    stage to the stages it depends on."""
    import networkx as nx

    if not targets:
        return graph
    nodes = set()
    for t in targets:
        nodes |= {t} | nx.descendants(graph, t)
    return graph.subgraph(nodes)


def resolve_targets(repo, names: list[str]) -> list:
    out = []
    for name in names:
        found = [s for s in repo.index.stages if s.addressing == name or s.addressing.split(":")[-1] == name
                 or s.addressing.split(":")[-1].split("@")[0] == name]
        if not found:
            raise UserError(f"no stage '{name}' in the pipeline; see `dvc stage list --all`")
        out += found
    return out


def restore_from_run_cache(stage) -> bool:
    from dvc.stage.cache import RunCacheNotFoundError

    try:
        stage.repo.stage_cache.restore(stage)
        return True
    except RunCacheNotFoundError:
        return False


def record(stage) -> None:
    """What `dvc repro` does after a stage's command succeeded: hashes (and the run cache), outputs into the
    cache, the stage's entry in its dvc.lock."""
    no_cache_outs = any(not out.use_cache for out in stage.outs if not (out.is_metric or out.is_plot))
    stage.save(run_cache=not no_cache_outs)
    stage.commit()
    stage.dump(update_pipeline=False)


class Campaign:
    """The coordinator's state: which stages are pending, ready, running, done or broken. A stage is looked at
    once all its dependencies are settled: up to date (or restored from the run cache) it is settled at once,
    changed it becomes ready; ready stages are submitted to the cluster, stages with more dependents first."""

    def __init__(self, client, repo, graph, env: dict | None, log, bar):
        from distributed import as_completed

        self.client, self.repo, self.graph, self.env, self.log, self.bar = client, repo, graph, env, log, bar
        workers = client.scheduler_info(n_workers=-1)["workers"].values()
        self.worker_gpus = max((int((w.get("resources") or {}).get("GPU", 0)) for w in workers), default=0)
        self.out = Outcome()
        self.pending, self.done, self.broken = set(graph.nodes), set(), set()
        self.running, self.ready = {}, []
        self.queue = as_completed()

    def run(self) -> Outcome:
        self.settle_what_can_be_settled()
        self.dispatch()
        for future in self.queue:
            self.finish(self.running.pop(future), future)
            self.settle_what_can_be_settled()
            self.dispatch()
            self.bar.set_postfix(running=len(self.running), failed=len(self.out.failed), refresh=False)
        return self.out

    def settle_what_can_be_settled(self):
        """Every pending stage whose dependencies are all settled: blocked (a dependency broke), up to date, or
        ready to run; repeated while that settles more."""
        moved = True
        while moved:
            moved = False
            for stage in sorted(self.pending, key=lambda s: s.addressing):
                deps = set(self.graph.successors(stage))
                if deps & self.broken:
                    self.pending.discard(stage)
                    self.broken.add(stage)
                    self.out.blocked.append(stage.addressing)
                    self.bar.update()
                    moved = True
                elif deps <= self.done:
                    self.pending.discard(stage)
                    if self.needs_running(stage):
                        self.ready.append(stage)
                    else:
                        self.out.skipped.append(stage.addressing)
                        self.bar.update()
                        self.done.add(stage)
                        moved = True

    def needs_running(self, stage) -> bool:
        """As `dvc repro` decides: unchanged, or restored from the run cache, it does not; else its outputs go."""
        with self.repo.lock:
            if not stage.changed():
                return False
            if restore_from_run_cache(stage):
                stage.dump(update_pipeline=False)
                self.log(f"{stage.addressing}: restored from the run cache")
                return False
            if self.gpus_for(stage) <= self.worker_gpus:  # one that no worker can take is refused with its outputs
                stage.remove_outs(ignore_remove=False, force=False)
            return True

    def gpus_for(self, stage) -> int:
        return stage_gpus(stage) if self.worker_gpus else 0

    def dispatch(self):
        """Submit what is ready. A stage marked `meta: {alone: true}` in its dvc.yaml (the latency profiles) runs
        with nothing beside it: after every other ready stage, one at a time."""
        if any(alone(s) for s in self.running.values()):
            return
        for stage in [s for s in self.ready if not alone(s)]:
            self.ready.remove(stage)
            self.submit(stage)
        if self.ready and not self.running:
            self.submit(self.ready.pop(0))

    def submit(self, stage):
        import networkx as nx

        options = dict(key=f"stage-{stage.addressing}", pure=False, priority=len(nx.ancestors(self.graph, stage)))
        gpus = self.gpus_for(stage)
        if gpus > self.worker_gpus:  # no worker could ever start it: fail it now instead of waiting forever
            future = self.client.submit(refuse, f"error: {stage.addressing} needs {gpus} GPUs (params run.gpus / "
                                                f"run.placement) and the largest worker has {self.worker_gpus}; start "
                                                f"workers of {gpus} GPUs (--gpus-per-worker) or place it on fewer",
                                        **options)
        elif gpus:
            future = self.client.submit(run_on_gpus, stage.cmd, stage.wdir, self.env, gpus,
                                        resources={"GPU": gpus}, **options)
        else:
            future = self.client.submit(run_command, stage.cmd, stage.wdir, self.env, **options)
        self.running[future] = stage
        self.queue.add(future)

    def finish(self, stage, future):
        """Record a stage whose command succeeded, as `dvc repro` does; mark a failed one broken."""
        try:
            result = future.result()
        except Exception as err:  # the task itself broke (not the stage): the cluster gave up on it
            result = {"rc": -1, "seconds": 0.0, "last": f"{type(err).__name__}: {err}", "resumed": ""}
        self.bar.update()
        if result["rc"] == 0:
            with self.repo.lock:
                record(stage)
            self.done.add(stage)
            self.out.ran.append((stage.addressing, result["seconds"]))
            devices = result.get("devices")
            if devices:
                self.out.on_gpus.append((stage.addressing, devices, *result["span"]))
            self.log(f"{stage.addressing}: done in {result['seconds']:.0f} s"
                     + (f" on GPU {','.join(devices)}" if devices else "")
                     + (f" ({result['resumed']})" if result.get("resumed") else ""))
        else:
            self.broken.add(stage)
            self.out.failed.append((stage.addressing, result["last"]))
            self.log(f"{stage.addressing}: FAILED (exit {result['rc']}): {result['last']}")


def campaign(client, targets: list[str] = (), env: dict | None = None, log=print, progress: bool = False) -> Outcome:
    """Run every changed stage the targets need on the Dask cluster of `client` (the dvc.lock files checked
    first); the stages DVC finds up to date are not run."""
    from dvc.repo import Repo
    from tqdm import tqdm

    from itervision.pipeline.lockfiles import repair

    for line in repair():
        log(line)
    logging.getLogger("dvc").setLevel(logging.WARNING)  # not a line per dvc.lock update
    repo = Repo(".")
    graph = needed(repo.index.graph, resolve_targets(repo, list(targets)))
    with tqdm(total=graph.number_of_nodes(), unit="stage", desc="campaign", disable=not progress,
              file=sys.stdout) as bar:
        return Campaign(client, repo, graph, env, tqdm.write if progress else log, bar).run()


def alone(stage) -> bool:
    return bool((stage.meta or {}).get("alone"))


def refuse(line: str) -> dict:
    return {"rc": 2, "seconds": 0.0, "last": line, "resumed": ""}


def stage_gpus(stage) -> int:
    """GPUs a stage holds: a run the processes of its recipe (the `world` of the resolved run.json it depends on),
    a profile stage (a latency measurement, `alone`) one, any other stage none."""
    import json
    from pathlib import Path

    for dep in stage.deps:
        path = Path(str(dep.def_path))
        if path.name == "run.json" and "resolved" in path.parts:
            try:
                return int(json.loads((Path(stage.wdir) / path).read_text()).get("world", 1))
            except (OSError, ValueError):
                return 1  # not written yet (configure runs first in the same campaign): read again at submit
    return 1 if alone(stage) else 0


# ------------------------------------------------------------------------------------------ clusters

def local_cluster(workers: int, threads: int, gpus_per_worker: int = 0):
    """Dask workers on this machine: `workers` processes (nanny-supervised: a killed worker comes back), each with
    OMP_NUM_THREADS = threads and, with GPUs, its own group of devices (CUDA_VISIBLE_DEVICES) declared as the
    resource "GPU", and as many task slots as it has GPUs (one-GPU runs side by side)."""
    from distributed import Nanny, Scheduler, SpecCluster

    spec = {}
    for i in range(workers):
        env = {"OMP_NUM_THREADS": str(threads)}
        options = {"nthreads": 1, "env": env, "memory_limit": 0}
        if gpus_per_worker:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in range(i * gpus_per_worker,
                                                                         (i + 1) * gpus_per_worker))
            options.update(nthreads=gpus_per_worker, resources={"GPU": gpus_per_worker})
        spec[f"worker-{i}"] = {"cls": Nanny, "options": options}
    # The worker processes start with Ctrl-C ignored (a disposition that survives exec, and which Python keeps):
    # a Ctrl-C in the terminal then reaches the coordinator alone, which prints one line and closes them, instead
    # of every worker printing a KeyboardInterrupt traceback.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return SpecCluster(workers=spec, scheduler={"cls": Scheduler, "options": {"dashboard_address": None}},
                           silence_logs=40)
    finally:
        signal.signal(signal.SIGINT, previous)


def default_workers(gpus: int, gpus_per_worker: int) -> int:
    if gpus:
        return max(1, gpus // gpus_per_worker)
    threads = recipe_threads()
    return max(1, (os.cpu_count() or 1) // threads)


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def recipe_threads() -> int:
    """The CPU threads a run of this params file uses (train.threads, the largest over the studies)."""
    from itervision.config.params import load_params, train_config

    p = load_params()
    return max(train_config(p, ds, s).threads for s in p.studies for ds in p.study(s).datasets)


@cli_entry
def main(argv=None):
    ap = ArgumentParser(prog="python -m itervision.pipeline.campaign", description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", help="stages to bring up to date, with what they need (default: all)")
    ap.add_argument("--workers", type=int, help="local Dask workers (default: cores / train.threads, or one per "
                                                "GPU group)")
    ap.add_argument("--gpus", type=int, help="local GPUs to use (default: every GPU torch sees, 0 without CUDA)")
    ap.add_argument("--gpus-per-worker", type=int, help="local GPU workers: devices each one gets (default: all of "
                                                        "--gpus in one worker)")
    ap.add_argument("--scheduler", help="address of a running Dask scheduler (a cluster) instead of local workers")
    args = ap.parse_args(argv)
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")  # quiet workers (read when dask is imported)
    from dvc.lock import LockError

    from itervision.pipeline.workspace import hold

    with hold("make campaign"):  # before any worker starts: a second campaign is refused at once
        t0 = time.perf_counter()
        client, cluster, where = connect(args)
        print(f"campaign on {where}", flush=True)
        try:
            out = campaign(client, args.targets, log=lambda line: print(line, flush=True), progress=True)
        except LockError as err:  # DVC's own lock, held by a `dvc repro` started outside make
            raise UserError(f"DVC's lock is held by another process ({err}); wait for it, then run the campaign "
                            f"again") from None
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    print(f"campaign: {len(out.ran)} stages ran, {len(out.skipped)} up to date, {len(out.failed)} failed, "
          f"{len(out.blocked)} not run after a failure, in {time.perf_counter() - t0:.0f} s" + (
              f"; at most {out.most_gpu_stages_at_once()} GPU stages at once" if out.on_gpus else ""), flush=True)
    if out.failed:
        first = out.failed[0]
        raise UserError(f"stage {first[0]} failed: {first[1]}" + (f" (and {len(out.failed) - 1} more)"
                                                                     if len(out.failed) > 1 else ""))


def connect(args):
    """(client, local cluster or None, a description) for --scheduler or local workers."""
    from distributed import Client

    if args.scheduler:
        client = Client(args.scheduler)
        return client, None, f"Dask scheduler {args.scheduler} ({len(client.scheduler_info()['workers'])} workers)"
    gpus = visible_gpus() if args.gpus is None else args.gpus
    per = (args.gpus_per_worker or gpus) if gpus else 0
    if gpus and (per < 1 or gpus % per):
        raise UserError(f"--gpus-per-worker {per} does not divide the {gpus} GPUs; pick a divisor of {gpus}")
    n = args.workers or default_workers(gpus, per)
    if per and n * per > gpus:
        raise UserError(f"{n} workers x {per} GPUs need {n * per} GPUs and {gpus} are there; use --workers "
                        f"{gpus // per}")
    threads = max(1, (os.cpu_count() or 1) // n)
    cluster = local_cluster(n, threads, per)
    return Client(cluster), cluster, f"{n} local Dask workers" + (
        f" x {per} GPUs" if per else f" x {threads} threads")


if __name__ == "__main__":
    sys.exit(main())
