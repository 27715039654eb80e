"""What a model's tokens cost, from a data file a user can update (prices change; regen's release
should not have to).

regen/generators/prices.yaml ships the known prices; ~/.config/regen/prices.yaml, or the file
$REGEN_PRICES names, adds models or replaces them (same layout). `--max-usd` is enforced from
these figures: `worst_case_usd` bounds what one call can cost before it is made.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError

BUILTIN = Path(__file__).with_name("prices.yaml")
FIELDS = ("input", "output", "cache_write", "cache_read")
CHARS_PER_TOKEN = 3.0   # fewer characters per token than any tokenizer gives for code and prose


def user_file() -> Path | None:
    """The user's price file: $REGEN_PRICES (must exist), else ~/.config/regen/prices.yaml if any."""
    env = os.environ.get("REGEN_PRICES")
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise InputError("file not found (named by REGEN_PRICES)", file=str(path))
        return path
    home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "regen" / "prices.yaml"
    return home if home.is_file() else None


def _read(path: Path) -> dict[str, dict[str, float]]:
    from ..yamlio import read_mapping

    data = read_mapping(path)
    models = data.get("models")
    if not isinstance(models, dict):
        raise InputError("expected a mapping `models:` of model id -> {input, output, cache_write, "
                         "cache_read} in USD per million tokens", file=str(path), field="models")
    out = {}
    for model, row in models.items():
        where = f"models.{model}"
        if not isinstance(row, dict):
            raise InputError("expected a mapping {input, output, cache_write, cache_read}",
                             file=str(path), field=where)
        unknown = set(row) - set(FIELDS)
        if unknown:
            raise InputError(f"unknown field(s) {', '.join(sorted(unknown))}; expected "
                             f"{', '.join(FIELDS)}", file=str(path), field=where)
        for name in ("input", "output"):
            if name not in row:
                raise InputError(f"missing `{name}` (USD per million tokens)", file=str(path),
                                 field=where)
        clean = {}
        for name, value in row.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InputError(f"expected a non-negative number of USD per million tokens, got "
                                 f"{value!r}", file=str(path), field=f"{where}.{name}")
            clean[name] = float(value)
        clean.setdefault("cache_write", clean["input"] * 1.25)
        clean.setdefault("cache_read", clean["input"] * 0.1)
        out[str(model)] = clean
    return out


def load_prices() -> dict[str, dict[str, float]]:
    """The built-in prices, overridden model by model by the user's file."""
    prices = _read(BUILTIN)
    extra = user_file()
    if extra is not None:
        prices.update(_read(extra))
    return prices


def cost_usd(prices: dict | None, input_tokens: int, output_tokens: int, cache_write: int,
             cache_read: int) -> float | None:
    """What a call's usage cost (None when the price is unknown)."""
    if not prices:
        return None
    return round((input_tokens * prices["input"] + output_tokens * prices["output"]
                  + cache_write * prices.get("cache_write", prices["input"] * 1.25)
                  + cache_read * prices.get("cache_read", prices["input"] * 0.1)) / 1e6, 6)


def prompt_tokens_at_most(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 16


def worst_case_usd(prices: dict, prompt_chars: int, max_output_tokens: int) -> float:
    """The most one call can cost: every prompt token at the dearest input rate (a cache write
    costs more than plain input) and every allowed output token."""
    per_input = max(prices["input"], prices.get("cache_write", 0.0))
    return (int(prompt_chars / CHARS_PER_TOKEN + 16) * per_input
            + max_output_tokens * prices["output"]) / 1e6


def affordable_output_tokens(prices: dict, prompt_chars: int, usd_left: float) -> int:
    """How many output tokens a call can be allowed so that worst_case_usd stays within usd_left."""
    per_input = max(prices["input"], prices.get("cache_write", 0.0))
    left = usd_left * 1e6 - int(prompt_chars / CHARS_PER_TOKEN + 16) * per_input
    return max(0, int(left / prices["output"])) if prices["output"] > 0 else 10**9
