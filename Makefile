# iotape: `make demo` and `make test` each do everything on a fresh Debian 12 machine.
SHELL := /bin/bash
.DEFAULT_GOAL := help

UV_VERSION := 0.13.9
DEBS := clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev libzstd-dev liblz4-dev liburing-dev libdeflate0 pkg-config \
        fio bpftrace blktrace util-linux e2fsprogs fdisk xz-utils zstd strace chromium
VENV := .venv
PY := $(VENV)/bin/python
UV := .tools/bin/uv

.PHONY: help setup deps python native demo test bench lint clean

help:
	@echo "make setup   install Debian packages and the Python environment, build native parts"
	@echo "make demo    setup, then record and inspect a real trace on a loop device"
	@echo "make test    setup, then run the test suite (as root: BPF and loop devices)"
	@echo "make bench   setup, then run the benchmarks (JSON in bench/results/)"
	@echo "make lint    ruff, mypy and the C build with -Werror"

setup: deps python native

# apt-get only when something is missing, so a second `make test` starts at once.
deps:
	@missing=$$(for p in $(DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	  | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

$(UV):
	python3 -m venv .tools
	.tools/bin/pip install -q uv==$(UV_VERSION)

# Bytecode compiled at install: a shell that sets PYTHONDONTWRITEBYTECODE would
# otherwise compile every library on each command's start (`iotape --help`
# 1.1-1.6 s, 0.6 s compiled).
python: $(UV)
	$(UV) sync --frozen -q --compile-bytecode

native:
	$(MAKE) -C recorder
	$(MAKE) -C analyzer/store
	$(MAKE) -C analyzer/tiering
	$(MAKE) -C analyzer/lab
	$(MAKE) -C replayer
	@if [ -f workload/Makefile ]; then $(MAKE) -C workload; fi

demo: setup
	bash scripts/demo.sh

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest

# Each writes JSON to bench/results/; all of them take about 45 minutes (root).
bench: setup
	$(PY) bench/record_overhead.py
	$(PY) bench/importers.py
	$(PY) bench/store.py
	$(PY) bench/server.py
	$(PY) bench/history.py
	$(PY) bench/workload_engine.py
	$(PY) bench/replay.py
	$(PY) bench/replay_noise.py
	$(PY) bench/replay_dependent.py
	$(PY) bench/replay_dependent_workload.py
	$(PY) bench/tiering.py
	$(PY) bench/tiering_check.py

lint: python native
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

clean:
	$(MAKE) -C recorder clean
	$(MAKE) -C analyzer/store clean
	$(MAKE) -C analyzer/tiering clean
	$(MAKE) -C analyzer/lab clean
	$(MAKE) -C replayer clean
	@if [ -f workload/Makefile ]; then $(MAKE) -C workload clean; fi
	rm -rf .venv .tools
