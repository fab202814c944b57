"""The exception hierarchy of spamfilter.

Library code raises these with a message a user can act on; only the command
line maps them to exit codes (``spamfilter.cli.exitcodes``).
"""

from __future__ import annotations


class SpamfilterError(Exception):
    """Base class of every error spamfilter raises on purpose."""


class ConfigError(SpamfilterError):
    """The configuration file or an option has an invalid value."""


class OutputError(SpamfilterError):
    """A file the command writes (the config of ``tune --write``) cannot
    be created or written."""


class MailSourceError(SpamfilterError):
    """A mail source (file, folder, index) does not exist or cannot be read."""


class MailParseError(SpamfilterError):
    """One message cannot be read as mail at all (empty, or not a message)."""


class StoreError(SpamfilterError):
    """The token database cannot be opened, read or written."""


class NoSuchDatabase(StoreError):
    """The database file does not exist, and the command only reads one."""


class StoreBusyError(StoreError):
    """The token database stayed locked by another process past the timeout."""


class StoreDisconnected(StoreBusyError):
    """The connection to the database server was lost (a restart, an
    administrator ending it); the transaction was not committed and runs
    again on a new connection."""


class StoreUnreachable(StoreError):
    """The database server could not be reached when the store was opened
    (refused, timed out, no such host): a temporary failure for an MTA
    (exit 75), not tried again here, so a wrong address fails at once."""


class StoreConflict(StoreBusyError):
    """A transaction lost a race with another process (deadlock, serialization
    failure, the same message inserted twice); running it again will succeed."""


class CountLimitError(StoreError):
    """A write would take a count of the model past ``counts.MAX_COUNT``;
    it was refused and nothing was written."""


class SchemaOutOfDate(StoreError):
    """The database schema is older than this version of spamfilter."""


class NotTrainedError(SpamfilterError):
    """Classifying needs at least one trained spam and one trained ham."""


class EvaluationError(SpamfilterError):
    """The labelled mail cannot support the evaluation or tuning asked for."""


class ImapError(SpamfilterError):
    """The IMAP server refused an operation or answered unexpectedly."""


class ImapAuthError(ImapError):
    """The IMAP server refused the login (wrong user name or password)."""


class ImapUnavailable(ImapError):
    """The IMAP server cannot be reached, or the connection broke (after retries)."""


class ScoresFileError(EvaluationError):
    """A scores file (``classify`` or ``evaluate --out`` output) cannot be read or is not one."""


class StoreInconsistent(StoreError):
    """The stored counts do not agree with each other, or one is not a count
    at all (``spamfilter db check`` lists the problems)."""


class ModelNotEmpty(SpamfilterError):
    """An import meant for an empty model found counts there."""


class CountsFileError(SpamfilterError):
    """A counts file for ``spamfilter db import`` cannot be read or is not one."""


class ProtocolError(SpamfilterError):
    """A peer of the spamd protocol (``spamfilter serve``, ``spamc``) sent
    something that is not the protocol; ``code`` is the sysexits number of
    the error reply (76, EX_PROTOCOL, unless said otherwise)."""

    def __init__(self, message: str, code: int = 76) -> None:
        super().__init__(message)
        self.code = code


class AddressInUse(SpamfilterError):
    """The address a daemon should listen on is held by another server (a
    TCP port in use, a Unix socket another server answers on)."""


class WorkerLost(SpamfilterError):
    """A worker process reading mail (``--jobs``) died before it answered."""
