"""Entry point of a step that runs in its own process (`Execution.SUBPROCESS`).

Protocol: the parent writes `{"impl": "module:function", "context": {...}}` on stdin;
the worker writes JSON lines on stdout — `{"progress": [done, total, unit]}` while it
runs, `{"measured": {...}}` (what the step gave `ctx.measure`) when it ends, and
`{"error": message}` before exiting non-zero on failure, and `{"checkpoint": {"step",
"directory"}}` asking the parent to publish a kept state (`ctx.publish_checkpoint`).
Everything the step logs goes to its log file.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import traceback
from typing import TextIO

from marinbuild.actions.execution.logs import step_logger
from marinbuild.targets.context import Context, StepFailed
from marinbuild.targets.rule import import_function


def _protocol_channel() -> TextIO:
    """Keep the real stdout for the protocol, and send everything the step prints (its own
    print() calls and its child processes' fd 1) to stderr, which the parent logs."""
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def main() -> int:
    request = json.loads(sys.stdin.read())
    channel = _protocol_channel()

    lock = threading.Lock()  # the step's own threads report too (kept checkpoints, as they are written)

    def emit(message: dict) -> None:
        with lock:
            channel.write(json.dumps(message) + "\n")
            channel.flush()

    context = Context.from_json(request["context"])
    context.log = step_logger(context.label, context.log_path)
    context.progress_fn = lambda done, total, unit: emit({"progress": [done, total, unit]})
    context.checkpoint_fn = lambda step, directory: emit({"checkpoint": {"step": step, "directory": str(directory)}})
    try:
        import_function(request["impl"], context.workspace)(context)
    except StepFailed as failure:
        emit({"error": str(failure), "exit_status": failure.exit_status})
        return 1
    except KeyboardInterrupt:
        raise  # dies of the signal, so that the builder sees a step killed by Ctrl-C
    except BaseException as error:  # noqa: BLE001 - the step's own failure, reported in full
        context.log.error("%s", traceback.format_exc())
        emit({"error": f"{type(error).__name__}: {error}"})
        return 1
    finally:
        if context.measured:  # a failed attempt's measurements are worth keeping too
            emit({"measured": context.measured})
    _leave_jax_job()
    return 0


def _leave_jax_job() -> None:
    """A process of a multi-host step that joined JAX's distributed job leaves it with the
    others: shutting down waits for every process (a barrier), where an exit of process 0,
    which serves the job's coordination, would kill the processes still finishing."""
    jax = sys.modules.get("jax")
    if jax is not None and jax.distributed.is_initialized():
        jax.distributed.shutdown()


def _exit(code: int) -> None:
    """Exit without tearing the interpreter down. A step is done once its outputs are
    written; threads it leaves behind (Levanter's data loader, XLA's) may still be inside
    native code, and Python's shutdown under them aborts the process ("terminate called
    after throwing..."), which would fail a step that succeeded."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
