# Two commands do all the set-up on a fresh machine:
#   make demo   generate -> load -> verify (-> finalize -> query) with a throughput table; then
#               gen://ticks (TICKS_N records) -> load -> finalize on time -> a one-hour box query
#   make test   create .venv, install bulkload with its test extras, check the code (ruff: lint and
#               format; lint-imports: the layers of loader/; mypy: types), build the documentation
#               site, run the whole suite (tests/site runs every example of README.md and docs/)
#   make docs   build the documentation site into site/ (MkDocs, warnings are errors)
#   make test-sanitize  tests/stores and tests/serializers against the C extensions built with
#               ASan and UBSan, in .venv-sanitize (a few minutes; not part of make test)
VENV   ?= .venv
PY     := $(VENV)/bin/python
N      ?= 20000000
TICKS_N ?= 5000000
STAMP  := $(VENV)/.installed-stamp

# every C source: the generator library and bulkload-gen (generators/), each extension beside its package
C_SOURCES := $(wildcard generators/*.c generators/*.h loader/*/*.c third_party/*/*.[ch])

.PHONY: install demo test test-sanitize lint docs bench bench-catalog clean

# the test venv: C warnings are errors (setup.py: BULKLOAD_WERROR; a plain pip install keeps them warnings)
$(STAMP): pyproject.toml setup.py $(C_SOURCES)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	BULKLOAD_WERROR=1 $(PY) -m pip install -q -e ".[test,bench,dask,duckdb,polars,docs]"
	touch $@

install: $(STAMP)

demo: install
	mkdir -p data
	$(PY) bench/demo.py --n $(N) --ticks-n $(TICKS_N) --data data

lint: install
	$(VENV)/bin/ruff check loader tests bench examples docs/_gen setup.py
	$(VENV)/bin/ruff format --check loader tests bench examples docs/_gen setup.py
	cd $(CURDIR) && $(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# mkdocs.yml; the reference pages are generated from the code at build time (docs/_gen/).
# (The two variables silence a plugin's banner about a future MkDocs 2, which the extra excludes;
# no --quiet: it hides the warnings from --strict, which then passes a broken link.)
docs: install
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict --site-dir site

# the suite in TEST_WORKERS processes (pytest-xdist; auto: one per core), a test file per
# process at a time (--dist loadfile: a module's fixtures are built once)
TEST_WORKERS ?= auto

test: lint docs
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

# The stores' and serializers' suites against the C extensions built with AddressSanitizer and
# UBSan (setup.py: BULKLOAD_SANITIZE, objects in build/sanitize), installed (not editable: the
# source tree keeps the plain build) into their own venv. Python itself is not built with ASan,
# so libasan is preloaded; PYTHONMALLOC=malloc puts every Python object in ASan's sight (pymalloc's
# arenas would hide an overrun of a small bytes or bytearray); PYTHONSAFEPATH keeps the source
# tree's `loader` off sys.path (tests and the processes they start import the installed one);
# CPython leaks at exit by design.
SAN_VENV  ?= .venv-sanitize
SAN_PY    := $(SAN_VENV)/bin/python
SAN_STAMP := $(SAN_VENV)/.installed-stamp
SAN_CC     = $(shell python3 -c "import sysconfig; print(sysconfig.get_config_var('CC').split()[0])")
SAN_ENV    = LD_PRELOAD=$(shell $(SAN_CC) -print-file-name=libasan.so) PYTHONSAFEPATH=1 PYTHONMALLOC=malloc \
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

$(SAN_STAMP): pyproject.toml setup.py $(C_SOURCES)
	test -x $(SAN_PY) || python3 -m venv $(SAN_VENV)
	$(SAN_PY) -m pip install -q --upgrade pip
	BULKLOAD_WERROR=1 BULKLOAD_SANITIZE=1 $(SAN_PY) -m pip install -q ".[test]"
	touch $@

test-sanitize: $(SAN_STAMP)
	$(SAN_ENV) $(SAN_PY) -c "import loader.stores._lmdbnode as m; assert '$(SAN_VENV)' in m.__file__, m.__file__"
	$(SAN_ENV) $(SAN_PY) -m pytest -q -p no:cacheprovider --capture=sys tests/stores tests/serializers

bench: install
	$(VENV)/bin/bulkload bench --suite quick --out bench/results $(BENCH_ARGS)

# issue 29's targets: metadata costs at 1k..1M batch rows, the 20M load with 100-record batches
# (~15 min at full size; smaller: make bench-catalog BENCH_ARGS="--max-batches 10000 --records 1000000")
bench-catalog: install
	$(VENV)/bin/bulkload bench --suite catalog --out bench/results $(BENCH_ARGS)

clean:
	rm -rf build *.egg-info data bench/out site $(SAN_VENV)
