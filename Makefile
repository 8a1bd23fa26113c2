# Set-up and entry points. `make demo` and `make test` each create .venv when it is missing.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.paratune-installed
DEMO_NAME := quickstart-$(shell date +%Y%m%d-%H%M%S)

.PHONY: demo test install clean-venv

install: $(STAMP)

# torch is installed first and pinned: the CPU wheel, so that no CUDA build is pulled.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/paratune run examples/quickstart.yaml --set name=$(DEMO_NAME)
	$(BIN)/paratune best $(DEMO_NAME) --format torchrun -o runs/$(DEMO_NAME)/launch.sh
	$(BIN)/paratune best $(DEMO_NAME) --format yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

clean-venv:
	rm -rf $(VENV)
