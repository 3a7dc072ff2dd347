"""Text that the database can store (no NUL, which Postgres refuses, no lone surrogates), and
names made safe to put in a line of text."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator


def text_problem(value: str) -> str | None:
    """Why a string cannot be stored, in words, or None when it can."""
    if "\x00" in value:
        return "contains a NUL character (\\u0000), which the database cannot store; remove it"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate, which is not valid text; send valid UTF-8"
    return None


def clean_text(value: str) -> str:
    """The string itself if the database can store it; raises ValueError otherwise."""
    problem = text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def clean_tree(value: Any, where: str = "value") -> Any:
    """Check every string (keys too) inside nested dicts and lists; raises ValueError."""
    if isinstance(value, str):
        problem = text_problem(value)
        if problem:
            raise ValueError(f"{where} {problem}")
    elif isinstance(value, dict):
        for key, item in value.items():
            clean_tree(key, f"{where} key")
            clean_tree(item, f"{where}.{key}" if isinstance(key, str) else where)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            clean_tree(item, f"{where}[{i}]")
    return value


CleanStr = Annotated[str, AfterValidator(clean_text)]


def inline(value: object) -> str:
    """A name made safe to put in a line of text: control, format and line-break characters
    (newlines, bidi overrides, zero-width joiners) are shown as escapes like \\n or \\u202e."""
    text = str(value)
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable() or ch == " ":
            out.append(ch)
        elif ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return "".join(out)


def link_problem(link: str) -> str | None:
    """Why a link may not be shown as one, in words, or None for an http(s) URL with a host or
    a path on this server. Browsers read `//host/x` and `/\\host/x` (a backslash is a slash to
    them) as links to another site, so a "path" must start with exactly one slash and hold none."""
    if any(ord(c) < 32 or c == "\x7f" for c in link):
        return "must not contain control characters"
    if link.startswith("/"):
        if link.startswith(("//", "/\\")) or "\\" in link:
            return (
                "a path on this server starts with a single / and holds no backslash "
                "(//host and /\\host lead to another site); give an http(s) URL for one"
            )
        return None
    scheme, sep, rest = link.partition("://")
    if scheme.lower() in ("http", "https") and sep and rest and rest[0] not in "/\\?#":
        return None
    return "must be an http(s) URL (e.g. https://wiki.example/rollout) or a path such as /plan"
