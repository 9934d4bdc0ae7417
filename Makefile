# itervision: `make repro` (set-up if needed, then the whole pipeline) and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
FMNIST_DEB := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: repro test setup data check-metrics paper-scale cpu-scale paper-plan benchmark clean-runs

repro: setup
	dvc repro
	@dvc status

test: setup
	$(PY) -m pytest -q

setup: $(STAMP) data

# The venv is (re)built when missing or older than pyproject.toml; a no-op otherwise.
$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e . 2>&1 | grep -v "^WARNING: Location" || true
	@$(PY) -c "import itervision, torch, torchvision, timm, dvc, fvcore, scipy" \
	  || { echo "error: the venv in $(VENV) did not install; see the pip output above"; exit 1; }
	@touch $(STAMP)

# Fashion-MNIST: the params root, else the Debian package (installed here when apt is usable), else download.
data:
	@if [ ! -e data/raw/FashionMNIST/raw/train-images-idx3-ubyte ] && [ ! -e $(FMNIST_DEB) ]; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing dataset-fashion-mnist (Debian package)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null) \
	      || echo "warning: apt-get could not install dataset-fashion-mnist"; \
	  else echo "warning: Fashion-MNIST not installed and apt-get unusable; set data.roots.fashion_mnist"; fi; \
	fi

check-metrics: setup
	$(PY) stages/check_regressions.py $(or $(REV),HEAD)

paper-scale: setup
	$(PY) stages/set_scale.py paper

cpu-scale: setup
	$(PY) stages/set_scale.py cpu

paper-plan: setup
	$(PY) stages/check_paper_plan.py

benchmark: setup
	$(PY) benchmarks/recursive_speed.py
	$(PY) benchmarks/sparseformer_speed.py
