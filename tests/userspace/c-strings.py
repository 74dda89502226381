#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Print the strings of C source files as the compiler sees them, one a line.

Adjacent string literals are joined ("a: " "b" is "a: b"), string macros
defined in the files are expanded (#define FIX "load ..." then "x: " FIX),
the inttypes.h format macros become their conversion (PRIu64 -> "lu"), and
escapes are decoded (a newline prints as a space). So a message that the
source writes in pieces prints whole, and a document can be checked for
quoting messages that still exist (tests/userspace/test_troubleshooting.sh).

Usage: c-strings.py FILE.c...
"""
import re
import sys

ESCAPES = {"n": " ", "t": "\t", '"': '"', "'": "'", "\\": "\\", "?": "?", "0": ""}


def tokens(text):
    """String literals (as ("s", value)), identifiers and other characters."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            i = text.find("*/", i + 2)
            i = n if i < 0 else i + 2
        elif c == '"':
            j, value = i + 1, []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n:
                    value.append(ESCAPES.get(text[j + 1], text[j + 1]))
                    j += 2
                else:
                    value.append(text[j])
                    j += 1
            yield ("s", "".join(value))
            i = j + 1
        elif c == "'":
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            yield ("o", text[i:j + 1])
            i = j + 1
        elif c.isalpha() or c == "_":
            m = re.match(r"[A-Za-z_]\w*", text[i:])
            yield ("i", m.group(0))
            i += m.end()
        elif c.isspace():
            i += 1
        else:
            yield ("o", c)
            i += 1


def joined(toks, macros):
    """Runs of adjacent strings (and string macros), each run one string."""
    run = None
    for kind, value in toks:
        if kind == "i" and value in macros:
            kind, value = "s", macros[value]
        elif kind == "i" and re.fullmatch(r"PRI[diouxX](8|16|32|64|MAX|PTR)", value):
            kind, value = "s", "l" + value[3]
        if kind == "s":
            run = value if run is None else run + value
        else:
            if run is not None:
                yield run
            run = None
    if run is not None:
        yield run


def main(paths):
    sources = [open(p, encoding="utf-8", errors="replace").read() for p in paths]
    macros = {}
    # String macros: #define NAME followed by strings (or other such macros).
    for _ in range(3):  # macros made of macros
        for text in sources:
            for m in re.finditer(r"^#\s*define\s+(\w+)[ \t]+((?:.*\\\n)*.*)$", text, re.M):
                body = list(tokens(m.group(2).replace("\\\n", " ")))
                if body and all(k == "s" or (k == "i" and v in macros) for k, v in body):
                    macros[m.group(1)] = "".join(v if k == "s" else macros[v] for k, v in body)
    for text in sources:
        # Preprocessor lines are not code: drop them (their strings are macros).
        code = re.sub(r"^#.*(?:\\\n.*)*$", "", text, flags=re.M)
        for s in joined(tokens(code), macros):
            print(s)


if __name__ == "__main__":
    main(sys.argv[1:])
