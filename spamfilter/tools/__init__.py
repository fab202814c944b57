"""What is built over the filter to measure it, tune it, look inside it and
keep it: none of it is needed to classify a message.

- ``evaluation``: online, train-once and cross-validated runs, ROC area,
  error rates, calibration figures;
- ``tuning``: ``tune``, settings and cutoffs chosen on later mail;
- ``insight``: top words, explain (a message's log-odds term by term),
  training history;
- ``report`` and ``plots``: the HTML report and its charts;
- ``maintenance``: ``db check``, prune, vacuum, and the counts file of
  export and import.
"""
