"""Byte sizes as people write them ('256MB', '2T', '1.5k') and as messages print them ('1.4 GB'): one unit table,
powers of 1024 both ways. Imports nothing heavy (the CLI and the packer use it)."""

from __future__ import annotations

import re

from .errors import ConfigError

UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "G": 1 << 30, "GB": 1 << 30,
         "T": 1 << 40, "TB": 1 << 40}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")


def parse_bytes(text: str | int | None, what: str = "size") -> int | None:
    """'500GB', '2T', '1.5k', '1048576' or an int -> bytes (K/KB, M/MB, G/GB, T/TB are powers of 1024); None stays
    None. `what` names the option in the refusal (e.g. '--cache-limit')."""
    if text is None or (isinstance(text, int) and not isinstance(text, bool)):
        return text
    m = _SIZE.fullmatch(str(text))
    unit = m.group(2).upper() if m else ""
    if m is None or unit not in UNITS or float(m.group(1)) <= 0:
        raise ConfigError(f"{what} {text!r}: expected a size such as 500GB, 256MB or a number of bytes "
                          "(K, M, G, T are powers of 1024)")
    return int(float(m.group(1)) * UNITS[unit])


def human_bytes(n: float) -> str:
    """A byte count for messages and summaries: '1.4 GB' (KB, MB, GB are powers of 1024)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1024
    return str(n)
