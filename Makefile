# django-bloom: the two commands for a fresh clone are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

SOAK_MINUTES ?= 30

.PHONY: test soak demo bench load screenshots messages messages-check matrix lint docs package venv clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,browser,dev]"
	touch $@

venv: $(VENV)/.installed

## make test: create the venv, install, run the whole suite against a real Redis, on
## TEST_WORKERS processes (pytest-xdist, each with a Redis of its own; default 2; 0: one process)
TEST_WORKERS ?= 2
test: $(VENV)/.installed
	BLOOM_REDIS_SERVERS=$(TEST_WORKERS) ./scripts/with-redis.sh $(PY) -m pytest -n $(TEST_WORKERS)

## make soak: the fault model (tests/faultmodel, docs/reliability.md) for SOAK_MINUTES
## minutes (default 30) from a new random seed; a failure prints its seed and steps
soak: $(VENV)/.installed
	BLOOM_FAULT_SECONDS=$$(( $(SOAK_MINUTES) * 60 )) BLOOM_FAULT_SEED=$${BLOOM_FAULT_SEED:-random} \
	  ./scripts/with-redis.sh $(PY) -m pytest -s -q tests/faultmodel/test_fault_model.py

## make demo: run the example site (SQLite + Redis) on a printed URL
demo: $(VENV)/.installed
	./scripts/with-redis.sh ./scripts/demo.sh $(PY)

## make bench: side-by-side benchmark against RedisBloom, layout native against raw BF.*,
## then each kind against the standard layout (counting, rotating: private servers) and
## the cluster scale-out
bench: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) -m bench
	$(PY) -m bench.native
	$(PY) -m bench.transfer
	$(PY) -m bench.counting
	$(PY) -m bench.rotating
	$(PY) -m bench --cluster

## make load: bounded load test of the example site (127.0.0.1 only; see bench/load.py)
load: $(VENV)/.installed
	$(PY) -m bench.load

## make screenshots: rerun the browser test and refresh docs/screenshots/
screenshots: $(VENV)/.installed
	UPDATE_SCREENSHOTS=1 ./scripts/with-redis.sh $(PY) -m pytest tests/admin/test_browser.py

## make messages: refresh django_bloom/locale (makemessages) and compile it; needs gettext.
## Translate new entries in the .po, run it again, commit the .po AND the .mo.
messages: $(VENV)/.installed
	./scripts/messages.sh $(PY)

## make messages-check: fail if a marked string is untranslated or the .mo is stale (CI)
messages-check: $(VENV)/.installed
	./scripts/messages.sh $(PY) --check

## make matrix: the suite on Python 3.10 + oldest deps, 3.13 + newest, 3.12 on PostgreSQL
matrix:
	./scripts/matrix.sh

lint: $(VENV)/.installed
	$(PY) -m ruff check django_bloom tests

## make docs: build the documentation site (mkdocs.yml, docs/) into site/; warnings are errors
docs: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

## make package: build sdist + wheel into dist/, twine check them, check the wheel's contents
package: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[dev]"
	rm -rf dist build
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*
	$(PY) scripts/check_wheel.py dist

clean:
	rm -rf $(VENV) *.egg-info site dist build
