# streamops: `make demo` to see it run, `make test` to check it. See README.md.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STREAMOPS := $(VENV)/bin/streamops
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# uv must use the machine's Python 3.11, never download one.
export UV_PYTHON_DOWNLOADS := never

.PHONY: help venv demo demo-stop lint test test-all test-pure test-fast test-reconfig test-fuzz test-chaos bench lock clean

help:
	@echo "make demo       set up .venv, start PostgreSQL, deploy and feed the demo apps, watch status (Ctrl-C to leave)"
	@echo "make demo-stop  stop the demo's stages, generators and database"
	@echo "make lint       ruff, mypy (which packages, how strictly: docs/architecture.md) and the import contracts (lint-imports)"
	@echo "make test       make lint, then the whole test suite (real PostgreSQL, real Spark); what CI runs"
	@echo "make test-pure  the tests that need no database (not marked db); starts no PostgreSQL"
	@echo "make test-chaos real faults against running stages: database stop, SIGSTOP, kills, failed launches"
	@echo "make test-fuzz  the input contract under 20 000 Hypothesis records per family (make test runs 300)"
	@echo "make test-all   every tier: make test, the slow real-driver tests and the reconfiguration matrix (about an hour)"
	@echo "make bench      policies and the trace suite in the simulator, 10 000-stage cycle, reconfiguration and HA on real drivers"
	@echo "make lock       recompile requirements.txt from requirements.in"

# The venv is rebuilt when the lock or the package metadata change.
$(VENV)/.installed: requirements.txt pyproject.toml
	@scripts/ensure-system-deps.sh
	@if command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv; then \
		echo "installing .venv with uv"; \
		uv venv --quiet --allow-existing --python 3.11 $(VENV) && \
		VIRTUAL_ENV=$(VENV) uv pip sync --quiet requirements.txt && \
		VIRTUAL_ENV=$(VENV) uv pip install --quiet --no-deps -e . ; \
	else \
		echo "uv unavailable, installing .venv with pip"; \
		python3.11 -m venv $(VENV) && \
		$(PY) -m pip install --quiet --no-deps -r requirements.txt && \
		$(PY) -m pip install --quiet --no-deps -e . ; \
	fi
	@touch $@

# Spark's classes dumped into a class archive that every driver and executor JVM maps
# (streamops.jvm_archive); a failed build only costs start-up time, so it warns.
$(VENV)/.jvm-archive: $(VENV)/.installed
	@$(STREAMOPS) spark archive && touch $@ || echo "warning: no class archive; Spark JVMs start without it"

# The JVM jars beside pyspark's (jars/pom.xml): the Kafka broker and Spark's Kafka connector,
# resolved by Maven into $(VENV)/jars/<module>/ here and never at run time. Fetched again only
# when a pom changes; a module's folder is emptied first so no jar of an old version stays.
JARS := $(VENV)/jars
$(VENV)/.jars: jars/pom.xml jars/kafka-broker/pom.xml jars/spark-kafka/pom.xml
	@scripts/ensure-system-deps.sh
	@command -v mvn >/dev/null 2>&1 || { echo "mvn (Maven) is missing: apt-get install maven; make venv fetches the Kafka jars with it" >&2; exit 1; }
	@echo "fetching the Kafka broker and Spark connector jars into $(JARS) with Maven"
	@rm -rf $(JARS)/kafka-broker $(JARS)/spark-kafka
	@mvn -q -B -f jars/pom.xml dependency:copy-dependencies -Djars.dir=$(abspath $(JARS))
	@touch $@

venv: $(VENV)/.installed $(VENV)/.jars $(VENV)/.jvm-archive

lock:
	uv pip compile requirements.in --excludes requirements-exclude.txt -o requirements.txt --python-version 3.11

demo: venv
	@scripts/demo.sh

demo-stop: venv
	$(STREAMOPS) down --db

# Static checks, configured in pyproject.toml; under a minute. lint-imports finds spark_apps
# (the repository root) and streamops (plugins/) on PYTHONPATH.
lint: venv
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/mypy
	PYTHONPATH=.:plugins $(VENV)/bin/lint-imports --no-cache --no-logo

# Lint first: a broken import rule or type fails in seconds, not after the suite.
# Leaves the database as it found it: stopped if it was stopped.
test: venv lint
	@was_up=0; $(STREAMOPS) db status --quiet && was_up=1; \
	$(STREAMOPS) db up >/dev/null || exit 1; \
	$(VENV)/bin/pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$was_up = 0 ]; then $(STREAMOPS) db down >/dev/null; fi; \
	exit $$rc

# Benchmarks: simulator policy comparison, 10 000-stage control cycle, reconfigurations and
# failover on real drivers (needs the database; the last two take about an hour together).
bench: venv
	@$(STREAMOPS) db up >/dev/null
	$(STREAMOPS) bench all

# The tests not marked `db`: no PostgreSQL is started or reached (unmarked tests get an unreachable URL).
test-pure: venv
	$(VENV)/bin/pytest -m "not db" $(PYTEST_ARGS)

test-fast: venv
	$(MAKE) test PYTEST_ARGS="-m 'not e2e and not reconfig_matrix'"

# The long reconfiguration oracle matrix (every mechanism x workload, random sequence, crash).
test-reconfig: venv
	$(MAKE) test PYTEST_ARGS="-m reconfig_matrix"

# Real faults against running stages (docs/ha.md has the table of what each one did).
test-chaos: venv
	$(MAKE) test PYTEST_ARGS="-m chaos $(PYTEST_ARGS)"

# Every test of every tier (the slow real-driver tests and the matrix included): an empty -m
# replaces the default marker filter of pyproject.toml.
test-all: venv
	$(MAKE) test PYTEST_ARGS="-m '' $(PYTEST_ARGS)"

# The input contract's long fuzz tier: no database, a few minutes.
test-fuzz: venv
	STREAMOPS_FUZZ_EXAMPLES=20000 $(VENV)/bin/pytest -m "not db" -k fuzz tests/unit/test_input_contract.py $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .streamops
