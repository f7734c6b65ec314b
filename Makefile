# Two commands do all set-up on a fresh machine (Python 3.11+ with venv; Debian's apt for the version matrix):
#   make demo   profile the PyTorch sample (instrument, run with the built-in ITT collector, summarize)
#   make test   run the whole test suite
# Both create .venv and install autoitt with its test extra on first use.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# a run of about two seconds of training, sampled 200 times a second: hotspots that stand on a few hundred samples
demo: $(STAMP)
	$(VENV)/bin/autoitt profile --backend builtin --sample-rate 200 samples/torch_train.py --epochs 20 --train-samples 512 --log-every 64

# the suite on 3.11 with every framework, then on the other versions that install here (README, "Python versions")
test: $(STAMP)
	scripts/debian_tools.sh
	$(PY) -m pytest -q -n 2 -m "not alone"
	$(PY) -m pytest -q -m alone
	scripts/version_matrix.sh

bench: $(STAMP)
	$(PY) benchmarks/bench_instrument.py
	$(PY) benchmarks/bench_startup.py
	$(PY) benchmarks/bench_collector.py
	$(PY) benchmarks/bench_overhead.py
	$(PY) benchmarks/bench_memory.py

clean:
	rm -rf $(VENV) .pythons build *.egg-info .pytest_cache autoitt-results samples/*_itt.py
