# The two commands: `make demo` runs the example DAGs end to end, `make test` runs the suite.
# Both bootstrap the environment first (idempotent: a second run skips what exists).
SHELL := /bin/bash

.PHONY: bootstrap demo ui test test-fast bench lint docs docs-serve docs-images dist clean

bootstrap:
	bash scripts/bootstrap.sh

demo: bootstrap
	bash scripts/demo.sh

# The Airflow UI over what `make demo` did (its Airflow home and catalog) on 127.0.0.1:8080
# (AIP_UI_PORT, and its log servers on the two ports after it); prints the URL and the logins;
# Ctrl-C stops every process it started. See scripts/ui.sh.
ui:
	bash scripts/ui.sh

# The docs are built first, so that pytest's summary stays the last line of the run.
test: bootstrap docs
	bash scripts/test.sh

test-fast: bootstrap
	bash scripts/test.sh tests/unit

bench: bootstrap
	source scripts/env.sh && for b in bench/[!_]*.py; do python -m "bench.$$(basename "$$b" .py)" || exit 1; done

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
	.venv/bin/python scripts/check_operator_init.py
	.venv/bin/mypy
	.venv/bin/python scripts/check_history.py
	.venv/bin/python scripts/check_except.py

# The docs site (docs/ + mkdocs.yml) into site/: warnings, broken internal links and anchors and
# missing example markers are errors; nothing is fetched from the network.
docs: bootstrap
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict

# The docs site served on http://127.0.0.1:$(DOCS_PORT)/ (rebuilt on every change); Ctrl-C stops it.
DOCS_PORT ?= 8000
docs-serve: bootstrap
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs serve --strict --dev-addr 127.0.0.1:$(DOCS_PORT)

# The screenshots in docs/images/, refreshed by the browser test of the governance view (the test
# suite itself writes its screenshots under .work/screenshots/, so a test run changes no tracked file;
# scripts/test.sh fails a run that changed the working tree, except where AIP_TREE_ALLOW says).
docs-images: bootstrap
	AIP_SCREENSHOTS=$(CURDIR)/docs/images AIP_TREE_ALLOW=docs/images/ AIP_TEST_WORKERS=0 bash scripts/test.sh tests/airflow/test_ui_browser.py

# A wheel and an sdist in dist/ (setuptools' build backend in .work/build-env; see scripts/build_dist.py).
dist:
	.venv/bin/python scripts/build_dist.py dist

clean:
	rm -rf .work site dist
