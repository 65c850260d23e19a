# Two commands do all the set-up on a fresh machine:
#   make demo   generate -> load -> verify (-> finalize -> query) with a throughput table; then
#               gen://ticks (TICKS_N records) -> load -> finalize on time -> a one-hour box query
#   make test   create .venv, install bulkload with its test extras, check the code (ruff: pyflakes
#               and import order; lint-imports: the layers of loader/), build the documentation
#               site, run the whole suite (tests/site runs every example of README.md and docs/)
#   make docs   build the documentation site into site/ (MkDocs, warnings are errors)
VENV   ?= .venv
PY     := $(VENV)/bin/python
N      ?= 20000000
TICKS_N ?= 5000000
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo test lint typecheck docs bench bench-catalog clean

$(STAMP): pyproject.toml setup.py $(wildcard generators/*.c generators/*.h)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,bench,dask,duckdb,polars,docs]"
	touch $@

install: $(STAMP)

demo: install
	mkdir -p data
	$(PY) bench/demo.py --n $(N) --ticks-n $(TICKS_N) --data data

lint: install
	$(VENV)/bin/ruff check loader tests bench examples docs/_gen setup.py
	$(VENV)/bin/ruff format --check loader tests bench examples docs/_gen setup.py
	cd $(CURDIR) && $(VENV)/bin/lint-imports

# issue 32: joins `lint` once every package checks clean
typecheck: install
	$(VENV)/bin/mypy

# mkdocs.yml; the reference pages are generated from the code at build time (docs/_gen/).
# (The two variables silence a plugin's banner about a future MkDocs 2, which the extra excludes;
# no --quiet: it hides the warnings from --strict, which then passes a broken link.)
docs: install
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict --site-dir site

test: lint docs
	$(PY) -m pytest -q -p no:cacheprovider

bench: install
	$(VENV)/bin/bulkload bench --suite quick

# issue 29's targets: metadata costs at 1k..1M batch rows, the 20M load with 100-record batches
# (~15 min at full size; smaller: make bench-catalog BENCH_ARGS="--max-batches 10000 --records 1000000")
bench-catalog: install
	$(VENV)/bin/bulkload bench --suite catalog --out bench/results $(BENCH_ARGS)

clean:
	rm -rf build *.egg-info data bench/out site
