# Two commands do all set-up on a fresh machine (Python 3.9+ with venv):
#   make demo   instrument the PyTorch sample and run the instrumented copy
#   make test   run the whole test suite
# Both create .venv and install autoitt with its test extra on first use.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/autoitt loops samples/torch_train.py
	$(VENV)/bin/autoitt instrument samples/torch_train.py
	$(PY) samples/torch_train_itt.py

test: $(STAMP)
	$(PY) -m pytest -q -n 2

bench: $(STAMP)
	$(PY) benchmarks/bench_instrument.py
	$(PY) benchmarks/bench_startup.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache autoitt-results samples/*_itt.py
