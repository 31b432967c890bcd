"""What lets others adopt, cite and contribute to the course: the two licences, CITATION.cff, CONTRIBUTING.md, the
pre-commit configuration and the GitHub Actions workflow for forks, each checked against what it describes.

The schemas are check-jsonschema's built-in copies (the Citation File Format 1.2.0 and GitHub's workflow schema from
SchemaStore); the checks run with every HTTP(S) request sent to a closed port, so they work offline.
"""

import argparse
import importlib
import importlib.metadata
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
CC_BY = "https://creativecommons.org/licenses/by/4.0/"
# A proxy on a closed port: a validator that tried to download a schema would fail instead.
OFFLINE = {
    **os.environ,
    **dict.fromkeys(["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"], "http://127.0.0.1:9"),
    "NO_PROXY": "",
    "no_proxy": "",
}


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _pins() -> dict[str, str]:
    """requirements.txt's exact pins, name -> version."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if m := re.match(r"([A-Za-z0-9_.-]+)==([^\s#;]+)", line):
            pins[m.group(1).lower()] = m.group(2)
    return pins


def _validate(schema: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
        capture_output=True,
        text=True,
        env=OFFLINE,
        timeout=120,
    )


def readme_command(marker: str) -> str:
    """The line after the README's `<!-- MARKER` line, inside the code block that follows (as .ci/run reads it)."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if f"<!-- {marker}" in line)
    fence = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    return lines[fence + 1].strip()


def readme_test_command() -> str:
    return readme_command("test command")


def _workflow() -> dict:
    workflow = _yaml(WORKFLOW)
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as true
    return workflow


def _runs(job: dict) -> list[str]:
    """Every command line a job runs."""
    return [line.strip() for step in job["steps"] for line in step.get("run", "").splitlines() if line.strip()]


def _uses(job: dict, action: str) -> list[dict]:
    return [step for step in job["steps"] if step.get("uses", "").split("@")[0] == action]


# --- licences ------------------------------------------------------------------------------------------------------


def test_code_is_mit_and_content_cc_by_4():
    mit = (ROOT / "LICENSE").read_text()
    assert mit.startswith("MIT License") and "Permission is hereby granted, free of charge" in mit
    assert _pyproject()["project"]["license"] == {"text": "MIT"}
    content = (ROOT / "LICENSE-CONTENT").read_text()
    assert "SPDX-License-Identifier: CC-BY-4.0" in content
    assert f"{CC_BY}legalcode" in content and "Creative Commons Attribution 4.0 International" in content
    citation = _yaml(ROOT / "CITATION.cff")
    assert sorted(citation["license"]) == ["CC-BY-4.0", "MIT"]


def test_readme_names_the_licences_the_citation_and_the_guide():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in ("LICENSE", "LICENSE-CONTENT", "CITATION.cff", "CONTRIBUTING.md", ".github/workflows/ci.yml"):
        assert f"`{name}`" in readme, f"the README does not name {name}"
        assert (ROOT / name).is_file(), f"the README names {name}, which does not exist"
    adopting = readme.split("## Adopting the course", 1)[-1].split("\n## ", 1)[0]
    assert "repository" in _yaml(ROOT / "_config.yml") and "`repository.url`" in adopting, (
        "the README's 'Adopting the course' section must tell instructors to set repository.url in _config.yml"
    )


def test_site_footer_names_both_licences():
    from jupyter_book.config import validate_yaml

    config = _yaml(ROOT / "_config.yml")
    validate_yaml(config, raise_on_errors=True)  # Jupyter Book's own schema: a misplaced key fails here
    footer = config["html"]["extra_footer"]
    for needle in ("<code>LICENSE</code>", "<code>LICENSE-CONTENT</code>", f'href="{CC_BY}"', "MIT", "CITATION.cff"):
        assert needle in footer, f"the site's footer (html.extra_footer in _config.yml) lacks {needle}"


def test_every_built_page_shows_the_licence_footer(built_site):
    assert built_site.returncode == 0, built_site.log[-3000:]
    toc = _yaml(ROOT / "_toc.yml")
    entries = [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]
    assert "book/cite" in entries
    for entry in entries:
        page = (built_site.html / f"{entry}.html").read_text(encoding="utf-8")
        assert '<div class="extra_footer">' in page and "LICENSE-CONTENT" in page, f"{entry}: no licence footer"


