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

import contextlib
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

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


def run_on_gpus(cmd: str, cwd: str, env: dict | None, gpus: int, **watch) -> dict:
    """run_command on `gpus` of this worker's GPUs (CUDA_VISIBLE_DEVICES), given back when it ends."""
    devices = take_devices(gpus)
    try:
        return {**run_command(cmd, cwd, {**(env or {}), "CUDA_VISIBLE_DEVICES": ",".join(devices)}, **watch),
                "devices": devices}
    finally:
        give_devices(devices)


def _die_with_parent():  # Linux: the stage's process goes when the worker process goes (kill -9 included)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run_command(cmd: str, cwd: str, env: dict | None = None, log: str | None = None, beat: str | None = None,
                stall_seconds: float = 0, startup_seconds: float = 1800) -> dict:
    """Run a stage's command in a subprocess that is killed when this worker dies; its output goes to the file
    `log` as it runs (a temp file without one). With `stall_seconds`, a watchdog kills the command (its whole
    process group: a torchrun group included) when its heartbeat file `beat` (heartbeat.py) has not
    changed for that long, or has not appeared `startup_seconds` + stall_seconds after the start (imports,
    compiling, NCCL set-up). Returns rc, seconds, the error (or last) line, a 'resuming' line, host, when it ran,
    stalled (bool) and the log's last lines."""
    import tempfile

    # A plain command runs without a shell between it and the worker: PR_SET_PDEATHSIG does not pass to the
    # children of a shell (dash forks even its last command), so a killed worker would leave the run going.
    argv = shlex.split(cmd) if not set(cmd) & set("|&;<>()$`*?[]#~=%\n\"'") else ["/bin/sh", "-c", cmd]
    env = {**os.environ, **(env or {})}
    if beat:
        env["ITERVISION_HEARTBEAT"] = beat
        if os.path.exists(beat):
            os.unlink(beat)  # a retry starts its own stall clock
    if log:
        os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
        out = open(log, "w")
    else:
        out = tempfile.TemporaryFile("w+")
    t0, started = time.perf_counter(), time.time()
    stalled = False
    with out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, preexec_fn=_die_with_parent)
        while True:
            try:
                proc.wait(timeout=2.0)
                break
            except subprocess.TimeoutExpired:
                if stall_seconds and _stalled(beat, started, stall_seconds, startup_seconds):
                    stalled = True
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
        out.flush()
        if log:
            text = Path(log).read_text(errors="replace")
        else:
            out.seek(0)
            text = out.read()
    lines = [x.strip() for line in text.splitlines() for x in line.split("\r") if x.strip()]
    tail = next((x for x in reversed(lines) if x.startswith("error")), lines[-1] if lines else "")
    if stalled:
        tail = f"stalled: no heartbeat for {stall_seconds / 60:.1f} min; killed"
    resumed = next((x for x in lines if x.startswith("resuming ")), "")  # a retried run says so (between bars)
    return {"rc": proc.returncode, "seconds": time.perf_counter() - t0, "last": tail[-300:], "resumed": resumed,
            "host": os.uname().nodename, "span": (started, time.time()), "stalled": stalled,
            "tail": "\n".join(lines[-8:])[-2000:], "log": log}


def _stalled(beat: str | None, started: float, stall: float, startup: float) -> bool:
    """No heartbeat change for `stall` seconds (or none at all within startup + stall seconds of the start)."""
    try:
        return time.time() - os.path.getmtime(beat) > stall
    except (OSError, TypeError):
        return time.time() - started > startup + stall


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


