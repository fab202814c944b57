"""spamfilter: an incremental naive Bayes mail filter."""

__version__ = "0.1.0"
