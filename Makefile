# Two entry points, each doing all set-up on a fresh machine (Debian, Python 3.11, Java 17):
#   make run   - the main job: the Spark pipeline in spark_jobs/ on local Spark and a local table
#   make test  - ruff (txnlog, tests, jobs, benchmarks) and mypy (strict) on txnlog/, then the test suite (soak tests excluded; `make soak` runs them)
# `make soak` runs the long variants within 20 minutes; `make exhaustive` the rest of the long matrices
# (every kind of table under every delta-spark statement, every seed of the long mixed histories).
# `make test` and `make soak` run the tests in two pytest-xdist workers, a module to a worker (module fixtures such as the
# conflict matrix run once); each worker that reaches a Spark test starts its own SparkSession.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# delta-spark's JVM jars, resolved once from Maven Central at set-up (txnlog.spark.delta); the
# tests, the main job and the benchmarks start their sessions offline from this folder.
DELTA_JARS := $(CURDIR)/.delta-jars
export TXNLOG_DELTA_JARS_DIR := $(DELTA_JARS)

.PHONY: run test soak exhaustive bench docs clean jars

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@# Azurite (Azure's storage emulator) for the Azure store tests; they skip without it.
	-command -v npm >/dev/null && npm install --no-save --no-audit --no-fund --silent azurite
	touch $(STAMP)

# A no-op when the folder already holds the pinned coordinate's jars.
jars: $(STAMP)
	$(PY) -m txnlog.spark.delta $(DELTA_JARS) >/dev/null

# Two streaming hops on local Spark: source files -> data/events (with compaction and DML running
# concurrently on it) -> data/user_totals from its change feed; a second `make run` resumes both
# streams with the next batches (`make clean` starts over).
run: $(STAMP) jars
	$(PY) spark_jobs/pipeline.py --table data/events

test: $(STAMP) jars
	$(PY) -m ruff check txnlog tests spark_jobs benchmarks
	$(PY) -m mypy
	$(PY) -m pytest -m "not soak and not exhaustive" -q -p no:cacheprovider -n 2 --dist loadscope --durations=30

soak: $(STAMP) jars
	$(PY) -m pytest -m soak -q -p no:cacheprovider -n 2 --dist loadscope --durations=40

exhaustive: $(STAMP) jars
	$(PY) -m pytest -m exhaustive -q -p no:cacheprovider -n 2 --dist loadscope --durations=40

bench: $(STAMP) jars
	$(PY) benchmarks/run_all.py

docs: $(STAMP)
	$(PY) -m txnlog.properties > docs/properties.md

clean:
	rm -rf $(VENV) $(DELTA_JARS) out data .pytest_cache
