# airflow-cdc developer commands. `make test` and `make demo` do all set-up themselves.
SHELL := /bin/bash
PYTHON ?= python3
# SPARK chooses the Spark every target runs on: 3.5 (the default; .venv, the pinned set of
# constraints.txt) or 4 (Spark 4.1 on Scala 2.13 in .venv-spark4: the same pins with pyspark's
# replaced by $(SPARK4_PYSPARK)), e.g. `make demo SPARK=4`. Both venvs share the jar folder,
# each with the Iceberg runtime of its Spark, and each builds its own class archive.
SPARK ?= 3.5
SPARK4_PYSPARK := 4.1.4
ifeq ($(SPARK),3.5)
VENV := .venv
CONSTRAINTS := constraints.txt
else ifeq ($(SPARK),4)
VENV := .venv-spark4
CONSTRAINTS := $(VENV)/constraints.txt
else
$(error SPARK=$(SPARK) is not a Spark this project is set up for: use SPARK=3.5 (the default) or SPARK=4)
endif
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-done
SYSTEM_JARS := /usr/share/java/postgresql.jar /usr/share/java/sqlite-jdbc.jar /usr/share/java/mariadb-java-client.jar
export AIRFLOW_HOME ?= $(CURDIR)/.airflow
export PYSPARK_PYTHON := $(CURDIR)/$(VENV)/bin/python

.PHONY: setup test test-spark4 test-long test-live faults races hostile check-install demo ui-screenshot demo-datastream demo-bigtable demo-debezium demo-debezium-mariadb demo-snapshot demo-commit-ts demo-cluster demo-catchup live-datastream live-bigtable live-debezium live-commit-ts bench docs services system-packages constraints clean

# Bytecode is written on first import, so every later process (each spark-submit's driver,
# each Python worker of Spark, each Airflow task) loads it instead of compiling its modules
# again. An environment that sets PYTHONDONTWRITEBYTECODE makes every process compile every
# module it imports (saves most of each process's import time; docs/performance.md).
unexport PYTHONDONTWRITEBYTECODE

## setup: venv with the pinned constraints, the package (editable), Debian jars, the Iceberg
## runtime for the venv's Spark in the jar folder (Apache Iceberg's jar, fetched once by Spark's
## own resolver from Maven Central),
## and the Spark driver's class archive (airflow_cdc/spark/class_archive.py: saves loading
## Spark's classes at each spark-submit's start; built once; a failure only leaves it out).
## Packages are not byte-compiled at install: Python compiles the modules a run imports, once
## (see PYTHONDONTWRITEBYTECODE above), which makes the install faster.
setup: $(STAMP)

$(STAMP): pyproject.toml setup.py emulators/pyproject.toml constraints.txt | system-packages
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(if $(filter 4,$(SPARK)),sed 's/^pyspark==.*/pyspark==$(SPARK4_PYSPARK)/' constraints.txt > $(CONSTRAINTS))
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet --no-compile -c $(CONSTRAINTS) -e ".[dev]" -e ./emulators
	$(PY) -m airflow_cdc.spark.iceberg
	$(PY) -m airflow_cdc.spark.class_archive
	touch $@

