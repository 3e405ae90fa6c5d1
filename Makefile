# regroup: `make run` starts the service on an embedded Postgres, `make test` runs every check.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
#: What serving needs (requirements/run.txt), a subset of what STAMP installs.
RUN_STAMP := $(VENV)/.run-stamp
PIP := $(PY) -m pip install --disable-pip-version-check
EDITABLE := --no-deps --no-build-isolation -e clients/python -e .
PROTO_OUT := clients/python/src
PROTOS := $(wildcard proto/regroup/v1/*.proto)
PYTEST_ARGS ?=
## Tests run on this many worker processes (pytest-xdist), each with its own embedded Postgres
## and free ports; a test file's tests stay together on one worker, in order. 1 runs them here.
TEST_WORKERS ?= 4
PYTEST := $(PY) -m pytest -q $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
TIERS := unit integration docs deploy chaos slow

.PHONY: setup run run-cluster migrate proto proto-check proto-lint proto-baseline lint typecheck test $(addprefix test-,$(TIERS)) test-client-floors helm-lint bench chaos fmt clean

## Everything a developer or CI needs (requirements/dev.txt, about 1.3 GB): the service, the
## client, the tests and the tools. Every target but the three that serve needs it.
setup: $(STAMP)

$(STAMP): requirements/dev.txt pyproject.toml clients/python/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -q -r requirements/dev.txt
	$(PIP) -q $(EDITABLE)
	touch $@ $(RUN_STAMP)

## Only what serving needs (requirements/run.txt: the pinned runtime set and the embedded
## Postgres, 120 MB installed), with pip's progress shown: a first `make run` waits for it.
## make setup marks it done too: dev.txt is a superset (tests/deploy/test_install_sets.py).
$(RUN_STAMP): requirements/run.txt requirements/runtime.txt requirements/build.txt pyproject.toml clients/python/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "Installing what the service needs into $(VENV) (requirements/run.txt); make setup adds the test tools."
	$(PIP) --progress-bar on -r requirements/run.txt
	$(PIP) $(EDITABLE)
	touch $@

## Runs the service on 127.0.0.1:50051; without DATABASE_URL it keeps an embedded Postgres under .regroup/.
run: $(RUN_STAMP)
	$(PY) -m regroup.server

## Three replicas on one embedded Postgres (127.0.0.1:50051, :50052, :50053), for trying failover
## by hand (README.md, "Trying failover"); Ctrl-C stops them all.
run-cluster: $(RUN_STAMP)
	$(PY) -m regroup.server cluster

## Applies the SQL migrations in migrations/ to DATABASE_URL (or the embedded Postgres).
migrate: $(RUN_STAMP)
	$(PY) -m regroup.server migrate

## Regenerates the Python stubs from proto/.
proto: $(STAMP)
	$(PY) tools/gen_proto.py $(PROTO_OUT)

## Fails when the committed stubs differ from what proto/ generates.
proto-check: $(STAMP)
	$(PY) tools/gen_proto.py --check $(PROTO_OUT)

## buf lint, buf breaking against the released API (tools/proto-baseline.binpb), and Java/C++
## generation from proto/ (tools/proto_checks.py).
proto-lint: $(STAMP)
	$(PY) tools/proto_checks.py

## At a release only: records proto/ as the released API that buf breaking compares with.
proto-baseline: $(STAMP)
	$(PY) tools/proto_checks.py --refresh-baseline

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

fmt: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## mypy --strict on the pure engine, the server shell and the client.
typecheck: $(STAMP)
	$(PY) tools/typecheck.py

## Lints the Helm chart and validates its rendered manifests (helm comes from a pinned PyPI wheel).
helm-lint: $(STAMP)
	$(PY) -m pytest -q tests/deploy/test_helm.py

## Benchmarks (docs/benchmarks.md): quick by default, the full grid with BENCH=full.
bench: $(STAMP)
	$(PY) -m bench $(if $(filter full,$(BENCH)),--full,)

## The chaos test of make test for longer (docs/benchmarks.md, 9.): CHAOS_SECONDS (300) of replica
## kills, pauses and restarts; CHAOS_SEED repeats a run's choice of faults. Its report line goes to bench/results/chaos.jsonl.
CHAOS_SECONDS ?= 300
chaos: $(STAMP)
	REGROUP_CHAOS_SECONDS=$(CHAOS_SECONDS) $(if $(CHAOS_SEED),REGROUP_CHAOS_SEED=$(CHAOS_SEED),) \
		REGROUP_CHAOS_RESULTS=bench/results/chaos.jsonl $(PY) -m pytest -q -s tests/chaos

## One tier of the tests (tests/conftest.py): make test-unit, test-integration, test-docs,
## test-deploy, test-chaos or test-slow. Outside CI the randomized tests run at the dev depth
## (tests/support/depth.py); CI=true, or REGROUP_HYPOTHESIS_PROFILE=ci, runs them at full depth.
$(addprefix test-,$(TIERS)): test-%: $(STAMP)
	$(PYTEST) tests/$* $(PYTEST_ARGS)

## The client's unit tests on the oldest grpcio and protobuf it accepts (requirements/client-floors.txt),
## in a venv of their own; .venv tests it at the pins. The test tools come at dev.txt's pins.
FLOORS_VENV := .venv-floors
FLOORS_STAMP := $(FLOORS_VENV)/.installed-stamp
FLOORS_TOOLS := setuptools pytest pytest-asyncio pytest-timeout hypothesis pyyaml cryptography kubernetes-validate

$(FLOORS_STAMP): requirements/client-floors.txt requirements/dev.txt clients/python/pyproject.toml
	rm -rf $(FLOORS_VENV)
	$(PYTHON) -m venv $(FLOORS_VENV)
	grep -Ev '^(grpcio|protobuf)==' requirements/dev.txt > $(FLOORS_VENV)/pins.txt
	$(FLOORS_VENV)/bin/python -m pip install -q --disable-pip-version-check \
		-c $(FLOORS_VENV)/pins.txt $(FLOORS_TOOLS)
	$(FLOORS_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation \
		-c $(FLOORS_VENV)/pins.txt -c requirements/client-floors.txt -e 'clients/python[cli]'
	touch $@

test-client-floors: $(FLOORS_STAMP)
	@$(FLOORS_VENV)/bin/python -c 'import grpc, google.protobuf as p; \
		print("client at its floors: grpcio", grpc.__version__, "protobuf", p.__version__)'
	$(FLOORS_VENV)/bin/python -m pytest -q tests/unit/client

## Every check CI runs: lint, types, proto drift, the client at its dependency floors, then the whole test suite.
test: lint typecheck proto-check proto-lint test-client-floors
	$(PYTEST) $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(FLOORS_VENV) build .mypy_cache .ruff_cache .hypothesis
