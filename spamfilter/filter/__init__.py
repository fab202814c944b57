"""The library API: ``Filter`` trains, forgets, relabels and classifies mail.

    from spamfilter.config import load_config
    from spamfilter.mail import read_messages
    from spamfilter.filter import Filter

    with Filter.open(load_config()) as f:
        for verdict in f.classify(read_messages(["inbox.mbox"])):
            print(verdict.source, verdict.verdict, verdict.log_odds)

The package, by job:

    core        Filter: opens the store, reads the mail, hands it on
    scoring     the model read into memory (cache), and the verdicts
    training    train, mark and forget: one transaction per batch
    online      classify, then learn, message by message
    cache       the counts read so far, valid for one model version
    delta       a batch's change of the counts
    dependence  the one-dependence counts: kept, chosen, read
"""

from spamfilter.filter.core import Filter, upgrade_database

__all__ = ["Filter", "upgrade_database"]
