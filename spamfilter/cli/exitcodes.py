"""Exit codes of the ``spamfilter`` command: the one table, used by every command.

``spamfilter filter`` answers with its verdict in the exit code, as
bogofilter does: 0 spam, 1 ham, 2 unsure. Errors use the BSD ``sysexits.h``
numbers (64 and up), so a verdict can never be mistaken for an error; an MTA
that sees 75 (temporary failure) queues the message and retries.

    code  meaning
    ----  -------------------------------------------------------------
       0  success; for `filter`: the message is spam
       1  `filter`: the message is ham
       2  `filter`: the message is unsure
      64  usage error: unknown option, missing or bad argument, or an
          output file named on the command line cannot be written
      65  a message could not be read as mail (the others were processed), or
          the labelled mail cannot support the evaluation asked for, or a
          counts file for `db import` is not one
      66  a mail source named on the command line (file, folder, index)
          does not exist or is unreadable (a file inside a folder that cannot
          be read is skipped, 65),
          or no source held any message (train, mark, forget), or a command
          that only reads the database found no database file
      68  the IMAP server cannot be reached (after retries), or the connection broke
      69  the model is not trained yet (needs a spam and a ham)
      70  internal error: a bug in spamfilter, please report it; or a worker
          process reading mail (--jobs) died (killed, out of memory); or
          the process ran out of the memory it may use
      71  the IMAP server refused an operation
      73  `db check` found the stored counts inconsistent; or a stored count
          is not a count (a REAL past 2^63 - 1), which every command refuses
      74  the database cannot be opened, read or written; or training would
          take a count past 2^62 - 1 (refused, nothing written); or the
          output could not be written (a full disk); or the config file of
          `tune --write` cannot be created or written (a part of its path is
          a file, not a folder; no permission)
      75  the database stayed locked by another process, or its server
          could not be reached or stayed away past `write_deadline`; or
          another server holds the address a daemon should listen on: try
          again later
      76  the database schema is out of date: run `spamfilter db upgrade`
      77  the IMAP server refused the login
      78  the configuration is invalid
     130  interrupted (Ctrl-C)
"""

from __future__ import annotations

from spamfilter.errors import (
    AddressInUse,
    ConfigError,
    CountsFileError,
    EvaluationError,
    ImapAuthError,
    ImapError,
    ImapUnavailable,
    MailParseError,
    MailSourceError,
    NoSuchDatabase,
    NotTrainedError,
    OutputError,
    SchemaOutOfDate,
    SpamfilterError,
    StoreBusyError,
    StoreError,
    StoreInconsistent,
    StoreUnreachable,
)

OK = 0
SPAM = 0
HAM = 1
UNSURE = 2
USAGE = 64
DATA_ERROR = 65
NO_INPUT = 66
IMAP_UNREACHABLE = 68
NOT_TRAINED = 69
INTERNAL = 70
IMAP_ERROR = 71
STORE_INCONSISTENT = 73
STORE_ERROR = 74
OUTPUT_ERROR = 74
STORE_BUSY = 75
SCHEMA_OUT_OF_DATE = 76
IMAP_LOGIN = 77
CONFIG_ERROR = 78
INTERRUPTED = 130

# Most specific class first: the first match wins.
_BY_ERROR: tuple[tuple[type[SpamfilterError], int], ...] = (
    (ConfigError, CONFIG_ERROR),
    (MailSourceError, NO_INPUT),
    (MailParseError, DATA_ERROR),
    (EvaluationError, DATA_ERROR),
    (CountsFileError, DATA_ERROR),
    (OutputError, OUTPUT_ERROR),
    (NotTrainedError, NOT_TRAINED),
    (NoSuchDatabase, NO_INPUT),
    (SchemaOutOfDate, SCHEMA_OUT_OF_DATE),
    (StoreBusyError, STORE_BUSY),
    (StoreUnreachable, STORE_BUSY),
    (AddressInUse, STORE_BUSY),
    (StoreInconsistent, STORE_INCONSISTENT),
    (StoreError, STORE_ERROR),
    (ImapAuthError, IMAP_LOGIN),
    (ImapUnavailable, IMAP_UNREACHABLE),
    (ImapError, IMAP_ERROR),
)


def for_error(error: SpamfilterError) -> int:
    """The exit code of a library error."""
    for cls, code in _BY_ERROR:
        if isinstance(error, cls):
            return code
    return INTERNAL
