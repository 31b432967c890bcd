"""Inside the sandbox: run the learner's cells, then gather each question's outputs as data.

This file is copied into the sandbox and run there as ``python -I runner.py`` (it imports nothing from the real
``course_embed``: the sandbox's ``lib/`` holds only a stub with ``setup`` and :mod:`.probe`). It reads
``plan.json`` (the cells to run, in order, and a checkpoint wherever the notebook had ``grader.check("qN")``) and
the gathering halves of the tests in ``probes/``. At each checkpoint, and again after the last cell, it gathers the
question's outputs in a forked child (so a crash or a change the tests make cannot reach the notebook) and writes
them, test by test, to ``out/<test>.pt`` with ``torch.save``, after removing the question's earlier outputs (what
is graded is what the last gathering wrote); the grader reads them back with ``torch.load(weights_only=True)``.
What it wrote before a timeout or a dead process stays: questions answered before an infinite loop or ``os._exit``
in a cell are still graded. Cell errors go to ``out/cells.json``. The grading run's secret seed, from which the
hidden tests draw their inputs, arrives as the first line of stdin (read before the first cell, never written to a
file) and is passed to each gathering as an argument.

Before the first cell it sets the resource limits the plan names (:mod:`.limits`; soft and hard alike, so the
notebook cannot raise them). A cell or a gathering that fails at one (out of memory, a file too large, a full
folder, no process left) ends the run there, like a time limit: the note ``limit:<kind>`` after its error tells
the grader which limit it was, and the questions checked before it are graded.
"""

import errno
import json
import os
import resource
import sys
import traceback

WORK = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(WORK, "lib"))

import torch  # noqa: E402

from course_embed.tools.grading import probe  # noqa: E402  (the stub's copy)


def _atomic(path, write):
    tmp = f"{path}.{os.getpid()}.tmp"
    write(tmp)
    os.replace(tmp, path)


def _write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


def _save(name, data):
    _atomic(_output(name), lambda tmp: torch.save(data, tmp))


#: Exit status of a gathering child stopped at a limit, by the limit's kind (see :func:`_limit_hit`).
_LIMIT_EXIT = {"memory": 10, "file-size": 11, "disk": 12, "processes": 13}


def _limit_hit(error):
    """The kind of resource limit ``error`` comes from, or ``None``."""
    if isinstance(error, MemoryError) or "can't allocate memory" in str(error):
        return "memory"
    if isinstance(error, OSError) and error.errno in (errno.EFBIG, errno.ENOSPC):
        return "file-size" if error.errno == errno.EFBIG else "disk"
    if isinstance(error, BlockingIOError) or "can't start new thread" in str(error):
        return "processes"  # fork, clone and thread creation fail with EAGAIN at RLIMIT_NPROC
    return None


def _set_limits(limits):
    for name, value in limits.items():
        hard = value + 5 if name == "RLIMIT_CPU" else value  # CPU: SIGXCPU at the limit, SIGKILL 5 s later
        resource.setrlimit(getattr(resource, name), (value, hard))


def _output(name):
    return os.path.join(WORK, "out", f"{name}.pt")


def _gather(question, specs, namespace, seed):
    """Gather every test of ``question`` in a forked child; returns ``(note, limit kind)``, empty when it finished.

    The child removes the question's outputs of an earlier gathering before it runs any of the answer's code, so
    that what is graded is what this one wrote: a gathering that writes nothing (the answer ended the process, even
    with status 0) leaves its tests without outputs, and the note says so. Where no child can start (a limit), the
    earlier outputs stay, as for a notebook stopped at a limit."""
    mine = [spec.name for spec in specs if spec.question == question]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError as error:  # no process left (the process limit), or no memory for one
        return f"{question}: the tests could not start ({type(error).__name__})", _limit_hit(error) or ""
    if pid == 0:
        code = 0
        try:
            for name in mine:
                if os.path.lexists(_output(name)):
                    os.remove(_output(name))  # a folder the notebook put there: OSError, exit code 3
            for spec in specs:
                if spec.question == question:
                    _save(spec.name, probe.gather(spec, namespace, seed))
        except BaseException as error:
            code = _LIMIT_EXIT.get(_limit_hit(error), 3)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    kind = next((k for k, code in _LIMIT_EXIT.items() if os.WIFEXITED(status) and os.WEXITSTATUS(status) == code), "")
    if kind:
        return f"{question}: the tests stopped while running your answer", kind
    if status:
        return f"{question}: the tests stopped while running your answer (exit status {status}): a crash?", ""
    missing = [name for name in mine if not os.path.isfile(_output(name))]
    if missing:
        return f"{question}: the tests wrote no outputs (your answer ended the process?)", ""
    return "", ""


def main():
    seed = int(sys.stdin.readline() or 0)
    with open(os.path.join(WORK, "plan.json")) as f:
        plan = json.load(f)
    specs = []
    for name in sorted(os.listdir(os.path.join(WORK, "probes"))):
        specs += probe.tests_of(probe.load_module(os.path.join(WORK, "probes", name), f"_probes_{name[:-3]}"))
    os.makedirs(os.path.join(WORK, "out"), exist_ok=True)
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance(colors="nocolor")
    notes = []

    def report():
        _atomic(os.path.join(WORK, "out", "cells.json"), lambda tmp: _write_text(tmp, json.dumps(notes)))

    def record(note, kind):
        """Note what went wrong (and ``limit:<kind>`` when a resource limit stopped it); True to stop here."""
        notes.extend(n for n in (note, f"limit:{kind}" if kind else "") if n)
        report()
        return bool(kind)

    questions = sorted({s.question for s in specs})
    _set_limits(plan.get("limits", {}))
    for step in plan["steps"]:
        if "checkpoint" in step:
            note, kind = _gather(step["checkpoint"], specs, shell.user_ns, seed)
        else:
            result = shell.run_cell(step["source"], store_history=False)
            error = result.error_before_exec or result.error_in_exec
            note = f"{step['label']}: {type(error).__name__}: {str(error)[:120]}" if error is not None else ""
            kind = _limit_hit(error) if error is not None else None
        if record(note, kind):
            return 4
    for question in questions:  # the final state wins, as when the notebook is run top to bottom
        if record(*_gather(question, specs, shell.user_ns, seed)):
            return 4
    notes.append("finished")
    report()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)