# --- citation ------------------------------------------------------------------------------------------------------


def test_citation_file_validates_offline(tmp_path):
    result = _validate("vendor.citation-file-format", ROOT / "CITATION.cff")
    assert result.returncode == 0, result.stdout + result.stderr
    citation = _yaml(ROOT / "CITATION.cff")
    assert citation["cff-version"] == "1.2.0"
    broken = tmp_path / "CITATION.cff"  # the validator can fail: a record without authors is invalid
    broken.write_text(yaml.safe_dump({k: v for k, v in citation.items() if k != "authors"}))
    result = _validate("vendor.citation-file-format", broken)
    assert result.returncode != 0 and "authors" in result.stdout, result.stdout + result.stderr


def test_citation_matches_the_package_the_site_and_the_cite_page():
    citation = _yaml(ROOT / "CITATION.cff")
    assert citation["version"] == _pyproject()["project"]["version"]
    url = _yaml(ROOT / "_config.yml")["repository"]["url"]  # empty until the course has a public repository
    assert citation.get("repository-code", "") == url
    page = (ROOT / "book" / "cite.md").read_text(encoding="utf-8")
    bibtex = page.split("```bibtex", 1)[1].split("```", 1)[0]
    fields = {"version": citation["version"], "url": url}
    for field, value in fields.items():
        if value:
            assert re.search(rf"\b{field}\s*=\s*\{{{re.escape(value)}\}}", bibtex), f"cite.md's BibTeX: {field}"
        else:
            assert not re.search(rf"\b{field}\s*=", bibtex), f"cite.md's BibTeX has a {field} but _config.yml has none"
    assert citation["title"].replace("_", r"\_") in " ".join(bibtex.split())
    assert all(author["name"] in page for author in citation["authors"])
    for line in ("CITATION.cff", "LICENSE-CONTENT", "`LICENSE`", CC_BY):
        assert line in page, f"book/cite.md does not mention {line}"


# --- contributor's guide -------------------------------------------------------------------------------------------

COMMAND = re.compile(r"(course-embed|python3 -m|jupyter-book|pre-commit)\s")


def guide_commands() -> list[str]:
    """The commands CONTRIBUTING.md names: the lines of its bash blocks (split at &&) and its inline code spans."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            found += [part.strip() for part in line.split(" #")[0].split("&&")]
    found += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    found = [re.sub(r"^([A-Z_]+=\S+\s+)+", "", c) for c in found]  # `VAR=value command`: check the command
    return [c for c in found if COMMAND.match(c + " ")]


def _cli():
    """The module `course-embed` runs, from pyproject.toml's console script (course_embed.tools.cli)."""
    return importlib.import_module(_pyproject()["project"]["scripts"]["course-embed"].split(":")[0])


def _check_cli(parser: argparse.ArgumentParser, args: list[str], command: str) -> str:
    """Parse ``args`` as the CLI would, without running anything; return the subcommand."""
    try:
        return parser.parse_args(args).command
    except (SystemExit, argparse.ArgumentError) as error:  # argparse prints what it rejected (captured below)
        reason = error if isinstance(error, argparse.ArgumentError) else "argparse's message is in the captured stderr"
        pytest.fail(f"CONTRIBUTING.md names `{command}`, which the CLI rejects ({reason})")


