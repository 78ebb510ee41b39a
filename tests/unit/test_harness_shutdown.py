"""The harness tells a clean shutdown from a hung one: a service that does not exit within
its bound after SIGTERM is SIGKILLed and reported by name, and only a process a test
SIGKILLed on purpose may end with -9. Real child processes (no network)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from hookstream.dev.harness import Pipeline, ServiceProcess

# Like every service, it answers the harness's request for its stacks before the kill
# (hookstream.ops.stack_dump); without a handler SIGUSR1 would end it with -10.
IGNORES_SIGTERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
                   " import faulthandler; faulthandler.register(signal.SIGUSR1);"
                   " print('ready', flush=True); time.sleep(60)")
EXITS_ON_SIGTERM = ("import signal, sys, time;"
                    " signal.signal(signal.SIGTERM, lambda *_: sys.exit(0));"
                    " print('ready', flush=True); time.sleep(60)")
FAILS_ON_SIGTERM = ("import signal, sys, time;"
                    " signal.signal(signal.SIGTERM, lambda *_: sys.exit(3));"
                    " print('ready', flush=True); time.sleep(60)")


def _running(name: str, code: str, tmp_path: Path) -> ServiceProcess:
    """A ServiceProcess whose process is ``code`` (signal handlers installed on return)."""
    p = ServiceProcess(name, {}, tmp_path / f"{name}.log")
    p.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert p.proc.stdout is not None
    with p.proc.stdout:
        assert p.proc.stdout.readline() == b"ready\n"
    return p


def test_a_service_that_ignores_sigterm_is_reported_as_hung(tmp_path: Path) -> None:
    p = _running("dispatcher", IGNORES_SIGTERM, tmp_path)
    assert p.terminate(timeout_s=0.5) == -signal.SIGKILL
    problem = p.exit_problem("dispatcher2")
    assert problem is not None
    assert problem.startswith("dispatcher2 did not drain and exit within 0.5s of SIGTERM")


def test_a_clean_exit_after_sigterm_is_no_problem(tmp_path: Path) -> None:
    p = _running("relay", EXITS_ON_SIGTERM, tmp_path)
    assert p.terminate(timeout_s=10) == 0
    assert p.exit_problem() is None


def test_another_exit_code_after_sigterm_is_a_problem(tmp_path: Path) -> None:
    p = _running("fanout", FAILS_ON_SIGTERM, tmp_path)
    assert p.terminate(timeout_s=10) == 3
    assert (p.exit_problem() or "").startswith("fanout exited with 3")


def test_minus_nine_is_expected_only_after_a_deliberate_kill(tmp_path: Path) -> None:
    killed = _running("dispatcher", IGNORES_SIGTERM, tmp_path)
    killed.kill()  # the test's declaration: this one dies by SIGKILL
    assert killed.terminate() == -signal.SIGKILL
    assert killed.exit_problem() is None
    # SIGKILLed by someone else (the OOM killer, a crash in native code): a problem
    crashed = _running("dispatcher", IGNORES_SIGTERM, tmp_path)
    assert crashed.proc is not None
    crashed.proc.kill()
    crashed.proc.wait()
    assert crashed.terminate() == -signal.SIGKILL
    assert (crashed.exit_problem() or "").startswith("dispatcher exited with -9")


def test_a_pipeline_names_each_service_that_hung(tmp_path: Path) -> None:
    pipeline = Pipeline({}, tmp_path, dispatchers=2)
    pipeline.processes = {
        "relay": _running("relay", EXITS_ON_SIGTERM, tmp_path),
        "dispatcher": _running("dispatcher", EXITS_ON_SIGTERM, tmp_path),
        "dispatcher2": _running("dispatcher", IGNORES_SIGTERM, tmp_path),
    }
    codes = pipeline.stop(timeout_s=0.5)
    assert codes == {"relay": 0, "dispatcher": 0, "dispatcher2": -signal.SIGKILL}
    problems = pipeline.exit_problems()
    assert len(problems) == 1 and problems[0].startswith("dispatcher2 did not drain")
