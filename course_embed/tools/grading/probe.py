"""The exercises' tests, written once and run in two halves: answers inside, comparisons outside.

A test is a generator function whose parameters name the learner's answers. Before its single ``yield`` it only
*gathers*: every call into the learner's code goes through :func:`run` (which records a value or the exception
raised); the ``yield`` hands over what was gathered and receives it back as :class:`Outcome` objects; after it,
the test *checks* with plain ``assert`` statements::

    @test("q1", points=1)
    def sinusoidal_small(sinusoidal):
        got = yield run(sinusoidal, 6, 4)
        pe = got.tensor("sinusoidal(6, 4)", shape=(6, 4), dtype=torch.float32)
        assert ..., "message the learner sees"

When an instructor grades, the gathering half runs in the sandbox (see :mod:`.sandbox`) with only this module,
torch and the learner's notebook; the outcomes cross as plain data (tensors, numbers, strings) and the checking
half runs in the trusted grader. For ``grader.check`` in the learner's own kernel, :func:`check_public` runs both
halves there at once, instantly. This module imports only torch: it is copied into the sandbox as it is.

What a notebook sends back is its own to choose (a cell can replace :func:`gather`), so the checking half trusts
none of it but the answer's outputs:

* **The check owns its inputs.** The code before the ``yield`` runs on both sides (in the checking pass
  :func:`run` calls nothing), so inputs built there from literals or seeds are rebuilt by the check itself; a
  check never reads an input back from the outcome. Where the answer makes its own weights, the gathering loads
  known ones into it and the check compares the outcome with those it rebuilt.
* **No self-reports.** A flag the notebook computes (``out is w``, ``a.weight is b.weight``) earns nothing; a
  test observes the behaviour instead (the tensor it passed in holds the result; changing one table changes the
  other module's output).
* **Hidden inputs come from a secret.** A hidden test takes a keyword-only ``seed``: the grader derives it from
  the exercise's name and the instructor's grading key (``submission.grading_seed``; the same in every grading
  run, so a notebook graded again gets the same grade), hands it to the gathering as a call argument (never in a
  file the sandbox can read) and gives the checking half the same value, so a table of the inputs under one key
  is worth nothing under another::

      @test("q1", points=1, hidden=True)
      def sinusoidal_other_sizes(sinusoidal, *, seed):
          gen = torch.Generator().manual_seed(seed)
          length, d = between(gen, 1, 300), 2 * between(gen, 1, 40)
          got = yield run(sinusoidal, length, d)
          ...  # compares with course_embed's reference, imported after the yield

* **No reference in a public check.** Learners get ``checks/*.py``; their checks compare with values stored in
  the file for fixed inputs; general references live only after the ``yield`` of hidden tests.
* **Feedback from fixed templates.** Text the notebook chose (an exception's message) reaches feedback only
  neutralised: control characters removed, its first line only, at most :data:`QUOTE_CHARS` characters.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .text import name, quote


class _Mode(threading.local):
    live = True  # False during the grader's checking pass: run() then calls nothing


_MODE = _Mode()
_PACKAGE_DIR = str(Path(__file__).resolve().parents[2])  # course_embed/ (in the sandbox: the stub)


@dataclass
class TestSpec:
    """One test: its question, points, whether learners see it, and the generator function."""

    question: str
    points: float
    hidden: bool
    func: Callable
    name: str = ""

    @property
    def answers(self) -> tuple[str, ...]:
        return self.func.__code__.co_varnames[: self.func.__code__.co_argcount]

    @property
    def seeded(self) -> bool:
        """Whether the test draws its inputs from a secret ``seed`` (a keyword-only parameter)."""
        code = self.func.__code__
        return "seed" in code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]

    def call(self, args: list, seed: int | None):
        """Call the test function with ``args``, and its own seed when it takes one (see :func:`test_seed`)."""
        return self.func(*args, seed=test_seed(seed, self.name)) if self.seeded else self.func(*args)

    def require_seed(self, seed: int | None) -> None:
        """``TypeError`` when the test draws its inputs and ``seed`` is not an int (the grader's mistake)."""
        if self.seeded and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise TypeError(f"test {self.name} draws its inputs from a seed: pass seed=<int>, got {seed!r}")


def test_seed(seed: int, name: str) -> int:
    """The seed of test ``name`` in a grading run whose secret is ``seed`` (one per test, below 2**63)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "big") >> 1


def between(gen: torch.Generator, low: int, high: int) -> int:
    """An integer drawn uniformly from ``[low, high]`` with ``gen`` (sizes and offsets of hidden inputs)."""
    return int(torch.randint(low, high + 1, (1,), generator=gen))


def choose(gen: torch.Generator, options: list | tuple) -> Any:
    """One of ``options``, drawn with ``gen``."""
    return options[between(gen, 0, len(options) - 1)]


def test(question: str, points: float, hidden: bool = False) -> Callable[[Callable], TestSpec]:
    """Decorator: register a gather-then-check generator function as a test of ``question``."""

    def register(func: Callable) -> TestSpec:
        return TestSpec(question, float(points), hidden, func, func.__name__)

    return register


def tests_of(module) -> list[TestSpec]:
    """Every :class:`TestSpec` a spec module defines, in source order."""
    return [v for v in vars(module).values() if isinstance(v, TestSpec)]


def load_module(path: str | Path, name: str):
    """Import a spec module from a file path."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- gathering -------------------------------------------------------------------------------------------------


class Missing:
    """Stands for an answer the notebook never defined (the cell deleted, renamed, or still ``...``)."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise NameError(f"`{self.name}` is not defined: run its answer cell (and keep the name `{self.name}`)")


def _data(value: Any, depth: int = 0) -> Any:
    """``value`` as plain data: tensors (detached CPU copies, with device and layout noted), numbers, strings,
    lists, tuples and dicts of them; anything else becomes ``{"__type__": name}``."""
    if depth > 6:
        return {"__type__": "too deeply nested"}
    if isinstance(value, torch.Tensor):
        t = value.detach()
        info = {
            "__tensor__": True,
            "device": t.device.type,
            "sparse": t.is_sparse,
            "requires_grad": bool(value.requires_grad),
            "is_param": isinstance(value, torch.nn.Parameter),
        }
        if t.is_sparse:
            info.update(
                coalesced=t.is_coalesced(),
                size=list(t.shape),
                dtype=str(t.dtype),
                indices=t._indices().cpu().clone().contiguous(),
                values=t._values().cpu().clone().contiguous(),
            )
        else:
            info["data"] = t.cpu().clone().contiguous()
        return info
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        items = [_data(v, depth + 1) for v in value[:10000]]
        return items if isinstance(value, list) else {"__tuple__": items}
    if isinstance(value, dict):
        return {"__dict__": [[_data(k, depth + 1), _data(v, depth + 1)] for k, v in list(value.items())[:10000]]}
    return {"__type__": type(value).__name__}


def run(fn: Any, *args, **kwargs) -> dict | None:
    """Call ``fn(*args, **kwargs)`` (the learner's code) and record what happened, as data.

    In the grader's checking pass this calls nothing and returns ``None``; the recorded outcome comes back
    through the test's ``yield``.
    """
    if not _MODE.live:
        return None
    try:
        with _no_reference_calls():
            value = fn(*args, **kwargs)
        return {"__outcome__": True, "value": _data(value), "type": type(value).__name__}
    except _ReferenceCall as err:
        return {"__outcome__": True, "raised": "ReferenceCall", "message": str(err)}
    except Exception as err:  # the learner's exception is the outcome
        return {"__outcome__": True, "raised": type(err).__name__, "message": str(err)[:4000]}


class _ReferenceCall(Exception):
    pass


def _reference_call(called: str) -> str:
    name = called if re.fullmatch(r"[A-Za-z_][\w.<>]{0,99}", called) else "code"
    return (
        f"it calls course_embed's {name}; when your instructor grades, course_embed's implementation is not there, "
        f"so write it with torch only"
    )


class _no_reference_calls:
    """In the learner's kernel: fail a call that runs course_embed's own code (grading has no such code)."""

    def __enter__(self):
        self.called, self.previous = [], sys.getprofile()
        if _local_mode[0]:
            sys.setprofile(self._profile)

    def _profile(self, frame, event, arg):
        name = frame.f_code.co_filename
        if (
            event == "call"
            and not self.called
            and os.path.abspath(name).startswith(_PACKAGE_DIR + os.sep)
            and os.path.abspath(name) != os.path.abspath(__file__)
        ):
            self.called.append(f"{Path(name).stem}.{frame.f_code.co_qualname}")

    def __exit__(self, *exc):
        if _local_mode[0]:
            sys.setprofile(self.previous)
            if self.called:
                raise _ReferenceCall(self.called[0])


_local_mode = [False]  # True while check_public runs in the learner's kernel


# --- checking --------------------------------------------------------------------------------------------------


@dataclass
class Tensor:
    """A tensor that crossed from the sandbox: its data (on the CPU) and where it lived."""

    data: torch.Tensor
    device: str
    requires_grad: bool = False
    is_param: bool = False
    coalesced: bool = True
    sparse: bool = False


@dataclass
class Outcome:
    """What one :func:`run` produced: a value, or the exception raised (its type name and message).

    Every text field came from the notebook: the methods below quote it only through :func:`quote` and
    :func:`_name`."""

    value: Any = None
    type: str = ""
    raised: str | None = None
    message: str = ""
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.type = name(self.type)
        self.raised = name(self.raised, "an exception") if self.raised else None
        self.message = quote(self.message)

    def ok(self, label: str) -> Any:
        """The value; ``AssertionError`` saying what was raised instead."""
        if self.raised == "ReferenceCall":
            raise AssertionError(f"{label}: {_reference_call(self.message)}")
        if self.raised == "NameError" and self.message.startswith("`") and "is not defined" in self.message:
            missing = self.message.split("`")[1]
            raise AssertionError(f"`{name(missing, 'an answer')}` is not defined: run its answer cell (keep the name)")
        if self.raised:
            raise AssertionError(f"{label} raised {self.raised}: {self.message}")
        return self.value

    def returned(self) -> str:
        """What the call returned, in a few words (a number's value, a tensor's shape and dtype, else the type)."""
        value = self.value
        if isinstance(value, Tensor):
            kind = "sparse tensor" if value.sparse else "tensor"
            return f"a {kind} of shape {tuple(value.data.shape)} and dtype {value.data.dtype}"
        if value is None:
            return f"a value of type {self.type}" if self.type not in ("", "NoneType") else "None"
        if isinstance(value, (bool, int, float)):
            return f"{name(type(value).__name__)} {repr(value)[:40]}"
        return f"a value of type {self.type}" if self.type else "a value"

    def tensor(self, label: str, shape=None, dtype=None, sparse: bool = False) -> torch.Tensor:
        """The returned tensor (on the CPU; dense unless ``sparse``), checking its shape and dtype when given."""
        value = self.ok(label)
        if value is None:
            raise AssertionError(f"{label} returned None: did you replace the `...` and `return` the result?")
        if not isinstance(value, Tensor):
            raise AssertionError(f"{label} must return a torch tensor, got {self.type}")
        if value.sparse != sparse:
            raise AssertionError(f"{label} must return a {'sparse' if sparse else 'dense'} tensor")
        t = value.data
        if shape is not None and tuple(t.shape) != tuple(shape):
            raise AssertionError(f"{label} must have shape {tuple(shape)}, got {tuple(t.shape)}")
        if dtype is not None and t.dtype != dtype:
            raise AssertionError(f"{label} must return {dtype}, got {t.dtype}")
        return t

    def number(self, label: str, kind: type = float) -> float | int:
        """The returned Python number; a tensor, numpy scalar or bool is refused, in the public and hidden
        checks alike (``.item()`` makes a Python number)."""
        value = self.ok(label)
        if value is None:
            raise AssertionError(f"{label} returned None: did you replace the `...` and `return` the result?")
        good = (
            isinstance(value, int) and not isinstance(value, bool)
            if kind is int
            else isinstance(value, (int, float)) and not isinstance(value, bool)
        )
        if not good:
            raise AssertionError(
                f"{label} must return a Python {kind.__name__}, got {self.type} (use .item() or {kind.__name__}(...))"
            )
        return value

    def raises(self, label: str, error: type) -> str:
        """Check that the call raised ``error`` (or a subclass of it by name); returns the message."""
        if self.raised == error.__name__ or (self.raised and self.raised in _subclass_names(error)):
            return self.message
        if self.raised in (None, ""):
            raise AssertionError(f"{label} must raise {error.__name__}, but it returned {self.returned()}")
        return (
            self.ok(label)
            if self.raised == "ReferenceCall"
            else _fail(f"{label} raised {self.raised} ({self.message}), expected {error.__name__}")
        )


def as_tensor(value: Any, label: str) -> torch.Tensor:
    """The data of a tensor a probe function returned inside a dict or list; ``AssertionError`` otherwise."""
    if isinstance(value, Tensor):
        return value.data
    what = (
        "None (did you replace the `...` and `return` the result?)"
        if value is None
        else value.get("__type__", "not a tensor")
        if isinstance(value, dict)
        else type(value).__name__
    )
    raise AssertionError(f"{label} must return a torch tensor, got {what}")


def _subclass_names(error: type) -> set[str]:
    names, todo = set(), [error]
    while todo:
        for sub in todo.pop().__subclasses__():
            names.add(sub.__name__)
            todo.append(sub)
    return names


def _fail(message: str):
    raise AssertionError(message)


_CHECKING = threading.Lock()


def check(spec: TestSpec, gathered: Any, seed: int | None = None) -> tuple[bool, str]:
    """Run the checking half of ``spec`` on what its gathering half produced; ``(passed, message)``.

    ``seed`` is the grading run's secret, the one the gathering was given. A batch grades submissions in threads,
    and a check may seed torch's global generator to rebuild a reference (``torch.manual_seed(s);
    nn.Embedding(...)``): checks therefore run one at a time, each with its own copy of the generator's state, so
    that no check can reseed another's reference halfway through.
    """
    spec.require_seed(seed)
    if isinstance(gathered, dict) and "__gather_failed__" in gathered:
        return False, _gather_failure(gathered["__gather_failed__"])
    from .restore import Forged, restore  # trusted side only: the sandbox's copy of this module never checks

    try:
        restored = restore(gathered)
    except Forged as err:
        return False, f"the outputs of this test are not what the test gathers ({err})"
    with _CHECKING, torch.random.fork_rng(devices=[]):
        return _check(spec, restored, seed)


def _gather_failure(why: Any) -> str:
    """The fixed sentence for a gathering that produced no outcome (``why``: an exception's type name); anything
    else the notebook wrote there is not shown. (Outputs the grader would not read never reach here:
    :func:`.compare.read_output` says why itself.)"""
    why = why if isinstance(why, str) else ""
    if why and name(why, "") == why:
        return f"the test could not run your answer: it stopped with {why} outside your functions"
    return "not graded: the outputs of this test could not be read"


def _check(spec: TestSpec, gathered: Any, seed: int | None) -> tuple[bool, str]:
    _MODE.live = False
    try:
        gen = spec.call([None] * len(spec.answers), seed)
        next(gen)
        gen.send(gathered)
    except StopIteration:
        return True, ""
    except AssertionError as err:
        return False, str(err) or "assertion failed"
    except Exception as err:  # the answer returned something the check could not use
        return False, f"the outputs could not be checked ({type(err).__name__}): return what the question asks for"
    finally:
        _MODE.live = True
    gen.close()
    return False, "internal: the test yields more than once"


def gather(spec: TestSpec, namespace: dict, seed: int | None = None) -> Any:
    """Run the gathering half of ``spec`` against the learner's ``namespace``; what it yields, as data.

    ``seed`` is the grading run's secret, for tests that draw their inputs (:attr:`TestSpec.seeded`)."""
    spec.require_seed(seed)
    args = [namespace[a] if a in namespace and namespace[a] is not Ellipsis else Missing(a) for a in spec.answers]
    try:
        result = spec.call(args, seed)  # in the sandbox the function stops at its yield and returns
        return next(result) if hasattr(result, "send") else result
    except Exception as err:
        return {"__gather_failed__": type(err).__name__}


def check_public(exercise: str, question: str, **answers) -> None:
    """``grader.check``'s test: run the public tests of ``question`` in the learner's kernel, both halves at once.

    Raises :class:`Feedback` (an ``AssertionError``) with one line per failing test. The tests live in
    ``checks/<exercise>.py`` next to the notebook (or in the repository's ``exercises/checks``).
    """
    candidates = [
        Path("checks") / f"{exercise}.py",
        Path(_PACKAGE_DIR).parent / "exercises" / "checks" / f"{exercise}.py",
    ]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise AssertionError(
            f"cannot find checks/{exercise}.py next to the notebook: open the notebook from the "
            f"exercises folder it came in"
        )
    specs = [s for s in tests_of(load_module(path, f"_checks_{exercise}")) if s.question == question]
    _quiet_otter()
    _local_mode[0] = True
    try:
        failed = [message for spec in specs for passed, message in [check(spec, gather(spec, answers))] if not passed]
    finally:
        _local_mode[0] = False
    if failed:
        raise Feedback("\n".join(failed))


class Feedback(AssertionError):
    """The public tests' verdict, shown to the learner as it is (without otter's "Error at line ..." framing)."""


def _quiet_otter() -> None:
    """Make otter show a :class:`Feedback` as its message alone: otter frames every failure with the line of the
    test file that raised it ("Error at line 3 in test q1: check_public(...)"), which says nothing to a learner."""
    try:
        from otter.test_files.exception_test import ExceptionTestFile
    except ImportError:  # grading, or a kernel without otter
        return
    framed = ExceptionTestFile._generate_error_message
    if getattr(framed, "_course_embed", False):
        return

    def message(self, excp, context=0):
        return str(excp) if isinstance(excp, Feedback) else framed(self, excp, context)

    message._course_embed = True
    ExceptionTestFile._generate_error_message = message
