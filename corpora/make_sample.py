"""Write a small synthetic mail set so spamfilter can be tried without real corpora.

Usage:
    python corpora/make_sample.py [--out DIR] [--seed N]

Writes four files into DIR (default: ``sample/`` next to this script):

    train-ham.mbox    60 legitimate messages
    train-spam.mbox   60 spam messages
    inbox.mbox        20 messages, 10 of each class, for the "classify" demo
    inbox-truth.tsv   one line per inbox message, "N<TAB>ham|spam", N 1-based in mbox order

Every message is built with the stdlib ``email`` package and written as mboxrd:
an envelope ``From `` line before each message, a blank line after it, and every
body line matching ``>*From `` gets one more leading ``>``.

All variety comes from one ``random.Random(seed)``: topics, sentences, names,
dates, Message-IDs and MIME boundaries.  Nothing reads the clock, the host name
or the network, so two runs with the same seed give byte-identical files.

The texts are written for this script from small vocabularies; nothing is taken
from the public corpora.  Addresses use reserved names (example.com/.net/.org,
the .example and .test top-level domains, the 192.0.2.0/24-style documentation
networks and the 555-01xx telephone range) so no real party is named.

Each class is learnable (ham talks about meetings, family, code review, travel
and a mailing list; spam about pills, prizes, loans, coins, phishing and
watches), but the classes deliberately share words such as "free", "order",
"payment", "account", "prize", "credit", "rate", "ticket" and "unsubscribe",
and both classes contain HTML parts, base64 bodies, encoded subjects,
attachments and non-UTF-8 charsets, so no single feature gives the label away.

Example:
    python corpora/make_sample.py --out /tmp/sample --seed 7
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import io
import random
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email import policy
from email.charset import Charset
from email.generator import BytesGenerator
from email.header import Header
from email.message import EmailMessage, Message
from email.utils import format_datetime, formataddr
from pathlib import Path
from typing import TypeVar

DEFAULT_SEED = 1729
DEFAULT_OUT = Path(__file__).resolve().parent / "sample"

HAM = "ham"
SPAM = "spam"

TRAIN_HAM_FILE = "train-ham.mbox"
TRAIN_SPAM_FILE = "train-spam.mbox"
INBOX_FILE = "inbox.mbox"
TRUTH_FILE = "inbox-truth.tsv"

# Training mail arrives over five months, the inbox in the fortnight after, so
# a demo that trains first and then classifies the inbox runs forwards in time.
TRAIN_START = dt.datetime(2024, 1, 8, tzinfo=dt.timezone.utc)
TRAIN_DAYS = 145
INBOX_START = dt.datetime(2024, 6, 3, tzinfo=dt.timezone.utc)
INBOX_DAYS = 12

WRAP = 72
# Same names as asctime(), spelt out so the envelope line ignores the locale.
WEEKDAY_ABBR = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
MONTH_ABBR = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# mboxrd: quote "From " and any already quoted ">From " at a line start.
MBOXRD_FROM = re.compile(rb"^(>*From )", re.MULTILINE)


# ---------------------------------------------------------------- data types


@dataclass(frozen=True, slots=True)
class Person:
    name: str
    address: str

    @property
    def domain(self) -> str:
        return self.address.rsplit("@", 1)[1]


@dataclass(frozen=True, slots=True)
class Attachment:
    filename: str
    maintype: str
    subtype: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Draft:
    """One message before it is dated and rendered.

    charset: "utf-8" uses EmailMessage (policy.default); any other charset is
             rendered the way older mail clients do it (compat32, the subject
             as an RFC 2047 word in that charset).
    cte:     forces the body transfer encoding ("base64", "quoted-printable");
             None lets the email package choose.
    html:    adds a text/html alternative; with html_only the text is dropped.
    office_hours: date the message on a weekday between 08:00 and 18:59.
    """

    sender: Person
    to: str
    subject: str
    text: str
    html: str | None = None
    html_only: bool = False
    charset: str = "utf-8"
    cte: str | None = None
    attachment: Attachment | None = None
    headers: tuple[tuple[str, str], ...] = ()
    utc_offset_hours: float = 0.0
    office_hours: bool = False


TopicFn = Callable[[random.Random, int], Draft]
T = TypeVar("T")


# ------------------------------------------------------------------ helpers


def _pick(rng: random.Random, options: Sequence[T]) -> T:
    return options[rng.randrange(len(options))]


def _hex(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(4 * digits):0{digits}x}"


def _ref(rng: random.Random, letters: int = 3, digits: int = 5) -> str:
    head = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(letters))
    return head + "".join(rng.choice("0123456789") for _ in range(digits))


def _doc_ip(rng: random.Random) -> str:
    """An address from the three documentation networks (RFC 5737)."""
    net = _pick(rng, ("192.0.2", "198.51.100", "203.0.113"))
    return f"{net}.{rng.randint(2, 254)}"


def _money(rng: random.Random, low: int, high: int, step: int = 1) -> str:
    return f"{rng.randrange(low, high, step):,}"


def _body(greeting: str | None, paragraphs: Sequence[str], signoff: str | None) -> str:
    """Join paragraphs with blank lines; wrap prose, keep pre-formatted blocks.

    A paragraph that already contains a newline (code, quoted reply, a table
    of booking details) is kept as it is.
    """
    blocks: list[str] = []
    if greeting:
        blocks.append(greeting)
    for p in paragraphs:
        blocks.append(p if "\n" in p else textwrap.fill(p, WRAP))
    if signoff:
        blocks.append(signoff)
    return "\n\n".join(blocks) + "\n"


def _group(rng: random.Random, sentences: Sequence[str]) -> list[str]:
    """Split sentences into paragraphs of one to three sentences."""
    out: list[str] = []
    i = 0
    while i < len(sentences):
        n = rng.randint(1, 3)
        out.append(" ".join(sentences[i : i + n]))
        i += n
    return out


def _html(paragraphs: Sequence[str], *, link_text: str | None = None, shouty: bool = False) -> str:
    """Turn plain paragraphs into a small HTML document.

    URLs become links; link_text, if given, replaces the visible text of every
    link (the classic phishing trick of showing one address and linking to
    another).  shouty adds the coloured fonts and bold of bulk mail.
    """
    url = re.compile(r"https?://[^\s<>\"]+[^\s<>\".,;:!?)]")

    def linkify(text: str) -> str:
        escaped = html.escape(text, quote=False)
        return url.sub(lambda m: f'<a href="{m.group(0)}">{html.escape(link_text or m.group(0))}</a>', escaped)

    rows: list[str] = []
    for i, p in enumerate(paragraphs):
        inner = linkify(p).replace("\n", "<br>\n")
        if shouty and i == 0:
            rows.append(f'<p><font size="4" color="#cc0000"><b>{inner}</b></font></p>')
        else:
            rows.append(f"<p>{inner}</p>")
    body = "\n".join(rows)
    style = ' style="font-family:Arial,sans-serif"' if shouty else ""
    return f"<html><body{style}>\n{body}\n</body></html>\n"


# ------------------------------------------------------------------- people

USER_WORK = Person("Dana Whitfield", "dana@northwind.example.com")
USER_HOME = Person("Dana Whitfield", "dana.whitfield@example.net")

PRIYA = Person("Priya Raman", "priya.raman@northwind.example.com")
LENA = Person("Lena Okafor", "lena.okafor@northwind.example.com")
TOMASZ = Person("Tomasz Kowalczyk", "tomasz.k@northwind.example.com")
CODE_BOT = Person("Northwind Code", "reviews@code.northwind.example.com")
MUM = Person("Helen Whitfield", "helen.whitfield@example.net")
SAM = Person("Sam Whitfield", "sam.whitfield@example.org")
MARGIT = Person("Margit Vogel", "margit@vogel.example")
RAILHOP = Person("Railhop Bookings", "no-reply@railhop.example.com")
LIST_MEMBERS = (
    Person("Marco Bianchi", "marco.bianchi@example.org"),
    Person("Aiko Tanaka", "aiko@tanaka.example"),
    Person("Ruth Adeyemi", "ruth.adeyemi@example.com"),
    Person("Jonas Lindqvist", "jonas@lindqvist.example"),
)
LIST_ADDRESS = "tokenizers@lists.example.org"
LIST_ID = "<tokenizers.lists.example.org>"

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December")


def _spam_to(rng: random.Random) -> str:
    choice = rng.random()
    if choice < 0.45:
        return USER_WORK.address
    if choice < 0.8:
        return formataddr((USER_HOME.name, USER_HOME.address))
    return "undisclosed-recipients:;"


def _spam_sender(rng: random.Random, names: Sequence[str], domains: Sequence[str], locals_: Sequence[str]) -> Person:
    local = f"{_pick(rng, locals_)}{rng.randint(2, 998)}"
    return Person(_pick(rng, names), f"{local}@{_pick(rng, domains)}")


def _spam_headers(rng: random.Random, reply_to: str | None = None) -> tuple[tuple[str, str], ...]:
    mailers = ("Microsoft Outlook Express 6.00.2900.2180", "The Bat! (v3.51.10) Home", "PHPMailer 5.2.9", "Mozilla Thunderbird 1.0.2")
    out = [("X-Mailer", _pick(rng, mailers))]
    if reply_to:
        out.append(("Reply-To", reply_to))
    return tuple(out)


def _spam_offset(rng: random.Random) -> float:
    return float(_pick(rng, ("-8", "-5", "-4", "0", "1", "3", "5.5", "8")))


# ---------------------------------------------------------------- ham topics

PROJECTS = ("Atlas", "billing revamp", "mobile onboarding", "data warehouse", "search relaunch", "partner portal")
AGENDA = (
    "status of the {project} milestones",
    "open hiring for the platform team",
    "moving CI to the new build servers",
    "the budget for the autumn offsite",
    "feedback from the pilot customers",
    "who covers support over the holidays",
    "the retention numbers from last quarter",
    "risks before the release freeze",
    "the vendor contract renewal",
    "the order of the launch tasks",
)
ACTIONS = (
    "send round the revised timeline",
    "book a slot with the design team",
    "update the risk register",
    "check the numbers with finance",
    "write up the decision on the wiki",
    "ask legal about the retention clause",
    "draft the customer announcement",
    "confirm the rate card with the agency",
)
ROOMS = ("Harbour", "Lighthouse", "3.14", "the small room on the fourth floor", "Orchard")
TIMES = ("9:30", "10:00", "11:15", "13:30", "14:00", "15:30", "16:00")

MEETING_SUBJECTS = (
    "Agenda for {weekday}'s {project} meeting",
    "{project} sync moved to {time}",
    "Notes from today's {project} review",
    "Re: {project} planning",
    "Quick question before the {project} meeting",
    "Action items from the {project} call",
)
MEETING_SENTENCES = (
    "I've moved the {project} sync to {weekday} at {time} because half the team is out on the original day.",
    "The room is {room}; the video link is in the invite as usual.",
    "Proposed agenda: {item1}, {item2}, and {item3}.",
    "Could you bring the latest figures on {item2}?",
    "Are you free for ten minutes on {weekday} to go over the slides first?",
    "Action items: {colleague} to {action1}, and you to {action2} by {weekday}.",
    "Let me know if the time clashes with anything and I'll shuffle it.",
    "Thanks for pulling the report together so quickly last week.",
    "We agreed to park {item3} until the next quarter.",
    "Finance confirmed the order went through, so we can start on {weekday}.",
    "I'll send the minutes round once I've tidied them up.",
    "If we run over, the second half moves to {weekday} at {time}.",
)
ICS_TEMPLATE = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Northwind//Calendar 3.2//EN\r\n"
    "METHOD:REQUEST\r\nBEGIN:VEVENT\r\nUID:{uid}@northwind.example.com\r\n"
    "DTSTAMP:{stamp}\r\nDTSTART:{start}\r\nDURATION:PT45M\r\n"
    "SUMMARY:{summary}\r\nLOCATION:{room}\r\n"
    "ORGANIZER;CN={org_name}:mailto:{org_addr}\r\n"
    "ATTENDEE;CN=Dana Whitfield:mailto:dana@northwind.example.com\r\n"
    "END:VEVENT\r\nEND:VCALENDAR\r\n"
)


def ham_meeting(rng: random.Random, k: int) -> Draft:
    sender = PRIYA if rng.random() < 0.6 else LENA
    colleague = "Lena" if sender is PRIYA else "Priya"
    project = _pick(rng, PROJECTS)
    items = rng.sample(AGENDA, 3)
    actions = rng.sample(ACTIONS, 2)
    values = {
        "project": project,
        "weekday": _pick(rng, WEEKDAYS),
        "time": _pick(rng, TIMES),
        "room": _pick(rng, ROOMS),
        "colleague": colleague,
        "item1": items[0].format(project=project),
        "item2": items[1].format(project=project),
        "item3": items[2].format(project=project),
        "action1": actions[0],
        "action2": actions[1],
    }
    subject = _pick(rng, MEETING_SUBJECTS).format(**values)
    subject = subject[0].upper() + subject[1:]
    sentences = [s.format(**values) for s in rng.sample(MEETING_SENTENCES, rng.randint(3, 5))]
    paragraphs = _group(rng, sentences)
    if k % 3 == 0:
        # A paragraph opening with "From " exercises the mboxrd quoting.
        paragraphs.insert(rng.randint(0, len(paragraphs)), f"From my side the only blocker is {values['item1']}.")
    greeting = _pick(rng, ("Hi Dana,", "Hi all,", "Morning Dana,", "Dana,"))
    signoff = _pick(rng, ("Cheers,", "Thanks,", "Best,")) + "\n" + sender.name.split()[0]
    headers: list[tuple[str, str]] = [("User-Agent", "Northwind Mail 4.1")]
    if subject.startswith("Re: "):
        headers.append(("In-Reply-To", f"<{_hex(rng, 16)}@northwind.example.com>"))
    attachment = None
    if k % 4 == 1:
        day = rng.randint(1, 28)
        ics = ICS_TEMPLATE.format(
            uid=_hex(rng, 20),
            stamp=f"202401{day:02d}T090000Z",
            start=f"202402{day:02d}T{rng.randint(8, 16):02d}0000Z",
            summary=f"{project} sync",
            room=values["room"],
            org_name=sender.name,
            org_addr=sender.address,
        )
        attachment = Attachment("invite.ics", "text", "calendar", ics.encode("ascii"))
    return Draft(
        sender=sender,
        to=formataddr((USER_WORK.name, USER_WORK.address)),
        subject=subject,
        text=_body(greeting, paragraphs, signoff),
        attachment=attachment,
        headers=tuple(headers),
        utc_offset_hours=1.0,
        office_hours=True,
    )


GARDEN_JOBS = ("new fence", "vegetable beds", "shed roof", "pond", "greenhouse")
FOODS = ("roast chicken", "a fish pie", "lasagne", "the lamb stew you like", "a curry")
OBJECTS = ("the orchid", "your old mug", "a vase of tulips", "the radio")
PLACES = ("Whitby", "the Lake District", "Cornwall", "Aunt Margit's", "the coast")
COUSINS = ("Ellie", "Josh", "Mia", "Noah")
HILLS = ("Pen y Fan", "Cat Bells", "the Wrekin", "Box Hill")
LENDABLES = ("camping stove", "drill", "big suitcase", "bike rack")
EVENTS = ("the folk festival", "the football on Saturday", "the comedy night", "the jazz gig")

MUM_SENTENCES = (
    "Dad finally finished the {garden_job} and is very pleased with himself.",
    "We're thinking of {food} for Sunday lunch, unless you'd rather have something else.",
    "Are you free on {weekday}? We could drive over around {hour} o'clock.",
    "The cat knocked {object} off the windowsill again.",
    "Grandma's birthday is on the {nth}, so don't forget to send a card.",
    "I'll bring the photos from {place} when we come.",
    "Your cousin {cousin} has started at the new school and seems to like it.",
    "Did the parcel arrive? The post office said it would take three days.",
    "Sam's team won the pub quiz prize again, a voucher for twenty pounds.",
    "The doctor says my knee is fine, nothing to worry about.",
    "Ring me when you get a minute, no rush.",
)
SAM_SENTENCES = (
    "Fancy a walk up {hill} on Saturday if the weather holds?",
    "Can you lend me your {lendable} for the weekend? Mine has given up.",
    "Mum says you're coming on Sunday, want a lift from the station?",
    "I've got a spare ticket for {event} on the {nth}, free if you want it.",
    "Have you seen the photos from {place}? I put them in the family album.",
    "We won the quiz again, Mum will tell you all about it.",
    "Order the birthday present for Grandma and I'll pay you back.",
)
FAMILY_SUBJECTS_MUM = ("Sunday lunch", "Re: Sunday", "Photos from {place}", "Grandma's birthday", "Did the parcel arrive?", "News from home")
FAMILY_SUBJECTS_SAM = ("Saturday?", "Spare ticket for {event}", "Weekend plans", "Quick favour", "Re: Grandma's present")


def ham_family(rng: random.Random, k: int) -> Draft:
    is_mum = rng.random() < 0.6
    values = {
        "garden_job": _pick(rng, GARDEN_JOBS),
        "food": _pick(rng, FOODS),
        "weekday": _pick(rng, WEEKDAYS + ("Saturday", "Sunday")),
        "hour": str(rng.randint(10, 12)),
        "object": _pick(rng, OBJECTS),
        "nth": f"{rng.randint(4, 28)}th",
        "place": _pick(rng, PLACES),
        "cousin": _pick(rng, COUSINS),
        "hill": _pick(rng, HILLS),
        "lendable": _pick(rng, LENDABLES),
        "event": _pick(rng, EVENTS),
    }
    if is_mum:
        sender, pool, subjects = MUM, MUM_SENTENCES, FAMILY_SUBJECTS_MUM
        greeting = _pick(rng, ("Hello love,", "Hi Dana,", "Dear Dana,"))
        signoff = _pick(rng, ("Love, Mum x", "Lots of love,\nMum", "Mum x"))
    else:
        sender, pool, subjects = SAM, SAM_SENTENCES, FAMILY_SUBJECTS_SAM
        greeting = _pick(rng, ("Hey sis,", "Dana,", "Hi"))
        signoff = _pick(rng, ("Sam", "S.", "cheers, Sam"))
    sentences = [s.format(**values) for s in rng.sample(pool, rng.randint(2, 4))]
    return Draft(
        sender=sender,
        to=formataddr((USER_HOME.name, USER_HOME.address)),
        subject=_pick(rng, subjects).format(**values),
        text=_body(greeting, _group(rng, sentences), signoff),
        headers=(("User-Agent", "Thunderbird 115.6"),) if is_mum else (),
        utc_offset_hours=0.0,
    )


# Written in German by an aunt whose mail client still sends Latin-1.
AUNT_SUBJECTS = ("Grüße aus Lübeck", "Danke für die Karte", "Fotos vom Ausflug")
AUNT_SENTENCES = (
    "vielen Dank für die schöne Karte zu meinem Geburtstag!",
    "Hier in Lübeck ist es seit Tagen grau, aber im Garten blühen schon die Tulpen.",
    "Onkel Jürgen lässt herzlich grüßen, seinem Knie geht es endlich besser.",
    "Wann kommst du uns im Sommer besuchen? Das Gästezimmer ist frei.",
    "Ich habe beim Ausflug nach {ort} viele Fotos gemacht und schicke sie dir bald.",
    "Deine Mutter hat erzählt, dass du viel Arbeit hast, pass gut auf dich auf.",
    "Am Wochenende backen wir wieder Apfelkuchen, schade, dass du so weit weg wohnst.",
)
AUNT_PLACES = ("Travemünde", "Ratzeburg", "Wismar", "Schwerin")


def ham_aunt(rng: random.Random, k: int) -> Draft:
    ort = _pick(rng, AUNT_PLACES)
    sentences = [s.format(ort=ort) for s in rng.sample(AUNT_SENTENCES, rng.randint(3, 4))]
    return Draft(
        sender=MARGIT,
        to=USER_HOME.address,
        subject=AUNT_SUBJECTS[k % len(AUNT_SUBJECTS)],
        text=_body("Liebe Dana,", _group(rng, sentences), "Herzliche Grüße\ndeine Tante Margit"),
        charset="iso-8859-1",
        headers=(("X-Mailer", "Microsoft Outlook 14.0"),),
        utc_offset_hours=1.0,
    )


REPOS = ("billing-api", "ingest", "webapp", "search-indexer")
MODULES = ("retry.py", "the parser module", "the session cache", "the CSV exporter", "the auth middleware")
FUNCTIONS = ("fetch_batch()", "parse_header()", "refresh_token()", "write_rows()", "merge_segments()")
PR_TITLES = (
    "Retry failed uploads with backoff",
    "Stream CSV export instead of buffering",
    "Fix race in session cache eviction",
    "Parse folded headers correctly",
    "Add rate limiting to the public endpoints",
    "Drop Python 3.8 support",
    "Validate payment webhooks before queueing",
)
THINGS = ("batch", "header", "token", "file", "account list")
REVIEW_SENTENCES = (
    "I left a few comments on {module}; nothing blocking.",
    "The loop in {function} can spin forever if the server keeps returning {code}, maybe cap the attempts?",
    "Could you add a test for the empty {thing} case?",
    "Nit: the name tmp2 doesn't say much, pending_rows would be clearer.",
    "Otherwise this looks good to me, I'll approve once CI is green.",
    "I ran the benchmark locally and it's about {pct}% faster on the big fixture.",
    "We should mention the changed default in the changelog.",
    "Does this need a migration for existing accounts, or is the old format still read?",
    "The error message should say which {thing} failed, otherwise support can't act on it.",
)
SNIPPETS = (
    "    for attempt in range(max_attempts):\n        try:\n            return {fn}\n        except TimeoutError:\n            time.sleep(backoff * 2 ** attempt)",
    "    rows = list(reader)\n    if not rows:\n        return 0\n    return {fn}",
)


def ham_review(rng: random.Random, k: int) -> Draft:
    repo = _pick(rng, REPOS)
    title = _pick(rng, PR_TITLES)
    num = rng.randint(120, 980)
    function = _pick(rng, FUNCTIONS)
    values = {
        "module": _pick(rng, MODULES),
        "function": function,
        "code": _pick(rng, ("429", "503", "an empty page")),
        "thing": _pick(rng, THINGS),
        "pct": str(rng.randint(8, 40)),
    }
    sentences = [s.format(**values) for s in rng.sample(REVIEW_SENTENCES, rng.randint(3, 4))]
    paragraphs = _group(rng, sentences)
    if k % 2 == 0:
        paragraphs.insert(0, f"From the traceback it looks like {function} is called twice when the connection drops.")
    if rng.random() < 0.5:
        paragraphs.insert(rng.randint(1, len(paragraphs)), _pick(rng, SNIPPETS).format(fn=function))
    url = f"https://code.northwind.example.com/northwind/{repo}/pull/{num}"
    subject = f"[northwind/{repo}] {title} (#{num})"
    if rng.random() < 0.5:
        # Direct mail from the colleague.
        return Draft(
            sender=TOMASZ,
            to=formataddr((USER_WORK.name, USER_WORK.address)),
            subject="Re: " + subject,
            text=_body("Hi Dana,", paragraphs + [f"PR: {url}"], "Tomasz"),
            headers=(("In-Reply-To", f"<{_hex(rng, 16)}@code.northwind.example.com>"),),
            utc_offset_hours=1.0,
            office_hours=True,
        )
    lead = f"Tomasz Kowalczyk requested changes on this pull request ({repo} #{num})."
    footer = f"Reply to this email directly or view it on Northwind Code:\n{url}\nYou are receiving this because your review was requested."
    text = _body(None, [lead] + paragraphs + [footer], None)
    return Draft(
        sender=CODE_BOT,
        to=USER_WORK.address,
        subject=subject,
        text=text,
        html=_html([lead] + paragraphs + [footer.replace("\n", " ")]),
        headers=(("Auto-Submitted", "auto-generated"), ("List-Unsubscribe", "<https://code.northwind.example.com/settings/notifications>")),
        utc_offset_hours=0.0,
        office_hours=True,
    )


CITIES = ("Amsterdam", "Brussels", "Cologne", "Lyon", "Zurich", "Vienna", "Edinburgh", "Copenhagen", "London")
HOTELS = ("Hotel Kanaal", "The Old Bakery Inn", "Parkhotel am Ring", "Maison Rivière")
TRAVEL_SUBJECTS = (
    "Booking confirmed: {origin} to {dest} on {date}",
    "Your e-ticket for {dest} ({ref})",
    "Reminder: your trip to {dest} is in 3 days",
    "Receipt for booking {ref}",
)
TRAVEL_SENTENCES = (
    "Please have your ticket ready on your phone when you board.",
    "Seat reservations are included; you can change them until two hours before departure.",
    "Need help? Reply to this message or visit the help centre in your account.",
    "Your hotel, {hotel}, is reserved for {nights} nights and paid in full.",
    "Remember to bring a valid passport or ID card for the border check.",
    "Cancellation is free until 24 hours before departure.",
)


def ham_travel(rng: random.Random, k: int) -> Draft:
    origin, dest = rng.sample(CITIES, 2)
    month = rng.randint(2, 9)
    values = {
        "origin": origin,
        "dest": dest,
        "ref": _ref(rng, 2, 6),
        "date": f"{rng.randint(1, 28)} {MONTHS[month - 1]} 2024",
        "hotel": _pick(rng, HOTELS),
        "nights": str(rng.randint(1, 4)),
    }
    amount = f"{rng.randint(39, 420)}.{rng.randint(0, 99):02d}"
    dep = f"{rng.randint(6, 19):02d}:{rng.choice((0, 15, 28, 42, 55)):02d}"
    arr = f"{rng.randint(9, 23):02d}:{rng.choice((3, 17, 34, 50)):02d}"
    details = f"Booking reference: {values['ref']}\nOutbound: {origin} {dep} -> {dest} {arr}, {values['date']}\nPassenger: Dana Whitfield\nTotal paid: EUR {amount}"
    manage = f"https://www.railhop.example.com/manage/{values['ref']}"
    paragraphs = [
        f"Thank you for booking with Railhop. Your payment of EUR {amount} has been received and your booking is confirmed.",
        details,
        " ".join(s.format(**values) for s in rng.sample(TRAVEL_SENTENCES, 2)),
        f"View or change your booking: {manage}",
    ]
    footer = "Railhop Ltd, 1 Station Approach, Example City. You receive this email because you made a booking; it is not a marketing message."
    return Draft(
        sender=RAILHOP,
        to=formataddr((USER_HOME.name, USER_HOME.address)),
        subject=_pick(rng, TRAVEL_SUBJECTS).format(**values),
        text=_body("Dear Dana Whitfield,", paragraphs, footer),
        html=_html(["Dear Dana Whitfield,"] + paragraphs + [footer]),
        cte="base64" if k % 2 == 0 else None,
        headers=(("X-Mailer", "Railhop Notify 2.7"),),
        utc_offset_hours=0.0,
    )


LIST_THREADS = (
    "Unicode normalisation before tokenising",
    "Benchmark numbers for the new splitter",
    "Release 2.4 planning",
    "Handling of URLs in tokens",
    "Stop words: keep or drop?",
    "CI failures on Windows",
    "Handling of “smart quotes” in subjects",
)
LIST_SENTENCES = (
    "I tried NFKC normalisation on the test corpus and the vocabulary shrank by about {pct}%.",
    "Has anyone measured the effect of lower-casing on the false positive rate?",
    "+1 to dropping the legacy splitter in the next release.",
    "The Windows runners fail because the path separator leaks into the cache key.",
    "I'd keep URLs as a single token but also emit the host name separately.",
    "Thanks {name}, the patch fixes it for me too.",
    "Credit to {name} for tracking down the memory leak in the stream reader.",
    "The rate limit on the package index bit us again during the nightly build.",
    "I can take the release notes if someone else handles the tagging.",
    "Numbers on my laptop: {n} messages per second before, {m} after.",
    "Dropping stop words cost us accuracy on short messages, so I'd keep them.",
    "Let's decide at the call on {weekday} and stop bikeshedding here.",
)
LIST_FOOTER = "--\ntokenizers mailing list\ntokenizers@lists.example.org\nTo unsubscribe: https://lists.example.org/mailman/listinfo/tokenizers"


def ham_list(rng: random.Random, k: int) -> Draft:
    sender, other = rng.sample(LIST_MEMBERS, 2)
    values = {
        "pct": str(rng.randint(3, 19)),
        "name": other.name.split()[0],
        "n": str(rng.randint(800, 2400)),
        "m": str(rng.randint(2500, 6000)),
        "weekday": _pick(rng, WEEKDAYS),
    }
    thread = _pick(rng, LIST_THREADS)
    is_reply = rng.random() < 0.7
    mine = [s.format(**values) for s in rng.sample(LIST_SENTENCES, rng.randint(2, 4))]
    paragraphs: list[str] = []
    headers: list[tuple[str, str]] = [
        ("List-Id", f"Tokenizer developers {LIST_ID}"),
        ("List-Unsubscribe", "<mailto:tokenizers-leave@lists.example.org>"),
        ("Precedence", "list"),
    ]
    if is_reply:
        quoted = textwrap.fill(_pick(rng, LIST_SENTENCES).format(**values), WRAP - 2)
        paragraphs.append(f"On {_pick(rng, WEEKDAYS)}, {other.name} wrote:\n" + "\n".join("> " + line for line in quoted.splitlines()))
        parent = f"<{_hex(rng, 12)}@{other.domain}>"
        headers += [("In-Reply-To", parent), ("References", parent)]
    paragraphs += _group(rng, mine)
    return Draft(
        sender=sender,
        to=LIST_ADDRESS,
        subject=("Re: " if is_reply else "") + f"[tokenizers] {thread}",
        text=_body(None, paragraphs, sender.name.split()[0] + "\n\n" + LIST_FOOTER),
        headers=tuple(headers),
        utc_offset_hours=float(_pick(rng, ("1", "9", "0", "2"))),
    )


# --------------------------------------------------------------- spam topics

PHARMA_NAMES = ("Online Pharmacy", "MedsDirect", "Canadian Health Store", "Dr. Mark Stevens")
PHARMA_DOMAINS = ("rx-discount-store.test", "cheapmeds-online.test", "pharma-express.example")
PHARMA_SUBJECTS = (
    "Save up to {pct}% on your prescriptions",
    "V1agra and C1alis at wholesale prices",
    "Your order #{num} is ready: discreet shipping",
    "Top quality meds, no prescription needed",
    "Lose {pounds} pounds in {weeks} weeks, guaranteed!",
    "Re: your pharmacy order",
)
PHARMA_SENTENCES = (
    "Buy generic medications online at the lowest prices on the internet.",
    "No prescription required, no doctor visits, no embarrassment.",
    "We ship worldwide in discreet packaging within 24 hours.",
    "Viagra from $0.{cents} per pill, Cialis from $1.{cents2} per pill!",
    "Over {customers} satisfied customers trust our licensed pharmacy.",
    "FREE bonus pills with every order over ${amount}!",
    "Order today and get FREE express shipping.",
    "Weight loss pills, painkillers, sleeping aids and more at {pct}% off.",
    "100% money back guarantee if you are not satisfied.",
)


def spam_pharmacy(rng: random.Random, k: int) -> Draft:
    domain = _pick(rng, PHARMA_DOMAINS)
    values = {
        "pct": str(rng.choice((50, 65, 70, 80, 85))),
        "num": str(rng.randint(10000, 99999)),
        "pounds": str(rng.randint(10, 30)),
        "weeks": str(rng.randint(2, 6)),
        "cents": str(rng.randint(59, 99)),
        "cents2": str(rng.randint(10, 49)),
        "customers": _money(rng, 50000, 900000, 1000),
        "amount": str(rng.choice((99, 150, 200))),
    }
    sentences = [s.format(**values) for s in rng.sample(PHARMA_SENTENCES, rng.randint(3, 5))]
    link = f"Visit our store: http://www.{domain}/?ref={_hex(rng, 6)}"
    remove = "To be removed from our mailing list, reply with REMOVE in the subject."
    paragraphs = _group(rng, sentences) + [link, remove]
    return Draft(
        sender=_spam_sender(rng, PHARMA_NAMES, (domain,), ("sales", "orders", "info")),
        to=_spam_to(rng),
        subject=_pick(rng, PHARMA_SUBJECTS).format(**values),
        text=_body(_pick(rng, ("Dear Customer,", "Hello!", None)), paragraphs, None),
        html=_html(paragraphs, shouty=True) if k % 3 == 1 else None,
        cte="base64" if k % 2 == 0 else None,
        headers=_spam_headers(rng),
        utc_offset_hours=_spam_offset(rng),
    )


LOTTO_NAMES = ("International Lottery Commission", "Euro Millions Promo Award", "Claims Department", "Global Sweepstakes Board")
LOTTO_DOMAINS = ("lotto-claims.example", "intl-prize-board.test", "promo-award.test")
LOTTO_SUBJECTS = (
    "CONGRATULATIONS! You have won ${amount}",
    "Final notice: unclaimed prize of ${amount}",
    "Your email address has been selected in our annual draw",
    "WINNER NOTIFICATION - Ref: {ref}",
)
LOTTO_SENTENCES = (
    "We are pleased to inform you that your email address was selected in our international online draw held on {date}.",
    "You have been awarded the sum of ${amount} in the {category} category.",
    "Your winning ticket number is {ticket} with serial number {serial}.",
    "To claim your prize, send your full name, address, phone number and a copy of your passport to our claims agent.",
    "Keep this notification confidential until your claim has been processed.",
    "A processing fee of ${fee} must be paid before the funds can be released to your account.",
    "Failure to respond within {days} days will result in the prize being forfeited.",
    "Call our claims agent now on +1-202-555-01{phone}.",
)
LOTTO_AGENTS = ("Mrs. Grace Williams", "Dr. Peter Collins", "Mr. James Morgan")


def spam_lottery(rng: random.Random, k: int) -> Draft:
    values = {
        "amount": _money(rng, 500000, 2500000, 50000),
        "ref": _ref(rng),
        "date": f"{rng.randint(1, 28)} {_pick(rng, MONTHS)} 2024",
        "category": _pick(rng, ("second", "first", "bonus", "online email")),
        "ticket": f"{rng.randint(10, 99)}-{rng.randint(1000, 9999)}-{rng.randint(100, 999)}",
        "serial": _ref(rng, 2, 7),
        "fee": str(rng.choice((195, 250, 385, 420))),
        "days": str(rng.choice((7, 10, 14))),
        "phone": f"{rng.randint(0, 99):02d}",
    }
    if k % 2 == 0:
        # French subject with an accent and a euro sign: becomes an RFC 2047 word.
        subject = f"Félicitations ! Vous avez gagné {values['amount'].replace(',', ' ')} €"
    else:
        subject = _pick(rng, LOTTO_SUBJECTS).format(**values)
    agent = _pick(rng, LOTTO_AGENTS)
    sentences = [s.format(**values) for s in rng.sample(LOTTO_SENTENCES, rng.randint(4, 6))]
    paragraphs = _group(rng, sentences) + ["Congratulations once again from all our staff!"]
    reply_to = f"claims.agent{rng.randint(10, 99)}@freemail.example"
    return Draft(
        sender=_spam_sender(rng, LOTTO_NAMES, LOTTO_DOMAINS, ("award", "notify", "promo")),
        to=_spam_to(rng),
        subject=subject,
        text=_body("Dear Winner,", paragraphs, f"{agent}\nClaims Coordinator"),
        html=_html(["Dear Winner,"] + paragraphs, shouty=True) if k % 3 == 2 else None,
        headers=_spam_headers(rng, reply_to),
        utc_offset_hours=_spam_offset(rng),
    )


LOAN_NAMES = ("QuickCash Loans", "Approval Center", "Lending Team", "Mortgage Savers")
LOAN_DOMAINS = ("fast-approval-loans.test", "quickcash-now.example", "lowrate-direct.test")
LOAN_SUBJECTS = (
    "Pre-approved: borrow up to ${amount} today",
    "Bad credit? No problem!",
    "Lower your mortgage rate to {rate}%",
    "Cash in your account within 24 hours",
    "Re: your loan application",
)
LOAN_SENTENCES = (
    "You have been pre-approved for a personal loan of up to ${amount}.",
    "Bad credit, no credit, bankruptcy: everyone is accepted.",
    "Rates as low as {rate}% APR, fixed for the life of the loan.",
    "No paperwork, no credit check, money in your account by tomorrow.",
    "Consolidate all your debts into one low monthly payment.",
    "This offer expires on {date}, act now to lock in your rate.",
    "Homeowners can save ${save} a year by refinancing today.",
)


def spam_loan(rng: random.Random, k: int) -> Draft:
    domain = _pick(rng, LOAN_DOMAINS)
    values = {
        "amount": _money(rng, 5000, 75000, 500),
        "rate": f"{rng.randint(1, 4)}.{rng.randint(1, 9)}",
        "date": f"{_pick(rng, MONTHS)} {rng.randint(1, 28)}",
        "save": _money(rng, 800, 6000, 50),
    }
    sentences = [s.format(**values) for s in rng.sample(LOAN_SENTENCES, rng.randint(3, 5))]
    apply = f"Apply in 2 minutes: http://{domain}/apply?id={_hex(rng, 8)}"
    optout = f"You are receiving this because you opted in to partner offers. To unsubscribe visit http://{domain}/optout"
    paragraphs = _group(rng, sentences) + [apply, optout]
    return Draft(
        sender=_spam_sender(rng, LOAN_NAMES, (domain,), ("offers", "approval", "info")),
        to=_spam_to(rng),
        subject=_pick(rng, LOAN_SUBJECTS).format(**values),
        text=_body(_pick(rng, ("Dear Homeowner,", "Hello,", None)), paragraphs, None),
        html=_html(paragraphs, shouty=True) if k % 2 == 0 else None,
        headers=_spam_headers(rng),
        utc_offset_hours=_spam_offset(rng),
    )


COIN_NAMES = ("Bitcoin Profit Club", "Elena from CoinVault", "CoinVault Rewards", "AI Trade Desk")
COIN_DOMAINS = ("coinvault-rewards.test", "btc-profit-club.example", "ai-trade-desk.test")
COINS = ("BTC", "ETH", "SOLX", "MoonToken")
COIN_SUBJECTS = (
    "Turn $250 into ${amount} in {days} days",
    "Your {coin} wallet bonus is waiting",
    "Last chance: {coin} presale closes tonight",
    "The trading bot the banks don't want you to know about",
    "Withdrawal of {small} {coin} pending your confirmation",
    "Make money from home with {coin} \U0001f680",
)
COIN_SENTENCES = (
    "Our AI trading bot made {pct}% returns last month, fully automated.",
    "Deposit as little as $250 and watch your balance grow every single day.",
    "Early investors in {coin} have already made life-changing profits.",
    "Guaranteed returns, zero risk, withdraw anytime.",
    "Send {small} {coin} to the wallet below and receive double back instantly: {wallet}",
    "Only {places} places left in this round, act before midnight.",
    "Join thousands of members who quit their jobs this year.",
    "Your account has a pending bonus that expires in 24 hours.",
)


def spam_crypto(rng: random.Random, k: int) -> Draft:
    domain = _pick(rng, COIN_DOMAINS)
    wallet = "bc1q" + "".join(rng.choice("023456789acdefghjklmnpqrstuvwxyz") for _ in range(38))
    values = {
        "amount": _money(rng, 8000, 50000, 1000),
        "days": str(rng.randint(7, 30)),
        "coin": _pick(rng, COINS),
        "small": f"0.{rng.randint(1, 9)}",
        "pct": str(rng.randint(140, 900)),
        "wallet": wallet,
        "places": str(rng.randint(3, 17)),
    }
    sentences = [s.format(**values) for s in rng.sample(COIN_SENTENCES, rng.randint(3, 5))]
    paragraphs = _group(rng, sentences) + [f"Register now: https://{domain}/join?ref={_hex(rng, 8)}"]
    return Draft(
        sender=_spam_sender(rng, COIN_NAMES, (domain,), ("elena", "rewards", "vip")),
        to=_spam_to(rng),
        subject=_pick(rng, COIN_SUBJECTS).format(**values),
        text=_body(_pick(rng, ("Hi friend,", "Dear investor,", None)), paragraphs, _pick(rng, ("To your success,\nElena", "The CoinVault Team"))),
        html=_html(paragraphs, shouty=True) if k % 3 == 0 else None,
        cte="base64" if k % 2 == 1 else None,
        headers=_spam_headers(rng),
        utc_offset_hours=_spam_offset(rng),
    )


PHISH_BRANDS = (
    ("Northbank Online Security", "northbank-secure.verify-login.test", "www.northbank.example.com"),
    ("Mailbox Administrator", "mail-quota-support.test", "webmail.example.net"),
    ("PayWise Service", "paywise-account-review.test", "www.paywise.example.com"),
    ("Parcel Delivery Notice", "parcel-redelivery.test", "track.parcels.example.com"),
)
PHISH_SUBJECTS = (
    "Your account has been suspended",
    "Unusual sign-in activity detected",
    "Action required: verify your payment details",
    "Mailbox storage full: {n} messages on hold",
    "Your package could not be delivered",
)
PHISH_SENTENCES = (
    "We detected unusual sign-in activity on your account from a new device in {country}.",
    "For your security, access to your account has been temporarily limited.",
    "Please verify your identity within 24 hours to avoid permanent suspension.",
    "If you did not make this request, sign in immediately to secure your account.",
    "Your last payment could not be processed, please update your card details.",
    "{n} incoming messages are on hold until you confirm your mailbox.",
)
COUNTRIES = ("Romania", "Nigeria", "Brazil", "Vietnam", "an unknown location")
INVOICE_SENTENCES = (
    "Please find attached the overdue invoice {ref} for ${amount}.",
    "Payment must be made today to avoid a late fee and collection charges.",
    "Open the attached document and enable editing to view the invoice.",
    "Our records show that your order was shipped on {date} and remains unpaid.",
)


def spam_phishing(rng: random.Random, k: int) -> Draft:
    values = {
        "country": _pick(rng, COUNTRIES),
        "n": str(rng.randint(12, 95)),
        "ref": _ref(rng),
        "amount": f"{rng.randint(240, 4800):,}.{rng.randint(0, 99):02d}",
        "date": f"{_pick(rng, MONTHS)} {rng.randint(1, 28)}",
    }
    if k % 3 == 1:
        # Fake invoice with a zipped "document"; the bytes are only a zip header
        # and noise, nothing executable.
        sender = _spam_sender(rng, ("Accounts Payable", "Billing Department"), ("invoices-portal.test", "billing-notice.example"), ("ap", "billing"))
        sentences = [s.format(**values) for s in rng.sample(INVOICE_SENTENCES, 3)]
        data = b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + rng.randbytes(rng.randint(180, 320))
        return Draft(
            sender=sender,
            to=_spam_to(rng),
            subject=f"Invoice {values['ref']} overdue, payment required",
            text=_body("Dear customer,", _group(rng, sentences), "Kind regards,\nAccounts Payable"),
            attachment=Attachment(f"Invoice_{values['ref']}.zip", "application", "zip", data),
            headers=_spam_headers(rng),
            utc_offset_hours=_spam_offset(rng),
        )
    brand, domain, shown = PHISH_BRANDS[rng.randrange(len(PHISH_BRANDS))]
    # The text shows the raw link; the HTML shows a trustworthy-looking name
    # over the same raw link.
    folder = _pick(rng, ("secure", "account", "verify"))
    link = f"http://{_doc_ip(rng)}/{folder}/login.php?session={_hex(rng, 12)}"
    sentences = [s.format(**values) for s in rng.sample(PHISH_SENTENCES, 3)]
    paragraphs = _group(rng, sentences) + [f"Click here to confirm your details: {link}", "Thank you for being a valued customer."]
    return Draft(
        sender=Person(brand, f"no-reply@{domain}"),
        to=_spam_to(rng),
        subject=_pick(rng, PHISH_SUBJECTS).format(**values),
        text=_body("Dear Customer,", paragraphs, f"{brand} Team"),
        html=_html(["Dear Customer,"] + paragraphs, link_text=f"https://{shown}/secure"),
        headers=_spam_headers(rng),
        utc_offset_hours=_spam_offset(rng),
    )


WATCH_NAMES = ("Replica Watches Outlet", "Luxury Timepieces", "Swiss Watch Store")
WATCH_DOMAINS = ("swiss-replicas.test", "luxury-timepieces.example", "watch-outlet.test")
WATCH_SUBJECTS = (
    "Rolex, Omega, Breitling from ${price}",
    "Luxury watches at {pct}% off",
    "Impress everyone with a Swiss-look watch",
    "Re: watches",
    "The perfect gift: designer replicas",
)
WATCH_SENTENCES = (
    "Top quality replica watches, indistinguishable from the original.",
    "Rolex, Omega, Cartier, Breitling, Tag Heuer and more from only ${price}.",
    "Swiss-made movement, sapphire crystal, one year warranty.",
    "Why pay ${big} when you can have the same look for ${price}?",
    "Free worldwide shipping on all orders this week.",
    "The perfect gift for birthdays, anniversaries and business partners.",
    "Nobody will ever know the difference.",
)


def spam_watches(rng: random.Random, k: int) -> Draft:
    domain = _pick(rng, WATCH_DOMAINS)
    values = {"price": str(rng.choice((89, 119, 149, 199))), "pct": str(rng.choice((70, 80, 90))), "big": _money(rng, 6000, 25000, 500)}
    sentences = [s.format(**values) for s in rng.sample(WATCH_SENTENCES, rng.randint(3, 5))]
    paragraphs = _group(rng, sentences) + [f"Visit our online store: http://www.{domain}/"]
    is_html_only = k % 2 == 0
    return Draft(
        sender=_spam_sender(rng, WATCH_NAMES, (domain,), ("shop", "sales", "deals")),
        to=_spam_to(rng),
        subject=_pick(rng, WATCH_SUBJECTS).format(**values),
        text=_body(None, paragraphs, None),
        html=_html(paragraphs, shouty=True) if is_html_only or rng.random() < 0.4 else None,
        html_only=is_html_only,
        headers=_spam_headers(rng),
        utc_offset_hours=_spam_offset(rng),
    )


# Russian bulk-mail advertising (seminars, "mailing services"), sent as KOI8-R.
RU_SUBJECTS = ("Семинар: налоговые проверки, скидка {pct}%", "Реклама вашего бизнеса: {n} тысяч адресов за день")
RU_SENTENCES = (
    'Приглашаем вас на практический семинар "Налоговые проверки: как защитить свой бизнес".',
    "Семинар пройдёт {day} числа в центре Москвы, начало в 10:00.",
    "Стоимость участия {price} рублей, при оплате до конца недели скидка {pct}%.",
    "Закажите рекламную рассылку: {n} тысяч адресов ваших будущих клиентов за один день.",
    "Низкие цены, гарантия доставки писем и подробный отчёт о результатах.",
    "Подробности и запись по адресу {addr}.",
)


def spam_russian(rng: random.Random, k: int) -> Draft:
    domain = _pick(rng, ("biz-rassylka.test", "seminar-msk.example"))
    addr = f"info@{domain}"
    values = {
        "pct": str(rng.choice((10, 15, 20))),
        "n": str(rng.choice((300, 500, 800))),
        "day": str(rng.randint(2, 27)),
        "price": _money(rng, 4500, 12000, 500),
        "addr": addr,
    }
    sentences = [s.format(**values) for s in rng.sample(RU_SENTENCES, 4)]
    footer = "Если это письмо попало к вам по ошибке, просто удалите его."
    return Draft(
        sender=Person("Деловая рассылка", addr),
        to=_spam_to(rng),
        subject=_pick(rng, RU_SUBJECTS).format(**values),
        text=_body("Уважаемые коллеги!", _group(rng, sentences), footer),
        charset="koi8-r",
        headers=(("X-Mailer", "The Bat! (v3.51.10) Home"),),
        utc_offset_hours=3.0,
    )


# How many of each topic go into each file.  Counts add up to the sizes in the
# module docstring; every topic appears often enough that the k-based feature
# switches (k % 2, k % 3, k % 4) each fire at least once.
TRAIN_HAM_PLAN: tuple[tuple[TopicFn, int], ...] = ((ham_meeting, 13), (ham_family, 11), (ham_aunt, 2), (ham_review, 12), (ham_travel, 8), (ham_list, 14))
TRAIN_SPAM_PLAN: tuple[tuple[TopicFn, int], ...] = (
    (spam_pharmacy, 10),
    (spam_lottery, 10),
    (spam_loan, 9),
    (spam_crypto, 10),
    (spam_phishing, 10),
    (spam_watches, 10),
    (spam_russian, 1),
)
INBOX_HAM_PLAN: tuple[tuple[TopicFn, int], ...] = ((ham_meeting, 2), (ham_family, 2), (ham_review, 2), (ham_travel, 2), (ham_list, 2))
INBOX_SPAM_PLAN: tuple[tuple[TopicFn, int], ...] = ((spam_pharmacy, 2), (spam_lottery, 1), (spam_loan, 2), (spam_crypto, 2), (spam_phishing, 2), (spam_watches, 1))


# ---------------------------------------------------------------- rendering


def _pick_time(rng: random.Random, start: dt.datetime, days: int, offset_hours: float, office_hours: bool) -> dt.datetime:
    """A time in [start, start + days) in the sender's zone, deterministic in rng."""
    tz = dt.timezone(dt.timedelta(hours=offset_hours))
    while True:
        when = (start + dt.timedelta(seconds=rng.randrange(days * 86400))).astimezone(tz)
        if not office_hours or (when.weekday() < 5 and 8 <= when.hour < 19):
            return when


