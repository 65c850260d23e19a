# Two commands do all the set-up on a fresh machine:
#   make demo   generate -> load -> verify (-> finalize -> query) with a throughput table; then
#               gen://ticks (TICKS_N records) -> load -> finalize on time -> a one-hour box query
#   make test   create .venv, install bulkload with its test extras, check the code (ruff: pyflakes
#               and import order; lint-imports: the layers of loader/), run the whole suite
VENV   ?= .venv
PY     := $(VENV)/bin/python
N      ?= 20000000
TICKS_N ?= 5000000
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo test lint typecheck bench bench-catalog clean

$(STAMP): pyproject.toml setup.py $(wildcard generators/*.c generators/*.h)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,bench,dask,duckdb,polars]"
	touch $@

install: $(STAMP)

demo: install
	mkdir -p data
	$(PY) bench/demo.py --n $(N) --ticks-n $(TICKS_N) --data data

lint: install
	$(VENV)/bin/ruff check loader tests bench examples setup.py
	$(VENV)/bin/ruff format --check loader tests bench examples setup.py
	cd $(CURDIR) && $(VENV)/bin/lint-imports

# issue 32: joins `lint` once every package checks clean
typecheck: install
	$(VENV)/bin/mypy

# the suite in TEST_WORKERS processes (pytest-xdist; auto: one per core), a test file per
# process at a time (--dist loadfile: a module's fixtures are built once)
TEST_WORKERS ?= auto

test: lint
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

bench: install
	$(VENV)/bin/bulkload bench --suite quick --out bench/results $(BENCH_ARGS)

# issue 29's targets: metadata costs at 1k..1M batch rows, the 20M load with 100-record batches
# (~15 min at full size; smaller: make bench-catalog BENCH_ARGS="--max-batches 10000 --records 1000000")
bench-catalog: install
	$(VENV)/bin/bulkload bench --suite catalog --out bench/results $(BENCH_ARGS)

clean:
	rm -rf build *.egg-info data bench/out
