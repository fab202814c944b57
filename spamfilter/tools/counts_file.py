"""The counts file of ``spamfilter db export`` and ``db import``: its
format (``Maintenance.export_counts`` documents it), the escaping of its
tokens, and a reader that checks it line by line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import BinaryIO

import numpy as np

from spamfilter.counts import MAX_COUNT, IntArray
from spamfilter.errors import CountsFileError
from spamfilter.verdicts import Label

#: First line of a counts file (``Maintenance.export_counts``); "v2" is the
#: format version. Version 2 adds the message features' sums and the
#: calibration record; a version 1 file (which has neither) still reads.
COUNTS_HEADER = "# spamfilter counts v2"
_READABLE_HEADERS = ("# spamfilter counts v1", COUNTS_HEADER)
TOTALS_KEYS = ("ham_messages", "spam_messages", "ham_terms", "spam_terms", "ham_binary_terms", "spam_binary_terms")
FEATURE_KEYS = ("label", "feature", "n", "total", "total_sq")
CALIBRATION_KEYS = ("label", "bin", "weight")
#: Starts the line of the settings the calibration record was written under
#: (a comment to a reader that does not know it, so still version 2).
RECORD_SETTINGS = "# record-settings "
_INTEGER = re.compile(r"-?[0-9]+")
_ESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r", "#": "#"}
#: A token's longest UTF-8 form in a counts file: far above the tokenizer's
#: (about 200 characters) and below PostgreSQL's limit for a B-tree index
#: entry (2,704 bytes, the token sharing it with the owner).
MAX_TOKEN_BYTES = 1000
#: A counts file's longest line: a longest token with every byte escaped
#: and four counts of 19 digits fit.
MAX_LINE_BYTES = 4096
_ESCAPED = re.compile(r"\\(.?)", re.DOTALL)
#: A count as a counts file writes it: ASCII digits alone.
_DIGITS = re.compile(r"[0-9]+")


def escape_field(text: str) -> str:
    """``text`` as one tab-separated field on one line: backslash, tab,
    newline and carriage return escaped (a counts file's tokens, the
    sources of ``classify --format tsv``)."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def escape_token(text: str) -> str:
    """A token (or owner) as written in a counts file: ``escape_field``, and
    a leading "#" escaped (it would read as a comment).

    Not the ledger's escape in store/ledger.py, whose comment says why the two differ."""
    out = escape_field(text)
    return "\\" + out if out.startswith("#") else out


def unescape_token(text: str) -> str:
    """Inverse of ``escape_token``; raises ``ValueError`` for an unknown escape."""
    if "\\" not in text:
        return text

    def one(m: re.Match[str]) -> str:
        if m.group(1) not in _ESCAPES:
            raise ValueError(f"unknown escape \\{m.group(1)}")
        return _ESCAPES[m.group(1)]

    return _ESCAPED.sub(one, text)


def read_counts_lines(stream: BinaryIO) -> Iterator[str]:
    """The lines of a counts file read from bytes, for ``import_counts``:
    each decoded on its own, so a UTF-8 error names its line, and none
    longer than ``MAX_LINE_BYTES``, so one huge line cannot fill the memory.
    Raises ``CountsFileError``."""
    number = 0
    while line := stream.readline(MAX_LINE_BYTES + 2):
        number += 1
        if len(line.rstrip(b"\n").rstrip(b"\r")) > MAX_LINE_BYTES:
            raise CountsFileError(f"counts file, line {number}: longer than {MAX_LINE_BYTES} bytes")
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CountsFileError(f"counts file, line {number}: not UTF-8 ({exc.reason})") from None


def _key_values(line: str, prefix: str) -> dict[str, str]:
    """The ``key=value`` fields of a comment line after its ``prefix``."""
    return dict(part.partition("=")[::2] for part in line[len(prefix) :].split())