def _envelope_line(sender: str, when: dt.datetime) -> bytes:
    utc = when.astimezone(dt.timezone.utc)
    stamp = f"{WEEKDAY_ABBR[utc.weekday()]} {MONTH_ABBR[utc.month - 1]} {utc.day:2d} {utc:%H:%M:%S} {utc.year}"
    return f"From {sender} {stamp}\n".encode("ascii")


def _render_modern(rng: random.Random, draft: Draft, when: dt.datetime, msgid: str) -> bytes:
    msg = EmailMessage()
    msg["From"] = formataddr((draft.sender.name, draft.sender.address))
    msg["To"] = draft.to
    msg["Subject"] = draft.subject
    msg["Date"] = format_datetime(when)
    msg["Message-ID"] = msgid
    for name, value in draft.headers:
        msg[name] = value
    msg["MIME-Version"] = "1.0"
    if draft.html_only and draft.html is not None:
        msg.set_content(draft.html, subtype="html", cte=draft.cte)
    else:
        msg.set_content(draft.text, cte=draft.cte)
        if draft.html is not None:
            msg.add_alternative(draft.html, subtype="html", cte=draft.cte)
    if draft.attachment is not None:
        a = draft.attachment
        if a.maintype == "text":
            msg.add_attachment(a.data.decode("ascii"), subtype=a.subtype, filename=a.filename)
        else:
            msg.add_attachment(a.data, maintype=a.maintype, subtype=a.subtype, filename=a.filename)
    for part in msg.walk():
        if part is not msg:
            # EmailMessage stamps every new part; real clients put it only on top.
            del part["MIME-Version"]
        if part.is_multipart():
            # Set boundaries ourselves: the generator would draw them from the
            # global random module, which would break byte-identical output.
            part.set_boundary(f"=_Part_{_hex(rng, 16)}")
    buf = io.BytesIO()
    BytesGenerator(buf, mangle_from_=False, policy=policy.default).flatten(msg)
    return buf.getvalue()


