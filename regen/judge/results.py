"""Typed verdicts inside the judge. The JSON that crosses the pipe and goes into records keeps its
format ({"ok", "max_abs", "max_rel", "guard", "reason"}); these convert at that boundary."""

from __future__ import annotations

from dataclasses import dataclass

from .guards import registered


@dataclass(frozen=True)
class Rejection:
    """Why a candidate was refused: a registered guard and a reason."""

    guard: str
    reason: str

    def __post_init__(self):
        registered(self.guard)

    def tagged(self) -> str:
        """The reason as every failure reads: it ends with the guard's name."""
        return f"{self.reason} [guard: {self.guard}]"

    def to_json(self) -> dict:
        return {"guard": self.guard, "reason": self.reason}

    @classmethod
    def from_json(cls, data: dict) -> "Rejection":
        return cls(data["guard"], data["reason"])


@dataclass(frozen=True)
class CaseResult:
    """One verification of one case and seed: passed with its worst errors, or rejected (the
    worst errors seen before the rejection kept where there were any)."""

    ok: bool
    max_abs: float | None = None
    max_rel: float | None = None
    rejection: Rejection | None = None

    @classmethod
    def passed(cls, max_abs: float = 0.0, max_rel: float = 0.0) -> "CaseResult":
        return cls(True, max_abs, max_rel)

    @classmethod
    def failed(cls, guard: str, reason: str, max_abs: float | None = None,
               max_rel: float | None = None) -> "CaseResult":
        return cls(False, max_abs, max_rel, Rejection(guard, reason))

    @property
    def guard(self) -> str | None:
        return self.rejection.guard if self.rejection else None

    @property
    def reason(self) -> str | None:
        return self.rejection.reason if self.rejection else None

    def to_json(self) -> dict:
        out: dict = {"ok": self.ok}
        if self.max_abs is not None:
            out["max_abs"], out["max_rel"] = self.max_abs, self.max_rel
        if self.rejection is not None:
            out.update(self.rejection.to_json())
        return out

    @classmethod
    def from_json(cls, data: dict) -> "CaseResult":
        rejection = Rejection(data["guard"], data.get("reason") or "") \
            if data.get("guard") and not data.get("ok", True) else None
        return cls(bool(data.get("ok", True)), data.get("max_abs"), data.get("max_rel"), rejection)
