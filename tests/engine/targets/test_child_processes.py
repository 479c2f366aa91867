"""A step's processes die with the builder's thread that started them, however they start.

`ChildProcesses` starts them through `setpriv --pdeathsig` where the machine has it (so
that Python can start them with vfork, whose cost does not grow with the builder's
memory), else through a `preexec_fn`: both set the same death signal, which the process
reports here itself (`prctl(PR_GET_PDEATHSIG)`); tests/engine/provenance/test_interrupted_history.py
shows a step dying with a builder killed outright.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from marinbuild.targets import context
from marinbuild.targets.context import ChildProcesses

# Prints the death signal of the process it runs in.
REPORT = (
    "import ctypes; libc = ctypes.CDLL(None); found = ctypes.c_int(); "
    "libc.prctl(2, ctypes.byref(found)); print(found.value)"  # 2: PR_GET_PDEATHSIG
)


@pytest.mark.parametrize("through_setpriv", [True, False])
def test_a_step_process_gets_the_death_signal(monkeypatch, through_setpriv) -> None:
    if through_setpriv and context._setpriv() is None:
        pytest.skip("no setpriv that sets the death signal on this machine")
    if not through_setpriv:
        monkeypatch.setattr(context, "_setpriv", lambda: None)
    processes = ChildProcesses()
    with processes.popen([sys.executable, "-c", REPORT], stdout=subprocess.PIPE, text=True) as process:
        out, _ = process.communicate(timeout=60)
    assert process.returncode == 0 and int(out) == signal.SIGKILL
    assert (process.args[0] == context._setpriv()) is through_setpriv  # the path it was meant to take


def test_a_command_keeps_its_own_exit_status_through_setpriv() -> None:
    with ChildProcesses().popen(["bash", "-c", "exit 7"]) as process:
        assert process.wait(timeout=60) == 7
