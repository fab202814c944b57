"""Does what `spamfilter tune` writes help the mail that comes after? One fold against four.

    python -m benchmarks.tune_later [--corpus spamassassin ...] [--folds 1 --folds 4] [--unseen-weight 0 --unseen-weight 0.5]

For each shared corpus with a time order: run the library's `tuning.tune`
on the first half of the stream only, with the command's default grid,
under two protocols:

- one fold: the last 20% of that half held out, the model trained on the
  rest (what `tune` did before: `--folds 1 --holdout 0.2`), written when the
  held-out tail decides (`require_separation`);
- four folds: the last 50% of that half cut into four consecutive blocks,
  each scored by a model of all the mail before it (the default), written
  only when the best setting also beat the configured ones in more than half
  of the blocks and lost by more than 5% in none, and saved enough loss
  over them on the held-out messages (`require_improvement`).

Then train once on the whole first half with what was written (settings and
cutoffs; the defaults when nothing was) and classify the second half
(`evaluation.run_split`, as `spamfilter evaluate --protocol split`):
1-ROCA % and the loss per message of the loss matrix at the verdicts
(10 per ham filed as spam, 1 per spam let through, 0.2 per unsure), beside
the defaults'; the best setting's figures are printed whether it was
written or not, with its saving over the configured setting in standard
errors (``Candidate.improvement``), and what it saves on the later mail
itself, counted the same way (the paired per-message losses against the
defaults', in standard errors; positive is a saving), with the number of
later messages whose verdict costs differ. ``--unseen-weight`` adds
``[model] unseen_weight`` values to the grid (as ``tune --unseen-weight``
does). Writes results/tune_later.json.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.compare import CORPORA, INDEXES
from benchmarks.loco import CORPORA as NAMES
from spamfilter.config import EVENT_MODELS, Config
from spamfilter.errors import EvaluationError
from spamfilter.mail import read_index
from spamfilter.tools.evaluation import EvalReport, Scored, run_split
from spamfilter.tools.tuning import Candidate, Grid, configured_candidate, paired_saving, require_improvement, require_separation, tune, written_settings
from spamfilter.verdicts import Decision


def written(config: Config, best: Candidate) -> Config:
    """``config`` with what `tune --write` stores for ``best`` (``tuning.written_settings``)."""
    for (section, key), value in written_settings(best).items():
        config = replace(config, **{section: replace(getattr(config, section), **{key: value})})
    return config


def loss_per_message(report: EvalReport, config: Config) -> float:
    """The loss matrix's cost of the report's three-way verdicts, per message."""
    d, r = config.decision, report.rates
    cost = d.cost_ham_as_spam * r.ham_as_spam * report.ham + d.cost_spam_as_ham * r.spam_as_ham * report.spam
    cost += d.cost_unsure * (r.ham_unsure * report.ham + r.spam_unsure * report.spam)
    return cost / 100 / (report.ham + report.spam)


def message_losses(scored: list[Scored], config: Config) -> np.ndarray:
    """The loss matrix's cost of each scored message's verdict."""
    d = config.decision
    cost = {
        (True, Decision.HAM): d.cost_spam_as_ham,
        (False, Decision.SPAM): d.cost_ham_as_spam,
        (True, Decision.UNSURE): d.cost_unsure,
        (False, Decision.UNSURE): d.cost_unsure,
    }
    return np.array([cost.get((s.is_spam, s.verdict), 0.0) for s in scored])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", choices=NAMES, default=None)
    parser.add_argument("--folds", action="append", type=int, default=None)
    parser.add_argument("--unseen-weight", action="append", type=float, default=None, help="[model] unseen_weight values to add to the grid")
    args = parser.parse_args()
    config = Config()
    results = {}
    for name in args.corpus or NAMES:
        stream = list(read_index(str(CORPORA / INDEXES[name])))
        head = stream[: len(stream) // 2]
        base, base_scored = run_split(config, stream)
        base_losses = message_losses(base_scored, config)
        row = {"defaults": {"one_minus_roca": base.one_minus_roca, "loss": loss_per_message(base, config)}}
        print(f"{name:13} defaults            1-ROCA {base.one_minus_roca:.4f}  loss/msg {row['defaults']['loss']:.4f}", flush=True)
        for folds in args.folds or [1, 4]:
            holdout = 0.2 if folds == 1 else 0.5
            candidates = tune(
                config,
                head,
                Grid(
                    event_models=list(EVENT_MODELS),
                    alphas=[0.01, 0.03, 0.1, 0.3, 1.0],
                    temperings=sorted({0.0, 0.5, config.model.tempering}),
                    min_evidences=[0.0, 2.0, 3.0],
                    bigram_options=[True, False],
                    unseen_weights=args.unseen_weight,
                ),
                holdout=holdout,
                folds=folds,
                baseline=True,
            )
            best = next(c for c in candidates if c.in_grid)
            why = ""
            try:
                require_separation(best, holdout)
                if folds > 1:
                    require_improvement(best, configured_candidate(candidates, config))
                wrote = True
            except EvaluationError as exc:
                wrote, why = False, str(exc)
            # What the best setting does on the second half, written or not.
            chosen = written(config, best)
            report, scored = run_split(chosen, stream)
            losses = message_losses(scored, chosen)
            later_saving = paired_saving(losses, base_losses) if losses.size == base_losses.size else float("nan")
            differing = int(np.count_nonzero(losses != base_losses)) if losses.size == base_losses.size else -1
            what = f"{best.event_model} alpha {best.alpha:g} tempering {best.tempering:g} min_evidence {best.min_evidence:g} bigrams {best.bigrams} unseen_weight {best.unseen_weight:g}"
            loss = loss_per_message(report, chosen)
            row[f"folds {folds}"] = {
                "wrote": wrote,
                "why": why,
                "best": what,
                "improvement": best.improvement,
                "one_minus_roca": report.one_minus_roca if wrote else base.one_minus_roca,
                "loss": loss if wrote else row["defaults"]["loss"],
                "best_one_minus_roca": report.one_minus_roca,
                "best_loss": loss,
                "best_later_saving_se": later_saving,
                "best_later_differing": differing,
            }
            print(
                f"{name:13} {folds} fold{'s' if folds > 1 else ' '} {'wrote' if wrote else 'kept '}  best: 1-ROCA {report.one_minus_roca:.4f}  loss/msg "
                f"{loss:.4f}  {best.improvement:+.2f} s.e. held out, {later_saving:+.2f} s.e. later ({differing} verdicts cost differently) ({what}) {why[:90]}",
                flush=True,
            )
        results[name] = row
    Path("results").mkdir(exist_ok=True)
    Path("results/tune_later.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
