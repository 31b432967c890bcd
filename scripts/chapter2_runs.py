"""Train chapter 2's tiny models and write their accuracies and loss curves to ``book/02_scaling_runs.json``.

    python3 scripts/chapter2_runs.py              # a few minutes on one core
    python3 scripts/chapter2_runs.py out.json     # the same runs, written elsewhere

Every setting is trained from seeds 0-11 (two of them also from seeds 12-29) with
:func:`course_embed.lab.tiny_lm.train_reverse` (one thread, so the numbers do not depend on the core count).
The chapter prints these numbers, and ``tests/lab/test_tiny_lm.py`` re-runs every group and checks each mean within
its tolerance, whichever kernels the CPU picks.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from course_embed.lab import tiny_lm
from course_embed.lab.tiny_lm import Setting

SEEDS = list(range(12))
GAIN = (32 + 1 / 2) / (1 + 1 / 2)  # mean x^2, N(0, 1) x sqrt(d) over N(0, 1): the scores' growth, 21.7

D2L = Setting("normal", True, tied=False)  # A, d2l.ai: N(0, 1) x sqrt(d), untied
NO_FACTOR = Setting("normal", False, tied=False)  # B: A without the factor
# the intended design's input layer (scaled normal x sqrt(d)), untied like A, and the same table without the factor
INTENDED = [Setting("scaled_normal", True, tied=False), Setting("scaled_normal", False, tied=False)]
PRE_LN = Setting("normal", True, tied=False, pre_norm=True)  # C: pre-LN, no saturation, the position drowned
# C's controls: the same pre-LN model without the factor (B in pre-LN), and with the position restored (PE x sqrt(32))
PRE_LN_CONTROLS = [
    Setting("normal", False, tied=False, pre_norm=True),
    Setting("normal", True, tied=False, pre_norm=True, pe_scale=32**0.5),
]
HOT = Setting("normal", False, tied=False, score_gain=GAIN)  # D: B with scores x 21.7
COOL = Setting("normal", True, tied=False, qk_init=GAIN**-0.5)  # E: A with a cooled start only
# step-matched: the query and key projections' Adam learning rate divided by the growth of the score steps
# (E: W_q, W_k are sqrt(GAIN) times smaller, so a step of one, acting through the other, grows by sqrt(GAIN) only)
MATCHED = [
    Setting("normal", True, tied=False, qk_lr=GAIN),  # A
    Setting("normal", False, tied=False, score_gain=GAIN, qk_lr=GAIN),  # D
    Setting("normal", True, tied=False, qk_init=GAIN**-0.5, qk_lr=GAIN**0.5),  # E
]
# the two effects pulled apart further: large score steps with the position visible and an unsaturated start
# (F: D with W_q, W_k drawn sqrt(GAIN) times smaller, as E is; B with W_q, W_k at Adam's rate x sqrt(GAIN), x 2, x 3),
# and G: A's large inputs with the position restored (PE x sqrt(32)), as drawn and with its score steps matched
PE_GAIN = (32 + 16) / (1 + 1 / 2)  # mean x^2 with PE x sqrt(32) over B's: 32
MORE = [
    Setting("normal", False, tied=False, score_gain=GAIN, qk_init=GAIN**-0.5),
    Setting("normal", False, tied=False, qk_lr=GAIN**-0.5),
    Setting("normal", False, tied=False, qk_lr=0.5),
    Setting("normal", False, tied=False, qk_lr=1 / 3),
    Setting("normal", True, tied=False, pe_scale=32**0.5),
    Setting("normal", True, tied=False, pe_scale=32**0.5, qk_lr=PE_GAIN),
]
GROUPS = {  # name: (steps, lr, settings)
    "150 steps, lr 1e-2": (150, 1e-2, [D2L, NO_FACTOR, PRE_LN, HOT, COOL, *INTENDED, *PRE_LN_CONTROLS]),
    "150 steps, lr 3e-3": (150, 3e-3, [D2L, NO_FACTOR, *INTENDED]),
    "1200 steps, lr 1e-2": (1200, 1e-2, [D2L, PRE_LN, HOT, COOL, *MATCHED]),
    "1200 steps, lr 3e-3": (1200, 3e-3, [D2L, NO_FACTOR]),
    "1200 steps, lr 1e-2, more controls": (1200, 1e-2, MORE + PRE_LN_CONTROLS),
    "1200 steps, lr 1e-3": (1200, 1e-3, [D2L, NO_FACTOR]),
    # the two settings whose seeds spread most, on 18 more seeds
    "1200 steps, lr 1e-2, seeds 12-29": (1200, 1e-2, [PRE_LN, MATCHED[2]]),
}
SEEDS_OF: dict[str, list[int]] = {"1200 steps, lr 1e-2, seeds 12-29": list(range(12, 30))}


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
