# itervision: `make repro` (set-up if needed, then the whole pipeline) and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
FMNIST_DEB := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
export PATH := $(abspath $(VENV))/bin:$(PATH)
# What a user types on the command line reaches a recipe through the environment ("$$NAME"), never pasted into the
# shell line, so a value holding ; $( ) or quotes stays one argument (CLAIM='a;touch x' runs nothing).
# pytest-xdist workers of make test / test-fast (0: one process). On this 2-core machine two workers were slower
# than one process (the fast lane 163 s against 108 s: docs/performance.md); give more where there are more cores.
# Either way the tiny repository of the end-to-end tests builds in the background from the start (tests/conftest.py).
TEST_WORKERS ?= 0
# pytest-xdist workers of make test's end-to-end lane (tests marked slow: subprocesses, DVC, torchrun): two here,
# 1,150 s serially against 788 s on two workers (docs/performance.md).
E2E_WORKERS ?= 2
export CLAIM EXP MINUTES SCALE GPU HOURS GPUS GPUS_PER_WORKER WORKERS SCHEDULER RETRIES STALL STATUS PLAN_GPU \
	CPUS_PER_GPU IMAGENET REV TEST_WORKERS E2E_WORKERS OUT

.PHONY: repro demo diff status-clean test test-fast plots setup data browser check-metrics paper-scale cpu-scale paper-plan paper-smoke paper-data imagenet-lists benchmark input-benchmark \
	gpu-benchmark pipelines campaign settle

# One process (src/itervision/pipeline/repro.py): params are checked and the dvc.lock files repaired (a DVC process
# killed while writing one leaves it cut short) before DVC reads them; one `dvc status` decides: up to date, nothing
# else runs; otherwise outputs already in the DVC remote are pulled instead of rebuilt (by the hashes in dvc.lock,
# so only what the committed code produced), `dvc repro` runs under the workspace lock with "stage k of N, ETA"
# lines, its closing status must be clean, and new outputs are pushed after (PUSH=0: not).
PUSH ?= 1
repro: $(STAMP) data
	$(PY) -m itervision.pipeline.repro $(if $(filter 0,$(PUSH)),--no-push)

# Every stage that is not up to date, independent ones side by side on local Dask workers (WORKERS=N; default
# cores / train.threads; on GPUs GPUS=N [GPUS_PER_WORKER=K], each run on the GPUs of its run.placement), or on a
# running Dask cluster (SCHEDULER=tcp://HOST:8786): docs/campaign.md.
campaign: setup
	$(PY) -m itervision.config.params
	-@$(PY) -m itervision.pipeline.remote pull
	$(PY) -m itervision.pipeline.campaign $(if $(WORKERS),--workers "$$WORKERS") $(if $(SCHEDULER),--scheduler "$$SCHEDULER") \
	  $(if $(GPUS),--gpus "$$GPUS") $(if $(GPUS_PER_WORKER),--gpus-per-worker "$$GPUS_PER_WORKER") \
	  $(if $(RETRIES),--retries "$$RETRIES") $(if $(STALL),--stall-minutes "$$STALL") \
	  $(if $(STATUS),--status-minutes "$$STATUS") $(if $(PLAN_GPU),--plan-gpu "$$PLAN_GPU")
	@$(MAKE) --no-print-directory status-clean
	-@if [ "$(PUSH)" = 1 ]; then $(PY) -m itervision.pipeline.remote push; fi

# The closing check of repro and campaign: anything but a clean `dvc status` (another DVC process changed the
# workspace meanwhile, a stage failed half-way) leaves results that are not what the committed code produces.
status-clean:
	@out=$$(dvc status 2>&1); echo "$$out"; echo "$$out" | grep -q "Data and pipelines are up to date" \
	  || { echo "error: dvc status is not clean after the run: the workspace is stale; run make repro again"; exit 1; }

# The whole pipeline at the tiny scale in a few minutes, in a copy of this checkout (OUT, default
# /tmp/itervision-demo): a first look that leaves this workspace as it is.
demo: setup
	$(PY) -m itervision.pipeline.demo $(if $(OUT),--out "$$OUT")

# The ledger's verdicts, estimates and Holm p that changed against a revision or DVC experiment (REV, default HEAD),
# one line each; nothing when nothing changed.
diff: setup
	$(PY) -m itervision.pipeline.diff $(if $(REV),"$$REV")

# The whole suite in three lanes: the fast tests on TEST_WORKERS pytest-xdist workers, the slow (end-to-end) ones on
# E2E_WORKERS (both set at the top of this file; the built tiny repository is shared between workers,
# tests/conftest.py; one single-node SLURM at a time, tests/test_slurm.py), then the tests that measure wall-clock
# alone (marked serial; exit 5, none selected, is fine).
test: setup
	$(PY) -m pytest -q -n "$$TEST_WORKERS" -m "not slow and not serial"
	$(PY) -m pytest -q -n "$$E2E_WORKERS" -m "slow and not serial"
	$(PY) -m pytest -q -m serial || [ $$? = 5 ]

# The fast lane: every test but those marked slow (end-to-end: a built DVC repository, torchrun, a training run in a
# subprocess; and anything over ~3 s here), in parallel as above.
test-fast: setup
	$(PY) -m pytest -q -n "$$TEST_WORKERS" -m "not slow and not serial"
	$(PY) -m pytest -q -m "serial and not slow" || [ $$? = 5 ]

# make repro needs the venv and the dataset only; the browser serves the report test (make test).
setup: $(STAMP) data browser

