"""The naive Bayes mathematics, pure numpy/scipy with no I/O.

- ``model``: counts -> Lidstone estimates -> log-likelihoods -> log-odds ->
  the Bayes decision with the loss matrix (and Fisher/Robinson combining);
- ``gaussian``: the message features' normal densities (Gaussian NB);
- ``aode``: one-dependence estimators (SPODE, AODE) over parent tokens;
- ``scorer``: the one place the log-odds are put together under the
  ``[model]`` settings, for the filter, explain, tune and the benchmarks;
- ``memcounts``: the store's sums kept in memory, for runs over cached tokens;
- ``learning``: which messages of a labelled stream are learned;
- ``calibration``: how far the scores can be taken at their word.
"""