@dataclass(frozen=True)
class Watch:
    """How the coordinator watches and retries its stages (the command's options)."""
    retries: int = 10            # resubmissions of a stage whose worker was lost (preempted, killed, requeued)
    stall_minutes: float = 0.0   # a run whose heartbeat stops for this long is killed and retried once (0: off)
    startup_minutes: float = 30.0  # how long a run may take to its first heartbeat (imports, compiling, NCCL)
    status_minutes: float = 5.0  # a status line every this often (and one per start, end and failure)
    worker_gpus: int = 0         # GPUs each worker holds, when known in advance (0: read from the workers joined)
    log_dir: str = "logs/campaign"
    plan: dict | None = None     # planning.plan.load_rates(GPU): each run's rate against the plan


def stage_file_name(stage) -> str:
    """A file name for a stage: its name within its dvc.yaml, characters outside [A-Za-z0-9_.@-] as '_'."""
    name = stage.addressing.split(":")[-1]
    return "".join(c if c.isalnum() or c in "_.@-" else "_" for c in name)


def resolved_run(stage) -> Path | None:
    """The resolved run.json a stage depends on (a run stage's recipe), or None for other stages."""
    for dep in stage.deps:
        path = Path(str(dep.def_path))
        if path.name == "run.json" and "resolved" in path.parts:
            return Path(stage.wdir) / path
    return None


