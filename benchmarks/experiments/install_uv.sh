#!/bin/bash
# `make install`'s two pip steps into a fresh venv: pip (as the Makefile does) against uv
# (cold cache), one run each. uv does not read pip.conf: the index settings below copy this
# machine's (`pip config list`); elsewhere, set yours. Needs a uv wheel in /tmp/uvdl
# (`pip download uv --no-deps -d /tmp/uvdl`). docs/benchmarks-journal.md, "install-uv".
set -e
cd "$(dirname "$0")/../.."
PINS="torch==2.14.1 torchvision==0.29.1"
rm -rf /tmp/venv-pip /tmp/venv-uv /tmp/uvcache
python3 -m venv /tmp/venv-pip
s=$(date +%s.%N)
/tmp/venv-pip/bin/python -m pip install --quiet $PINS 2>/dev/null
/tmp/venv-pip/bin/python -m pip install --quiet -e '.[examples,dev,wandb]' $PINS 2>/dev/null
e=$(date +%s.%N); echo "pip: $(echo "$e - $s" | bc) s"
rm -rf /tmp/venv-pip
python3 -m venv /tmp/venv-uv
/tmp/venv-uv/bin/python -m pip install --quiet /tmp/uvdl/uv-*.whl 2>/dev/null
export UV_CACHE_DIR=/tmp/uvcache UV_FIND_LINKS=/opt/wheels UV_INDEX_STRATEGY=unsafe-best-match
export UV_EXTRA_INDEX_URL="file:///opt/pypi/simple file:///opt/pypi-more/simple"
s=$(date +%s.%N)
/tmp/venv-uv/bin/uv pip install --quiet --python /tmp/venv-uv/bin/python $PINS --constraint /etc/xdg/pip/constraints.txt
/tmp/venv-uv/bin/uv pip install --quiet --python /tmp/venv-uv/bin/python -e '.[examples,dev,wandb]' $PINS --constraint /etc/xdg/pip/constraints.txt
e=$(date +%s.%N); echo "uv (cold cache): $(echo "$e - $s" | bc) s"
/tmp/venv-uv/bin/python -c "import torch, entrena, transformers; print('uv venv imports ok', torch.__version__)"
du -sh /tmp/venv-uv | tail -1
rm -rf /tmp/venv-uv /tmp/uvcache
