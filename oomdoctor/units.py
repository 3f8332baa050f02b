"""The one place where printed sizes become bytes and bytes become printed sizes."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

# Binary units as PyTorch prints them (format_size), plus the spellings other stacks use.
# MPS's early "KB/MB/GB" are binary too (its own format_size divided by 1024), so are nvidia-smi's "MiB".
_BINARY = {
    "": 1, "b": 1, "byte": 1, "bytes": 1,
    "k": 1024, "kb": 1024, "kib": 1024,
    "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1024**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1024**4, "tib": 1024**4,
    "p": 1024**5, "pib": 1024**5, "pb": 1024**5,
}
# Decimal units, for the few producers that really print powers of ten (TensorFlow's "G" in BFC dumps is binary).
_DECIMAL = {"kB": 1000, "KB_SI": 1000}

GIB = 1024**3
MIB = 1024**2
KIB = 1024

# 2**64 bytes prints as "17179869184.00 GiB": NVML's NVML_VALUE_NOT_AVAILABLE placeholder, not a size.
NVML_PLACEHOLDER_BYTES = 2**64
IMPLAUSIBLE_BYTES = 2**50  # 1 PiB: no accelerator of any era reports this much memory


class UnitError(ValueError):
    """A size string that cannot be converted."""


def to_bytes(value: str | float | int, unit: str = "") -> int:
    """Convert a printed figure and its unit ("20.00", "MiB") to whole bytes, exactly (no float error)."""
    try:
        number = Decimal(str(value).replace(",", ""))
    except InvalidOperation as exc:
        raise UnitError(f"not a number: {value!r}") from exc
    key = unit.strip()
    factor = _DECIMAL.get(key) or _BINARY.get(key.lower())
    if factor is None:
        raise UnitError(f"unknown size unit: {unit!r}")
    return int((number * factor).to_integral_value())


def parse_size(text: str) -> int:
    """Convert "20.00 MiB", "512 bytes", "1.5GB" or "1234" to bytes."""
    text = text.strip()
    i = len(text)
    while i and not (text[i - 1].isdigit() or text[i - 1] == "."):
        i -= 1
    return to_bytes(text[:i], text[i:])


def format_bytes(n: int | None) -> str:
    """Render bytes the way PyTorch's format_size does (two decimals, binary units)."""
    if n is None:
        return "?"
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n <= 1024:
        return f"{sign}{n} bytes"
    if n <= MIB:
        return f"{sign}{n / KIB:.2f} KiB"
    if n <= GIB:
        return f"{sign}{n / MIB:.2f} MiB"
    return f"{sign}{n / GIB:.2f} GiB"


def gib(n: int | None) -> float | None:
    """Bytes as GiB, for messages and charts."""
    return None if n is None else n / GIB
