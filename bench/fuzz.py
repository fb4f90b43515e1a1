"""The full MCPL fuzz: at least 100,000 generated frames through the stdio reader, the
JSON-RPC peer and the MCPL admission checks (issue 16).

It runs `agentcore.testing.fuzz`'s `fuzz()`, the same scenarios and the same oracle as
the short run in `make test`, in rounds of `--examples` scenarios, round r with seed
`--seed` + r, until `--frames` frames have been fed; then prints the frames run, the
answers checked (each against its id's expected count and outcome) and the time. A
failure stops the run and prints the falsifying scenario and the blob that
`@reproduce_failure` replays; the same seed repeats the same run.

    .venv/bin/python bench/fuzz.py [--frames 100000] [--examples 500] [--seed 20261201]
        [--shrink]

Not part of ``make test`` (that runs the short version).
"""

from __future__ import annotations

import argparse
import sys

from loguru import logger

from agentcore.testing.fuzz import SEED, Figures, fuzz


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--examples", type=int, default=500, help="scenarios per round")
    parser.add_argument("--seed", type=int, default=None, help="the first round's seed")
    parser.add_argument(
        "--shrink",
        action="store_true",
        help="shrink a failure to its smallest form (minutes: a scenario that fails by "
        "missing answers waits out its bound each time)",
    )
    args = parser.parse_args()
    figures = Figures()
    first_seed = args.seed if args.seed is not None else SEED
    logger.remove()  # the host logs every refusal; the figures are what this prints
    logger.add(sys.stderr, level="ERROR")
    round_ = 0
    while figures.frames < args.frames:
        fuzz(
            args.examples,
            seed_value=first_seed + round_,
            figures=figures,
            profile="mcpl-fuzz-full" if args.shrink else "mcpl-fuzz",
        )
        round_ += 1
        print(f"round {round_} (seed {first_seed + round_ - 1}): {figures}", flush=True)
    print(f"\nheld: {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
