"""Shared row plumbing for the source parsers: CSV reading with line numbers and quarantine records."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ParseResult:
    """What one parser produced: measurement rows, quarantined rows with reasons, and rows read."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    quarantine: list[dict[str, Any]] = field(default_factory=list)
    n_read: int = 0

    def extend(self, other: ParseResult) -> None:
        self.rows.extend(other.rows)
        self.quarantine.extend(other.quarantine)
        self.n_read += other.n_read


def quarantined(source: str, source_file: str, row_key: str, reason: str, raw: Any) -> dict[str, Any]:
    """A quarantine record; `raw` keeps the original row so nothing is lost."""
    return {
        "source": source,
        "source_file": source_file,
        "row_key": row_key,
        "reason": reason,
        "raw": json.dumps(raw, default=str, ensure_ascii=False),
    }


def read_csv_rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and (line number, fields) of every non-blank data row; a file without a header is an error."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise ValueError(f"{path}: empty file, no CSV header") from None
        rows = [(reader.line_num, fields) for fields in reader if any(f.strip() for f in fields)]
    return header, rows


def row_problem(header: list[str], fields: list[str], missing_columns: list[str]) -> str | None:
    """Why a CSV row cannot be read as a record: a required column absent from the file, or a short row."""
    if missing_columns:
        return f"missing column: {missing_columns[0]}"
    if len(fields) != len(header):
        return f"truncated row: {len(fields)} of {len(header)} fields"
    return None


def workload(name: str, model_source: str, reparameterized: bool = False) -> dict[str, Any]:
    """The workload columns every source shares: name as spelled, join key, family label and CNN flag.

    reparameterized: the source ran the network's re-parameterised inference form; an architecture that has one
    gets REPARAM_SUFFIX on its key (the name as spelled stays).
    """
    from .models import REPARAM_SUFFIX, is_cnn, is_reparameterizable, model_family, model_key

    family = model_family(name)
    key = model_key(name)
    if reparameterized and is_reparameterizable(key):
        key += REPARAM_SUFFIX
    return {"model": name, "model_key": key, "model_source": model_source, "family": family,
            "is_cnn": is_cnn(family)}


def to_float(text: Any) -> float | None:
    """Parse a number; None for anything that is not a finite-looking number (caller names the field)."""
    if text is None:
        return None
    try:
        value = float(str(text).strip())
    except ValueError:
        return None
    return value if value == value else None  # NaN -> None
