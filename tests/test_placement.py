"""Placement of paper-scale runs on GPUs (planning/placement.py) from fake benchmark entries: one GPU where it is
cheaper and fits, several where memory forces it or a deadline asks for it, every placement holding the global
batch; the paper plan prints the placement from a rates file."""
import json
import math

import pytest

from itervision.planning.placement import choose, makespan, meet_deadline, options, peak, rate

H200 = 139.8
IMAGES = 1_000_000


def entry(rates: dict, peaks: dict) -> dict:
    return {"train_images_per_s": {str(b): v for b, v in rates.items()},
            "peak_gib": {str(b): v for b, v in peaks.items()}}


def test_rates_and_memory_say_where_they_come_from():
    e = entry({128: 1000.0, 1024: 8000.0}, {128: 2.0, 512: 7.0})
    assert rate(e, 128) == (1000.0, "measured")
    r, basis = rate(e, 512)  # linear in log batch: two thirds of the way from 128 to 1024
    assert basis == "interpolated" and r == pytest.approx(1000 + (2 / 3) * 7000)
    assert rate(e, 2048) == (8000.0, "extrapolated")  # the largest batch's rate, never more
    assert peak(e, 256) == (pytest.approx(2.0 + 5.0 * 128 / 384), "interpolated")
    assert peak(e, 1024) == (pytest.approx(7.0 + 5.0 * 512 / 384), "extrapolated")
    assert rate({}, 128) == (None, "none")


def test_one_gpu_holds_the_global_batch_where_it_is_cheaper_and_fits():
    e = entry({128: 1000.0, 256: 2000.0, 512: 4000.0, 1024: 8500.0}, {128: 2.0, 1024: 16.0})
    opts = options(e, 1024, IMAGES, H200)
    assert [(o.world, o.batch) for o in opts] == [(1, 1024), (2, 512), (4, 256), (8, 128)]
    assert all(o.world * o.batch == 1024 for o in opts)  # every placement trains the published global batch
    best = choose(opts)
    assert (best.world, best.batch) == (1, 1024)
    assert best.gpu_hours == pytest.approx(IMAGES / 8500 / 3600)
    assert opts[-1].gpu_hours == pytest.approx(8 * IMAGES / (8 * 1000) / 3600)  # 8.5x the GPU-hours


def test_memory_forces_more_gpus():
    e = entry({128: 1000.0, 256: 2000.0, 512: 4000.0, 1024: 8500.0}, {128: 20.0, 1024: 160.0})
    best = choose(options(e, 1024, IMAGES, H200))
    assert (best.world, best.batch) == (2, 512)  # 160 GiB at 1024 does not fit 0.9 x 139.8; 80 at 512 does
    assert not choose(options(entry({128: 1000.0}, {128: 200.0}), 1024, IMAGES, H200))  # nothing fits


def test_an_extrapolated_rate_never_wins_over_a_measured_one():
    """Measured only at 128 per GPU: one GPU at 1024 would use that rate extrapolated, which cannot show a gain,
    so the measured placement stays."""
    best = choose(options(entry({128: 1000.0}, {128: 2.0}), 1024, IMAGES, H200))
    assert best.world == 8 and best.rate_basis == "measured"


def test_makespan_schedules_gangs_longest_first():
    assert makespan([(1, 3.0)] * 8, 8) == 3.0
    assert makespan([(8, 1.0), (1, 2.0)], 8) == 3.0  # the gang waits for all eight
    assert makespan([(4, 1.0)] * 4, 8) == 2.0
    assert makespan([(2, 5.0), (1, 1.0), (1, 1.0)], 2) == 6.0
    assert math.isinf(makespan([(16, 1.0)], 8))


def test_a_deadline_trades_gpu_hours_for_time():
    """Per-GPU rates that rise with the batch but less than linearly: more GPUs per run finish it sooner (24,000
    images/s on 8 against 8,500 on one) for more GPU-hours."""
    e = entry({128: 3000.0, 256: 5000.0, 512: 7000.0, 1024: 8500.0}, {128: 2.0, 1024: 16.0})
    opts = {("s", "m", "d"): options(e, 1024, 50 * IMAGES, H200)}
    placed = {k: choose(v) for k, v in opts.items()}
    runs = {("s", "m", "d"): 2}
    slow = makespan([(placed[k].world, placed[k].hours) for k in placed for _ in range(runs[k])], 8)
    fast, met = meet_deadline(placed, opts, runs, 8, slow / 2)
    widened = fast[("s", "m", "d")]
    assert met and widened.world > 1 and widened.gpu_hours > placed[("s", "m", "d")].gpu_hours
    assert widened.world * widened.batch == 1024
    unreachable, met = meet_deadline(placed, opts, runs, 8, 1e-6)
    assert not met and unreachable[("s", "m", "d")].world == 4  # 2 runs x 4 GPUs fill 8: wider only queues


