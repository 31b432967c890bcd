"""Graded exercises: building them, and grading submissions that cannot cheat the grader.

* :mod:`.assign`: student notebooks from ``exercises/source`` (``otter assign``), byte-reproducible.
* :mod:`.probe`: the test format: gather the answers' outputs, then check them; ``grader.check`` runs both halves
  in the learner's kernel.
* :mod:`.sandbox` and :mod:`.runner`: a submission runs in bubblewrap, without network or the repository, in the
  grader's own Python environment; it only produces outputs, as data. :mod:`.confine`: no host privileges (an
  unprivileged user id when grading as root, no nested user namespaces), and memory and CPU cgroups where they can
  be made.
* :mod:`.compare` and :mod:`.restore`: the outputs read and validated as untrusted data, and the trusted checks, run
  outside the sandbox, in a process per submission.
* :mod:`.notebook`: a submitted file read and planned in a limited child process, never in the grader's.
* :mod:`.submission`, :mod:`.gradebook`, :mod:`.batch`: one submission, the gradebook, a batch.
* :mod:`.feedback`: Gradescope ``results.json`` and a readable feedback file per submission.
* :mod:`.release`: a copy of the course for learners, without solutions or hidden tests.

Library code never prints; the ``course-embed`` command does.
"""

from .assign import EXERCISES, Assigned, Exercise, assign, find_exercises, get_exercise, is_stale, regenerate
from .compare import Question, Suite, TestResult, load_suite
from .notebook import ANSWER_TAG, notebook_exercise, read_submission
from .sandbox import SandboxUnavailable, require_bwrap

__all__ = [
    "ANSWER_TAG",
    "EXERCISES",
    "Assigned",
    "Exercise",
    "Question",
    "SandboxUnavailable",
    "Suite",
    "TestResult",
    "assign",
    "find_exercises",
    "get_exercise",
    "is_stale",
    "load_suite",
    "notebook_exercise",
    "read_submission",
    "regenerate",
    "require_bwrap",
]
