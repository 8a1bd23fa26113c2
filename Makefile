# Set-up and entry points. `make demo` and `make test` each create .venv when it is missing.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.paratune-installed
DEMO_NAME := quickstart-$(shell date +%Y%m%d-%H%M%S)

.PHONY: demo test install clean-venv

install: $(STAMP)

# What a trainer's tests check it against that pip must install without its dependencies (or
# on a Python its wheel does not declare) sits in the trainer's folder, each file saying why.
TRAINER_REQUIREMENTS := $(sort $(wildcard orchestrator/trainers/*/requirements-no-deps.txt))
# What a trainer's tool needs to import that would clash with the suite's own packages: each
# folder's file goes to a folder of its own, $(VENV)/trainer-sites/<folder>, which only that
# trainer's tests put on a subprocess's path.
TRAINER_SITES := $(sort $(wildcard orchestrator/trainers/*/requirements-import-site.txt))

# torch is installed first and pinned: the CPU wheel, so that no CUDA build is pulled.
$(STAMP): pyproject.toml $(TRAINER_REQUIREMENTS) $(TRAINER_SITES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[test]"
	for requirements in $(TRAINER_REQUIREMENTS); do \
	  $(BIN)/pip install --quiet --no-deps --ignore-requires-python -r $$requirements || exit 1; \
	done
	for requirements in $(TRAINER_SITES); do \
	  site=$(VENV)/trainer-sites/$$(basename $$(dirname $$requirements)); \
	  $(BIN)/pip install --quiet --no-deps --upgrade --target $$site -r $$requirements || exit 1; \
	done
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/paratune run examples/quickstart.yaml --set name=$(DEMO_NAME)
	$(BIN)/paratune best $(DEMO_NAME) --format torchrun -o runs/$(DEMO_NAME)/launch.sh
	$(BIN)/paratune best $(DEMO_NAME) --format yaml

# The Slurm backend tests need a real Slurm: started here (as root, from Debian's packages)
# and stopped by the PIDs it recorded; without root they are skipped with the reason printed.
# The two-node tests (tests/backends/test_cluster_slurm.py) build their own cluster in network
# namespaces with tests/cluster/start_cluster.sh from the same packages, beside this Slurm,
# and remove it at their end: 3 to 4 minutes more as root (the 1-minute time limit test alone
# about 70 s); tests/backends/test_cluster_ray.py builds it again with a Ray head and worker on it, about
# 2 minutes more. Skipped with the reason otherwise.
# Likewise the campaign service's database tests get a real PostgreSQL (its URL passed to
# pytest in PARATUNE_TEST_POSTGRES_URL), stopped by the PID it recorded when this run started it.
# The tests run on two pytest-xdist workers (tests/conftest.py keeps those sharing daemons on
# one). No test ranks speeds measured here: those checks are benchmarks (benchmarks/).
SLURM_STATE := /tmp/paratune-slurm
POSTGRES_STATE := /tmp/paratune-postgres

test: $(STAMP)
	@started=0; pg_started=0; \
	if [ -s $(SLURM_STATE)/pids ] && timeout 20 sinfo -h >/dev/null 2>&1; then echo "using the local Slurm already running"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  [ ! -s $(SLURM_STATE)/pids ] || { echo "the recorded local Slurm does not answer: stopping what is left of it"; bash tests/slurm/stop_local_slurm.sh $(SLURM_STATE); }; \
	  bash tests/slurm/start_local_slurm.sh $(SLURM_STATE) && started=1 || echo "local Slurm did not start: its tests will be skipped"; \
	else echo "not root: the Slurm tests will be skipped"; fi; \
	pg_up() { bash tests/postgres/postgres_up.sh $(POSTGRES_STATE) >/dev/null; }; \
	if [ -n "$${PARATUNE_TEST_POSTGRES_URL:-}" ]; then echo "using the PostgreSQL at $$PARATUNE_TEST_POSTGRES_URL"; \
	elif pg_up; then echo "using the local PostgreSQL already running"; \
	elif [ "$$(id -u)" = 0 ]; then \
	  bash tests/postgres/start_local_postgres.sh $(POSTGRES_STATE) && pg_started=1 || echo "local PostgreSQL did not start: its tests will be skipped"; \
	else echo "not root: the PostgreSQL tests will be skipped"; fi; \
	if [ -z "$${PARATUNE_TEST_POSTGRES_URL:-}" ] && pg_up; then export PARATUNE_TEST_POSTGRES_URL="$$(cat $(POSTGRES_STATE)/url)"; fi; \
	$(BIN)/python -m pytest -q -p no:cacheprovider -rs -m "not study" -n 2 --dist loadgroup --durations=15; status=$$?; \
	if [ $$pg_started = 1 ]; then bash tests/postgres/stop_local_postgres.sh $(POSTGRES_STATE); fi; \
	if [ $$started = 1 ]; then bash tests/slurm/stop_local_slurm.sh $(SLURM_STATE); fi; \
	exit $$status

clean-venv:
	rm -rf $(VENV)
