# Tideline's front door. `make demo` runs the demo; `make test` runs the whole suite.
PY := .venv/bin/python
STACK := $(PY) stack/stackctl.py

.PHONY: help setup up down status doctor validate demo test test-unit test-contract deploy-test bench soak docs clean env

setup:            ## install PostgreSQL (apt), the venv (PyPI) and the JVM parts (Maven) if missing
	@bash stack/setup.sh

up: setup         ## start PostgreSQL, Kafka, Connect+Debezium and Airflow on loopback
	@$(STACK) up

down:             ## stop everything the stack started
	@if [ -x $(PY) ]; then $(STACK) down; fi

status:           ## health of each part of the stack, then where every pipeline's tables stand
	@$(STACK) status; eval "$$($(STACK) env)"; $(PY) -m tideline.ops.status

doctor:           ## check every part each pipeline depends on: pass / warn / fail and what to do
	@eval "$$($(STACK) env)"; $(PY) -m tideline.ops.doctor

validate: setup   ## check the pipeline YAMLs offline (FILES=... or all in pipelines/): file, line and field of each problem
	@PYTHONPATH=plugins $(PY) -m tideline.ops.validate $(FILES)

demo: setup       ## the stack, the demo shop, a live workload, and the sync_demo DAG loading then streaming it
	@$(PY) stack/demo.py

test: setup       ## unit tests, then integration tests against the real stack
	@$(PY) -m pytest tests

test-unit: setup  ## the pure core only, no services
	@$(PY) -m pytest tests/unit

test-contract: setup  ## every target's contract against the real PostgreSQL and Iceberg (no Kafka, Airflow): ~1 min
	@$(PY) -m pytest tests/contract

deploy-test: setup  ## build the images (podman), run the compose deployment, break it, recreate it: ~10 min
	@$(PY) -m pytest tests/deploy -s

bench: up         ## benchmarks with their baselines side by side (not part of `make test`)
	@for b in tests/bench/*.py; do [ -e "$$b" ] || continue; [ "$$b" = tests/bench/soak.py ] && continue; \
	  echo "== $$b"; $(PY) "$$b" || exit 1; done

MINUTES ?= 60
soak: up          ## the chaos soak: pipelines under faults for MINUTES (default 60; 15 gives >= 10 faults)
	@cd tests/bench && ../../$(PY) soak.py --minutes $(MINUTES)

env:              ## print the stack's environment: eval "$$(make -s env)"
	@$(STACK) env

docs: setup       ## build the docs site into site/ (strict: a broken link fails); open site/index.html
	@NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --quiet --strict

help:             ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):[^#]*## /  make \1\t/' | expand -t 24

clean: down       ## remove the stack's data and logs (not the installed venv and jars)
	for l in stack/var/pg stack/var/mariadb; do if [ -L $$l ]; then rm -rf "$$(readlink $$l)"; fi; done
	rm -rf stack/var
