# The two commands of the README: `make demo` and `make test`.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.fedspectral-installed
FMNIST  := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz

.PHONY: demo test install data lint bench clean docs

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch/torchvision pinned to the builds that ship on these machines (CPU use)
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# Debian's Fashion-MNIST when we can install it (root on Debian); otherwise the
# loader downloads it at run time when online.
data:
	@if [ ! -f $(FMNIST) ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist) \
		|| echo "warning: could not install dataset-fashion-mnist"; \
	fi

demo: install data
	$(VENV)/bin/fedspectral demo

test: install data
	$(PY) -m pytest -q tests

# the site: the guide (docs/*.md, MyST) and the API reference (docs/api, autodoc +
# napoleon), warnings as errors, MathJax vendored (works offline) -> docs/_build/html
docs: install
	$(PY) -m sphinx -b html -W --keep-going -j auto -q docs docs/_build/html
	@echo "Documentation: docs/_build/html/index.html"

lint: install
	$(VENV)/bin/ruff check src tests benchmarks scripts flower docs
	$(VENV)/bin/ruff format --check src tests benchmarks scripts flower docs
	$(VENV)/bin/mypy src

# speed and memory targets: each script prints ratios measured side by side in one run
# (pca_perf: fit / X.T@X, SCS / fps_admm; flower_overhead --deployment: a loopback
# deployment's round / a Flower app doing nothing on the same SuperNodes)
# A script whose verdict is FAIL exits 1; the others still run, and bench fails at the end.
bench: install
	@status=0; \
	for cmd in "benchmarks/pca_perf.py" "benchmarks/fed_perf.py" \
		"benchmarks/augment_perf.py --threads 1" "benchmarks/flower_overhead.py" \
		"benchmarks/flower_overhead.py --deployment --rounds 3"; do \
		echo "$(PY) $$cmd"; $(PY) $$cmd || { echo "FAILED: $$cmd"; status=1; }; \
	done; exit $$status

clean:
	rm -rf results .pytest_cache docs/_build docs/api/_build
