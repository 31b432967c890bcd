"""Train chapter 2's tiny models and write their accuracies and loss curves to ``book/02_scaling_runs.json``.

    python3 scripts/chapter2_runs.py              # a few minutes on one core
    python3 scripts/chapter2_runs.py out.json     # the same runs, written elsewhere

Every setting is trained from seeds 0-11, and the tying controls again from seeds 12-23, with
:func:`course_embed.lab.tiny_lm.train_reverse` (one thread, so the numbers do not depend on the core count).
The chapter prints these numbers, and ``tests/lab/test_tiny_lm.py`` re-runs every group and checks each mean within
its tolerance, whichever kernels the CPU picks.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from course_embed.lab import tiny_lm
from course_embed.lab.tiny_lm import Setting

SEEDS = list(range(12))
R = math.sqrt(32)  # PE x sqrt(32): the token/position ratio of N(0, 1) x sqrt(d) back to sqrt(2) at d = 32
COOL = (32 + 1 / 2) / (1 + 1 / 2)  # |x|^2 per entry, N(0, 1) x sqrt(d) over N(0, 1): the scores' growth
TAU = math.sqrt((1 + 32 / 2) / 1.5)  # the tied design's own-row logit (4.6) down to the small table's (1.4)

D2L = Setting("normal", True, tied=False)  # d2l.ai: N(0, 1) x sqrt(d), untied
MAIN = [
    # d2l.ai's combination, the same without the factor, and the controls that separate its two effects
    D2L,
    Setting("normal", False, tied=False),
    Setting("normal", True, tied=False, pe_scale=R),
    Setting("normal", True, tied=False, pre_norm=True),
    Setting("normal", True, tied=False, cool=COOL),
    Setting("normal", True, tied=False, pre_norm=True, pe_scale=R),
    Setting("normal", True, tied=False, cool=COOL, pe_scale=R),
    # the intended design (scaled normal x sqrt(d), tied) and the controls on tying
    Setting("scaled_normal", True),
    Setting("scaled_normal", False),
    Setting("scaled_normal", True, tied=False),
    Setting("scaled_normal", False, tied=False),
    Setting("scaled_normal", True, tied=False, copy_head=True),
    Setting("scaled_normal", False, tied=False, copy_head=True),
    Setting("scaled_normal", True, tau=TAU),
    Setting("scaled_normal", True, tied=False, tau=TAU),
    Setting("scaled_normal", False, tau=TAU),
    # the other tied combinations
    Setting("normal", False),
    Setting("normal", True),
    Setting("xavier_uniform", False),
    Setting("xavier_uniform", True),
    Setting("scaled_normal", True, pre_norm=True),
    # untied, the head drawn anew from the table's own init: the copy's scale without the copy
    Setting("scaled_normal", True, tied=False, head_like_table=True),
]
# the tying controls again on new seeds: do their effects replicate?
TYING = [MAIN[i] for i in (7, 9, 21, 11, 13, 14, 8, 12)]
LONG = [D2L, MAIN[2], MAIN[3], MAIN[4], Setting("scaled_normal", True)]
GROUPS = {  # name: (steps, lr, settings)
    "150 steps, lr 1e-2": (150, 1e-2, MAIN),
    "150 steps, lr 3e-3": (150, 3e-3, [D2L]),
    "150 steps, lr 3e-2": (150, 3e-2, [D2L]),
    "1200 steps, lr 1e-2": (1200, 1e-2, LONG),
    "150 steps, lr 1e-2, seeds 12-23": (150, 1e-2, TYING),
}
SEEDS_OF = {"150 steps, lr 1e-2, seeds 12-23": list(range(12, 24))}


def main(out: Path) -> None:
    groups = {}
    for name, (steps, lr, settings) in GROUPS.items():
        start = time.perf_counter()
        every = 25 if steps <= 150 else 100
        runs = tiny_lm.train_reverse(settings, SEEDS_OF.get(name, SEEDS), steps=steps, lr=lr, every=every)
        groups[name] = (steps, lr, runs)
        print(f"{name}: {len(runs)} runs, {time.perf_counter() - start:.0f} s", file=sys.stderr)
    tiny_lm.write_record(out, groups)


RECORD = Path(__file__).resolve().parents[1] / "book" / "02_scaling_runs.json"

if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else RECORD)
