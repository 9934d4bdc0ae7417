"""Cells that are safe to open: every text that reaches an exported table goes through one of these two.

* `md_cell`: a Markdown table cell that renders as one cell everywhere: `|` escaped (GFM's `\\|`), line breaks
  folded, and nothing a renderer would take as HTML (`<` before a tag name, `&` before an entity) or as a link
  or image (`](`). "n < 5" and "[0.2, 0.7]" read as before.
* `csv_cell`: a CSV cell a spreadsheet shows as text, never evaluates: a text starting with = + - @ or a tab or
  carriage return gets a leading apostrophe (OWASP's CSV-injection rule); numbers, also negative ones, stay
  numbers.
"""
from __future__ import annotations

import re

_TAG = re.compile(r"<(?=[A-Za-z/!?])")
_ENTITY = re.compile(r"&(?=[A-Za-z#])")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def md_cell(value) -> str:
    text = " ".join(str(value).splitlines())
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    text = _ENTITY.sub("&amp;", _TAG.sub("&lt;", text))
    return text.replace("](", "]\\(")


def csv_cell(value):
    if not isinstance(value, str) or not value.startswith(_FORMULA):
        return value
    try:
        float(value)
        return value  # "-0.31", "+2": numbers, not formulas
    except ValueError:
        return "'" + value
