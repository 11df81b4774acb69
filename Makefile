# The two commands: `make demo` runs the example DAGs end to end, `make test` runs the suite.
# Both bootstrap the environment first (idempotent: a second run skips what exists).
SHELL := /bin/bash

.PHONY: bootstrap demo ui test test-fast bench lint docs clean

bootstrap:
	bash scripts/bootstrap.sh

demo: bootstrap
	bash scripts/demo.sh

# The Airflow UI over what `make demo` did (its Airflow home and catalog) on 127.0.0.1:8080
# (AIP_UI_PORT); prints the URL and the logins; Ctrl-C stops it. See scripts/ui.sh.
ui:
	bash scripts/ui.sh

# The docs are built first, so that pytest's summary stays the last line of the run.
test: bootstrap docs
	bash scripts/test.sh

test-fast: bootstrap
	bash scripts/test.sh -m "not spark and not cluster and not airflow and not postgres and not rest and not faults"

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

clean:
	rm -rf .work site
