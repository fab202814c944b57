"""Mail unlike anything the model was trained on: does it come out unsure?

    python -m benchmarks.unfamiliar [--train spamassassin] [--score nazario-phishing] [--setting KEY=VALUE,...]

Train once on one corpus (the library: `Filter.train` into a fresh
in-memory database, with the default settings) and classify every message
of another corpus, which here is all spam (the Nazario phishing mail, years
newer than the spamassassin training mail). Beside it, bogofilter 1.2.5
with its defaults, bulk-trained (`-B`) on the same files and classifying
with `-b -T`. Prints each system's verdicts (spam, unsure, ham) and, for
spamfilter, how many messages its score (the calibrated P(spam)) puts at
or below 0.01, and how many the model's own log-odds do (expit(log-odds)
<= 0.01): a spam scored ham with confidence is the error the calibration
of issue 22 is about.
``--setting`` changes [model] keys of spamfilter's defaults (TOML values,
as in benchmarks.option_grid). Writes
results/unfamiliar-<train>-<score>.json. Asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.compare import CORPORA
from benchmarks.option_grid import bogofilter_trained_once, parse_setting
from spamfilter.answers import Verdict
from spamfilter.config import Config
from spamfilter.mail import read_index, without_mailbox_annotations
from spamfilter.nb import calibration
from spamfilter.tools.evaluation import fresh_filter


def bogofilter_verdicts(train: list[tuple[bool, str]], score: list[str]) -> collections.Counter[str]:
    """bogofilter's verdicts for the files of ``score``, trained in bulk on ``train``."""
    names = {"S": "spam", "U": "unsure", "H": "ham"}
    return collections.Counter(names[letter] for letter, _ in bogofilter_trained_once(train, score))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", default="spamassassin")
    parser.add_argument("--score", default="nazario-phishing")
    parser.add_argument("--setting", default="", help="[model] keys over the defaults, e.g. unseen_weight=0.5")
    args = parser.parse_args()
    config = Config()
    config = replace(config, model=parse_setting(config.model, args.setting))
    train = list(read_index(str(CORPORA / args.train / "index")))
    score = list(read_index(str(CORPORA / args.score / "index")))
    with fresh_filter(config) as f:
        f.train(train)
        verdicts = [v for v in f.classify(item for _, item in score) if isinstance(v, Verdict)]
    odds = np.array([v.log_odds for v in verdicts])
    scores = np.array([v.score for v in verdicts])
    mine = collections.Counter(str(v.verdict) for v in verdicts)
    theirs = bogofilter_verdicts([(s, item.source) for s, item in train], [item.source for _, item in score])
    with tempfile.TemporaryDirectory() as tmp:
        # The same mail as delivered: without the mailbox annotations of the
        # corpora's files (Status, X-Keywords, ...), which spamfilter takes no
        # token from and which mark how each corpus was kept.
        paths = []
        for i, (_, item) in enumerate(train + score):
            paths.append(f"{tmp}/{i}")
            Path(paths[-1]).write_bytes(without_mailbox_annotations(item.raw))
        delivered = bogofilter_verdicts([(s, p) for (s, _), p in zip(train, paths)], paths[len(train) :])
    result = {
        "train": args.train,
        "score": args.score,
        "setting": args.setting,
        "scored": len(verdicts),
        "spamfilter": dict(mine),
        "spamfilter_p_at_most_0.01": int((scores <= calibration.TAIL * (1 + 1e-9)).sum()),
        "spamfilter_log_odds_at_most_logit_0.01": int((odds <= np.log(0.01 / 0.99)).sum()),
        "spamfilter_median_log_odds": float(np.median(odds)),
        "bogofilter": dict(theirs),
        "bogofilter as delivered": dict(delivered),
    }
    for system in ("spamfilter", "bogofilter", "bogofilter as delivered"):
        counts = result[system]
        print(f"{system:23} spam {counts.get('spam', 0):5}  unsure {counts.get('unsure', 0):5}  ham {counts.get('ham', 0):5}")
    print(
        f"spamfilter: {result['spamfilter_p_at_most_0.01']} of {len(verdicts)} scored P(spam) <= 0.01"
        f" ({result['spamfilter_log_odds_at_most_logit_0.01']} with log-odds <= logit 0.01);"
        f" median log-odds {result['spamfilter_median_log_odds']:.1f}"
    )
    Path("results").mkdir(exist_ok=True)
    Path(f"results/unfamiliar-{args.train}-{args.score}.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
