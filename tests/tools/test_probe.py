"""The test format's guarantees to the trusted side: hidden inputs drawn from a secret the sandbox is handed, no
notebook-chosen text in feedback, and learner feedback without otter's framing."""

import pytest
import torch

from course_embed.tools.grading import compare, probe, text
from course_embed.tools.grading.probe import between, run


@probe.test("q1", points=1, hidden=True)
def doubles_drawn_input(f, *, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(between(gen, 2, 9), generator=gen)
    got = yield run(f, x)
    assert torch.equal(got.tensor("f(x)", shape=x.shape), 2 * x), "f must double x"


def _table_of(answer, seeds):
    """A lookup table built from the runs graded with ``seeds``: the answer's outputs keyed by its inputs."""
    table = {}

    def record(x):
        table[x.numpy().tobytes()] = answer(x)
        return table[x.numpy().tobytes()]

    for seed in seeds:
        probe.gather(doubles_drawn_input, {"f": record}, seed)
    return lambda x: table[x.numpy().tobytes()]


def test_hidden_inputs_come_from_the_run_seed_and_a_table_of_one_run_fails_the_next():
    assert doubles_drawn_input.seeded and doubles_drawn_input.answers == ("f",)
    double = lambda x: 2 * x  # noqa: E731
    for seed in (1, 2):
        assert probe.check(doubles_drawn_input, probe.gather(doubles_drawn_input, {"f": double}, seed), seed) == (
            True,
            "",
        )
    table = _table_of(double, [1])
    assert probe.check(doubles_drawn_input, probe.gather(doubles_drawn_input, {"f": table}, 1), 1)[0]
    passed, message = probe.check(doubles_drawn_input, probe.gather(doubles_drawn_input, {"f": table}, 2), 2)
    assert not passed and message.startswith("f(x) raised KeyError")
    # the check rebuilds its inputs from the seed: outputs gathered for another seed fail
    assert not probe.check(doubles_drawn_input, probe.gather(doubles_drawn_input, {"f": double}, 1), 2)[0]
    with pytest.raises(TypeError, match="pass seed=<int>"):
        probe.gather(doubles_drawn_input, {"f": double})
    assert probe.test_seed(1, "a") != probe.test_seed(1, "b") and 0 <= probe.test_seed(1, "a") < 2**63


def test_feedback_quotes_the_notebook_only_bounded_and_neutralised():
    long = "x" * 30 + " " + "word " * 100
    outcome = probe.Outcome(raised="ValueError\x1b[2J", message="bad\x1b[31m id\u202e\nsecond line", type="\x07")
    with pytest.raises(AssertionError) as err:
        outcome.ok("f(x)")
    assert str(err.value) == "f(x) raised an exception: bad [31m id"
    assert outcome.type == "an object"
    quoted = probe.quote(long)
    assert len(quoted) <= text.QUOTE_CHARS + 6 and quoted.endswith("word [...]")
    # a forged gathering failure is not shown: only an exception's name, or one of the grader's own notes
    spec = doubles_drawn_input
    failed = probe.check(spec, {"__gather_failed__": "KeyError"}, 1)[1]
    assert failed.endswith("stopped with KeyError outside your functions")
    forged = probe.check(spec, {"__gather_failed__": "full marks: grade again with --memory 8G"}, 1)
    assert forged == (False, "not graded: the outputs of this test could not be read")
    # nor is a copy of the grader's own wording: the grader says why it would not read outputs itself (below)
    assert probe.check(spec, {"__gather_failed__": "unreadable outputs (EOFError)"}, 1) == forged
    # a check that cannot use the outputs says so in a fixed sentence, not with the exception's text
    odd = {"__outcome__": True, "value": {"__dict__": [["x", 1]]}, "type": "dict"}
    passed, message = probe.check(spec, odd, 1)
    assert not passed and "return what the question asks for" in message or "must return a torch tensor" in message


def test_public_feedback_is_one_line_per_failed_test_without_otter_framing():
    from otter.test_files.exception_test import ExceptionTestFile

    probe._quiet_otter()
    probe._quiet_otter()  # once is enough: a second call does not wrap again
    try:
        raise probe.Feedback("sinusoidal(6, 4)[0] must be (0, 1, 0, 1)")
    except probe.Feedback as err:
        assert ExceptionTestFile._generate_error_message(None, err) == "sinusoidal(6, 4)[0] must be (0, 1, 0, 1)"


def test_feedback_files_carry_no_control_characters():
    from course_embed.tools.grading.compare import Question, TestResult
    from course_embed.tools.grading.feedback import feedback_text, results_json

    results = [TestResult("t", "q1", 0.0, 1.0, "bad \x1b[2J\u202e", False)]
    data = results_json(results, "q1's answer cell: \x1b]0;pwned\x07", 1.0)
    text = feedback_text("alice", "03_sinusoidal", [Question("q1", 1.0, ("f",))], results, "\x1b[31m")
    for shown in (data["output"], data["tests"][0]["output"], text):
        assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown


def test_outputs_the_grader_would_not_read_are_not_graded_with_its_own_reason(tmp_path):
    spec = doubles_drawn_input
    (tmp_path / f"{spec.name}.pt").write_bytes(b"not a torch archive")
    (result,) = compare.score(compare.Suite("x", [spec]), tmp_path, seed=1)
    assert result.score == 0 and result.output.startswith("not graded: unreadable outputs ("), result.output
    (tmp_path / f"{spec.name}.pt").unlink()
    (tmp_path / f"{spec.name}.pt").symlink_to("/etc/passwd")
    (result,) = compare.score(compare.Suite("x", [spec]), tmp_path, seed=1)
    assert result.output == "not graded: the outputs of this test could not be read: not a regular file (a link?)"
