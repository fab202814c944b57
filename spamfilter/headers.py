"""The header fields spamfilter writes into the mail it filters.

Two modules that may not import each other need them: ``mail`` leaves them
out of a message's digest (a filtered message keeps the identity it had
before), and ``tokenizer`` takes no evidence from them (or the filter would
learn from its own verdicts, and a filtered message would vouch for itself).
"""

from __future__ import annotations

from typing import Final

#: The fields, as written; matched in any case.
FILTER_HEADERS: Final = ("X-Spam-Status", "X-Spam-Score", "X-Spam-Flag")