def run_info(stage) -> dict | None:
    """study, dataset, model, seed (from a run stage's command), world and global batch (its resolved run.json);
    None for other stages."""
    words = stage.cmd.split() if isinstance(stage.cmd, str) else []
    if not any(w.endswith("stages/run.py") for w in words):
        return None
    info = {k[2:]: words[words.index(k) + 1] for k in ("--study", "--dataset", "--model", "--seed") if k in words}
    path = resolved_run(stage)
    if path is not None:
        try:
            spec = json.loads(path.read_text())
            info.update(world=int(spec.get("world", 1)), global_batch=int(spec["train"]["global_batch"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return info


class Campaign:
    """The coordinator's state: which stages are pending, ready, running, done or broken. A stage is looked at
    once all its dependencies are settled: up to date (or restored from the run cache) it is settled at once,
    changed it becomes ready; ready stages are submitted to the cluster, stages with more dependents first.

    GPUs are read from the cluster at every submit, not once: workers that join later (SLURM jobs still queued
    when the campaign starts) get the runs that wait for GPUs. A campaign is a GPU campaign when workers are
    declared to hold GPUs (Watch.worker_gpus) or any worker joined with some; then every run asks Dask for its
    GPUs and waits until a worker has them free."""

    def __init__(self, client, repo, graph, env: dict | None, log, bar, watch: Watch = Watch()):
        from distributed import as_completed

        self.client, self.repo, self.graph, self.env, self.log, self.bar = client, repo, graph, env, log, bar
        self.watch = watch
        self.out = Outcome()
        self.pending, self.done, self.broken = set(graph.nodes), set(), set()
        self.running, self.ready = {}, []
        self.lost, self.stalls, self.waiting_note = {}, {}, set()
        self.queue = as_completed()
        self._gpu_mode = watch.worker_gpus > 0
        self.t0 = time.time()

    # ------------------------------------------------------------------ resources, read at each submit
    def joined_gpus(self) -> int:
        """The most GPUs any worker that has joined holds (the Dask resource "GPU")."""
        workers = self.client.scheduler_info(n_workers=-1)["workers"].values()
        return max((int((w.get("resources") or {}).get("GPU", 0)) for w in workers), default=0)

    def gpu_mode(self) -> bool:
        if not self._gpu_mode and self.joined_gpus() > 0:
            self._gpu_mode = True  # once a GPU worker joined, every run asks for GPUs
        return self._gpu_mode

    def gpus_for(self, stage) -> int:
        return stage_gpus(stage) if self.gpu_mode() else 0

    def too_wide(self, gpus: int) -> bool:
        """Wider than every worker can ever be: only known when the worker size was declared."""
        return bool(self.watch.worker_gpus) and gpus > self.watch.worker_gpus

    # ------------------------------------------------------------------ the loop
    def run(self) -> Outcome:
        stop = threading.Event()
        status = threading.Thread(target=self.status_loop, args=(stop,), name="campaign-status", daemon=True)
        status.start()
        try:
            self.settle_what_can_be_settled()
            self.dispatch()
            for future in self.queue:
                self.finish(self.running.pop(future), future)
                self.settle_what_can_be_settled()
                self.dispatch()
                self.bar.set_postfix(running=len(self.running), failed=len(self.out.failed), refresh=False)
        finally:
            stop.set()
            status.join(timeout=10)
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
            if not self.too_wide(self.gpus_for(stage)):  # one that no worker can take is refused with its outputs
                stage.remove_outs(ignore_remove=False, force=False)
            return True

    def dispatch(self):
        """Submit what is ready. A stage marked `meta: {alone: true}` in its dvc.yaml (the latency profiles) runs
        with nothing beside it on a CPU campaign: after every other ready stage, one at a time. On GPUs it holds a
        GPU of its own and times on it, so it runs beside the others."""
        gpu = self.gpu_mode()
        if not gpu and any(alone(s) for s in self.running.values()):
            return
        for stage in [s for s in self.ready if gpu or not alone(s)]:
            self.ready.remove(stage)
            self.submit(stage)
        if self.ready and not self.running:
            self.submit(self.ready.pop(0))

    def files_of(self, stage) -> tuple[str, str]:
        base = Path(stage.wdir) / self.watch.log_dir / stage_file_name(stage)
        return str(base.with_suffix(".log")), str(base.with_suffix(".beat.json"))

    def submit(self, stage):
        import networkx as nx

        options = dict(key=f"stage-{stage.addressing}-{self.lost.get(stage, 0)}-{self.stalls.get(stage, 0)}",
                       pure=False, priority=len(nx.ancestors(self.graph, stage)))
        log, beat = self.files_of(stage)
        watch = dict(log=log, beat=beat, stall_seconds=60 * self.watch.stall_minutes,
                     startup_seconds=60 * self.watch.startup_minutes)
        gpus = self.gpus_for(stage)
        if self.too_wide(gpus):  # no worker could ever start it: fail it now instead of waiting forever
            future = self.client.submit(refuse, f"error: {stage.addressing} needs {gpus} GPUs (params run.gpus / "
                                                f"run.placement) and workers hold {self.watch.worker_gpus}; start "
                                                f"workers of {gpus} GPUs (--gpus-per-worker) or place it on fewer",
                                        **options)
        elif gpus:
            joined = self.joined_gpus()
            if gpus > joined and stage not in self.waiting_note:
                self.waiting_note.add(stage)
                self.log(f"{stage_file_name(stage)}: waits for a worker with {gpus} free GPUs (the largest joined "
                         f"so far holds {joined})")
            future = self.client.submit(run_on_gpus, stage.cmd, stage.wdir, self.env, gpus,
                                        resources={"GPU": gpus}, **watch, **options)
        else:
            future = self.client.submit(run_command, stage.cmd, stage.wdir, self.env, **watch, **options)
        self.running[future] = stage
        self.queue.add(future)

    def finish(self, stage, future):
        """Record a stage whose command succeeded, as `dvc repro` does; submit again a stage whose worker was lost
        (up to Watch.retries times) or whose run stalled (once); mark any other failure broken."""
        from distributed.scheduler import KilledWorker

        try:
            result = future.result()
        except KilledWorker as err:  # its worker died (preempted, killed, requeued) as often as Dask allows
            if self.lost.get(stage, 0) < self.watch.retries:
                self.lost[stage] = self.lost.get(stage, 0) + 1
                self.log(f"{stage_file_name(stage)}: worker lost ({type(err).__name__}); retry {self.lost[stage]} of "
                         f"{self.watch.retries}, resuming from its checkpoint")
                self.submit(stage)
                return
            result = {"rc": -1, "seconds": 0.0, "last": f"worker lost {self.lost.get(stage, 0) + 1} times "
                                                         f"({type(err).__name__}); raise --retries", "resumed": ""}
        except Exception as err:  # the task itself broke (not the stage): the cluster gave up on it
            result = {"rc": -1, "seconds": 0.0, "last": f"{type(err).__name__}: {err}", "resumed": ""}
        if result.get("stalled") and self.stalls.get(stage, 0) < 1:
            self.stalls[stage] = 1
            self.log(f"{stage_file_name(stage)}: {result['last']} on {result.get('host')}; retrying once (log: "
                     f"{result.get('log')})")
            self.submit(stage)
            return
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
                     + (f" on {result.get('host')} GPU {','.join(devices)}{computed_on(stage)}" if devices else "")
                     + (f" ({result['resumed']})" if result.get("resumed") else ""))
        else:
            self.broken.add(stage)
            self.out.failed.append((stage.addressing, result["last"]))
            tail = result.get("tail") or ""
            self.log(f"{stage.addressing}: FAILED (exit {result['rc']}): {result['last']}"
                     + (f"\n  log {result.get('log')}, last lines:\n    " + tail.replace("\n", "\n    ")
                        if tail else ""))

    # ------------------------------------------------------------------ status lines
    def status_loop(self, stop: threading.Event) -> None:
        """A line when a run starts (its first heartbeat), and every Watch.status_minutes a summary with each
        running run's progress, rate (against the plan where one is given) and expected end."""
        started, last = set(), time.time()
        while not stop.wait(2.0):
            try:
                for stage in list(self.running.values()):
                    beat = self.beat(stage)
                    if beat and stage not in started:
                        started.add(stage)
                        self.log(f"{stage_file_name(stage)}: started on {beat.get('host')} (pid {beat.get('pid')})")
                if time.time() - last >= 60 * self.watch.status_minutes:
                    last = time.time()
                    for line in self.status_lines():
                        self.log(line)
            except Exception as err:  # never let the status thread take the campaign down
                self.log(f"status: {type(err).__name__}: {err}")

    def beat(self, stage) -> dict | None:
        try:
            return json.loads(Path(self.files_of(stage)[1]).read_text())
        except (OSError, ValueError):
            return None

    def status_lines(self) -> list[str]:
        running = list(self.running.values())
        beats = {s: self.beat(s) for s in running}
        live = [s for s in running if beats[s]]
        lines = [f"[{time.strftime('%H:%M')}] {len(self.out.ran)} done, {len(live)} running, "
                 f"{len(running) - len(live) + len(self.ready)} queued, {len(self.pending)} waiting on others, "
                 f"{len(self.out.failed)} failed ({(time.time() - self.t0) / 60:.0f} min)"]
        for stage in live:
            lines.append("  " + progress_line(stage, beats[stage], self.watch.plan))
        return lines


def computed_on(stage) -> str:
    """' (ran on the CPU: no CUDA on that worker)' when a run given GPU slots recorded a CPU device (stand-in
    GPU resources), else ''."""
    from itervision.runs import CONFIG, RunRecord

    info = run_info(stage)
    if not info or not {"study", "dataset", "model", "seed"} <= set(info):
        return ""
    try:
        record = RunRecord(info["study"], info["dataset"], info["model"], int(info["seed"]))
        device = json.loads((Path(stage.wdir) / record.path(CONFIG)).read_text()).get("device")
    except (OSError, ValueError, UserError):
        return ""
    return " (ran on the CPU: no CUDA on that worker)" if device == "cpu" else ""


def progress_line(stage, beat: dict, plan: dict | None) -> str:
    """'NAME: step s/t, R img/s (plan P, x %), ends ~HH:MM' from a run's heartbeat."""
    name = stage_file_name(stage)
    step, total, rate = beat.get("step"), beat.get("total"), beat.get("images_per_s")
    if beat.get("phase") != "train" or not step or not total or not rate:
        return f"{name}: {beat.get('phase', '?')} on {beat.get('host')}"
    info = run_info(stage) or {}
    text = f"{name}: step {step}/{total}, {rate:,.0f} img/s"
    planned = planned_rate(info, plan)
    if planned:
        text += f" (plan {planned:,.0f}, {rate / planned:.0%})"
    if info.get("global_batch"):
        left = (total - step) * info["global_batch"] / rate
        text += f", ends ~{time.strftime('%H:%M', time.localtime(beat['time'] + left))}"
    return text


def planned_rate(info: dict, plan: dict | None) -> float | None:
    """The run's planned training images/s (all its GPUs) from a benchmark file, at its per-GPU batch."""
    if not plan or not info.get("global_batch"):
        return None
    from itervision.planning.plan import rate_at

    entry = plan["configs"].get(f"{info.get('study')}/{info.get('dataset')}/{info.get('model')}")
    world = info.get("world", 1)
    found = rate_at(entry, info["global_batch"] // world) if entry else None
    return found[0] * world if found else None


def campaign(client, targets: list[str] = (), env: dict | None = None, log=print, progress: bool = False,
             watch: Watch = Watch()) -> Outcome:
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
        return Campaign(client, repo, graph, env, tqdm.write if progress else log, bar, watch).run()


def alone(stage) -> bool:
    return bool((stage.meta or {}).get("alone"))


def refuse(line: str) -> dict:
    return {"rc": 2, "seconds": 0.0, "last": line, "resumed": ""}


def stage_gpus(stage) -> int:
    """GPUs a stage holds: a run the processes of its recipe (the `world` of the resolved run.json it depends on),
    a profile stage (a latency measurement, `alone`) one, any other stage none."""
    path = resolved_run(stage)
    if path is not None:
        try:
            return int(json.loads(path.read_text()).get("world", 1))
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
    # a dashboard port taken by another Dask process on this machine is Dask's business, not a line of ours: quiet
    # here and in the worker processes (which inherit the environment)
    import warnings

    warnings.filterwarnings("ignore", message=r"Port \d+ is already in use")
    os.environ["PYTHONWARNINGS"] = ",".join(x for x in (os.environ.get("PYTHONWARNINGS"), "ignore:Port:UserWarning")
                                             if x)
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


def _count(name: str, minimum: int):
    """An argparse type: a whole number >= minimum, else a message naming the option and the value."""
    def parse(text: str) -> int:
        from argparse import ArgumentTypeError

        try:
            value = int(text)
        except ValueError:
            raise ArgumentTypeError(f"{name} {text!r} is not a whole number") from None
        if value < minimum:
            raise ArgumentTypeError(f"{name} {value} is below {minimum}")
        return value
    return parse


def _minutes(name: str):
    """An argparse type: a finite number of minutes >= 0."""
    def parse(text: str) -> float:
        import math
        from argparse import ArgumentTypeError

        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not math.isfinite(value) or value < 0:
            raise ArgumentTypeError(f"{name} {text!r} is not a finite number of minutes >= 0")
        return value
    return parse


@cli_entry
def main(argv=None):
    ap = ArgumentParser(prog="python -m itervision.pipeline.campaign", description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", help="stages to bring up to date, with what they need (default: all)")
    ap.add_argument("--workers", type=_count("--workers", 1), help="local Dask workers (default: cores / "
                                                                  "train.threads, or one per GPU group)")
    ap.add_argument("--gpus", type=_count("--gpus", 0), help="local GPUs to use (default: every GPU torch sees, 0 "
                                                            "without CUDA)")
    ap.add_argument("--gpus-per-worker", type=_count("--gpus-per-worker", 1),
                    help="GPUs each worker holds: local workers get that many devices; with --scheduler, the size "
                         "of the workers that will join (runs wait for them; a wider run is refused)")
    ap.add_argument("--scheduler", help="address of a running Dask scheduler (a cluster) instead of local workers")
    ap.add_argument("--retries", type=_count("--retries", 0), default=10,
                    help="times a stage is submitted again after its worker was lost (preemption, requeue, kill); "
                         "default 10")
    ap.add_argument("--stall-minutes", type=_minutes("--stall-minutes"), default=0.0,
                    help="kill and retry once a run whose heartbeat stops for this long (0: no stall watch; the paper "
                         "scale: 15)")
    ap.add_argument("--startup-minutes", type=_minutes("--startup-minutes"), default=30.0,
                    help="time a run may take to its first heartbeat before the stall watch applies (default 30)")
    ap.add_argument("--status-minutes", type=_minutes("--status-minutes"), default=5.0,
                    help="a status line every this many minutes (default 5)")
    ap.add_argument("--plan-gpu", help="GPU kind whose measured rates (benchmarks/results/KIND.json) the status "
                                       "lines compare each run with, e.g. nvidia-h200")
    args = ap.parse_args(argv)
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")  # quiet workers (read when dask is imported)
    from dvc.lock import LockError

    from itervision.pipeline.workspace import hold

    plan = None
    if args.plan_gpu:
        from itervision.planning.plan import load_rates

        plan = load_rates(args.plan_gpu)
        if plan is None:
            raise UserError(f"no measured rates for {args.plan_gpu} (benchmarks/results/{args.plan_gpu}.json); run "
                            f"`make gpu-benchmark` on that GPU, or leave --plan-gpu out")
    with hold("make campaign"):  # before any worker starts: a second campaign is refused at once
        t0 = time.perf_counter()
        client, cluster, where, per = connect(args)
        watch = Watch(retries=args.retries, stall_minutes=args.stall_minutes, startup_minutes=args.startup_minutes,
                      status_minutes=args.status_minutes, worker_gpus=per, plan=plan)
        print(f"campaign on {where}", flush=True)
        try:
            out = campaign(client, args.targets, log=lambda line: print(line, flush=True), progress=True,
                           watch=watch)
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
    """(client, local cluster or None, a description, GPUs per worker when known) for --scheduler or local
    workers."""
    from distributed import Client

    if args.scheduler:
        client = Client(args.scheduler)
        per = args.gpus_per_worker or 0
        joined = len(client.scheduler_info(n_workers=-1)["workers"])
        return client, None, (f"Dask scheduler {args.scheduler} ({joined} workers joined so far"
                              + (f"; runs wait for workers of {per} GPUs" if per else "") + ")"), per
    seen = visible_gpus()
    if args.gpus and args.gpus > seen:
        raise UserError(f"--gpus {args.gpus} asks for more GPUs than torch sees here ({seen}"
                        + (": no CUDA device" if not seen else "") + "); drop --gpus to run on what is here")
    gpus = seen if args.gpus is None else args.gpus
    if args.gpus_per_worker and not gpus:
        raise UserError(f"--gpus-per-worker {args.gpus_per_worker} with no GPU here (torch sees {seen}); drop it, or "
                        f"give --scheduler for workers elsewhere")
    per = (args.gpus_per_worker or gpus) if gpus else 0
    if gpus and gpus % per:
        raise UserError(f"--gpus-per-worker {per} does not divide the {gpus} GPUs; pick a divisor of {gpus}")
    n = args.workers or default_workers(gpus, per)
    if per and n * per > gpus:
        raise UserError(f"{n} workers x {per} GPUs need {n * per} GPUs and {gpus} are there; use --workers "
                        f"{gpus // per}")
    threads = max(1, (os.cpu_count() or 1) // n)
    cluster = local_cluster(n, threads, per)
    return Client(cluster), cluster, f"{n} local Dask workers" + (
        f" x {per} GPUs" if per else f" x {threads} threads"), per


if __name__ == "__main__":
    sys.exit(main())
