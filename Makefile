# Every target creates .venv on a fresh clone; only python3 and make are needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint fmt clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/python -m pip install -q --no-cache-dir --upgrade pip
	$(BIN)/python -m pip install -q --no-cache-dir -c constraints.txt -e '.[test,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpuperf predict llama2-7b --gpu h100 --seq 2048

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/predict_speed.py
	$(BIN)/python benchmarks/accuracy.py

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

fmt: $(STAMP)
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info
