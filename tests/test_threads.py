"""The llama.cpp thread count: the cores other processes leave free (issue 44: one busy core
of two made two threads 100 times slower than one)."""

from __future__ import annotations

import pytest

from entrena.hardware.threads import _cpu_times, choose_threads, free_threads


@pytest.mark.parametrize(("usable", "busy", "threads"), [
    (2, 0.0, 2), (2, 0.2, 2), (2, 0.3, 1), (2, 1.0, 1), (2, 2.0, 1), (16, 0.4, 15),
    (16, 3.1, 13), (16, 3.3, 12), (1, 0.9, 1), (4, -0.5, 4)])
def test_threads_are_the_free_cores_rounded_down(usable, busy, threads):
    assert free_threads(usable, busy) == threads


def test_proc_stat_lines_count_busy_and_total_time_of_the_chosen_cores():
    stat = ("cpu  30 0 10 60 0 0 0 0 0 0\n"
            "cpu0 10 0 5 80 5 0 0 0 0 0\n"
            "cpu1 20 7 5 20 0 0 5 0 0 0\n"
            "intr 1 2 3\n")
    assert _cpu_times(stat, [1]) == (30, 57)  # busy: user + system + softirq
    assert _cpu_times(stat, None) == (45, 157)  # idle, iowait and nice are not busy


def test_a_requested_count_is_kept_and_a_measured_one_fits_the_machine():
    assert choose_threads(3).threads == 3 and choose_threads(3).source == "--threads"
    measured = choose_threads()
    assert 1 <= measured.threads <= measured.usable_cpus and measured.busy_cpus is not None
    assert "usable core" in measured.describe()


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="Linux only")
def test_torch_threads_default_to_the_cores_this_process_may_use():
    import os

    import torch

    from entrena.engine.backend import configure_threads

    before_ids, before_threads = os.sched_getaffinity(0), torch.get_num_threads()
    try:
        os.sched_setaffinity(0, {min(before_ids)})
        assert configure_threads(None) == 1  # `taskset -c 0`: one thread, not one per core
        assert configure_threads(3) == 3  # train.num_threads is kept as given
    finally:
        os.sched_setaffinity(0, before_ids)
        torch.set_num_threads(before_threads)