def test_contributing_names_only_commands_that_exist():
    cli = _cli()
    commands = guide_commands()
    subcommands = set()
    for command in commands:
        words = shlex.split(command)
        if words[0] == "course-embed":
            if len(words) > 1:  # a bare `course-embed` names the script
                subcommands.add(_check_cli(cli.build_parser(), words[1:], command))
        elif words[0] == "jupyter-book":
            assert importlib.util.find_spec("jupyter_book") and words[1] == "build", command
        elif words[0] == "pre-commit":  # installed by the contributor (the guide says how), not a requirement
            assert words[1] in {"install", "run"} and (ROOT / ".pre-commit-config.yaml").is_file(), command
            assert "pip install pre-commit" in (ROOT / "CONTRIBUTING.md").read_text(), "say how to install pre-commit"
        else:  # python3 -m MODULE ...
            module, args = words[2], words[3:]
            if module == cli.__name__:
                if args:
                    subcommands.add(_check_cli(cli.build_parser(), args, command))
                continue
            assert importlib.util.find_spec(module), f"CONTRIBUTING.md names `{command}`: no module {module}"
            if module == "pytest":
                takes_value = {"-k", "-m", "-n"}
                paths = [a for i, a in enumerate(args) if not a.startswith("-") and args[i - 1] not in takes_value]
                missing = [p for p in paths if not (ROOT / p).exists()]
                assert not missing, f"CONTRIBUTING.md names `{command}`: no {missing}"
            if module == "pip" and "-r" in args:
                assert (ROOT / args[args.index("-r") + 1]).is_file(), command
    assert len(commands) >= 10, f"found only {commands} in CONTRIBUTING.md: has its format changed?"
    missing = {"execute", "status", "exercises"} - subcommands
    assert not missing, f"CONTRIBUTING.md must say how to regenerate outputs, status and exercises: {missing}"


def test_guide_command_extraction_catches_a_wrong_command():
    parser = _cli().build_parser()
    assert _check_cli(parser, ["exercises", "--check"], "x") == "exercises"
    with pytest.raises(pytest.fail.Exception):
        _check_cli(parser, ["exercise", "--check"], "course-embed exercise --check")
    with pytest.raises(pytest.fail.Exception):
        _check_cli(parser, ["status", "--no-such-flag"], "course-embed status --no-such-flag")


# --- linting --------------------------------------------------------------------------------------------------------


def test_linters_are_pinned_and_installed_at_their_pins():
    pins = _pins()
    for name in ("ruff", "check-jsonschema"):
        assert name in pins, f"pin {name} in requirements.txt"
        assert importlib.metadata.version(name) == pins[name], f"{name} {importlib.metadata.version(name)} installed"


def test_pre_commit_runs_the_pinned_ruff_and_never_strips_notebooks():
    config = _yaml(ROOT / ".pre-commit-config.yaml")
    (ruff,) = [r for r in config["repos"] if r["repo"] == "https://github.com/astral-sh/ruff-pre-commit"]
    assert ruff["rev"] == f"v{_pins()['ruff']}", "keep the hook's ruff at requirements.txt's pin"
    assert {h["id"] for h in ruff["hooks"]} == {"ruff-check", "ruff-format"}
    assert all("jupyter" not in h.get("types_or", ["jupyter"]) for h in ruff["hooks"]), "notebooks are not linted"
    hooks = [h["id"] for r in config["repos"] for h in r["hooks"]]
    assert not [h for h in hooks if "nbstripout" in h or "strip" in h], "notebooks keep their outputs"


def test_ruff_configuration():
    ruff = _pyproject()["tool"]["ruff"]
    assert ruff["line-length"] == 120 and ruff["target-version"] == "py311"
    assert set(ruff["lint"]["select"]) == {"E", "F", "W", "I", "B", "UP", "SIM"}
    assert {"*.ipynb", "_build", "exercises"} <= set(ruff["extend-exclude"])


# --- the workflow for forks ----------------------------------------------------------------------------------------


