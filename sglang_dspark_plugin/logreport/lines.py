"""The grammar of the plugin's log lines, and which lines the report trusts as the plugin's own.

Each line kind the telemetry writes has one full-line pattern here, anchored at the end of the line:
a line that carries the plugin's text followed by anything else is not one of its lines. What comes
before the text is the logging prefix of whatever format the server used (sglang's
``[2026-12-03 10:00:00 TP0]``, a DP tag, a timestamp, a level); the report trusts it as a prefix only
when it is at most ``MAX_PREFIX`` characters and holds no quote character. A request's text never
reaches the log bare: sglang logs requests as Python reprs (quoted, with newlines escaped), so text a
client sent that imitates the plugin's lines sits after a quote and is ignored (``quoted``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_PREFIX = 200
MAX_LINE_BYTES = 1 << 20
"""The longest line the report reads (the plugin's longest, a per-round line at a batch of tens of
thousands of requests, is well under it); a longer one is counted as ``overlong`` and skipped."""
MARKERS = ("dspark accept ", "dspark probe: ", "dspark host cost ")
_PREFIX = rf"(?P<prefix>[^'\"]{{0,{MAX_PREFIX}}}?)"
_DP = r"(?: dp=(?P<dp>\d{1,6}))?$"  # the reader strips trailing blanks: no pattern scans a run of them
_TAG = r"harvest=(?P<harvest>dflash|dspark)\((?P<source>env|census|default)\)"
_NUM = r"(?:n/a|\d{1,9}\.\d\d)"

ROUND = re.compile(
    _PREFIX + r"dspark accept round=(?P<round>\d{1,15}) bs=(?P<bs>\d{1,7}) "
    r"accept_len=\[(?P<lengths>[0-9,]{0,1048576})\] mean=(?P<mean>\d{1,9}\.\d\d) " + _TAG + _DP
)
SUMMARY = re.compile(
    _PREFIX + r"dspark accept summary rounds=(?P<rounds>\d{1,15}) request_rounds=(?P<reqs>\d{1,18}) "
    rf"mean_accept_len=(?P<mean>{_NUM}) last_(?P<last_n>\d{{1,15}})_rounds=(?P<last>{_NUM}) "
    rf"window_mean=(?P<window>{_NUM}) per_position=\[(?P<rates>[0-9.,]{{0,20000}})\]"
    r"(?: by_context=\[(?P<by_context>[<=>0-9k:.,/]{0,4000})\])? " + _TAG + r" "
    r"gamma=(?P<gamma>\d{1,4}) rounds_per_s=(?:n/a|[\d.]{1,20}) alarms=(?P<alarms>\d{1,12}) "
    r"invalid_rounds=(?P<invalid>\d{1,15})(?: probe=(?P<probe>[a-z-]{1,20}))?"
    r"(?: held_requests=(?P<held>\d{1,12}) held_rounds=\d{1,12} swept_requests=(?P<swept>\d{1,15}) "
    r"queued_steps=(?P<queued>\d{1,12}))?" + _DP
)
STARTUP = re.compile(
    _PREFIX + r"dspark accept telemetry: " + _TAG + r" gamma=(?P<gamma>\d{1,4}) "
    r"per_round_level=(?:Level \d{1,2}|\S{1,20}) summary_every=\d{1,10} "
    r"alarm=(?:off|mean<(?P<threshold>\d{1,4}\.\d\d) "
    r"over (?P<window>\d{1,6}) rounds after (?P<warmup>\d{1,10})) metrics=(?:on|off)"
    r"(?: context_buckets=\[(?P<buckets>[<=>0-9k,]{1,400})\])?" + _DP
)
ALARM = re.compile(
    _PREFIX + r"dspark accept ALARM: mean accept length (?P<mean>\d{1,9}\.\d\d) over the last "
    r"(?P<window>\d{1,6}) rounds \((?P<reqs>\d{1,15}) request-rounds\) is below "
    r"(?P<threshold>\d{1,4}\.\d\d) \(gamma=(?P<gamma>\d{1,4}), max \d{1,5}\)\. "
    r"harvest=(?P<harvest>dflash|dspark) source=(?P<source>env|census|default) (?P<rest>.{0,20000}?)" + _DP
)
PROBE = re.compile(
    _PREFIX + r"dspark probe: (?P<message>[a-z][^\n]{0,300}?\(match rate own (?P<own>\d\.\d\d), "
    r"one later (?P<late>\d\.\d\d), one earlier (?P<early>\d\.\d\d); (?P<scored>\d{1,15}) drafts "
    r"scored\))\." + _DP
)
HOST_COST = re.compile(
    _PREFIX + r"dspark host cost rounds=(?P<rounds>\d{1,15}) plugin_us_per_round=(?P<us>[\d.]{1,20}) "
    r"round_us_median=(?P<round_us>[\d.]{1,20}) plugin_fraction=(?P<fraction>[\d.]{1,20})"
    r"(?: queue_thread_us_per_round=(?P<thread_us>[\d.]{1,20}))?" + _DP
)
REQUEST = re.compile(
    _PREFIX + r"dspark accept request rid=(?P<rid>[A-Za-z0-9._:%-]{1,300}) rounds=(?P<rounds>\d{1,12}) "
    r"accepted_drafts=(?P<accepted>\d{1,15}) accept_len=(?P<mean>\d{1,6}\.\d\d) "
    r"context_first=(?P<first>\d{1,12}) context_last=(?P<last>\d{1,12}) " + _TAG + _DP
)
CONTEXT_ALARM = re.compile(_PREFIX + r"dspark accept ALARM \(context\): (?P<rest>.{1,4000}?)" + _DP)
GEOMETRY = re.compile(_PREFIX + r"dspark accept round=\d{1,15}: accepted-draft counts .{0,2000}$")
PATTERNS = (
    ("round", ROUND),
    ("summary", SUMMARY),
    ("startup", STARTUP),
    ("alarm", ALARM),
    ("context_alarm", CONTEXT_ALARM),
    ("probe", PROBE),
    ("host_cost", HOST_COST),
    ("request", REQUEST),
    ("geometry", GEOMETRY),
)


@dataclass(frozen=True)
class Line:
    """One trusted line of the plugin's: its kind, its fields, and where it was read."""

    kind: str
    fields: dict[str, str]
    file: str
    number: int
    time: str | None  # the timestamp of the prefix, where it carries one

    @property
    def dp(self) -> int | None:
        """The attention-DP group the line belongs to (``None``: no DP attention)."""
        dp = self.fields.get("dp")
        return None if dp is None else int(dp)


_TIME = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")


def classify(text: str, file: str, number: int) -> tuple[str, Line | None]:
    """``("line", Line)`` for a trusted line of the plugin's; else ``(why, None)``: ``"quoted"`` (its
    text follows a quote or a long prefix: a request's text, not the plugin's line), or
    ``"malformed"`` (a marker after a trusted prefix, in no line's exact form), or ``"other"``."""
    text = text.rstrip()
    start = min((i for i in (text.find(m) for m in MARKERS) if i >= 0), default=-1)
    if start < 0:
        return "other", None
    prefix = text[:start]
    if start > MAX_PREFIX or "'" in prefix or '"' in prefix:
        return "quoted", None
    for kind, pattern in PATTERNS:
        found = pattern.match(text)
        if found is not None and found.start("prefix") == 0 and len(found.group("prefix")) == start:
            fields = {k: v for k, v in found.groupdict().items() if v is not None and k != "prefix"}
            stamp = _TIME.search(prefix)
            return "line", Line(kind, fields, file, number, None if stamp is None else stamp.group(0))
    return "malformed", None


__all__ = ["MAX_LINE_BYTES", "MAX_PREFIX", "MARKERS", "PATTERNS", "ROUND", "Line", "classify"]