class CountsReader:
    """Parses and checks a counts file line by line (``Maintenance.import_counts``)."""

    def __init__(self, lines: Iterable[str], *, feature_count: int = 0, calibration_bins: int = 0) -> None:
        self.lines = lines
        self.totals: IntArray | None = None
        #: How far each total may still grow: (3, 2) like ``totals``.
        self.room: IntArray = np.full((3, 2), MAX_COUNT, dtype=np.int64)
        # Python ints: a sum past 2**63 must not wrap round to a valid total.
        self.sums = [[0, 0], [0, 0]]  # rows terms, binary_terms
        self.previous: tuple[str, int] | None = None  # the last token and its line
        self.where = "line 1"
        #: "# features" lines: (label, feature) -> [n, total, total_sq].
        self.features: dict[tuple[int, int], list[int]] = {}
        #: "# calibration" lines: (label, bin) -> weight.
        self.calibration: dict[tuple[int, int], float] = {}
        #: The "# record-settings" line: the settings (JSON) the calibration
        #: record was written under; None when the file does not say.
        self.record_settings: str | None = None
        self.feature_count = feature_count
        self.calibration_bins = calibration_bins

    def fail(self, reason: str) -> CountsFileError:
        return CountsFileError(f"counts file, {self.where}: {reason}")

    def chunks(self, size: int) -> Iterator[dict[str, list[int]]]:
        """Token -> [ham_docs, spam_docs, ham_terms, spam_terms], ``size``
        tokens at a time."""
        chunk: dict[str, list[int]] = {}
        number = 0
        try:
            for number, line in enumerate(self.lines, start=1):
                self.where = f"line {number}"
                line = line[:-1] if line.endswith("\n") else line
                line = line[:-1] if line.endswith("\r") else line
                if number == 1:
                    if not any(line == h or line.startswith(h + " ") for h in _READABLE_HEADERS):
                        raise self.fail(f"not a spamfilter counts file (the first line is not {COUNTS_HEADER!r} ...)")
                    continue
                if line.startswith("# totals "):
                    if self.totals is not None:
                        raise self.fail("a second '# totals' line")
                    self.totals = self._totals(line)
                    continue
                if line.startswith("# features "):
                    self._feature_line(line)
                    continue
                if line.startswith("# calibration "):
                    self._calibration_line(line)
                    continue
                if line.startswith(RECORD_SETTINGS):
                    self._settings_line(line)
                    continue
                if not line or line.startswith("#"):
                    continue
                token, counts = self._token_line(line)
                if self.previous is not None and token <= self.previous[0]:
                    raise self.fail(
                        f"the token {token!r} is given again (line {self.previous[1]})"
                        if token == self.previous[0]
                        else f"the token {token!r} comes after {self.previous[0]!r}: the tokens must be in code point order, as `db export` writes them"
                    )
                self.previous = (token, number)
                chunk[token] = counts
                if len(chunk) >= size:
                    yield chunk
                    chunk = {}
        except UnicodeDecodeError as exc:
            raise CountsFileError(f"counts file, after line {number}: not UTF-8 ({exc.reason})") from None
        if number == 0:
            raise self.fail("the file is empty")
        if chunk:
            yield chunk

    def _totals(self, line: str) -> IntArray:
        fields = _key_values(line, "# totals ")
        if not all(_DIGITS.fullmatch(fields.get(key, "")) for key in TOTALS_KEYS):
            raise self.fail(f"the totals line needs whole numbers written in the digits 0-9 for {', '.join(TOTALS_KEYS)}")
        values = [int(fields[key]) for key in TOTALS_KEYS]
        for value, key, room in zip(values, TOTALS_KEYS, self.room.ravel().tolist()):
            if value > room:
                raise self.fail(
                    f"{key}={value} is more than the model may hold (at most {room}{'' if room == MAX_COUNT else ' more'}: "
                    "counts stay below 2^62, so no sum overflows the database's 64-bit integers)"
                )
        return np.array(values, dtype=np.int64).reshape(3, 2)

    def _fields(self, line: str, prefix: str, keys: tuple[str, ...]) -> dict[str, str]:
        if self.totals is None:
            raise self.fail(f"a '{prefix.strip()}' line comes before the '# totals' line")
        if self.previous is not None:
            raise self.fail(f"a '{prefix.strip()}' line comes after the token lines (`db export` writes it before them)")
        fields = _key_values(line, prefix)
        if sorted(fields) != sorted(keys):
            raise self.fail(f"the '{prefix.strip()}' line needs {', '.join(keys)}, each once")
        return fields

    def _feature_line(self, line: str) -> None:
        """A message feature's sums in one class (``FeatureStats``)."""
        fields = self._fields(line, "# features ", FEATURE_KEYS)
        if not all(_INTEGER.fullmatch(v) for v in fields.values()):
            raise self.fail("the features line needs whole numbers written in the digits 0-9")
        label, feature, n, total, total_sq = (int(fields[k]) for k in FEATURE_KEYS)
        assert self.totals is not None
        if label not in (0, 1) or not 0 <= feature < self.feature_count:
            raise self.fail(f"no feature {feature} of label {label} (labels 0 and 1, features 0 to {self.feature_count - 1})")
        if (label, feature) in self.features:
            raise self.fail(f"feature {feature} of label {label} is given again")
        if not 0 <= n <= self.totals[0, label] or total_sq < 0 or max(abs(total), total_sq) > MAX_COUNT:
            raise self.fail(f"feature {feature} of label {label}: n={n} (at most the class's messages), total={total}, total_sq={total_sq} (at least 0)")
        self.features[(label, feature)] = [n, total, total_sq]

    def _calibration_line(self, line: str) -> None:
        """One bin of the calibration record (``calibration.recorded``)."""
        fields = self._fields(line, "# calibration ", CALIBRATION_KEYS)
        if not (_DIGITS.fullmatch(fields["label"]) and _DIGITS.fullmatch(fields["bin"])):
            raise self.fail("the calibration line's label and bin are whole numbers written in the digits 0-9")
        label, b = int(fields["label"]), int(fields["bin"])
        try:
            weight = float(fields["weight"])
        except ValueError:
            raise self.fail(f"the weight {fields['weight']!r} is not a number") from None
        if label not in (0, 1) or not 0 <= b < self.calibration_bins:
            raise self.fail(f"no calibration bin {b} of label {label} (labels 0 and 1, bins 0 to {self.calibration_bins - 1})")
        if not 0.0 <= weight <= float(MAX_COUNT):  # NaN fails too
            raise self.fail(f"the weight {fields['weight']} is not a finite number >= 0")
        if (label, b) in self.calibration:
            raise self.fail(f"calibration bin {b} of label {label} is given again")
        self.calibration[(label, b)] = weight

    def _settings_line(self, line: str) -> None:
        """The settings the record was written under: a JSON object of
        names to numbers, booleans and texts (``Scoring.settings``)."""
        if self.record_settings is not None:
            raise self.fail(f"a second {RECORD_SETTINGS.strip()!r} line")
        text = line.removeprefix(RECORD_SETTINGS)
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not (isinstance(value, dict) and all(isinstance(v, (str, int, float, bool)) for v in value.values())):
            raise self.fail("the record's settings are not a JSON object of names to numbers, booleans and texts")
        self.record_settings = text

    def _token_line(self, line: str) -> tuple[str, list[int]]:
        if self.totals is None:
            raise self.fail("a token line comes before the '# totals' line")
        parts = line.split("\t")
        if len(parts) != 5:
            raise self.fail(f"expected token and 4 counts separated by tabs, found {len(parts)} fields")
        try:
            token = unescape_token(parts[0])
        except ValueError as exc:
            raise self.fail(str(exc)) from None
        bad = [p for p in parts[1:] if not _DIGITS.fullmatch(p)]
        if bad:
            # int() would take "+0", "0_0" and other scripts' digits, and
            # word its refusals in Python's terms.
            raise self.fail(f"the count {bad[0]!r} is not a whole number written in the digits 0-9")
        counts = [int(p) for p in parts[1:]]
        if max(counts) > MAX_COUNT:
            raise self.fail(f"a count is above {MAX_COUNT} (2^62 - 1)")
        if "\x00" in token:
            raise self.fail("the token holds a NUL character")
        if len(token.encode("utf-8")) > MAX_TOKEN_BYTES:
            raise self.fail(f"the token is longer than {MAX_TOKEN_BYTES} bytes")
        for c in (0, 1):
            docs, terms = counts[c], counts[2 + c]
            if docs > terms or (docs == 0) != (terms == 0):
                raise self.fail(f"{Label(c).decision}: {docs} messages but {terms} occurrences")
            if docs > self.totals[0, c]:
                raise self.fail(f"the token is in {docs} {Label(c).decision} messages, the totals line has {int(self.totals[0, c])}")
        if counts[0] == 0 and counts[1] == 0:
            raise self.fail("the token is in no message")
        for c in (0, 1):
            self.sums[0][c] += counts[2 + c]
            self.sums[1][c] += counts[c]
        return token, counts

    def finish(self) -> IntArray:
        """The totals to add, (3, 2) rows messages, terms, binary_terms,
        once the token lines were seen to add up to them."""
        self.where = "end of file"
        if self.totals is None:
            raise self.fail("no '# totals' line")
        for i, name in ((1, "terms"), (2, "binary_terms")):
            for c in (0, 1):
                if self.sums[i - 1][c] != self.totals[i, c]:
                    raise self.fail(
                        f"the token lines add up to {self.sums[i - 1][c]} {Label(c).decision} {name}, the totals line says "
                        f"{int(self.totals[i, c])} (a truncated or edited file)"
                    )
        return self.totals
