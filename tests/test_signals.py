"""A stop signal is raised where the program is, but never inside an import, and an error
that wraps one leaves as the signal (``entrena.core.signals``); the command line handles
one from its first line on."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import build_config, clean_env, review_rows, write_config, write_csv
from entrena.core.signals import StopSignal, stop_in, stop_signals


def wait_for_the_signal(seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.005)


def test_a_signal_during_an_import_waits_for_the_import(tmp_path, monkeypatch):
    (tmp_path / "slow_to_import.py").write_text(
        "import os, signal\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "total = 0\n"
        "for i in range(300_000):\n"  # bytecodes where the handler would have run
        "    total += i\n"
        "DONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    started = time.monotonic()
    with pytest.raises(StopSignal) as raised, stop_signals():
        module = importlib.import_module("slow_to_import")
        assert module.DONE
        wait_for_the_signal()
    assert raised.value.signal_name == "SIGTERM"
    assert sys.modules["slow_to_import"].DONE  # imported whole, not cut in two
    assert time.monotonic() - started < 4.0  # raised soon after, not at the deadline
    sys.modules.pop("slow_to_import")


class Stops:
    """A descriptor whose ``__set_name__`` (run while its class is built) gets a SIGTERM:
    Python 3.11 wraps an error raised there in a RuntimeError."""

    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100_000):
            pass


def test_an_error_that_wraps_the_signal_leaves_as_the_signal():
    with pytest.raises(StopSignal) as raised, stop_signals():
        class Model:
            field = Stops()
        wait_for_the_signal()
    assert raised.value.signal_name == "SIGTERM"


def test_stop_in_follows_causes_and_contexts():
    stop = StopSignal("SIGUSR1")
    try:
        try:
            raise stop
        except StopSignal as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        wrapped = outer
    assert stop_in(wrapped) is stop and stop_in(stop) is stop
    assert stop_in(ValueError("unrelated")) is None and stop_in(None) is None
    try:
        try:
            raise StopSignal("SIGTERM")
        except StopSignal:
            raise SystemExit(143) from None  # reported on purpose: not the signal any more
    except SystemExit as reported:
        assert stop_in(reported) is None


def test_the_previous_handlers_are_back_after_the_block():
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals(("SIGTERM",)):
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_cli_stops_with_its_line_while_its_libraries_import(tmp_path):
    """SIGTERM as ``entrena train`` imports ``entrena.api`` (torch, transformers …): before
    this, the default action killed it (exit -15) or the signal broke an import."""
    write_csv(tmp_path / "data" / "train.csv", review_rows(32, seed=1))
    config = build_config({"data.train": str(tmp_path / "data" / "train.csv")}, test=None)
    path = write_config(config, tmp_path / "config.yaml")
    script = ("import os, signal, sys\n"
              "class Notice:\n"  # the platform's notice, as entrena.api starts importing
              "    def find_spec(self, name, path=None, target=None):\n"
              "        if name == 'entrena.api':\n"
              "            os.kill(os.getpid(), signal.SIGTERM)\n"
              "        return None\n"
              "sys.meta_path.insert(0, Notice())\n"
              "from entrena.cli import main\n"
              f"sys.argv = ['entrena', 'train', {str(path)!r}]\n"
              "main()\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 143, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("stopped by SIGTERM while ") and "nothing" in lines[-1], lines
    assert sum(line.startswith("stopped by") for line in lines) == 1, lines  # said once
    assert not (tmp_path / "runs").exists()
