"""Errors a user can act on. Anything raised as InputError is printed as one clear line, exit code 2."""

from __future__ import annotations


class RegenError(Exception):
    """Base class for errors regen reports without a traceback."""

    exit_code = 1


class InputError(RegenError):
    """Malformed or missing user input: names the file, the field and what was expected."""

    exit_code = 2

    def __init__(self, message: str, file: str | None = None, field: str | None = None,
                 line: int | None = None):
        self.file, self.field, self.line, self.detail = file, field, line, message
        where = file or ""
        if line is not None:
            where += f":{line}"
        if field:
            where += f" [{field}]" if where else field
        super().__init__(f"{where}: {message}" if where else message)


class LockedError(RegenError):
    """`--locked` and something would need a generator."""

    exit_code = 3


def pydantic_to_input_error(exc, file: str, prefix: str = "") -> InputError:
    """Turn a pydantic ValidationError into one InputError listing every bad field."""
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        if prefix:
            loc = f"{prefix}.{loc}" if loc else prefix
        problems.append(f"{loc}: {err.get('msg')}")
    first = exc.errors()[0] if exc.errors() else {}
    field = ".".join(str(p) for p in first.get("loc", ()))
    if prefix:
        field = f"{prefix}.{field}" if field else prefix
    msg = problems[0].split(": ", 1)[-1] if len(problems) == 1 else "; ".join(problems)
    return InputError(msg, file=file, field=field if len(problems) == 1 else None)