# The venv is (re)built when missing or older than pyproject.toml; a no-op otherwise.
$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e . 2>&1 | grep -v "^WARNING: Location" || true
	@$(PY) -c "import itervision, torch, torchvision, timm, dvc, dvc_s3, fvcore, scipy, moto, distributed, vl_convert" \
	  || { echo "error: the venv in $(VENV) did not install; see the pip output above"; exit 1; }
	@touch $(STAMP)

# Fashion-MNIST: the params root, else the Debian package (installed here when apt is usable), else download.
data:
	@if [ ! -e $(FMNIST_DEB) ]; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing dataset-fashion-mnist (Debian package)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null) \
	      || echo "warning: apt-get could not install dataset-fashion-mnist"; \
	  else echo "warning: Fashion-MNIST not installed and apt-get unusable; set data.roots.fashion_mnist"; fi; \
	fi

# Headless Chromium (Debian package) for the offline-report test (tests/test_report.py); that test skips without it.
browser:
	@if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing chromium (Debian package, for the offline-report test)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	    || echo "warning: apt-get could not install chromium; tests/test_report.py will skip its browser checks"; \
	fi

# The gate's own exit status is 0 pass, 1 regression, 2 usage error; GNU make reports any failure as 2, so CI
# runs the script directly. This target prints the gate's status in its last line.
check-metrics: setup
	@$(PY) stages/check_regressions.py $(or $(REV),HEAD); rc=$$?; \
	  echo "check-metrics: gate exit status $$rc (0 pass, 1 regression, 2 usage error)"; exit $$rc

paper-scale: setup
	$(PY) stages/set_scale.py paper

cpu-scale: setup
	$(PY) stages/set_scale.py cpu

# `make paper-plan` plans params.yaml as it is; SCALE=paper plans a scale without switching; GPU=nvidia-h200 takes
# that GPU's measured rates (benchmarks/results/) and adds the placement of each run (planning/placement.py);
# HOURS=H [GPUS=N] widens the placement until the campaign ends within H hours on N GPUs; PLACE=1 writes the
# placement into run.placement of the planned file (then `make campaign` runs it); FAST=1 skips fvcore and the
# memory estimate.
paper-plan: setup
	$(PY) stages/check_paper_plan.py $(if $(SCALE),--scale "$$SCALE") $(if $(GPU),--gpu "$$GPU") $(if $(FAST),--fast) \
	  $(if $(HOURS),--hours "$$HOURS") $(if $(GPUS),--gpus "$$GPUS") $(if $(PLACE),--write-placement) \
	  $(if $(CPUS_PER_GPU),--cpus-per-gpu "$$CPUS_PER_GPU")

# The listing of the ImageNet files each ImageNet subset of params.yaml uses (its DVC dependency, instead of the
# 1.33M-file folder): IMAGENET=/path/to/imagenet with train/<synset>/ and val/<synset>/ (data/source_list.py).
imagenet-lists: setup
	@test -n "$(IMAGENET)" || { echo "error: give the ImageNet folder: make imagenet-lists IMAGENET=/path/to/imagenet"; exit 2; }
	$(PY) -m itervision.pipeline.imagenet_lists "$$IMAGENET"

# The torchvision datasets of the paper scale into data/raw/ (the folders configs/scales/paper.yaml names).
paper-data: setup
	for d in cifar10 cifar100 mnist; do $(PY) -m itervision.data.download $$d data/raw/$$d || exit 1; done

# Every paper configuration for one step on synthetic data in the real formats, in a scratch copy (.smoke/).
paper-smoke: setup
	$(PY) stages/paper_smoke.py

benchmark: setup
	$(PY) benchmarks/training_speed.py
	$(PY) benchmarks/sparseformer_speed.py

# Input rates per CPU core of every data path of the paper recipe -> benchmarks/results/input.json, which
# `make paper-plan CPUS_PER_GPU=N` reads (benchmarks/input_speed.py).
input-benchmark: setup
	$(PY) benchmarks/input_speed.py

# Every paper configuration on the GPU (training img/s, kernels and host syncs per step, memory, compile, inference
# per exit) -> benchmarks/results/<gpu>.json. Without CUDA it says so and exits 0. It needs torch (and timm) only,
# so it runs with a machine's own python too: `make gpu-benchmark PY=python3`.
gpu-benchmark:
	PYTHONPATH=src $(PY) benchmarks/gpu_speed.py

# Extra seeds for an open claim's test under a group-sequential design (docs/settle.md):
#   make settle LIST=1                                   every open test: its plan, runs and minutes
#   make settle CLAIM='dsa-moe-k2 - dsa-moe' [MINUTES=N] [INTERIM=1] [DRY=1] [EXP=NAME: as `dvc exp run -n NAME`]
#   make settle ALL=1 MINUTES=N                          the open tests that fit, most power per minute first
#   make settle RESET=1                                  back to the default run (dvc exp save -n NAME first to keep it)
settle: setup
	$(PY) -m itervision.pipeline.settle $(if $(CLAIM),"$$CLAIM") $(if $(MINUTES),--minutes "$$MINUTES") \
	  $(if $(INTERIM),--interim) $(if $(DRY),--dry-run) $(if $(EXP),--exp "$$EXP") $(if $(ALL),--all-open) \
	  $(if $(LIST),--list) $(if $(RESET),--reset)

# Every dvc plot as a page that opens without a network (the Vega libraries from vl-convert-python, not a CDN);
# REV=... draws the workspace against a revision or DVC experiment (dvc plots diff).
plots: setup
	$(PY) -m itervision.reporting.offline_plots $(if $(REV),--rev "$$REV")

# The DVC files are generated from the studies registry and each stage's import closure.
pipelines: $(STAMP)
	$(PY) -m itervision.pipeline.dvc_files