def _render_legacy(draft: Draft, when: dt.datetime, msgid: str) -> bytes:
    """Render a single-part text message in a non-UTF-8 charset.

    compat32 puts the charset into the RFC 2047 words of the subject and the
    sender's name, as older clients do (policy.default would re-encode them
    as UTF-8).
    """
    msg = Message()
    msg["From"] = formataddr((draft.sender.name, draft.sender.address), charset=draft.charset)
    msg["To"] = draft.to
    msg["Subject"] = Header(draft.subject, draft.charset)
    msg["Date"] = format_datetime(when)
    msg["Message-ID"] = msgid
    for name, value in draft.headers:
        msg[name] = value
    msg.set_payload(draft.text, charset=Charset(draft.charset))
    buf = io.BytesIO()
    BytesGenerator(buf, mangle_from_=False, policy=policy.compat32).flatten(msg)
    return buf.getvalue()


def render_mbox_entry(rng: random.Random, draft: Draft, when: dt.datetime) -> bytes:
    """One mboxrd entry: envelope line, the quoted message, one blank line."""
    stamp = f"{when.astimezone(dt.timezone.utc):%Y%m%d%H%M%S}"
    msgid = f"<{stamp}.{_hex(rng, 10)}@{draft.sender.domain}>"
    if draft.charset.lower() in ("utf-8", "us-ascii"):
        raw = _render_modern(rng, draft, when, msgid)
    else:
        raw = _render_legacy(draft, when, msgid)
    raw = MBOXRD_FROM.sub(rb">\1", raw)
    if not raw.endswith(b"\n"):
        raw += b"\n"
    return _envelope_line(draft.sender.address, when) + raw + b"\n"


