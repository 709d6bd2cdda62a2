"""course_lib.runtime: the device, the seed, the smoke switch and the CPU threads."""

from __future__ import annotations

import pytest
import torch

from course_lib.runtime import DEFAULT_THREADS, configure_threads


@pytest.fixture()
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_threads_default_to_one_and_the_environment_overrides(monkeypatch, restore_threads) -> None:
    monkeypatch.delenv("COURSE_THREADS", raising=False)
    assert configure_threads() == DEFAULT_THREADS == 1 and torch.get_num_threads() == 1
    monkeypatch.setenv("COURSE_THREADS", "all")
    import os
    assert configure_threads() == (os.cpu_count() or 1) == torch.get_num_threads()
    monkeypatch.setenv("COURSE_THREADS", "1")
    assert configure_threads(2) == 2 == torch.get_num_threads()  # an explicit argument wins


@pytest.mark.parametrize("bad", [0, -1, "two", ""])
def test_bad_thread_counts_are_named(bad, restore_threads) -> None:
    with pytest.raises(ValueError, match="threads"):
        configure_threads(bad)


def test_a_notebook_may_ask_for_more_threads_and_the_environment_still_wins(monkeypatch, restore_threads) -> None:
    import os

    from course_lib.runtime import get_device
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    monkeypatch.delenv("COURSE_THREADS", raising=False)
    cpus = os.cpu_count() or 1
    assert get_device("cpu", threads=2).type == "cpu" and torch.get_num_threads() == min(2, cpus)
    assert configure_threads(default=cpus + 5) == cpus  # a default never exceeds the machine
    monkeypatch.setenv("COURSE_THREADS", "1")
    get_device("cpu", threads=2)
    assert torch.get_num_threads() == 1  # the learner's COURSE_THREADS overrides the notebook's choice
    with pytest.raises(ValueError, match="default"):
        configure_threads(default=0)
