"""benchmarks.pipeline's report: a run that did not drain within its timeout says so,
and says how its latency figures were measured, instead of printing "nan"."""

from __future__ import annotations

from benchmarks.pipeline import drain_text


def test_a_drained_run_reports_its_drain_time():
    assert drain_text(11.84, 0, 180.0) == "11.8"


def test_a_run_not_drained_says_so_with_what_was_left():
    text = drain_text(float("nan"), 4373, 180.0)
    assert text.startswith("not drained within 180 s: 4,373 healthy not yet attempted")
    assert "wait so far" in text


def test_older_results_without_the_timeout_still_read():
    assert drain_text(None, 12, None).startswith("not drained: 12 healthy")