## system-packages: Java jars from Debian (JDBC drivers: PostgreSQL
## and SQLite for catalogs and snapshots, MariaDB for snapshots) and a headless browser
## (chromium and chromium-driver: the UI view's tests and `make ui-screenshot`).
system-packages:
	@command -v java >/dev/null || { echo "java is missing: install a JDK 17 (Debian: openjdk-17-jre-headless)"; exit 1; }
	@missing=0; for jar in $(SYSTEM_JARS); do [ -f $$jar ] || missing=1; done; \
	if [ $$missing = 1 ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO apt-get install -y -qq libpostgresql-jdbc-java libxerial-sqlite-jdbc-java libmariadb-java; \
	fi
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO apt-get install -y -qq chromium chromium-driver; \
	fi

## services: PostgreSQL (state store, Debezium) and MariaDB (snapshot chunks, signals) on
## 127.0.0.1; started when down.
services:
	@bash .ci/ensure-postgres
	@bash .ci/ensure-mariadb

## test: the suite (set-up first when needed), under 20 minutes on 2 cores: everything but
## the tests marked live (schedules on a real clock) and long (end-to-end runs of their own;
## one of each kind stays: the Spanner DAG, the gate under scheduler and triggerer, the UI
## under a real api-server, cluster jobs);
## the tests that start Debezium's JVM in-process run in a second pytest process (5: none
## selected, as with a PYTEST_ARGS path outside them). The first lists its 25 slowest tests
## (the suite's limit is 20 minutes on 2 cores: they are the ones to move or make cheaper).
test: setup services
	$(PY) -m pytest -m "not live and not long and not jvm_in_process and not faults_matrix and not races_long" --durations=25 $(PYTEST_ARGS)
	$(PY) -m pytest -m "jvm_in_process and not live and not long and not faults_matrix and not races_long" $(PYTEST_ARGS) || [ $$? = 5 ]

## test-spark4: a representative subset on Spark 4.1 (SPARK=4's venv, set up first when
## needed): what differs between the Spark lines (spark_jobs/spark_line.py), the Spanner
## extract job, the apply job and its commits, the Spanner DAG end to end, a Datastream window
## and a Debezium window (real PostgreSQL through Debezium, its own pytest process): the same
## tests make test runs on Spark 3.5. CI runs it after make test, before test-live (its
## tests take about a third of make test's time, plus the Spark 4 venv's set-up on a machine
## that has none: .ci/run counts half of make test's).
SPARK4_TESTS := tests/spark/test_spark_line.py tests/sources/test_spanner_extract_job.py \
	tests/apply/test_apply_job.py tests/apply/test_commits.py tests/dags/test_spanner_dag.py \
	tests/datastream/test_extract.py tests/debezium/test_pipeline_jobs.py
test-spark4:
	$(MAKE) --no-print-directory test SPARK=4 PYTEST_ARGS="$(PYTEST_ARGS) $(SPARK4_TESTS)"

## test-long: the tests marked long (about 17 minutes): the example DAGs make test does not
## run, the reliability matrix's cell, the parallel snapshot killed mid-way, the warm driver's
## lifecycle, and slower variants of kinds make test keeps one run of (the README's
## Development section lists them); CI runs it after make test.
test-long: setup services
	$(PY) -m pytest -m "long and not live and not jvm_in_process and not faults_matrix and not races_long" $(PYTEST_ARGS) || [ $$? = 5 ]

## test-live: the tests marked live (each a schedule on a real clock, minutes); CI runs them.
test-live: setup services
	$(PY) -m pytest -m live $(PYTEST_ARGS)

## faults: the reliability matrix (tests/faults/matrix.py): for every source, its example DAG
## run window by window in OS processes, window k killed by SIGKILL at crash point k (the
## Airflow task or the whole spark-submit), run again, and checked against the source's truth;
## one line per source and point, last `faults: points=<n> sources=<n> lost=0 duplicated=0
## failed=0` (about an hour; FAULTS_ARGS="--source datastream --point commit.in_transaction").
faults: setup services
	$(PY) tests/faults/matrix.py $(FAULTS_ARGS)

## hostile: the property tests of every source's parser (tests/hostile) with 5,000 examples
## each instead of make test's 200 (about ten minutes).
hostile: setup
	AIRFLOW_CDC_HYPOTHESIS_PROFILE=thorough $(PY) -m pytest tests/hostile -m "not live" $(PYTEST_ARGS)

## races: the long race variants (tests/races, marker races_long): two DAGs declaring one
## stream planned at once; a window cleared while the next one runs, through real DAG runs; two
## apply spark-submits of one window at once (about 10 minutes).
races: setup services
	$(PY) -m pytest -m races_long tests/races $(PYTEST_ARGS)

## check-install: the install paths users take, each in a fresh venv without the dev pins
## (Airflow side only at the newest and at the lowest allowed versions, cluster, local Spark
## with one real window on every claimed Python and on pyspark 3.5, the Dockerfile's steps,
## the Astro template), two at a time; each prints its install and check times, the run its
## total. VARIANTS="spark-py3.12 docker" runs some. CI runs it after the tests.
check-install: setup
	$(PY) tests/install/check_install.py $(VARIANTS)

## demo: the main pipeline end to end on embedded defaults. CATALOG=rest keeps its tables in an
## Iceberg REST catalog server on 127.0.0.1 (demo/rest_catalog.py; its jars fetched once by mvn).
demo: setup
	$(PY) -m demo.spanner $(if $(CATALOG),--catalog $(CATALOG))

## ui-screenshot: the CDC view in Airflow's UI as a browser shows it (demo/ui.py):
## Airflow's api-server with the provider's plugin on the demo's state (`make demo` first when
## .demo/airflow/cdc_state.db is missing), headless Chromium logs in and opens the view; writes
## build/ui-screenshot.png, last line `ui-screenshot: OK streams=<n> windows=<n> path=...`.
ui-screenshot: setup
	@[ -f .demo/airflow/cdc_state.db ] || $(MAKE) demo
	$(PY) -m demo.ui --output build/ui-screenshot.png

## demo-datastream: the Datastream pipeline end to end on local event files.
demo-datastream: setup
	$(PY) -m demo.datastream

## demo-bigtable: the Bigtable change stream pipeline end to end on the local emulator.
demo-bigtable: setup
	$(PY) -m demo.bigtable

## demo-debezium: real PostgreSQL through real Debezium (embedded, capturing into the Kafka
## Connect sink layout) into Iceberg by real DAG runs; the targets compared with the tables.
demo-debezium: setup services
	$(PY) -m demo.debezium

## demo-debezium-mariadb: the same on MariaDB through Debezium's MariaDB connector (its
## classpath fetched once with Maven into the jar folder); the targets compared with the tables.
demo-debezium-mariadb: setup services
	$(PY) -m demo.debezium_mariadb

## demo-snapshot: both snapshot kinds (Debezium's incremental snapshot by signal, the parallel
## Spark snapshot between watermarks) on a running stream of real PostgreSQL through real
## Debezium, while a workload changes the same keys; the targets compared with the tables.
demo-snapshot: setup services
	$(PY) -m demo.snapshot

## demo-commit-ts: Spanner tables read by their commit-timestamp columns (no change stream):
## a 2-hour history on the emulator, 20-minute windows read at their exact ends, soft
## deletes and a key reconciliation every 3 windows; targets compared with the true state.
demo-commit-ts: setup
	$(PY) -m demo.commit_ts

## demo-cluster: the Spanner demo with extract and apply as Dataproc jobs (the Dataproc
## stand-in's cluster submits them to a Spark standalone master on 127.0.0.1) and the work
## root on a GCS emulator (gs://cdc-work/demo); the master's applications are listed.
demo-cluster: setup
	$(PY) -m demo.cluster

## live-datastream: the Datastream DAG under Airflow's scheduler and triggerer on a 1-minute
## schedule while a writer lands files in wall-clock time (about 6 minutes).
live-datastream: setup
	$(PY) -m demo.live_datastream

## demo-catchup: the live Bigtable DAG stopped (paused) for 5 minutes of its 1-minute schedule
## while a writer goes on, then resumed: one catch-up window reads the missed intervals and
## their runs pass with it (about 12 minutes; last line `demo-catchup: OK intervals=<n>
## windows=<m> backlog_s=<s> drain_s=<s> mismatches=0`).
demo-catchup: setup
	$(PY) -m demo.catchup

## live-bigtable: the Bigtable DAG under Airflow's scheduler and triggerer on a 1-minute
## schedule while a writer changes the emulator's table through the client (about 6 minutes).
live-bigtable: setup
	$(PY) -m demo.live_bigtable

## live-debezium: the Debezium DAG under Airflow's scheduler and triggerer on a 1-minute
## schedule while a workload writes to PostgreSQL and the capture runs (about 6 minutes).
live-debezium: setup services
	$(PY) -m demo.live_debezium

## live-commit-ts: the commit-timestamp DAG under Airflow's scheduler and triggerer on a
## 1-minute schedule while a writer commits through the Spanner client in wall-clock time
## (about 6 minutes).
live-commit-ts: setup
	$(PY) -m demo.live_commit_ts

## bench: every benchmark in bench/ (ratios against a baseline measured in the same run);
## bench/snapshot.py reads a table of 1M rows in PostgreSQL three ways and runs Debezium;
## bench/ui.py times the CDC view's API on a stream of 100,000 windows; bench/scale.py runs a
## window of 72k, then 288k Spanner changes over 1,000 partitions through extract and apply and
## prints the drivers' peak memory (the 0.5M/2M/5M sizes: `.venv/bin/python bench/scale.py
## --full`); bench/state_store.py plans and commits windows of 10,000 partitions on SQLite and
## PostgreSQL. Their result lines go to $(BENCH_RESULTS), and bench/report.py writes them as
## the table of docs/performance.md.
BENCH_RESULTS ?= bench/results.txt
bench: setup services
	@set -o pipefail; echo "# make bench, $$(date -u '+%Y-%m-%d %H:%M') UTC, $$(nproc) cores" > $(BENCH_RESULTS); \
	failed=""; for b in bench/*.py; do [ "$$b" = bench/report.py ] && continue; \
	  $(PY) "$$b" | tee -a $(BENCH_RESULTS) || failed="$$failed $$b"; done; \
	$(PY) bench/report.py $(BENCH_RESULTS) --write docs/performance.md; \
	if [ -n "$$failed" ]; then echo "bench: failed:$$failed" >&2; exit 1; fi

## docs: the documentation site (MkDocs Material; the API reference by mkdocstrings from the
## docstrings, read statically: nothing is imported) from docs/ into build/docs. --strict makes
## every warning an error: a broken link or anchor, a page left out of the navigation, a
## reference that names no object. Its packages come with the dev extra (make setup).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir build/docs

## constraints: regenerate constraints.txt from the current venv (keeps the header).
constraints:
	{ sed '/^[^#]/,$$d' constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -viE '^(airflow-cdc|-e )' | sort -f; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) .airflow .pytest_cache
