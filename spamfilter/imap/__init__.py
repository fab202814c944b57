"""``spamfilter imap run``: filtering and learning on an IMAP account.

- ``session``: one IMAP connection (imapclient): select, fetch, keywords, move;
- ``state``: what a run remembers of an account, and its transactions;
- ``sync``: the run itself: training folders, learning from the user's
  moves, classifying and filing.
"""
