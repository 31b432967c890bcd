"""The exercises' tests, written once and run in two halves: answers inside, comparisons outside.

A test is a generator function whose parameters name the learner's answers. Before its single ``yield`` it only
*gathers*: every call into the learner's code goes through :func:`run` (which records a value or the exception
raised); the ``yield`` hands over what was gathered and receives it back as :class:`Outcome` objects; after it,
the test *checks* with plain ``assert`` statements and may use ``course_embed``'s reference::

    @test("q1", points=1)
    def sinusoidal_small(sinusoidal):
        got = yield run(sinusoidal, 6, 4)
        pe = got.tensor("sinusoidal(6, 4)", shape=(6, 4), dtype=torch.float32)
        assert ..., "message the learner sees"

When an instructor grades, the gathering half runs in the sandbox (see :mod:`.sandbox`) with only this module,
torch and the learner's notebook; the outcomes cross as plain data (tensors, numbers, strings) and the checking
half runs in the trusted grader. For ``grader.check`` in the learner's own kernel, :func:`check_public` runs both
halves there at once, instantly. This module imports only torch: it is copied into the sandbox as it is.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


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
        return {"__outcome__": True, "raised": type(err).__name__, "message": str(err)[:2000]}


class _ReferenceCall(Exception):
    pass


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
                raise _ReferenceCall(
                    f"it calls course_embed's {self.called[0]}; when your instructor grades, "
                    f"course_embed's implementation is not there, so write it with torch only"
                )


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
    """What one :func:`run` produced: a value, or the exception raised (its type name and message)."""

    value: Any = None
    type: str = ""
    raised: str | None = None
    message: str = ""
    extra: dict = field(default_factory=dict)

    def ok(self, label: str) -> Any:
        """The value; ``AssertionError`` saying what was raised instead."""
        if self.raised == "ReferenceCall":
            raise AssertionError(f"{label}: {self.message}")
        if self.raised == "NameError" and "is not defined" in self.message:
            raise AssertionError(self.message)
        if self.raised:
            raise AssertionError(f"{label} raised {self.raised}: {self.message}")
        return self.value

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
            raise AssertionError(f"{label} must raise {error.__name__}, but it returned")
        return (
            self.ok(label)
            if self.raised == "ReferenceCall"
            else _fail(f"{label} raised {self.raised} ({self.message[:120]}), expected {error.__name__}")
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


def check(spec: TestSpec, gathered: Any) -> tuple[bool, str]:
    """Run the checking half of ``spec`` on what its gathering half produced; ``(passed, message)``.

    A batch grades submissions in threads, and a check may seed torch's global generator to rebuild a reference
    (``torch.manual_seed(s); nn.Embedding(...)``): checks therefore run one at a time, each with its own copy of
    the generator's state, so that no check can reseed another's reference halfway through.
    """
    if isinstance(gathered, dict) and "__gather_failed__" in gathered:
        failed = gathered["__gather_failed__"]
        return False, failed[:2000] if isinstance(failed, str) else "the outputs of this test could not be read"
    from .restore import Forged, restore  # trusted side only: the sandbox's copy of this module never checks

    try:
        restored = restore(gathered)
    except Forged as err:
        return False, f"the outputs of this test are not what the test gathers ({err})"
    with _CHECKING, torch.random.fork_rng(devices=[]):
        return _check(spec, restored)


def _check(spec: TestSpec, gathered: Any) -> tuple[bool, str]:
    _MODE.live = False
    try:
        gen = spec.func(*[None] * len(spec.answers))
        next(gen)
        gen.send(gathered)
    except StopIteration:
        return True, ""
    except AssertionError as err:
        return False, str(err) or "assertion failed"
    except Exception as err:  # the answer returned something the check could not use
        return False, f"{type(err).__name__}: {err}"[:2000]
    finally:
        _MODE.live = True
    gen.close()
    return False, "internal: the test yields more than once"


def gather(spec: TestSpec, namespace: dict) -> Any:
    """Run the gathering half of ``spec`` against the learner's ``namespace``; what it yields, as data."""
    args = [namespace[a] if a in namespace and namespace[a] is not Ellipsis else Missing(a) for a in spec.answers]
    try:
        result = spec.func(*args)  # in the sandbox the function stops at its yield and returns (see strip_checks)
        return next(result) if hasattr(result, "send") else result
    except Exception as err:
        return {"__gather_failed__": f"the test could not run your answer: {type(err).__name__}: {err}"[:2000]}


def check_public(exercise: str, question: str, **answers) -> None:
    """``grader.check``'s test: run the public tests of ``question`` in the learner's kernel, both halves at once.

    Raises ``AssertionError`` with the first failing test's message. The tests live in ``checks/<exercise>.py``
    next to the notebook (or in the repository's ``exercises/checks``).
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
    _local_mode[0] = True
    try:
        for spec in specs:
            passed, message = check(spec, gather(spec, answers))
            if not passed:
                raise AssertionError(message)
    finally:
        _local_mode[0] = False