def test_the_paper_plan_prints_the_placement_from_a_rates_file(tmp_path, capsys):
    """A rates file in which every recursive cifar10 model is measured at every batch, 8x faster per GPU at 1024
    than at 128: each is placed on one GPU and the table says so; the rest of the campaign is labelled."""
    import stages.check_paper_plan as cpp

    configs = {f"recursive/cifar10/{m}": entry({128: 1000.0, 256: 2000.0, 512: 4000.0, 1024: 8000.0},
                                              {128: 2.0, 512: 7.0})
               for m in ("encoder-only", "sa-mlp", "sa-moe", "dsa-moe")}
    path = tmp_path / "fake-gpu.json"
    path.write_text(json.dumps({"gpu": "fake", "configs": configs}))
    cpp.main(["--scale", "paper", "--gpu", str(path), "--fast"])
    out = capsys.readouterr().out
    table = out[out.index("placement on fake"):].splitlines()
    rows = [line.split() for line in table if line.startswith("recursive ") and " cifar10 " in line]
    placed = {r[1]: (int(r[4]), int(r[5]), r[7]) for r in rows}
    assert placed == {m: (1, 1024, "measured") for m in ("encoder-only", "sa-mlp", "sa-moe", "dsa-moe")}
    assert not any(line.startswith("recursive ") and " cifar100 " in line for line in table)  # no rate: not placed
    assert "GPU-hours of the placed campaign" in out and "makespan placed / as placed now" in out


def test_the_written_placement_is_what_the_runs_train_on(tmp_path, monkeypatch):
    """--write-placement sets run.placement in params.yaml (every other line kept, a second write replaces the
    first), and each placed run's resolved run.json carries its number of processes; the plan then counts the
    placed worlds as the params' own."""
    import yaml

    from helpers import tiny_params
    from itervision.config.matrix import resolved_configs
    from itervision.config.params import load_params
    from itervision.planning.placement import write_placement

    tiny_params(tmp_path)
    params = tmp_path / "params.yaml"
    before = yaml.safe_load(params.read_text())
    monkeypatch.chdir(tmp_path)
    write_placement(params, {"fashion_mnist/sa-mlp": 2, "fashion_mnist/sf-recurrent": 4}, "a test")
    write_placement(params, {"fashion_mnist/sa-mlp": 2}, "a test, again")
    after = yaml.safe_load(params.read_text())
    assert after["run"]["placement"] == {"fashion_mnist/sa-mlp": 2}
    assert {k: v for k, v in after.items() if k != "run"} == {k: v for k, v in before.items() if k != "run"}
    assert after["run"]["launcher"] == before["run"]["launcher"] and "# a test, again" in params.read_text()
    p = load_params()
    worlds = {m: files["run.json"]["world"] for (ds, m), files in resolved_configs(p).items()}
    assert worlds["sa-mlp"] == 2 and worlds["sf-recurrent"] == worlds["dsa-moe"] == 1
    write_placement(params, {}, "none")
    assert yaml.safe_load(params.read_text())["run"]["placement"] == {}


def test_the_plan_caps_each_run_at_what_its_input_feeds():
    """CPUS_PER_GPU: ImageNet on the host path gets per-core rate x cores (one loader worker per core), arrays with
    RandAugment on the host path one core whatever the cores (it runs in the training process), arrays in memory
    no cap; an input-bound run is named with the cores that would feed it, and its hours use the input's rate."""
    from types import SimpleNamespace

    from itervision.planning.plan import ModelPlan, input_cap, input_lines

    inputs = {"cpu": "test CPU", "date": "today", "per_core": {
        "imagenet200": {"host": 200.0, "device_read": 50_000.0}, "cifar10": {"host": 3000.0}}}
    host = SimpleNamespace(augment_on="host", randaugment="rand-m9", workers=8)
    device = SimpleNamespace(augment_on="device", randaugment="rand-m9", workers=8)
    gpu = {"images_per_s": 3000.0, "compile_seconds": 0.0}
    cap = input_cap("imagenet200", host, True, inputs, 8, gpu)
    assert cap["cap"] == 1600.0 and cap["bound"] and cap["cores_needed"] == 15
    assert input_cap("imagenet200", host, True, inputs, 16, gpu)["cap"] == 3200.0  # workers follow the cores
    assert not input_cap("imagenet200", device, True, inputs, 8, gpu)["bound"]
    arrays = input_cap("cifar10", host, False, inputs, 64, {"images_per_s": 9000.0})
    assert arrays["cap"] == 3000.0 and arrays["bound"] and arrays["cores_needed"] is None
    assert input_cap("cifar10", device, False, inputs, 8, gpu) == {"path": "memory"}
    mp = ModelPlan("sparseformer", "sf-static-16", "imagenet200", runs=2, epochs=1, train_images=3_000_000,
                   gflops=1.0, batch=64, world=8, measured=gpu, input=cap)
    assert mp.images_per_s == 1600.0 and abs(mp.measured_gpu_hours - 2 * 3_000_000 / 1600 / 3600) < 1e-9
    lines = input_lines([mp], inputs, 8)
    assert any("INPUT-BOUND sf-static-16 on imagenet200" in x and "15 cores per GPU would feed it" in x for x in lines)
    assert "no benchmarks/results/input.json" in input_lines([mp], None, 8)[0]