def _generate(rng: random.Random, plan: Sequence[tuple[TopicFn, int, str]], start: dt.datetime, days: int) -> list[tuple[str, bytes]]:
    """Draft, date and render every message of a plan; return (label, entry) by date."""
    topics = [(fn, label) for fn, n, label in plan for _ in range(n)]
    rng.shuffle(topics)
    seen: dict[TopicFn, int] = {}
    dated: list[tuple[dt.datetime, str, bytes]] = []
    for fn, label in topics:
        k = seen.get(fn, 0)
        seen[fn] = k + 1
        draft = fn(rng, k)
        when = _pick_time(rng, start, days, draft.utc_offset_hours, draft.office_hours)
        dated.append((when, label, render_mbox_entry(rng, draft, when)))
    dated.sort(key=lambda item: item[0])
    return [(label, entry) for _, label, entry in dated]


def _labelled(plan: Sequence[tuple[TopicFn, int]], label: str) -> list[tuple[TopicFn, int, str]]:
    return [(fn, n, label) for fn, n in plan]


@dataclass(frozen=True, slots=True)
class SampleSummary:
    train_ham: int
    train_spam: int
    inbox: int
    total_bytes: int


def write_sample(out: Path, seed: int) -> SampleSummary:
    """Write the four sample files into out (created if missing, files replaced)."""
    rng = random.Random(seed)
    ham = _generate(rng, _labelled(TRAIN_HAM_PLAN, HAM), TRAIN_START, TRAIN_DAYS)
    spam = _generate(rng, _labelled(TRAIN_SPAM_PLAN, SPAM), TRAIN_START, TRAIN_DAYS)
    inbox = _generate(rng, _labelled(INBOX_HAM_PLAN, HAM) + _labelled(INBOX_SPAM_PLAN, SPAM), INBOX_START, INBOX_DAYS)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        TRAIN_HAM_FILE: b"".join(entry for _, entry in ham),
        TRAIN_SPAM_FILE: b"".join(entry for _, entry in spam),
        INBOX_FILE: b"".join(entry for _, entry in inbox),
        TRUTH_FILE: "".join(f"{i}\t{label}\n" for i, (label, _) in enumerate(inbox, 1)).encode("ascii"),
    }
    for name, data in files.items():
        (out / name).write_bytes(data)
    return SampleSummary(len(ham), len(spam), len(inbox), sum(len(d) for d in files.values()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write a small synthetic ham/spam mail set (mboxrd) for trying spamfilter.",
        epilog="Example: python corpora/make_sample.py --out /tmp/sample --seed 7",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed; same seed, same bytes (default: {DEFAULT_SEED})")
    args = parser.parse_args(argv)
    summary = write_sample(args.out, args.seed)
    print(f"wrote {summary.train_ham} ham + {summary.train_spam} spam training messages and {summary.inbox} inbox messages ({summary.total_bytes:,} bytes) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
