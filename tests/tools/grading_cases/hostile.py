"""A batch of exercise 03 mixing honest, broken and hostile submissions, one folder per student.

Each hostile notebook is the student notebook with the solution's answers (so it would earn full marks) and one
extra cell run last that attacks the grader: it forges outputs that reach the trusted side (a sparse tensor with
indices out of range, a stride-0 view, deflate-compressed records, a named pipe, a link to a host file), forges the
runner's notes, fills the output folder with folders, or tries the host's kernel settings and a nested user
namespace, ends the process from its last gathering or with the CPU limit's exit status, or holds unlinked
preallocated files in its outputs folder. What each must score and what its row must (and must not) say is in its
:class:`Hostile` entry; the broken files need no sandbox (unreadable JSON, a zip that cannot be opened, a file name
with an impossible date).
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

from course_embed.tools.grading import confine

from . import NOT_READ, with_answers

#: Python run by an ``atexit`` handler in the sandbox, after the runner has written its last output: ``OUT`` is the
#: output folder. Each replaces what the grader reads with something hostile.
_AT_EXIT = (
    "import atexit, os, torch, zipfile, io\nOUT = '/work/out'\n\ndef attack():\n{body}\n\natexit.register(attack)"
)


def _at_exit(body: str) -> str:
    return _AT_EXIT.format(body="\n".join("    " + line for line in body.strip().splitlines()))


def _forged_outcome(value: str) -> str:
    """Source of a forged outcome of one ``run`` whose value is the tensor description ``value``."""
    return f"{{'__outcome__': True, 'type': 'Tensor', 'value': {value}}}"


_SPARSE = _forged_outcome(
    "{'__tensor__': True, 'device': 'cpu', 'sparse': True, 'requires_grad': False, 'is_param': False, "
    "'coalesced': True, 'size': [4, 4], 'dtype': 'torch.float32', "
    "'indices': torch.tensor([[0, 10**9], [0, 10**9]]), 'values': torch.ones(2)}"
)
_STRIDE0 = _forged_outcome(
    "{'__tensor__': True, 'device': 'cpu', 'sparse': False, 'requires_grad': False, 'is_param': False, "
    "'data': torch.zeros(1).as_strided((2**15, 2**15), (0, 0))}"
)

ATTACKS = {
    # every output of the run replaced by a forged sparse tensor whose indices point far outside its size
    "h01_sparse_indices": _at_exit(
        "for name in os.listdir(OUT):\n"
        "    if name.endswith('.pt'):\n"
        f"        torch.save({_SPARSE}, os.path.join(OUT, name))"
    ),
    # a stride-0 view of one float posing as 2**30 elements
    "h02_stride_zero": _at_exit(
        "for name in os.listdir(OUT):\n"
        "    if name.endswith('.pt'):\n"
        f"        torch.save({_STRIDE0}, os.path.join(OUT, name))"
    ),
    # a record of 68 MB of zeros (above the cap), deflated to a few hundred KB
    "h03_deflate_bomb": _at_exit(
        "buffer = io.BytesIO()\n"
        "torch.save(torch.zeros(17 * 2**20), buffer)\n"
        "with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as plain:\n"
        "    records = [(i, plain.read(i)) for i in plain.infolist()]\n"
        "for name in os.listdir(OUT):\n"
        "    if name.endswith('.pt'):\n"
        "        with zipfile.ZipFile(os.path.join(OUT, name), 'w', zipfile.ZIP_DEFLATED) as bomb:\n"
        "            for info, data in records:\n"
        "                bomb.writestr(info.filename, data, zipfile.ZIP_DEFLATED)"
    ),
    # named pipes and a link to a host file where the outputs and the notes should be
    "h04_fifo_and_links": _at_exit(
        "names = [n for n in os.listdir(OUT) if n.endswith('.pt')]\n"
        "for i, name in enumerate(names):\n"
        "    os.remove(os.path.join(OUT, name))\n"
        "    if i % 2:\n"
        "        os.mkfifo(os.path.join(OUT, name))\n"
        "    else:\n"
        "        os.symlink('/etc/passwd', os.path.join(OUT, name))\n"
        "os.remove(os.path.join(OUT, 'cells.json'))\n"
        "os.mkfifo(os.path.join(OUT, 'cells.json'))"
    ),
    # the notes forged: a thousand of them, terminal escapes, a formula, a forged limit and its advice
    "h05_forged_notes": _at_exit(
        "import json\n"
        "notes = ['=HYPERLINK(\"http://x\")\\x1b[2J\\x1b[8m grade again with --memory 64G'] * 1000\n"
        "with open(os.path.join(OUT, 'cells.json'), 'w') as f:\n"
        "    json.dump(notes + ['limit:memory'], f)"
    ),
    # 5000 folders in the output folder (each an inode and a block on the host's disk)
    "h06_many_folders": "import os, time\nfor i in range(5000):\n    os.mkdir(f'/work/out/d{i}')\ntime.sleep(30)",
    # two processes of 1.1 GB each, under the address-space limit of each (--memory 2G) but not under their sum
    "h08_memory_sum": (
        "import os, time\nchildren = []\nfor _ in range(2):\n    pid = os.fork()\n    if pid == 0:\n"
        "        block = b'x' * (1100 * 2**20)\n        time.sleep(5)\n        os._exit(0)\n"
        "    children.append(pid)\nfor pid in children:\n    os.waitpid(pid, 0)"
    ),
    # threads (small stacks, so that the address space is not what stops them) up to the process limit (64):
    # the runner's own fork for the last gathering then fails
    "h09_process_limit": (
        "import threading, time\nthreading.stack_size(2**16)\nfor _ in range(80):\n    try:\n"
        "        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
        "    except RuntimeError:\n        break"
    ),
    # the final version of q3's answer ends the process, with status 0, while the last gathering runs it: what
    # the q3 checkpoint gathered before must not be graded in its place
    "h10_stale_checkpoint": "import os\n\ndef first_rise(d_model):\n    os._exit(0)",
    # the exit status the CPU time limit gives (128 + SIGXCPU), given by the notebook after a few seconds of CPU
    "h11_exit_152": "import os\nos._exit(152)",
    # files unlinked while open and preallocated in the outputs folder, 600 MiB in all (--disk is 512M): a tmpfs of
    # that size (grading as root) refuses the third, so the host's disk never holds them
    "h12_unlinked_fallocate": (
        "import os\nheld = []\nfor i in range(3):\n"
        "    fd = os.open(f'/work/out/held{i}', os.O_CREAT | os.O_RDWR, 0o600)\n"
        "    os.unlink(f'/work/out/held{i}')\n    os.posix_fallocate(fd, 0, 200 * 2**20)\n    held.append(fd)"
    ),
    # the host's kernel settings, a nested user namespace with a tmpfs of its own, the read-only folders
    "h07_escape": (
        "import ctypes, os\n"
        "tried = []\n"
        "try:\n"
        "    open('/proc/sys/kernel/printk_ratelimit_burst', 'r+').close()\n"
        "    tried.append('sysctl')\n"
        "except OSError:\n"
        "    pass\n"
        "if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0:\n"
        "    tried.append('userns')\n"
        "for where in ('/x', '/dev/x', '/usr/x'):\n"
        "    try:\n"
        "        open(where, 'w').close()\n"
        "        tried.append(where)\n"
        "    except OSError:\n"
        "        pass\n"
        "if os.getuid() == 0:\n"
        "    tried.append('root')\n"
        "assert not tried, f'ESCAPED: {tried}'"
    ),
}


@dataclass
class Hostile:
    """One submission of the mixed batch: where it goes, what it must score (q1, q2, q3, q4; ``None`` where its
    row's question cells are empty, as for a file that cannot be read), what its error must contain and must not
    contain."""

    path: str
    scores: tuple[float | None, float | None, float | None, float | None]
    error: str = ""
    never: tuple[str, ...] = ("\x1b",)


def build_mixed_batch(folder: Path, student_nb, solution: list[str], memory_cgroup: bool) -> list[Hostile]:
    """Write the mixed batch into ``folder``; return what each submission must score (``memory_cgroup``: whether
    the grader can bound a sandbox's memory with a cgroup here)."""
    good = with_answers(student_nb, dict(enumerate(solution)))
    cases = []
    probe_cgroup = confine.MemoryCgroup(2**30, f"course-embed-cpu-probe-{os.getpid()}")
    counted = probe_cgroup.cpu_seconds() is not None  # a cgroup counts the sandbox's CPU time here
    probe_cgroup.remove()

    def put(rel: str, nb, case: Hostile):
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
        cases.append(case)

    def attacked(attack: str):
        nb = nbformat.reads(nbformat.writes(good), as_version=4)
        nb.cells.append(new_code_cell(attack))
        return nb

    put("honest1/03_sinusoidal.ipynb", good, Hostile("honest1/03_sinusoidal.ipynb", (4, 3, 2, 3)))
    put("honest2/03_sinusoidal.ipynb", good, Hostile("honest2/03_sinusoidal.ipynb", (4, 3, 2, 3)))
    expected = {
        "h01_sparse_indices": Hostile("", (0, 0, 0, 0)),
        "h02_stride_zero": Hostile("", (0, 0, 0, 0)),
        "h03_deflate_bomb": Hostile("", (0, 0, 0, 0)),
        "h04_fifo_and_links": Hostile("", (0, 0, 0, 0), "", ("\x1b", "root:x:0:0")),
        "h05_forged_notes": Hostile("", (4, 3, 2, 3), "(more than 20 notes; the rest left out)"),
        "h06_many_folders": Hostile("", (4, 3, 2, 3), "more than 2000 files and folders"),
        "h07_escape": Hostile("", (4, 3, 2, 3), "", ("\x1b", "ESCAPED")),
        "h09_process_limit": Hostile(
            "", (4, 3, 2, 3), "reported, stopped at the sandbox's process limit (64 processes"
        ),
        # q3's answer ends the last gathering's child, which goes on to q4: only q3's points are lost
        "h10_stale_checkpoint": Hostile("", (4, 3, 0, 3), "q3: the tests wrote no outputs"),
        "h11_exit_152": Hostile(
            "",
            (4, 3, 2, 3),
            "below the CPU time limit (600 s per process), so no limit stopped it" if counted else "152",
        ),
        "h12_unlinked_fallocate": Hostile(
            "", (4, 3, 2, 3), "stopped at the sandbox's disk limit (512 MiB" if os.geteuid() == 0 else ""
        ),
        "h08_memory_sum": Hostile(
            "", (4, 3, 2, 3), "memory limit (2 GiB for all its processes together)" if memory_cgroup else ""
        ),
    }
    for name, attack in ATTACKS.items():
        rel = f"{name}/03_sinusoidal.ipynb"
        case = expected[name]
        put(rel, attacked(attack), Hostile(rel, case.scores, case.error, case.never))
    # broken files: each a row with a clear error, none stops the batch
    broken = {
        "b01_huge_integer/03_sinusoidal.ipynb": ('{"cells": [], "nbformat": ' + "9" * 5000 + "}", "not a notebook"),
        "b02_deep_nesting/03_sinusoidal.ipynb": ("[" * 100_000 + "]" * 100_000, "not a notebook"),
        "b03_otter_string/03_sinusoidal.ipynb": (
            '{"cells": [], "nbformat": 4, "nbformat_minor": 5, "metadata": {"otter": "x"}}',
            "not an exercise notebook",
        ),
        "b04_bad_stamp/03_sinusoidal_2026_13_45T99_99_99_000000.ipynb": (nbformat.writes(good), ""),
    }
    for rel, (text, error) in broken.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
        cases.append(Hostile(rel, (4, 3, 2, 3) if not error else NOT_READ, error))
    (folder / "b05_encrypted").mkdir()
    with zipfile.ZipFile(folder / "b05_encrypted" / "03_sinusoidal.zip", "w") as zf:
        zf.writestr("03_sinusoidal.ipynb", nbformat.writes(good))
    data = bytearray((folder / "b05_encrypted" / "03_sinusoidal.zip").read_bytes())
    for header in (b"PK\x03\x04", b"PK\x01\x02"):  # set the "encrypted" flag in both headers
        at = data.index(header)
        flags = at + (6 if header == b"PK\x03\x04" else 8)
        data[flags] |= 1
    (folder / "b05_encrypted" / "03_sinusoidal.zip").write_bytes(bytes(data))
    cases.append(Hostile("b05_encrypted/03_sinusoidal.zip", NOT_READ, "cannot read the file"))
    return cases
