# Two commands do everything, set-up included (see README.md):
#   make book   build the site into book/_build/html
#   make test   everything CI checks
# Other targets are for authors: `make execute NB=nbs/01_attention.ipynb` runs a chapter, stores
# its outputs and its time (bench/run_all.py --store); `make clean-nbs` normalises notebook metadata.

VENV       ?= .venv
PY         := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
NB         ?= nbs/*.ipynb
export PIP_DISABLE_PIP_VERSION_CHECK = 1

.PHONY: setup export book test execute clean-nbs

# --no-compile: Python compiles the modules a program imports when it first imports them,
# not every file of PyTorch and the book's tools at install (about 60 s)
$(VENV)/.installed: pyproject.toml annotated_transformer/__init__.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile $(TORCH_SPEC)
	$(PY) -m pip install -q --no-compile -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

export: setup
	cd . && $(VENV)/bin/nbdev-export

book: export
	$(VENV)/bin/jupyter-book build . --path-output book
	PY=$(PY) bash tools/build_try.sh book/_build/html
	@echo "The book is at $(CURDIR)/book/_build/html/index.html"

test: setup
	VENV=$(VENV) TORCH_SPEC="$(TORCH_SPEC)" bash tools/test.sh

# one way to run a chapter for its stored outputs: bench/run_all.py runs it as a reader does
# (full size), stores the outputs, cleans the notebook and records its time for the book
execute: export
	$(PY) bench/run_all.py --store $(NB)

clean-nbs: setup
	$(PY) tools/nbclean.py
