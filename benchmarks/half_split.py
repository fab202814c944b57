"""Train on the first half of a TREC index, classify the second half.

    python -m benchmarks.half_split --corpus spamassassin --model multinomial-binary

Runs the real library path (`evaluation.run_split`: a Filter over a fresh
in-memory database, as `spamfilter evaluate --protocol split`), measures
training and classification throughput, ROC area (ranked by log-odds) and
the error rates at the configured decision thresholds, prints one line and
writes results/half_split-<corpus>-<model>.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from spamfilter.config import EVENT_MODELS, Config, load_config
from spamfilter.mail import read_index
from spamfilter.tools.evaluation import roc_area, run_split

CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"


def git_sha() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or "unknown"


def run(corpus: str, event_model: str, alpha: float | None, config: Config) -> dict[str, object]:
    model = replace(config.model, event_model=event_model, **({"alpha": alpha} if alpha is not None else {}))
    config = replace(config, model=model)
    stream = list(read_index(str(CORPORA / corpus / "index")))
    report, scored = run_split(config, stream)
    y = np.array([s.is_spam for s in scored])
    odds = np.array([s.log_odds for s in scored])
    return {
        "corpus": corpus,
        "event_model": event_model,
        "alpha": config.model.alpha,
        "train_messages": report.trained,
        "test_messages": len(scored),
        "refused": report.refused,
        "roc_area": roc_area(y, odds),
        "one_minus_roca_pct": report.one_minus_roca,
        **asdict(report.rates),
        "log_loss": report.calibration.log_loss if report.calibration else None,
        "train_msgs_per_s": report.train_per_second,
        "classify_msgs_per_s": report.classify_per_second,
        "git": git_sha(),
        "machine": f"{platform.machine()} {platform.processor() or ''} python {platform.python_version()}".strip(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="spamassassin")
    parser.add_argument("--model", default="multinomial-binary", choices=EVENT_MODELS)
    parser.add_argument("--alpha", type=float, default=None)
    parser.add_argument("--config", type=Path, default=None)
    args = parser.parse_args()
    result = run(args.corpus, args.model, args.alpha, load_config(args.config) if args.config else Config())
    out = Path("results")
    out.mkdir(exist_ok=True)
    (out / f"half_split-{args.corpus}-{args.model}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{args.corpus:<14} {args.model:<19} alpha={result['alpha']:<6g} 1-ROCA%={result['one_minus_roca_pct']:.3f} "
        f"ham->spam={result['ham_as_spam']:.2f}% spam->ham={result['spam_as_ham']:.2f}% "
        f"unsure={result['ham_unsure']:.2f}%/{result['spam_unsure']:.2f}% acc={result['accuracy']:.2f}% "
        f"train={result['train_msgs_per_s']:.0f}/s classify={result['classify_msgs_per_s']:.0f}/s"
    )


if __name__ == "__main__":
    main()