def test_workflow_validates_offline(tmp_path):
    result = _validate("vendor.github-workflows", WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "ci.yml"  # a typo that GitHub would reject fails here too
    broken.write_text(WORKFLOW.read_text().replace("runs-on: ubuntu", "runs_on: ubuntu"))
    assert _validate("vendor.github-workflows", broken).returncode != 0


def test_workflow_runs_the_readme_commands():
    job = _workflow()["jobs"]["test"]
    runs = _runs(job)
    install, test = readme_command("install command"), readme_test_command()
    assert install in runs, f"the workflow must run the README's install command {install!r}"
    assert test in runs, f"the workflow must run the README's test command {test!r}"
    assert runs.index(install) < runs.index(test)
    (python,) = _uses(job, "actions/setup-python")
    requires = _pyproject()["project"]["requires-python"]
    assert python["with"]["cache"] == "pip" and requires == f">={python['with']['python-version']}"


def test_workflow_runs_the_kernel_check_after_the_tests():
    runs = _runs(_workflow()["jobs"]["test"])
    check = readme_command("kernel check command")
    assert check.startswith("ATEN_CPU_CAPABILITY=") and "pytest book/" in check, check
    assert check in runs, f"the workflow must run the README's kernel check {check!r}"
    assert runs.index(readme_test_command()) < runs.index(check)


def test_ci_runs_the_readme_commands_in_a_fresh_venv_outside_the_repository(tmp_path):
    """.ci/run, run with stand-in commands: a venv made with `python3 -m venv` outside the checkout, its python3
    first on PATH for each of the README's three commands, in order; then the loaded run beside two busy processes,
    which end with the script."""
    fake = tmp_path / "r"
    (fake / ".ci").mkdir(parents=True)
    log = tmp_path / "log"
    script = (ROOT / ".ci" / "run").read_text()
    loaded = 'loaded_run="timeout 2700 python3 -m pytest tests/tools/test_grading.py tests/tools/test_exercises.py"'
    assert script.count(loaded) == 1, "the loaded run of the grading and exercise tests is gone from .ci/run"
    stand_in = f'for pid in "${{busy_pids[@]}}"; do kill -0 "$pid" && echo busy "$pid"; done >> {log}'
    (fake / ".ci" / "run").write_text(script.replace(loaded, f"loaded_run={shlex.quote(stand_in)}"))
    readme = (ROOT / "README.md").read_text()
    for marker, name in (("install command", "install"), ("test command", "test"), ("kernel check command", "check")):
        readme = readme.replace(readme_command(marker), f'echo {name} "$(command -v python3)" >> {log}', 1)
    (fake / "README.md").write_text(readme)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV",)}
    env["TMPDIR"] = str(tmp_path)
    # `python3 -m venv` installs pip: seconds when quiet, minutes on a machine busy enough to stand in for a CI runner
    proc = subprocess.run(["bash", str(fake / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line.split() for line in log.read_text().splitlines()]
    busy = [int(pid) for name, pid in lines if name == "busy"]
    assert len(busy) == 2, f"the grading and exercise tests ran again beside {len(busy)} busy processes, not 2"
    for pid in busy:  # ended with the script
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    lines = [line for line in lines if line[0] != "busy"]
    assert [name for name, _ in lines] == ["install", "test", "check"]
    pythons = {Path(python) for _, python in lines}
    assert len(pythons) == 1, pythons
    (python,) = pythons
    venv = python.parent.parent
    assert (venv / "pyvenv.cfg").is_file(), f"{python} is not a virtual environment's python3"
    assert fake not in venv.parents and ROOT not in venv.parents, f"the venv {venv} is inside the repository"


def test_workflow_caches_site_assets_and_keeps_the_site_and_screenshots(monkeypatch):
    job = _workflow()["jobs"]["test"]
    from course_embed.tools import assets

    monkeypatch.delenv("COURSE_EMBED_ASSET_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    (cache,) = _uses(job, "actions/cache")
    assert Path(os.path.expanduser(cache["with"]["path"])) == assets.asset_cache()
    kept = {step["with"]["path"]: step.get("if") for step in _uses(job, "actions/upload-artifact")}
    assert kept == {"_build/html": "always()", "_build/screenshots": "always()"}
    assert any('ROOT / "_build" / "screenshots"' in p.read_text() for p in ROOT.glob("tests/**/test_site.py")), (
        "the browser test no longer writes its screenshots to _build/screenshots"
    )


def test_gpu_job_is_optional_and_runs_the_cuda_tests():
    workflow = _workflow()
    job = workflow["jobs"]["gpu"]
    gpu_input = workflow["on"]["workflow_dispatch"]["inputs"]["gpu"]
    assert gpu_input["type"] == "boolean" and gpu_input["default"] is False
    assert "workflow_dispatch" in job["if"] and "inputs.gpu" in job["if"]
    assert set(job["runs-on"]) == {"self-hosted", "gpu"}
    assert "python3 -m pytest tests -k cuda" in _runs(job)
    assert any(m.startswith("cuda:") for m in _pyproject()["tool"]["pytest"]["ini_options"]["markers"])
